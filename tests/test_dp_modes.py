"""The DP in every mode (dp/modes.py: graph pipelining, batch time, gpipe; contract secs. 8-9)
against the exhaustive oracle, on hand-made cases, and its guards."""

from __future__ import annotations

import math

import pytest
from builders import fork_instance, make_instance, option_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from compare.builders.generators import random_instance
from compare.crosscheck.brute import brute_applies, solve_brute
from dp.ideals import enumerate_ideals, successor_masks
from dp.modes import frontier_width, frontiers, predecessor_masks, solve_modes
from dp.solver import solve_dp
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Status

FAMILIES = ("fork-join", "layered", "series-parallel", "skip", "chain", "numerics")
NON_DEFAULT = [m for m in ALL_MODES if not m.is_default]


make = make_instance


def tiny(k: int, seed: int):
    """The k-th tiny instance of the sweep: every family, 3-7 nodes, N and K in {4, 8}."""
    family = FAMILIES[k % len(FAMILIES)]
    n = 3 + (k // len(FAMILIES)) % 5
    N, K = (4, 8)[k % 2], (4, 8)[(k // 2) % 2]
    return random_instance(
        family, n, seed, t_values=(1, 2), options_per_t=(1, 2), K=K, N=N, memory="tight"
    )


def agree(inst, mode, restrictions=Restrictions()):
    if not brute_applies(inst):  # too many ordered partitions for the oracle
        return None
    ref = solve_brute(inst, restrictions, mode=mode)
    got = solve_dp(inst, restrictions, mode=mode)
    assert got.mode == mode and got.status == ref.status, (mode.label, got.status, ref.status)
    if ref.status is Status.OPTIMAL:
        assert math.isclose(got.value, ref.value, rel_tol=1e-9), (mode.label, got.value, ref.value)
        assert got.value == evaluate(inst, got.plan, mode).value
        if not mode.is_default:  # the mode DP reports the evaluator's value, and proves it
            assert got.bound == got.objective == got.value
    return ref.status


@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: m.label)
def test_agrees_with_brute_on_tiny_instances(mode):
    seen = set()
    for k in range(24):
        seen.add(agree(tiny(k, 100 + k), mode))
    assert Status.OPTIMAL in seen and Status.INFEASIBLE in seen


@pytest.mark.slow
@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: m.label)
def test_agrees_with_brute_sweep(mode):
    checked = [agree(tiny(k, 5000 + k), mode) for k in range(300)]
    assert sum(c is not None for c in checked) >= 280


def test_default_mode_through_the_mode_dp_matches_the_default_dp():
    for k in range(30):
        inst = tiny(k, 300 + k)
        a, b = solve_dp(inst), solve_modes(inst, mode=DEFAULT_MODE)
        assert a.status == b.status
        if a.status is Status.OPTIMAL:
            assert math.isclose(a.value, b.value, rel_tol=1e-9)


@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_pruning_does_not_change_the_value(mode):
    for k in range(12):
        inst = tiny(k, 700 + k)
        a, b = solve_modes(inst, mode=mode), solve_modes(inst, mode=mode, prune=False)
        assert a.status == b.status
        if a.status is Status.OPTIMAL:
            assert math.isclose(a.value, b.value, rel_tol=1e-9)


def test_graph_beats_sequential_where_the_contract_says():
    inst, r = fork_instance(), Restrictions(max_d=1)
    seq = solve_dp(inst, r)
    graph = solve_dp(inst, r, mode=Mode("graph"))
    assert seq.status is graph.status is Status.OPTIMAL
    assert graph.value == 1.0 and len(graph.plan.stages) == 4 and seq.value > graph.value
    assert graph.info["frontier_width"] == 2  # {1, 2} (node 3 is covered by both)
    assert solve_dp(inst, r, mode=Mode("graph", schedule="gpipe")).status is Status.INFEASIBLE
    bt = solve_dp(inst, r, mode=Mode("graph", "batch-time"))
    assert bt.status is Status.OPTIMAL and bt.value == 6.0 and bt.tps == 1.0
    for mode in ALL_MODES:
        agree(inst, mode, r)


def test_frontier_leaves_out_covered_nodes():
    # node 0 feeds every node of the chain 1 -> 2 -> 3 (like BERT's attention mask): of the
    # suffix {2, 3} only node 2 is remembered (0 -> 3 is covered by 0 -> 2 -> 3)
    o = option_dict
    edges = [(0, 1, 0.0), (0, 2, 0.0), (0, 3, 0.0), (1, 2, 0.0), (2, 3, 0.0)]
    succ = {0: [1, 2, 3], 1: [2], 2: [3], 3: []}
    pred = {0: [], 1: [0], 2: [0, 1], 3: [0, 2]}
    inst = make(
        [
            (v, {"1": [o(sfw={u: 0.0 for u in pred[v]}, sbw={x: 0.0 for x in succ[v]})]})
            for v in range(4)
        ],
        edges,
        K=4,
        N=4,
    )
    ideals = enumerate_ideals(inst, 100)
    fr = dict(
        zip(
            ideals,
            frontiers(ideals, successor_masks(inst), predecessor_masks(successor_masks(inst))),
        )
    )
    assert fr[0b1100] == [2] and fr[0b1110] == [1] and fr[0b1000] == [3]
    assert frontier_width(inst) == 1
    for mode in ALL_MODES:
        agree(inst, mode)


def test_towers_graph_pipelining_shortens_the_batch_time():
    from compare.bench.modes import measure, towers_instance

    inst = towers_instance(2, 2)
    graph, seq = (
        measure(inst, Mode("graph", "batch-time")),
        measure(inst, Mode("sequential", "batch-time")),
    )
    assert graph["ideals"] == 3**2 + 2 and graph["frontier_width"] == 2
    assert graph["status"] == seq["status"] == "optimal" and graph["value"] <= seq["value"] * (
        1 + 1e-12
    )


def test_greedy_knapsack_is_refused_in_other_modes():
    with pytest.raises(InputError, match="applies only to sequential/throughput/1f1b"):
        solve_dp(fork_instance(), knapsack="greedy", mode=Mode("graph"))


def test_guards_refuse_in_one_line_and_force_runs():
    inst = random_instance("fork-join", 7, 3, t_values=(1,), K=4, N=4)
    width = frontier_width(inst)
    assert width >= 2
    with pytest.raises(SizeLimitError, match="--force") as e:
        solve_modes(inst, mode=Mode("graph"), max_frontier=width - 1)
    assert "\n" not in str(e.value)
    with pytest.raises(SizeLimitError, match="labels.*--force"):
        solve_modes(inst, mode=Mode("graph", "batch-time"), max_labels=2, prune=False)
    assert solve_modes(inst, mode=Mode("graph"), max_frontier=width - 1, force=True).status in (
        Status.OPTIMAL,
        Status.INFEASIBLE,
    )


@settings(max_examples=25, deadline=None)
@given(
    family=st.sampled_from(FAMILIES),
    n=st.integers(3, 5),
    seed=st.integers(0, 10**6),
    mode=st.sampled_from(NON_DEFAULT),
    N=st.sampled_from((4, 8)),
)
def test_property_agrees_with_brute(family, n, seed, mode, N):
    inst = random_instance(
        family, n, seed, t_values=(1, 2), options_per_t=(1, 2), K=4, N=N, memory="tight"
    )
    agree(inst, mode)


def test_solve_modes_refuses_uniform_degrees_rather_than_return_a_plan_that_breaks_them():
    """review39 F5: solve_modes with Restrictions(uniform=True) made a plan with mixed
    degrees, caught only by checked_solution's InternalError; solve_dp solves uniform."""
    from compare.builders.generators import random_instance
    from dp.solver import solve_dp
    from piper_ilp.errors import InputError
    from piper_ilp.mode import Mode
    from piper_ilp.solution import Restrictions

    inst = random_instance("fork-join", 5, 7)
    with pytest.raises(InputError, match="uniform"):
        solve_modes(inst, Restrictions(uniform=True), mode=Mode("graph"))
    sol = solve_dp(inst, Restrictions(uniform=True), mode=Mode("graph"))
    if sol.plan is not None:
        assert len({(s.t, s.d) for s in sol.plan.stages}) == 1
