"""Stage columns under graph pipelining (piper_ilp.milp.graph_solve, the method
``columns``) against exhaustive search on small random instances and on identical
branches, its refusals, and its place in the registry."""

import pytest
from builders import make_instance, option_dict

from compare.builders.generators import FAMILIES, random_instance
from compare.builders.towers import towers
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import METHODS
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.milp.closed_sets import closed_sets
from piper_ilp.milp.graph_columns import convex_sets
from piper_ilp.milp.graph_solve import PROOF_RTOL, columns_refusal, solve_columns
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Status

FAMILIES_N = list(FAMILIES) + ["numerics"]
GRAPH_MODES = [
    Mode("graph"),
    Mode("graph", "batch-time"),
    Mode("graph", "throughput", "gpipe"),
    Mode("graph", "batch-time", "1f1b-flush"),
]


def _case(k: int):
    family = FAMILIES_N[k % len(FAMILIES_N)]
    memory = ("tight", "loose", 0.3)[k % 3]
    ts = (1, 2, 4) if k % 4 == 0 else (1, 2)
    return random_instance(family, 2 + k % 6, k, memory=memory, options_per_t=(1, 3), t_values=ts)


def _agrees(sol, brute) -> None:
    assert sol.status == brute.status, (sol.status, brute.status, sol.message)
    if brute.status is Status.OPTIMAL:
        opt = brute.value
        assert sol.bound <= opt * (1 + 1e-12)
        assert sol.value >= opt * (1 - 1e-12)  # no plan beats the oracle's optimum
        assert (sol.value - sol.bound) <= PROOF_RTOL * sol.value


def _check(inst, mode, restrictions=Restrictions(), chain=True) -> Status:
    brute = solve_brute(inst, restrictions, mode=mode, force=True)
    sol = solve_columns(inst, restrictions, mode=mode, chain=chain)
    _agrees(sol, brute)
    answered = {r["status"].startswith("chain") for r in sol.info["rounds"]}
    assert answered <= {chain}, (chain, sol.info["rounds"])
    if sol.plan is not None:
        assert evaluate(inst, sol.plan, mode).valid
        assert restrictions.violation(inst, sol.plan) is None
    return sol.status


@pytest.mark.parametrize("mode", GRAPH_MODES, ids=lambda m: m.label)
def test_columns_match_brute_on_small_instances(mode):
    seen = [_check(_case(k), mode) for k in range(24)]
    assert seen.count(Status.OPTIMAL) > 6 and Status.INFEASIBLE in seen


@pytest.mark.parametrize("mode", GRAPH_MODES[:2], ids=lambda m: m.label)
def test_columns_with_cpsat_alone_match_brute(mode):
    """``chain=False``: every round is CP-SAT's model (where the chain search gives up)."""
    seen = [_check(_case(k), mode, chain=False) for k in range(0, 24, 2)]
    assert seen.count(Status.OPTIMAL) > 3 and Status.INFEASIBLE in seen


@pytest.mark.slow
@pytest.mark.parametrize("chain", [True, False], ids=["chain", "cpsat"])
@pytest.mark.parametrize("mode", GRAPH_MODES, ids=lambda m: m.label)
def test_columns_match_brute_campaign(mode, chain):
    for k in range(100, 300 if chain else 200):
        _check(_case(k), mode, chain=chain)


def test_columns_on_identical_branches_match_brute(shared_dir):
    """Towers of identical BERT layers (many plans of one value), memory from loose to
    tight."""
    bert = load_instance(shared_dir / "piper-inputs" / "bert32a100.json")
    seen = []
    for shape, K, gib in (
        ((1, 1, 1), 8, 80),
        ((2, 2), 6, 4),
        ((2, 1, 1), 8, 3),
        ((1, 1, 1, 1), 8, 2),
    ):
        inst = towers(bert, list(shape)).with_settings(K=K, N=8, M=gib * 2**30)
        for mode in (Mode("graph"), Mode("graph", "batch-time")):
            seen.append(_check(inst, mode))
    assert seen.count(Status.OPTIMAL) >= 6


def test_columns_under_restrictions_match_brute():
    cases = [Restrictions(max_d=1), Restrictions(max_t=1)]
    for k in range(12):
        _check(_case(k), Mode("graph"), cases[k % 2])


def test_convex_sets_are_the_stage_differences():
    inst = random_instance("fork-join", 5, 2)
    sets = closed_sets(inst, 10_000)
    got = convex_sets(sets)
    want = sorted({b & ~a for b in sets for a in sets if a & ~b == 0 and a != b})
    assert got == want


def test_columns_refusals():
    assert columns_refusal(Mode("graph")) is None
    assert "graph pipelining only" in columns_refusal(Mode())
    assert "uniform" in columns_refusal(Mode("graph"), Restrictions(uniform=True))
    assert "in-flight" in columns_refusal(Mode("graph", in_flight="schedule"))
    with pytest.raises(InputError):
        solve_columns(random_instance("chain", 3, 1), mode=Mode())


def test_columns_in_the_registry_and_verify():
    m = METHODS["columns"]
    assert m.lineage == "columns" and m.kind == "milp"
    inst = _case(3)
    v = verify_instance(inst, ("dp", "columns"), mode=Mode("graph"), greedy=False)
    assert v.verdict == "match", v
    seq = verify_instance(inst, ("dp", "columns"), greedy=False)  # sequential: skipped
    assert seq.verdict == "single-proof"


@pytest.mark.parametrize("chain", [False, True], ids=["cpsat", "chain"])
def test_columns_start_from_above_keeps_the_bisections_invariant(chain):
    """Two unconnected nodes (p = 1 and 2), K = 2, N = 1: sequentially one stage (sum d <=
    N), under graph pipelining two stages of TPS 1 and 2. The search starts from the
    sequential plan (3.0) with the work bound 2.0 proven; skipping thresholds past the
    bound once claimed 3.0 optimal (campaign seed 374, shrunk). The chain search skips the
    start."""
    from piper_ilp.instance import instance_from_dict

    def node(i, p):
        o = {
            "id": "v",
            "timePerSample": p,
            "parameterSize": 0,
            "memoryUsageA": 1,
            "memoryUsageB": 0,
            "syncTimeFw": {},
            "syncTimeBw": {},
        }
        return {"id": i, "TMPCs": {"1": [o]}}

    inst = instance_from_dict(
        {
            "maxDevices": 2,
            "maxMemoryPerDevice": 100,
            "bandwidth": 1,
            "mbsInBatch": 1,
            "nodes": [node(0, 1.0), node(1, 2.0)],
            "edges": [],
        }
    )
    assert _check(inst, Mode("graph"), chain=chain) is Status.OPTIMAL
    sol = solve_columns(inst, mode=Mode("graph"), chain=chain)
    assert sol.value == 2.0
    assert ("start" in sol.info) is not chain  # the sequential start: CP-SAT alone


@pytest.mark.parametrize("path_rows", [True, False], ids=["path-rows", "no-path-rows"])
def test_columns_path_rows_keep_every_plan(path_rows):
    """The path rows bind where memory is tight along long paths (chains, towers, a
    fork-join): with and without them the column method (CP-SAT alone: the rows are
    CP-SAT's) agrees with brute, and a row
    one microbatch too strict would cut the optimum (checked by hand)."""
    seen = []
    for k in range(8):
        family = ("chain", "towers", "fork-join", "skip")[k % 4]
        inst = random_instance(family, 5 + k % 3, 40 + k, memory="tight", options_per_t=(1, 3))
        for mode in (Mode("graph"), Mode("graph", "batch-time")):
            brute = solve_brute(inst, mode=mode, force=True)
            sol = solve_columns(inst, mode=mode, path_rows=path_rows, chain=False)
            _agrees(sol, brute)
            seen.append(sol.status)
    assert seen.count(Status.OPTIMAL) > 4


def _two_node_chain(K: int, M: float):
    """0 -> 1, one option each (p = 1, one byte per microbatch in flight), N = 2."""
    nodes = [
        (0, {"1": [option_dict(p=1.0, a=1.0, sbw={1: 0.0})]}),
        (1, {"1": [option_dict(p=1.0, a=1.0, sfw={0: 0.0})]}),
    ]
    return make_instance(nodes, [(0, 1, 0.0)], K=K, N=2, M=M)


@pytest.mark.parametrize("K, M", [(1, 1.5), (2, 0.5), (64, 0.5)])
def test_columns_proves_a_tiny_infeasible_instance_in_few_rounds(K, M):
    # hunt38 F1. K = 1: one stage holding both nodes needs 2 bytes at y = 1 (M = 1.5);
    # M = 0.5: no node fits anywhere. Each is infeasible. A (t, d) with t d = K leaves no
    # device to the other node, so it is no column at any bound (1,221 rounds at K = 1 when
    # the catalog waited for it), and the bound's steps grow, so that from the work bound at
    # K = 64 the catalog is complete in a few rounds (48 at a fixed 3 %).
    sol = solve_columns(_two_node_chain(K, M), mode=Mode("graph"))
    assert sol.status is Status.INFEASIBLE
    assert len(sol.info["rounds"]) <= 8, len(sol.info["rounds"])


def test_chain_search_gives_up_above_its_labels_and_cpsat_answers():
    """With room for one label the chain search returns None (no claim); solve_columns
    then asks CP-SAT, for that round and the later ones, and the answer is brute's."""
    from piper_ilp.milp.graph_chain import chain_search
    from piper_ilp.milp.graph_columns import ColumnCatalog
    from piper_ilp.milp.path_rule import PiperRule

    inst = random_instance("towers", 7, 5, memory="tight", options_per_t=(1, 3))
    degrees = Restrictions().d_values(inst)
    catalog = ColumnCatalog(inst, closed_sets(inst, 10_000), degrees, PiperRule())
    cols, complete = catalog.columns(float("inf"))
    assert complete and cols
    assert chain_search(catalog, cols, inst.K, max_labels=1) is None
    whole = chain_search(catalog, cols, inst.K)
    brute = solve_brute(inst, mode=Mode("graph"), force=True)
    assert (whole.columns is None) == (brute.plan is None)
    for mode in (Mode("graph"), Mode("graph", "batch-time")):
        sol = solve_columns(inst, mode=mode, max_labels=1)
        _agrees(sol, solve_brute(inst, mode=mode, force=True))
        by_chain = [r["status"].startswith("chain") for r in sol.info["rounds"]]
        # rounds the device bound settles at once stay the chain's; from the first it
        # gives up on, CP-SAT answers every round
        assert False in by_chain and True not in by_chain[by_chain.index(False) :], by_chain


@pytest.mark.slow
def test_columns_proves_mmt2_in_both_objectives(shared_dir):
    """Issue 35's two-branch multi-modal transformer (bench modes --graphpipe): optimal,
    the DP's value, in both objectives; CP-SAT alone stops at its time limit there (one
    clock: this process's CPU seconds) and says so, with a bound on the value's scale."""
    from compare.bench.modes import GRAPHPIPE_ROWS, graphpipe_instance
    from dp.modes import solve_modes

    row = next(r for r in GRAPHPIPE_ROWS if r[0] == "mmt2")
    inst = graphpipe_instance(shared_dir / "piper-inputs" / "bert32a100.json", *row[1:])
    for mode in (Mode("graph"), Mode("graph", "batch-time")):
        sol = solve_columns(inst, mode=mode)
        dp = solve_modes(inst, mode=mode)
        assert sol.status is Status.OPTIMAL, sol.message
        assert abs(sol.value - dp.value) <= 1e-9 * dp.value
        assert sol.bound >= sol.value * (1 - PROOF_RTOL)
        stopped = solve_columns(inst, mode=mode, chain=False, time_limit=5.0)
        assert stopped.status in (Status.FEASIBLE, Status.UNKNOWN)
        assert "time limit" in stopped.message
        if stopped.plan is not None:  # a bound on the mode's value (N x a TPS bound)
            assert dp.value / 2 < stopped.bound <= dp.value * (1 + 1e-9), stopped.bound


@pytest.mark.slow
def test_columns_proves_mmt4_up_to_symmetry(shared_dir):
    """Issue 35's four-branch multi-modal transformer: more candidate stages than
    max_stages, so the chain search walks the sets up to its interchangeable branches;
    optimal at the DP's value in both objectives, and with one label too few it stops and
    says so (no CP-SAT fallback on such a catalog)."""
    from compare.bench.modes import GRAPHPIPE_ROWS, graphpipe_instance
    from dp.modes import solve_modes

    row = next(r for r in GRAPHPIPE_ROWS if r[0] == "mmt4")
    inst = graphpipe_instance(shared_dir / "piper-inputs" / "bert32a100.json", *row[1:])
    for mode in (Mode("graph"), Mode("graph", "batch-time")):
        sol = solve_columns(inst, mode=mode)
        dp = solve_modes(inst, mode=mode)
        assert sol.status is Status.OPTIMAL, sol.message
        assert sol.info["orbit_sets"] < sol.info["sets"]
        assert abs(sol.value - dp.value) <= 1e-9 * dp.value
        assert sol.bound >= sol.value * (1 - PROOF_RTOL)
        assert evaluate(inst, sol.plan, mode).valid
    few = solve_columns(inst, mode=Mode("graph"), max_labels=1)
    assert few.status is Status.UNKNOWN and "labels" in few.message, few.message


def _branches(seed: int):
    """A random instance with interchangeable branches: a source, k chains of L nodes with
    the same random options position by position, a join and maybe one node after it
    (at most 8 nodes, so that brute force answers)."""
    import random

    rng = random.Random(seed)
    k, L = rng.choice([(2, 1), (2, 2), (3, 1), (3, 2), (2, 3)])
    tail = int(k * L < 6 and rng.random() < 0.5)
    kinds = ["source"] + [f"b{i}" for i in range(L)] + ["join"] + ["tail"] * tail
    ts = ("1", "2") if rng.random() < 0.5 else ("1",)
    prof = {
        kind: {
            t: [
                (rng.uniform(0.3, 3.0) / int(t), rng.uniform(0.3, 1.0), rng.uniform(0.05, 0.3))
                for _ in range(rng.choice([1, 2]))
            ]
            for t in ts
        }
        for kind in kinds
    }
    sync = {kind: (rng.choice([0.0, 0.1]), rng.choice([0.0, 0.2])) for kind in kinds}
    cost = {kind: rng.choice([0.0, 0.5, 2.0]) for kind in kinds}  # the edge into it
    ids = {"source": [0], "join": [1 + k * L], "tail": [2 + k * L] if tail else []}
    for i in range(L):
        ids[f"b{i}"] = [1 + j * L + i for j in range(k)]
    kind_of = {v: kind for kind, vs in ids.items() for v in vs}
    edges = [(0, 1 + j * L, cost["b0"]) for j in range(k)]
    edges += [
        (1 + j * L + i, 2 + j * L + i, cost[f"b{i + 1}"]) for j in range(k) for i in range(L - 1)
    ]
    edges += [(j * L + L, 1 + k * L, cost["join"]) for j in range(k)]
    edges += [(1 + k * L, 2 + k * L, cost["tail"])] if tail else []
    nodes = []
    for v in sorted(kind_of):
        kind = kind_of[v]
        fw, bw = sync[kind]
        sfw = {u: fw for u, x, _ in edges if x == v}
        sbw = {x: bw for u, x, _ in edges if u == v}
        tm = {
            t: [option_dict(f"o{m}", p, w, a, 0.0, sfw, sbw) for m, (p, w, a) in enumerate(opts)]
            for t, opts in prof[kind].items()
        }
        nodes.append((v, tm))
    K = rng.choice([4, 6, 8])
    return make_instance(
        nodes, edges, K=K, N=rng.choice([2, 4, 8]), M=rng.choice([1.0, 1.5, 2.5, 3.5])
    )


@pytest.mark.parametrize("mode", GRAPH_MODES, ids=lambda m: m.label)
def test_columns_up_to_symmetry_match_brute(mode):
    """``orbits=True``: the chain search walks the successor-closed sets up to
    interchangeable branches (canonical sets, labels moved, stages' columns moved from
    their canonical forms); the answer is brute force's, and fewer sets are walked."""
    from piper_ilp.milp.symmetry import find_symmetry

    seen = []
    for seed in range(24):
        inst = _branches(seed)
        assert find_symmetry(inst).classes
        brute = solve_brute(inst, mode=mode, force=True)
        sol = solve_columns(inst, mode=mode, orbits=True)
        _agrees(sol, brute)
        assert sol.info["orbit_sets"] < sol.info["sets"]
        assert all(r["status"].startswith("chain") for r in sol.info["rounds"])
        if sol.plan is not None:
            assert evaluate(inst, sol.plan, mode).valid
        seen.append(0 if sol.plan is None else len(sol.plan.stages))
    assert seen.count(0) < 12 and max(seen) >= 4, seen


def test_chain_search_up_to_symmetry_answers_as_over_every_set():
    """Round by round, the chain search over the canonical sets (labels moved to each
    set's canonical form, stages' columns moved from theirs) answers as the search over
    every set: the same feasibility at each bound, the same least longest path, and a
    plan whose stages cover the nodes once (the moves composed on the way back)."""
    from piper_ilp.milp.graph_chain import chain_search
    from piper_ilp.milp.graph_columns import ColumnCatalog
    from piper_ilp.milp.graph_orbits import Orbits
    from piper_ilp.milp.path_rule import PiperRule

    compared = 0
    for seed in range(40):
        inst = _branches(seed).with_settings(N=16)
        sets = closed_sets(inst, 10_000)
        degrees = list(range(1, inst.K + 1))
        whole = ColumnCatalog(inst, sets, degrees, PiperRule())
        orb = ColumnCatalog(inst, sets, degrees, PiperRule(), orbits=Orbits(inst))
        assert orb.orbits is not None and len(orb.walk) < len(sets)
        cols, _ = whole.columns(float("inf"))
        lows = sorted({c.low for c in cols})
        for bound in lows[:: max(1, len(lows) // 6)]:
            got = []
            for cat in (whole, orb):
                sub = [c for c in cat.columns(bound)[0] if c.usable(bound, inst.K)]
                lat = [round(c.d * c.cost * 1e6) for c in sub]
                ans = chain_search(cat, sub, inst.K, lat)
                if ans.columns is not None:
                    covered = sorted(v for c in ans.columns for v in c.nodes)
                    assert covered == sorted(inst.node_ids)
                got.append(None if ans.columns is None else ans.latency)
            assert got[0] == got[1], (seed, bound, got)
            compared += got[0] is not None
    assert compared > 40


def test_orbits_canonical_forms_against_every_permutation():
    """Canonical forms by brute force: two sets have one form exactly when some
    permutation of the interchangeable chains maps one onto the other; the move given
    maps the set onto its form; the chain search's frontier order is that move's."""
    import itertools

    from piper_ilp.milp.graph_chain import _target
    from piper_ilp.milp.graph_columns import ColumnCatalog
    from piper_ilp.milp.graph_orbits import Orbits, move_mask
    from piper_ilp.milp.path_rule import PiperRule

    for seed in range(12):
        inst = _branches(seed)
        orb = Orbits(inst)
        (cls,) = orb.classes
        sets = closed_sets(inst, 10_000)
        moves = []
        for perm in itertools.permutations(range(len(cls))):
            rho = list(range(orb.n))
            for j, i in enumerate(perm):
                for a, b in zip(cls[j], cls[i]):
                    rho[a] = b
            moves.append(tuple(rho))
        catalog = ColumnCatalog(inst, sets, [1], PiperRule(), orbits=orb)
        keys: dict = {}
        for I in sets:
            home, rho = orb.canon(I)
            assert move_mask(I, rho) == home and home in sets
            assert all(orb.canon(move_mask(I, m))[0] == home for m in moves)
            assert home == min((move_mask(I, m) for m in moves), key=lambda x: orb.canon(x)[0] != x)
            got_home, src = _target(catalog, I, keys)
            frontier = [u for u in range(orb.n) if I >> u & 1 and catalog.pred[u] & ~I]
            assert got_home == home and sorted(src) == frontier
            assert [rho[u] for u in src] == list(keys[home])
        forms = {orb.canon(I)[0] for I in sets}
        orbits = {frozenset(move_mask(I, m) for m in moves) for I in sets}
        assert len(forms) == len(orbits) < len(sets)
