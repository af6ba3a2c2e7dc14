"""The Python side of the compiled prototype: the instance as arrays (per node and t its
options' p, w, a, b and cut-edge terms; the successor-closed sets), one call of
:func:`dp.compiled.kernel.solve_kernel`, and its plan through the evaluator.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from dp.ideals import DEFAULT_MAX_IDEALS, enumerate_ideals
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = [
    "solve_compiled",
    "MAX_NODES",
    "kernel_arrays",
    "size_refusal",
    "work_estimate",
]

#: The most nodes the kernel's choice codes hold (4 bits per node in an int64).
MAX_NODES = 15
#: The most options per (node, t) a choice code holds.
MAX_OPTIONS = 16
#: The most bytes of the kernel's tables (the search's sets x (min(N, K) + 1) x (devices +
#: 1) values and back-pointers, the stages' costs and choices); above, refused.
MAX_TABLE_BYTES = 2**28


def size_refusal(inst: Instance) -> str | None:
    """Why the kernel's choice codes cannot hold ``inst`` (the instance after its
    restrictions), None when they can: more than :data:`MAX_NODES` nodes or more than
    :data:`MAX_OPTIONS` options per (node, t)."""
    if len(inst.nodes) > MAX_NODES:
        return f"the compiled DP takes at most {MAX_NODES} nodes, not {len(inst.nodes)}"
    most = max((len(o) for nd in inst.nodes for o in nd.options.values()), default=0)
    if most > MAX_OPTIONS:
        return f"the compiled DP takes at most {MAX_OPTIONS} options per (node, t)"
    return None


def kernel_arrays(inst: Instance, max_ideals: int = DEFAULT_MAX_IDEALS) -> tuple:
    """The kernel's arguments for ``inst`` (after restrictions), in
    :func:`dp.compiled.kernel.solve_kernel`'s order but the d values and limits.

    Parameters
    ----------
    inst : Instance
    max_ideals : int
        Refuse more successor-closed sets than this.

    Returns
    -------
    tuple
        (ideals, n, tv, nopt, P, W, A, Bm, deg, nb, term): the sets as int64 bitmasks over
        the node positions (by size, the empty set first); the t values; per (node, t
        index) the option count and per option p, w, a, b; per node its neighbours'
        positions and per (node, t, option, neighbour) the cut-edge term 2 (c + sync)
        (only the first ``nopt`` options and ``deg`` neighbours are meaningful).
    """
    from dp.compiled.kernel import kernel_inputs

    ids = inst.node_ids
    n = len(ids)
    tl = inst.t_values
    nt = len(tl)
    node = inst.node
    ins, outs = inst.in_edges, inst.out_edges
    slots = [node[v].options.get(t, ()) for v in ids for t in tl]
    counts = list(map(len, slots))
    flat = list(itertools.chain.from_iterable(slots))
    # the options read once into flat lists (numpy's conversion of nested lists is slow),
    # put in place by the kernel's kernel_inputs: per node its neighbours (the in-edges'
    # sources, then the out-edges' targets) and their c, per option its p, w, a, b and per
    # in-edge (out-edge) its sync bytes
    nb, cs, sync_in, sync_out, kin, deg = [], [], [], [], [], []
    for i, v in enumerate(ids):
        a = ins[v]
        b = outs[v]
        group = slots[i * nt : (i + 1) * nt]
        kin.append(len(a))
        deg.append(len(a) + len(b))
        if a:
            us, c = zip(*a)
            nb += us
            cs += c
            sync_in += [o.sfw[u] for opts in group for o in opts for u in us]
        if b:
            us, c = zip(*b)
            nb += us
            cs += c
            sync_out += [o.sbw[x] for opts in group for o in opts for x in us]
    pos = dict(zip(ids, range(n)))
    ints = counts + kin + deg + list(map(pos.__getitem__, nb))
    floats = [o.p for o in flat] + [o.w for o in flat] + [o.a for o in flat]
    floats += [o.b for o in flat]
    floats += sync_in
    floats += sync_out
    floats += cs
    ideals, nopt, P, W, A, Bm, deg, nb, term = kernel_inputs(
        n, nt, np.array(ints, np.int64), np.array(floats, np.float64), max_ideals
    )
    if len(ideals) == 0:  # more than max_ideals: enumerate_ideals says how many
        enumerate_ideals(inst, max_ideals)
        raise InternalError("enumerate_ideals took a graph that successor_closed refused")
    tv = np.array(tl, np.int64)
    return ideals, n, tv, nopt, P, W, A, Bm, deg, nb, term


def work_estimate(inst: Instance) -> float:
    """The kernel's work on ``inst`` (after restrictions), in units of about one inner step:
    its scan of the successor-closed sets' pairs (sets squared over 16) plus, per pair
    (I, J) with J inside I, per t, the (sum of d, devices) cells, (min(N, K) + 1) x
    (budget + 1). It leaves out the option frontiers (at most 16 options per node and
    t); a time limit uses it with a margin (:mod:`compare.crosscheck.compiled`).

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions (at most :data:`MAX_NODES` nodes).

    Returns
    -------
    float

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> inst = random_instance("chain", 3, seed=0)  # 4 sets, 6 pairs
    >>> S = min(inst.N, inst.K); budget = min(inst.K, max(inst.t_values) * S)
    >>> work_estimate(inst) == 16 / 16 + 6 * len(inst.t_values) * (S + 1) * (budget + 1)
    True
    """
    ideals = np.array(enumerate_ideals(inst, DEFAULT_MAX_IDEALS), np.int64)
    n = len(inst.nodes)
    # per set J, how many sets lie inside it (itself too): a sum over subsets, bit by bit
    inside = np.zeros(1 << n, np.int64)
    inside[ideals] = 1
    masks = np.arange(1 << n, dtype=np.int64)
    for b in range(n):
        upper = masks[(masks >> b) & 1 == 1]
        inside[upper] += inside[upper ^ (1 << b)]
    pairs = int(inside[ideals].sum()) - len(ideals)
    S = min(inst.N, inst.K)
    budget = min(inst.K, max(inst.t_values) * S)
    cells = len(inst.t_values) * (S + 1) * (budget + 1)
    return len(ideals) ** 2 / 16 + pairs * cells


def solve_compiled(
    instance: Instance, restrictions: Restrictions = Restrictions(), *, timings: dict | None = None
) -> Solution:
    """The optimal plan of the default mode (exact knapsack) by the compiled kernel.

    Every stage cost and memory sum is the evaluator's (``fsum``, cost model secs. 3 and
    7); the frontier of option choices per stage is pruned on float running sums, as the
    Python DP's.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        Ablations and caps (as :func:`dp.solve_dp`).
    timings : dict, optional
        Filled with the CPU seconds of the set-up (``setup``), the kernel (``kernel``) and
        the plan's check (``check``).

    Returns
    -------
    Solution
        method ``"dp-compiled"``: OPTIMAL with the plan, or INFEASIBLE.

    Raises
    ------
    InputError
        More than :data:`MAX_NODES` nodes or :data:`MAX_OPTIONS` options per (node, t);
        uniform degrees (``restrictions.uniform``).
    SizeLimitError
        Tables above :data:`MAX_TABLE_BYTES` (e.g. K and N of a million).
    """
    from dp.compiled.kernel import CODE_BITS, solve_kernel

    c0 = time.process_time()
    inst = restrictions.apply(instance)
    if restrictions.uniform:
        raise InputError(f"{instance.source}: the compiled DP does not take uniform degrees")
    too_big = size_refusal(inst)
    if too_big is not None:
        raise InputError(f"{instance.source}: {too_big}")
    bare = [nd.id for nd in inst.nodes if not nd.options]
    if bare:
        sol = Solution(
            "dp-compiled", Status.INFEASIBLE, message=f"node {bare[0]} has no option left"
        )
        return checked_solution(instance, sol, restrictions=restrictions)
    K, N = inst.K, inst.N
    S = min(N, K)
    dv = np.array([d for d in restrictions.d_values(instance) if d <= S], np.int64)
    arrays = kernel_arrays(inst)
    budget = min(K, max(inst.t_values) * S)
    need = len(arrays[0]) * (S + 1) * (budget + 1) * 16
    if need > MAX_TABLE_BYTES:
        raise SizeLimitError(
            f"{instance.source}: the compiled DP's tables need {need / 2**20:,.0f} MiB "
            f"({len(arrays[0]):,} sets x {S + 1:,} x {budget + 1:,}), above "
            f"{MAX_TABLE_BYTES / 2**20:,.0f} MiB"
        )
    c1 = time.process_time()
    # the frontier buffers: every choice of the largest stage, or fewer (more when asked)
    cap = min(math.prod(max(map(len, nd.options.values())) for nd in inst.nodes), 1 << 14)
    while True:
        T, rows, counts = _call(
            solve_kernel,
            *arrays, dv, S, N, float(inst.M), float(inst.B), budget, cap, MAX_TABLE_BYTES - need
        )  # fmt: skip
        if counts[4] == 2:
            raise SizeLimitError(
                f"{instance.source}: the compiled DP's stage tables ({counts[0]:,} stages) "
                f"would pass {MAX_TABLE_BYTES / 2**20:,.0f} MiB"
            )
        if not counts[4]:
            break
        cap *= 8
        if cap * 96 > MAX_TABLE_BYTES:
            raise SizeLimitError(
                f"{instance.source}: the compiled DP's option frontiers pass {cap // 8:,} choices"
            )
    c2 = time.process_time()
    info = {
        "ideals": len(arrays[0]),
        "stage_candidates": int(counts[0]),
        "stage_pairs": int(counts[1]),
        "frontier_points": int(counts[2]),
        "costs_made": int(counts[3]),
        "costs_skipped": int(counts[5]),
    }
    ids = inst.node_ids
    if len(rows) == 0:
        sol = Solution("dp-compiled", Status.INFEASIBLE, message="no plan fits", info=info)
    else:
        stages = []
        node = inst.node
        for C, t, d, _y, code in rows.tolist():
            members = [i for i in range(len(ids)) if (C >> i) & 1]
            nodes = tuple(map(ids.__getitem__, members))
            opts = {
                v: node[v].options[t][(code >> (CODE_BITS * i)) & 15].id
                for i, v in zip(members, nodes)
            }
            stages.append(Stage(nodes, d, t, opts))
        sol = Solution("dp-compiled", Status.OPTIMAL, plan=Plan(tuple(stages)), objective=T)
        sol.info = info
    out = checked_solution(instance, sol, restrictions=restrictions)
    if timings is not None:
        timings.update(setup=c1 - c0, kernel=c2 - c1, check=time.process_time() - c2)
    return out


def _call(kernel, *args):
    """``kernel(*args)``, a KeyboardInterrupt that came while it ran raised as one: numba
    runs a signal's handler only where the kernel calls back into Python, and wraps what it
    raised in a SystemError (``returned a result with an exception set``)."""
    try:
        return kernel(*args)
    except SystemError as exc:
        cause = exc.__cause__ or exc.__context__
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise KeyboardInterrupt from None
        raise
