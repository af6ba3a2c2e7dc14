"""The one method registry (compare/crosscheck/methods.py): kinds, lineages, options that apply."""

from __future__ import annotations

import json

import pytest
from builders import make_instance, option_dict
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.methods import (
    KINDS,
    METHODS,
    MILP_BACKENDS,
    MILP_RTOL,
    Method,
    method,
    run_method,
)
from compare.crosscheck.verify import parse_methods
from piper_cli import app
from piper_ilp.cost import TPS_RTOL
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.instance import instance_to_dict
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Status

runner = CliRunner()
INST = random_instance("chain", 3, seed=0, memory="loose")


def test_every_method_is_registered_once_with_its_kind():
    assert list(METHODS) == [
        "dp",
        "path",
        "columns",
        *MILP_BACKENDS,
        "compiled",
        "brute",
        "greedy",
        "2bw",
        "pipedream",
    ]
    assert {m.kind for m in METHODS.values()} == set(KINDS)
    assert METHODS["dp"].kind == "exact" and METHODS["brute"].kind == "oracle"
    assert METHODS["greedy"].kind == "heuristic" and not METHODS["greedy"].proves
    for b in MILP_BACKENDS:
        m = METHODS[b]
        assert (m.kind, m.lineage, m.rtol) == ("milp", "milp", MILP_RTOL) and m.proves
        assert {"time_limit", "threads", "write_model", "hint_from_dp", "force"} <= m.options
    # the greedy rule is the DP with another knapsack: not an independent proof of the DP
    assert METHODS["greedy"].lineage == METHODS["dp"].lineage
    # the compiled kernel is a second implementation of the DP's recurrence: no second proof
    assert METHODS["compiled"].lineage == METHODS["dp"].lineage
    assert len({METHODS[n].lineage for n in ("dp", "brute", MILP_BACKENDS[0])}) == 3
    assert METHODS["dp"].rtol == METHODS["brute"].rtol == TPS_RTOL == 1e-9
    assert {"knapsack", "max_ideals", "force"} <= METHODS["dp"].options
    # verify and the CLI take their names from here
    assert parse_methods(",".join(METHODS)) == tuple(METHODS)


def test_method_kind_is_checked():
    with pytest.raises(ValueError, match="kind"):
        Method("x", "fast", lambda i, r: None, frozenset(), "x", 1e-9, "")


@pytest.mark.parametrize(
    "name, option, value",
    [
        ("dp", "write_model", "m.lp"),
        ("dp", "threads", 2),
        ("greedy", "knapsack", "exact"),
        ("brute", "threads", 2),
        ("brute", "max_ideals", 10),
        (MILP_BACKENDS[0], "knapsack", "greedy"),
        (MILP_BACKENDS[0], "max_ideals", 10),
    ],
)
def test_an_option_that_does_not_apply_is_refused_in_one_line(name, option, value):
    with pytest.raises(InputError) as exc:
        run_method(INST, name, **{option: value})
    text = str(exc.value)
    assert "\n" not in text and f"option {option} does not apply to method {name}" in text


def test_options_left_at_none_or_false_count_as_not_given():
    sol = run_method(
        INST, "dp", time_limit=None, write_model=None, hint_from_dp=False, threads=None
    )
    assert sol.status is Status.OPTIMAL


def test_unknown_method():
    with pytest.raises(InputError, match="unknown method 'gurobi'; choose one of dp"):
        run_method(INST, "gurobi")
    with pytest.raises(InputError):
        method("gurobi")


def test_dp_greedy_and_brute_through_the_registry():
    dp = run_method(INST, "dp")
    brute = run_method(INST, "brute")
    greedy = run_method(INST, "greedy")
    assert dp.status is brute.status is Status.OPTIMAL
    assert dp.tps == pytest.approx(brute.tps, rel=1e-9)
    # Piper's rule gives a plan, never a proof, and never better than the optimum
    assert greedy.status is Status.FEASIBLE and greedy.tps >= brute.tps * (1 - 1e-9)
    assert run_method(INST, "dp", knapsack="greedy").tps == greedy.tps
    # restrictions reach the method
    capped = run_method(INST, "brute", Restrictions(max_d=1))
    assert all(st.d == 1 for st in capped.plan.stages)


def test_force_runs_past_the_size_guard():
    nine = random_instance("chain", 9, 1, memory="loose", t_values=(1,), K=2, N=2)
    with pytest.raises(SizeLimitError):
        run_method(nine, "brute")
    forced = run_method(nine, "brute", force=True)
    assert forced.status is Status.OPTIMAL
    assert forced.tps == pytest.approx(run_method(nine, "dp").tps, rel=1e-9)
    # the DP's guard is its number of successor-closed sets
    with pytest.raises(SizeLimitError):
        run_method(nine, "dp", max_ideals=5)
    assert run_method(nine, "dp", max_ideals=5, force=True).status is Status.OPTIMAL


def fan(width: int):
    """A source, ``width`` parallel nodes, a sink: graph pipelining's frontier is ``width``."""
    sink = width + 1
    edges = [(0, v, 1.0) for v in range(1, sink)] + [(v, sink, 1.0) for v in range(1, sink)]
    nodes = [
        (
            v,
            {
                "1": [
                    option_dict(
                        p=1.0,
                        a=1.0,
                        b=1.0,
                        sfw={u: 0.0 for u, x, _ in edges if x == v},
                        sbw={x: 0.0 for u, x, _ in edges if u == v},
                    )
                ]
            },
        )
        for v in range(sink + 1)
    ]
    return make_instance(nodes, edges, K=2, N=2, M=100.0)


def test_force_lifts_the_dp_s_frontier_guard_in_every_entry_point(tmp_path):
    # the DP's guards other than the set count (the frontier width here) say "pass --force":
    # the registry, and so solve and verify, must pass force on to the DP
    nine = fan(9)
    with pytest.raises(SizeLimitError, match="--force"):
        run_method(nine, "dp", mode=Mode("graph"))
    forced = run_method(nine, "dp", mode=Mode("graph"), force=True)
    assert forced.status is Status.OPTIMAL
    assert forced.value == pytest.approx(run_method(nine, "cpsat", mode=Mode("graph")).value)
    uniform = run_method(nine, "dp", Restrictions(uniform=True), mode=Mode("graph"), force=True)
    assert uniform.status is Status.OPTIMAL
    # the DP that makes a MILP's or path's hint is forced too
    for name in ("cpsat", "cbc"):
        hinted = run_method(nine, name, mode=Mode("graph"), hint_from_dp=True, force=True)
        assert hinted.value == pytest.approx(forced.value), name
    path = tmp_path / "fan9.json"
    path.write_text(json.dumps(instance_to_dict(nine)))
    r = runner.invoke(app, ["solve", str(path), "--pipeline", "graph"])
    assert r.exit_code == 2 and "--force" in r.output, r.output
    r = runner.invoke(app, ["solve", str(path), "--pipeline", "graph", "--force"])
    assert r.exit_code == 0 and "optimal" in r.output, r.output
    r = runner.invoke(
        app, ["verify", str(path), "--pipeline", "graph", "--methods", "dp,cpsat", "--force"]
    )
    assert r.exit_code == 0 and "match" in r.output, r.output


def test_milp_backend_through_the_registry():
    sol = run_method(INST, MILP_BACKENDS[0], time_limit=30.0, threads=1)
    assert sol.status is Status.OPTIMAL
    assert sol.tps == pytest.approx(run_method(INST, "brute").tps, rel=MILP_RTOL)
