"""Piper's greedy option choice (cost model sec. 5) as the original planner computes it.

For a candidate stage C (nodes in input order), degrees (t, d) and y, every node has at
most two options. The rule: take F (the first option of least cost) when it fits; give up
when even L (the first option of least memory) does not; otherwise switch nodes from F to
their other option O in the order of r = (c_O - c_F) / (m_F - m_O) (only where m_F - m_O
> 1e-9), ascending, ties by node position, until the excess E falls below 1e-9.

Every decision of the rule is made on the very floats that the original planner
(msr-fiddle/piper ``algo.cpp``, ``getAllTPSsForIdealPair`` and ``solveKnapsack`` with
``KNAPSACK_FAST_HEURISTIC``) computes, in its order of operations, so that greedy mode
picks what it picks where options tie in exact arithmetic:

* a node's cut-edge bytes e: a running sum from 0.0 of 2 (c + sfw) over its incoming cut
  edges, then 2 (c + sbw) over its outgoing cut edges, each in the order of the input's
  ``edges`` (:func:`piper_edge_bytes`);
* an option's cost c = (e / d + 4 (d - 1) w / d / N) / B + p / d, operations left to right
  (:func:`piper_cost`); F is option 1 exactly when c_0 > c_1, and r's numerator is the float
  c_O - c_F;
* memory m = a y + b; "F fits" and "L fits" compare a running sum over the nodes (from the
  first) with M; E starts at that sum for F minus M and is lowered by each switch's
  m_F - m_O in turn.

:func:`greedy_rule_grid` is the only implementation of the ranking and the walk; the DP's
stage tables (many stages and y at once) and the plan rebuild (one stage at one y) both
call it, with node rows from :func:`greedy_node_rows`, so they decide alike.

One departure, so that greedy mode never returns a plan the evaluator rejects: memory
fits when the ``fsum`` of the a y and b terms is <= M (sec. 7). Where the rule's choice (F,
or the walk's H) does not fit exactly -- its float sum was within rounding of M, or the
walk stopped with up to 1e-9 bytes of excess -- the rule finds no choice at this y.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dp.knapsack import stage_options
from dp.memory import fits_by_estimate
from piper_ilp.cost import cut_edge_bytes
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, Option

__all__ = [
    "GREEDY_EPS",
    "NodeRows",
    "piper_cost",
    "piper_edge_bytes",
    "greedy_node_rows",
    "running_sum",
    "greedy_last_y",
    "RuleDetail",
    "greedy_rule_rows",
    "walk_ratios",
    "same_order",
    "same_walk",
    "rewalk",
    "choice_fits",
    "greedy_rule_grid",
    "greedy_choice",
    "greedy_choice_over_y",
    "greedy_options",
]

#: The absolute tolerance (bytes) of Piper's greedy rule (sec. 5, step 3).
GREEDY_EPS = 1e-9


class NodeRows:
    """Per node of a stage (columns, in input order): the two options F and O of sec. 5
    (O = F for a single-option node) and ``delta`` = c_O - c_F >= 0 (the original's floats,
    0 for a single-option node). Arrays of length n: ``F``, ``O`` (option indices),
    ``o_first`` (O comes before F in the option list), ``delta``, and per option F/O:
    ``p``, ``e`` (cut-edge bytes), ``w``, ``a``, ``b``."""

    __slots__ = (
        "F",
        "O",
        "o_first",
        "delta",
        "pF",
        "eF",
        "wF",
        "aF",
        "bF",
        "pO",
        "eO",
        "wO",
        "aO",
        "bO",
    )

    def __init__(self, **cols):
        for k, v in cols.items():
            setattr(self, k, v)


def piper_cost(p, e, w, d, N: int, B: float):
    """An option's cost as the original planner computes it (floats or numpy arrays).

    Parameters
    ----------
    p, e, w : float or array
        Compute time, the node's cut-edge bytes (:func:`piper_edge_bytes`), weights.
    d : int or array of int
        Data-parallel degree.
    N : int
    B : float

    Returns
    -------
    float or array
        (e / d + 4 (d - 1) w / d / N) / B + p / d, evaluated left to right with the
        integer 4 (d - 1) formed first: the value of sec. 3 for one node, rounded as
        ``algo.cpp`` rounds it (``piper_ilp.cost`` keeps the evaluator's own order).

    Examples
    --------
    >>> piper_cost(3.0, 0.0, 4.0, 2, 4, 10.0)  # 1.5 + 0.2, not 1.7
    1.7
    >>> piper_cost(6.0, 0.0, 4.0, 2, 4, 10.0) - piper_cost(3.0, 0.0, 4.0, 2, 4, 10.0)
    1.5000000000000002
    """
    return (e / d + 4 * (d - 1) * w / d / N) / B + p / d


def piper_edge_bytes(instance: Instance, v: int, opt: Option, stage) -> float:
    """Node ``v``'s cut-edge bytes, summed as the original planner sums them.

    Parameters
    ----------
    instance : Instance
    v : int
        A node id.
    opt : Option
        One of v's options (its sfw and sbw are used).
    stage : collection of int
        The node ids of the stage holding v.

    Returns
    -------
    float
        From 0.0, one addition at a time: 2 (c + sfw) for each incoming edge from outside
        the stage, then 2 (c + sbw) for each outgoing edge to outside it, each kind in the
        order of the input's edges. (The evaluator's value is the ``fsum`` of the same
        terms, :func:`piper_ilp.cost.node_edge_bytes`.)
    """
    total = 0.0
    for u, c in instance.in_edges.get(v, ()):
        if u not in stage:
            total += cut_edge_bytes(c, opt.sfw[u])
    for x, c in instance.out_edges.get(v, ()):
        if x not in stage:
            total += cut_edge_bytes(c, opt.sbw[x])
    return total


def greedy_node_rows(options: Sequence[Sequence[tuple]], d: int, N: int, B: float) -> NodeRows:
    """The rule's per-node data for a stage with data-parallel degree ``d``.

    Parameters
    ----------
    options : sequence (one entry per node, in input order) of sequences of tuples
        Each node's options (at most two) as (p, e, w, a, b), e the node's cut-edge bytes
        in this stage summed as :func:`piper_edge_bytes` sums them.
    d, N, B : the stage's data-parallel degree, the instance's N and B.

    Returns
    -------
    NodeRows
        F = the first option of least :func:`piper_cost`, O the other one, and delta =
        c_O - c_F in floats.
    """
    F, O, of, dl = [], [], [], []
    for opts in options:
        if len(opts) == 1:
            F.append(0), O.append(0), of.append(False), dl.append(0.0)
            continue
        c0, c1 = (piper_cost(o[0], o[1], o[2], d, N, B) for o in opts[:2])
        if c0 > c1:
            F.append(1), O.append(0), of.append(True), dl.append(c0 - c1)
        else:
            F.append(0), O.append(1), of.append(False), dl.append(c1 - c0)
    cols = {
        "F": np.array(F, dtype=np.int64),
        "O": np.array(O, dtype=np.int64),
        "o_first": np.array(of, dtype=bool),
    }
    cols["delta"] = np.array(dl, dtype=float)
    for tag, idx in (("F", F), ("O", O)):
        sel = [opts[i] for opts, i in zip(options, idx)]
        arr = np.array(sel, dtype=float).reshape(len(sel), 5)
        for j, name in enumerate("pewab"):
            cols[name + tag] = arr[:, j]
    return NodeRows(**cols)


def running_sum(x: np.ndarray) -> np.ndarray:
    """The sum of each row, added as a C loop adds: one float addition at a time.

    Parameters
    ----------
    x : (R, n) array of float

    Returns
    -------
    (R,) array
        0.0 + x[:, 0] + x[:, 1] + ... from the first column to the last (``np.sum`` adds
        pairwise and ``math.fsum`` rounds once; both can differ in the last bits). Trailing
        zero columns do not change it.

    Examples
    --------
    >>> running_sum(np.array([[1e16, 1.0, 1.0], [1.0, 1.0, 1e16]])).tolist()
    [1e+16, 1.0000000000000002e+16]
    """
    out = np.zeros(x.shape[0])
    for k in range(x.shape[1]):
        out += x[:, k]
    return out


def greedy_last_y(
    aF: np.ndarray,
    bF: np.ndarray,
    aO: np.ndarray,
    bO: np.ndarray,
    o_first: np.ndarray,
    cap: int,
    M: float,
) -> np.ndarray:
    """Where Piper's rule stops finding a choice, per stage, as y grows.

    Parameters
    ----------
    aF, bF, aO, bO, o_first : (G, n) arrays
        As :func:`greedy_rule_grid` takes them.
    cap : int
        The largest y of interest.
    M : float

    Returns
    -------
    (G,) array of int
        The largest y <= ``cap`` at which the running sum of L's memory (step 2) is <= M,
        0 when there is none. The rule finds no choice at any larger y: the sum never falls
        as y grows (a >= 0), so a binary search finds it.

    Examples
    --------
    >>> ones = np.ones((1, 2))
    >>> greedy_last_y(3 * ones, ones, ones, ones, ones > 1, 10, 7.0).tolist()  # 2 y + 2 <= 7
    [2]
    """
    G = aF.shape[0]
    lo = np.zeros(G, dtype=np.int64)  # L fits at every y <= lo (vacuously at 0)
    hi = np.full(G, int(cap), dtype=np.int64)  # ... and at no y > hi
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = np.where(open_, (lo + hi + 1) // 2, lo)
        y = np.maximum(mid, 1).astype(float)[:, None]
        mF, mO = aF * y + bF, aO * y + bO
        take_L = (mO < mF) | ((mO == mF) & o_first)
        fits = running_sum(np.where(take_L, mO, mF)) <= M
        lo = np.where(open_ & fits, mid, lo)
        hi = np.where(open_ & ~fits, mid - 1, hi)


class RuleDetail:
    """What :func:`greedy_rule_rows` decided on, for the rows where the walk ran (step 3):
    ``rows`` (their indices), ``order`` (per such row, the node positions by ascending r,
    ties by position), ``sav`` (m_F - m_O per node), ``valid`` (sav > 1e-9) and
    ``excess`` (the running sum of m_F minus M). Only ``order`` depends on the costs
    (through delta); the rest depends on memory alone. From :func:`greedy_rule_rows`
    also, in the walk's order, ``ratios`` (r, inf where the saving does not count) and
    ``sav_sorted`` (sav, 0 where it does not count), and ``count``, the nodes the walk
    switched (None when not given)."""

    __slots__ = ("rows", "order", "sav", "valid", "excess", "ratios", "sav_sorted", "count")

    def __init__(self, rows, order, sav, valid, excess, ratios=None, sav_sorted=None, count=None):
        self.rows, self.order, self.sav, self.valid = rows, order, sav, valid
        self.excess = excess
        self.ratios, self.sav_sorted, self.count = ratios, sav_sorted, count

    def subset(self, at) -> RuleDetail:
        """The walked rows ``at`` (indices into these rows, or a mask)."""
        rest = (None if x is None else x[at] for x in (self.ratios, self.sav_sorted, self.count))
        return RuleDetail(
            self.rows[at], self.order[at], self.sav[at], self.valid[at], self.excess[at], *rest
        )


def greedy_rule_rows(
    delta: np.ndarray,
    aF: np.ndarray,
    bF: np.ndarray,
    aO: np.ndarray,
    bO: np.ndarray,
    o_first: np.ndarray,
    y: np.ndarray,
    M: float,
    detail: bool = False,
    l_fits: bool = False,
    stage_of: np.ndarray | None = None,
):
    """Piper's rule (sec. 5) for R stages, each at its own y.

    Parameters
    ----------
    delta, aF, bF, aO, bO, o_first : (R, n) arrays
        Per row (a stage) and node (columns in input order; trailing columns with delta =
        a = b = 0 are padding): c_O - c_F (:class:`NodeRows`), the memory slope and
        constant of F and O, and whether O precedes F in the option list. With
        ``stage_of``: (G, n) arrays, one row per stage.
    y : (R,) array of int
        Each row's microbatches in flight.
    M : float
    detail : bool
        Also return a :class:`RuleDetail`.
    l_fits : bool
        The caller knows that L fits in every row (step 2 passes: each row's y is at most
        :func:`greedy_last_y` of its stage), so the rule does not sum L again.
    stage_of : (R,) array of int, optional
        Row k is stage ``stage_of[k]`` (of the (G, n) columns) at ``y[k]``: each column
        is read only for the rows that need it.

    Returns
    -------
    switched : (R, n) bool array
        Which nodes take O.
    feasible : (R,) bool array
        False where no choice fits (step 2), or the rule's choice does not fit exactly
        (sec. 7; see the module's note).
    detail : RuleDetail
        Only with ``detail=True``.

    Notes
    -----
    A row's outcome depends on delta only through ``detail.order``: a row at the same y
    with the same memory columns and an order that :func:`same_order` accepts has the same
    outcome.
    """
    yv = np.asarray(y, dtype=float)[:, None]
    R, n = len(yv), aF.shape[1]
    at = np.arange(R) if stage_of is None else stage_of  # (each row's stage)
    mF = (aF * yv + bF) if stage_of is None else (aF[at] * yv + bF[at])
    switched = np.zeros((R, n), dtype=bool)
    feasible = np.zeros(R, dtype=bool)
    none = np.zeros((0, n), dtype=np.int64)
    info = RuleDetail(none[:, 0], none, np.zeros((0, n)), none > 0, np.zeros(0))
    if n == 0:
        feasible[:] = True
        return (switched, feasible, info) if detail else (switched, feasible)

    def terms(r, take_O):  # (a y and b of the choice, for an exact sum near M)
        ya, g = float(yv[r, 0]), at[r]
        return (
            np.where(take_O, aO[g] * ya, aF[g] * ya).tolist()
            + np.where(take_O, bO[g], bF[g]).tolist()
        )

    # step 1: the running sum of m_F against M, as the original decides; a choice taken
    # must also fit exactly (sec. 7)
    sumF = running_sum(mF)
    takeF = sumF <= M
    if takeF.any():
        rows_F = np.nonzero(takeF)[0]
        no_switch = np.zeros(n, dtype=bool)
        feasible[rows_F] = fits_by_estimate(
            sumF[rows_F], 2 * n, M, lambda k: terms(int(rows_F[k]), no_switch)
        )
    if takeF.all():
        return (switched, feasible, info) if detail else (switched, feasible)
    # step 2: L = the first option of least memory; its running sum above M: no choice
    # (m_O only where F does not fit)
    rows = np.nonzero(~takeF)[0]
    mFr = mF[rows]
    mOr = aO[at[rows]] * yv[rows] + bO[at[rows]]
    if not l_fits:
        take_L = (mOr < mFr) | ((mOr == mFr) & o_first[at[rows]])
        ok = running_sum(np.where(take_L, mOr, mFr)) <= M
        rows, mFr, mOr = rows[ok], mFr[ok], mOr[ok]
    if len(rows):
        sav = mFr - mOr
        valid = sav > GREEDY_EPS
        r = walk_ratios(delta[at[rows]], sav, valid)
        order = np.argsort(r, axis=1, kind="stable")  # (ties by node position)
        walked = _walk(r, order, sav, valid, sumF[rows] - M, sorted_out=detail)
        sw = walked[0] if detail else walked
        switched[rows] = sw
        feasible[rows] = _fits(sw, mFr, mOr, M, lambda k: terms(int(rows[k]), sw[k]))
        if detail:
            _, r_sorted, sav_sorted = walked
            excess = sumF[rows] - M
            info = RuleDetail(rows, order, sav, valid, excess, r_sorted, sav_sorted, sw.sum(axis=1))
    return (switched, feasible, info) if detail else (switched, feasible)


def choice_fits(
    switched: np.ndarray,
    aF: np.ndarray,
    bF: np.ndarray,
    aO: np.ndarray,
    bO: np.ndarray,
    y: np.ndarray,
    M: float,
) -> np.ndarray:
    """Whether each row's choice fits exactly (sec. 7): the ``fsum`` of the a y and b
    terms of F, or of O where ``switched``, is <= M.

    Parameters
    ----------
    switched : (R, n) bool array
    aF, bF, aO, bO : (R, n) arrays
        As :func:`greedy_rule_rows` takes them.
    y : (R,) array of int
    M : float

    Returns
    -------
    (R,) bool array
        What :func:`greedy_rule_rows` finds for a walked row whose walk switched
        ``switched``.
    """
    yv = np.asarray(y, dtype=float)[:, None]
    ayF, ayO = aF * yv, aO * yv

    def terms(k):
        t = switched[k]
        return np.where(t, ayO[k], ayF[k]).tolist() + np.where(t, bO[k], bF[k]).tolist()

    return _fits(switched, ayF + bF, ayO + bO, M, terms)


def _fits(sw, mF, mO, M: float, terms_of_row) -> np.ndarray:
    """:func:`choice_fits` with m = a y + b of F and O made: the float sum of each row's
    choice decides away from M, ``terms_of_row(k)`` (row k's a y and b terms) near it
    (:func:`dp.memory.fits_by_estimate`)."""
    est = np.where(sw, mO, mF).sum(axis=1)
    return fits_by_estimate(est, 2 * sw.shape[1], M, terms_of_row)


def walk_ratios(delta: np.ndarray, sav: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The walk's ratios r = delta / (m_F - m_O) where the saving counts (``valid``),
    inf elsewhere (arrays of one shape)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(valid, delta / np.where(valid, sav, 1.0), np.inf)


def _walk(r: np.ndarray, order: np.ndarray, sav: np.ndarray, valid, excess, sorted_out=False):
    """Step 3: switch nodes in ``order`` (the stable ascending order of the ratios ``r``)
    until the excess (starting at ``excess``, lowered by each switch's saving in turn)
    falls below 1e-9. Returns switched (rows, n); with ``sorted_out``, also ``r`` and the
    savings that count (0 elsewhere) in ``order``."""
    R, n = order.shape
    flat = order + (np.arange(R) * n)[:, None]  # (order's places in the rows laid flat)
    sav_sorted = np.where(valid, sav, 0.0).ravel()[flat]
    E = np.empty_like(sav_sorted)
    run = excess
    for k in range(n):
        run = run - sav_sorted[:, k]
        E[:, k] = run
    # the valid nodes come first in the order where their ratios are finite (the others'
    # are inf); else (a ratio out of range) where they are is gathered
    finite = not np.any(valid & ~(r < np.inf))
    n_valid = valid.sum(axis=1)
    if finite:
        valid_sorted = np.arange(n)[None, :] < n_valid[:, None]
    else:
        valid_sorted = np.take_along_axis(valid, order, axis=1)
    stop = (E < GREEDY_EPS) & valid_sorted
    first = np.argmax(stop, axis=1)
    stopped = stop[np.arange(R), first]
    count = np.where(stopped, first + 1, n_valid)
    if not finite:  # (no stop: every valid node, wherever it is in the order)
        count = np.where(stopped, count, n)
        take_sorted = (np.arange(n)[None, :] < count[:, None]) & valid_sorted
        sw = np.zeros(order.shape, dtype=bool)
        np.put_along_axis(sw, order, take_sorted, axis=1)
        return (sw, r.ravel()[flat], sav_sorted) if sorted_out else sw
    # the first count nodes of the order: (ratio, position) below those of the next one
    rows = np.arange(R)
    thr_p = order[rows, np.minimum(count, n - 1)][:, None]
    thr_r = r[rows[:, None], thr_p]
    pos = np.arange(n)[None, :]
    sw = (r < thr_r) | ((r == thr_r) & (pos < thr_p))
    sw[count == n] = True
    return (sw, r.ravel()[flat], sav_sorted) if sorted_out else sw


def rewalk(delta: np.ndarray, info: RuleDetail) -> np.ndarray:
    """The walk (step 3) of each row of ``info`` (from :func:`greedy_rule_rows`) again with
    other costs ``delta`` (as :func:`same_order` takes them).

    Returns a (len(info.rows), n) bool array: which nodes take O, the rule's choice with
    ``delta`` where it walks. Whether that choice fits exactly depends on the choice and
    memory alone, not on the costs.
    """
    r = walk_ratios(delta, info.sav, info.valid)
    order = np.argsort(r, axis=1, kind="stable")
    return _walk(r, order, info.sav, info.valid, info.excess)


def same_order(delta: np.ndarray, info: RuleDetail) -> np.ndarray:
    """Whether the walk's order of each row of ``info`` stays the same with other costs.

    Parameters
    ----------
    delta : (len(info.rows), n) array
        The other c_O - c_F per node of each walked row (same F and O, same memory).
    info : RuleDetail
        From :func:`greedy_rule_rows`.

    Returns
    -------
    (len(info.rows),) bool array
        True where ``info.order`` is exactly the stable ascending order of the ratios that
        ``delta`` gives (non-decreasing, equal ratios by node position): the walk, and so
        the rule's outcome, is then the same with ``delta``.
    """
    r = np.take_along_axis(walk_ratios(delta, info.sav, info.valid), info.order, axis=1)
    o = info.order
    ok = (r[:, 1:] > r[:, :-1]) | ((r[:, 1:] == r[:, :-1]) & (o[:, 1:] > o[:, :-1]))
    return ok.all(axis=1)


def same_walk(delta: np.ndarray, info: RuleDetail, count: np.ndarray) -> np.ndarray:
    """Whether the walk of each row of ``info`` switches the same nodes with other costs,
    decided from the walk's order alone (a sufficient condition: unlike
    :func:`same_order` it lets the order change among the nodes walked over and among
    those after them; equal ratios where it looks fail it). It states what
    :mod:`dp.greedy_tables` relies on when it shares the rule's outcome across d.

    Parameters
    ----------
    delta : (len(info.rows), n) array
        The other c_O - c_F per node of each walked row (same F and O, same memory).
    info : RuleDetail
        From :func:`greedy_rule_rows`.
    count : (len(info.rows),) array of int
        How many nodes each row's walk switched (the first ``count`` of ``info.order``).

    Returns
    -------
    (len(info.rows),) bool array
        True where, with ``delta``'s ratios, every node of the walk's first ``count``
        has a ratio below those of the nodes after them, and every run of equal savings
        among the first ``count`` ratios below those of the later ones. The walk with
        ``delta`` then meets the same savings in the same order up to its stop (a
        reordering within a run of equal savings subtracts the same floats), so it
        stops at the same step and switches the same nodes. False says nothing.

    Examples
    --------
    Two nodes with equal savings swap places; the walk switches both either way.

    >>> info = RuleDetail(np.array([0]), np.array([[0, 1, 2]]), np.array([[2.0, 2.0, 1.0]]),
    ...     np.array([[True, True, True]]), np.array([3.0]))
    >>> same_walk(np.array([[2.0, 1.0, 9.0]]), info, np.array([2])).tolist()
    [True]
    >>> same_walk(np.array([[2.0, 9.0, 1.0]]), info, np.array([2])).tolist()
    [False]
    """
    o = info.order
    R, n = o.shape
    if n < 2 or not R:
        return np.ones(R, dtype=bool)
    r = np.take_along_axis(walk_ratios(delta, info.sav, info.valid), o, axis=1)
    sv = np.take_along_axis(info.sav, o, axis=1)
    j = np.arange(1, n)[None, :]
    k = np.asarray(count)[:, None]
    cut = (j == k) | ((j < k) & (sv[:, 1:] != sv[:, :-1]))  # the places to check
    # the greatest ratio before each place against the least from it on
    head = np.maximum.accumulate(r, axis=1)[:, :-1]
    tail = np.minimum.accumulate(r[:, ::-1], axis=1)[:, ::-1][:, 1:]
    return ~np.any(cut & ~(head < tail), axis=1)


def greedy_rule_grid(cols: tuple, ys: np.ndarray, M: float) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule (sec. 5) for G stages at each of Y values of y
    (:func:`greedy_rule_rows` on every pair).

    Parameters
    ----------
    cols : tuple of (G, n) arrays
        (delta, aF, bF, aO, bO, o_first) per stage, as :func:`greedy_rule_rows` takes them.
    ys : (Y,) array of int
        The microbatches in flight to evaluate.
    M : float

    Returns
    -------
    switched : (G, Y, n) bool array
        Which nodes take O.
    feasible : (G, Y) bool array
        False where no choice fits (step 2), or the rule's choice does not fit exactly
        (sec. 7; see the module's note).

    Examples
    --------
    Two nodes whose ratios tie in exact arithmetic (1.5 / 6 and 1 / 4), the first one's
    cost difference rounded up in floats: the second node switches first, as in
    ``algo.cpp``.

    >>> c = lambda p: piper_cost(p, 0.0, 4.0, 2, 4, 10.0)
    >>> delta = np.array([[c(6.0) - c(3.0), 1.0]])
    >>> sw, ok = greedy_rule_grid((delta, np.array([[3.0, 2.0]]), np.array([[1.0, 2.0]]),
    ...     np.array([[0.0, 0.0]]), np.array([[1.0, 2.0]]), np.array([[True, False]])),
    ...     np.array([2]), 9.0)
    >>> sw[0, 0].tolist(), bool(ok[0, 0])
    ([False, True], True)
    """
    G, n = cols[1].shape
    Y = len(ys)
    rows = cols if Y == 1 else tuple(np.repeat(x, Y, axis=0) for x in cols)
    sw, feas = greedy_rule_rows(*rows, np.tile(np.asarray(ys), G), M)
    return sw.reshape(G, Y, n), feas.reshape(G, Y)


def greedy_choice(
    costs: Sequence[Sequence[float]], mems: Sequence[Sequence[float]], M: float
) -> list[int] | None:
    """Piper's rule (sec. 5) on plain lists: per node (in input order) and option (at
    most two), the cost c_il and the memory m_il (each one term).

    Returns the option index per node, or None when no choice fits.

    Examples
    --------
    >>> greedy_choice([[1, 2], [1, 3]], [[8, 1], [8, 1]], 10)
    [1, 0]
    """
    n = len(costs)
    opts = []
    for c, m in zip(costs, mems):
        if len(c) > 2:
            raise InputError(
                "Piper's greedy option choice is defined for at most two options per node, got "
                f"{len(c)}"
            )
        opts.append([(float(cl), 0.0, 0.0, float(ml), 0.0) for cl, ml in zip(c, m)])
    rows = greedy_node_rows(opts, 1, 1, 1.0)  # e = w = 0, d = B = 1: piper_cost is c itself
    sw, feas = _one_stage(rows, 1, M)
    if not feas:
        return None
    return [int(rows.O[i] if sw[i] else rows.F[i]) for i in range(n)]


def greedy_choice_over_y(
    dc: np.ndarray, mF: np.ndarray, mO: np.ndarray, M: float
) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule for two options per node (F first), for many y at once: ``dc`` (n,)
    is c_O - c_F >= 0, ``mF``, ``mO`` (Y, n) the memories per y (rows), each one term.
    Returns (switched (Y, n), feasible (Y,)) as :func:`greedy_rule_grid`."""
    mF = np.asarray(mF, dtype=float)
    mO = np.asarray(mO, dtype=float)
    Y, n = mF.shape
    zeros = np.zeros_like(mF)
    dk = np.broadcast_to(np.asarray(dc, dtype=float), mF.shape)
    sw, feas = greedy_rule_grid(
        (dk, mF, zeros, mO, zeros, np.zeros(mF.shape, dtype=bool)), np.ones(1), M
    )
    return sw[:, 0, :], feas[:, 0]


def _stage_option_rows(instance: Instance, nodes: Sequence[int], t: int) -> list[list[tuple]]:
    """Per node id of ``nodes`` (in the given order), its options under ``t`` as
    (p, e, w, a, b), e its cut-edge bytes in the stage made of ``nodes``
    (:func:`piper_edge_bytes`)."""
    members = set(nodes)
    return [
        [(o.p, piper_edge_bytes(instance, v, o, members), o.w, o.a, o.b) for o in opts]
        for v, opts in ((v, instance.node[v].options[t]) for v in nodes)
    ]


def greedy_options(
    instance: Instance, nodes: Sequence[int], t: int, d: int, y: int
) -> dict[int, Option] | None:
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
    Node 0 saves more memory per unit of time by recomputation ("r"), so it switches
    first (:func:`dp.knapsack.exact_options` picks the same here).

    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p, a): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": a, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1, 8), o("r", 2, 1)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1, 8), o("r", 3, 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in greedy_options(inst, [0, 1], 1, 1, 1).items()}
    {0: 'r', 1: 'v'}
    """

    def choose(ordered: list[int]) -> list[int] | None:
        for v in ordered:
            k = len(instance.node[v].options[t])
            if k > 2:
                raise InputError(
                    "Piper's greedy option choice is defined for at most two options per "
                    f"(node, t); node {v} has {k} for t = {t}"
                )
        rows = greedy_node_rows(_stage_option_rows(instance, ordered, t), d, instance.N, instance.B)
        sw, feas = _one_stage(rows, y, instance.M)
        if not feas:
            return None
        return [int(rows.O[i] if sw[i] else rows.F[i]) for i in range(len(ordered))]

    return stage_options(instance, nodes, t, choose)


def _one_stage(rows: NodeRows, y: int, M: float) -> tuple[np.ndarray, bool]:
    """:func:`greedy_rule_grid` for one stage at one y: (switched per node, feasible)."""
    sw, feas = greedy_rule_grid(
        tuple(x[None, :] for x in (rows.delta, rows.aF, rows.bF, rows.aO, rows.bO, rows.o_first)),
        np.array([y]),
        M,
    )
    return sw[0, 0], bool(feas[0, 0])
