"""Choosing each node's option inside one stage (cost model secs. 4 and 5).

For a candidate stage C with degrees (t, d) and y microbatches in flight, every node i
of C picks one option l; the stage costs

    TPS(C) = (E / d + 4 (d - 1) W / (d N)) / B + P / d,
    E = sum_i E_il (cut-edge bytes),  W = sum_i w_il,  P = sum_i p_il,

and must fit in memory: sum_i (a_il y + b_il) <= M. Picking the options is a knapsack.

Two choosers live here:

* :func:`exact_options` solves it exactly, through the Pareto frontier of the sums
  (P, E, W, sum a, sum b) over the stage's nodes (:func:`pareto_frontier`). Nodes with
  identical options (BERT's transformer layers) are merged into one group first, so a
  stage of m identical layers adds only m + 1 points.
* :func:`greedy_options` is Piper's rule of sec. 5, to the letter, for at most two
  options per node; :func:`greedy_choice_over_y` is the same rule evaluated for many y at
  once (numpy), which the DP uses.

References
----------
J. Tarnawski, D. Narayanan, A. Phanishayee. Piper: Multidimensional Planner for DNN
Parallelization. NeurIPS 2021.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Collection, Sequence

import numpy as np

from piper_ilp.cost import MEMORY_RTOL, node_edge_bytes
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, Option

__all__ = [
    "stage_tps",
    "Item",
    "Frontier",
    "stage_items",
    "pareto_frontier",
    "y_capacity",
    "greedy_choice",
    "greedy_choice_over_y",
    "greedy_choice_rows",
    "exact_options",
    "greedy_options",
    "GREEDY_EPS",
]

#: The absolute tolerance (bytes) of Piper's greedy rule (sec. 5 steps 3).
GREEDY_EPS = 1e-9

#: One node's options in a given stage: a tuple over options of (p, E, w, a, b), where E is
#: the node's cut-edge bytes in that stage with that option. Hashable, so identical nodes
#: (same numbers) are recognised and grouped.
Item = tuple[tuple[float, float, float, float, float], ...]


def stage_items(instance: Instance, nodes: Collection[int], t: int) -> list[Item]:
    """The knapsack items of a stage: for each node id of ``nodes`` (in the given order),
    the tuple of its options under ``t`` as (p, E, w, a, b).

    Raises KeyError when a node has no option for ``t``.
    """
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    items = []
    for v in nodes:
        opts = instance.node[v].options[t]
        items.append(tuple((o.p, node_edge_bytes(instance, v, o, members), o.w, o.a, o.b) for o in opts))
    return items



def stage_tps(E, W, P, d, N, B):
    """A stage's (or one node's) time per sample with data-parallel degree d, from its
    cut-edge bytes E, weights W and compute time P (cost model sec. 3):
    (E / d + 4 (d - 1) W / (d N)) / B + P / d. Floats or numpy arrays (broadcasting)."""
    return (E / d + 4.0 * (d - 1) * W / (d * N)) / B + P / d


@dataclass(frozen=True)
class Frontier:
    """The Pareto frontier of option choices of one stage.

    Arrays with one entry per Pareto-optimal choice: ``P`` = sum p, ``E`` = sum of cut-edge
    bytes, ``W`` = sum w, ``A`` = sum a, ``Bm`` = sum b (memory = A y + Bm). ``choice`` is,
    when tracked, a tuple per point giving the option index of each item (in item order).
    Every choice not on the frontier is no better in cost for every d and needs no less
    memory for every y than some choice on it, so the exact knapsack optimum is always on it.
    """

    P: np.ndarray
    E: np.ndarray
    W: np.ndarray
    A: np.ndarray
    Bm: np.ndarray
    choice: tuple | None = None

    def __len__(self) -> int:
        return len(self.P)


def _pareto_mask(cols: np.ndarray) -> np.ndarray:
    """Rows of ``cols`` (n x k, all minimized) that no row earlier in lexicographic order
    weakly dominates (so exact duplicates keep one copy). Constant columns are ignored;
    one or two varying columns take O(n log n), more take O(n^2 / block) numpy work."""
    n = len(cols)
    if n <= 1:
        return np.ones(n, dtype=bool)
    varying = (cols != cols[0]).any(axis=0)
    k = int(varying.sum())
    c = cols if k == cols.shape[1] else cols[:, varying]
    mask = np.zeros(n, dtype=bool)
    if k == 0:
        mask[0] = True
        return mask
    if k == 1:
        mask[int(np.argmin(c[:, 0]))] = True
        return mask
    if k == 2:
        order = np.lexsort((c[:, 1], c[:, 0]))
        s = c[order]
        prev_min = np.minimum.accumulate(s[:, 1])
        keep = np.ones(n, dtype=bool)
        keep[1:] = s[1:, 1] < prev_min[:-1]
        mask[order[keep]] = True
        return mask
    order = np.lexsort(c.T[::-1])
    s = c[order]
    # k >= 3: a row is dominated iff some earlier row is <= it in every column (dominance
    # is transitive, so earlier rows that are themselves dominated may be used)
    keep = np.ones(n, dtype=bool)
    rest = s[:, 1:]
    block = max(1, 4_000_000 // n)
    for lo in range(1, n, block):
        hi = min(n, lo + block)
        le = np.all(rest[None, :hi, :] <= rest[lo:hi, None, :], axis=2)
        tri = np.arange(hi)[None, :] < np.arange(lo, hi)[:, None]
        keep[lo:hi] = ~np.any(le & tri, axis=1)
    mask[order[keep]] = True
    return mask


def pareto_frontier(
    items: Sequence[Item], M: float, track: bool = False, y_range: tuple[int, int] | None = None
) -> Frontier:
    """The Pareto frontier of the option choices of ``items`` for y in ``y_range``.

    A choice is kept unless another one is no worse in each of P, E, W (so in cost, for
    every d) and in memory at both ends of ``y_range`` (memory a y + b is linear in y, so
    then at every y in between). Choices that do not fit even at the smallest y (with the
    relative slack MEMORY_RTOL) are dropped, as are partial sums that already exceed it
    (all memory terms are >= 0). Identical items are merged first: k copies of a
    two-option item give the k + 1 choices "j copies take the second option".

    Parameters
    ----------
    items : list of Item
    M : float
        Memory per device (bytes).
    track : bool
        Keep, per point, the option index chosen for each item (for reconstruction).
    y_range : (int, int), optional
        The microbatches in flight the frontier must serve (y_lo <= y_hi); by default
        every y >= 1 (memory is then compared at y = 1 and by its slope, sum a).

    Returns
    -------
    Frontier
        Possibly empty (no choice fits).
    """
    Mtol = M * (1.0 + MEMORY_RTOL)
    ylo, yhi = y_range if y_range is not None else (1, None)
    empty = Frontier(*(np.empty(0) for _ in range(5)), choice=() if track else None)
    groups: dict[Item, list[int]] = {}
    for pos, it in enumerate(items):
        groups.setdefault(it, []).append(pos)
    # columns: P, E, W, A, Bm, m_lo = sum (a ylo + b), m_hi = sum (a yhi + b) (or sum a)
    cur = np.zeros((1, 7))
    cur_choice: list[dict] | None = [dict()] if track else None
    for it, positions in groups.items():
        k = len(positions)
        opts = np.array(
            [(p, e, w, a, b, a * ylo + b, a if yhi is None else a * yhi + b) for (p, e, w, a, b) in it], dtype=float
        )
        L = len(opts)
        combos = list(itertools.combinations_with_replacement(range(L), k)) if L > 1 else [(0,) * k]
        cnt = np.array([[c.count(l) for l in range(L)] for c in combos], dtype=float)
        gpts = cnt @ opts
        gmask = _pareto_mask(gpts[:, [0, 1, 2, 5, 6]]) & (gpts[:, 5] <= Mtol)
        gpts = gpts[gmask]
        gcombos = [c for c, m in zip(combos, gmask) if m]
        if len(gpts) == 0:
            return empty
        new = (cur[:, None, :] + gpts[None, :, :]).reshape(-1, 7)
        idx = np.nonzero(new[:, 5] <= Mtol)[0]
        new = new[idx]
        if len(new) == 0:
            return empty
        mask = _pareto_mask(new[:, [0, 1, 2, 5, 6]])
        idx = idx[mask]
        new = new[mask]
        if track:
            ng = len(gpts)
            nxt = []
            for flat in idx.tolist():
                ci, gi = divmod(flat, ng)
                ch = dict(cur_choice[ci])
                for pos, l in zip(positions, gcombos[gi]):
                    ch[pos] = l
                nxt.append(ch)
            cur_choice = nxt
        cur = new
    choice = None
    if track:
        choice = tuple(tuple(ch[p] for p in range(len(items))) for ch in cur_choice)
    return Frontier(cur[:, 0], cur[:, 1], cur[:, 2], cur[:, 3], cur[:, 4], choice)


def y_capacity(A: np.ndarray, Bm: np.ndarray, M: float, y_max: int) -> np.ndarray:
    """For each memory line A y + Bm, the largest y in [0, y_max] with A y + Bm <= M (with
    the relative slack MEMORY_RTOL); 0 when even y = 1 does not fit."""
    Mtol = M * (1.0 + MEMORY_RTOL)
    A = np.asarray(A, dtype=float)
    Bm = np.asarray(Bm, dtype=float)
    pos = A > 0
    raw = np.full(A.shape, float(y_max))
    np.divide(Mtol - Bm, A, out=raw, where=pos)
    np.floor(raw, out=raw)
    np.clip(raw, 0, y_max, out=raw)
    y = raw.astype(np.int64)
    y[~pos & (Bm > Mtol)] = 0
    # guard the floor against rounding: down while y does not fit, up while y + 1 fits
    bad = (y > 0) & (A * y + Bm > Mtol)
    while bad.any():
        y[bad] -= 1
        bad = (y > 0) & (A * y + Bm > Mtol)
    up = (y < y_max) & (A * (y + 1) + Bm <= Mtol)
    while up.any():
        y[up] += 1
        up = (y < y_max) & (A * (y + 1) + Bm <= Mtol)
    return y


# ---------------------------------------------------------------------------------------
# Piper's greedy rule (sec. 5)
# ---------------------------------------------------------------------------------------


def greedy_choice(costs: Sequence[Sequence[float]], mems: Sequence[Sequence[float]], M: float) -> list[int] | None:
    """Piper's greedy option choice (cost model sec. 5), to the letter.

    Parameters
    ----------
    costs, mems : per node (in ascending input order), per option: the cost c_il (seconds
        per sample for the stage's d) and the memory m_il = a_il y + b_il.
    M : float
        Memory per device (compared without slack, as in the original).

    Returns
    -------
    list of int or None
        The option index per node, or None when even the least-memory choice exceeds M.
    """
    n = len(costs)
    F = [min(range(len(c)), key=lambda l, c=c: (c[l], l)) for c in costs]
    mF = sum(mems[i][F[i]] for i in range(n))
    if mF <= M:
        return F
    Lm = [min(range(len(m)), key=lambda l, m=m: (m[l], l)) for m in mems]
    if sum(mems[i][Lm[i]] for i in range(n)) > M:
        return None
    triples = []
    for i in range(n):
        for l in range(len(costs[i])):
            dm = mems[i][F[i]] - mems[i][l]
            if dm > GREEDY_EPS:
                triples.append(((costs[i][l] - costs[i][F[i]]) / dm, i, l))
    triples.sort()
    H = list(F)
    E = mF - M
    for _, i, l in triples:
        E -= mems[i][H[i]] - mems[i][l]
        H[i] = l
        if E < GREEDY_EPS:
            break
    return H


def greedy_choice_over_y(dc: np.ndarray, mF: np.ndarray, mO: np.ndarray, M: float) -> tuple[np.ndarray, np.ndarray]:
    """Piper's greedy rule for two options per node, for many y at once.

    Parameters
    ----------
    dc : (n,) array
        c_iO - c_iF per node (>= 0): the extra cost of the other option O over the
        cheapest option F (0 for nodes with a single option).
    mF, mO : (Y, n) arrays
        Memory a y + b of F and of O per y (rows) and node (columns, ascending input
        order). For single-option nodes put mO = mF.
    M : float

    Returns
    -------
    switched : (Y, n) bool array
        Which nodes take O for each y.
    feasible : (Y,) bool array
        False where even the least-memory choice exceeds M (sec. 5 step 2).
    """
    return greedy_choice_rows(np.broadcast_to(dc, mF.shape), mF, mO, M)


def greedy_choice_rows(dc: np.ndarray, mF: np.ndarray, mO: np.ndarray, M: float) -> tuple[np.ndarray, np.ndarray]:
    """Piper's greedy rule on independent rows (each row one stage at one y): like
    :func:`greedy_choice_over_y` with ``dc`` given per row, shape (R, n). Columns with
    mF = mO = 0 are padding (never switched, no memory)."""
    R, n = mF.shape
    MF = mF.sum(axis=1) if n else np.zeros(R)
    ML = np.minimum(mF, mO).sum(axis=1) if n else np.zeros(R)
    feasible = ~(ML > M)
    switched = np.zeros((R, n), dtype=bool)
    need = (MF > M) & feasible
    if not need.any() or n == 0:
        return switched, feasible
    rows = np.nonzero(need)[0]
    sav = mF[rows] - mO[rows]  # m_iF - m_iO
    valid = sav > GREEDY_EPS
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(valid, dc[rows] / np.where(valid, sav, 1.0), np.inf)
    order = np.argsort(r, axis=1, kind="stable")  # ties by node index (then option: one per node)
    sav_sorted = np.take_along_axis(np.where(valid, sav, 0.0), order, axis=1)
    valid_sorted = np.take_along_axis(valid, order, axis=1)
    # E after each step, by sequential subtraction exactly as the rule walks
    E0 = MF[rows] - M
    steps = np.concatenate([E0[:, None], -sav_sorted], axis=1)
    E = np.cumsum(steps, axis=1)[:, 1:]
    stop = (E < GREEDY_EPS) & valid_sorted
    any_stop = stop.any(axis=1)
    nvalid = valid_sorted.sum(axis=1)
    count = np.where(any_stop, np.argmax(stop, axis=1) + 1, nvalid)
    take_sorted = np.arange(n)[None, :] < count[:, None]
    take_sorted &= valid_sorted
    sw = np.zeros((len(rows), n), dtype=bool)
    np.put_along_axis(sw, order, take_sorted, axis=1)
    switched[rows] = sw
    return switched, feasible


# ---------------------------------------------------------------------------------------
# Per-stage choosers usable on their own
# ---------------------------------------------------------------------------------------


def _stage_costs(instance: Instance, nodes: Sequence[int], t: int, d: int):
    members = set(nodes)
    N, B = instance.N, instance.B
    costs, opts_all = [], []
    for v in nodes:
        opts = instance.node[v].options.get(t)
        if not opts:
            raise InputError(f"node {v} has no option for t = {t}")
        row = []
        for o in opts:
            e = node_edge_bytes(instance, v, o, members)
            row.append(stage_tps(e, o.w, o.p, d, N, B))
        costs.append(row)
        opts_all.append(opts)
    return costs, opts_all


def greedy_options(instance: Instance, nodes: Sequence[int], t: int, d: int, y: int) -> dict[int, Option] | None:
    """Piper's greedy option choice (sec. 5) for one stage.

    Parameters
    ----------
    instance : Instance
    nodes : node ids of the stage (any order; the rule walks them in input order)
    t, d : tensor- and data-parallel degrees of the stage
    y : microbatches in flight (ceil(s / d))

    Returns
    -------
    dict node id -> Option, or None when no choice fits in M.

    Raises
    ------
    InputError
        When some node has more than two options for ``t`` (the rule is defined for two)
        or none.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p, a): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": a, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1, 8), o("r", 2, 1)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1, 8), o("r", 3, 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in greedy_options(inst, [0, 1], 1, 1, 1).items()}
    {0: 'r', 1: 'v'}
    """
    order = {v: i for i, v in enumerate(instance.node_ids)}
    nodes = sorted(nodes, key=order.__getitem__)
    for v in nodes:
        k = len(instance.node[v].options.get(t, ()))
        if k > 2:
            raise InputError(
                f"Piper's greedy option choice is defined for at most two options per (node, t); "
                f"node {v} has {k} for t = {t}"
            )
    costs, opts = _stage_costs(instance, nodes, t, d)
    mems = [[o.a * y + o.b for o in row] for row in opts]
    H = greedy_choice(costs, mems, instance.M)
    if H is None:
        return None
    return {v: opts[i][H[i]] for i, v in enumerate(nodes)}


def exact_options(instance: Instance, nodes: Sequence[int], t: int, d: int, y: int) -> dict[int, Option] | None:
    """The exact option choice for one stage: least TPS among the choices that fit in M
    (with the relative slack MEMORY_RTOL) at y microbatches in flight.

    Any number of options per (node, t); exact with floating-point data (Pareto frontier
    of :func:`pareto_frontier`).

    Returns
    -------
    dict node id -> Option, or None when no choice fits.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p, a): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": a, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1, 8), o("r", 2, 1)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1, 8), o("r", 3, 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in exact_options(inst, [0, 1], 1, 1, 1).items()}
    {0: 'r', 1: 'v'}
    """
    order = {v: i for i, v in enumerate(instance.node_ids)}
    nodes = sorted(nodes, key=order.__getitem__)
    for v in nodes:
        if not instance.node[v].options.get(t):
            raise InputError(f"node {v} has no option for t = {t}")
    items = stage_items(instance, nodes, t)
    fr = pareto_frontier(items, instance.M, track=True, y_range=(y, y))
    if not len(fr):
        return None
    ycap = y_capacity(fr.A, fr.Bm, instance.M, max(y, 1))
    ok = ycap >= y
    if not ok.any():
        return None
    N, B = instance.N, instance.B
    cost = stage_tps(fr.E, fr.W, fr.P, d, N, B)
    cost = np.where(ok, cost, np.inf)
    best = int(np.argmin(cost))
    ch = fr.choice[best]
    return {v: instance.node[v].options[t][ch[i]] for i, v in enumerate(nodes)}
