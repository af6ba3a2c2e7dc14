"""The stage tables in greedy mode: each stage's options by Piper's rule (cost model sec. 5).

:class:`GreedyTables` takes the candidate pairs (I, J) of one set I at a time, grows each
stage C = I \\ J from a remembered state, and stores per (C, t, d) the runs of y over
which the rule's choice (and so the cost) stays the same. On a stage of plain nodes
(options that differ only in p, a, b) the choice depends on the nodes' own numbers only
and is computed for many stages per numpy call (:func:`plain_rule_runs`).
"""

from __future__ import annotations

import math

import numpy as np

from dp.greedy_rule import greedy_node_rows, greedy_rule_grid
from dp.knapsack import stage_tps_from_sums
from dp.stage_context import StageContext
from dp.stage_geometry import StageGeometry, bits
from dp.table_arrays import choice_runs, is_monotone_step
from dp.table_store import StageTables
from piper_ilp.cost import cut_edge_bytes

__all__ = ["GreedyTables", "plain_rule_row", "plain_rule_runs"]


def plain_rule_row(opts) -> tuple:
    """Piper's rule's row of a plain node (at most two options that differ only in p, a,
    b): (p_F, dkey, a_F, b_F, a_O, b_O, o_first) of :func:`dp.greedy_rule.greedy_node_rows`,
    dkey = p_O - p_F. It depends on neither d nor the stage.

    Parameters
    ----------
    opts : sequence of Option
        The node's options for one t.

    Returns
    -------
    tuple of 7 floats
    """
    nr = greedy_node_rows([[(o.p, 0.0, 0.0, o.a, o.b) for o in opts]], 1, 1, 1.0)
    return (
        nr.pF[0],
        nr.dkey[0],
        nr.aF[0],
        nr.bF[0],
        nr.aO[0],
        nr.bO[0],
        float(nr.o_first[0]),
    )


def plain_rule_runs(node_rows: np.ndarray, stages: list[list[int]], ymax: int, M: float) -> list:
    """Piper's rule on stages of plain nodes, many per numpy call, for y = 1..ymax.

    Parameters
    ----------
    node_rows : numpy.ndarray
        n x 7: per node position, its :func:`plain_rule_row`.
    stages : list of list of int
        Each stage's node positions, in input order.
    ymax : int
        The largest y.
    M : float
        Memory per device.

    Returns
    -------
    list of (numpy.ndarray, numpy.ndarray, numpy.ndarray, bool)
        Per stage, its runs of equal choice: first y, last y, the choice's P (sum of p),
        and whether the runs read as a monotone step function. The stages are padded to
        the longest with zero-memory columns, and P is summed node by node in input order
        (``cumsum``), so a stage's P does not depend on the batch it was computed in.
    """
    nb = len(stages)
    width = max(len(st) for st in stages)
    rows = np.zeros((nb, width, 7))
    for b, st in enumerate(stages):
        rows[b, : len(st)] = node_rows[st]
    ys = np.arange(1, ymax + 1)
    sw, feas = greedy_rule_grid(
        rows[:, :, 1],
        rows[:, :, 2],
        rows[:, :, 3],
        rows[:, :, 4],
        rows[:, :, 5],
        rows[:, :, 6] > 0,
        ys,
        M,
    )
    # sums node by node in input order (cumsum), so that a stage's P does not depend on
    # how wide the batch pads it (np.sum and @ group their terms by length), and the
    # chain bound's tables and the full tables agree to the last bit
    pF_sum = np.cumsum(rows[:, :, 0], axis=1)[:, -1]
    out = []
    starts, ends, contiguous = choice_runs(sw, feas)
    for b in range(nb):
        lo, hi = starts[b], ends[b]
        if not len(lo):
            out.append((lo, hi, np.empty(0), True))
            continue
        P = pF_sum[b] + np.cumsum(np.where(sw[b, lo - 1], rows[b, :, 1], 0.0), axis=1)[:, -1]
        Pl = P.tolist()
        mono = bool(contiguous[b]) and all(x <= y for x, y in zip(Pl, Pl[1:]))
        out.append((lo, hi, P, mono))
    return out


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
        # Piper's rule on plain nodes: the rule's node row does not depend on d or on the
        # stage; nodes with the same row are one class
        self.greedy_class: dict[tuple[int, int], int] = {}
        class_id: dict[tuple, int] = {}
        node_row: dict[int, dict[int, tuple]] = {}
        for i, nd in enumerate(inst.nodes):
            for t, opts in nd.options.items():
                if len(opts) <= 2:
                    row = plain_rule_row(opts)
                    self.greedy_class[(i, t)] = class_id.setdefault(row, len(class_id))
                    node_row.setdefault(t, {})[i] = row
        n = len(ctx.ids)
        self.greedy_row_array = {
            t: np.array([rows.get(i, (np.nan,) * 7) for i in range(n)], dtype=float)
            for t, rows in node_row.items()
        }
        self.greedy_runs_memo: dict[tuple, tuple] = {}
        self.greedy_pending: list = []
        # general nodes: the options' rows per (node, t, cut in, cut out), as items
        self.item_id: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.node_item: dict[tuple, int] = {}
        self.greedy_cache: dict[tuple, list] = {}
        # first row of the rows of stage C under t (plain stages), and of each profile of
        # greedy_cache, stored once and shared by the pairs
        self.greedy_rows: dict[tuple[int, int], int] = {}
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
                self._emit_plain(k, jk, t, C, self.cut_bytes(t, cut), W, ds, caps)
            else:
                self._emit_general(k, jk, t, I, J, C, ds)

    # ---- plain stages -------------------------------------------------------------------
    def _emit_plain(self, k, jk, t, C, E, W, ds, caps):
        """Piper's rule on a stage whose nodes' options differ only in p, a, b: the choice
        per y depends on the nodes' own numbers (in input order) only, so it is computed
        once per such sequence (in batches, see :meth:`_flush`); E and W come from the
        state."""
        nodes = list(bits(C))
        key = (t, tuple(self.greedy_class[(i, t)] for i in nodes))
        self.greedy_pending.append((k, jk, t, E, W, ds, caps, key, nodes, C))
        if len(self.greedy_pending) >= 4096:
            self._flush()

    def _flush(self):
        """Compute the runs of every queued stage whose node sequence is new, many stages
        per numpy call (rows padded with zero-memory columns), then emit them all."""
        pending, self.greedy_pending = self.greedy_pending, []
        todo: dict[tuple, list[int]] = {}
        for p in pending:  # (k, jk, t, E, W, ds, caps, key, nodes, C)
            key = p[7]
            if key not in self.greedy_runs_memo and key not in todo:
                todo[key] = p[8]
        by_t: dict[int, list] = {}
        for key, nodes in todo.items():
            by_t.setdefault(key[0], []).append((key, nodes))
        for t, items in by_t.items():
            ymax = int(self.cap[t].max())
            items.sort(key=lambda kv: len(kv[1]))
            step = max(1, 200_000 // (ymax * max(1, len(items[-1][1]))))
            for c0 in range(0, len(items), step):
                self.check()
                chunk = items[c0 : c0 + step]
                for key, runs in zip(
                    (kv[0] for kv in chunk),
                    plain_rule_runs(
                        self.greedy_row_array[t], [kv[1] for kv in chunk], ymax, self.M
                    ),
                ):
                    self.greedy_runs_memo[key] = runs
        rows_memo = self.greedy_rows
        for k, jk, t, E, W, ds, _caps, key, _nodes, C in pending:
            lo, hi, P, mono = self.greedy_runs_memo[key]
            if not len(P):
                continue
            # the rows of stage C under t for every allowed d, made once per (C, t) (E and
            # W are C's): the pair's d (a contiguous range of them) name a slice
            first = rows_memo.get((C, t))
            if first is None:
                all_ds, all_caps = self.ds[t], self.cap[t]
                dcol = all_ds[:, None].astype(float)
                cost = stage_tps_from_sums(E, W, P[None, :], dcol, self.N, self.B)
                yhi = np.minimum(hi[None, :], all_caps[:, None])
                first = self.tables.add_rows(
                    t, all_ds, cost, np.broadcast_to(lo, yhi.shape), yhi, mono
                )
                rows_memo[(C, t)] = first
            i0 = 0 if len(ds) == len(self.ds[t]) else int(np.searchsorted(self.ds[t], ds[0]))
            self.tables.add_groups(k, jk, first + i0, len(ds))

    # ---- general stages -----------------------------------------------------------------
    def _item(self, i: int, t: int, cut_in: int, cut_out: int) -> int:
        """The id of node i's options under t as rows (p, E, w, a, b), E its cut-edge bytes
        for the in-edges from ``cut_in`` and the out-edges to ``cut_out``; the same rows
        share one id."""
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
            row.append((o.p, math.fsum(terms), o.w, o.a, o.b))
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
        nr = greedy_node_rows(rows, d, self.N, self.B)
        n = len(rows)
        sw, feas = greedy_rule_grid(
            *(x[None, :] for x in (nr.dkey, nr.aF, nr.bF, nr.aO, nr.bO, nr.o_first)),
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
