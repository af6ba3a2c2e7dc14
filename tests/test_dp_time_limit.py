"""The DP's time limit (dp/deadline.py): stopped anywhere, its answer is honest - unknown,
or a valid plan with a proven lower bound (feasible) - and never "optimal".

The deadline is driven by a clock that ticks once per check, so "stopped after n checks"
is exact and every place the solver checks is reached by some n."""

from __future__ import annotations

import itertools

import pytest
from typer.testing import CliRunner

import dp.deadline
from compare.builders.generators import random_instance
from compare.crosscheck.verify import verify_instance
from dp import solve_dp
from dp.deadline import Deadline
from dp.modes import solve_modes
from piper_cli import app
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Status


@pytest.fixture
def ticking(monkeypatch):
    """A clock that advances one second per reading: time_limit=n stops at the n-th check."""
    counter = itertools.count()
    monkeypatch.setattr(dp.deadline, "clock", lambda: float(next(counter)))


def _stops(solve) -> list[int]:
    """Limits (in checks) to try: the first few, the last dozen (the search) and 20 between."""
    before = dp.deadline.clock()
    solve(10**9)
    total = int(dp.deadline.clock() - before)
    return sorted(
        set(range(5))
        | set(range(max(0, total - 12), total + 1))
        | set(range(0, total, max(1, total // 20)))
    )


def _check_stopped_answers(inst, mode=DEFAULT_MODE, **kw):
    full = solve_dp(inst, mode=mode, **kw)
    assert full.status == Status.OPTIMAL
    seen = set()
    for n in _stops(lambda n: solve_dp(inst, mode=mode, time_limit=n, **kw)):
        sol = solve_dp(inst, mode=mode, time_limit=n, **kw)
        seen.add(sol.status)
        if sol.status == Status.OPTIMAL:
            assert sol.value == full.value and "stopped" not in sol.info
            return seen
        assert sol.info.get("stopped"), sol.info
        assert "time limit of" in sol.message
        if sol.status == Status.UNKNOWN:
            assert sol.plan is None
            assert sol.bound is None or sol.bound <= full.value * (1 + 1e-12)
            continue
        assert sol.status == Status.FEASIBLE
        ev = evaluate(inst, sol.plan, mode)
        assert ev.valid and ev.value == sol.value >= full.value
        if sol.bound is not None:
            assert sol.bound <= full.value * (1 + 1e-12)
    raise AssertionError("the solve never finished")


@pytest.mark.parametrize("seed", range(6))
def test_a_stopped_dp_is_unknown_or_a_valid_plan_with_a_true_bound(ticking, seed):
    inst = random_instance(["layered", "fork-join", "skip"][seed % 3], 7, 500 + seed)
    loose = inst.with_settings(M=inst.M * 3)
    # chain_first=1: the chain bound runs first, so a stop in the full tables returns its plan
    seen = _check_stopped_answers(loose, chain_first=1)
    assert Status.UNKNOWN in seen and Status.FEASIBLE in seen


def test_a_stop_in_the_search_keeps_the_plan_in_hand_and_the_bound(ticking):
    inst = random_instance("layered", 8, 5, memory="loose")
    # a search of many decisions (a plan fitting at the least bottleneck of any plan
    # would end it at the first)
    assert solve_dp(inst).info["search_steps"] >= 3
    got = [solve_dp(inst, time_limit=n) for n in _stops(lambda n: solve_dp(inst, time_limit=n))]
    stopped_in_search = [s for s in got if s.info.get("stopped") == "in the search"]
    # before the first decision's plan nothing is in hand (unknown); after it, that plan and
    # the least threshold not yet ruled out
    feasible = [s for s in stopped_in_search if s.status == Status.FEASIBLE]
    assert feasible and all(s.bound is not None and s.bound <= s.value for s in feasible)
    assert all(
        s.status == Status.UNKNOWN and s.plan is None
        for s in stopped_in_search
        if all(s is not f for f in feasible)
    )
    values = [s.value for s in feasible]
    assert values == sorted(values, reverse=True)  # each decision's plan no worse than the last


@pytest.mark.parametrize(
    "mode", [m for m in ALL_MODES if not m.is_default][:4], ids=lambda m: m.label
)
def test_other_modes_stop_honestly(ticking, mode):
    inst = random_instance("fork-join", 5, 11, memory="loose")
    seen = _check_stopped_answers(inst, mode=mode)
    assert Status.UNKNOWN in seen or Status.FEASIBLE in seen


@pytest.mark.parametrize("in_flight", ["piper", "schedule"])
def test_a_dp_stopped_before_any_plan_keeps_the_work_bound(ticking, in_flight):
    # O4: the threshold DP (the default mode, and the in-flight rule 'schedule' it solves
    # too) stopped in its tables with no plan in hand returned no bound, though the work of
    # the nodes over the devices bounds every plan; verify showed '-' in the dp row
    inst = random_instance("layered", 7, 3, memory="loose")
    mode = DEFAULT_MODE.with_in_flight(in_flight)
    full = solve_dp(inst, mode=mode)
    assert full.status == Status.OPTIMAL
    stopped = [solve_dp(inst, mode=mode, time_limit=n) for n in range(3)]
    unknown = [s for s in stopped if s.status == Status.UNKNOWN]
    assert unknown and all(s.info.get("stopped") for s in unknown)
    assert all(s.bound is not None and 0 < s.bound <= full.value for s in unknown)
    assert not any(s.bound is not None for s in _greedy_stops(inst))


def _greedy_stops(inst):
    return [solve_dp(inst, knapsack="greedy", time_limit=n) for n in range(3)]


def test_a_stopped_uniform_dp_keeps_a_true_bound(ticking):
    # O4: stopped between its (t, d) pairs, or by a pair's run with no bound of its own,
    # the uniform DP said no bound; the pairs not yet solved are bounded by their
    # pair_lower_bound, the finished ones by their optimum
    uniform = Restrictions(uniform=True)
    inst = random_instance("layered", 6, 0, t_values=(1, 2), memory="loose")
    full = solve_dp(inst, uniform)
    assert full.status == Status.OPTIMAL
    stops = _stops(lambda n: solve_dp(inst, uniform, time_limit=n))
    got = [solve_dp(inst, uniform, time_limit=n) for n in stops]
    stopped = [s for s in got if s.status != Status.OPTIMAL]
    assert {s.status for s in stopped} == {Status.UNKNOWN, Status.FEASIBLE}
    for s in stopped:
        assert s.bound is not None and 0 < s.bound <= full.value * (1 + 1e-12), s.message
        if s.plan is not None:
            assert s.bound <= s.value
    greedy = solve_dp(inst, uniform, knapsack="greedy", time_limit=stops[len(stops) // 2])
    assert greedy.bound is None  # Piper's rule proves nothing, under --uniform too


def test_greedy_mode_stopped_is_never_a_bound(ticking):
    inst = random_instance("chain", 6, 2, memory="loose")
    for n in _stops(lambda n: solve_dp(inst, knapsack="greedy", time_limit=n)):
        sol = solve_dp(inst, knapsack="greedy", time_limit=n)
        assert sol.status in (Status.UNKNOWN, Status.FEASIBLE) and sol.bound is None
        if "stopped" not in sol.info:
            break
    else:
        raise AssertionError("greedy never finished")


def test_time_limit_zero_from_the_cli_is_unknown_with_exit_3(inputs_dir):
    r = CliRunner().invoke(
        app, ["solve", str(inputs_dir / "small.json"), "--time-limit", "0", "--json"]
    )
    assert r.exit_code == 3, r.output
    assert '"status": "unknown"' in r.output and "time limit of 0 s reached" in r.output


@pytest.mark.parametrize("flags", [["--uniform"], ["--in-flight", "schedule"]])
def test_verify_shows_a_stopped_dps_bound(inputs_dir, flags):
    # O4: the dp row's bound column said '-' for a DP stopped in these modes
    path = str(inputs_dir / "small.json")
    args = ["verify", path, *flags, "--methods", "dp", "--no-greedy", "--time-limit", "0"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 3, r.output  # inconclusive
    row = next(line.split() for line in r.output.splitlines() if line.startswith("dp "))
    assert row[1] == "unknown" and row[2] == "-", row
    uniform = "--uniform" in flags
    mode = DEFAULT_MODE.with_in_flight("piper" if uniform else "schedule")
    full = solve_dp(load_instance(path), Restrictions(uniform=uniform), mode=mode)
    assert full.status == Status.OPTIMAL
    assert 0 < float(row[3]) <= full.value


def test_verify_with_a_stopped_dp_is_no_match_and_no_mismatch():
    inst = random_instance("chain", 4, 1, memory="loose")
    v = verify_instance(inst, ("dp", "brute"), time_limit=0.0, greedy=False)
    assert v.verdict == "single-proof" and v.proofs == ["brute"] and not v.problems
    assert v.results["dp"].status in ("unknown", "feasible")


def test_a_negative_or_nan_time_limit_is_refused():
    inst = random_instance("chain", 2, 0, memory="loose")
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(Exception, match="time limit"):
            solve_dp(inst, time_limit=bad)


def _stepping_clock():
    """A clock for :class:`dp.deadline.Deadline` that advances one second per reading, and
    the counter of its readings."""
    counter = itertools.count()
    return (lambda: float(next(counter))), counter


@pytest.mark.parametrize(
    "family, seed, mode_label",
    [
        ("layered", 31, "graph/throughput/1f1b"),  # the third guess has the optimum
        ("layered", 9, "sequential/batch-time/gpipe"),  # no guess has it
    ],
)
def test_a_dp_stopped_in_a_later_guess_keeps_the_bound_the_earlier_guesses_proved(
    family, seed, mode_label
):
    # O1: a run at a guessed bound that ends with no plan proves the optimum above the guess;
    # a stop in a later run (a guess or the last one) used to return no bound at all
    inst = random_instance(family, 5 + seed % 3, seed, memory="tight", t_values=(1, 2))
    mode = Mode.parse(mode_label)
    clock, counter = _stepping_clock()
    full = solve_modes(inst, mode=mode, deadline=Deadline(10**9, clock=clock))
    total = next(counter)  # readings of the clock in the whole solve
    assert full.status == Status.OPTIMAL and len(full.info["guesses"]) >= 2
    later = 0
    for n in range(total + 1):
        clock, _ = _stepping_clock()
        sol = solve_modes(inst, mode=mode, deadline=Deadline(n, clock=clock))
        if not sol.info.get("stopped"):
            assert sol.status == Status.OPTIMAL and sol.value == full.value
            continue
        assert sol.status in (Status.UNKNOWN, Status.FEASIBLE)
        # every stopped answer keeps a true lower bound: at least the work bound W / K
        assert sol.bound is not None and sol.bound <= full.value
        tried = sol.info.get("guesses", [])
        if len(tried) >= 2:
            # stopped after the guess tried[-2] ended with no plan (the one before the run
            # that was stopped): the optimum is above it, and the bound says so
            later += 1
            assert sol.bound >= tried[-2], (n, sol.bound, tried)
    assert later
