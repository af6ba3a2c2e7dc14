"""The stage tables in exact mode: each stage's least cost per y by the exact knapsack (cost
model secs. 4 and 7).

:class:`ExactTables` queues the candidate pairs (I, J) of many sets I with their stages
C = I \\ J (one stage id per C, shared by every pair with that C;
:class:`dp.stage_queue.StageQueue`), then makes the queued stages' states
(:class:`dp.exact_states.ExactStates`, by size, many per numpy pass), their rows per (t, d)
(plain stages many per numpy pass; general ones too, :class:`dp.general_stages.GeneralStages`,
but one at a time near the memory boundary) and the pairs' groups, all at once. Memory is
decided exactly: float sums away from the boundary, :class:`dp.option_choice.OptionChoices`
(exact integer sums) near it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from functools import partial

import numpy as np

from dp.exact_states import ExactStates
from dp.general_stages import GeneralStages
from dp.knapsack import (
    Frontier,
    monotone_runs,
    pareto_frontier,
    pieces,
    stage_items,
    stage_tps_from_sums,
    y_capacities,
    y_capacity_and_memory,
)
from dp.option_choice import OptionChoices
from dp.stage_context import FILTER_LOW_BITS, BuildBatches, StageContext
from dp.stage_geometry import StageGeometry, bits, lowest_sink
from dp.stage_queue import StageQueue
from dp.table_arrays import serves_more, staircase, union_ranges
from dp.table_store import StageTables

__all__ = ["ExactTables", "exact_runs"]


def exact_runs(choices, C: int, t: int, d: int, spans: list[tuple[int, int]]) -> list:
    """The exact least cost of stage C under (t, d) at every y of ``spans``, as runs.

    Reads :func:`dp.knapsack.monotone_runs` over the spans' y in order, so a span costs a
    few exact choices per step of the cost rather than one per y (a million y, for K =
    2^20, would take minutes one by one).

    Parameters
    ----------
    choices : OptionChoices
        Anything with ``exact_cost(C, t, d, y)`` (the least cost, or None when nothing
        fits), non-decreasing in y.
    C : int
        The stage (bitmask).
    t, d : int
        The degrees.
    spans : list of (int, int)
        Disjoint sorted ranges (first y, last y) (:func:`dp.table_arrays.union_ranges`).

    Returns
    -------
    list of (int, int, float)
        Runs (first y, last y, cost) of one cost each (inf where nothing fits), split
        where the spans have gaps.
    """
    starts = list(itertools.accumulate((b - a + 1 for a, b in spans), initial=0))

    def y_at(i):  # the i-th y of the spans
        k = bisect.bisect_right(starts, i) - 1
        return spans[k][0] + i - starts[k]

    def cost(i):
        got = choices.exact_cost(C, t, d, y_at(i))
        return math.inf if got is None else got

    out = []
    for i, j, c in monotone_runs(starts[-1], cost):
        while i <= j:  # back to y, split where the spans have gaps
            k = bisect.bisect_right(starts, i) - 1
            end = min(j, starts[k + 1] - 1)
            out.append((y_at(i), y_at(end), c))
            i = end + 1
    return out


class ExactTables(StageQueue):
    """The exact-mode part of the stage-table builder: the rows of the queued stages
    (:class:`dp.stage_queue.StageQueue`) by the exact knapsack.

    Parameters
    ----------
    ctx : StageContext
        What the parts of the builder share.
    geo : StageGeometry
        The graph as bitmasks and the cut bytes.
    tables : StageTables
        Where the rows and groups go.
    choices : OptionChoices
        The memo of exact choices, used near the memory boundary.
    masks : numpy.ndarray
        The family as words (:func:`dp.stage_geometry.set_words`).
    ub : float, optional
        An upper bound on the optimum: table points costing more than ub (1 + 1e-9)
        cannot be in a plan of value <= ub and are left out.
    batches : BuildBatches
        The sizes of the queue, the pieces and the memo.

    Attributes
    ----------
    pairs : int
        The pairs (I, J) whose stage has rows for some t.
    """

    def __init__(
        self,
        ctx: StageContext,
        geo: StageGeometry,
        tables: StageTables,
        choices: OptionChoices,
        masks: np.ndarray,
        ub: float | None,
        batches: BuildBatches,
    ):
        super().__init__(ctx, geo, tables, masks, batches)
        self.mem_sure, self.mem_kept = ctx.mem_sure, ctx.mem_kept
        self.choices = choices
        self.batch_points = batches.points
        self.state_memo_points = batches.memo_points
        # table points costing more than this cannot be in a plan of value <= ub
        self.cost_cut = None if ub is None else ub * (1.0 + 1e-9)
        # the states of the stages, in flat arrays (they hold no reference to this object:
        # with the cyclic collector paused, a cycle would keep both alive)
        self.general = GeneralStages(ctx.inst, ctx.ids, ctx.S, ctx.check)
        self.states = ExactStates(
            ctx,
            geo,
            FILTER_LOW_BITS,
            partial(lowest_sink, succ=geo.succ_mask, filters=geo.sink_filters),
            batches.extend_rows,
        )

    def finish(self):
        """Make and emit what waits in the queue, then forget the stages and their states."""
        super().finish()
        self.states = None

    # ---- a batch of stages ------------------------------------------------------------
    def _flush(self):
        """Make the states of the queued stages, then their rows (plain stages: many per
        numpy pass, :meth:`_plain_batch`; general ones too, :meth:`_general_batch`, but one
        at a time by :meth:`_blocks` near the memory boundary), then emit the queued pairs'
        groups in their order. The states are forgotten once they pass ``memo_points``
        (states plus frontier rows)."""
        stages, ids, q0 = self._take_batch()
        states = self.states
        n = len(stages)
        nonempty = np.zeros(n, dtype=bool)
        for t in self.t_values:
            alive = states.alive[t][ids]
            nonempty |= alive
            plain = states.plain[t][ids]
            general = np.flatnonzero(alive & ~plain)
            if len(general):
                self._general_batch(t, stages, ids, q0, general)
            fast = np.flatnonzero(alive & plain)
            # in pieces of about batch_points frontier rows
            for a, b in pieces(states.cnt[t][ids[fast]], self.batch_points):
                self.check()
                self._plain_batch(t, stages, ids, q0, fast[a:b])
        self.stage_nonempty[q0 : q0 + n] = nonempty
        if states.size() > self.state_memo_points:
            states.forget()
        self._emit_pairs()

    def _general_batch(self, t: int, stages: list, ids: np.ndarray, q0: int, pick: np.ndarray):
        """The rows under t of the general stages ``stages[i]`` (state ``ids[i]``, stage id
        q0 + i) for i in ``pick``, in that order: their frontiers and rows many at once
        (:class:`dp.general_stages.GeneralStages`, the same float operations as
        :meth:`_blocks`); a stage whose float memory sums do not decide every y goes
        through :meth:`_blocks` alone."""
        gen = self.general
        fr = gen.frontiers([stages[i] for i in pick.tolist()], t)
        got = gen.rows(fr, self.ds[t], self.cap[t], self.mem_sure, self.mem_kept, self.cost_cut)
        nd = len(self.ds[t])
        ns = len(pick)
        has = np.zeros((ns, nd), dtype=bool)
        if len(got.row_stage):
            has[got.row_stage, np.searchsorted(self.ds[t], got.row_d)] = True
        cums = np.zeros((ns, nd + 1), dtype=np.int64)
        np.cumsum(has, axis=1, out=cums[:, 1:])
        row_at = np.zeros(ns + 1, dtype=np.int64)  # each stage's first row among got's
        np.cumsum(cums[:, -1], out=row_at[1:])
        pt_at = np.zeros(len(got.row_points) + 1, dtype=np.int64)
        np.cumsum(got.row_points, out=pt_at[1:])
        decided = got.decided.tolist()
        fr_at = np.zeros(ns + 1, dtype=np.int64)  # each stage's first frontier row
        np.cumsum(fr.count, out=fr_at[1:])
        r = 0
        while r < ns:
            if not decided[r]:  # near the memory boundary: one stage, the exact choice
                i = int(pick[r])
                s = int(ids[i])
                rows = fr.rows[fr_at[r] : fr_at[r + 1]]
                blocks = self._blocks(
                    stages[i], t, self.states.cut(s), float(self.states.W[t][s]), False, rows
                )
                self._record_rows(t, q0 + i, *self._store_rows(t, blocks))
                r += 1
                continue
            e = r + 1
            while e < ns and decided[e]:
                e += 1
            a, b = int(row_at[r]), int(row_at[e])
            pa, pb = int(pt_at[a]), int(pt_at[b])
            first = self.tables.add_flat_rows(
                t, got.row_d[a:b], got.row_points[a:b], got.cost[pa:pb], got.yhi[pa:pb]
            )
            self._record_rows(t, q0 + pick[r:e], cums[r:e], first + row_at[r:e] - a)
            r = e

    # ---- plain stages, many at once ----------------------------------------------------
    def _plain_batch(self, t: int, stages: list, ids: np.ndarray, q0: int, pick: np.ndarray):
        """The rows under t of the plain stages ``stages[i]`` (state ``ids[i]``, stage id
        q0 + i) for i in ``pick``, at once: the same float operations per point as
        :meth:`_blocks` (y capacities, the staircase, the costs per d, the upper bound's
        cut), on their frontiers laid end to end. Stages where the float sums do not
        decide every y, or where no point holds y = 1, go through :meth:`_blocks` one at
        a time."""
        states = self.states
        ds, caps = self.ds[t], self.cap[t]
        sp = ids[pick]
        lens = states.cnt[t][sp]
        ns = len(pick)
        seg = np.repeat(np.arange(ns), lens)
        starts = np.cumsum(lens) - lens
        F = states.store[t][np.repeat(states.off[t][sp] - starts, lens) + np.arange(len(seg))]
        maybe, kept, segk, slow = self._staircases(F, seg, ns)
        for r in np.flatnonzero(slow).tolist():
            i, s = int(pick[r]), int(sp[r])
            blocks = self._blocks(
                stages[i], t, states.cut(s), float(states.W[t][s]), True, states.frontier(t, s)
            )
            self._record_rows(t, q0 + i, *self._store_rows(t, blocks))
        if bool(slow.all()):
            return
        fast = np.flatnonzero(~slow)
        E = self.geo.cut_bytes_many(t, states.cuts(sp[fast].tolist()))
        Wv = states.W[t][sp[fast]]
        # stage s of the batch (its index among the fast ones) per kept point
        rank = np.cumsum(~slow) - 1
        sk = rank[segk]
        Pk, ycap = F[kept, 0], maybe[kept]
        dcol = ds[:, None].astype(float)
        cost = stage_tps_from_sums(
            E[sk][None, :], Wv[sk][None, :], Pk[None, :], dcol, self.N, self.B
        )
        yhi = np.minimum(ycap[None, :], caps[:, None])
        keep = serves_more(yhi, sk[1:] != sk[:-1])
        cut = self.cost_cut
        if cut is not None:
            keep &= cost <= cut
        self._store_flat_rows(t, sk, len(fast), cost, yhi, keep, q0 + pick[fast])

    def _staircases(self, F: np.ndarray, seg: np.ndarray, ns: int):
        """The staircase by P of each of ``ns`` frontiers laid end to end (rows ``F``, the
        frontier of each row ``seg``): each row's y capacity ``maybe``, the rows kept (by
        stage, then P), their stages, and per stage whether it must go the slow way (the
        float sums do not decide some y, or no row holds y = 1)."""
        A, Bm = F[:, 1], F[:, 2]
        maybe, mem_at = y_capacity_and_memory(A, Bm, self.mem_kept, self.S)
        bad = (maybe > 0) & (mem_at > self.mem_sure)
        undecided = np.bincount(seg[bad], minlength=ns) > 0
        # the staircase of every stage: by (stage, P, larger capacity first); the frontiers
        # are kept sorted by P (dp.exact_states), so without ties in P that is their order
        P = F[:, 0]
        if (P[1:] > P[:-1])[seg[1:] == seg[:-1]].all():
            order, yc, so = None, maybe, seg
        else:
            order = np.lexsort((-maybe, P, seg))
            yc = maybe[order]
            so = seg[order]
        best = np.maximum.accumulate(yc + so * (self.S + 1)) - so * (self.S + 1)
        rise = np.ones(len(yc), dtype=bool)
        rise[1:] = (yc[1:] > best[:-1]) | (so[1:] != so[:-1])
        rise &= yc >= 1
        rise &= ~undecided[so]
        kept = np.nonzero(rise)[0] if order is None else order[rise]
        segk = so[rise]
        nk_of = np.bincount(segk, minlength=ns)
        return maybe, kept, segk, undecided | (nk_of == 0)

    def _store_flat_rows(self, t, sk, nf, cost, yhi, keep, sids):
        """Store the rows of ``nf`` stages whose points (columns of ``cost``, ``yhi``,
        ``keep``: d x points, the point's stage ``sk``) lie side by side, row by row:
        stage, then d, then the stage's points; record each stage's rows (stage ids
        ``sids``)."""
        ds = self.ds[t]
        nd = len(ds)
        n_s = np.bincount(sk, minlength=nf)
        start = np.zeros(nf, dtype=np.int64)
        np.cumsum(n_s[:-1], out=start[1:])
        col = np.arange(len(sk)) - start[sk]
        pos = (nd * start[sk] + col)[None, :] + np.arange(nd)[:, None] * n_s[sk][None, :]
        total = nd * len(sk)
        flat_cost = np.empty(total)
        flat_cost[pos] = cost
        flat_yhi = np.empty(total, dtype=yhi.dtype)
        flat_yhi[pos] = yhi
        row_of = np.empty(total, dtype=np.int64)
        row_of[pos] = sk[None, :] * nd + np.arange(nd)[:, None]
        if not keep.all():
            flat_keep = np.empty(total, dtype=bool)
            flat_keep[pos] = keep
            flat_cost, flat_yhi, row_of = (
                flat_cost[flat_keep],
                flat_yhi[flat_keep],
                row_of[flat_keep],
            )
        npts = np.bincount(row_of, minlength=nf * nd)
        has = npts > 0
        rows_d = np.tile(ds, nf)[has]
        first = self.tables.add_flat_rows(t, rows_d, npts[has], flat_cost, flat_yhi)
        # per stage: the running count of its rows by d and the index of its first row
        cums = np.zeros((nf, nd + 1), dtype=np.int64)
        np.cumsum(has.reshape(nf, nd), axis=1, out=cums[:, 1:])
        firsts = first + np.cumsum(cums[:, -1]) - cums[:, -1]
        self._record_rows(t, sids, cums, firsts)

    # ---- one stage at a time -----------------------------------------------------------
    def _store_rows(self, t: int, blocks: list) -> tuple[np.ndarray, int]:
        """Store the rows of ``blocks`` (monotone, by increasing d) in the tables, without
        the points that serve no y their row's point before them does not
        (:func:`dp.table_arrays.serves_more`), without those that cost more than the upper
        bound allows (with a relative margin of 1e-9, so every plan of value <= ub keeps
        all its points) and without rows left empty. Returns the running count of the rows
        by d (over ``self.ds[t]``, from 0) and the index of the first row (the rows are
        consecutive)."""
        devs: list[int] = []
        first = self.tables.n_rows
        cut = self.cost_cut
        for bdevs, bds, cost, ylo, yhi in blocks:
            keep = serves_more(yhi)
            if cut is not None:
                keep &= cost <= cut
                rows = keep.any(axis=1)
                if not rows.any():
                    continue
                if not rows.all():
                    bdevs = [x for x, r in zip(bdevs, rows.tolist()) if r]
                    bds, cost, ylo, yhi, keep = (
                        bds[rows],
                        cost[rows],
                        ylo[rows],
                        yhi[rows],
                        keep[rows],
                    )
            self.tables.add_rows(t, bds, cost, ylo, yhi, True, None if keep.all() else keep)
            devs.extend(bdevs)
        have = set(devs)
        return np.array(
            [0, *itertools.accumulate(x in have for x in (t * self.ds[t]).tolist())], dtype=np.int64
        ), first

    def _blocks(self, C: int, t: int, cut: int, W: float, plain: bool, fr) -> list:
        """The exact tables of stage C under t for every allowed d: blocks (t d as a list,
        ds, cost, ylo, yhi), rows by increasing d. A plain stage reads its frontier ``fr``
        (rows P, A, Bm) and cut bitmask; a general one reads its frontier ``fr`` as
        :class:`dp.general_stages.GeneralFrontiers` rows (P, E, W, A, Bm, ...: the rows
        :func:`dp.knapsack.pareto_frontier` gives, in its order), or makes it here when
        ``fr`` is None."""
        ds, caps = self.ds[t], self.cap[t]
        blocks = []
        if plain:
            E = self.geo.cut_bytes(t, cut)
            P, A, Bm = fr[:, 0], fr[:, 1], fr[:, 2]
            sure, maybe, decided = y_capacities(A, Bm, self.mem_sure, self.mem_kept, self.S)
            if decided:
                keep = staircase(P, sure)
                P, ycap = P[keep], sure[keep]
                dcol = ds[:, None].astype(float)
                cost = stage_tps_from_sums(E, W, P[None, :], dcol, self.N, self.B)
                yhi = np.minimum(ycap[None, :], caps[:, None])
                blocks.append(((t * ds).tolist(), ds, cost, np.ones_like(yhi), yhi))
            else:
                for d, cap in zip(ds.tolist(), caps.tolist()):
                    cost = stage_tps_from_sums(E, W, P, d, self.N, self.B)
                    row = self._near_boundary(C, t, d, cap, cost, sure, maybe)
                    if row is not None:
                        blocks.append(([t * d], np.array([d]), *row))
            return blocks
        if fr is None:
            nodes = [self.ids[i] for i in bits(C)]
            fr = pareto_frontier(stage_items(self.inst, nodes, t), self.M, y_range=(1, self.S))
        else:
            fr = Frontier(fr[:, 0], fr[:, 1], fr[:, 2], fr[:, 3], fr[:, 4])
        if not len(fr):
            return blocks
        sure, maybe, exact = y_capacities(fr.A, fr.Bm, self.mem_sure, self.mem_kept, self.S)
        for d, cap in zip(ds.tolist(), caps.tolist()):
            cost = stage_tps_from_sums(fr.E, fr.W, fr.P, d, self.N, self.B)
            if not exact:
                row = self._near_boundary(C, t, d, cap, cost, sure, maybe)
                if row is not None:
                    blocks.append(([t * d], np.array([d]), *row))
                continue
            yc = np.minimum(sure, cap)
            keep = staircase(cost, yc)
            cost, yc = cost[keep], yc[keep]
            if len(yc):
                blocks.append(
                    (
                        [t * d],
                        np.array([d]),
                        cost[None, :],
                        np.ones((1, len(yc)), dtype=np.int64),
                        yc[None, :],
                    )
                )
        return blocks

    def _near_boundary(self, C, t, d, cap, cost, sure, maybe):
        """The step function y -> least cost of stage C under (t, d) when some frontier
        point's float memory is too close to M to decide: points that fit for certain give
        an upper bound per y; every y where some point may or may not fit is decided by
        the exact choice (:func:`exact_runs`). Returns the table row (cost, ylo, yhi) as
        1 x points arrays, or None when no y fits."""
        sure = np.minimum(sure, cap)
        maybe = np.minimum(maybe, cap)
        val = np.full(cap + 2, np.inf)
        np.minimum.at(val, sure, cost)
        val = np.minimum.accumulate(val[::-1])[::-1][1 : cap + 1]  # y = 1..cap
        spans = union_ranges(zip((sure + 1).tolist(), maybe.tolist()))
        for ya, yb, got in exact_runs(self.choices, C, t, d, spans):
            np.minimum(val[ya - 1 : yb], got, out=val[ya - 1 : yb])
        # a choice that fits at y fits at every smaller y: the least cost rises with y
        # (a rise of a few ulps here only overstates the cost; the rebuild then does better)
        val = np.maximum.accumulate(val)
        ycap = int(np.isfinite(val).sum())
        if ycap == 0:
            return None
        v = val[:ycap]
        last = np.ones(ycap, dtype=bool)
        last[:-1] = v[1:] != v[:-1]
        ends = np.nonzero(last)[0]
        return v[ends][None, :], np.ones((1, len(ends)), dtype=np.int64), (ends + 1)[None, :]
