"""Exact-mode tables of general stages, many stages per numpy pass (cost model secs. 3, 4
and 7). A stage is general under t when some node's options differ in more than p, a and
b (w, or the sync bytes of its edges): its cut bytes E then depend on the choice, and its
options are chosen over the Pareto frontier of (P, E, W, memory) that
:func:`dp.knapsack.pareto_frontier` makes.

:class:`GeneralStages` makes those frontiers for many stages at once, with the same float
operations in the same order, row for row: step j adds the j-th group of identical items
of every stage (:func:`dp.knapsack.group_points`, remembered per item), filters the sums by
memory and keeps the rows :func:`dp.knapsack.pareto_orders` keeps, in their order. Its
:meth:`GeneralStages.rows` then reads each stage's rows per d as
:meth:`dp.exact_tables.ExactTables` does one stage at a time (the y capacities, the
staircase by cost, the upper bound's cut), for the stages whose float memory sums decide
every y; the others are left to the exact choice near the boundary.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from dp.knapsack import (
    group_points,
    pareto_orders,
    run_starts,
    segment_lex_order,
    stage_tps_from_sums,
    y_capacity_and_memory,
)
from dp.memory import float_band, kept_row_limit
from dp.stage_geometry import bits
from piper_ilp.cost import node_edge_bytes
from piper_ilp.instance import Instance

__all__ = ["GeneralStages", "GeneralFrontiers", "GeneralRows"]

#: Stages per batch of :meth:`GeneralStages.frontiers` (the rows of a batch's steps are
#: held at once).
BATCH_STAGES = 512


class GeneralFrontiers(NamedTuple):
    """The frontiers of a batch of stages, end to end.

    Attributes
    ----------
    rows : numpy.ndarray
        rows x 7: P, E, W, A, Bm, memory at y = 1, memory at y = S, by stage and then in
        the order of :func:`dp.knapsack.pareto_frontier`.
    seg : numpy.ndarray
        The stage (index in the batch) of each row.
    count : numpy.ndarray
        Per stage, its rows (0: no choice fits).
    """

    rows: np.ndarray
    seg: np.ndarray
    count: np.ndarray


class GeneralRows(NamedTuple):
    """The table rows of a batch of stages under one t, by stage and then by d.

    Attributes
    ----------
    decided : numpy.ndarray of bool
        Per stage: the float memory sums decide every y (else it has no rows here).
    row_stage, row_d, row_points : numpy.ndarray
        Per row: its stage, d and number of points.
    cost, yhi : numpy.ndarray
        Per point, row by row: its cost and the largest y it serves (ylo is 1).
    """

    decided: np.ndarray
    row_stage: np.ndarray
    row_d: np.ndarray
    row_points: np.ndarray
    cost: np.ndarray
    yhi: np.ndarray


class GeneralStages:
    """The frontiers and table rows of general stages, many at once.

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions.
    ids : list of int
        The node ids by position (the stages are bitmasks over positions).
    S : int
        min(N, K): the y range of the frontiers is 1..S.
    check : callable
        Raises past the deadline; called per step.
    """

    def __init__(self, inst: Instance, ids: list[int], S: int, check: Callable[[], None]):
        self.inst, self.ids, self.S, self.check = inst, ids, S, check
        pos = {v: i for i, v in enumerate(ids)}
        # per position: its neighbours (the nodes whose membership changes its cut bytes)
        self.nbr = []
        for v in ids:
            m = 0
            for u, _ in inst.in_edges[v]:
                m |= 1 << pos[u]
            for x, _ in inst.out_edges[v]:
                m |= 1 << pos[x]
            self.nbr.append(m)
        self.item_of: dict[tuple[int, int, int], int] = {}  # (position, t, neighbours in C)
        self.item_id: dict[tuple, int] = {}  # an item (by value) -> its id
        self.items: list[tuple] = []
        self.blocks: dict[tuple[int, int], np.ndarray] = {}  # (item id, copies) -> points
        self.mem_limits: dict[int, float] = {}  # stage size -> pareto_frontier's limit

    def _item(self, i: int, t: int, C: int) -> int:
        """The id of node i's item in stage C under t (:func:`dp.knapsack.stage_items`:
        its options as (p, E, w, a, b), E its cut bytes in C with that option)."""
        key = (i, t, C & self.nbr[i])
        got = self.item_of.get(key)
        if got is None:
            inst, ids = self.inst, self.ids
            v = ids[i]
            members = {ids[j] for j in bits(key[2])}
            it = tuple(
                (o.p, node_edge_bytes(inst, v, o, members), o.w, o.a, o.b)
                for o in inst.node[v].options[t]
            )
            got = self.item_id.get(it)
            if got is None:
                got = self.item_id[it] = len(self.items)
                self.items.append(it)
            self.item_of[key] = got
        return got

    def _block(self, item: int, k: int) -> np.ndarray:
        """The choices of k copies of an item that no other choice of them dominates
        (:func:`dp.knapsack.group_points`; the memory limit is applied to the sums)."""
        key = (item, k)
        got = self.blocks.get(key)
        if got is None:
            _, gpts, mask = group_points(self.items[item], k, 1, self.S)
            got = self.blocks[key] = gpts[mask]
        return got

    def _mem_limit(self, n: int) -> float:
        got = self.mem_limits.get(n)
        if got is None:
            M = self.inst.M
            got = self.mem_limits[n] = kept_row_limit(M, float_band(2 * n + 2), 2 * n + 2)
        return got

    def frontiers(self, Cs: list[int], t: int) -> GeneralFrontiers:
        """The frontiers of stages ``Cs`` under t: for each, the rows
        :func:`dp.knapsack.pareto_frontier` gives for its items with y in 1..S, in its
        order.

        Parameters
        ----------
        Cs : list of int
            The stages (bitmasks over positions; every node has options for t).
        t : int
            The tensor degree.

        Returns
        -------
        GeneralFrontiers
        """
        parts = [
            self._frontiers(Cs[a : a + BATCH_STAGES], t) for a in range(0, len(Cs), BATCH_STAGES)
        ]
        if len(parts) == 1:
            return parts[0]
        seg, base = [], 0
        for p in parts:
            seg.append(p.seg + base)
            base += len(p.count)
        return GeneralFrontiers(
            np.concatenate([p.rows for p in parts]),
            np.concatenate(seg),
            np.concatenate([p.count for p in parts]),
        )

    def _frontiers(self, Cs: list[int], t: int) -> GeneralFrontiers:
        ns = len(Cs)
        seqs = []
        limits = np.empty(ns)
        item_of, nbr = self.item_of, self.nbr
        for s, C in enumerate(Cs):
            groups: dict[int, int] = {}  # item id -> copies, in order of first appearance
            n = 0
            for i in bits(C):
                it = item_of.get((i, t, C & nbr[i]))
                if it is None:
                    it = self._item(i, t, C)
                groups[it] = groups.get(it, 0) + 1
                n += 1
            seqs.append(list(groups.items()))
            limits[s] = self._mem_limit(n)
        steps = max(map(len, seqs))
        # the groups' points in one store; per stage and step, their offset and count
        where: dict[tuple[int, int], int] = {}
        store = []
        at = 0
        boff = np.zeros((ns, steps), dtype=np.int64)
        blen = np.zeros((ns, steps), dtype=np.int64)
        for s, seq in enumerate(seqs):
            for j, key in enumerate(seq):
                got = where.get(key)
                if got is None:
                    pts = self._block(*key)
                    got = where[key] = len(store)
                    store.append((at, pts))
                    at += len(pts)
                boff[s, j], blen[s, j] = store[got][0], len(store[got][1])
        pts = np.concatenate([p for _, p in store])
        n_steps = np.array([len(q) for q in seqs], dtype=np.int64)
        cur = np.zeros((ns, 7))
        seg = np.arange(ns, dtype=np.int64)
        out_rows, out_seg = [], []
        for j in range(steps):
            self.check()
            if not len(seg):
                break
            # every row of the frontier so far plus every point of the stage's j-th group,
            # row-major (pareto_frontier's cur[:, None] + gpts[None, :])
            rep = blen[seg, j]
            ridx = np.repeat(np.arange(len(seg)), rep)
            first = np.cumsum(rep) - rep
            gidx = boff[seg, j][ridx] + (np.arange(len(ridx)) - first[ridx])
            new = cur[ridx] + pts[gidx]
            nseg = seg[ridx]
            fit = new[:, 5] <= limits[nseg]
            if not fit.all():
                new, nseg = new[fit], nseg[fit]
            kept = np.sort(pareto_orders(new[:, [0, 1, 2, 5, 6]], nseg))
            new, nseg = new[kept], nseg[kept]
            done = n_steps[nseg] == j + 1
            if done.any():
                out_rows.append(new[done])
                out_seg.append(nseg[done])
                new, nseg = new[~done], nseg[~done]
            cur, seg = new, nseg
        rows = np.concatenate(out_rows) if out_rows else np.zeros((0, 7))
        rseg = np.concatenate(out_seg) if out_seg else np.zeros(0, dtype=np.int64)
        order = np.argsort(rseg, kind="stable")
        rows, rseg = rows[order], rseg[order]
        return GeneralFrontiers(rows, rseg, np.bincount(rseg, minlength=ns))

    def rows(
        self,
        fr: GeneralFrontiers,
        ds: np.ndarray,
        caps: np.ndarray,
        mem_sure: float,
        mem_kept: float,
        cut: float | None,
    ) -> GeneralRows:
        """The table rows of the stages of ``fr`` under one t, for each d of ``ds``: per
        stage and d, the staircase of its frontier's points by cost (each point's y
        capacity, capped at d's cap), without the points that cost more than ``cut``; no
        row when no point is left. Stages where some point's float memory is too close to
        the limits to decide its y capacity are marked undecided and get no rows.

        Parameters
        ----------
        fr : GeneralFrontiers
            The frontiers.
        ds, caps : numpy.ndarray
            The allowed d and each one's cap on y.
        mem_sure, mem_kept : float
            Float memory at most ``mem_sure`` fits for certain; a frontier row above
            ``mem_kept`` fits for certain not (:class:`dp.stage_context.StageContext`).
        cut : float, optional
            Points costing more are left out (None: none).

        Returns
        -------
        GeneralRows
        """
        ns = len(fr.count)
        F, seg = fr.rows, fr.seg
        maybe, mem_at = y_capacity_and_memory(F[:, 3], F[:, 4], mem_kept, self.S)
        bad = (maybe > 0) & (mem_at > mem_sure)
        decided = np.bincount(seg[bad], minlength=ns) == 0
        if not decided.all():
            ok = decided[seg]
            F, seg, maybe = F[ok], seg[ok], maybe[ok]
        P, E, W = F[:, 0], F[:, 1], F[:, 2]
        N, B = self.inst.N, self.inst.B
        S1 = self.S + 1
        parts = []
        for di, (d, cap) in enumerate(zip(ds.tolist(), caps.tolist())):
            cost = stage_tps_from_sums(E, W, P, d, N, B)
            yc = np.minimum(maybe, cap)
            # the staircase of each stage (dp.table_arrays.staircase): by cost, larger
            # capacity first, the points whose capacity rises above every earlier one's
            order = segment_lex_order(np.column_stack((cost, -yc)), seg)
            yo, so = yc[order], seg[order]
            best = np.maximum.accumulate(yo + so * S1) - so * S1
            rise = np.ones(len(yo), dtype=bool)
            rise[1:] = (yo[1:] > best[:-1]) | (so[1:] != so[:-1])
            rise &= yo >= 1
            k = order[rise]
            c, y, s = cost[k], yc[k], seg[k]
            if cut is not None:
                low = c <= cut
                c, y, s = c[low], y[low], s[low]
            parts.append((s, np.full(len(s), di, dtype=np.int64), c, y))
        if not parts:  # no d allowed under this t
            none = np.zeros(0, dtype=np.int64)
            return GeneralRows(decided, none, none, none, np.zeros(0), none)
        s = np.concatenate([p[0] for p in parts])
        dcol = np.concatenate([p[1] for p in parts])
        o = np.argsort(s, kind="stable")  # by stage, then d, then the staircase
        s, dcol = s[o], dcol[o]
        cost = np.concatenate([p[2] for p in parts])[o]
        yhi = np.concatenate([p[3] for p in parts])[o]
        if len(s):
            starts = run_starts(s * len(ds) + dcol)
            npts = np.diff(np.append(starts, len(s)))
            row_stage, row_d = s[starts], ds[dcol[starts]]
        else:
            npts = row_stage = row_d = np.zeros(0, dtype=np.int64)
        return GeneralRows(decided, row_stage, row_d, npts, cost, yhi)
