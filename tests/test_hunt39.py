"""hunt39's findings on main 98bb4a0 (adversarial hunt, session 8), as regression tests: each
strict xfail until the owner's fix lands (then the mark goes and the test joins the tests of
what it guards)."""

from __future__ import annotations

import pytest

from compare.builders.generators import random_instance
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import InputError
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions


@pytest.mark.xfail(
    strict=True,
    reason="hunt39 N1 (owner verify39): --milp-hint is accepted when its only taker is path "
    "in a mode or under a restriction path refuses; path is then skipped and the hint ignored",
)
@pytest.mark.parametrize(
    "mode,restrictions",
    [(Mode("graph"), Restrictions()), (Mode(), Restrictions(uniform=True))],
    ids=["graph", "uniform"],
)
def test_milp_hint_whose_only_taker_path_refuses_is_refused(mode, restrictions):
    # 6165cf7 refuses --milp-hint "never accepted and then ignored" when no method takes a
    # hint; path takes one, but refuses graph pipelining and uniform degrees (path_refusal,
    # known before anything runs), so dp,path --milp-hint gives the hint to nobody and the
    # verdict is dp's single proof with milp_hint false
    inst = random_instance("fork-join", 5, 7)
    with pytest.raises(InputError, match="--milp-hint"):
        verify_instance(
            inst,
            ("dp", "path"),
            restrictions,
            greedy=False,
            milp_hint=True,
            mode=mode,
        )


@pytest.mark.xfail(
    strict=True,
    reason="hunt39 O1 (owner dp/solver.py, or docs/in-flight.md if schedule is meant): greedy "
    "mode plans under sec. 11's rule, though the greedy method, sweep's greedy variant and "
    "docs/in-flight.md refuse schedule",
)
def test_greedy_knapsack_refuses_the_schedule_rule_like_the_greedy_method():
    # docs/in-flight.md: "The heuristics (greedy, 2bw, pipedream, external planners) plan
    # under Piper's rule and refuse schedule"; run_method(..., "greedy") and sweep's greedy
    # row do, and solve_dp's own message for graph pipelining says greedy "applies only to
    # the default mode"; solve_dp(knapsack="greedy") under sequential/throughput/1f1b/schedule
    # runs instead (status feasible, a valid plan: Piper's rule at the schedule's y)
    from compare.crosscheck.methods import run_method
    from dp import solve_dp

    inst = random_instance("ties", 5, 3)
    schedule = Mode(in_flight="schedule")
    with pytest.raises(InputError, match="greedy"):
        run_method(inst, "greedy", mode=schedule)
    with pytest.raises(InputError, match="greedy"):
        solve_dp(inst, knapsack="greedy", mode=schedule)
