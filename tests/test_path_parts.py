"""The path formulation's building blocks against their definitions: the successor-closed
sets and stage pairs on every subset of small graphs, the exact option choice against
enumeration, the exact memory scale against fsum."""

import itertools
import math
import random

import numpy as np
import pytest

from compare.builders.generators import FAMILIES, random_instance
from piper_ilp.errors import SizeLimitError
from piper_ilp.milp.closed_sets import closed_sets, stage_pairs, successor_bits
from piper_ilp.milp.stage_choice import (
    ExactScale,
    cheapest_fitting,
    fractional_bound,
    fractional_bound_arrays,
)


def _closed_by_definition(inst) -> list[int]:
    pos = {v: k for k, v in enumerate(inst.node_ids)}
    n = len(pos)
    out = []
    for mask in range(1 << n):
        if all(not (mask >> pos[e.src] & 1) or (mask >> pos[e.dst] & 1) for e in inst.edges):
            out.append(mask)
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [1, 4, 8, 11])
def test_closed_sets_are_exactly_the_successor_closed_subsets(family, n):
    inst = random_instance(family, n, seed=n)
    sets = closed_sets(inst, 1 << n)
    assert sorted(sets) == _closed_by_definition(inst)
    assert len(set(sets)) == len(sets)
    sizes = [bin(s).count("1") for s in sets]
    assert sizes == sorted(sizes) and sets[0] == 0 and sets[-1] == (1 << n) - 1
    succ = successor_bits(inst)
    assert sum(bin(b).count("1") for b in succ) == len({(e.src, e.dst) for e in inst.edges})


@pytest.mark.parametrize("family", FAMILIES)
def test_stage_pairs_are_the_strictly_nested_pairs(family):
    inst = random_instance(family, 7, seed=3)
    sets = closed_sets(inst, 1000)
    expected = {
        (j, i)
        for i, j in itertools.product(range(len(sets)), repeat=2)
        if sets[j] & ~sets[i] == 0 and sets[j] != sets[i]
    }
    pairs = stage_pairs(sets)
    assert len(pairs) == len(expected) and set(pairs) == expected


def test_closed_sets_refuse_above_the_limit():
    inst = random_instance("layered", 10, seed=1)
    count = len(closed_sets(inst, 10_000))
    with pytest.raises(SizeLimitError, match="successor-closed sets"):
        closed_sets(inst, count - 1)


def _enumerate(items, capacity):
    best = None
    for pick in itertools.product(*[range(len(o)) for o in items]):
        mem = sum(items[k][li][0] for k, li in enumerate(pick))
        cost = math.fsum(items[k][li][1] for k, li in enumerate(pick))
        if mem <= capacity and (best is None or cost < best):
            best = cost
    return best


def test_cheapest_fitting_equals_enumeration():
    rng = random.Random(7)
    for case in range(400):
        n = rng.randint(1, 6)
        kinds = [
            [(rng.randint(0, 20), float(rng.randint(1, 30))) for _ in range(rng.randint(1, 3))]
            for _ in range(rng.randint(1, 3))
        ]
        items = [rng.choice(kinds) for _ in range(n)]  # repeated nodes are grouped
        capacity = rng.randint(0, 20 * n)
        want = _enumerate(items, capacity)
        got = cheapest_fitting(items, capacity)
        if want is None:
            assert got is None, case
            continue
        cost, choice = got
        assert math.isclose(cost, want, rel_tol=1e-12), case
        assert sum(items[k][li][0] for k, li in enumerate(choice)) <= capacity
        assert math.isclose(math.fsum(items[k][li][1] for k, li in enumerate(choice)), want)
        assert fractional_bound(items, capacity) <= want * (1 + 1e-12), case
        # a limit below the optimum leaves nothing; at the optimum the same cost
        assert cheapest_fitting(items, capacity, cost_limit=want * 0.999 - 1e-9) is None
        assert cheapest_fitting(items, capacity, cost_limit=want)[0] == cost


def test_float_knapsack_and_array_bound_against_enumeration():
    """Float memories (as the path formulation's first pass uses them), nodes with
    different option counts (padded with inf in the arrays), limits at the optimum."""
    rng = random.Random(19)
    for case in range(400):
        n = rng.randint(1, 6)
        items = [
            [(rng.uniform(0, 10) / 3, rng.uniform(0.1, 5)) for _ in range(rng.randint(1, 4))]
            for _ in range(n)
        ]
        capacity = rng.uniform(0, 8 * n) / 3
        want = _enumerate(items, capacity)
        width = max(len(o) for o in items)
        mem = np.full((n, width), np.inf)
        cost = np.full((n, width), np.inf)
        for k, opts in enumerate(items):
            mem[k, : len(opts)] = [m for m, _ in opts]
            cost[k, : len(opts)] = [c for _, c in opts]
        bound = fractional_bound_arrays(mem, cost, capacity)
        reference = fractional_bound(items, capacity)
        assert bound == reference or math.isclose(bound, reference, rel_tol=1e-12), case
        got = cheapest_fitting(items, capacity)
        if want is None:
            assert got is None and bound == math.inf, case
            continue
        assert bound <= want * (1 + 1e-12), case
        assert math.isclose(got[0], want, rel_tol=1e-12), case
        assert sum(items[k][li][0] for k, li in enumerate(got[1])) <= capacity
        assert cheapest_fitting(items, capacity, cost_limit=got[0])[0] == got[0], case
        assert cheapest_fitting(items, capacity, cost_limit=want * (1 - 1e-6)) is None, case


def test_exact_scale_decides_like_fsum():
    rng = random.Random(11)
    for _ in range(2000):
        terms = [rng.choice([0.1, 0.3, 1 / 3, 2.5e-7, 1e6 / 7, 3.0]) * rng.randint(1, 9)]
        terms += [rng.uniform(0, 5) for _ in range(rng.randint(0, 4))]
        total = math.fsum(terms)
        M = rng.choice([total, math.nextafter(total, 0), math.nextafter(total, math.inf)])
        if M <= 0:
            continue
        sc = ExactScale(terms, M)
        exact = sum(sc.exact(x) for x in terms)
        assert (exact <= sc.capacity()) == (math.fsum(terms) <= M)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_rough_pruning_decides_like_the_full_catalog(schedule):
    """The two-pass arcs (rough arcs pruned, then exact ones for what is left) give the
    same fewest devices as every exact arc pruned, at thresholds around each optimum."""
    from piper_ilp.milp.path_arcs import ArcCatalog
    from piper_ilp.milp.path_bounds import prune, usable_arcs
    from piper_ilp.milp.path_network import build_network, least_devices
    from piper_ilp.milp.path_rule import rule_for
    from piper_ilp.milp.path_solve import solve_path
    from piper_ilp.mode import Mode
    from piper_ilp.solution import Restrictions

    mode = Mode("sequential", "throughput", schedule)
    compared = 0
    for k in range(40):
        family = FAMILIES[k % len(FAMILIES)]
        inst = random_instance(family, 3 + k % 5, k, memory=("tight", 0.3)[k % 2], K=8, N=8)
        sol = solve_path(inst, mode=mode)
        if sol.value is None:
            continue
        rule = rule_for(mode, inst.N)
        inst = Restrictions().apply(inst)
        sets = closed_sets(inst, 10_000)
        catalog = ArcCatalog(inst, sets, stage_pairs(sets), Restrictions().d_values(inst), rule)
        for T in (sol.value * 0.9, sol.value * (1 - 1e-9), sol.value, sol.value * 1.3):
            full = prune(catalog.arcs_at(T), len(sets), inst.K, inst.N)
            _, two = usable_arcs(catalog, T, inst.K, inst.N)
            want = least_devices(build_network(full.arcs, full, len(sets), inst.K, inst.N, rule))
            got = least_devices(build_network(two.arcs, two, len(sets), inst.K, inst.N, rule))
            assert got[0] == want[0], (k, T)
            compared += 1
    assert compared > 60
