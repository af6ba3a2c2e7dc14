"""The label DP up to interchangeable branches (dp/symmetry.py, dp/label_orbits.py): the
same values as the DP without it (symmetry=False) on random graphs with and without identical
branches, in every mode; the exhaustive oracle on small ones; what counts as interchangeable."""

from __future__ import annotations

import math
import random

import pytest
from builders import make_instance, option_dict

from compare.builders.generators import random_instance
from compare.crosscheck.brute import brute_applies, solve_brute
from dp.ideals import successor_masks
from dp.modes import predecessor_masks, solve_modes
from dp.symmetry import find_branches
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import ALL_MODES, Mode
from piper_ilp.solution import Restrictions, Status

NON_DEFAULT = [m for m in ALL_MODES if not m.is_default]
GRAPH = [m for m in NON_DEFAULT if m.graph]


def branchy(seed: int, *, perturb: bool = False, names: bool = False):
    """A random graph of parallel branches: an optional source, classes of identical copies
    of a random chain (1-2 layers, 2-3 copies), sometimes one odd branch, a sink; sync
    bytes keyed by each copy's own neighbours. ``perturb``: one copy's first layer runs
    slightly slower (so it is not interchangeable). ``names``: every node named apart."""
    rng = random.Random(seed)
    t_values = (1, 2) if rng.random() < 0.7 else (1,)
    has_source = rng.random() < 0.7
    # at most 13 nodes, so that the DP without symmetry stays quick
    classes = [(rng.randint(1, 2), rng.randint(2, 3))]
    if rng.random() < 0.5:
        classes.append((1, rng.randint(2, 3)))
    if rng.random() < 0.4:
        classes.append((rng.randint(1, 2), 1))
    nxt = 1 if has_source else 0
    branches = []  # per branch: (class index, node ids)
    for ci, (length, copies) in enumerate(classes):
        for _ in range(copies):
            branches.append((ci, list(range(nxt, nxt + length))))
            nxt += length
    sink = nxt
    # per class and position: options per t, with sync bytes by role (in / out)
    protos = {}
    for ci, (length, _) in enumerate(classes):
        for k in range(length):
            protos[ci, k] = {
                t: [
                    (
                        rng.uniform(0.5, 2.0) / t,
                        rng.uniform(0, 3),
                        rng.uniform(0.5, 2.0),
                        rng.uniform(0, 2),
                        rng.uniform(0, 1),
                        rng.uniform(0, 1),
                    )
                    for _ in range(rng.randint(1, 2))
                ]
                for t in t_values
            }
    edge_c = {
        ci: [rng.uniform(0, 2) for _ in range(length + 1)] for ci, (length, _) in enumerate(classes)
    }

    def opts(vals, pred, succ, slow=1.0):
        return {
            str(t): [
                option_dict(
                    f"o{i}", p * slow, w, a, b, {u: si for u in pred}, {v: so for v in succ}
                )
                for i, (p, w, a, b, si, so) in enumerate(vs)
            ]
            for t, vs in vals.items()
        }

    nodes, edges = [], []
    end = {t: [(rng.uniform(0.2, 1.0) / t, 0.0, 0.5, 0.5, 0.0, 0.0)] for t in t_values}
    heads = [ids[0] for _, ids in branches]
    tails = [ids[-1] for _, ids in branches]
    if has_source:
        nodes.append((0, opts(end, [], heads)))
    perturbed = False
    for ci, ids in branches:
        for k, v in enumerate(ids):
            pred = ([0] if has_source else []) if k == 0 else [ids[k - 1]]
            succ = [sink] if k == len(ids) - 1 else [ids[k + 1]]
            slow = 1.0
            if perturb and not perturbed and k == 0 and classes[ci][1] > 1:
                slow, perturbed = 1.01, True
            nodes.append((v, opts(protos[ci, k], pred, succ, slow)))
            for u in pred:
                edges.append((u, v, edge_c[ci][k]))
        edges.append((ids[-1], sink, edge_c[ci][-1]))
    nodes.append((sink, opts(end, tails, [])))
    K = rng.choice((4, 6, 8))
    N = rng.choice((4, 8, 16))
    inst = make_instance(nodes, edges, K=K, N=N, M=rng.uniform(2.0, 12.0), B=2.0)
    if names:
        d = inst  # names live on the JSON form only; rebuild with them
        from piper_ilp.instance import instance_from_dict, instance_to_dict

        data = instance_to_dict(d)
        for nd in data["nodes"]:
            nd["name"] = f"layer{nd['id']}"
        inst = instance_from_dict(data)
    return inst


def same_as_plain(inst, mode, restrictions=Restrictions()):
    """Solve with and without symmetry: the same status and value (exactly), both plans
    accepted by the evaluator at that value."""
    plain = solve_modes(inst, restrictions, mode=mode, symmetry=False, force=True)
    sym = solve_modes(inst, restrictions, mode=mode, symmetry=True, force=True)
    assert sym.status == plain.status, (mode.label, sym.status, plain.status)
    if plain.status is Status.OPTIMAL:
        assert sym.value == plain.value, (mode.label, sym.value, plain.value)
        ev = evaluate(inst, sym.plan, mode)
        assert ev.valid and ev.value == sym.value
    return sym


def test_finds_identical_branches_and_only_those():
    inst = branchy(3)
    succ = successor_masks(inst)
    br = find_branches(inst, succ, predecessor_masks(succ))
    assert br is not None and all(len(c) >= 2 for c in br.classes)
    # a copy made slightly slower leaves its class (or the class goes when only two)
    for seed in range(40):
        plain, odd = branchy(seed), branchy(seed, perturb=True)
        s1, s2 = successor_masks(plain), successor_masks(odd)
        b1 = find_branches(plain, s1, predecessor_masks(s1))
        b2 = find_branches(odd, s2, predecessor_masks(s2))
        n1 = sum(len(c) for c in b1.classes) if b1 else 0
        n2 = sum(len(c) for c in b2.classes) if b2 else 0
        assert n2 < n1
        # names are not read
        named = branchy(seed, names=True)
        s3 = successor_masks(named)
        b3 = find_branches(named, s3, predecessor_masks(s3))
        assert (b3.classes if b3 else None) == (b1.classes if b1 else None)


def test_no_branches_in_a_chain():
    inst = random_instance("chain", 6, 1)
    succ = successor_masks(inst)
    assert find_branches(inst, succ, predecessor_masks(succ)) is None


@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_same_values_as_without_symmetry_on_branchy_graphs(mode):
    seen = set()
    for seed in range(6):
        seen.add(same_as_plain(branchy(seed), mode).status)
        same_as_plain(branchy(seed, perturb=True), mode)
    assert Status.OPTIMAL in seen


@pytest.mark.parametrize("mode", GRAPH, ids=lambda m: m.label)
def test_same_values_on_random_families(mode):
    for family in ("fork-join", "layered", "series-parallel", "towers"):
        for seed in range(3):
            same_as_plain(random_instance(family, 7, seed, K=8, N=8), mode)


def test_same_values_under_restrictions():
    for seed in range(4):
        inst = branchy(seed)
        for r in (Restrictions(max_d=2), Restrictions(max_t=1)):
            same_as_plain(inst, Mode("graph", "batch-time"), r)


@pytest.mark.parametrize("mode", GRAPH, ids=lambda m: m.label)
def test_agrees_with_brute_on_small_branchy_graphs(mode):
    checked = 0
    for seed in range(60):
        inst = branchy(seed)
        if len(inst.nodes) > 7 or not brute_applies(inst):
            continue
        ref = solve_brute(inst, mode=mode)
        got = solve_modes(inst, mode=mode)
        assert got.status == ref.status
        if ref.status is Status.OPTIMAL:
            assert math.isclose(got.value, ref.value, rel_tol=1e-9)
            checked += 1
    assert checked >= 5


@pytest.mark.slow
@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_same_values_sweep(mode):
    for seed in range(100, 250):
        same_as_plain(branchy(seed), mode)
