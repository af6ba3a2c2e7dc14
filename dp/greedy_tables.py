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
from dp.greedy_rule import greedy_rule_rows, kernel, piper_cost
from dp.knapsack import stage_tps_from_sums
from dp.stage_context import FILTER_LOW_BITS, BuildBatches, StageContext
from dp.stage_geometry import StageGeometry, bits, lowest_sink, set_words
from dp.stage_queue import StageQueue
from dp.table_arrays import distinct_rows, sorted_unique
from dp.table_store import StageTables
from piper_ilp.cost import cut_edge_bytes, resync_bytes, stage_tps
from piper_ilp.errors import InternalError

__all__ = [
    "GreedyTables",
    "load_rule_kernel",
    "general_rule_runs",
    "plain_node_data",
    "plain_rule_columns",
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
) -> tuple:
    """Piper's rule for y = 1..cap on blocks of plain nodes (a block: a stage, its nodes
    in input order) at every d they are needed at, the rule's outcome shared across the d
    where it provably stays (:func:`dp.greedy_kernel.shared_runs`).

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
        Called between kernel calls (the time limit).

    Returns
    -------
    count, first : (U, D) numpy.ndarray of int
        The runs of equal choice over the y where the rule finds one, of each block and
        d: ``count`` of them from place ``first`` of the three arrays below, by y (0
        where the block is not needed at d).
    lo, hi, P : numpy.ndarray
        Per run its first and last y, and P (the chosen p summed node by node in input
        order, :func:`dp.greedy_rule.running_sum`).
    mono : (U, D) numpy.ndarray of bool
        Whether a block's runs at d cover y = 1..k without gaps and P never falls (True
        where not needed).

    Notes
    -----
    Only the costs depend on d: memory, and so whether F fits, where L stops fitting
    and the savings, do not, as long as each node's F is the same option. Per block, the
    rule runs at the first d asked for (the largest cap). At another d with the same F per
    node, a row's outcome is the same where the ratios are far enough apart (the walk's
    gap against the costs' spread, :func:`dp.greedy_kernel._gap`); the other rows are
    walked again at that d. At a d where F differs the rule runs on its own.
    """
    N, B, M = settings
    if np.any(np.diff(caps) > 0):  # (the first d's rows must cover every other d's)
        raise InternalError(f"shared_rule_runs: caps must not increase with d, got {caps}")
    kind, _, delta_k, F_k = _node_kinds(cls, e, opt, ds, N, B)
    U, D = need.shape
    starts = np.cumsum(sizes) - sizes
    run_cap = (need * caps[None, :]).sum(axis=1)  # (at most one run per row)
    ints = (cls, kind, starts, sizes)
    args = (np.ascontiguousarray(opt, dtype=np.float64),)
    args += tuple(np.ascontiguousarray(x, dtype=np.int64) for x in ints)
    args += (np.ascontiguousarray(delta_k, dtype=np.float64), np.ascontiguousarray(F_k, dtype=bool))
    args += tuple(np.ascontiguousarray(x, dtype=np.int64) for x in (ds, caps))
    args += (np.ascontiguousarray(need, dtype=bool), float(M))
    count = np.zeros((U, D), dtype=np.int64)
    first = np.zeros((U, D), dtype=np.int64)
    mono = np.ones((U, D), dtype=bool)
    size = int(run_cap.sum())
    out = (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size))
    at = 0
    for idx in _chunks(np.arange(U), sizes, np.full(U, int(caps.max())), 2_000_000):
        check()
        c, f, m, at = kernel().shared_runs(*args, idx, out, at)
        count[idx], first[idx], mono[idx] = c, f, m
    lo, hi, P = (x[:at] for x in out)
    return count, first, lo, hi, P, mono


def load_rule_kernel() -> None:
    """Pay the compiled rule's one-time cost now: numba's import and the load of every
    kernel greedy mode calls, with the argument types it calls them with, from numba's
    cache (or their compile, the first time on a machine or after a change). A
    benchmark measures it apart (``piper-ilp bench``); a solve pays it on first use.

    Examples
    --------
    >>> load_rule_kernel()
    """
    opt = np.array([[1.0, 2.0, 4.0, 1.0, 1.0, 1.0, 0.0, 1.0]])
    one = np.ones(1, dtype=np.int64)
    need = np.ones((1, 1), dtype=bool)
    shared_rule_runs(opt, 0 * one, np.zeros(1), one, one, one, need, (1, 1.0, 4.0), lambda: None)
    z = np.zeros((1, 1))
    greedy_rule_rows(z, z + 1.0, z, z, z, z > 0, one, 4.0)


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


def _rule_costs(opt: np.ndarray, e: np.ndarray, d: int, N: int, B: float) -> tuple:
    """Per node (rows of ``opt`` as :func:`plain_node_data` gives them, ``e`` its cut
    bytes) at degree d: c_O - c_F (0 for a single option) and whether option 1 is F."""
    p0, p1, w, two = opt[:, 0], opt[:, 1], opt[:, 6], opt[:, 7] > 0
    c0 = piper_cost(p0, e, w, d, N, B)
    c1 = piper_cost(p1, e, w, d, N, B)
    F = two & (c0 > c1)  # option 1 is F
    return np.where(two, np.where(F, c0 - c1, c1 - c0), 0.0), F


def plain_rule_columns(opt: np.ndarray, e: np.ndarray, d: int, N: int, B: float) -> np.ndarray:
    """The rule's columns of a block (as the kernel builds them), for nodes ``opt`` (rows as
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
    """The columns of :func:`plain_rule_columns`, from the nodes' ``opt`` rows and
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
        u_cnt, u_first, lo, hi, P, u_mono = shared_rule_runs(
            self.plain_classes[t], cls, r_e, r_sizes, ds, caps, sub, settings, self.check
        )
        # per d, each stage's runs: those of its distinct stage where the stage is wanted
        cnt = np.where(need, u_cnt[inv], 0)
        mono = u_mono[inv]
        # the points go stage by stage, then d by d: point k of stage g at d index j
        # is run first[rep of g, j] + k of the distinct stages'; what depends on (g, j)
        # only is made per (g, j) and repeated over its points
        flat = cnt.ravel()
        take = np.repeat(u_first[inv].ravel() - (np.cumsum(flat) - flat), flat)
        take += np.arange(len(take))
        per_stage = cnt.sum(axis=1)
        d_pts = np.repeat(np.tile(ds, G), flat)
        resync = np.repeat(resync_bytes(W[:, None], ds[None, :], self.N).ravel(), flat)
        E_pts = np.repeat(E, per_stage)
        cost = stage_tps(E_pts, resync, P[take], d_pts, self.B)
        del E_pts, resync, d_pts
        return self._store_plain_rows(t, cnt, mono, cost, lo[take], hi[take])

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
