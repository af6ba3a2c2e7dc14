"""The exhaustive oracle (compare/crosscheck/brute.py) on cases whose optimum is derived by hand,
and against an even more naive enumeration checked by the evaluator."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest
from builders import (
    enumerated_optimum,
    every_plan,
    fork_instance,
    make_instance,
    option_dict,
    run_piper,
)
from conftest import REPO

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import (
    MAX_NODES,
    MAX_WORK,
    brute_applies,
    brute_work,
    count_partitions,
    solve_brute,
)
from compare.crosscheck.methods import run_method
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import save_instance
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
    assert brute_work(wide) > MAX_WORK
    with pytest.raises(SizeLimitError, match="steps"):
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
    # K = 1, N = 1: the work is the chain's 10 intervals (one option tuple each) x (2 memory
    # tests + 1 TPS), the subsets of its 4 prefixes (16 + 8 + 4 + 2) tried as last stages,
    # plus the 4 last stages {3}, {2, 3}, {1, 2, 3}, {0, 1, 2, 3} tried with t = d = 1 (then
    # no device is left for a stage in front of them)
    assert brute_work(chain.with_settings(K=1, N=1)) == 10 * 3 + 30 + 4
    # a graph of 60 nodes is refused by its count of subsets alone, at once
    assert brute_work(make([(i, {"1": [opt()]}) for i in range(60)], K=8, N=8)) > MAX_WORK
    pair = make([(0, {"1": [opt()]}), (1, {"1": [opt()]})], K=8, N=8)
    assert count_partitions(pair) == 3  # {0,1}; 0 | 1; 1 | 0


@pytest.mark.parametrize("family", FAMILIES)
def test_agrees_with_naive_enumeration_through_the_evaluator(family):
    # The oracle's shortcuts (budget pruning, best options per stage) against no shortcuts at all:
    # every labelled partition, every degree, every option, each plan judged by the evaluator.
    for seed in range(6):
        inst = random_instance(family, 3, seed, options_per_t=(1, 2), K=4, N=2)
        best = enumerated_optimum(inst)
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


@pytest.mark.parametrize("integer", [False, True], ids=["float", "integer"])
@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: m.label)
def test_every_mode_agrees_with_naive_enumeration_through_the_evaluator(mode, integer):
    # graph pipelining, batch time and the gpipe memory rule (secs. 8-9): the oracle's shortcuts
    # (per-stage best options, pruning on partial max / path, ties cut) against every plan
    # judged by the evaluator under the mode. N = 4 so that branches hold fewer microbatches
    # than a sequence; small integers make many plans tie.
    seen = set()
    for family in ("fork-join", "layered", "chain"):
        for seed in range(3):
            shape = dict(t_values=(1,), options_per_t=(1, 2), K=4, N=4)
            inst = random_instance(family, 3, seed, **shape, memory="tight", integer=integer)
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
    # the fork of fork_instance: four stages of d = 1 fit with graph pipelining only
    inst = fork_instance()
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


def _isolated(n, K, N, t_values, options, M=1.0, b_last=0.0, p=1.0):
    """n nodes without edges, each with ``options`` equal options per t (p, no memory but
    the last node's b)."""
    return make(
        [
            (
                v,
                {
                    str(t): [
                        opt(f"o{k}", p=p, b=b_last if v == n - 1 else 0.0) for k in range(options)
                    ]
                    for t in t_values
                },
            )
            for v in range(n)
        ],
        K=K,
        N=N,
        M=M,
    )


def _chain(n, K, N, t_values, p=1.0):
    """A chain 0 -> 1 -> ... -> n-1 with one option of time p per t, no traffic, no memory."""
    nodes = [
        (
            v,
            {
                str(t): [
                    opt(p=p, sfw={v - 1: 0.0} if v else {}, sbw={v + 1: 0.0} if v < n - 1 else {})
                ]
                for t in t_values
            },
        )
        for v in range(n)
    ]
    return make(nodes, edges=[(v, v + 1, 0.0) for v in range(n - 1)], K=K, N=N, M=1.0)


#: Issue 31's examples: (instance, mode flags, dp's optimum or None for infeasible).
#: 8 isolated nodes, N = 1, K = 32, four equal options per t: one node per stage (d = 1)
#: gives batch time 0 * 1 + 1 = 1. A chain of 8, N = 8, K = 64, t = 1..8 with equal p:
#: one stage with d = 8 gives TPS 1, batch time 7 * 1 + 8 * 1 = 15. 8 isolated nodes whose
#: last never fits (b = 2 > M = 1): infeasible.
ISSUE_31 = {
    "isolated": (
        _isolated(8, 32, 1, (1, 2, 4, 8), 4),
        ["--pipeline", "graph", "--objective", "batch-time"],
        1.0,
    ),
    "chain": (_chain(8, 64, 8, range(1, 9)), ["--objective", "batch-time"], 15.0),
    "infeasible": (
        _isolated(8, 32, 1, (1, 2, 4, 8), 1, b_last=2.0),
        ["--pipeline", "graph"],
        None,
    ),
}


def _verify_issue_31(tmp_path, name, methods):
    """``verify METHODS FLAGS --json`` on the issue-31 example ``name`` in a child process
    (600 s guard a hang only); the process, its one JSON record and the known optimum."""
    inst, flags, optimum = ISSUE_31[name]
    path = tmp_path / f"{name}.json"
    save_instance(inst, path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = run_piper("verify", path, *methods, *flags, "--json", timeout=600, cwd=tmp_path, env=env)
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc, record, optimum


@pytest.mark.parametrize("name", sorted(ISSUE_31))
def test_issue_31_examples_get_a_verdict_with_brute_refused_or_answering(tmp_path, name):
    # the old size guard let brute search these without end inside verify's default methods;
    # now brute refuses before any long work (skipped: not run) or answers, and the verdict
    # comes from the other methods. The 600 s timeout only guards against a hang.
    proc, record, optimum = _verify_issue_31(tmp_path, name, ["--methods", "dp,brute"])
    brute = record["methods"]["brute"]
    assert brute["status"] == "skipped" and "steps" in brute["skipped"], brute
    assert record["methods"]["dp"]["solver_status"] == (
        "infeasible" if optimum is None else "optimal"
    )
    assert record["optimum"] == optimum and record["verdict"] == "single-proof"
    assert proc.returncode == 4 and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ISSUE_31))
def test_issue_31_examples_with_verifys_default_methods(tmp_path, name):
    # as the issue ran them: verify's default methods (then dp, cpsat, cbc, brute), where
    # brute used to keep the verdict waiting for more than 290 s; now it is skipped (not run)
    # and the others prove the optimum, or infeasibility: dp, cpsat, cbc, and under graph
    # pipelining columns (a default there; path, the sequential default, does not solve the
    # batch time). The timeout guards a hang only.
    proc, record, optimum = _verify_issue_31(tmp_path, name, [])
    assert record["methods"]["brute"]["status"] == "skipped", record["methods"]["brute"]
    assert record["verdict"] == "match" and record["optimum"] == optimum, record
    graph = "--pipeline" in ISSUE_31[name][1]
    assert sorted(record["proofs"]) == ["cbc", *["columns"] * graph, "cpsat", "dp"], record
    assert record["infeasible"] is (optimum is None)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr


def test_ties_are_cut():
    # every plan has batch time 0 (p = 0): the first complete plan is optimal and every other
    # partial plan ties with it (lower bound 0 >= 0), so it is cut before completion
    inst = _isolated(4, 4, 4, (1, 2), 2, M=1.0, p=0.0)
    for mode in ALL_MODES:
        sol = solve_brute(inst, mode=mode)
        assert sol.status is Status.OPTIMAL and sol.value == 0.0
        assert sol.info["plans"] == 1, (mode.label, sol.info)


@pytest.mark.parametrize("uniform", [False, True], ids=["free", "uniform"])
@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: m.label)
def test_the_guard_counts_the_search_exactly(mode, uniform):
    # without a plan nothing is pruned: the search tries exactly the (stage, t, d) choices
    # the guard counted (memory, budgets, h of sec. 8 and uniform degrees of sec. 12
    # included); with a plan, at most that
    seen = {"infeasible": 0, "optimal": 0}
    restr = Restrictions(uniform=uniform)
    for family in ("fork-join", "layered", "skip", "towers"):
        for seed in range(8):
            inst = random_instance(family, 5, seed, t_values=(1, 2), K=6, N=4, memory="tight")
            sol = solve_brute(inst, restr, mode=mode)
            assert sol.info["work"] == brute_work(inst, restr, mode=mode)
            if sol.status is Status.INFEASIBLE:
                assert sol.info["stage_choices"] == sol.info["work_search"]
            else:
                assert sol.info["stage_choices"] <= sol.info["work_search"]
            seen[sol.status.value] += 1
    assert min(seen.values()) > 0, seen


def test_time_limit_stops_the_search_without_a_proof():
    # a search of some thousands of steps (it ends, optimal, without a limit), stopped at
    # its first look at the clock
    inst = _isolated(6, 8, 2, (1, 2), 2)
    mode = Mode("graph", "batch-time")
    assert solve_brute(inst, mode=mode).status is Status.OPTIMAL
    for sol in (
        solve_brute(inst, mode=mode, time_limit=0.0),
        run_method(inst, "brute", mode=mode, time_limit=0.0),
    ):
        assert sol.status in (Status.FEASIBLE, Status.UNKNOWN) and sol.bound is None
        assert "time limit" in sol.message and sol.info["stopped"]
    # a limit that is not reached changes nothing
    a, b = solve_brute(inst, mode=mode, time_limit=600.0), solve_brute(inst, mode=mode)
    assert (a.status, a.value, a.plan) == (b.status, b.value, b.plan)


def test_hostile_instances_in_every_mode_get_a_verdict_with_brute_inside_its_guard():
    # issue 31's done-when in small: the hostile family (numbers over 1e-30..1e30, isolated
    # nodes, N = 1, K up to 2^20, options tied exactly) in every mode, dp against brute
    # through verify. Each brute answers or refuses; one that answers takes at most the
    # steps its guard counted beforehand, which are at most MAX_WORK; dp and brute agree;
    # no error, no RuntimeWarning. (The full fuzz with every default method: the campaign
    # in docs/architecture.md.)
    seen = {"optimal": 0, "infeasible": 0, "skipped": 0, "isolated": 0, "N=1": 0, "K>=1024": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for seed in range(32):
            inst = random_instance("hostile", 1 + seed % 8, seed)
            seen["isolated"] += len(inst.nodes) >= 3 and not inst.edges
            seen["N=1"] += inst.N == 1
            seen["K>=1024"] += inst.K >= 1024
            for mode in ALL_MODES:
                v = verify_instance(inst, ("dp", "brute"), greedy=False, mode=mode)
                brute = v.results["brute"]
                assert v.errors == [] and v.problems == [], (seed, mode.label, v.problems)
                if brute.skipped is not None:
                    assert "steps" in brute.skipped or "nodes" in brute.skipped
                    assert v.verdict == "single-proof", (seed, mode.label)
                    seen["skipped"] += 1
                    continue
                info = brute.solution.info
                assert info["stage_choices"] <= info["work_search"] <= info["work"] <= MAX_WORK
                assert v.verdict == "match" and set(v.proofs) == {"dp", "brute"}, (
                    seed,
                    mode.label,
                    v.verdict,
                )
                seen[brute.solution.status.value] += 1
    assert min(seen.values()) >= 3, seen


@pytest.mark.parametrize(
    "mode, instead",
    [
        # path covers the sequential throughput modes, columns graph pipelining (docs/milp.md)
        (Mode(), {"dp", "cpsat", "cbc", "scip", "path"}),
        (Mode("graph"), {"dp", "cpsat", "cbc", "scip", "columns"}),
    ],
)
def test_brute_refusals_name_the_registrys_other_exact_methods_for_the_mode(mode, instead):
    from compare.crosscheck.methods import METHODS

    assert instead <= set(METHODS)
    wide = random_instance("chain", 30, seed=1, memory="loose", K=4, N=4)  # nodes
    many = random_instance("chain", 8, seed=1, memory="loose", K=256, N=256)  # steps
    for inst in (wide, many):
        with pytest.raises(SizeLimitError) as exc:
            run_method(inst, "brute", mode=mode)
        named = str(exc.value).rsplit("; use ", 1)[1].replace(" or ", ", ").split(", ")
        assert set(named) == instead, str(exc.value)
