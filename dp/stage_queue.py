"""The queue of candidate stages that both table makers share (cost model sec. 4).

:class:`StageQueue` takes the candidate pairs (I, J) of many sets I, gives each stage
C = I \\ J one stage id (shared by every pair with that C), queues the new stages and the
pairs, and once enough wait asks its subclass to make the queued stages' rows
(``_flush``: :class:`dp.exact_tables.ExactTables`, :class:`dp.greedy_tables.GreedyTables`),
then stores every queued pair's groups at once (:meth:`StageQueue._emit_pairs`): per pair
and t, the slice of its stage's rows (by increasing d) whose t d the pair allows.
"""

from __future__ import annotations

import itertools

import numpy as np

from dp.stage_context import BuildBatches, StageContext
from dp.stage_geometry import StageGeometry
from dp.table_store import StageTables

__all__ = ["StageQueue"]


class StageQueue:
    """Stage ids, the queue of stages and pairs, and each stage's rows per t.

    Per stage id (in queue order) and t it records the stage's rows: the first row (-1:
    none for this t) and the running count of its rows by d, so that each pair emits the
    slice of rows its device range allows. A subclass makes the rows in ``_flush``: it
    takes ``queue_stages`` and ``queue_sinks``, records each stage's rows
    (:meth:`_record_rows`) and whether it has any (``stage_nonempty``), then calls
    :meth:`_emit_pairs`.

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
        The sizes of the queue.

    Attributes
    ----------
    pairs : int
        The pairs (I, J) whose stage may have rows for some t.
    """

    def __init__(
        self,
        ctx: StageContext,
        geo: StageGeometry,
        tables: StageTables,
        masks: np.ndarray,
        batches: BuildBatches,
    ):
        self.inst, self.ideals, self.ids, self.check = ctx.inst, ctx.ideals, ctx.ids, ctx.check
        self.S, self.N, self.B, self.M = ctx.S, ctx.N, ctx.B, ctx.M
        self.t_values, self.ds, self.cap = ctx.t_values, ctx.ds, ctx.cap
        self.has_ub = ctx.ub is not None  # (the pairs then come with device ranges)
        self.geo, self.tables, self.masks = geo, tables, masks
        self.batch_stages, self.batch_sets = batches.stages, batches.sets
        self.batch_pairs = batches.pairs
        # the stage id of each stage C queued so far
        self.block_memo: dict[int, int] = {}
        # per stage id, per t: first row and running count of rows by d; has rows for some t
        self.n_stages = 0
        self.n_recorded = 0
        self.stage_nonempty = np.zeros(0, dtype=bool)
        self.stage_first = {t: np.zeros(0, dtype=np.int64) for t in self.t_values}
        self.stage_cum = {
            t: np.zeros(
                (0, len(self.ds[t]) + 1), dtype=np.int16 if len(self.ds[t]) < 2**15 else np.int32
            )
            for t in self.t_values
        }
        # stages whose rows are still to be made and the sets I whose pairs wait for them
        self.queue_stages: list = []
        self.queue_sinks: list = []  # per queued stage: its nodes without successors in it
        self.sinks_over: dict[int, int] = {}  # per set J (index): geo.sinks_outside(J)
        self.queue_pairs: list = []
        self.queue_pair_count = 0
        self.pairs = 0

    def add_set(self, k: int, I: int, js: np.ndarray, dev_lo, dev_hi):
        """Queue the candidate stages I \\ J of set ``k`` (``I``) for the sets J of indices
        ``js``, with device ranges [``dev_lo``, ``dev_hi``] for t d (None: any).

        The rows of C (per t: the rows' t d and the first row) are made once per C,
        queued and made many stages at a time (``_flush``); each pair emits the slice
        of them its device range allows once its stages are made (the pairs of this I
        wait in the queue with them).

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
        memo = self.block_memo
        jks = js[::-1]
        masks = self.masks
        if masks.shape[1] == 1:  # the stages as 64-bit masks, made in one pass
            Cs = (masks[k, 0] & ~masks[jks, 0]).tolist()
        else:
            ideals = self.ideals
            Cs = [I & ~ideals[jk] for jk in jks.tolist()]
        sids = list(map(memo.get, Cs))
        pos = 0
        n_new = sids.count(None)
        queue, sinks = self.queue_stages, self.queue_sinks
        for _ in range(n_new):  # (list.index finds the new stages without a Python loop)
            pos = sids.index(None, pos)
            C = Cs[pos]
            sid = memo.get(C)  # (an earlier J of this I may have queued it)
            if sid is None:  # queued for _flush, which makes its state and rows
                sid = memo[C] = self.n_stages
                self.n_stages += 1
                queue.append(C)
                sinks.append(self._sinks_over(int(jks[pos])) & C)
            sids[pos] = sid
        if len(jks):
            self.queue_pairs.append((k, jks, sids, dev_lo, dev_hi))
            self.queue_pair_count += len(jks)
        if (
            len(self.queue_stages) >= self.batch_stages
            or len(self.queue_pairs) >= self.batch_sets
            or self.queue_pair_count >= self.batch_pairs
        ):
            self._flush()

    def finish(self):
        """Make and emit what waits in the queue, then forget the stages."""
        if self.queue_pairs or self.queue_stages:
            self._flush()
        self.block_memo.clear()

    def _flush(self):
        """Make the queued stages' rows, record them, and emit the queued pairs."""
        raise NotImplementedError

    def _sinks_over(self, jk: int) -> int:
        """:meth:`dp.stage_geometry.StageGeometry.sinks_outside` of J = ideals[jk],
        remembered per J."""
        got = self.sinks_over.get(jk)
        if got is None:
            got = self.sinks_over[jk] = self.geo.sinks_outside(self.ideals[jk])
        return got

    def _take_batch(self):
        """Take the queued stages and make their states (a subclass's ``self.states``,
        with ``make(stages, sinks)``), give them stage ids from ``n_recorded`` on and room
        in the per-stage arrays; (stages, their state ids, the first stage id)."""
        stages, self.queue_stages = self.queue_stages, []
        sinks, self.queue_sinks = self.queue_sinks, []
        ids = np.array(self.states.make(stages, sinks), dtype=np.int64)
        q0 = self.n_recorded
        self._grow_stage_arrays(q0 + len(stages))
        self.n_recorded += len(stages)
        return stages, ids, q0

    def _grow_stage_arrays(self, n: int):
        """Room for n stage ids in the per-stage arrays (doubling: a copy per doubling, not
        per flush); a new stage has no rows (first row -1, counts 0) until recorded."""
        if n <= len(self.stage_nonempty):
            return
        cap = max(n, 2 * len(self.stage_nonempty), 1024)

        def grown(a, fill):
            b = np.full((cap, *a.shape[1:]), fill, dtype=a.dtype)
            b[: len(a)] = a
            return b

        self.stage_nonempty = grown(self.stage_nonempty, False)
        for t in self.t_values:
            self.stage_first[t] = grown(self.stage_first[t], -1)
            self.stage_cum[t] = grown(self.stage_cum[t], 0)

    def _record_rows(self, t: int, sid, cum, first):
        """Record the rows of stage(s) ``sid`` under t: the running count of the rows by d
        (over ``self.ds[t]``, from 0) and the index of the first row."""
        self.stage_cum[t][sid] = cum
        self.stage_first[t][sid] = first

    def _emit_pairs(self):
        """The groups of the queued pairs (I, J), all at once: per pair and t, the rows of
        its stage whose t d lies in the pair's device range (all rows without an upper
        bound), in the order of the pairs and then of t."""
        pairs, self.queue_pairs = self.queue_pairs, []
        self.queue_pair_count = 0
        if not pairs:
            return
        cnt_per = np.array([len(p[1]) for p in pairs], dtype=np.int64)
        K = np.repeat(np.array([p[0] for p in pairs], dtype=np.int64), cnt_per)
        JK = np.concatenate([p[1] for p in pairs]).astype(np.int64, copy=False)
        SID = np.fromiter(
            itertools.chain.from_iterable(p[2] for p in pairs), dtype=np.int64, count=len(JK)
        )
        self.pairs += int(self.stage_nonempty[SID].sum())
        if self.has_ub:
            # dev_lo, dev_hi are listed by position in js (increasing J); the pairs go by
            # decreasing J
            LO = np.concatenate([p[3][::-1] for p in pairs]).astype(float, copy=False)
            HI = np.concatenate([p[4][::-1] for p in pairs]).astype(np.int64, copy=False)
        n = len(SID)
        ar = np.arange(n)
        parts = []
        for ti, t in enumerate(self.t_values):
            f = self.stage_first[t][SID]
            cum = self.stage_cum[t][SID]
            tds = t * self.ds[t]
            if not self.has_ub:
                lo = np.zeros(n, dtype=np.int64)
                hi = cum[:, -1].astype(np.int64)
            else:
                lo = cum[ar, np.searchsorted(tds, LO, side="left")].astype(np.int64)
                hi = cum[ar, np.searchsorted(tds, HI, side="right")].astype(np.int64)
            ok = (f >= 0) & (hi > lo)
            idx = np.nonzero(ok)[0]
            parts.append((idx, np.full(len(idx), ti), f[idx] + lo[idx], hi[idx] - lo[idx]))
        p_idx = np.concatenate([x[0] for x in parts])
        t_idx = np.concatenate([x[1] for x in parts])
        rows = np.concatenate([x[2] for x in parts])
        cnts = np.concatenate([x[3] for x in parts])
        order = np.lexsort((t_idx, p_idx))
        p_idx = p_idx[order]
        self.tables.add_runs(K[p_idx], JK[p_idx], rows[order], cnts[order])
