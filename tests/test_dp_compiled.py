"""The compiled prototype (dp.compiled) against the Python DP, exhaustive search and
math.fsum."""

import itertools
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
    # signed zeros (math.fsum keeps no zero partial: zeros alone give +0.0), one and two values
    cases += [[-0.0], [-0.0, -0.0], [-0.0, 0.0], [-0.0] * 3, [1.0, -1.0], [-1.0, 1.0, -0.0]]
    cases += [[2.0**-1074], [2.0**-1074, 2.0**-1074], [1.0, 2.0**-53], [1.0, 2.0**-53 + 2.0**-105]]
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


@pytest.mark.parametrize("family", FAMILIES)
def test_kernel_arrays_hold_every_option_and_edge(family):
    """kernel_arrays (flat lists packed by the kernel) against a direct read of each
    option and edge, and its sets against dp.ideals, on instances with missing options."""
    from dp.compiled.small_dp import kernel_arrays
    from dp.ideals import enumerate_ideals
    from piper_ilp.cost import cut_edge_bytes

    for seed in range(3):
        for kw in ({}, {"options_per_t": (1, 4)}, {"t_values": (1, 2, 4)}):
            inst = Restrictions.from_flags(no_recompute=seed == 1).apply(
                random_instance(family, 4 + 3 * seed, seed, **kw)
            )
            ideals, n, tv, nopt, P, W, A, Bm, deg, nb, term = kernel_arrays(inst)
            assert ideals.tolist() == enumerate_ideals(inst, 10**6)
            assert n == len(inst.nodes) and tv.tolist() == inst.t_values
            for i, v in enumerate(inst.node_ids):
                edges = [(u, c, "sfw") for u, c in inst.in_edges[v]]
                edges += [(x, c, "sbw") for x, c in inst.out_edges[v]]
                assert deg[i] == len(edges)
                assert nb[i, : deg[i]].tolist() == [inst.node_ids.index(u) for u, _, _ in edges]
                for ti, t in enumerate(inst.t_values):
                    opts = inst.node[v].options.get(t, ())
                    assert nopt[i, ti] == len(opts)
                    for o, opt in enumerate(opts):
                        got = (P[i, ti, o], W[i, ti, o], A[i, ti, o], Bm[i, ti, o])
                        assert got == (opt.p, opt.w, opt.a, opt.b)
                        for k, (u, c, side) in enumerate(edges):
                            want = cut_edge_bytes(c, getattr(opt, side)[u])
                            assert term[i, ti, o, k] == want
    wide = random_instance("layered", 12, 0)
    count = len(enumerate_ideals(wide, 10**6))
    assert len(kernel_arrays(wide, count)[0]) == count
    with pytest.raises(SizeLimitError, match="successor-closed sets"):
        kernel_arrays(wide, count - 1)


def _stage_lower_bounds(inst, C, ti, dv):
    """The kernel's per-d lower bounds of stage C (a bitmask) under t index ti."""
    from dp.compiled.kernel import _lower_bounds, _prepare
    from dp.compiled.small_dp import kernel_arrays

    _, n, _, nopt, P, W, _, _, deg, nb, term = kernel_arrays(inst)
    L = P.shape[2]
    nodes, nodeE = np.empty(n, np.int64), np.empty((n, L))
    scratch = np.empty(2 * n + nb.shape[1] + 2)
    kind = _prepare(C, n, ti, nopt, deg, nb, term, nodes, nodeE, scratch, scratch.copy())
    lb = np.empty(len(dv))
    if kind >= 0:
        size = bin(C).count("1")
        _lower_bounds(nodes, size, ti, nodeE, nopt, P, W, dv, inst.N, float(inst.B), lb)
    return kind, lb


@pytest.mark.parametrize("family", (*FAMILIES, "ties"))
def test_stage_lower_bound_is_below_every_choice(family):
    # the kernel skips a stage cost whose lower bound cannot lower the search's table: the
    # bound must be at most the evaluator's cost of every choice of options (memory aside)
    from piper_ilp.cost import stage_cost

    rng = random.Random(5)
    for seed in range(3):
        inst = random_instance(family, 6, seed, t_values=(1, 2), options_per_t=(1, 3))
        ids = inst.node_ids
        dv = np.array([1, 2, 3, 4], np.int64)
        for _ in range(6):
            C = rng.randrange(1, 1 << len(ids))
            members = [ids[i] for i in range(len(ids)) if (C >> i) & 1]
            for ti, t in enumerate(inst.t_values):
                kind, lb = _stage_lower_bounds(inst, C, ti, dv)
                if kind < 0:
                    continue
                per_node = [inst.node[v].options[t] for v in members]
                for choice in itertools.product(*per_node):
                    opts = dict(zip(members, choice))
                    for di, d in enumerate(dv.tolist()):
                        assert lb[di] <= stage_cost(inst, members, d, opts).tps, inst.source


@pytest.mark.parametrize("family", (*FAMILIES, "ties"))
def test_compiled_skips_stage_costs_and_matches_brute(family):
    # the skips (stage costs that cannot lower the table, memory that cannot fit at a
    # larger y) happen here and leave the optimum the exhaustive search's
    skipped = 0
    for seed in range(4):
        inst = random_instance(family, 6, 10 + seed, t_values=(1, 2), memory="tight")
        want = solve_brute(inst)
        got = solve_compiled(inst)
        assert got.status == want.status, inst.source
        assert repr(got.tps) == repr(want.tps), inst.source
        skipped += got.info.get("costs_skipped", 0)
    assert skipped > 0


def _two_node_stage(M: float, first: list[tuple], z: float):
    """K = N = 1 (one stage), node 0 with the options ``first`` ((id, p, a, b) each), node 1
    with one option of memory b = z."""
    from piper_ilp.instance import instance_from_dict, option_dict

    return instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": M,
            "bandwidth": 1.0,
            "mbsInBatch": 1,
            "nodes": [
                {"id": 0, "TMPCs": {"1": [option_dict(o, p, 0, a, b) for o, p, a, b in first]}},
                {"id": 1, "TMPCs": {"1": [option_dict("only", 1.0, 0, 0, z)]}},
            ],
            "edges": [],
        }
    )


def test_equal_float_memory_does_not_hide_the_choice_that_fits():
    # hunt8 F1: node 0's options have the same float memory a y + b but not the same exact
    # memory; the one of lower p (more exact memory) no longer fits once node 1 is added,
    # the other does (M is the fsum of its memory). The kernel dropped the other for the
    # equal float memory and said infeasible, or optimal at a worse TPS.
    big = 2.0**53
    fast, slow = ("fast", 1.0, 1.0, big), ("slow", 2.0, 0.0, big)
    cases = [
        # 0.1 + 0.2 rounds to 0.30000000000000004, above their real sum
        (
            math.fsum([0.1, 0.2, 1.94]),
            [("fast", 1.0, 0.0, 0.1 + 0.2), ("slow", 2.0, 0.1, 0.2)],
            1.94,
        ),
        (big + 2, [fast, slow], 2.0),
        (big + 2, [fast, slow, ("less", 3.0, 0.0, big - 2)], 2.0),  # else optimal at TPS 4
    ]
    for M, first, z in cases:
        inst = _two_node_stage(M, first, z)
        want = solve_brute(inst)
        got = solve_compiled(inst)
        assert want.status == Status.OPTIMAL and want.tps == 3.0, first  # "slow" + "only"
        assert got.status == want.status, first
        assert repr(got.tps) == repr(want.tps), first


def test_first_compile_is_said_once(caplog):
    # numba's compile event (a cache miss) is logged once by the listener, loads never
    import logging

    from numba import njit
    from numba.core import event

    from dp.compiled.notice import FirstCompile

    listener = FirstCompile()
    said = lambda: [r for r in caplog.records if r.name == "piper_ilp.compile"]  # noqa: E731
    with caplog.at_level(logging.INFO, logger="piper_ilp.compile"):
        with event.install_listener("numba:compile", listener):
            assert njit(lambda x: x + 1)(1) == 2  # no cache: compiled here
            first = len(said())
            assert njit(lambda x: x * 2)(2) == 4
    # ours (and the module's own listener, if it had not spoken yet) said it once, then not
    assert listener.said and first >= 1 and len(said()) == first
    assert "compiling the numba kernels" in said()[-1].getMessage()
