"""The stage tables in greedy mode: each stage's options by Piper's rule (cost model sec. 5).

:class:`GreedyTables` takes the candidate pairs (I, J) of one set I at a time, grows each
stage C = I \\ J from a remembered state, and stores per (C, t, d) the runs of y over
which the rule's choice (and so the cost) stays the same. The rule decides on the
original planner's floats (:mod:`dp.greedy_rule`): a node's cost depends on d and on its
own cut edges, so the rule runs per stage and d. On a stage of plain nodes (options that
differ only in p, a, b) it runs for many stages per numpy call (:func:`plain_rule_runs`),
once per distinct sequence of node options and cut bytes.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dp.greedy_rule import (
    greedy_last_y,
    greedy_node_rows,
    greedy_rule_grid,
    piper_cost,
    running_sum,
)
from dp.knapsack import stage_tps_from_sums
from dp.stage_context import StageContext
from dp.stage_geometry import StageGeometry, bits, membership
from dp.table_arrays import choice_runs, is_monotone_step
from dp.table_store import StageTables
from piper_ilp.cost import cut_edge_bytes

__all__ = ["GreedyTables", "plain_node_data", "plain_rule_runs"]


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


def plain_rule_runs(blocks: np.ndarray, sizes: np.ndarray, cap: int, M: float, check) -> tuple:
    """Piper's rule for y = 1..cap on blocks of plain nodes, many blocks per numpy call.

    Parameters
    ----------
    blocks : (U, width, 8) numpy.ndarray
        Per block (a stage at one d), per node in input order (then zero padding):
        (c_O - c_F, a_F, b_F, a_O, b_O, O before F, p_F, p_O).
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
    """
    U = len(blocks)
    # above its last y the rule finds no choice for a block: the grid stops there
    last = greedy_last_y(*(blocks[:, :, j] for j in range(1, 5)), blocks[:, :, 5] > 0, cap, M)
    by_size = np.lexsort((sizes, last))
    by_size = by_size[last[by_size] > 0]
    parts = [(np.empty(0, dtype=np.int64),) * 3 + (np.empty(0),)]
    mono = np.ones(U, dtype=bool)
    step = max(1, 200_000 // (cap * max(1, int(sizes.max()))))
    for c0 in range(0, len(by_size), step):
        check()
        idx = by_size[c0 : c0 + step]
        block = blocks[idx, : int(sizes[idx].max())]
        ymax = int(last[idx].max())
        sw, feas = greedy_rule_grid(
            *(block[:, :, j] for j in range(5)), block[:, :, 5] > 0, np.arange(1, ymax + 1), M
        )
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
        first_gap = np.where(feas.all(axis=1), ymax, np.argmin(feas, axis=1))
        ok = first_gap == nfeas
        falls = (P[1:] < P[:-1]) & (sg[1:] == sg[:-1])
        ok[sg[1:][falls]] = False
        mono[idx] = ok
        parts.append((idx[sg], sy + 1, ey + 1, P))
    run_u, lo, hi, P = (np.concatenate([x[k] for x in parts]) for k in range(4))
    order = np.lexsort((lo, run_u))
    return run_u[order], lo[order], hi[order], P[order], mono


def _rule_blocks(opt: np.ndarray, e: np.ndarray, d: int, N: int, B: float) -> np.ndarray:
    """Per node (rows of ``opt`` as :func:`plain_node_data` gives them, ``e`` its cut
    bytes), the columns of :func:`plain_rule_runs`'s blocks at degree d."""
    p0, p1, a0, b0, a1, b1, w, two = opt.T
    two = two > 0
    c0 = piper_cost(p0, e, w, d, N, B)
    c1 = piper_cost(p1, e, w, d, N, B)
    F = two & (c0 > c1)  # option 1 is F
    return np.stack(
        [
            np.where(two, np.where(F, c0 - c1, c1 - c0), 0.0),
            np.where(F, a1, a0),
            np.where(F, b1, b0),
            np.where(F, a0, a1),
            np.where(F, b0, b1),
            F,
            np.where(F, p1, p0),
            np.where(F, p0, p1),
        ],
        axis=1,
    )


class GreedyTables:
    """The greedy-mode part of the stage-table builder.

    A stage's *state* per t is (W, plain, None, least memory), kept only for the t where
    some choice may fit, and its cut-edge bitmasks; the state of C is made from the state
    of C minus its lowest node without successors in C, remembered per C until the
    states pass ``memo_points``.

    Parameters
    ----------
    ctx : StageContext
        What the parts of the builder share.
    geo : StageGeometry
        The graph as bitmasks and the cut bytes.
    tables : StageTables
        Where the rows and groups go.
    memo_points : int
        Forget every remembered state once more than this many were made.

    Attributes
    ----------
    pairs : int
        The pairs (I, J) whose stage has some t where a choice may fit.
    """

    def __init__(
        self, ctx: StageContext, geo: StageGeometry, tables: StageTables, memo_points: int
    ):
        inst = ctx.inst
        self.inst, self.ideals, self.ids, self.check = inst, ctx.ideals, ctx.ids, ctx.check
        self.N, self.B, self.M, self.mem_maybe = ctx.N, ctx.B, ctx.M, ctx.mem_maybe
        self.ds, self.cap, self.plain, self.node_t = ctx.ds, ctx.cap, ctx.plain, ctx.node_t
        self.pred_mask, self.succ_mask = geo.pred_mask, geo.succ_mask
        self.preds, self.succs = geo.preds, geo.succs
        self.plus_bits, self.minus_bits = geo.plus_bits, geo.minus_bits
        self.low_sink, self.cut_bytes = geo.low_sink, geo.cut_bytes
        self.tables = tables
        self.state_memo_points = memo_points
        # Piper's rule on plain nodes: per t, the numbers it reads of each node
        self.plain_data = {t: plain_node_data(ctx, geo, t) for t in ctx.t_values}
        self.greedy_pending: list = []
        # general nodes: the options' rows per (node, t, cut in, cut out), as items
        self.item_id: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.node_item: dict[tuple, int] = {}
        self.greedy_cache: dict[tuple, list] = {}
        # the rows of stage C under t (plain stages: first row, and the count of rows
        # before each d of ds[t]), and of each profile of greedy_cache, stored once and
        # shared by the pairs
        self.greedy_rows: dict[tuple[int, int], tuple[int, list]] = {}
        self.greedy_profile_rows: dict[tuple, list] = {}
        # stage states per stage C with the cut bitmasks (plus, minus) of its nodes
        self.state_memo: dict[int, tuple] = {}
        self.memo_points = 0
        self.empty_state = ({t: (0.0, True, None, 0.0) for t in ctx.t_values}, 0, 0)
        self.pairs = 0

    def add_set(self, k: int, I: int, js: np.ndarray, dev_lo, dev_hi):
        """The candidate stages I \\ J of set ``k`` (``I``) for the sets J of indices
        ``js``, largest J first: C grows, and its state extends a state of this I just
        made.

        Parameters
        ----------
        k : int
            The index of I in the family.
        I : int
            The set I.
        js : numpy.ndarray
            The indices of the sets J (rising; :meth:`CandidatePairs.by_set
            <dp.stage_candidates.CandidatePairs.by_set>`).
        dev_lo, dev_hi : numpy.ndarray or None
            Per pair, the range of t d it allows; None: any.
        """
        ideals = self.ideals
        if dev_lo is not None:
            dev_lo, dev_hi = dev_lo.tolist(), dev_hi.tolist()
        jl = js.tolist()
        for pos in range(len(jl) - 1, -1, -1):
            jk = jl[pos]
            J = ideals[jk]
            C = I & ~J
            sts, cut = self._state(C)
            if sts:
                self.pairs += 1
                self._emit_pair(
                    k, jk, I, J, cut, sts, None if dev_lo is None else (dev_lo[pos], dev_hi[pos])
                )

    def finish(self):
        """Emit what waits in the queue and forget the states."""
        if self.greedy_pending:
            self._flush()
        self.state_memo.clear()

    # ---- the states ---------------------------------------------------------------------
    def _state(self, C: int):
        """The state of stage C (dict t -> (W, plain, None, least memory), only the t where
        some choice may fit) and its cut-edge bitmask, from the state of C minus a node
        without successors in C (found in the memo, or made first, and so on down)."""
        memo = self.state_memo
        got = memo.get(C)
        if got is not None:
            return got[0], got[1] & ~got[2]
        chain = []
        X = C
        while got is None:
            if X == 0:
                got = self.empty_state
                break
            # a node of X with no successor in X (the graph is acyclic: one exists)
            v = self.low_sink(X)
            chain.append((X, v))
            X &= ~(1 << v)
            got = memo.get(X)
        sts, plus, minus = got
        for X, v in reversed(chain):
            new = {}
            for t, st in sts.items():
                st2 = self._extend(st, v, t)
                if st2 is not None:
                    new[t] = st2
                    self.memo_points += 1
            sts, plus, minus = new, plus | self.plus_bits[v], minus | self.minus_bits[v]
            memo[X] = (sts, plus, minus)
        if self.memo_points > self.state_memo_points:
            memo.clear()
            self.memo_points = 0
        return sts, plus & ~minus

    def _extend(self, st, v: int, t: int):
        """The state of stage C + v under t, (W, plain, None, least memory), or None when no
        option choice can fit (then no larger stage fits either). (Exact mode:
        :mod:`dp.exact_states`, the same rules with frontiers.)"""
        node = self.node_t.get((v, t))
        if node is None:
            return None
        node_plain, m1min, w_first, o = node
        W, plain, fr, m1 = st
        m1 = m1 + m1min
        if m1 > self.mem_maybe:
            return None
        plain = plain and node_plain
        if plain:
            W += w_first
        return (W, plain, None, m1)

    # ---- one candidate stage ------------------------------------------------------------
    def _emit_pair(
        self,
        k: int,
        jk: int,
        I: int,
        J: int,
        cut: int,
        states: dict,
        devices: tuple | None = None,
    ):
        """The tables of stage C = I \\ J for each t (and each d with t d in ``devices`` =
        (least, most), when given)."""
        C = I & ~J
        for t, (W, plain, _, _) in states.items():
            ds, caps = self.ds[t], self.cap[t]
            if devices is not None:
                keep = (t * ds >= devices[0]) & (t * ds <= devices[1])
                if not keep.all():
                    ds, caps = ds[keep], caps[keep]
            if not len(ds):
                continue
            if plain:
                self._emit_plain(k, jk, t, C, self.cut_bytes(t, cut), W, ds)
            else:
                self._emit_general(k, jk, t, I, J, C, ds)

    # ---- plain stages -------------------------------------------------------------------
    def _emit_plain(self, k, jk, t, C, E, W, ds):
        """Piper's rule on a stage whose nodes' options differ only in p, a, b: queued, the
        rows of C under t made once for every d (many stages at a time, see
        :meth:`_flush`); E and W come from the state."""
        self.greedy_pending.append((k, jk, t, C, E, W, ds))
        if len(self.greedy_pending) >= 4096:
            self._flush()

    def _flush(self):
        """Make the rows of every queued plain stage C under t that has none yet
        (:meth:`_plain_rows`), then emit each queued pair's groups: the rows of its d (a
        contiguous range of ``ds[t]``) that have points."""
        pending, self.greedy_pending = self.greedy_pending, []
        memo = self.greedy_rows
        new: dict[int, dict[int, tuple]] = {}
        for _k, _jk, t, C, E, W, _ds in pending:
            if (C, t) not in memo:
                new.setdefault(t, {})[C] = (E, W)
        for t, stages in new.items():
            self.check()
            self._plain_rows(t, list(stages.items()))
        for k, jk, t, C, _E, _W, ds in pending:
            first, cum = memo[(C, t)]
            i0 = 0 if len(ds) == len(self.ds[t]) else int(np.searchsorted(self.ds[t], ds[0]))
            lo, hi = cum[i0], cum[i0 + len(ds)]
            if hi > lo:
                self.tables.add_groups(k, jk, first + lo, hi - lo)

    def _plain_stages(self, t: int, masks: list[int]):
        """The node positions of plain stages (bitmasks ``masks``) end to end, their cut
        bytes as the rule sums them, and one representative per distinct sequence of node
        classes and cut bytes (:func:`plain_node_data`). Returns (sizes, pos, e, inv, rep):
        the representative of stage g is ``rep[inv[g]]``, the first stage of its kind."""
        _, terms, other, cls = self.plain_data[t]
        node_lists = [list(bits(C)) for C in masks]
        G = len(masks)
        sizes = np.array([len(x) for x in node_lists], dtype=np.int64)
        pos = np.fromiter(itertools.chain.from_iterable(node_lists), dtype=np.int64)
        g_of = np.repeat(np.arange(G), sizes)
        inside = membership(masks, len(self.ids))
        e = running_sum(terms[pos] * (1.0 - inside[g_of[:, None], other[pos]]))
        key_cls, key_e = cls[pos].tobytes(), e.tobytes()
        ends = np.cumsum(sizes)
        seen: dict[bytes, int] = {}
        inv = np.array(
            [
                seen.setdefault(key_cls[8 * a : 8 * z] + key_e[8 * a : 8 * z], len(seen))
                for a, z in zip((ends - sizes).tolist(), ends.tolist())
            ],
            dtype=np.int64,
        )
        rep = np.zeros(len(seen), dtype=np.int64)
        rep[inv[::-1]] = np.arange(G - 1, -1, -1)  # the first stage of each
        return sizes, pos, e, inv, rep

    def _plain_rows(self, t: int, stages: list):
        """The rows of plain stages C under t, one per d of ``ds[t]`` where Piper's rule
        finds a choice for some y <= cap (``stages`` lists (C, (E, W))), stored stage by
        stage, d by d, into ``greedy_rows[(C, t)]`` = (first row, count of rows before each
        d). The rule runs once per distinct stage (:meth:`_plain_stages`) and d."""
        opt = self.plain_data[t][0]
        ds, caps = self.ds[t], self.cap[t]
        G, D = len(stages), len(ds)
        sizes, pos, e, inv, rep = self._plain_stages(t, [C for C, _ in stages])
        keep = np.zeros(G, dtype=bool)
        keep[rep] = True
        node_keep = np.repeat(keep, sizes)
        r_pos, r_e = pos[node_keep], e[node_keep]
        r_sizes = sizes[rep]
        r_of = np.repeat(np.arange(len(rep)), r_sizes)
        r_col = np.arange(len(r_pos)) - np.repeat(np.cumsum(r_sizes) - r_sizes, r_sizes)
        E = np.array([ew[0] for _, ew in stages])
        W = np.array([ew[1] for _, ew in stages])
        width = int(sizes.max())
        cnt = np.zeros((G, D), dtype=np.int64)
        mono = np.ones((G, D), dtype=bool)
        points = []
        for j, d in enumerate(ds.tolist()):
            blocks = np.zeros((len(rep), width, 8))
            blocks[r_of, r_col] = _rule_blocks(opt[r_pos], r_e, d, self.N, self.B)
            run_u, lo, hi, P, u_mono = plain_rule_runs(
                blocks, r_sizes, int(caps[j]), self.M, self.check
            )
            u_cnt = np.bincount(run_u, minlength=len(rep))
            u_start = np.cumsum(u_cnt) - u_cnt
            counts = u_cnt[inv]
            total = int(counts.sum())
            take = np.arange(total) + np.repeat(u_start[inv] - (np.cumsum(counts) - counts), counts)
            g_pts = np.repeat(np.arange(G), counts)
            cost = stage_tps_from_sums(E[g_pts], W[g_pts], P[take], d, self.N, self.B)
            points.append((g_pts, cost, lo[take], hi[take]))
            cnt[:, j] = counts
            mono[:, j] = u_mono[inv]
        self._store_plain_rows(t, [C for C, _ in stages], points, cnt, mono)

    def _store_plain_rows(self, t: int, masks: list[int], points: list, cnt, mono):
        """Store the rows :meth:`_plain_rows` made (per d, the points (stage, cost, ylo,
        yhi) by stage; ``cnt`` and ``mono`` (G, D)), stage by stage, then d by d."""
        ds = self.ds[t]
        G, D = cnt.shape
        g_all = np.concatenate([x[0] for x in points])
        order = np.argsort(g_all, kind="stable")  # each d's points are by stage already
        present = cnt > 0
        n_rows = present.sum(axis=1)
        first_row = -1
        if n_rows.any():
            first_row = self.tables.add_ragged_rows(
                t,
                np.broadcast_to(ds, (G, D))[present],
                cnt[present],
                *(np.concatenate([x[k] for x in points])[order] for k in (1, 2, 3)),
                mono[present],
            )
        base = first_row + np.cumsum(n_rows) - n_rows
        cum = np.zeros((G, D + 1), dtype=np.int64)
        np.cumsum(present, axis=1, out=cum[:, 1:])
        for g, C in enumerate(masks):
            self.greedy_rows[(C, t)] = (int(base[g]), cum[g].tolist())

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

    def _emit_general(self, k, jk, t, I, J, C, allowed):
        """Piper's rule on a stage with general nodes: its profiles (one per d) are made
        once per sequence of items and stored once, shared by the pairs."""
        ids = tuple(
            self._item(i, t, self.pred_mask[i] & ~I, self.succ_mask[i] & J) for i in bits(C)
        )
        key = (t, ids)
        got = self.greedy_cache.get(key)
        if got is None:
            got = self._profiles(ids, t)
            self.greedy_cache[key] = got
        full = len(allowed) == len(self.ds[t])
        # the rows of each profile are stored once (on first use) and shared by the pairs
        rows = self.greedy_profile_rows.setdefault(key, [None] * len(got))
        for i, (ds, cost, ylo, yhi, mono) in enumerate(got):
            whole = True
            if not full:
                keep = np.isin(ds, allowed)
                if not keep.any():
                    continue
                whole = bool(keep.all())
                if not whole:
                    ds, cost, ylo, yhi = ds[keep], cost[keep], ylo[keep], yhi[keep]
            if not cost.shape[1]:
                continue
            if not whole:
                first = self.tables.add_rows(t, ds, cost, ylo, yhi, mono)
            else:
                first = rows[i]
                if first is None:
                    first = rows[i] = self.tables.add_rows(t, ds, cost, ylo, yhi, mono)
            self.tables.add_groups(k, jk, first, len(ds))

    def _profiles(self, item_ids: tuple, t: int):
        """Piper's rule on a stage with general nodes, for each d (the ranking depends on d)
        and y = 1..cap: groups (ds, cost, ylo, yhi, monotone)."""
        rows = [self.items[k][0] for k in item_ids]
        out = []
        for d, cap in zip(self.ds[t].tolist(), self.cap[t].tolist()):
            runs = self._runs(rows, d, cap)
            if runs:
                lo, hi, P, E, W = (np.array(c) for c in zip(*runs))
                cost = stage_tps_from_sums(E, W, P, d, self.N, self.B)
                mono = is_monotone_step(lo, hi, cost)
                out.append((np.array([d]), cost[None, :], lo[None, :], hi[None, :], mono))
        return out

    def _runs(self, rows, d: int, ymax: int):
        """Piper's rule for y = 1..ymax on one stage: runs (y_lo, y_hi, P, E, W) of equal
        choice over the y where the rule finds a choice."""
        nr = greedy_node_rows(
            [[o[:1] + o[5:] + o[2:5] for o in r] for r in rows], d, self.N, self.B
        )
        n = len(rows)
        sw, feas = greedy_rule_grid(
            *(x[None, :] for x in (nr.delta, nr.aF, nr.bF, nr.aO, nr.bO, nr.o_first)),
            np.arange(1, ymax + 1),
            self.M,
        )
        starts, ends, _ = choice_runs(sw, feas)
        sw = sw[0]
        out = []
        for s0, s1 in zip(starts[0].tolist(), ends[0].tolist()):
            mask = sw[s0 - 1]
            chosen = [rows[i][nr.O[i] if mask[i] else nr.F[i]] for i in range(n)]
            out.append(
                (
                    s0,
                    s1,
                    math.fsum(o[0] for o in chosen),
                    math.fsum(o[1] for o in chosen),
                    math.fsum(o[2] for o in chosen),
                )
            )
        return out
