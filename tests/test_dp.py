"""The DP (dp/): exact against the exhaustive oracle, Piper's greedy rule, the published
reference values, size limits, infeasibility messages and restrictions."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from builders import option_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import solve_brute
from dp import count_ideals, exact_options, greedy_choice, greedy_options, solve_dp
from dp.greedy_rule import greedy_choice_over_y
from dp.knapsack import pareto_frontier, stage_items
from piper_ilp.cost import close, memory_fits, stage_cost, stage_memory
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict, load_instance
from piper_ilp.solution import Restrictions, Status


def _opt(oid, p, a, b=0.0, w=0.0, sfw=None, sbw=None):
    return option_dict(oid, p=p, w=w, a=a, b=b, sfw=sfw, sbw=sbw)


def _chain(n, K=4, M=100.0, N=4, options=None):
    nodes = []
    for i in range(n):
        sfw = {str(9 + i): 0.0} if i else {}
        sbw = {str(11 + i): 0.0} if i < n - 1 else {}
        opts = options or [("vanilla", 1.0, 10.0), ("activation recomp", 1.5, 2.0)]
        nodes.append({"id": 10 + i, "TMPCs": {"1": [_opt(*o, sfw=sfw, sbw=sbw) for o in opts]}})
    edges = [{"sourceId": 10 + i, "destId": 11 + i, "communicationCost": 1.0} for i in range(n - 1)]
    return instance_from_dict(
        {
            "maxDevices": K,
            "maxMemoryPerDevice": M,
            "bandwidth": 1.0,
            "mbsInBatch": N,
            "nodes": nodes,
            "edges": edges,
        }
    )


# --------------------------------------------------------------------------------------
# The exact DP equals the exhaustive oracle; greedy mode is never below it
# --------------------------------------------------------------------------------------

CASES = [(FAMILIES[s % len(FAMILIES)], 2 + s % 6, s) for s in range(320)]


def _params(seed):
    # 1 to 3 options per (node, t) on a third of the seeds, t in {1, 2, 4}, tight memory
    return dict(t_values=(1, 2, 4), options_per_t=(1, 3) if seed % 3 == 0 else 2)


@pytest.mark.parametrize("family,n,seed", CASES, ids=[f"{f}-n{n}-s{s}" for f, n, s in CASES])
def test_exact_dp_equals_oracle(family, n, seed):
    inst = random_instance(family, n, seed, **_params(seed))
    ref = solve_brute(inst)
    # the decision's two paths (one matrix per set for small S, blocks per (set, d)
    # otherwise) on alternate seeds
    small_s = 0 if seed % 2 else 96
    sol = solve_dp(inst, small_s=small_s)
    assert sol.method == "dp"
    if ref.status == Status.INFEASIBLE:
        assert sol.status == Status.INFEASIBLE and sol.plan is None, (sol.tps, ref.message)
        assert sol.message
        return
    assert sol.status == Status.OPTIMAL
    assert close(sol.tps, ref.tps), (sol.tps, ref.tps)
    assert close(sol.objective, sol.tps)
    if max(len(o) for nd in inst.nodes for o in nd.options.values()) <= 2:
        g = solve_dp(inst, knapsack="greedy", small_s=small_s)
        assert g.method == "dp-greedy"
        if g.status == Status.FEASIBLE:
            assert g.tps >= ref.tps * (1 - 1e-9), (g.tps, ref.tps)
        else:  # the greedy rule can only miss plans, and then it claims nothing
            assert g.status == Status.UNKNOWN and g.plan is None


@pytest.mark.slow
def test_greedy_gap_report():
    """Piper's rule is a heuristic: over a few hundred tight-memory instances it must miss
    the optimum somewhere (else greedy mode silently became exact), by a few percent, and
    never go below it."""
    gaps = []
    for family, n, seed in CASES[::2]:
        inst = random_instance(family, n, seed, **_params(seed))
        if max(len(o) for nd in inst.nodes for o in nd.options.values()) > 2:
            continue
        e, g = solve_dp(inst), solve_dp(inst, knapsack="greedy")
        if e.tps is not None and g.tps is not None:
            gaps.append(g.tps / e.tps - 1)
    above = [x for x in gaps if x > 1e-9]
    msg = (
        f"greedy mode above the optimum on {len(above)} of {len(gaps)} instances; "
        f"largest gap {max(above, default=0):.2%}"
    )
    print(msg)
    assert all(x >= -1e-9 for x in gaps), msg
    assert above, msg
    assert max(above) < 0.5, msg


@pytest.mark.parametrize("seed", range(40))
def test_restrictions_match_oracle(seed):
    inst = random_instance(
        FAMILIES[seed % 5],
        3 + seed % 4,
        1000 + seed,
        t_values=(1, 2),
        options_per_t=2,
        memory="loose",
    )
    restr = [
        Restrictions.from_flags(no_data_parallel=True),
        Restrictions.from_flags(no_tensor_parallel=True),
        Restrictions.from_flags(no_recompute=True),
        Restrictions(max_d=2, max_t=1),
    ][seed % 4]
    ref = solve_brute(inst, restr)
    sol = solve_dp(inst, restr)
    assert (sol.tps is None) == (ref.tps is None)
    if ref.tps is not None:
        assert close(sol.tps, ref.tps)
        for st in sol.plan.stages:
            assert restr.max_d is None or st.d <= restr.max_d
            assert restr.max_t is None or st.t <= restr.max_t
            assert not any(o in restr.exclude_options for o in st.options.values())


# --------------------------------------------------------------------------------------
# Piper's greedy rule (sec. 5)
# --------------------------------------------------------------------------------------


def test_greedy_rule_by_hand():
    # F = [0, 0], excess 16 - 10 = 6; ratios: node 0 (2-1)/7, node 1 (3-1)/7 -> switch 0 only
    assert greedy_choice([[1, 2], [1, 3]], [[8, 1], [8, 1]], 10) == [1, 0]
    # both must switch
    assert greedy_choice([[1, 2], [1, 3]], [[8, 1], [8, 1]], 2) == [1, 1]
    # nothing fits
    assert greedy_choice([[1, 2], [1, 3]], [[8, 1], [8, 1]], 1) is None
    # everything fits: cheapest (first on ties)
    assert greedy_choice([[1, 1], [2, 1]], [[8, 1], [8, 1]], 100) == [0, 1]
    # equal ratios: the lower node index switches first
    assert greedy_choice([[1, 2], [1, 2]], [[8, 1], [8, 1]], 12) == [1, 0]


def test_greedy_is_not_always_optimal():
    # node 0 saves 5 bytes for +1, node 1 saves 10 bytes for +3 (ratio 0.2 vs 0.3): greedy
    # takes node 0 first, then still needs node 1 (cost 4); the exact choice takes node 1
    # alone (cost 3, memory 5 <= 7)
    costs = [[0.0, 1.0], [0.0, 3.0]]
    mems = [[5.0, 0.0], [10.0, 0.0]]
    assert greedy_choice(costs, mems, 7.0) == [1, 1]
    inst = instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": 7.0,
            "bandwidth": 1.0,
            "mbsInBatch": 1,
            "nodes": [
                {
                    "id": 0,
                    "TMPCs": {
                        "1": [_opt("vanilla", 0.0, 5.0), _opt("activation recomp", 1.0, 0.0)]
                    },
                },
                {
                    "id": 1,
                    "TMPCs": {
                        "1": [_opt("vanilla", 0.0, 10.0), _opt("activation recomp", 3.0, 0.0)]
                    },
                },
            ],
            "edges": [],
        }
    )
    g = greedy_options(inst, [0, 1], 1, 1, 1)
    e = exact_options(inst, [0, 1], 1, 1, 1)
    assert [g[0].id, g[1].id] == ["activation recomp", "activation recomp"]
    assert [e[0].id, e[1].id] == ["vanilla", "activation recomp"]
    sg, se = solve_dp(inst, knapsack="greedy"), solve_dp(inst)
    assert sg.status == Status.FEASIBLE and se.status == Status.OPTIMAL
    assert close(sg.tps, 4.0) and close(se.tps, 3.0)


def _rule_as_written(costs, mems, M):
    """Sec. 5 read literally, with plain Python sums (an independent referee for the
    vectorized rule; they can differ only when a sum lies within a few ulps of M)."""
    n = len(costs)
    F = [min(range(len(c)), key=lambda l, c=c: (c[l], l)) for c in costs]
    if sum(mems[i][F[i]] for i in range(n)) <= M:
        return F
    L = [min(range(len(m)), key=lambda l, m=m: (m[l], l)) for m in mems]
    if sum(mems[i][L[i]] for i in range(n)) > M:
        return None
    triples = sorted(
        ((costs[i][l] - costs[i][F[i]]) / (mems[i][F[i]] - mems[i][l]), i, l)
        for i in range(n)
        for l in range(len(costs[i]))
        if mems[i][F[i]] - mems[i][l] > 1e-9
    )
    H, E = list(F), sum(mems[i][F[i]] for i in range(n)) - M
    for _, i, l in triples:
        E -= mems[i][H[i]] - mems[i][l]
        H[i] = l
        if E < 1e-9:
            break
    return H


@pytest.mark.parametrize("seed", range(30))
def test_greedy_over_y_matches_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    cF = rng.uniform(0, 1, n)
    cO = cF + np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0, 1, n))
    aF, aO = rng.uniform(1, 10, n), rng.uniform(0, 5, n)
    bF, bO = rng.uniform(0, 5, n), rng.uniform(0, 10, n)
    Y = 12
    y = np.arange(1, Y + 1, dtype=float)[:, None]
    mF, mO = aF * y + bF, aO * y + bO
    M = float(rng.uniform(0.3, 1.0) * mF[Y // 2].sum())
    sw, feas = greedy_choice_over_y(cO - cF, mF, mO, M)
    for k in range(Y):
        costs = [[cF[i], cO[i]] for i in range(n)]
        mems = [[mF[k, i], mO[k, i]] for i in range(n)]
        H = _rule_as_written(costs, mems, M)
        assert greedy_choice(costs, mems, M) == H
        if H is None:
            assert not feas[k]
        else:
            assert feas[k]
            assert [bool(h) for h in H] == sw[k].tolist(), (k, H, sw[k])


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 9), st.integers(0, 9)),
        min_size=1,
        max_size=6,
    ),
    M=st.integers(0, 40),
)
def test_greedy_rule_on_small_integers_with_ties(nodes, M):
    # small integers: every sum is exact and many ratios tie exactly; the rule must agree
    # with its literal reading, ties going to the lower node index
    costs = [[float(c0), float(c1)] for c0, c1, _, _ in nodes]
    mems = [[float(m0), float(m1)] for _, _, m0, m1 in nodes]
    assert greedy_choice(costs, mems, float(M)) == _rule_as_written(costs, mems, float(M))


def test_greedy_refuses_more_than_two_options():
    inst = _chain(
        3, options=[("vanilla", 1.0, 10.0), ("activation recomp", 1.5, 2.0), ("opt2", 1.2, 5.0)]
    )
    with pytest.raises(InputError, match=r"node 10 has 3 options for t = 1"):
        solve_dp(inst, knapsack="greedy")
    with pytest.raises(InputError, match="node 10"):
        greedy_options(inst, [10, 11], 1, 1, 1)
    # excluding the third option makes the rule applicable
    assert (
        solve_dp(inst, Restrictions(exclude_options=frozenset({"opt2"})), knapsack="greedy").tps
        is not None
    )


def test_unknown_knapsack_mode():
    with pytest.raises(InputError, match="knapsack"):
        solve_dp(_chain(2), knapsack="fast")


# --------------------------------------------------------------------------------------
# The exact option chooser
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_exact_options_is_exact(seed):
    inst = random_instance(FAMILIES[seed % 5], 6, 500 + seed, t_values=(1,), options_per_t=(1, 4))
    ids = inst.node_ids
    nodes = ids[: 2 + seed % 5]
    d, y = [1, 2][seed % 2], 1 + seed % 3
    best = math.inf
    for combo in itertools.product(*(inst.node[v].options[1] for v in nodes)):
        opts = dict(zip(nodes, combo))
        if memory_fits(stage_memory(nodes, opts, y), inst.M):
            best = min(best, stage_cost(inst, nodes, d, opts).tps)
    got = exact_options(inst, nodes, 1, d, y)
    if best == math.inf:
        assert got is None
    else:
        assert got is not None
        assert memory_fits(stage_memory(nodes, got, y), inst.M)
        assert close(stage_cost(inst, nodes, d, got).tps, best)


def test_frontier_groups_identical_nodes():
    # 30 identical two-option nodes: 31 choices (j nodes recompute), not 2**30
    inst = _chain(30, M=1e9)
    items = stage_items(inst, inst.node_ids[1:-1], 1)
    assert len(pareto_frontier(items, inst.M)) == 29


# --------------------------------------------------------------------------------------
# Successor-closed sets and the size limit
# --------------------------------------------------------------------------------------


def test_count_ideals_small():
    assert count_ideals(_chain(5)) == 6
    free = instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": 1,
            "bandwidth": 1,
            "mbsInBatch": 1,
            "nodes": [{"id": i, "TMPCs": {"1": [_opt("v", 1, 0)]}} for i in range(10)],
            "edges": [],
        }
    )
    assert count_ideals(free) == 1024
    assert count_ideals(free, limit=100) == 101
    with pytest.raises(SizeLimitError, match="has 1,024 successor-closed sets.*limit of 1,000"):
        solve_dp(free, max_ideals=1000)
    with pytest.raises(SizeLimitError, match="more than 1,000 .*limit of 100"):
        solve_dp(free, max_ideals=100)


@pytest.mark.shared
def test_count_ideals_profiles(shared_dir):
    # the counts listed in ../shared/piper-inputs/SOURCE.md
    want = {"bert32a100": 43, "resnet": 242, "gnmt": 17914}
    for name, n in want.items():
        assert count_ideals(load_instance(shared_dir / "piper-inputs" / f"{name}.json")) == n


# --------------------------------------------------------------------------------------
# Infeasible instances: a normal answer that names the tight bound
# --------------------------------------------------------------------------------------


def test_infeasible_memory():
    sol = solve_dp(_chain(3, M=1.0))
    assert sol.status == Status.INFEASIBLE and sol.plan is None and sol.tps is None
    assert "memory" in sol.message


def test_infeasible_devices():
    # memory b = 10 per node, M = 15: every node needs its own device (one stage each)
    inst = _chain(3, K=3, M=15.0, N=3, options=[("vanilla", 1.0, 0.0, 10.0)])
    assert solve_dp(inst).status == Status.OPTIMAL
    sol = solve_dp(inst.with_settings(K=2))
    assert sol.status == Status.INFEASIBLE
    assert "memory" in sol.message  # at most min(N, K) = 2 stages
    # N allows 3 stages but K = 2 devices cannot hold them
    sol = solve_dp(inst.with_settings(K=2, N=6))
    assert sol.status == Status.INFEASIBLE and "memory" in sol.message


def test_infeasible_no_option_left():
    inst = _chain(2, options=[("activation recomp", 1.0, 1.0)])
    sol = solve_dp(inst, Restrictions.from_flags(no_recompute=True))
    assert sol.status == Status.INFEASIBLE and "no option" in sol.message


def test_plan_uses_user_ids_and_passes_evaluator():
    inst = _chain(4, K=4, M=25.0, N=4)
    sol = solve_dp(inst)
    assert sol.status == Status.OPTIMAL
    assert sorted(v for st in sol.plan.stages for v in st.nodes) == [10, 11, 12, 13]
    ev = evaluate(inst, sol.plan)
    assert ev.valid and close(ev.tps, sol.objective)
    assert sol.info["ideals"] == 5 and sol.info["stage_candidates"] > 0


# --------------------------------------------------------------------------------------
# The published reference values (../shared/reference/index.json)
# --------------------------------------------------------------------------------------


def _reference_cases():
    path = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "index.json"
    if not path.is_file():
        return []
    return json.loads(path.read_text())


@pytest.mark.shared
@pytest.mark.parametrize("entry", _reference_cases(), ids=lambda e: e["plan"])
def test_reference_tps(entry, shared_dir):
    inst = load_instance(shared_dir / entry["instance"]).with_settings(
        K=entry["maxDevices"],
        M=float(entry["maxMemoryPerDevice"]),
        N=entry["mbsInBatch"],
        B=float(entry["bandwidth"]),
    )
    g = solve_dp(inst, knapsack="greedy")
    assert g.status == Status.FEASIBLE
    assert close(g.tps, entry["tps"]), (g.tps, entry["tps"])
    e = solve_dp(inst)
    assert e.status == Status.OPTIMAL
    assert e.tps <= entry["tps"] * (1 + 1e-9)


# --------------------------------------------------------------------------------------
# The pruned DP (upper bound from the chain-restricted DP) stays exact
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_pruned_dp_equals_oracle(seed):
    family = FAMILIES[seed % len(FAMILIES)]
    inst = random_instance(
        family,
        3 + seed % 5,
        2000 + seed,
        t_values=(1, 2),
        options_per_t=2,
        memory=0.3 + 0.1 * (seed % 5),
    )
    ref = solve_brute(inst)
    sol = solve_dp(inst, chain_first=0)  # always take the bound first
    assert (sol.tps is None) == (ref.tps is None), (sol.message, ref.message)
    if ref.tps is not None:
        assert close(sol.tps, ref.tps), (sol.tps, ref.tps, sol.info)
        assert "chain_bound" in sol.info
    # greedy mode: the same value with and without the pruning
    g = solve_dp(inst, knapsack="greedy", chain_first=0)
    g0 = solve_dp(inst, knapsack="greedy", chain_first=10**9)
    assert (g.tps is None) == (g0.tps is None)
    if g.tps is not None:
        assert close(g.tps, g0.tps) and g.tps >= ref.tps * (1 - 1e-9)


def _chain_first_cases():
    cases = [
        (FAMILIES[seed % len(FAMILIES)], 4 + seed % 5, 3000 + seed, (1, 2), 2, 0.4)
        for seed in range(40)
    ]
    # (a case where the full search decides nothing: the work bound meets the chain bound)
    cases.append(("skip", 6, 50050, (1, 2, 4), 3, 0.8))
    for family, n, seed, t_values, options_per_t, memory in cases:
        yield (
            seed,
            random_instance(
                family, n, seed, t_values=t_values, options_per_t=options_per_t, memory=memory
            ),
        )


def test_search_starts_from_the_chain_plan():
    """With the chain bound ub, the full search starts from the chain plan: when nothing
    below ub fits, the chain plan is the answer, with the oracle's value, and the full
    search made no decision (it would have made one at ub were the chain plan not known)."""
    answered_by_chain = 0
    for seed, inst in _chain_first_cases():
        sol = solve_dp(inst, chain_first=0)
        ref = solve_brute(inst)
        assert (sol.tps is None) == (ref.tps is None)
        if sol.tps is None:
            continue
        assert close(sol.tps, ref.tps), (seed, sol.tps, ref.tps)
        answered_by_chain += sol.objective == sol.info["chain_bound"]
        if seed == 50050:
            assert sol.info["search_steps"] == 0 and sol.objective == sol.info["chain_bound"]
    assert answered_by_chain >= 10  # the chain plan was the answer often enough to matter


class _Recording:
    """A ThresholdDecision that records the thresholds it decides."""

    def __init__(self, *args):
        from dp.threshold_search import ThresholdDecision

        self.decision = ThresholdDecision(*args)
        self.decided: list[float] = []

    def __getattr__(self, name):
        return getattr(self.decision, name)

    def decide(self, T, *args, **kw):
        self.decided.append(T)
        return self.decision.decide(T, *args, **kw)

    def decide_narrow(self, T, *args, **kw):
        self.decided.append(T)
        return self.decision.decide_narrow(T, *args, **kw)


def test_search_from_a_known_plan_decides_only_below_it():
    """search_threshold given the devices of a known plan of bottleneck ``upper`` (one of
    the candidates) makes no decision at or above ``upper``: it finds the same least
    threshold as a search from scratch when that is below ``upper``, and returns no path
    (the known plan is the answer) when it is ``upper`` itself."""
    from dp.ideals import enumerate_ideals
    from dp.option_choice import OptionChoices
    from dp.stage_tables import build_stage_tables
    from dp.threshold_search import search_threshold
    from piper_ilp.solution import Restrictions

    checked = {"at": 0, "above": 0}
    for seed, inst in _chain_first_cases():
        S = min(inst.N, inst.K)
        budget = min(inst.K, max(inst.t_values) * S)
        ideals = enumerate_ideals(inst, 10**6)
        d_values = [d for d in Restrictions().d_values(inst) if d <= S]
        tb = build_stage_tables(inst, ideals, d_values, S, False, OptionChoices(inst, False))
        free = _Recording(tb, len(ideals), S, budget)
        best = search_threshold(free, budget)
        if best is None:
            continue
        cands = free.candidates()
        known = int(free.decide_narrow(best.T)[-1].min())
        above = cands[cands > best.T]
        for upper in [best.T] + above[:1].tolist():
            rec = _Recording(tb, len(ideals), S, budget)
            got = search_threshold(rec, budget, upper=upper, known=known)
            assert all(T < upper for T in rec.decided), (seed, upper, rec.decided)
            assert got.T == best.T, (seed, got.T, best.T)
            if upper == best.T:
                assert got.path is None and got.steps == len(rec.decided)
                checked["at"] += 1
            else:
                assert got.path is not None
                checked["above"] += 1
    assert checked["at"] >= 20 and checked["above"] >= 10, checked


# --------------------------------------------------------------------------------------
# The fast paths for "plain" nodes (options differ only in p, a, b, as in the profiles)
# --------------------------------------------------------------------------------------


def _plainify(inst, same_b: bool = False, M: float | None = None):
    """The instance with every option's w, sfw and sbw (and b, with ``same_b``) set to the
    first option's, and M replaced when given."""
    from piper_ilp.instance import instance_to_dict

    data = instance_to_dict(inst)
    keys = ("parameterSize", "syncTimeFw", "syncTimeBw") + (("memoryUsageB",) if same_b else ())
    for nd in data["nodes"]:
        for opts in nd["TMPCs"].values():
            for o in opts[1:]:
                for key in keys:
                    o[key] = opts[0][key]
    if M is not None:
        data["maxMemoryPerDevice"] = M
    return instance_from_dict(data, source=inst.source + " (plain)")


@pytest.mark.parametrize("seed", range(40))
def test_plain_frontiers_with_one_b_per_node_match_oracle(seed):
    """Every option of a node with the same b (and w, sync times) and a of its own: every
    frontier of two or more rows then has one Bm and varying A, so the DP's states decide
    dominance by (P, A) (dp.exact_states); three options per t, and M from
    roomy down to where the largest stages stop fitting, near the boundary included."""
    base = random_instance(
        FAMILIES[seed % 5], 3 + seed % 5, 5000 + seed, t_values=(1, 2), options_per_t=3
    )
    for scale in (1.0, 0.6, 0.35):
        inst = _plainify(base, same_b=True, M=base.M * scale)
        ref = solve_brute(inst)
        got = solve_dp(inst)
        assert (got.tps is None) == (ref.tps is None), (scale, got.status, ref.status)
        if ref.tps is not None:
            assert close(got.tps, ref.tps), (scale, got.tps, ref.tps)
        slow = solve_dp(inst, plain_paths=False)
        assert (slow.tps is None) == (got.tps is None)
        if got.tps is not None:
            assert close(slow.tps, got.tps), (scale, slow.tps, got.tps)


@pytest.mark.parametrize("seed", range(60))
def test_plain_paths_match_oracle_and_generic_paths(seed):
    inst = _plainify(
        random_instance(
            FAMILIES[seed % 5], 3 + seed % 5, 3000 + seed, t_values=(1, 2, 4), options_per_t=2
        )
    )
    ref = solve_brute(inst)
    fast = {mode: solve_dp(inst, knapsack=mode) for mode in ("exact", "greedy")}
    assert (fast["exact"].tps is None) == (ref.tps is None)
    if ref.tps is not None:
        assert close(fast["exact"].tps, ref.tps), (fast["exact"].tps, ref.tps)
    # the same instance with every node treated as general: the same values
    for mode, sol in fast.items():
        slow = solve_dp(inst, knapsack=mode, plain_paths=False)
        assert (slow.tps is None) == (sol.tps is None)
        if sol.tps is not None:
            assert close(slow.tps, sol.tps), (mode, slow.tps, sol.tps)


def test_pareto_orders_match_pareto_order_per_array():
    """The batched Pareto filter of the stage tables keeps exactly what pareto_order keeps
    on each array alone: ties, duplicates, constant columns (one- and two-column paths),
    -0.0 beside 0.0, and arrays past the padded-batch size."""
    import numpy as np

    from dp.knapsack import pareto_mask, pareto_order, pareto_orders

    rng = np.random.default_rng(7)
    for _ in range(400):
        nseg = int(rng.integers(1, 7))
        lens = rng.integers(1, int(rng.choice([4, 40, 700])), size=nseg)
        arrays = []
        for n in lens:
            a = rng.integers(0, int(rng.choice([2, 5, 60])), size=(n, 3)).astype(float)
            kind = int(rng.integers(0, 4))
            if kind == 1:
                a[:, 0] = 3.0
            elif kind == 2:
                a[:, 1:] = 1.0
            elif kind == 3:
                a[:, 2] = np.where(rng.random(n) < 0.5, -0.0, 0.0)
            arrays.append(a)
        got = pareto_orders(np.concatenate(arrays), np.repeat(np.arange(nseg), lens))
        starts = np.cumsum(lens) - lens
        want = [s + pareto_order(a) for s, a in zip(starts, arrays)]
        # the same rows of each array, by array, each array's rows in lexicographic order
        assert np.array_equal(np.sort(got), np.sort(np.concatenate(want)))
        assert np.array_equal(
            np.concatenate([np.nonzero(pareto_mask(a))[0] + s for s, a in zip(starts, arrays)]),
            np.sort(np.concatenate(want)),
        )
        for s, a, w in zip(starts, arrays, want):
            mine = got[(got >= s) & (got < s + len(a))]
            keys = [tuple(r) for r in a[mine - s].tolist()]
            assert keys == sorted(keys)
            assert len(mine) == len(w)


def test_segment_lex_order_is_lexsorts_order():
    """The two-sort order of the batched Pareto filter is np.lexsort's by (array, columns),
    ties by input order: first columns that tie in an array (then the later columns
    decide), -0.0 beside 0.0, arrays in any order, and exact duplicates."""
    import numpy as np

    from dp.knapsack import segment_lex_order

    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        k = int(rng.integers(1, 6))
        hi = int(rng.choice([2, 6, 10**6]))  # many ties, some, almost none
        cols = rng.integers(0, hi, size=(n, k)).astype(float)
        cols[rng.random((n, k)) < 0.1] *= -1.0  # -0.0 where the value is 0
        seg = rng.integers(0, int(rng.integers(1, 5)), size=n)
        if rng.random() < 0.5:
            seg = np.sort(seg)
        want = np.lexsort(tuple(cols[:, j] for j in range(k - 1, -1, -1)) + (seg,))
        assert segment_lex_order(cols, seg).tolist() == want.tolist()


def test_pareto_order_keeps_what_the_definition_keeps():
    """pareto_order with three to five varying columns, against its definition read
    literally: rows in stable lexicographic order, a row kept unless an earlier row is <=
    it in every column. Arrays of up to 700 rows cross several blocks of PARETO_BLOCK,
    where a block is tried only against the rows kept before it; ties, duplicates and
    -0.0 beside 0.0 included."""
    import numpy as np

    from dp.knapsack import PARETO_BLOCK, pareto_order

    rng = np.random.default_rng(11)
    crossed = 0
    for _ in range(150):
        k = int(rng.integers(3, 6))
        n = int(rng.integers(2, int(rng.choice([20, 300, 700]))))
        a = rng.integers(0, int(rng.choice([3, 10, 1000])), size=(n, k)).astype(float)
        if rng.random() < 0.3:
            a[:, -1] = np.where(a[:, -1] == 0, np.where(rng.random(n) < 0.5, -0.0, 0.0), a[:, -1])
        varying = [j for j in range(k) if (a[:, j] != a[0, j]).any()]
        if len(varying) < 3:
            continue
        rows = sorted(range(n), key=lambda i: (tuple(a[i, varying]), i))
        want = []
        for pos, i in enumerate(rows):
            if not any(all(a[j, c] <= a[i, c] for c in varying) for j in rows[:pos]):
                want.append(i)
        assert pareto_order(a).tolist() == want
        crossed += n > 2 * PARETO_BLOCK
    assert crossed >= 20


def test_pareto_order_of_a_few_rows_keeps_what_the_definition_keeps():
    """pareto_order of up to 8 rows (a node's options: the plain-Python path) against the
    same literal definition, with any number of varying columns (none, one, two, more),
    duplicates and -0.0 beside 0.0."""
    import numpy as np

    from dp.knapsack import pareto_order

    rng = np.random.default_rng(12)
    for _ in range(2000):
        n, k = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        a = rng.integers(0, int(rng.choice([1, 2, 4])), size=(n, k)).astype(float)
        a[a == 0] = np.where(rng.random(int((a == 0).sum())) < 0.5, -0.0, 0.0)
        a[:, rng.random(k) < 0.3] = 1.0  # constant columns
        rows = sorted(range(n), key=lambda i: (tuple(a[i]), i))
        want = []
        for pos, i in enumerate(rows):
            if not any(all(a[j, c] <= a[i, c] for c in range(k)) for j in rows[:pos]):
                want.append(i)
        assert pareto_order(a).tolist() == want, a


def test_two_column_orders_match_the_single_array_rule():
    """two_column_orders (the states' filter of many frontiers at once, one sort on ranks)
    keeps exactly what the one-array rule keeps, in the same order: ties in x (sorted by
    (x, y) then), duplicates, inf in x and y, -0.0 beside 0.0, rows left out (not valid),
    arrays of lengths 1 to 300, and only the selected arrays."""
    import numpy as np

    from dp.knapsack import two_column_order, two_column_orders

    rng = np.random.default_rng(11)
    for _ in range(300):
        nseg = int(rng.integers(1, 9))
        lens = rng.integers(1, int(rng.choice([3, 30, 300])), size=nseg)
        n = int(lens.sum())
        hi = int(rng.choice([2, 5, 1000]))
        x = rng.integers(0, hi, size=n).astype(float)
        y = rng.integers(0, hi, size=n).astype(float)
        y[rng.random(n) < 0.1] = np.inf
        x[rng.random(n) < 0.1] = -0.0
        x[rng.random(n) < 0.05] = np.inf
        valid = rng.random(n) < 0.9
        seg = np.repeat(np.arange(nseg), lens)
        first = np.cumsum(lens) - lens
        sel = np.nonzero(rng.random(nseg) < 0.8)[0]
        if not len(sel):
            continue
        if rng.random() < 0.2:
            # a row left out before a valid row at (inf, inf): the valid one is kept
            x[first[0]], y[first[0]], valid[first[0]] = np.inf, np.inf, False
            if lens[0] > 1:
                x[first[0] + 1], y[first[0] + 1], valid[first[0] + 1] = np.inf, np.inf, True
        got = two_column_orders(x, y, valid, first, lens, sel, seg)
        want = []
        for g in sel.tolist():
            rows = np.arange(first[g], first[g] + lens[g])[valid[first[g] : first[g] + lens[g]]]
            if len(rows):
                want.append(rows[two_column_order(x[rows], y[rows])])
        want = np.concatenate(want) if want else np.zeros(0, dtype=np.int64)
        assert np.array_equal(got, want)


def test_pieces_end_where_the_running_total_reaches_the_limit():
    """pieces (the batches of the exact states and rows) against the plain loop: add items
    until the piece's total reaches the limit, end the piece with that item."""
    from dp.knapsack import pieces

    rng = np.random.default_rng(3)
    for _ in range(500):
        sizes = rng.integers(0, int(rng.choice([2, 10, 100])), size=int(rng.integers(0, 30)))
        most = int(rng.integers(1, 60))
        want, a, total = [], 0, 0
        for b, size in enumerate(sizes.tolist()):
            total += size
            if total >= most or b == len(sizes) - 1:
                want.append((a, b + 1))
                a, total = b + 1, 0
        assert list(pieces(sizes, most)) == want


def test_segment_staircase_and_order_match_their_definitions():
    """The two-column filter's pieces against their definitions: segment_xy_order is
    np.lexsort's stable (rs, x, y) order, segment_staircase keeps a row iff its y is below
    every earlier y of its run (on the bits of y when rs fits above them, else on ranks:
    raw floats, low bits cleared, few and many runs, -0.0, inf), dense_ranks is
    np.unique's inverse."""
    from dp.knapsack import dense_ranks, segment_staircase, segment_xy_order
    from dp.memory import truncate_low_bits

    rng = np.random.default_rng(17)
    for case in range(400):
        nseg = int(rng.choice([1, 5, 40, 1500, 3000]))
        n = int(rng.integers(nseg, nseg + 400))
        rs = np.sort(np.concatenate([np.arange(nseg), rng.integers(0, nseg, size=n - nseg)]))
        kind = case % 4
        if kind == 0:  # small integers: ties in x and y
            x = rng.integers(0, 6, size=n).astype(float)
            y = rng.integers(0, 6, size=n).astype(float)
        else:
            x = rng.random(n) * 10.0 ** rng.integers(-3, 12)
            y = rng.random(n) * 10.0 ** rng.integers(-3, 12)
            if kind == 1:
                y = truncate_low_bits(y, 10)
            if kind == 3:  # exact duplicates of x within runs
                x = np.round(x, 1)
        y[rng.random(n) < 0.05] = np.inf
        y[rng.random(n) < 0.05] = -0.0
        x[rng.random(n) < 0.05] = -0.0
        assert np.array_equal(dense_ranks(y), np.unique(y, return_inverse=True)[1].reshape(-1))
        order = segment_xy_order(rs, x, y)
        assert np.array_equal(order, np.lexsort((np.arange(n), y, x, rs)))
        srs, sy = rs[order], y[order]
        keep = segment_staircase(srs, sy)
        want = np.ones(n, dtype=bool)
        low = np.inf
        for i in range(n):
            if i and srs[i] != srs[i - 1]:
                low = np.inf
            want[i] = i == 0 or srs[i] != srs[i - 1] or sy[i] < low
            low = min(low, sy[i])
        assert np.array_equal(keep, want), case


@pytest.mark.parametrize("shuffled", [False, True])
def test_t_dominance_order_puts_each_pair_and_d_together_by_devices(shuffled):
    """The decision's t-dominance test reads groups of one (I, J, d) side by side by
    increasing t d: from the builder's order (sets up, J down, t up, d up) by one stable
    sort, from any other order by the full sort."""
    from dp.threshold_search import pair_d_order

    rng = np.random.default_rng(7)
    S = 8
    rows = []
    for I in range(1, 30):
        for J in sorted(rng.choice(I, size=min(I, 4), replace=False).tolist(), reverse=True):
            for t in (1, 2, 4):
                for d in sorted(rng.choice(np.arange(1, S + 1), size=3, replace=False).tolist()):
                    rows.append((I, J, d, t * d))
    g = np.array(rows, dtype=np.int64)
    if shuffled:
        g = g[rng.permutation(len(g))]
    gI, gJ, gd, gdev = (g[:, c].astype(np.int32) for c in range(4))
    o = pair_d_order(gI, gJ, gd, gdev, S)
    assert sorted(o.tolist()) == list(range(len(g)))
    keys = list(zip(gI[o].tolist(), gJ[o].tolist(), gd[o].tolist()))
    seen = set()
    for k in range(len(keys)):
        if k == 0 or keys[k] != keys[k - 1]:
            assert keys[k] not in seen, f"(I, J, d) = {keys[k]} in two places"
            seen.add(keys[k])
        else:
            assert gdev[o[k]] > gdev[o[k - 1]]
    assert len(seen) == len(set(keys))
    if not shuffled:
        # the one stable sort (the fast path) keeps the builder's order of the pairs (J
        # down within each I); the full sort would put J up
        pairs = list(dict.fromkeys(zip(gI[o].tolist(), gJ[o].tolist())))
        assert pairs == list(dict.fromkeys(zip(gI.tolist(), gJ.tolist())))


@pytest.mark.parametrize("seed", range(40))
def test_greedy_does_not_depend_on_how_stages_are_batched(seed):
    """Piper's rule runs on many stages per numpy call, each padded to the longest: a
    stage's choices and P must come out the same to the last bit alone or beside a longer
    stage. The chain bound's tables and the full tables batch differently (a last-bit
    difference once made the full greedy DP report that it lost the chain plan), and the
    plain-node path (many stages at once) and the general path (one stage at a time) must
    pick alike."""
    inst = random_instance(("chain", "skip", "ties")[seed % 3], (14, 14, 7)[seed % 3], seed)
    base = solve_dp(inst, knapsack="greedy")
    bounded = solve_dp(inst, knapsack="greedy", chain_first=0)
    general = solve_dp(inst, knapsack="greedy", plain_paths=False)
    assert bounded.status == base.status == general.status
    if base.plan is not None:
        assert bounded.objective == base.objective
        assert close(general.objective, base.objective)
        _greedy_plan_follows_rule(inst, base)
        _greedy_plan_follows_rule(inst, general)


def _greedy_plan_follows_rule(inst, sol):
    """Every stage of a greedy plan carries the options Piper's rule picks for it."""
    s = sum(stage.d for stage in sol.plan.stages)
    for stage in sol.plan.stages:
        y = -(-s // stage.d)
        want = greedy_options(inst, stage.nodes, stage.t, stage.d, y)
        assert want is not None
        assert {v: o.id for v, o in want.items()} == dict(stage.options), (stage, y)
        s -= stage.d


def test_greedy_with_the_chain_bound_keeps_the_chain_plan_on_resnet(shared_dir):
    """resnet K=64 in greedy mode with the chain bound forced: the full DP finds the chain
    plan at the bound (it once rated one of its stages a last bit higher and stopped with
    "lost the chain plan") and the same optimum as without the bound."""
    from compare.bench.dp import CONFIGS, load_config

    cfg = next(c for c in CONFIGS if c.name == "resnet-K64")
    inst = load_config(cfg, shared_dir / "piper-inputs")
    plain = solve_dp(inst, knapsack="greedy")
    bounded = solve_dp(inst, knapsack="greedy", chain_first=0)
    assert "chain_bound" in bounded.info
    assert bounded.status == plain.status == Status.FEASIBLE
    assert bounded.objective == plain.objective
