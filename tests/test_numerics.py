"""Verdicts that hold on every finite input (contract sec. 7): the ``numerics`` family
(magnitudes 1e-6..1e18, exact greedy ties, memory exactly at M or 1 ulp around it,
dummy options, huge edges) with exhaustive search as the referee.

The oracle itself is checked against the definition (every plan through the evaluator);
the DP, the MILP and the greedy rule are then held to the oracle.
"""

from __future__ import annotations

import json
import math

import pytest
from builders import enumerated_optimum, option_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import MILP_BACKENDS, MILP_RTOL, run_method
from compare.crosscheck.verify import verify_instance
from compare.experiments.campaign import make_specs, run_campaign, spec_instance
from piper_ilp.errors import InternalError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict
from piper_ilp.solution import Status

# modest example counts: every example runs the exhaustive search; derandomized so that a
# CI run is reproducible
CHEAP = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
COSTLY = settings(
    max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def numerics(draw, max_nodes: int = 5):
    """A numerics instance with drawn shape parameters."""
    return random_instance(
        "numerics",
        draw(st.integers(1, max_nodes)),
        draw(st.integers(0, 2**31 - 1)),
        t_values=draw(st.sampled_from([(1,), (1, 2), (1, 2, 4)])),
        options_per_t=draw(st.sampled_from([(1, 2), (2, 2), (1, 3)])),
        memory=draw(st.sampled_from(["tight", "tight", "loose", 0.3])),
        integer=draw(st.booleans()),
    )


def check_same_answer(sol, ref, rtol):
    """``sol`` proves what the oracle ``ref`` proved: the same status and, when optimal, a
    plan the evaluator accepts with the same TPS within ``rtol``."""
    assert sol.status is ref.status, (sol.status, ref.status, sol.message)
    if ref.status is Status.OPTIMAL:
        assert (
            sol.tps is not None
            and math.isclose(sol.tps, ref.tps, rel_tol=rtol, abs_tol=0.0)
            or sol.tps == ref.tps
        ), (sol.tps, ref.tps)


# ---- the referee ----


def check_brute_is_the_definition(inst):
    # the oracle's optimum is exactly the least evaluated TPS over every plan, whatever
    # the magnitudes: no tolerance at all
    best = enumerated_optimum(inst)
    sol = solve_brute(inst)
    if best is None:
        assert sol.status is Status.INFEASIBLE
    else:
        assert (
            sol.status is Status.OPTIMAL and sol.tps == best and sol.objective == best == sol.bound
        )


@CHEAP
@given(numerics(max_nodes=2))
def test_brute_is_the_definition(inst):
    check_brute_is_the_definition(inst)


@pytest.mark.slow
@settings(
    max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(numerics(max_nodes=3))
def test_brute_is_the_definition_on_three_nodes(inst):
    check_brute_is_the_definition(inst)


@CHEAP
@given(numerics())
def test_brute_value_is_its_plans_evaluated_tps_exactly(inst):
    sol = solve_brute(inst)
    if sol.status is Status.OPTIMAL:
        ev = evaluate(inst, sol.plan)
        assert ev.valid and ev.tps == sol.objective
        # every stage fits by the exact rule: fsum <= M, no slack
        assert all(s.memory <= inst.M for s in ev.stages)


def one_node(a, b, M, N=1):
    return instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": M,
            "bandwidth": 1.0,
            "mbsInBatch": N,
            "nodes": [{"id": 0, "TMPCs": {"1": [option_dict(p=1.0, a=a, b=b)]}}],
            "edges": [],
        }
    )


@pytest.mark.parametrize("a, b", [(1e18, 1e-6), (0.1, 0.2), (3e-6, 7e17), (2.0**60, 1.0)])
def test_memory_exactly_at_M_fits_and_one_ulp_below_does_not(a, b):
    m = math.fsum([a, b])  # y = 1: the exact memory of the only plan
    assert solve_brute(one_node(a, b, m)).status is Status.OPTIMAL
    assert solve_brute(one_node(a, b, math.nextafter(m, 0.0))).status is Status.INFEASIBLE
    assert solve_brute(one_node(a, b, math.nextafter(m, math.inf))).status is Status.OPTIMAL


# ---- the DP, the MILP and the greedy rule against the referee ----


@CHEAP
@given(numerics())
def test_dp_equals_brute_on_numerics(inst):
    check_same_answer(run_method(inst, "dp"), solve_brute(inst), rtol=1e-9)


@pytest.mark.slow
@COSTLY
@given(numerics(max_nodes=4))
def test_milp_proves_the_oracles_answer_or_nothing(inst):
    ref = solve_brute(inst)
    for backend in MILP_BACKENDS[:1]:
        try:
            sol = run_method(inst, backend, time_limit=20.0, threads=1)
        except InternalError as exc:  # a certification failure must be a status, not a crash
            raise AssertionError(f"{backend}: {exc}") from None
        if sol.status in (Status.OPTIMAL, Status.INFEASIBLE):
            check_same_answer(sol, ref, rtol=MILP_RTOL)
        if sol.plan is not None and ref.status is Status.OPTIMAL:
            assert sol.tps >= ref.tps * (1 - 1e-12)


@CHEAP
@given(numerics())
def test_greedy_plan_is_valid_and_never_better_than_the_optimum(inst):
    ref = solve_brute(inst)
    try:
        sol = run_method(inst, "greedy")
    except Exception as exc:
        if "at most two options" in str(exc) or "two options" in str(exc):
            return  # the rule is defined for at most two options per (node, t)
        raise
    # the rule finds no plan only where no plan fits at all (its step 2 is exact per stage)
    assert (sol.plan is None) == (ref.status is Status.INFEASIBLE)
    if sol.plan is not None:
        ev = evaluate(inst, sol.plan)
        assert ev.valid and ev.tps >= ref.tps


@COSTLY
@given(numerics())
def test_verify_dp_and_brute_match_on_numerics(inst):
    v = verify_instance(inst, ("dp", "brute"), greedy=False)
    assert v.verdict == "match", v.problems + v.errors


# ---- a numerics campaign runs (CI) ----


def test_numerics_is_a_campaign_family():
    specs = make_specs(6, 3, families=("numerics", "chain"), nodes=(2, 5))
    assert [s.family for s in specs] == ["numerics", "chain"] * 3
    for s in specs:
        inst = spec_instance(s)
        assert inst.source.startswith(f"random:{s.family}:") and len(inst.nodes) == s.n_nodes


def test_small_numerics_campaign(tmp_path):
    # the CI campaign of the numerics family: DP, CP-SAT and the oracle; no wrong proof, no crash
    summary = run_campaign(
        tmp_path / "c",
        60,
        11,
        families=("numerics",),
        nodes=(2, 5),
        methods=("dp", "cpsat", "brute"),
        workers=2,
        do_shrink=False,
        progress=False,
    )
    records = [
        json.loads(line) for line in (tmp_path / "c" / "results.jsonl").read_text().splitlines()
    ]
    assert len(records) == 60 and {r["family"] for r in records} == {"numerics"}
    assert summary["instances"] == 60 and set(summary["by_family"]) == {"numerics"}
    assert summary["verdicts"]["mismatch"] == 0 and summary["verdicts"]["error"] == 0, (
        summary["mismatches"] + summary["errors"]
    )
    assert summary["verdicts"]["match"] >= 40
    for r in records:
        assert r["statuses"]["brute"] in ("optimal", "infeasible")
        assert r["statuses"]["dp"] == r["statuses"]["brute"]
