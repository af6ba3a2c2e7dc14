"""The stage tables in greedy mode: each stage's options by Piper's rule (cost model sec. 5).

:class:`GreedyTables` queues the candidate pairs (I, J) of many sets I with their stages
C = I \\ J (one stage id per C, :class:`dp.stage_queue.StageQueue`), makes the new stages'
states many per numpy pass, and stores per (C, t, d) the runs of y over which the rule's
choice (and so the cost) stays the same. The rule decides on the original planner's floats
(:mod:`dp.greedy_rule`): a node's cost depends on d and on its own cut edges, so the
rule's order can change with d. On stages of plain nodes (options that differ only in p, a,
b) it runs for many stages per numpy call, once per distinct sequence of node options and cut
bytes, at one d, and is reused at the other d where the nodes it switches provably stay
first, or the walk gives them again (:func:`shared_rule_runs`); on general stages it runs
at every d, many stages (one per distinct sequence of node options) per numpy call
(:func:`general_rule_runs`).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from dp.exact_states import ExactStates
from dp.greedy_rule import (
    RuleDetail,
    choice_fits,
    greedy_last_y,
    greedy_rule_grid,
    greedy_rule_rows,
    piper_cost,
    rewalk,
    running_sum,
)
from dp.knapsack import stage_tps_from_sums
from dp.stage_context import FILTER_LOW_BITS, BuildBatches, StageContext
from dp.stage_geometry import StageGeometry, bits, lowest_sink, set_words
from dp.stage_queue import StageQueue
from dp.table_arrays import distinct_rows, sorted_unique
from dp.table_store import StageTables
from piper_ilp.cost import cut_edge_bytes

__all__ = [
    "GreedyTables",
    "general_rule_runs",
    "plain_node_data",
    "plain_rule_columns",
    "plain_rule_runs",
    "shared_rule_runs",
]


def plain_node_data(ctx: StageContext, geo: StageGeometry, t: int) -> tuple:
    """The numbers Piper's rule reads of each plain node under ``t``.

    Parameters
    ----------
    ctx : StageContext
    geo : StageGeometry
    t : int
        The tensor degree.

    Returns
    -------
    opt : (n, 8) numpy.ndarray
        Per node position, (p0, p1, a0, b0, a1, b1, w, two options) (a single option
        repeated); nan for a node that is not plain under t or has more than two options.
    terms, other : (n, deg) numpy.ndarray
        Per node, its incident edges in the order the rule sums them
        (:func:`dp.greedy_rule.piper_edge_bytes`: incoming, then outgoing, each in input
        order): the term 2 (c + sync) and the other end's position (padding: the term 0 at
        the node itself, never cut).
    cls : (n,) numpy.ndarray of int
        A class id per node, equal for equal ``opt`` rows.
    """
    ids, preds, succs = ctx.ids, geo.preds, geo.succs
    n = len(ids)
    opt = np.full((n, 8), np.nan)
    deg = max((len(preds[i]) + len(succs[i]) for i in range(n)), default=0)
    terms = np.zeros((n, deg))
    other = np.tile(np.arange(n)[:, None], (1, deg))
    for i, nd in enumerate(ctx.inst.nodes):
        opts = nd.options.get(t)
        if not opts or len(opts) > 2 or not ctx.plain[(i, t)]:
            continue
        o0, o1 = opts[0], opts[-1]
        opt[i] = (o0.p, o1.p, o0.a, o0.b, o1.a, o1.b, o0.w, float(len(opts) == 2))
        ends = [(u, cut_edge_bytes(c, o0.sfw[ids[u]])) for u, c, _ in preds[i]]
        ends += [(x, cut_edge_bytes(c, o0.sbw[ids[x]])) for x, c, _ in succs[i]]
        for j, (u, term) in enumerate(ends):
            other[i, j], terms[i, j] = u, term
    classes: dict[bytes, int] = {}
    cls = np.array([classes.setdefault(row.tobytes(), len(classes)) for row in opt])
    return opt, terms, other, cls.astype(np.int64)


def plain_rule_runs(rows: np.ndarray, sizes: np.ndarray, cap: int, M: float, check) -> tuple:
    """Piper's rule for y = 1..cap on blocks of plain nodes, many blocks per numpy call.

    Parameters
    ----------
    rows : (sum(sizes), 8) numpy.ndarray
        The blocks' nodes end to end (a block: a stage at one d, its nodes in input
        order): (c_O - c_F, a_F, b_F, a_O, b_O, O before F, p_F, p_O).
    sizes : (U,) numpy.ndarray of int
        The nodes of each block.
    cap : int
        The largest y.
    M : float
        Memory per device.
    check : callable
        Called between numpy calls (the time limit).

    Returns
    -------
    run_u, lo, hi, P : numpy.ndarray
        The runs of equal choice over the y where the rule finds one, by block and y: the
        block, first and last y, and P (the chosen p summed node by node in input order,
        :func:`dp.greedy_rule.running_sum`, so that it does not depend on the padding).
    mono : (U,) numpy.ndarray of bool
        Whether a block's runs cover y = 1..k without gaps and P never falls.

    Notes
    -----
    The blocks go by their last y with a choice and size, in chunks of about 50,000
    node-y cells, each chunk padded to its widest block with zero columns (which change no
    sum and are never switched) and evaluated up to its largest last y.
    """
    U = len(sizes)
    starts = np.cumsum(sizes) - sizes
    parts = [(np.empty(0, dtype=np.int64),) * 3 + (np.empty(0),)]
    mono = np.ones(U, dtype=bool)
    # each block's last y with a choice (above it the rule finds none), blocks by size
    last = np.zeros(U, dtype=np.int64)
    by_size = np.argsort(sizes, kind="stable")
    for idx in _chunks(by_size, sizes, np.ones(U, dtype=np.int64), 50_000):
        check()
        block = _dense(rows, starts, sizes, idx)
        last[idx] = greedy_last_y(
            *(block[:, :, j] for j in range(1, 5)), block[:, :, 5] > 0, cap, M
        )
    # the rule at y = 1..last, blocks by last y and size, in chunks of about 50,000
    # node-y cells (each padded to its widest block and its largest last y; larger
    # chunks leave the cache and are slower per cell)
    live = np.flatnonzero(last > 0)
    order = live[np.lexsort((sizes[live], last[live]))]
    for idx in _chunks(order, sizes, last, 50_000):
        check()
        sg, lo, hi, P, ok = _rule_runs(_dense(rows, starts, sizes, idx), last[idx], M)
        mono[idx] = ok
        parts.append((idx[sg], lo, hi, P))
    run_u, lo, hi, P = (np.concatenate([x[k] for x in parts]) for k in range(4))
    order = np.lexsort((lo, run_u))
    return run_u[order], lo[order], hi[order], P[order], mono


def shared_rule_runs(
    opt: np.ndarray,
    cls: np.ndarray,
    e: np.ndarray,
    sizes: np.ndarray,
    ds: np.ndarray,
    caps: np.ndarray,
    need: np.ndarray,
    settings: tuple,
    check,
) -> list:
    """:func:`plain_rule_runs` for every d at once, the rule evaluated once per block where
    the d agree.

    Parameters
    ----------
    opt : (classes, 8) numpy.ndarray
        The rows of the node classes (as :func:`plain_node_data` gives them per node).
    cls : (sum(sizes),) numpy.ndarray of int
        The blocks' nodes end to end, each block's in input order, as their classes: node
        i's row is ``opt[cls[i]]``.
    e : (sum(sizes),) numpy.ndarray
        Each node's cut bytes in its block, summed as the rule sums them.
    sizes : (U,) numpy.ndarray of int
        The nodes of each block (at least one).
    ds : (D,) numpy.ndarray of int
        The data-parallel degrees, ascending.
    caps : (D,) numpy.ndarray of int
        The largest y per d (non-increasing).
    need : (U, D) numpy.ndarray of bool
        Which blocks are wanted at which d.
    settings : tuple
        (N, B, M) of the instance.
    check : callable
        Called between numpy calls (the time limit).

    Returns
    -------
    list (one per d) of tuples (run_u, lo, hi, P, mono)
        As :func:`plain_rule_runs` returns them for the blocks ``need`` asks for at that d
        (``mono`` over all U blocks, True where not asked for).

    Notes
    -----
    Only the costs depend on d: memory, and so whether F fits, where L stops fitting
    (:func:`dp.greedy_rule.greedy_last_y`, once per block) and the savings, do not, as
    long as each node's F is the same option. Per block, the rule runs at the first d
    asked for (the largest cap). At another d with the same F per node, the rule's
    outcome at each y is the same when the nodes its walk switched still come first in
    that d's order, the runs of equal savings among them in their order
    (:func:`same_walk`; for certain where the ratios are far enough apart,
    :func:`_walk_margin`); the runs are then the first d's runs cut at that d's last y.
    Rows that switch other nodes at that d are rerun there; blocks where F differs go
    through :func:`plain_rule_runs` at their own d.
    """
    N, B, M = settings
    kind, one, delta_k, F_k = _node_kinds(cls, e, opt, ds, N, B)
    U, D = need.shape
    starts = np.cumsum(sizes) - sizes
    ref = np.argmax(need, axis=1)
    pk, pd, node_pair = _ref_pairs(kind, len(one), ref, sizes, D)
    pair_rows = _rule_columns(opt[cls[one[pk]]], delta_k[pk, pd], F_k[pk, pd])
    kappa, same_F = _shared_bounds(delta_k[pk], F_k[pk], pd, pair_rows, node_pair, sizes, ds)
    shared = need & same_F
    blocks = (pair_rows, node_pair, starts, sizes)
    costs_of = (delta_k, kind)
    runs, y_ud, fail, redo = _shared_ref_runs(blocks, costs_of, shared, ref, kappa, caps, M, check)

    def own_columns(at, j):  # (the rows of nodes ``at`` at d index j)
        return _rule_columns(opt[cls[at]], delta_k[kind[at], j], F_k[kind[at], j])

    out = []
    for j in range(D):
        check()
        use = shared[:, j] & ~fail[:, j]
        ru, rl, rh, rp, mono = _cut_runs(runs, use, y_ud[:, j], redo[j])
        own = np.flatnonzero(need[:, j] & ~shared[:, j])
        if len(own):
            n_of = sizes[own]
            at = np.repeat(starts[own] - (np.cumsum(n_of) - n_of), n_of) + np.arange(n_of.sum())
            o_u, o_lo, o_hi, o_P, o_mono = plain_rule_runs(
                own_columns(at, j), n_of, int(caps[j]), M, check
            )
            mono[own] = o_mono
            ru, rl, rh, rp = (
                np.concatenate(x) for x in ((ru, own[o_u]), (rl, o_lo), (rh, o_hi), (rp, o_P))
            )
            by = np.lexsort((rl, ru))
            ru, rl, rh, rp = ru[by], rl[by], rh[by], rp[by]
        out.append((ru, rl, rh, rp, mono))
    return out


def _node_kinds(cls: np.ndarray, e: np.ndarray, opt: np.ndarray, ds: np.ndarray, N, B) -> tuple:
    """The kinds of node (equal class ``cls`` and cut bytes ``e``) of
    :func:`shared_rule_runs`: per node its kind, per kind one node of it, and per kind and
    d its c_O - c_F and whether option 1 is F ((kinds, D) each, :func:`_rule_costs`)."""
    e_vals = sorted_unique(e)
    key = cls.astype(np.int64) * len(e_vals) + np.searchsorted(e_vals, e)
    keys = sorted_unique(key)
    kind = np.searchsorted(keys, key)
    one = np.empty(len(keys), dtype=np.int64)
    one[kind] = np.arange(len(kind))
    costs = [_rule_costs(opt[cls[one]], e[one], d, N, B) for d in ds.tolist()]
    delta_k = np.stack([c[0] for c in costs], axis=1)  # (kinds, D)
    F_k = np.stack([c[1] for c in costs], axis=1)
    return kind, one, delta_k, F_k


def _ref_pairs(kind: np.ndarray, n_kinds: int, ref: np.ndarray, sizes, D: int) -> tuple:
    """The pairs (kind, first d) that the nodes of blocks (``sizes`` nodes each, of kinds
    ``kind``, ``n_kinds`` of them; block g's first d index ``ref[g]``) take: per pair its
    kind and d index, and per node its pair."""
    if len(ref) and (ref == ref[0]).all():
        return np.arange(n_kinds), np.full(n_kinds, ref[0]), kind
    pair = kind * D + np.repeat(ref, sizes)
    pairs = sorted_unique(pair)
    return pairs // D, pairs % D, np.searchsorted(pairs, pair)


def _shared_bounds(delta, F, pd, pair_rows, node_pair, sizes, ds) -> tuple:
    """Per block and d (blocks of ``sizes`` nodes, node i of pair ``node_pair[i]``; per
    pair its kind's costs ``delta`` and F flags ``F`` at every d (pairs, D), its first d
    index ``pd`` and its rows there ``pair_rows``): kappa, how far the costs may stray
    from d_ref / d times the first d's (the largest spread of its nodes' pairs,
    :func:`_cost_spread`; for blocks whose pairs all stray by at most 1e-13, the largest
    of all such pairs: a larger bound only walks more rows again), plus 1e-15; and
    whether F per node is the same at d as at the block's first d."""
    U, D = len(sizes), len(ds)
    starts = np.cumsum(sizes) - sizes
    spread = _cost_spread(delta, pd, ds)
    wide = ~(spread <= 1e-13).all(axis=1)
    moves = (F != F[np.arange(len(pd)), pd][:, None]).any(axis=1)
    small = np.where(wide[:, None], 0.0, spread).max(axis=0, initial=0.0)
    kappa = np.tile(small + 1e-15, (U, 1))
    same_F = np.ones((U, D), dtype=bool)
    hit = np.zeros(0, dtype=np.int64)
    if U and (wide.any() or moves.any()):
        hit = np.flatnonzero(np.logical_or.reduceat((wide | moves)[node_pair], starts))
    if len(hit):
        n_of = sizes[hit]
        seg = np.cumsum(n_of) - n_of
        at = node_pair[np.repeat(starts[hit] - seg, n_of) + np.arange(n_of.sum())]
        kappa[hit] = np.maximum.reduceat(spread[at], seg) + 1e-15
        same_F[hit] = np.minimum.reduceat(F[at] == (pair_rows[at, 5] > 0)[:, None], seg)
    return kappa, same_F


def _shared_ref_runs(blocks, costs_of, shared, ref, kappa, caps, M: float, check) -> tuple:
    """The rule at each block's first d (:func:`shared_rule_runs`), and where it decides
    otherwise at the other d ``shared`` asks for.

    ``blocks`` = (pair_rows, node_pair, starts, sizes): the rows of the (kind, first d)
    pairs, per node its pair, and the blocks' nodes; ``costs_of`` = (delta, kind): per
    kind its costs at every d and per node its kind; ``ref`` each block's first d index,
    ``kappa`` (blocks, D) its costs' spread (:func:`_shared_bounds`), ``caps`` the largest
    y per d. Returns the first d's runs (block, first y, last y, P; by block and y), per
    block and d the last y where L fits (0 where not shared), per block and d whether
    some row decides otherwise there, and per d the runs of those blocks there."""
    pair_rows, node_pair, starts, sizes = blocks
    U, D = shared.shape
    live = np.flatnonzero(shared.any(axis=1))
    y_ud = np.zeros((U, D), dtype=np.int64)
    fail = np.zeros((U, D), dtype=bool)
    redo: list[list] = [[] for _ in range(D)]
    parts = [(np.empty(0, dtype=np.int64),) * 3 + (np.empty(0),)]
    # blocks by size, in chunks of about 50,000 node cells, each made dense once: where L
    # stops fitting, then the rule at y = 1..that in pieces of about 50,000 node-y cells
    by_size = live[np.argsort(sizes[live], kind="stable")]
    for chunk in _chunks(by_size, sizes, np.ones(U, dtype=np.int64), 50_000):
        check()
        dense = _dense(pair_rows, starts, sizes, chunk, node_pair)
        last = greedy_last_y(
            *(dense[:, :, j] for j in range(1, 5)), dense[:, :, 5] > 0, int(caps.max()), M
        )
        y_ud[chunk] = np.where(shared[chunk], np.minimum(last[:, None], caps[None, :]), 0)
        ys = y_ud[chunk].max(axis=1)
        for a, b in _row_pieces(ys, sizes[chunk], 50_000):
            check()
            idx, block = chunk[a:b], dense[a:b, : sizes[chunk[b - 1]]]
            sg, lo, hi, P, sw, code, feas, info, g_row, y_row, run_of = _ref_runs(block, ys[a:b], M)
            parts.append((idx[sg], lo, hi, P))
            eligible = shared[idx] & (ref[idx, None] != np.arange(D)) & (y_ud[idx] > 0)
            if not eligible.any() or not len(info.rows):
                continue
            ref_out = (sw, code, feas, g_row, y_row, block, ys[a:b], P, run_of)
            costs_at = partial(_costs_at, *costs_of, starts[idx], sizes[idx])
            for j, gf, runs in _other_ds(
                ref_out, info, costs_at, kappa[idx], eligible, y_ud[idx], M
            ):
                fail[idx[gf], j] = True
                redo[j].append((idx[runs[0]],) + runs[1:])
    run_u, lo, hi, P = (np.concatenate([x[k] for x in parts]) for k in range(4))
    by = np.lexsort((lo, run_u))
    return (run_u[by], lo[by], hi[by], P[by]), y_ud, fail, redo


def _cut_runs(runs: tuple, use: np.ndarray, y_last: np.ndarray, redo: list) -> tuple:
    """One d's runs from the first d's ``runs`` (block, first y, last y, P; by block and
    y): those of the blocks ``use``, cut at each block's ``y_last``, and the ``redo`` runs
    (the blocks decided otherwise at this d), by block and y; with per block whether its
    runs are monotone (y = 1..k without gaps, P never falling; True for blocks without
    runs)."""
    run_u, lo, hi, P = runs
    keep = use[run_u] & (lo <= y_last[run_u])
    ru, rl, rh, rp = run_u[keep], lo[keep], np.minimum(hi[keep], y_last[run_u[keep]]), P[keep]
    if redo:  # (their blocks are not among ``use``: merged in by (block, first y))
        fu, flo, fhi, fP = (np.concatenate([x[k] for x in redo]) for k in range(4))
        span = int(max(rl.max(initial=0), flo.max())) + 1
        f_key = fu * span + flo
        by = np.argsort(f_key, kind="stable")
        at = np.searchsorted(ru * span + rl, f_key[by])
        ru, rl, rh, rp = (
            np.insert(a, at, b[by]) for a, b in ((ru, fu), (rl, flo), (rh, fhi), (rp, fP))
        )
    mono = np.ones(len(use), dtype=bool)
    first = np.ones(len(ru), dtype=bool)
    first[1:] = ru[1:] != ru[:-1]
    bad = np.where(first, rl != 1, False)
    bad[1:] |= ~first[1:] & ((rl[1:] != rh[:-1] + 1) | (rp[1:] < rp[:-1]))
    mono[ru[bad]] = False
    return ru, rl, rh, rp, mono


def _cost_spread(delta: np.ndarray, ref: np.ndarray, ds: np.ndarray) -> np.ndarray:
    """Per kind of node and d, |e| with delta_d = scale delta_ref (1 + e) (``delta``
    (kinds, D) the costs at every d, ``ref`` (kinds,) the index of the first d, scale =
    d_ref / d; plain nodes: c_O - c_F = (p_O - p_F) / d in exact arithmetic, so e is
    rounding); 0 where both are 0, inf where e cannot be said (a delta zero at one d
    only, or below 1e-290). A block's kappa is at least the largest over its nodes, plus
    1e-15 (:func:`shared_rule_runs`)."""
    ref_delta = delta[np.arange(len(ref)), ref][:, None]
    scale = ds[ref][:, None] / ds[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.abs(delta / (scale * ref_delta) - 1.0)
    both_zero = (delta == 0) & (ref_delta == 0)
    tiny = (np.abs(delta) < 1e-290) | (np.abs(ref_delta) < 1e-290)
    e[both_zero] = 0.0
    e[(tiny & ~both_zero) | np.isnan(e)] = np.inf
    return e


def _costs_at(delta, kind, starts, sizes, g: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """Per row k, the costs at d index ``j[k]`` of the nodes of block ``g[k]`` (blocks of
    ``sizes`` nodes from ``starts`` in ``kind``, the nodes' kinds; ``delta`` (kinds, D) the
    kinds' costs), padded with zeros to ``n`` columns."""
    col = np.arange(n)
    pad = col[None, :] >= sizes[g][:, None]
    at = starts[g][:, None] + col
    at[pad] = 0
    out = delta[kind[at], np.asarray(j)[:, None]]
    out[pad] = 0.0
    return out


def _walk_margin(ratios: np.ndarray, sav: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per walked row (``ratios`` and ``sav``: the walk's ratios and savings in its order,
    as :class:`dp.greedy_rule.RuleDetail` gives them; ``count`` the nodes its walk
    switched), how far the walk's outcome is from changing at another d.

    Returns the least relative gap (r_b - r_a) / r_b between neighbours a, b of the
    walk's order at the places :func:`dp.greedy_rule.same_walk` checks: after the last
    switched node, and between runs of equal savings among the switched ones. Pairs with
    both ratios 0 (delta 0, which stays 0 where kappa is finite) or r_b inf (no saving)
    count as inf: the ties keep their order by position; other equal ratios and ratios
    below 1e-290 but not 0 as 0. With costs delta_d,i = scale delta_i (1 + e_i), |e_i|
    <= kappa (:func:`_cost_spread`), a gap above 3 kappa + 1e-14 keeps every node before
    such a place strictly before every node after it after rounding (the order is
    ascending: a's ratio is the largest before it, b's the least after it), so the walk
    at d switches the same nodes. (A saving that does not count is 0 in ``sav``: where
    that changes which places are checked, r_b is inf there, so the gap is inf either
    way.)
    """
    n = ratios.shape[1]
    if n < 2:
        return np.full(len(ratios), np.inf)
    ra, rb = ratios[:, :-1], ratios[:, 1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (rb - ra) / rb
    g = np.where(ra == rb, np.where(ra == 0, np.inf, 0.0), g)
    g = np.where(np.isinf(rb), np.inf, g)
    g = np.where(((ra > 0) & (ra < 1e-290)) | ((rb > 0) & (rb < 1e-290)), 0.0, g)
    j = np.arange(1, n)[None, :]
    k = count[:, None]
    cut = (j == k) | ((j < k) & (sav[:, 1:] != sav[:, :-1]))
    return np.where(cut, g, np.inf).min(axis=1)


def _other_ds(ref_out: tuple, info: RuleDetail, costs_at, kappa, eligible, y_d, M: float):
    """Where the rule at the other d (same F per node) decides otherwise than at the first
    d, for one chunk of blocks.

    ``ref_out`` = (sw, code, feas, g_row, y_row, block, ys, P, run_of): the first d's
    rows (:func:`_ref_runs`), the chunk's blocks and last y, and the first d's runs' P and
    each row's run; ``info`` its walked rows;
    ``costs_at(g, j, n)`` the costs of blocks ``g`` at d indices ``j`` (rows, ``n``
    columns); ``kappa`` (blocks, D) the costs' spread (:func:`_cost_spread`);
    ``eligible`` (blocks, D) which d to check; ``y_d`` (blocks, D) the last y per d. A
    walked row decides alike at d when the nodes it switched still come first: for
    certain where the row's gap (:func:`_walk_margin`) is above 3 kappa + 1e-14
    (:func:`_cost_spread`); the others are walked again at that d, and where they switch
    other nodes, whether that choice fits is found. Yields, per d and blocks where some
    row decides otherwise, (d index, the blocks, their runs at that d: per run its
    block, first and last y and P)."""
    sw, code, feas, g_row, y_row, block, ys, ref_P, run_of = ref_out
    y_other = np.where(eligible, y_d, 0)  # per block and d: the y some d wants
    g = g_row[info.rows]
    has = np.flatnonzero(y_row[info.rows] <= y_other.max(axis=1)[g])
    if not len(has):
        return
    if len(has) < len(info.rows):
        info = info.subset(has)
        g = g[has]
    gap = _walk_margin(info.ratios, info.sav_sorted, info.count)
    blocks = sorted_unique(g)
    kappa = kappa[blocks]
    # the rows certain at every d their block is checked at need nothing more; the
    # others, d by d
    at = np.searchsorted(blocks, g)
    kmax = np.where(eligible[blocks], kappa, 0.0).max(axis=1)
    rest = np.flatnonzero(gap <= 3.0 * kmax[at] + 1e-14)
    wanted = y_row[info.rows[rest]][:, None] <= y_other[g[rest]]
    unsure = gap[rest, None] <= 3.0 * kappa[at[rest]] + 1e-14
    k_at, j_at = np.nonzero(wanted & unsure)
    if not len(k_at):
        return
    k_at = rest[k_at]
    # the others walked again at d (memory, and so the savings and excess, are the same)
    sw_j = rewalk(costs_at(g[k_at], j_at, block.shape[1]), info.subset(k_at))
    r = info.rows[k_at]
    differs = np.any(sw_j != sw[r], axis=1)
    feas_j = feas[r]
    if differs.any():  # (F does not fit, L does: only whether the new choice fits is new)
        rd = r[differs]
        cols = block[g_row[rd]]
        feas_j[differs] = choice_fits(
            sw_j[differs], *(cols[:, :, k] for k in range(1, 5)), y_row[rd], M
        )
    if not differs.any():
        return
    r, j_at, sw_j, feas_j = r[differs], j_at[differs], sw_j[differs], feas_j[differs]
    code_j = np.packbits(sw_j, axis=1)
    row_start = np.cumsum(ys) - ys
    # the (block, d) pairs with a row decided otherwise, by d then block: their rows at
    # that d are the first d's rows, the rows walked otherwise replaced (compared by
    # their packed choices)
    n_blk = len(ys)
    pair_key = j_at * n_blk + g_row[r]
    pairs = sorted_unique(pair_key)
    pj, pg = pairs // n_blk, pairs % n_blk
    yf = y_d[pg, pj]
    f_start = np.cumsum(yf) - yf
    p_f = np.repeat(np.arange(len(pairs)), yf)
    g_f = pg[p_f]
    y_f = np.arange(len(p_f)) - f_start[p_f] + 1
    src = row_start[g_f] + y_f - 1
    code_f, feas_f = code[src], feas[src]
    at = f_start[np.searchsorted(pairs, pair_key)] + y_row[r] - 1
    code_f[at], feas_f[at] = code_j, feas_j
    s_at, e_at = _run_bounds(code_f, feas_f, y_f)
    # P of each run from its first row's choice: a row walked otherwise sums its own; any
    # other row has the choice of the first d's run holding it, whose P is known
    walked = np.full(len(src), -1)
    walked[at] = np.arange(len(r))
    w_s = walked[s_at]
    P = ref_P[run_of[src[s_at]]]
    new = np.flatnonzero(w_s >= 0)
    P[new] = _chosen_p(sw_j[w_s[new]], block, g_f[s_at[new]])
    j_s = pj[p_f[s_at]]
    bounds = np.searchsorted(pj, np.arange(int(pj[-1]) + 2))
    run_b = np.searchsorted(j_s, np.arange(int(pj[-1]) + 2))
    for j in sorted_unique(pj).tolist():
        a, b = run_b[j], run_b[j + 1]
        yield (
            j,
            pg[bounds[j] : bounds[j + 1]],
            (g_f[s_at[a:b]], y_f[s_at[a:b]], y_f[e_at[a:b]], P[a:b]),
        )


def _ref_runs(block: np.ndarray, ys: np.ndarray, M: float) -> tuple:
    """Piper's rule on blocks (padded as :func:`plain_rule_runs` pads them), block g at
    y = 1 .. ``ys[g]``, where L fits (``ys[g]`` at most the block's
    :func:`dp.greedy_rule.greedy_last_y`). Returns per run its block, first and last y
    and P; per evaluated row (block by block, y by y) the switched nodes, the same packed
    (``numpy.packbits``) and whether a choice fits; the rule's :class:`RuleDetail`; and
    per evaluated row its block, y and run (its index among the runs; rows where no
    choice fits: that of the run before)."""
    g_row = np.repeat(np.arange(len(ys)), ys)
    y_row = np.arange(len(g_row)) - np.repeat(np.cumsum(ys) - ys, ys) + 1
    # the columns, each contiguous (a strided column's gather is slow), read per row by
    # the rule where it needs them
    cols = np.ascontiguousarray(np.moveaxis(block[:, :, :6], 2, 0))
    sw, feas, info = greedy_rule_rows(
        *cols[:5], cols[5] > 0, y_row, M, detail=True, l_fits=True, stage_of=g_row
    )
    code = np.packbits(sw, axis=1)
    s_at, e_at = _run_bounds(code, feas, y_row)
    P = _chosen_p(sw[s_at], block, g_row[s_at])
    start = np.zeros(len(g_row), dtype=np.int64)
    start[s_at] = 1
    run_of = np.cumsum(start) - 1
    return g_row[s_at], y_row[s_at], y_row[e_at], P, sw, code, feas, info, g_row, y_row, run_of


def _run_bounds(code: np.ndarray, feas: np.ndarray, y_row: np.ndarray) -> tuple:
    """The first and last rows of the runs of equal choice in rows (block by block, y = 1,
    2, ... each; ``code`` the packed choices, ``feas`` whether the rule finds one)."""
    same = np.zeros(len(y_row), dtype=bool)
    same[1:] = ~np.any(code[1:] != code[:-1], axis=1) & (y_row[1:] != 1)
    prev_feas = np.zeros(len(y_row), dtype=bool)
    prev_feas[1:] = feas[:-1]
    start = feas & ~(prev_feas & same)
    next_same = np.zeros(len(y_row), dtype=bool)
    next_same[:-1] = same[1:] & feas[1:]
    return np.flatnonzero(start), np.flatnonzero(feas & ~next_same)


def _chosen_p(sw: np.ndarray, block: np.ndarray, g: np.ndarray) -> np.ndarray:
    """P of choices ``sw`` (rows of nodes; row k a choice in block ``g[k]`` of ``block``):
    p_O where switched, else p_F, summed node by node (:func:`dp.greedy_rule.running_sum`)."""
    pF, pO = np.ascontiguousarray(block[:, :, 6]), np.ascontiguousarray(block[:, :, 7])
    return running_sum(np.where(sw, pO[g], pF[g]))


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 values (wrapping), in place."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def _distinct_sequences(a: np.ndarray, b: np.ndarray, sizes: np.ndarray) -> tuple:
    """The distinct sequences of pairs (``a``, ``b``: int64, the sequences of ``sizes``
    (each at least 1) end to end), numbered in the order of their first sequence: per
    sequence its number, and per number its first sequence (as
    :func:`dp.table_arrays.distinct_rows` numbers the sequences padded to one width).

    Each sequence is hashed (a sum of mixed (a, b, place) per pair, modulo 2^64) with its
    length; every sequence is then compared pair by pair with the first one of its hash,
    and where two different sequences share a hash, the padded rows are numbered
    instead."""
    G = len(sizes)
    starts = np.cumsum(sizes) - sizes
    g_of = np.repeat(np.arange(G), sizes)
    col = np.arange(len(a))
    col -= starts[g_of]
    with np.errstate(over="ignore"):
        z = a.view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z += col.view(np.uint64)
        z = _mix64(z)
        z ^= b.view(np.uint64)
        h = np.add.reduceat(_mix64(z), starts, dtype=np.uint64)
    del z
    kind, first = distinct_rows(np.stack([h.view(np.int64), sizes.astype(np.int64)], axis=1))
    rep_at = starts[first[kind]][g_of]  # each pair's counterpart in its kind's first
    rep_at += col
    if (a == a[rep_at]).all() and (b == b[rep_at]).all():
        return kind, first
    width = int(sizes.max())
    key = np.zeros((G, 2 * width), dtype=np.int64)
    key[:, :width] = -1
    key[g_of, col] = a
    key[g_of, width + col] = b
    return distinct_rows(key)


def _row_pieces(ys: np.ndarray, widths: np.ndarray, limit: int):
    """Consecutive blocks (``ys`` rows each, ``widths`` nodes each, non-decreasing) cut
    into pieces (first, end) of at most ``limit`` cells (rows times the widest; at least
    one block each), pieces without rows left out."""
    rows = np.cumsum(ys)
    a = 0
    while a < len(ys):
        done = int(rows[a - 1]) if a else 0
        cells = (rows[a : a + 65536] - done) * widths[a : a + 65536]
        b = a + max(1, int(np.searchsorted(cells, limit, side="right")))
        if rows[b - 1] > done:
            yield a, b
        a = b


def _chunks(order: np.ndarray, sizes: np.ndarray, depth: np.ndarray, limit: int):
    """``order`` (block indices, their ``depth`` non-decreasing along it) cut into chunks
    whose count x widest size x deepest depth stays within ``limit`` (at least one block
    each)."""
    c0 = 0
    while c0 < len(order):
        rest = order[c0 : c0 + 65536]
        cells = np.arange(1, len(rest) + 1) * np.maximum.accumulate(sizes[rest])
        cells *= np.maximum.accumulate(depth[rest])
        step = max(1, int(np.searchsorted(cells, limit, side="right")))
        yield rest[:step]
        c0 += step


def _dense(rows: np.ndarray, starts: np.ndarray, sizes: np.ndarray, idx: np.ndarray, of=None):
    """Blocks ``idx`` of ``rows`` (each ``sizes`` rows from ``starts``; with ``of``, row
    ``of[i]`` stands at place i) as one array (blocks, widest, 8), padded with zero
    rows."""
    n_of = sizes[idx]
    col = np.arange(int(n_of.max()))
    pad = col[None, :] >= n_of[:, None]
    at = starts[idx][:, None] + col
    at[pad] = 0
    block = rows[at if of is None else of[at]]
    block[pad] = 0.0
    return block


def _rule_runs(block: np.ndarray, last: np.ndarray, M: float) -> tuple:
    """Piper's rule on blocks (as :func:`plain_rule_runs` pads them) at y = 1 .. ``last``
    of each. Returns per run its block, first and last y and P, and per block whether
    its runs are monotone (y = 1..k without gaps, P never falling)."""
    Y = int(last.max())
    cols = (*(block[:, :, j] for j in range(5)), block[:, :, 5] > 0)
    sw, feas = greedy_rule_grid(cols, np.arange(1, Y + 1), M)
    same = np.ones(feas.shape, dtype=bool)
    same[:, 1:] = ~np.any(sw[:, 1:] != sw[:, :-1], axis=2)
    start = feas.copy()
    start[:, 1:] &= ~feas[:, :-1] | ~same[:, 1:]
    end = feas.copy()
    end[:, :-1] &= ~feas[:, 1:] | ~same[:, 1:]
    sg, sy = np.nonzero(start)
    ey = np.nonzero(end)[1]
    P = running_sum(np.where(sw[sg, sy], block[sg, :, 7], block[sg, :, 6]))
    nfeas = feas.sum(axis=1)
    first_gap = np.where(feas.all(axis=1), Y, np.argmin(feas, axis=1))
    ok = first_gap == nfeas
    falls = (P[1:] < P[:-1]) & (sg[1:] == sg[:-1])
    ok[sg[1:][falls]] = False
    return sg, sy + 1, ey + 1, P, ok


def _rule_costs(opt: np.ndarray, e: np.ndarray, d: int, N: int, B: float) -> tuple:
    """Per node (rows of ``opt`` as :func:`plain_node_data` gives them, ``e`` its cut
    bytes) at degree d: c_O - c_F (0 for a single option) and whether option 1 is F."""
    p0, p1, w, two = opt[:, 0], opt[:, 1], opt[:, 6], opt[:, 7] > 0
    c0 = piper_cost(p0, e, w, d, N, B)
    c1 = piper_cost(p1, e, w, d, N, B)
    F = two & (c0 > c1)  # option 1 is F
    return np.where(two, np.where(F, c0 - c1, c1 - c0), 0.0), F


def plain_rule_columns(opt: np.ndarray, e: np.ndarray, d: int, N: int, B: float) -> np.ndarray:
    """The rows :func:`plain_rule_runs` takes, for nodes ``opt`` (rows as
    :func:`plain_node_data` gives them) with cut bytes ``e`` at degree d.

    Parameters
    ----------
    opt : (n, 8) numpy.ndarray
    e : (n,) numpy.ndarray
    d, N : int
    B : float

    Returns
    -------
    (n, 8) numpy.ndarray
        (c_O - c_F, a_F, b_F, a_O, b_O, O before F, p_F, p_O) per node, F the first
        option of least :func:`dp.greedy_rule.piper_cost`.
    """
    return _rule_columns(opt, *_rule_costs(opt, e, d, N, B))


def _rule_columns(opt: np.ndarray, delta: np.ndarray, F: np.ndarray) -> np.ndarray:
    """The columns of :func:`plain_rule_runs`'s blocks, from the nodes' ``opt`` rows and
    their costs (:func:`_rule_costs`)."""
    # opt's columns: p0, p1, a0, b0, a1, b1; the block's: delta, aF, bF, aO, bO, F, pF, pO
    out = opt[:, [0, 2, 3, 4, 5, 0, 0, 1]]
    swap = np.flatnonzero(F)
    out[swap] = opt[swap][:, [0, 4, 5, 2, 3, 0, 1, 0]]
    out[:, 0] = delta
    out[:, 5] = F
    return out


def general_rule_runs(stages: list, ds: np.ndarray, caps: np.ndarray, settings: tuple, check):
    """Piper's rule on stages of general nodes, for each d and y = 1..cap, many stages
    per numpy call.

    Parameters
    ----------
    stages : list of lists
        Per stage, per node (in input order), its options (one or two are used: the
        first two) as tuples (p, E, w, a, b, e): E the node's cut-edge bytes as the
        evaluator sums them (``fsum``), e as Piper's rule sums them
        (:func:`dp.greedy_rule.piper_edge_bytes`).
    ds, caps : numpy.ndarray
        The data-parallel degrees and the largest y of each.
    settings : tuple
        (N, B, M) of the instance.
    check : callable
        Called between numpy calls (the time limit).

    Returns
    -------
    blk, lo, hi, P, E, W : numpy.ndarray
        The runs of equal choice over the y where the rule finds one, by stage, d and y:
        the block (stage index x len(ds) + d index), first and last y, and the ``fsum``
        of the chosen options' p, E and w.

    Notes
    -----
    Per node, F is the first option of least :func:`dp.greedy_rule.piper_cost` at d and
    O the other one (:func:`dp.greedy_rule.greedy_node_rows`); the stages of a numpy
    call are padded to the widest with nodes of zero cost and memory, which change no
    running sum and are never switched.
    """
    N, B, M = settings
    D = len(ds)
    sizes = np.array([len(x) for x in stages], dtype=np.int64)
    parts = []
    for idx in _chunks(
        np.arange(len(stages)), sizes, np.full(len(stages), int(caps.sum())), 50_000
    ):
        check()
        parts.append(_general_chunk([stages[k] for k in idx.tolist()], ds, caps, N, B, M))
        parts[-1][0][:] += int(idx[0]) * D
    if not parts:
        return (np.zeros(0, dtype=np.int64),) * 3 + (np.zeros(0),) * 3
    return tuple(np.concatenate([x[k] for x in parts]) for k in range(6))


def _general_chunk(stages: list, ds, caps, N: int, B: float, M: float) -> tuple:
    """:func:`general_rule_runs` on consecutive stages (blocks numbered from 0)."""
    K, D = len(stages), len(ds)
    n_of = np.array([len(x) for x in stages], dtype=np.int64)
    Wd = int(n_of.max())
    k_of = np.repeat(np.arange(K), n_of)
    j_of = np.arange(len(k_of)) - np.repeat(np.cumsum(n_of) - n_of, n_of)
    flat = [opts for x in stages for opts in x]
    o0 = np.zeros((K, Wd, 6))
    o1 = np.zeros((K, Wd, 6))
    two = np.zeros((K, Wd), dtype=bool)
    o0[k_of, j_of] = [opts[0] for opts in flat]
    o1[k_of, j_of] = [opts[1] if len(opts) > 1 else opts[0] for opts in flat]
    two[k_of, j_of] = [len(opts) > 1 for opts in flat]
    # per stage, d and node: F (option 1 is F), c_O - c_F (greedy_node_rows' floats)
    Fd = np.zeros((K, D, Wd), dtype=bool)
    delta = np.zeros((K, D, Wd))
    for jd, d in enumerate(ds.tolist()):
        c0 = piper_cost(o0[:, :, 0], o0[:, :, 5], o0[:, :, 2], d, N, B)
        c1 = piper_cost(o1[:, :, 0], o1[:, :, 5], o1[:, :, 2], d, N, B)
        Fd[:, jd] = two & (c0 > c1)
        delta[:, jd] = np.where(two, np.where(Fd[:, jd], c0 - c1, c1 - c0), 0.0)
    F3 = Fd.reshape(K * D, Wd)
    k_blk = np.repeat(np.arange(K), D)
    ys = np.tile(np.asarray(caps, dtype=np.int64), K)
    g_row = np.repeat(np.arange(K * D), ys)
    y_row = np.arange(len(g_row)) - np.repeat(np.cumsum(ys) - ys, ys) + 1
    Fr, kr = F3[g_row], k_blk[g_row]
    mem = [np.where(Fr, o1[kr, :, c], o0[kr, :, c]) for c in (3, 4)]  # a_F, b_F
    mem += [np.where(Fr, o0[kr, :, c], o1[kr, :, c]) for c in (3, 4)]  # a_O, b_O
    sw, feas = greedy_rule_rows(delta.reshape(K * D, Wd)[g_row], *mem, Fr, y_row, M)
    # the runs of equal choice, block by block, y by y
    same = np.zeros(len(g_row), dtype=bool)
    same[1:] = ~np.any(sw[1:] != sw[:-1], axis=1)
    prev = np.zeros(len(g_row), dtype=bool)
    prev[1:] = feas[:-1]
    start = feas & ((y_row == 1) | ~prev | ~same)
    nxt = np.zeros(len(g_row), dtype=bool)
    nxt[:-1] = (y_row[1:] != 1) & same[1:] & feas[1:]
    s_at, e_at = np.flatnonzero(start), np.flatnonzero(feas & ~nxt)
    # the chosen option per node of each run: O where switched (O = 1 - F; 0 for one)
    opt = np.where(sw[s_at], np.where(two[kr[s_at]], ~Fr[s_at], False), Fr[s_at])
    P, E, W = [], [], []
    for k, row in zip(kr[s_at].tolist(), opt.tolist()):
        chosen = [opts[i] for opts, i in zip(stages[k], row)]
        P.append(math.fsum(o[0] for o in chosen))
        E.append(math.fsum(o[1] for o in chosen))
        W.append(math.fsum(o[2] for o in chosen))
    return g_row[s_at], y_row[s_at], y_row[e_at], np.array(P), np.array(E), np.array(W)


class GreedyTables(StageQueue):
    """The greedy-mode part of the stage-table builder: the rows of the queued stages
    (:class:`dp.stage_queue.StageQueue`) by Piper's rule.

    A stage's state per t (:class:`dp.exact_states.ExactStates` without frontiers) is W,
    whether it is plain, and whether some choice may fit (its least memory); the state of
    C is made from the state of C minus its lowest node without successors in C. The rows
    of plain stages are made many stages per numpy call (:meth:`_plain_rows`), those of
    general stages many sequences of nodes' options per numpy call (:meth:`_general_rows`).

    Parameters
    ----------
    ctx : StageContext
        What the parts of the builder share.
    geo : StageGeometry
        The graph as bitmasks and the cut bytes.
    tables : StageTables
        Where the rows and groups go.
    masks : numpy.ndarray
        The family as words (:func:`dp.stage_geometry.set_words`).
    batches : BuildBatches
        The sizes of the queue and the memo (``memo_points``: forget every state once
        more than this many were made).

    Attributes
    ----------
    pairs : int
        The pairs (I, J) whose stage has some t where a choice may fit.
    """

    def __init__(
        self,
        ctx: StageContext,
        geo: StageGeometry,
        tables: StageTables,
        masks: np.ndarray,
        batches: BuildBatches,
    ):
        super().__init__(ctx, geo, tables, masks, batches)
        self.inst = ctx.inst
        self.pred_mask, self.succ_mask = geo.pred_mask, geo.succ_mask
        self.preds, self.succs = geo.preds, geo.succs
        self.plain = ctx.plain
        self.state_memo_points = batches.memo_points
        self.states = ExactStates(
            ctx,
            geo,
            FILTER_LOW_BITS,
            partial(lowest_sink, succ=geo.succ_mask, filters=geo.sink_filters),
            batches.extend_rows,
            frontiers=False,
        )
        # table points costing more than this cannot be in a plan of value <= ub
        self.cost_cut = None if ctx.ub is None else ctx.ub * (1.0 + 1e-9)
        # Piper's rule on plain nodes: per t, the numbers it reads of each node
        self.plain_data = {t: plain_node_data(ctx, geo, t) for t in ctx.t_values}
        # ... and per class of nodes, its row (classes are numbered by first node)
        self.plain_classes = {
            t: opt[np.unique(cls, return_index=True)[1]]
            for t, (opt, _, _, cls) in self.plain_data.items()
        }
        # per node position, its edges (the columns of plain_node_data's terms it uses)
        self.degree = np.array([len(geo.preds[i]) + len(geo.succs[i]) for i in range(len(ctx.ids))])
        # per node position, its neighbours as words (:func:`dp.stage_geometry.set_words`)
        self.neighbour_words = set_words(
            [geo.pred_mask[i] | geo.succ_mask[i] for i in range(len(ctx.ids))], len(ctx.ids)
        )
        # general nodes: the options' rows per (node, t, cut in, cut out), as items
        self.item_id: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.node_item: dict[tuple, int] = {}
        # per (t, sequence of items): the rows (first row, count of rows before each d)
        self.general_rows: dict[tuple, tuple] = {}

    def finish(self):
        """Make and emit what waits in the queue, then forget the stages and their states."""
        super().finish()
        self.states = None

    def _flush(self):
        """Make the states of the queued stages, then their rows per t (plain stages: many
        per numpy call, :meth:`_plain_rows`; general ones once per sequence of node
        options, :meth:`_general_rows`), then emit the queued pairs' groups. The states
        are forgotten once they pass ``memo_points``."""
        stages, ids, q0 = self._take_batch()
        states = self.states
        n = len(stages)
        nonempty = np.zeros(n, dtype=bool)
        for t in self.t_values:
            alive = states.alive[t][ids]
            nonempty |= alive
            if not len(self.ds[t]):  # no d allowed with this t: no rows
                continue
            plain = states.plain[t][ids]
            gen = np.flatnonzero(alive & ~plain)
            if len(gen):
                self._general_rows(t, q0 + gen, [stages[i] for i in gen.tolist()])
            fast = np.flatnonzero(alive & plain)
            if len(fast):
                self.check()
                sp = ids[fast]
                E = self.geo.cut_bytes_many(t, states.cuts(sp.tolist()))
                cum, first = self._plain_rows(t, [stages[i] for i in fast], E, states.W[t][sp])
                self._record_rows(t, q0 + fast, cum, first)
        self.stage_nonempty[q0 : q0 + n] = nonempty
        if states.size() > self.state_memo_points:
            states.forget()
        self._emit_pairs()

    # ---- plain stages -------------------------------------------------------------------
    def _plain_stages(self, t: int, masks: list[int]):
        """The node positions of plain stages (bitmasks ``masks``) end to end, their cut
        bytes as the rule sums them, and one representative per distinct sequence of node
        classes and cut bytes (:func:`plain_node_data`; equal as bytes). Returns (sizes,
        pos, e, inv, rep): the representative of stage g is ``rep[inv[g]]``, the first
        stage of its kind, the kinds numbered in the order of their first stage."""
        _, terms, other, cls = self.plain_data[t]
        G, n = len(masks), len(self.ids)
        words = set_words(masks, n)
        inside = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :n]
        g_of, pos = np.nonzero(inside)  # stage by stage, nodes in input order
        sizes = np.bincount(g_of, minlength=G)
        # e: from 0.0, one addition per incident edge in the rule's order, 0.0 for an edge
        # inside the stage (x + 0.0 = x: e >= 0), over the nodes with that many edges; 0.0
        # for a node whose neighbours are all in the stage (only the others are summed)
        nbr = self.neighbour_words
        cut = np.zeros(len(pos), dtype=bool)
        for w in range(words.shape[1]):
            out = np.invert(words[:, w])[g_of]
            np.bitwise_and(out, nbr[:, w][pos], out=out)
            cut |= out != 0
        del out
        at = np.flatnonzero(cut)
        deg = self.degree
        e = np.zeros(len(pos))
        for k in range(terms.shape[1]):
            at = at[deg[pos[at]] > k]
            if not len(at):
                break
            p = pos[at]
            e[at] += terms[p, k] * (1 - inside[g_of[at], other[p, k]])
        del inside, cut, at
        # each stage's node classes and cut bytes side by side (padding: class -1), as
        # one opaque value of bytes per stage
        inv, rep = _distinct_sequences(cls[pos], e.view(np.int64), sizes)
        return sizes, pos, e, inv, rep

    def _plain_rows(self, t: int, masks: list[int], E: np.ndarray, W: np.ndarray):
        """The rows of plain stages C (bitmasks ``masks``, cut bytes ``E``, weights ``W``)
        under t, one per d of ``ds[t]`` where Piper's rule finds a choice for some y <= cap,
        stored stage by stage, d by d. The rule runs once per distinct stage
        (:meth:`_plain_stages`) and d, and not at all for a d where even the least p of
        every node costs more than the upper bound allows (:meth:`_within_bound`). Returns
        per stage the count of its rows before each d and its first row."""
        opt = self.plain_data[t][0]
        ds, caps = self.ds[t], self.cap[t]
        G, D = len(masks), len(ds)
        sizes, pos, e, inv, rep = self._plain_stages(t, masks)
        U = len(rep)
        keep = np.zeros(G, dtype=bool)
        keep[rep] = True
        node_keep = np.repeat(keep, sizes)
        r_pos, r_e = pos[node_keep], e[node_keep]
        r_sizes = sizes[rep]
        least_p = self._least_p(opt, pos, sizes)
        del pos, e, node_keep  # (the rule reads the distinct stages only)
        need = np.ones((G, D), dtype=bool)
        sub = np.ones((U, D), dtype=bool)
        for j, d in enumerate(ds.tolist()):
            within = self._within_bound(E, W, least_p, d)
            if within is not None:
                need[:, j] = within
                sub[:, j] = False
                sub[inv[within], j] = True
        settings = (self.N, self.B, self.M)
        cls = self.plain_data[t][3][r_pos]
        del r_pos
        runs = shared_rule_runs(
            self.plain_classes[t], cls, r_e, r_sizes, ds, caps, sub, settings, self.check
        )
        # per d, each stage's runs: those of its distinct stage where the stage is wanted
        u_cnt = np.stack([np.bincount(r[0], minlength=U) for r in runs], axis=1)  # (U, D)
        cnt = np.where(need, u_cnt[inv], 0)
        mono = np.stack([r[4] for r in runs], axis=1)[inv]
        # the points go stage by stage, then d by d: point k of stage g at d index j is at
        # dest[g, j] + k
        dest = (np.cumsum(cnt.ravel()) - cnt.ravel()).reshape(G, D)
        total = int(cnt.sum())
        cost = np.empty(total)
        lo_all = np.empty(total, dtype=runs[0][1].dtype)
        hi_all = np.empty(total, dtype=runs[0][2].dtype)
        for j, d in enumerate(ds.tolist()):
            _, lo, hi, P, _ = runs[j]
            counts = cnt[:, j]
            n_j = int(counts.sum())
            u_start = np.cumsum(u_cnt[:, j]) - u_cnt[:, j]
            g_pts = np.repeat(np.arange(G), counts)
            within = np.arange(n_j) - np.repeat(np.cumsum(counts) - counts, counts)
            take = u_start[inv][g_pts] + within
            at = dest[g_pts, j] + within
            cost[at] = stage_tps_from_sums(E[g_pts], W[g_pts], P[take], d, self.N, self.B)
            lo_all[at], hi_all[at] = lo[take], hi[take]
        return self._store_plain_rows(t, cnt, mono, cost, lo_all, hi_all)

    def _least_p(self, opt: np.ndarray, pos: np.ndarray, sizes: np.ndarray):
        """Per stage (nodes ``pos`` end to end, ``sizes`` each), the sum of its nodes'
        least p; None without an upper bound."""
        if self.cost_cut is None:
            return None
        return np.add.reduceat(np.minimum(opt[pos, 0], opt[pos, 1]), np.cumsum(sizes) - sizes)

    def _within_bound(self, E, W, least_p, d: int):
        """Per stage, whether some choice of it may cost at most the upper bound allows at
        d (the cost rises with P; the margin 1e-7 covers the order in which P is summed);
        None without an upper bound."""
        if least_p is None:
            return None
        low = stage_tps_from_sums(E, W, least_p, d, self.N, self.B)
        return low <= self.cost_cut * (1.0 + 1e-7)

    def _store_plain_rows(self, t: int, cnt, mono, cost, ylo, yhi):
        """Store the rows :meth:`_plain_rows` made (``cnt`` and ``mono`` (G, D): the points
        and whether monotone per stage and d; the points' cost, first and last y, stage by
        stage, then d by d). Returns per stage the count of its rows before each d and its
        first row."""
        ds = self.ds[t]
        G, D = cnt.shape
        present = cnt > 0
        n_rows = present.sum(axis=1)
        first_row = -1
        if n_rows.any():
            first_row = self.tables.add_ragged_rows(
                t, np.broadcast_to(ds, (G, D))[present], cnt[present], cost, ylo, yhi, mono[present]
            )
        base = first_row + np.cumsum(n_rows) - n_rows
        cum = np.zeros((G, D + 1), dtype=np.int64)
        np.cumsum(present, axis=1, out=cum[:, 1:])
        return cum, base

    # ---- general stages -----------------------------------------------------------------
    def _item(self, i: int, t: int, cut_in: int, cut_out: int) -> int:
        """The id of node i's options under t as rows (p, E, w, a, b, e), E its cut-edge
        bytes for the in-edges from ``cut_in`` and the out-edges to ``cut_out`` (their
        ``fsum``) and e the same bytes as Piper's rule sums them
        (:func:`dp.greedy_rule.piper_edge_bytes`); the same rows share one id."""
        key = (i, t, cut_in, cut_out)
        got = self.node_item.get(key)
        if got is not None:
            return got
        ids = self.ids
        row = []
        for o in self.inst.nodes[i].options[t]:
            terms = [
                cut_edge_bytes(c, o.sfw[ids[u]]) for u, c, _ in self.preds[i] if (cut_in >> u) & 1
            ]
            terms += [
                cut_edge_bytes(c, o.sbw[ids[x]]) for x, c, _ in self.succs[i] if (cut_out >> x) & 1
            ]
            seq = 0.0  # the cut bytes as Piper's rule sums them (dp.greedy_rule)
            for x in terms:
                seq += x
            row.append((o.p, math.fsum(terms), o.w, o.a, o.b, seq))
        item = (tuple(row), self.plain[(i, t)])
        iid = self.item_id.get(item)
        if iid is None:
            iid = len(self.items)
            self.item_id[item] = iid
            self.items.append(item)
        self.node_item[key] = iid
        return iid

    def _general_rows(self, t: int, sids: np.ndarray, masks: list[int]):
        """Record the rows of stages with general nodes (bitmasks ``masks``, stage ids
        ``sids``) under t, one per d where Piper's rule finds a choice for some y: made and
        stored once per sequence of the nodes' items (:meth:`_item`), shared by the stages
        with that sequence; the new sequences' rows many per numpy call
        (:meth:`_general_batch`)."""
        # the cut edges of a node of C = I \\ J: the in-edges from outside I and the
        # out-edges into J, i.e. (I and J being successor-closed) those from and to
        # outside C
        keys = []
        for C in masks:
            ids = tuple(
                self._item(i, t, self.pred_mask[i] & ~C, self.succ_mask[i] & ~C) for i in bits(C)
            )
            keys.append((t, ids))
        new = [key for key in dict.fromkeys(keys) if key not in self.general_rows]
        if new:
            self._general_batch(t, new)
        for sid, key in zip(sids.tolist(), keys):
            self._record_rows(t, sid, *self.general_rows[key])

    def _general_batch(self, t: int, keys: list):
        """Make and store the rows of the sequences of items ``keys`` (new ones) under t,
        sequence by sequence, d by d (:func:`general_rule_runs`), and remember per
        sequence the count of its rows before each d of ``ds[t]`` and its first row (-1:
        none)."""
        ds = self.ds[t]
        D = len(ds)
        stages = [[self.items[k][0] for k in key[1]] for key in keys]
        settings = (self.N, self.B, self.M)
        blk, lo, hi, P, E, W = general_rule_runs(stages, ds, self.cap[t], settings, self.check)
        cost = stage_tps_from_sums(E, W, P, ds[blk % D], self.N, self.B)
        # one row per (sequence, d) with runs: monotone when its runs cover 1..k without
        # gaps and its cost never falls (dp.table_arrays.is_monotone_step)
        head = np.ones(len(blk), dtype=bool)
        head[1:] = blk[1:] != blk[:-1]
        bad = head & (lo != 1)
        bad[1:] |= ~head[1:] & ((lo[1:] != hi[:-1] + 1) | (cost[1:] < cost[:-1]))
        at = np.flatnonzero(head)
        rows = blk[at]
        has = np.zeros((len(keys), D), dtype=bool)
        has[rows // D, rows % D] = True
        first_row = -1
        if len(rows):
            first_row = self.tables.add_ragged_rows(
                t,
                ds[rows % D],
                np.diff(np.append(at, len(blk))),
                cost,
                lo,
                hi,
                ~np.logical_or.reduceat(bad, at),
            )
        n_rows = has.sum(axis=1)
        base = first_row + np.cumsum(n_rows) - n_rows
        cum = np.zeros((len(keys), D + 1), dtype=np.int64)
        np.cumsum(has, axis=1, out=cum[:, 1:])
        for k, key in enumerate(keys):
            self.general_rows[key] = (cum[k], int(base[k]) if n_rows[k] else -1)
