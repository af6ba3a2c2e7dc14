"""Choosing each node's option inside one stage exactly (cost model secs. 3, 4 and 7): the
Pareto frontier of a stage's option choices (:func:`pareto_frontier`), the least-cost
choice at one y with memory summed exactly (:func:`exact_choice`), and the array filters
and step-function helpers the stage tables build on.

References
----------
J. Tarnawski, D. Narayanan, A. Phanishayee. Piper: Multidimensional Planner for DNN
Parallelization. NeurIPS 2021.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Collection, Sequence

import numpy as np

from dp.memory import float_band, kept_row_limit
from piper_ilp.cost import node_edge_bytes, resync_bytes
from piper_ilp.cost import stage_tps as _stage_tps
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, Option

__all__ = [
    "stage_tps_from_sums",
    "monotone_runs",
    "Item",
    "Frontier",
    "pareto_mask",
    "pareto_order",
    "pareto_orders",
    "segment_lex_order",
    "two_column_order",
    "two_column_orders",
    "segment_xy_order",
    "segment_staircase",
    "dense_ranks",
    "pieces",
    "run_ids",
    "run_starts",
    "stage_items",
    "group_points",
    "pareto_frontier",
    "y_capacity",
    "y_capacity_and_memory",
    "y_capacities",
    "exact_choice",
    "exact_choices_at",
    "cheapest_choice",
    "exact_options",
    "stage_options",
]

#: One node's options in a given stage: a tuple over options of (p, E, w, a, b), where E is
#: the node's cut-edge bytes in that stage with that option. Hashable, so identical nodes
#: (same numbers) are recognised and grouped.
Item = tuple[tuple[float, float, float, float, float], ...]


def stage_items(instance: Instance, nodes: Collection[int], t: int) -> list[Item]:
    """The knapsack items of a stage: for each node id of ``nodes`` (in the given order),
    the tuple of its options under ``t`` as (p, E, w, a, b), E the node's cut-edge bytes
    in the stage ``nodes`` with that option.

    Parameters
    ----------
    instance : Instance
    nodes : collection of node ids
        The stage.
    t : int
        The tensor degree.

    Returns
    -------
    list of Item

    Raises
    ------
    KeyError
        A node has no option for ``t``.
    """
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    items = []
    for v in nodes:
        opts = instance.node[v].options[t]
        items.append(
            tuple((o.p, node_edge_bytes(instance, v, o, members), o.w, o.a, o.b) for o in opts)
        )
    return items


def stage_tps_from_sums(E, W, P, d, N, B):
    """A stage's (or one node's) time per sample with data-parallel degree d, from its
    cut-edge bytes E, weights W and compute time P: :func:`piper_ilp.cost.stage_tps` with
    the resync bytes of W (linear in w, so the sum of the nodes' terms).

    Parameters
    ----------
    E, W, P : float or numpy.ndarray
        Sums over the stage's nodes (numpy arrays broadcast).
    d, N : int or numpy.ndarray
        The data-parallel degree and the microbatches per batch.
    B : float
        Bandwidth.

    Returns
    -------
    float or numpy.ndarray
    """
    return _stage_tps(E, resync_bytes(W, d, N), P, d, B)


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


def pareto_mask(cols: np.ndarray) -> np.ndarray:
    """Rows of ``cols`` (n x k, all minimized) that no row earlier in lexicographic order
    weakly dominates (so exact duplicates keep one copy): :func:`pareto_order` as a mask.

    Examples
    --------
    >>> pareto_mask(np.array([[1.0, 3.0], [2.0, 2.0], [2.0, 4.0], [1.0, 3.0]])).tolist()
    [True, True, False, False]
    """
    mask = np.zeros(len(cols), dtype=bool)
    mask[pareto_order(cols)] = True
    return mask


#: Rows of three or more varying columns are filtered this many at a time, each block
#: against the rows kept before it and against the earlier rows of the block.
PARETO_BLOCK = 128


def pareto_order(cols: np.ndarray) -> np.ndarray:
    """The indices of the rows :func:`pareto_mask` keeps, in lexicographic order of the
    varying columns (ties: input order). Constant columns are ignored; one or two varying
    columns take O(n log n), more take O(n x kept) numpy work.

    Examples
    --------
    >>> pareto_order(np.array([[2.0, 2.0], [1.0, 3.0], [2.0, 4.0]])).tolist()
    [1, 0]
    """
    n = len(cols)
    if n <= 1:
        return np.arange(n)
    if n <= 8:  # the same rule in plain Python, without numpy's per-call cost (a node's options)
        rows = cols.tolist()
        kept: list[int] = []
        for i in sorted(range(n), key=rows.__getitem__):
            if not any(all(a <= b for a, b in zip(rows[j], rows[i])) for j in kept):
                kept.append(i)
        return np.array(kept, dtype=np.int64)
    varying = (cols != cols[0]).any(axis=0)
    k = int(varying.sum())
    c = cols if k == cols.shape[1] else cols[:, varying]
    if k == 0:
        return np.zeros(1, dtype=np.int64)
    if k == 1:
        return np.array([int(np.argmin(c[:, 0]))])
    if k == 2:
        return two_column_order(c[:, 0], c[:, 1])
    order = np.lexsort(c.T[::-1])
    # k >= 3: a row is dominated iff some earlier row is <= it in every column (the first
    # column holds by the order). Dominance is transitive, so trying the earlier rows that
    # are kept is enough (a dominated one is dominated by a kept one before it); within a
    # block all earlier rows are tried.
    rest = [np.ascontiguousarray(c[order, j]) for j in range(1, k)]
    keep = np.zeros(n, dtype=bool)
    kept = np.zeros(0, dtype=np.int64)
    for lo in range(0, n, PARETO_BLOCK):
        hi = min(n, lo + PARETO_BLOCK)
        block = np.arange(lo, hi)
        tried = np.concatenate((kept, block))
        le = rest[0][tried][None, :] <= rest[0][lo:hi, None]
        for col in rest[1:]:
            le &= col[tried][None, :] <= col[lo:hi, None]
        le[:, len(kept) :] &= block[None, :] < block[:, None]
        ok = ~le.any(axis=1)
        keep[lo:hi] = ok
        kept = np.concatenate((kept, block[ok]))
    return order[keep]


def two_column_order(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Pareto rows of two varying columns, as indices in stable (x, y) order: a row is
    kept iff its y is below every earlier row's (so exact duplicates keep the first).
    Without ties in x, a stable sort on x alone is that order (and merges the sorted runs
    of a frontier plus each option in linear time); with ties, the two-key sort.

    Examples
    --------
    >>> two_column_order(np.array([2.0, 1.0, 3.0]), np.array([1.0, 2.0, 1.0])).tolist()
    [1, 0]
    """
    order = np.argsort(x, kind="stable")
    sx = x[order]
    if (sx[1:] == sx[:-1]).any():
        order = np.lexsort((y, x))
    sy = y[order]
    run = np.minimum.accumulate(sy)
    keep = np.empty(len(x), dtype=bool)
    keep[0] = True
    np.less(sy[1:], run[:-1], out=keep[1:])
    return order[keep]


def run_starts(a: np.ndarray) -> np.ndarray:
    """The indices where a run of equal values of ``a`` (non-empty, 1-D) begins: 0 and
    every i with a[i] != a[i - 1].

    Examples
    --------
    >>> run_starts(np.array([4, 4, 7, 7, 7, 2])).tolist()
    [0, 2, 5]
    """
    return np.flatnonzero(np.concatenate(([True], a[1:] != a[:-1])))


def run_ids(change: np.ndarray) -> np.ndarray:
    """The run number of each of n elements (int64, from 0), given ``change`` (n - 1
    flags): change[i - 1] is True where element i starts a new run.

    Examples
    --------
    >>> run_ids(np.array([False, True, False])).tolist()
    [0, 0, 1, 1]
    """
    ids = np.zeros(len(change) + 1, dtype=np.int64)
    np.cumsum(change, out=ids[1:])
    return ids


def pieces(sizes: np.ndarray, most: int):
    """Consecutive slices (a, b) of items with the given sizes (>= 0), in order: a piece
    ends with the item that brings its total to ``most`` or more, and holds at least one
    item.

    Examples
    --------
    >>> list(pieces(np.array([3, 1, 5, 2, 2]), 4))
    [(0, 2), (2, 3), (3, 5)]
    """
    ends = np.cumsum(sizes)
    a = 0
    while a < len(ends):
        reached = (int(ends[a - 1]) if a else 0) + most
        b = min(max(int(np.searchsorted(ends, reached, side="left")) + 1, a + 1), len(ends))
        yield a, b
        a = b


def dense_ranks(a: np.ndarray) -> np.ndarray:
    """The rank of each value of ``a`` (1-D, no NaN) among its distinct values (int64, from
    0): ``np.unique(a, return_inverse=True)[1]``, with one unstable sort (equal values get
    one rank whatever their order) instead of unique's: half the time on the frontiers.

    Examples
    --------
    >>> dense_ranks(np.array([2.5, 1.0, 2.5, 7.0])).tolist()
    [1, 0, 1, 2]
    """
    n = len(a)
    order = np.argsort(a)
    s = a[order]
    run = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(s[1:] != s[:-1], out=run[1:])
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = run
    return ranks


def two_column_orders(
    x: np.ndarray,
    y: np.ndarray,
    valid: np.ndarray,
    first: np.ndarray,
    n_of: np.ndarray,
    sel: np.ndarray,
    seg: np.ndarray,
) -> np.ndarray:
    """:func:`two_column_order` of many arrays at once: array g is rows ``first[g]`` ..
    ``first[g] + n_of[g] - 1`` of ``x`` and ``y`` (``seg``, nondecreasing, names each
    row's array), its rows with ``valid`` False left out; the arrays ``sel`` are
    filtered. Returns the kept rows by array and then in (x, y) order (ties: input order).

    The rows are sorted by (array, x, y) (:func:`segment_xy_order`); a row is kept iff
    its y is below every earlier y of its array (:func:`segment_staircase`)."""
    pick = np.zeros(len(n_of), dtype=bool)
    pick[sel] = True
    rows = np.flatnonzero(valid & pick[seg])
    if not len(rows):
        return rows
    ss = seg[rows]
    rs = run_ids(ss[1:] != ss[:-1])  # rank of the array among those left
    xs, ys = x[rows], y[rows]
    order = segment_xy_order(rs, xs, ys)
    return rows[order[segment_staircase(rs[order], ys[order])]]


def segment_xy_order(rs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The stable order of rows by (rs, x, y) (rs: nondecreasing ints from 0, x and y
    without NaN): one sort by x, a stable (radix) sort by rs, and the rows of runs of
    equal (rs, x) -- few: equal sums of different choices -- sorted again by (y, input
    position) in their places."""
    order = np.argsort(x)
    r = rs[order]
    order = order[np.argsort(r.astype(np.int16) if int(rs[-1]) < 2**15 else r, kind="stable")]
    sx, sr = x[order], rs[order]
    tie = (sx[1:] == sx[:-1]) & (sr[1:] == sr[:-1])
    if tie.any():
        at = np.zeros(len(order), dtype=bool)
        at[1:] = tie
        at[:-1] |= tie
        at = np.flatnonzero(at)
        sub = order[at]
        order[at] = sub[np.lexsort((sub, y[sub], x[sub], rs[sub]))]
    return order


def segment_staircase(rs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """For rows sorted by rs (nondecreasing ints from 0): whether each y is below every
    earlier y of its rs, i.e. a running maximum of (rs, -y). On the bits of y (>= 0, inf
    allowed: their order is the floats') where rs fits above them -- the filters' y have
    low bits cleared (dp.memory.truncate_low_bits) --, else on the ranks of y."""
    n = len(y)
    keep = np.empty(n, dtype=bool)
    keep[0] = True
    top = int(rs[-1])
    yb = None
    if bool((y >= 0.0).all()):
        yb = (y + 0.0).view(np.int64)  # (+ 0.0: -0.0 has the sign bit)
        low = int(np.bitwise_or.reduce(yb & ((1 << 20) - 1)))
        zeros = (low & -low).bit_length() - 1 if low else 20
        if top >= 1 << zeros:
            yb = None
    if yb is not None:
        width = 63 - zeros
        z = (rs << width) | (((1 << width) - 1) - (yb >> zeros))
    else:
        ry = dense_ranks(y)
        ny = int(ry.max()) + 1
        z = rs * (ny + 1) + (ny - ry)
    best = np.maximum.accumulate(z)
    np.greater(z[1:], best[:-1], out=keep[1:])
    return keep


def segment_lex_order(cols: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """The order of ``np.lexsort`` by (``seg``, ``cols[:, 0]``, ..., ``cols[:, k - 1]``),
    ties by input order. When no two rows of one array (one ``seg`` value) share their
    first column, that order is decided by (seg, first column) alone: two stable sorts
    instead of k + 1; else ``np.lexsort`` itself.

    Examples
    --------
    >>> cols = np.array([[2.0, 0.0], [1.0, 5.0], [3.0, 1.0], [1.0, 4.0]])
    >>> segment_lex_order(cols, np.array([0, 0, 1, 1])).tolist()
    [1, 0, 3, 2]
    """
    order = np.argsort(cols[:, 0], kind="stable")
    order = order[np.argsort(seg[order], kind="stable")]
    s, c = seg[order], cols[order, 0]
    if ((s[1:] == s[:-1]) & (c[1:] == c[:-1])).any():
        k = cols.shape[1]
        return np.lexsort(tuple(cols[:, j] for j in range(k - 1, -1, -1)) + (seg,))
    return order


def pareto_orders(cols: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """The indices of the rows :func:`pareto_mask` keeps in each of many arrays, by array
    and then in lexicographic order of the columns (ties: input order). ``cols`` (n x k,
    k >= 1) holds the arrays end to end, ``seg`` (n, nondecreasing) names the array of
    each row. The same rule per array: a row is kept unless a row before it in
    lexicographic order (ties: input order) is <= it in every column (columns constant in
    an array change neither the order nor the dominance, so this is what
    :func:`pareto_mask` keeps for any number of varying columns). Arrays up to 512 rows
    are compared in padded batches of similar length (O(m^2) each: for arrays where
    three or more columns vary; two columns take :func:`two_column_orders`), larger ones
    one at a time."""
    n = len(cols)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    k = cols.shape[1]
    order = segment_lex_order(cols, seg)
    sg = seg[order]
    starts = run_starts(sg)
    # the first column holds by the order; a column constant in every array decides nothing
    at_start = np.repeat(starts, np.diff(np.append(starts, n)))
    rest = []
    for j in range(1, k):
        c = cols[order, j]
        if not (c == c[at_start]).all():
            rest.append(c)
    lens = np.diff(np.append(starts, n))
    keep = np.ones(n, dtype=bool)
    # arrays by length; runs of similar length are compared together, padded to the
    # longest of the run, about 2M comparisons per pass
    by_len = np.argsort(lens, kind="stable")
    i, ng = 0, len(lens)
    while i < ng:
        m = int(lens[by_len[i]])
        if m == 1:
            i = int(np.searchsorted(lens[by_len], 1, side="right"))
            continue
        if m > 512:
            for g in by_len[i:].tolist():
                a, b = int(starts[g]), int(starts[g] + lens[g])
                sub = np.zeros(b - a, dtype=bool)
                # the rows are sorted already: pareto_mask's own (stable) sort keeps them so
                sub[pareto_mask(cols[order[a:b]])] = True
                keep[a:b] = sub
            break
        j = i + max(1, 2_000_000 // (m * m))
        while True:
            m2 = int(lens[by_len[min(j, ng) - 1]])
            if (min(j, ng) - i) * m2 * m2 <= 4_000_000 or j - i <= 1:
                break
            j = i + (j - i) // 2
        j = min(j, ng)
        g = by_len[i:j]
        m = int(lens[g].max())
        ar = np.arange(m)
        valid = ar[None, :] < lens[g][:, None]
        idx = np.where(valid, starts[g][:, None] + ar[None, :], 0)
        le = np.empty((len(g), m, m), dtype=bool)
        le[:] = (ar[None, :] < ar[:, None])[None, :, :]
        for col in rest:
            a = col[idx]
            le &= a[:, None, :] <= a[:, :, None]
        le &= valid[:, None, :]
        dom = le.any(axis=2)
        keep[idx[valid]] = ~dom[valid]
        i = j
    return order[keep]


def group_points(it: Item, k: int, ylo: int, yhi: int | None):
    """The choices of k identical items ``it`` (each with the options of ``it``): "j_l of
    them take option l", as the rows of :func:`pareto_frontier` (P, E, W, A, Bm, memory at
    ``ylo``, memory at ``yhi`` or sum a when None), and which of them no other choice
    dominates in (P, E, W, both memories).

    Parameters
    ----------
    it : Item
        The options of the item, as (p, E, w, a, b).
    k : int
        The copies of the item in the stage.
    ylo, yhi : int
        The y range (:func:`pareto_frontier`); ``yhi`` None: every y >= ``ylo``.

    Returns
    -------
    combos : list of tuple
        Per choice, the option of each copy (sorted option indices).
    gpts : numpy.ndarray
        choices x 7, the rows.
    mask : numpy.ndarray of bool
        The choices :func:`pareto_mask` keeps.
    """
    opts = np.array(
        [(p, e, w, a, b, a * ylo + b, a if yhi is None else a * yhi + b) for (p, e, w, a, b) in it],
        dtype=float,
    )
    L = len(opts)
    combos = list(itertools.combinations_with_replacement(range(L), k)) if L > 1 else [(0,) * k]
    cnt = np.array([[c.count(l) for l in range(L)] for c in combos], dtype=float)
    gpts = cnt @ opts
    return combos, gpts, pareto_mask(gpts[:, [0, 1, 2, 5, 6]])


def pareto_frontier(
    items: Sequence[Item], M: float, track: bool = False, y_range: tuple[int, int] | None = None
) -> Frontier:
    """The Pareto frontier of the option choices of ``items`` for y in ``y_range``.

    A choice is kept unless another one is no worse in each of P, E, W (so in cost, for
    every d) and in memory at both ends of ``y_range`` (memory a y + b is linear in y, so
    then at every y in between). Choices whose float memory at the smallest y exceeds
    :func:`dp.memory.kept_row_limit` (M plus the float error of the sums and of the
    comparisons that dropped the choices a row stands for) are dropped, as are partial sums
    that already do (all memory terms are >= 0); choices near the boundary are kept, for an
    exact decision by the caller. Identical items are merged first: k copies of a
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
    # a row may stand for choices it dropped that need a little less (dp.memory)
    mem_limit = kept_row_limit(M, float_band(2 * len(items) + 2), 2 * len(items) + 2)
    ylo, yhi = y_range if y_range is not None else (1, None)
    empty = Frontier(*(np.empty(0) for _ in range(5)), choice=() if track else None)
    groups: dict[Item, list[int]] = {}
    for pos, it in enumerate(items):
        groups.setdefault(it, []).append(pos)
    # columns: P, E, W, A, Bm, m_lo = sum (a ylo + b), m_hi = sum (a yhi + b) (or sum a)
    cur = np.zeros((1, 7))
    cur_choice: list[dict] | None = [dict()] if track else None
    for it, positions in groups.items():
        combos, gpts, gmask = group_points(it, len(positions), ylo, yhi)
        gmask &= gpts[:, 5] <= mem_limit
        gpts = gpts[gmask]
        gcombos = [c for c, m in zip(combos, gmask) if m]
        if len(gpts) == 0:
            return empty
        new = (cur[:, None, :] + gpts[None, :, :]).reshape(-1, 7)
        idx = np.nonzero(new[:, 5] <= mem_limit)[0]
        new = new[idx]
        if len(new) == 0:
            return empty
        mask = pareto_mask(new[:, [0, 1, 2, 5, 6]])
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


def y_capacity(A: np.ndarray, Bm: np.ndarray, limit: float, y_max: int) -> np.ndarray:
    """For each memory line A y + Bm (floats), the largest y in [0, y_max] with
    A * y + Bm <= ``limit`` in float arithmetic; 0 when even y = 1 does not.

    Examples
    --------
    >>> y_capacity(np.array([2.0, 0.0, 5.0]), np.array([1.0, 3.0, 9.0]), 8.0, 10).tolist()
    [3, 10, 0]
    """
    return y_capacity_and_memory(
        np.asarray(A, dtype=float), np.asarray(Bm, dtype=float), limit, y_max
    )[0]


def y_capacity_and_memory(A: np.ndarray, Bm: np.ndarray, limit: float, y_max: int):
    """:func:`y_capacity` and the float memory A y + Bm at that y."""
    pos = A > 0
    raw = np.full(A.shape, float(y_max))
    np.divide(limit - Bm, A, out=raw, where=pos)
    np.floor(raw, out=raw)
    np.clip(raw, 0, y_max, out=raw)
    y = raw.astype(np.int64)
    y[~pos & (Bm > limit)] = 0
    # guard the floor against rounding: down while y does not fit, up while y + 1 fits
    mem = A * y + Bm
    bad = (y > 0) & (mem > limit)
    while bad.any():
        y[bad] -= 1
        mem = A * y + Bm
        bad = (y > 0) & (mem > limit)
    up = (y < y_max) & (A * (y + 1) + Bm <= limit)
    while up.any():
        y[up] += 1
        mem = A * y + Bm
        up = (y < y_max) & (A * (y + 1) + Bm <= limit)
    return y, mem


def y_capacities(A: np.ndarray, Bm: np.ndarray, sure_limit: float, maybe_limit: float, y_max: int):
    """:func:`y_capacity` for the two limits of :mod:`dp.memory` (``sure_limit`` <=
    ``maybe_limit``), and whether they agree for every line (then every y is decided by
    the float sums). The band is far narrower than one step of y, so ``sure`` is ``maybe``
    or a little less. Small inputs take a plain-Python path (the same float operations,
    without numpy's per-call cost).

    Returns
    -------
    sure, maybe : numpy.ndarray of int64
    decided : bool
    """
    if len(A) > 8:
        maybe, mem_at = y_capacity_and_memory(A, Bm, maybe_limit, y_max)
        bad = (maybe > 0) & (mem_at > sure_limit)
        if not bad.any():
            return maybe, maybe, True
        sure = maybe.copy()
        while bad.any():
            sure[bad] -= 1
            bad = (sure > 0) & (A * sure + Bm > sure_limit)
        return sure, maybe, False
    sure_l, maybe_l = [], []
    decided = True
    for a, b in zip(A.tolist(), Bm.tolist()):
        if a > 0:
            y = min(max(math.floor((maybe_limit - b) / a), 0), y_max)
            while y > 0 and a * y + b > maybe_limit:
                y -= 1
            while y < y_max and a * (y + 1) + b <= maybe_limit:
                y += 1
        else:
            y = y_max if b <= maybe_limit else 0
        maybe_l.append(y)
        while y > 0 and a * y + b > sure_limit:
            y -= 1
            decided = False
        sure_l.append(y)
    return np.array(sure_l, dtype=np.int64), np.array(maybe_l, dtype=np.int64), decided


# ---------------------------------------------------------------------------------------
# The exact choice at one y
# ---------------------------------------------------------------------------------------

#: Memory is summed exactly as integers in units of 2**-_FIXED_SHIFT bytes (every finite
#: double is an integer multiple of 2**-1074).
_FIXED_SHIFT = 1074


def _fixed(x: float) -> int:
    """The float ``x`` (finite, >= 0) as an exact integer in units of 2**-1074."""
    num, den = float(x).as_integer_ratio()
    return num << (_FIXED_SHIFT - (den.bit_length() - 1))


def _rounded(v: int) -> float:
    """The correctly rounded float of ``v`` * 2**-1074 (what ``math.fsum`` returns for
    the same terms); inf beyond the float range."""
    try:
        return v / (1 << _FIXED_SHIFT)
    except OverflowError:
        return math.inf


def _fixed_limit(M: float) -> int | None:
    """The largest v with ``_rounded(v) <= M`` (None: every finite sum fits), so that an
    exact sum fits (fsum <= M, sec. 7) exactly when it is at most this integer."""
    above = math.nextafter(M, math.inf)
    if math.isinf(above):
        return None
    # sums below the midpoint of M and the next float round to M, above it to the next
    # float; the midpoint itself rounds to the one with an even last bit
    mid = (_fixed(M) + _fixed(above)) // 2
    return mid if _rounded(mid) <= M else mid - 1


def exact_choice(
    items: Sequence[Item], y: int, M: float, d: int, N: int, B: float
) -> tuple[float, tuple[int, ...]] | None:
    """The least-cost option choice of a stage at ``y`` microbatches in flight whose memory
    fsum (a y, b) fits in ``M`` (sec. 7, no slack), with degree ``d``.

    Every node i of the stage picks one option l; the stage costs (sec. 3,
    :func:`piper_ilp.cost.stage_tps`) TPS = (E / d + resync(W)) / B + P / d, with E, W and
    P the sums over the nodes of the chosen options' cut-edge bytes, w and p: a knapsack.

    Memory is summed exactly (integers), so the decision equals the evaluator's; cost sums
    are float sums of non-negative terms. Dominated partial choices (no better in P, E, W
    and exact memory) are dropped; identical items are merged (counts per option). The
    choices kept do not depend on d (:func:`exact_choices_at`); d only picks among them
    (:func:`cheapest_choice`).

    Parameters
    ----------
    items : sequence of Item
        The stage's nodes (:func:`stage_items`).
    y : int
        Microbatches in flight.
    M : float
        Memory per device.
    d, N : int
        The data-parallel degree and the microbatches per batch.
    B : float
        Bandwidth.

    Returns
    -------
    (cost, choice) or None
        ``choice`` gives the option index per item (in item order); None when no choice
        fits.
    """
    kept = exact_choices_at(items, y, M)
    return None if kept is None else cheapest_choice(kept, len(items), d, N, B)


def exact_choices_at(items: Sequence[Item], y: int, M: float, memo: dict | None = None):
    """The option choices of :func:`exact_choice` that fit at ``y`` and that no other
    choice beats in P, E and W with no more exact memory, as an opaque value for
    :func:`cheapest_choice` (the same for every d); None when no choice fits.

    ``memo``, a dict kept by the caller (e.g. per solve), remembers each group of
    identical items' choices and their P, E, W sums (:func:`_group_sums`), and their exact
    memory sums per y; the answer is the same with or without it."""
    groups: dict[Item, list[int]] = {}
    for pos, it in enumerate(items):
        groups.setdefault(it, []).append(pos)
    limit = _fixed_limit(M)
    # a point: (exact memory, P, E, W, index of its parent point, index of its combo);
    # parents and combos are kept per group, for the choice at the end
    points: list[tuple] = [(0, 0.0, 0.0, 0.0, -1, -1)]
    levels: list[tuple[list[tuple], list[int], list[tuple]]] = []
    for it, positions in groups.items():
        k = len(positions)
        got = None if memo is None else memo.get((it, k))
        if got is None:
            got = (*_group_sums(it, k), {})
            if memo is not None:
                memo[(it, k)] = got
        combos, counts, sums, at_y = got
        gpts = at_y.get(y)
        if gpts is None:
            mems = [_fixed(a * y) + _fixed(b) for (p, e, w, a, b) in it]
            gpts = at_y[y] = [
                (sum(c * m for c, m in zip(cnt, mems)), *pew) for cnt, pew in zip(counts, sums)
            ]
        new = []
        for pi, (m0, P0, E0, W0, _, _) in enumerate(points):
            for gi, (m1, P1, E1, W1) in enumerate(gpts):
                m = m0 + m1
                if limit is None or m <= limit:
                    new.append((m, P0 + P1, E0 + E1, W0 + W1, pi, gi))
        if not new:
            return None
        new.sort(key=lambda q: q[:4])
        kept: list[tuple] = []
        if all(q[2] == new[0][2] and q[3] == new[0][3] for q in new):
            # E and W the same for every choice (options differ only in p, a, b): by
            # memory ascending, a choice helps only when it is strictly faster
            best_p = math.inf
            for q in new:
                if q[1] < best_p:
                    kept.append(q)
                    best_p = q[1]
        else:
            for q in new:
                _, qP, qE, qW, _, _ = q
                for p in kept:
                    if p[1] <= qP and p[2] <= qE and p[3] <= qW:
                        break
                else:
                    kept.append(q)
        levels.append((points, positions, combos))
        points = kept
    return points, levels


def _group_sums(it: Item, k: int) -> tuple[list, list, list]:
    """The choices of k identical items ``it`` for :func:`exact_choices_at`: "j_l of them
    take option l" as sorted option indices, the counts j_l, and the ``math.fsum`` of
    their P, E and W.

    Examples
    --------
    >>> it = ((1.0, 0.0, 5.0, 2.0, 0.0), (3.0, 0.0, 0.0, 1.0, 0.0))
    >>> combos, counts, sums = _group_sums(it, 2)
    >>> combos, counts[1], sums[1]
    ([(0, 0), (0, 1), (1, 1)], [1, 1], (4.0, 0.0, 5.0))
    """
    L = len(it)
    combos = list(itertools.combinations_with_replacement(range(L), k)) if L > 1 else [(0,) * k]
    counts = [[combo.count(l) for l in range(L)] for combo in combos]
    sums = [tuple(math.fsum(c * o[j] for c, o in zip(cnt, it)) for j in range(3)) for cnt in counts]
    return combos, counts, sums


def cheapest_choice(
    kept, n_items: int, d: int, N: int, B: float
) -> tuple[float, tuple[int, ...]] | None:
    """(cost, choice) of the least-cost choice among ``kept`` (:func:`exact_choices_at`)
    with degree ``d``: the first of the least cost in their order; None when none has a
    finite cost."""
    points, levels = kept
    best, best_cost = None, math.inf
    for i, (_m, P, E, W, _, _) in enumerate(points):
        c = float(stage_tps_from_sums(E, W, P, d, N, B))
        if c < best_cost:
            best, best_cost = i, c
    if best is None:
        return None
    choice = [0] * n_items
    point = points[best]
    for parents, positions, combos in reversed(levels):
        # a combo is sorted option indices; give them to the group's positions in order
        for pos, l in zip(positions, combos[point[5]]):
            choice[pos] = l
        point = parents[point[4]]
    return best_cost, tuple(choice)


def monotone_runs(n: int, at: Callable[[int], float]) -> list[tuple[int, int, float]]:
    """The values of a non-decreasing function ``at`` on 0..n-1 as runs (first, last,
    value), disjoint, ascending, adjacent runs of different values, found by bisection:
    where the values at two indices are equal, so are all between them. A few calls per
    step of the function, not one per index.

    It serves the exact choice's least cost as a function of y (the choices that fit at
    y + 1 fit at y: memory a y + b with a >= 0, a y a monotone float product and the sum
    exact, so the least cost never falls as y grows); ``inf`` (nothing fits) is a value
    like any other, and a first value of ``inf`` ends the search at once.

    Parameters
    ----------
    n : int
        The number of indices.
    at : callable
        The function, non-decreasing on 0..n-1.

    Returns
    -------
    list of (int, int, float)

    Examples
    --------
    >>> monotone_runs(10, lambda q: [1, 1, 1, 2, 2, 2, 2, 5, 5, 5][q])
    [(0, 2, 1), (3, 6, 2), (7, 9, 5)]
    """
    if n <= 0:
        return []
    first = at(0)
    if n == 1 or first == math.inf:
        return [(0, n - 1, first)]
    runs: list[tuple[int, int, float]] = []
    todo = [(0, first, n - 1, at(n - 1))]
    while todo:  # a stack, the lower half on top: the runs come out in order
        i, ci, j, cj = todo.pop()
        if ci == cj or j - i == 1:
            pieces = [(i, j, ci)] if ci == cj else [(i, i, ci), (j, j, cj)]
        else:
            m = (i + j) // 2
            cm = at(m)
            todo += [(m, cm, j, cj), (i, ci, m, cm)]
            continue
        for a, b, c in pieces:  # halves share their midpoint: each index once, equal runs merged
            if runs and a <= runs[-1][1]:
                a = runs[-1][1] + 1
            if a > b:
                continue
            if runs and runs[-1][2] == c:
                runs[-1] = (runs[-1][0], b, c)
            else:
                runs.append((a, b, c))
    return runs


# ---------------------------------------------------------------------------------------
# Per-stage chooser usable on its own
# ---------------------------------------------------------------------------------------


def exact_options(
    instance: Instance, nodes: Sequence[int], t: int, d: int, y: int
) -> dict[int, Option] | None:
    """The exact option choice for one stage: least TPS among the choices whose memory
    fits in M exactly (sec. 7) at y microbatches in flight.

    Any number of options per (node, t); exact with floating-point data
    (:func:`exact_choice`).

    Parameters
    ----------
    instance : Instance
    nodes : sequence of node ids
        The stage.
    t, d : int
        The degrees.
    y : int
        Microbatches in flight.

    Returns
    -------
    dict node id -> Option, or None when no choice fits.

    Raises
    ------
    InputError
        Some node of the stage lacks an option for ``t`` (:func:`stage_options`).

    Examples
    --------
    Two nodes, each with "v" (time 1, activations 8 per microbatch) and "r" (time 2 or
    3, activations 1), M = 10: at y = 1 recomputing node 0 is cheapest; at y = 2 only
    recomputing both fits.

    >>> from piper_ilp.instance import instance_from_dict, option_dict
    >>> node = lambda i, p_r: {"id": i, "TMPCs": {"1": [option_dict("v", 1, 0, 8, 0),
    ...     option_dict("r", p_r, 0, 1, 0)]}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10,
    ...     "bandwidth": 1, "mbsInBatch": 2, "nodes": [node(0, 2), node(1, 3)], "edges": []})
    >>> [{v: o.id for v, o in exact_options(inst, [0, 1], 1, 1, y).items()} for y in (1, 2)]
    [{0: 'r', 1: 'v'}, {0: 'r', 1: 'r'}]
    """

    def choose(ordered: list[int]) -> list[int] | None:
        got = exact_choice(
            stage_items(instance, ordered, t), y, instance.M, d, instance.N, instance.B
        )
        return None if got is None else got[1]

    return stage_options(instance, nodes, t, choose)


def stage_options(
    instance: Instance,
    nodes: Sequence[int],
    t: int,
    choose: Callable[[list[int]], Sequence[int] | None],
) -> dict[int, Option] | None:
    """One stage's option choice by a chooser (:func:`exact_options`,
    :func:`dp.greedy_rule.greedy_options`), with the nodes in input order.

    Parameters
    ----------
    instance : Instance
    nodes : sequence of node ids
        The stage, in any order.
    t : int
        The tensor degree.
    choose : callable
        ``choose(ordered)``: given the stage's node ids in input order (each with some
        option for t), the index of each one's option under t, in that order, or None
        when no choice fits.

    Returns
    -------
    dict node id -> Option, or None when ``choose`` finds no choice.

    Raises
    ------
    InputError
        A node has no option for ``t``.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": 0, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1), o("r", 2)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in stage_options(inst, [1, 0], 1, lambda ns: [1, 0]).items()}
    {0: 'r', 1: 'v'}
    """
    order = {v: i for i, v in enumerate(instance.node_ids)}
    ordered = sorted(nodes, key=order.__getitem__)
    for v in ordered:
        if not instance.node[v].options.get(t):
            raise InputError(f"node {v} has no option for t = {t}")
    got = choose(ordered)
    if got is None:
        return None
    return {v: instance.node[v].options[t][int(k)] for v, k in zip(ordered, got)}
