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
