"""The compiled prototype (dp.compiled) against the Python DP, exhaustive search and
math.fsum."""

import math
import random

import numpy as np
import pytest

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from dp import solve_dp
from dp.compiled import MAX_NODES, solve_compiled
from dp.compiled.kernel import fsum
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.solution import Restrictions, Status

FAMILIES = ("chain", "skip", "layered", "series-parallel", "fork-join", "towers", "numerics")


def _fsum(vals):
    arr = np.array(vals, dtype=np.float64)
    return fsum(arr, len(arr), np.empty(len(arr) + 1))


def test_fsum_is_math_fsum_bit_for_bit():
    rng = random.Random(7)
    cases = [[], [0.0], [1e16, 1.0, 1.0], [0.1] * 10, [1e308, 1e308 * 0.5, -1e308]]
    for _ in range(2000):
        k = rng.randint(1, 12)
        cases.append(
            [rng.choice((1, -1)) * rng.random() * 10.0 ** rng.randint(-20, 20) for _ in range(k)]
        )
        # sums near a midpoint between two floats: the final rounding decides
        cases.append([1.0, 2.0**-53, 2.0**-53 * rng.choice((1e-10, -1e-10, 0.0))])
    for vals in cases:
        assert _fsum(vals).hex() == math.fsum(vals).hex(), vals


@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_matches_python_dp(family):
    # (numerics 9 nodes seed 1 has a stage whose every choice at y = 2 passes M by one ulp)
    for nodes, seed in ((8, 0), (9, 1), (10, 1), (12, 2)):
        inst = random_instance(family, nodes, seed)
        want = solve_dp(inst, knapsack="exact")
        got = solve_compiled(inst)
        assert got.status == want.status, inst.source
        assert repr(got.tps) == repr(want.tps), inst.source
        if got.status == Status.OPTIMAL:
            # every stage cost is the evaluator's: the kernel's value is the plan's TPS
            assert got.objective == got.tps


@pytest.mark.parametrize("seed", range(6))
def test_compiled_matches_brute(seed):
    family = FAMILIES[seed % len(FAMILIES)]
    inst = random_instance(family, 5, seed, t_values=(1, 2), memory="tight")
    want = solve_brute(inst)
    got = solve_compiled(inst)
    assert got.status == want.status, inst.source
    assert repr(got.tps) == repr(want.tps), inst.source


@pytest.mark.parametrize(
    "restrictions",
    [
        Restrictions(max_d=1),
        Restrictions.from_flags(no_recompute=True),
        Restrictions(max_t=1),
        Restrictions(degrees=(2, 1)),
        Restrictions(exclude_options=frozenset({"vanilla", "activation recomp"})),
    ],
)
def test_compiled_matches_python_dp_under_restrictions(restrictions):
    for family, seed in (("layered", 3), ("numerics", 4)):
        inst = random_instance(family, 9, seed, t_values=(1, 2))
        want = solve_dp(inst, restrictions, knapsack="exact")
        got = solve_compiled(inst, restrictions)
        assert got.status == want.status, (inst.source, restrictions)
        assert repr(got.tps) == repr(want.tps), (inst.source, restrictions)


def test_compiled_refuses_large_graphs():
    with pytest.raises(InputError, match="at most"):
        solve_compiled(random_instance("chain", MAX_NODES + 1, 0))
    big = random_instance("chain", 4, 0, K=2**20, N=2**20)
    with pytest.raises(SizeLimitError, match="MiB"):
        solve_compiled(big)
    with pytest.raises(InputError, match="uniform"):
        solve_compiled(random_instance("chain", 4, 0), Restrictions(uniform=True))
