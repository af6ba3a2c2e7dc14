"""The exhaustive oracle (compare/crosscheck/brute.py) on cases whose optimum is derived by hand,
and against an even more naive enumeration checked by the evaluator."""

from __future__ import annotations

import math

import pytest
from builders import every_plan, make_instance, option_dict

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import MAX_NODES, brute_applies, count_partitions, solve_brute
from piper_ilp.errors import SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import ALL_MODES, Mode
from piper_ilp.solution import Restrictions, Status

opt = option_dict


make = make_instance


def test_single_node_data_parallel_with_resync():
    # one node, p = 4, w = 1, K = N = 2, B = 1.
    #   d = 1: TPS = 4.
    #   d = 2: TPS = p/d + 4 (d-1) w / (d N) / B = 2 + 4*1*1/(2*2) = 3.   -> optimum 3
    inst = make([(5, {"1": [opt(p=4.0, w=1.0)]})])
    sol = solve_brute(inst)
    assert sol.status is Status.OPTIMAL and sol.method == "brute"
    assert (
        sol.tps == pytest.approx(3.0)
        and sol.objective == pytest.approx(3.0)
        and sol.bound == sol.objective
    )
    (st,) = sol.plan.stages
    assert (st.nodes, st.d, st.t, dict(st.options)) == ((5,), 2, 1, {5: "vanilla"})
    # with d capped at 1 (no data parallelism) only the first plan is left: 4
    assert solve_brute(inst, Restrictions(max_d=1)).tps == pytest.approx(4.0)


def chain2(ids=(10, -3)):
    u, v = ids

    def van(peer, side):
        return opt("vanilla", p=2.0, a=1.0, **{side: {peer: 0.0}})

    def rec(peer, side):
        return opt("activation recomp", p=3.0, a=0.5, **{side: {peer: 0.0}})

    return make(
        [(u, {"1": [van(v, "sbw"), rec(v, "sbw")]}), (v, {"1": [van(u, "sfw"), rec(u, "sfw")]})],
        edges=[(u, v, 1.0)],
        K=2,
        N=2,
        M=1.5,
    )


def test_memory_forces_a_mix_of_options():
    # chain u -> v (c = 1), K = N = 2, B = 1, M = 1.5; vanilla p = 2, a = 1; recompute p = 3,
    # a = 0.5. One stage, d = 2 (y = 1): both vanilla need 2 > 1.5; one of each needs 1.5:
    # TPS (2 + 3)/2 = 2.5. One stage, d = 1: at best one of each, TPS 5. Two stages (d = 1 each,
    # first one y = 2): first stage needs recompute (a*y = 1), TPS 3 + 2*c = 5. -> optimum 2.5,
    # one stage with d = 2.
    inst = chain2()
    sol = solve_brute(inst)
    assert sol.tps == pytest.approx(2.5)
    (st,) = sol.plan.stages
    assert st.d == 2 and sorted(st.options.values()) == ["activation recomp", "vanilla"]
    # without recomputation nothing fits: every stage with either node needs a*y >= 1... and
    # one stage needs 2 > 1.5, two stages put y = 2 on the first one (2 > 1.5)
    assert solve_brute(inst, Restrictions.from_flags(no_recompute=True)).status is Status.INFEASIBLE


def test_two_stages_follow_the_edge_direction():
    # chain 7 -> 3 with no traffic, p = 2 and w = 1 each, N = K = 2, B = 1:
    # one stage d = 1: 4; one stage d = 2: 4/2 + 2 nodes * 4*1*1/(2*2) = 4;
    # two stages 7 | 3 (d = 1 each, sum d = 2 <= N): max(2, 2) = 2. The order 3 | 7 would break the
    # edge.
    inst = make(
        [
            (7, {"1": [opt(p=2.0, w=1.0, sbw={3: 0.0})]}),
            (3, {"1": [opt(p=2.0, w=1.0, sfw={7: 0.0})]}),
        ],
        edges=[(7, 3, 0.0)],
        K=2,
        N=2,
    )
    sol = solve_brute(inst)
    assert sol.tps == pytest.approx(2.0)
    assert [s.nodes for s in sol.plan.stages] == [(7,), (3,)]
    # K = 1 or N = 1: a single stage with d = 1 only: 4
    assert solve_brute(inst.with_settings(K=1)).tps == pytest.approx(4.0)
    assert solve_brute(inst.with_settings(N=1)).tps == pytest.approx(4.0)


def test_tensor_parallel_and_its_restriction():
    # one node: t = 1 p = 4; t = 2 p = 1.5. N = 1, K = 2: t = 2 uses both devices: 1.5.
    inst = make([(0, {"1": [opt(p=4.0)], "2": [opt(p=1.5)]})], K=2, N=1)
    sol = solve_brute(inst)
    assert sol.tps == pytest.approx(1.5) and sol.plan.stages[0].t == 2
    assert solve_brute(inst, Restrictions(max_t=1)).tps == pytest.approx(4.0)
    assert solve_brute(inst.with_settings(K=1)).tps == pytest.approx(4.0)


def test_node_without_option_for_the_only_affordable_t_is_infeasible():
    inst = make([(0, {"2": [opt(p=1.0)]})], K=1, N=1)  # needs t = 2 but K = 1
    sol = solve_brute(inst)
    assert sol.status is Status.INFEASIBLE and sol.plan is None and sol.tps is None


def test_pipeline_memory_uses_suffix_sum():
    # chain 0 -> 1, no traffic, p = 1 each, a = 1, M = 2, N = K = 2.
    # One stage, d = 2: y = 1, memory 2 fits, TPS (1 + 1)/2 = 1.
    # (Two stages, d = 1 each: first stage y = 2 -> memory 2 fits, TPS 1.) Either way the optimum is
    # 1. With M = 1.9 the single stage d = 2 (memory 2) and the first of two stages (y = 2) no
    # longer fit; single stage d = 1 needs memory 2 as well -> infeasible.
    nodes = [
        (0, {"1": [opt(p=1.0, a=1.0, sbw={1: 0.0})]}),
        (1, {"1": [opt(p=1.0, a=1.0, sfw={0: 0.0})]}),
    ]
    inst = make(nodes, edges=[(0, 1, 0.0)], K=2, N=2, M=2.0)
    assert solve_brute(inst).tps == pytest.approx(1.0)
    assert solve_brute(inst.with_settings(M=1.9)).status is Status.INFEASIBLE


def test_size_limit():
    big = random_instance("chain", MAX_NODES + 1, 0)
    assert not brute_applies(big)
    with pytest.raises(SizeLimitError, match="at most"):
        solve_brute(big)
    # a wide graph of 8 independent nodes has far too many ordered partitions
    wide = make([(i, {"1": [opt()]}) for i in range(8)], K=8, N=8)
    assert count_partitions(wide) > 100_000
    with pytest.raises(SizeLimitError, match="partitions"):
        solve_brute(wide)


def test_count_partitions_by_hand():
    chain = make(
        [
            (
                i,
                {
                    "1": [
                        opt(
                            **({"sbw": {i + 1: 0}} if i < 3 else {})
                            | ({"sfw": {i - 1: 0}} if i else {})
                        )
                    ]
                },
            )
            for i in range(4)
        ],
        edges=[(i, i + 1, 0.0) for i in range(3)],
        K=8,
        N=8,
    )
    assert count_partitions(chain) == 8  # cut or not at each of the 3 edges
    assert count_partitions(chain, max_stages=2) == 4  # one stage, or one of 3 cuts
    pair = make([(0, {"1": [opt()]}), (1, {"1": [opt()]})], K=8, N=8)
    assert count_partitions(pair) == 3  # {0,1}; 0 | 1; 1 | 0


@pytest.mark.parametrize("family", FAMILIES)
def test_agrees_with_naive_enumeration_through_the_evaluator(family):
    # The oracle's shortcuts (budget pruning, best options per stage) against no shortcuts at all:
    # every labelled partition, every degree, every option, each plan judged by the evaluator.
    for seed in range(6):
        inst = random_instance(family, 3, seed, options_per_t=(1, 2), K=4, N=2)
        best = min(
            (ev.tps for ev in map(lambda p: evaluate(inst, p), every_plan(inst)) if ev.valid),
            default=None,
        )
        sol = solve_brute(inst)
        if best is None:
            assert sol.status is Status.INFEASIBLE
        else:
            assert sol.status is Status.OPTIMAL
            assert sol.tps == pytest.approx(best, rel=1e-9)


def test_memory_is_the_correctly_rounded_sum_with_no_slack():
    # one stage of three nodes, b = 1e18, 64, 64 (K = N = 1: a single stage with d = 1, y = 1).
    # Added left to right in floats, 1e18 + 64 + 64 = 1e18 (each 64 is half an ulp and
    # rounds away), but the exact sum is 1e18 + 128, the next float: the contract's fsum
    # (sec. 7) says it does not fit in M = 1e18, and fits in M = 1e18 + 128.
    assert 1e18 + 64.0 + 64.0 == 1e18 and math.fsum([1e18, 64.0, 64.0]) == math.nextafter(
        1e18, math.inf
    )
    nodes = [
        (0, {"1": [opt(p=1.0, b=1e18, sbw={1: 0.0})]}),
        (1, {"1": [opt(p=1.0, b=64.0, sfw={0: 0.0}, sbw={2: 0.0})]}),
        (2, {"1": [opt(p=1.0, b=64.0, sfw={1: 0.0})]}),
    ]
    inst = make(nodes, edges=[(0, 1, 0.0), (1, 2, 0.0)], K=1, N=1, M=1e18)
    assert solve_brute(inst).status is Status.INFEASIBLE
    fits = solve_brute(inst.with_settings(M=math.nextafter(1e18, math.inf)))
    assert fits.status is Status.OPTIMAL and fits.tps == 3.0


def test_tps_is_the_evaluators_exactly():
    # the oracle's value is the evaluator's, bit for bit (fsum sums, cost.stage_cost)
    for family in FAMILIES:
        for seed in range(3):
            inst = random_instance(family, 5, seed)
            sol = solve_brute(inst)
            if sol.status is Status.OPTIMAL:
                assert sol.objective == evaluate(inst, sol.plan).tps == sol.tps


def test_force_skips_the_size_limits():
    nine = make([(i, {"1": [opt(p=float(i + 1))]}) for i in range(MAX_NODES + 1)], K=2, N=2)
    with pytest.raises(SizeLimitError, match="at most"):
        solve_brute(nine)
    sol = solve_brute(nine, force=True)
    # p = 1..9 (sum 45), no edges, K = N = 2: one stage with d = 2 gives 45 / 2 = 22.5
    # (w = 0: no resync); two stages with d = 1 give at best max(22, 23) = 23
    assert sol.status is Status.OPTIMAL and sol.tps == 22.5 and len(sol.plan.stages) == 1


@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: m.label)
def test_every_mode_agrees_with_naive_enumeration_through_the_evaluator(mode):
    # graph pipelining, batch time and the gpipe memory rule (secs. 8-9): the oracle's shortcuts
    # (per-stage best options, pruning on partial max / path) against every plan judged by the
    # evaluator under the mode. N = 4 so that branches hold fewer microbatches than a sequence.
    seen = set()
    for family in ("fork-join", "layered", "chain"):
        for seed in range(3):
            inst = random_instance(
                family, 3, seed, t_values=(1,), options_per_t=(1, 2), K=4, N=4, memory="tight"
            )
            values = [
                ev.value for ev in (evaluate(inst, p, mode) for p in every_plan(inst)) if ev.valid
            ]
            sol = solve_brute(inst, mode=mode)
            assert sol.mode == mode
            if not values:
                assert sol.status is Status.INFEASIBLE
                seen.add("infeasible")
                continue
            assert sol.status is Status.OPTIMAL
            assert (
                sol.value == min(values) and sol.bound == sol.value
            )  # bit for bit: the evaluator's numbers
            assert evaluate(inst, sol.plan, mode).value == sol.value
            seen.add("optimal")
    assert "optimal" in seen


def test_modes_differ_where_the_contract_says():
    # a fork 0 -> {1, 2} -> 3 with one unit of memory per microbatch and M = 3.5: with four
    # stages of d = 1, sequential pipelining holds y = 4, 3, 2, 1 (stage 0 does not fit) and
    # graph pipelining y = 3, 2, 2, 1 (it fits: sec. 8). gpipe holds N / d = 4 everywhere.
    edges = [(0, 1, 0.0), (0, 2, 0.0), (1, 3, 0.0), (2, 3, 0.0)]
    succ = {0: [1, 2], 1: [3], 2: [3], 3: []}
    pred = {0: [], 1: [0], 2: [0], 3: [1, 2]}
    nodes = [
        (
            v,
            {
                "1": [
                    opt(p=1.0, a=1.0, sfw={u: 0.0 for u in pred[v]}, sbw={x: 0.0 for x in succ[v]})
                ]
            },
        )
        for v in range(4)
    ]
    inst = make(nodes, edges=edges, K=4, N=4, M=3.5)
    seq = solve_brute(inst, Restrictions(max_d=1))
    graph = solve_brute(inst, Restrictions(max_d=1), mode=Mode("graph"))
    assert seq.status is graph.status is Status.OPTIMAL
    assert graph.tps == 1.0 and len(graph.plan.stages) == 4  # one node per stage
    assert seq.tps > graph.tps  # sequentially, the first stage must hold more nodes
    gp = solve_brute(inst, Restrictions(max_d=1), mode=Mode("graph", schedule="gpipe"))
    assert gp.status is Status.INFEASIBLE  # y = 4 for every stage: 4 > 3.5
    # batch time (N - 1) max TPS + longest path: graph 3 * 1 + 3 (0 -> 1 -> 3) = 6
    bt = solve_brute(inst, Restrictions(max_d=1), mode=Mode("graph", "batch-time"))
    assert bt.status is Status.OPTIMAL and bt.value == 6.0 and bt.tps == 1.0
