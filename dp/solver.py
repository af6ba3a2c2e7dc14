"""The Piper DP (cost model sec. 4), exact or with Piper's greedy option choice (sec. 5).

Problem: split the layer graph into pipeline stages C_1, ..., C_m (each a difference of two
nested successor-closed sets), give each stage degrees (t, d) and each node an option,
minimizing the largest stage TPS subject to sum d <= N, sum t d <= K and memory
sum (a y + b) <= M per stage, y = ceil(s / d), s the suffix sum of d.

How it is solved here (a parametric form of Piper's DP):

1. Stage tables (:class:`_Builder`). For every successor-closed I, a walk over its
   successor-closed subsets J grows the stage C = I \\ J one node at a time, carrying the
   stage's cut-edge bytes E and weights W (option-independent on the profiles) and the
   Pareto frontier of its option choices (sums of p, a, b; :mod:`dp.knapsack`). For every
   t and d the stage's least cost is a step function of y with few corners (exact mode;
   greedy mode: Piper's rule for each y). No stage is re-summed from scratch.
2. Decision for a threshold T (:class:`_Search`, a min-devices table):

       f[I][s] = min over J < I, t, d <= s with cost(I \\ J, t, d, ceil(s / d)) <= T
                 of f[J][s - d] + t d,        f[{}][s] = 0,

   feasible when min over s of f[all][s] <= K, s <= min(N, K). Tables: sets x (S + 1)
   integers, no K x S table per set. All stages of one (I, d) are relaxed in one numpy
   step; a t that needs more devices for no wider range of s is dropped.
3. Search (:func:`_search_T`). The optimum is one of the finitely many stage costs.
   Probes aim where the fewest devices D(T) would meet K (D ~ 1/T), fall back to
   bisection, and every feasible probe lowers the bracket to its plan's own bottleneck:
   about 10 decisions instead of 20. The plan is read from back-pointers and passes the
   independent evaluator.
4. Pruning for graphs with many sets: the same DP on the suffixes of one topological
   order gives a plan of value ub; then a stage between a front part and a back part is
   kept only if the three parts' device lower bounds (work / ub, least memory / M) fit in
   K. Exact: every plan of value <= ub survives.

This is Piper's dp[I][k][s] (least max-TPS on at most k devices) turned inside out: for
a fixed T the devices become the value, so the table shrinks from K x S to S per set.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from dp.ideals import DEFAULT_MAX_IDEALS, enumerate_ideals
from dp.knapsack import (
    _pareto_mask,
    exact_options,
    greedy_choice_over_y,
    greedy_choice_rows,
    greedy_options,
    pareto_frontier,
    stage_items,
    stage_tps,
    y_capacity,
)
from piper_ilp.cost import MEMORY_RTOL, stage_cost
from piper_ilp.errors import InputError, InternalError
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["solve_dp", "DEFAULT_MAX_IDEALS"]

_INF = np.int64(1) << 50

#: Up to this many columns (S + 1) the decision relaxes all stages of one set at once.
SMALL_S = 96


class _Tables:
    """Stage tables in flat arrays.

    A *group* is one candidate stage (I, J, t, d); its *points* are the corners of its step
    function y -> least cost: point j costs ``cost`` and serves y in [``ylo``, ``yhi``].
    In a monotone group the points are sorted by cost and ``yhi`` rises, so for a
    threshold T the usable y are 1..yhi of the last point with cost <= T. Greedy mode may
    give non-monotone groups; their points are read as separate y ranges.
    """

    def __init__(self):
        self.blocks: list = []  # (k, jk, t, ds, cost2d, ylo2d, yhi2d, monotone)

    def emit(self, k, jk, t, ds, cost2d, ylo2d, yhi2d, monotone=True):
        if cost2d.shape[1]:
            self.blocks.append((k, jk, t, ds, cost2d, ylo2d, yhi2d, monotone))

    def finalize(self):
        bl = self.blocks
        rows = [b[3] for b in bl]
        nrow = np.array([len(r) for r in rows], dtype=np.int64)
        npt = np.array([b[4].shape[1] for b in bl], dtype=np.int64)
        self.g_I = np.repeat(np.array([b[0] for b in bl], dtype=np.int64), nrow)
        self.g_J = np.repeat(np.array([b[1] for b in bl], dtype=np.int64), nrow)
        g_t = np.repeat(np.array([b[2] for b in bl], dtype=np.int64), nrow)
        self.g_d = np.concatenate(rows).astype(np.int64) if bl else np.empty(0, dtype=np.int64)
        self.g_dev = g_t * self.g_d
        self.g_n = np.repeat(npt, nrow)
        self.g_mono = np.repeat(np.array([b[7] for b in bl], dtype=bool), nrow)
        self.cost = np.concatenate([b[4].ravel() for b in bl]) if bl else np.empty(0)
        self.ylo = np.concatenate([b[5].ravel() for b in bl]).astype(np.int64) if bl else np.empty(0, dtype=np.int64)
        self.yhi = np.concatenate([b[6].ravel() for b in bl]).astype(np.int64) if bl else np.empty(0, dtype=np.int64)
        self.g_start = np.zeros(len(self.g_n), dtype=np.int64)
        if len(self.g_n):
            self.g_start[1:] = np.cumsum(self.g_n)[:-1]
        # groups must be processed by increasing I (J is always smaller than I), and each
        # group's points must stay contiguous and in group order (np.add.reduceat)
        order = np.argsort(self.g_I, kind="stable")
        if np.any(order != np.arange(len(order))):
            for name in ("g_I", "g_J", "g_d", "g_dev", "g_n", "g_mono", "g_start"):
                setattr(self, name, getattr(self, name)[order])
            new_start = np.zeros(len(self.g_n), dtype=np.int64)
            new_start[1:] = np.cumsum(self.g_n)[:-1]
            pos = np.repeat(self.g_start - new_start, self.g_n) + np.arange(int(self.g_n.sum()))
            self.cost, self.ylo, self.yhi = self.cost[pos], self.ylo[pos], self.yhi[pos]
            self.g_start = new_start
        self.blocks = []


class _Builder:
    """Builds the stage tables: for every I, a breadth-first walk over its subsets J that
    are successor-closed, growing the stage C = I \\ J one node at a time."""

    def __init__(
        self, inst: Instance, ideals: list[int], d_values: list[int], S: int, greedy: bool, ub: float | None = None
    ):
        self.inst = inst
        self.ub = ub
        self.ideals = ideals
        self.index = {I: k for k, I in enumerate(ideals)}
        self.S = S
        self.greedy = greedy
        self.N, self.B, self.M, self.K = inst.N, inst.B, inst.M, inst.K
        self.Mtol = self.M * (1.0 + MEMORY_RTOL)
        ids = inst.node_ids
        self.ids = ids
        self.pos = {v: i for i, v in enumerate(ids)}
        n = len(ids)
        self.pred_mask = [0] * n
        self.succ_mask = [0] * n
        self.preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for e in inst.edges:
            u, v = self.pos[e.src], self.pos[e.dst]
            self.pred_mask[v] |= 1 << u
            self.succ_mask[u] |= 1 << v
            self.preds[v].append((u, e.c))
            self.succs[u].append((v, e.c))
        self.t_values = inst.t_values
        self.ds = {t: np.array([d for d in d_values if t * d <= self.K and d <= S], dtype=np.int64) for t in self.t_values}
        self.cap = {t: -(-S // self.ds[t]) for t in self.t_values}
        # per (node, t): options as arrays; "plain" = options differ only in p, a, b
        self.opt_pab: dict[tuple[int, int], np.ndarray] = {}
        self.g_class: dict[tuple[int, int], int] = {}
        self.g_class_id: dict[tuple, int] = {}
        self.g_rows: dict[int, dict[int, tuple]] = {}
        self.g_runs: dict[tuple, tuple] = {}
        self.g_pending: list = []
        self.plain: dict[tuple[int, int], bool] = {}
        self.m1min: dict[tuple[int, int], float] = {}
        for i, nd in enumerate(inst.nodes):
            for t, opts in nd.options.items():
                o0 = opts[0]
                self.plain[(i, t)] = all(
                    o.w == o0.w and dict(o.sfw) == dict(o0.sfw) and dict(o.sbw) == dict(o0.sbw) for o in opts
                )
                rows = np.array([(o.p, o.a, o.b, o.a + o.b, S * o.a + o.b) for o in opts], dtype=float)
                # options dominated in (p, memory at y = 1, memory at y = S) never help
                self.opt_pab[(i, t)] = rows[_pareto_mask(rows[:, (0, 3, 4)])] if len(rows) > 1 else rows
                self.m1min[(i, t)] = min(o.a + o.b for o in opts)
                # for Piper's rule on plain nodes: F = first option with least p, O = the other
                if len(opts) <= 2:
                    f = min(range(len(opts)), key=lambda l: (opts[l].p, l))
                    o = (1 - f) if len(opts) == 2 else f
                    row = (opts[f].p, opts[o].p - opts[f].p, opts[f].a, opts[f].b, opts[o].a, opts[o].b)
                    self.g_class[(i, t)] = self.g_class_id.setdefault(row, len(self.g_class_id))
                    self.g_rows.setdefault(t, {})[i] = row
        self.g_array = {
            t: np.array([rows.get(i, (np.nan,) * 6) for i in range(n)], dtype=float) for t, rows in self.g_rows.items()
        }
        self.tables = _Tables()
        self.item_id: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.node_item: dict[tuple, int] = {}
        self.greedy_cache: dict[tuple, list] = {}
        self.minimal_cache: dict[int, list[int]] = {}
        self.pairs = 0
        # work_v = least device-seconds per sample of node v (min over t, options of t p):
        # a stage C needs t d >= work(C) / T devices to cost <= T
        self.work_node = [min((t * o.p for t, opts in nd.options.items() for o in opts), default=0.0) for nd in inst.nodes]
        self.work_total = sum(self.work_node)
        # least memory of node v (min over t, options of a + b; every stage has y >= 1): a
        # part X needs at least sum / M stages, each on a device of its own
        self.mem_node = [min((o.a + o.b for opts in nd.options.values() for o in opts), default=0.0) for nd in inst.nodes]
        self.mem_total = sum(self.mem_node)
        # work and least memory of every set of the family (and of its complement)
        member = _membership(ideals, n)
        self.work_of = member @ np.array(self.work_node, dtype=float) if n else np.zeros(len(ideals))
        self.mem_of = member @ np.array(self.mem_node, dtype=float) if n else np.zeros(len(ideals))
        self.all_mask = (1 << n) - 1

    # ---- the walk ----------------------------------------------------------------------
    def _minimal(self, J: int) -> list[int]:
        """Nodes of J with no predecessor in J (removing one leaves J successor-closed)."""
        got = self.minimal_cache.get(J)
        if got is None:
            got = [v for v in _bits(J) if not self.pred_mask[v] & J]
            self.minimal_cache[J] = got
        return got

    def _lb(self, work: float, nonempty: bool, mem: float = 0.0) -> int:
        """Fewest devices a part with this work and least memory needs when every stage
        costs <= ub (0 for an empty part)."""
        if not nonempty:
            return 0
        return max(1, math.ceil(work / self.ub * (1.0 - 1e-9)), math.ceil(mem / self.Mtol * (1.0 - 1e-9)))

    def build(self, progress) -> _Tables:
        """For each I: a breadth-first walk over J, C = I \\ J growing by one node per step.

        With an upper bound ub on the optimum, a stage C between a front part (all \\ I)
        and a back part J is kept only when lb(C) + lb(front) + lb(J) <= K, lb(X) =
        max(1, ceil(work(X) / ub)) (0 for an empty part): each stage of a plan of value
        <= ub needs t d >= work / ub devices. lb(C) only grows as C grows, so the walk
        stops where lb(C) + lb(front) > K."""
        ideals = self.ideals
        zero = np.zeros((1, 5))
        ub = self.ub
        K = self.K
        for k in range(1, len(ideals)):
            progress(k)
            I = ideals[k]
            start = {t: (0.0, 0.0, True, zero, 0.0) for t in self.t_values}
            level = {I: start}
            work_c = {I: 0.0}
            if ub is not None:
                front = self.all_mask & ~I
                lbf = self._lb(self.work_total - self.work_of[k], front != 0, self.mem_total - self.mem_of[k])
                # the stages of I need at least ceil(work(I) / ub) devices in all
                if lbf + self._lb(self.work_of[k], True) > K:
                    continue
            while level:
                nxt: dict[int, dict] = {}
                nxt_work: dict[int, float] = {}
                for J, sts in level.items():
                    if not sts:
                        continue
                    for v in self._minimal(J):
                        Jn = J & ~(1 << v)
                        if Jn in nxt:
                            continue
                        if Jn not in self.index:
                            nxt[Jn] = {}
                            continue
                        wc = work_c[J] + self.work_node[v]
                        dev_hi = None
                        if ub is not None:
                            lbc = self._lb(wc, True)
                            if lbc + lbf > K:
                                nxt[Jn] = {}
                                continue
                            jx = self.index[Jn]
                            lbb = self._lb(self.work_of[jx], Jn != 0, self.mem_of[jx])
                            dev_hi = K - lbf - lbb
                        new = {}
                        for t, st in sts.items():
                            st2 = self._extend(I, Jn, st, v, t)
                            if st2 is not None:
                                new[t] = st2
                        nxt[Jn] = new
                        nxt_work[Jn] = wc
                        if new and (dev_hi is None or lbc <= dev_hi):
                            self.pairs += 1
                            self._emit_pair(k, I, Jn, new, None if ub is None else (wc / ub * (1.0 - 1e-9), dev_hi))
                level = nxt
                work_c = nxt_work
        if self.g_pending:
            self._flush_greedy()
        self.tables.finalize()
        return self.tables

    def _extend(self, I: int, Jn: int, st, v: int, t: int):
        """State of stage C + v (per t): (E, W, plain, frontier (P, A, Bm), m1min), or None
        when no option choice can fit (then no larger stage fits either)."""
        key = (v, t)
        if key not in self.plain:
            return None
        E, W, plain, fr, m1 = st
        m1 = m1 + self.m1min[key]
        if m1 > self.Mtol:
            return None
        plain = plain and self.plain[key]
        if plain:
            # cut-edge bytes (option-independent): edges from outside I into v become cut,
            # edges from C into v stop being cut, every edge out of v is cut (its head is in J)
            nd = self.inst.nodes[v].options[t][0]
            for u, c in self.preds[v]:
                if (I >> u) & 1:
                    ou = self.inst.nodes[u].options.get(t)
                    E -= 2.0 * (c + ou[0].sbw[self.ids[v]])
                else:
                    E += 2.0 * (c + nd.sfw[self.ids[u]])
            for x, c in self.succs[v]:
                E += 2.0 * (c + nd.sbw[self.ids[x]])
            W += nd.w
        if not self.greedy and plain:
            # frontier columns: P, A, Bm, m1 = sum (a + b), mS = sum (S a + b); memory at
            # y in [1, S] is between m1 and mS, so (P, m1, mS) decide dominance
            o = self.opt_pab[key]
            if len(o) == 1:
                # one useful option: the frontier only shifts (dominance is kept)
                new = fr + o[0]
            else:
                new = (fr[:, None, :] + o[None, :, :]).reshape(-1, 5)
            ok = new[:, 3] <= self.Mtol
            if not ok.all():
                new = new[ok]
            if not len(new):
                return None
            if len(new) > 1 and len(o) > 1:
                new = new[_pareto_mask(new[:, (0, 3, 4)])]
            fr = new
        else:
            fr = None
        return (E, W, plain, fr, m1)

    # ---- one candidate stage -------------------------------------------------------------
    def _emit_pair(self, k: int, I: int, J: int, states: dict, devices: tuple | None = None):
        """Tables of stage C = I \\ J for each t (and each d with t d in ``devices`` =
        (least, most), when given)."""
        jk = self.index[J]
        C = I & ~J
        for t, (E, W, plain, fr, _) in states.items():
            ds, caps = self.ds[t], self.cap[t]
            if devices is not None:
                keep = (t * ds >= devices[0]) & (t * ds <= devices[1])
                if not keep.all():
                    ds, caps = ds[keep], caps[keep]
            if not len(ds):
                continue
            if self.greedy and plain:
                self._emit_greedy_plain(k, jk, t, C, E, W, ds, caps)
            elif self.greedy:
                self._emit_greedy(k, jk, t, I, J, C, ds)
            elif plain:
                P, A, Bm = fr[:, 0], fr[:, 1], fr[:, 2]
                ycap = y_capacity(A, Bm, self.M, self.S)
                keep = _staircase(P, ycap)
                P, ycap = P[keep], ycap[keep]
                dcol = ds[:, None].astype(float)
                cost = stage_tps(E, W, P[None, :], dcol, self.N, self.B)
                yhi = np.minimum(ycap[None, :], caps[:, None])
                self.tables.emit(k, jk, t, ds, cost, np.ones_like(yhi), yhi)
            else:
                self._emit_generic_exact(k, jk, t, C, ds, caps)

    def _emit_generic_exact(self, k, jk, t, C, ds, caps):
        nodes = [self.ids[i] for i in _bits(C)]
        fr = pareto_frontier(stage_items(self.inst, nodes, t), self.M, y_range=(1, self.S))
        if not len(fr):
            return
        ycap = y_capacity(fr.A, fr.Bm, self.M, self.S)
        for d, cap in zip(ds.tolist(), caps.tolist()):
            cost = stage_tps(fr.E, fr.W, fr.P, d, self.N, self.B)
            yc = np.minimum(ycap, cap)
            keep = _staircase(cost, yc)
            cost, yc = cost[keep], yc[keep]
            self.tables.emit(k, jk, t, np.array([d]), cost[None, :], np.ones((1, len(yc)), dtype=np.int64), yc[None, :])

    # ---- greedy mode -----------------------------------------------------------------------
    def _item(self, i: int, t: int, cut_in: int, cut_out: int) -> int:
        key = (i, t, cut_in, cut_out)
        got = self.node_item.get(key)
        if got is not None:
            return got
        ids = self.ids
        row = []
        for o in self.inst.nodes[i].options[t]:
            e = 0.0
            for u, c in self.preds[i]:
                if (cut_in >> u) & 1:
                    e += 2.0 * (c + o.sfw[ids[u]])
            for x, c in self.succs[i]:
                if (cut_out >> x) & 1:
                    e += 2.0 * (c + o.sbw[ids[x]])
            row.append((o.p, e, o.w, o.a, o.b))
        item = (tuple(row), self.plain[(i, t)])
        iid = self.item_id.get(item)
        if iid is None:
            iid = len(self.items)
            self.item_id[item] = iid
            self.items.append(item)
        self.node_item[key] = iid
        return iid

    def _emit_greedy_plain(self, k, jk, t, C, E, W, ds, caps):
        """Piper's rule on a stage whose nodes' options differ only in p, a, b: the choice
        per y depends on the nodes' own numbers (in input order) only, so it is computed once
        per such sequence (in batches, see :meth:`_flush_greedy`); E and W come from the walk."""
        nodes = list(_bits(C))
        key = (t, tuple(self.g_class[(i, t)] for i in nodes))
        self.g_pending.append((k, jk, t, E, W, ds, caps, key, nodes))
        if len(self.g_pending) >= 4096:
            self._flush_greedy()

    def _flush_greedy(self):
        """Compute the runs of every queued stage whose node sequence is new, many stages
        per numpy call (rows padded with zero-memory columns), then emit them all."""
        pending, self.g_pending = self.g_pending, []
        todo: dict[tuple, list[int]] = {}
        for k, jk, t, E, W, ds, caps, key, nodes in pending:
            if key not in self.g_runs and key not in todo:
                todo[key] = nodes
        by_t: dict[int, list] = {}
        for key, nodes in todo.items():
            by_t.setdefault(key[0], []).append((key, nodes))
        for t, items in by_t.items():
            ymax = int(self.cap[t].max())
            items.sort(key=lambda kv: len(kv[1]))
            step = max(1, 200_000 // (ymax * max(1, len(items[-1][1]))))
            for c0 in range(0, len(items), step):
                chunk = items[c0 : c0 + step]
                for key, runs in zip((kv[0] for kv in chunk), self._greedy_plain_batch(t, [kv[1] for kv in chunk], ymax)):
                    self.g_runs[key] = runs
        for k, jk, t, E, W, ds, caps, key, nodes in pending:
            lo, hi, P, mono = self.g_runs[key]
            if not len(P):
                continue
            dcol = ds[:, None].astype(float)
            cost = stage_tps(E, W, P[None, :], dcol, self.N, self.B)
            yhi = np.minimum(hi[None, :], caps[:, None])
            self.tables.emit(k, jk, t, ds, cost, np.broadcast_to(lo, yhi.shape), yhi, mono)

    def _greedy_plain_batch(self, t: int, stages: list[list[int]], ymax: int) -> list:
        """Runs (y_lo, y_hi, P, monotone) by Piper's rule for y = 1..ymax of each stage
        (node positions in input order); rows per node (p_F, p_O - p_F, a_F, b_F, a_O, b_O)."""
        B = len(stages)
        width = max(len(st) for st in stages)
        rows = np.zeros((B, width, 6))
        for b, st in enumerate(stages):
            rows[b, : len(st)] = self.g_array[t][st]
        y = np.arange(1, ymax + 1, dtype=float)[None, :, None]
        mF = rows[:, None, :, 2] * y + rows[:, None, :, 3]  # B x Y x width
        mO = rows[:, None, :, 4] * y + rows[:, None, :, 5]
        dc = np.broadcast_to(rows[:, None, :, 1], mF.shape)
        sw, feas = greedy_choice_rows(
            dc.reshape(-1, width), mF.reshape(-1, width), mO.reshape(-1, width), self.M
        )
        sw = sw.reshape(B, ymax, width)
        feas = feas.reshape(B, ymax)
        pF_sum = rows[:, :, 0].sum(axis=1)
        out = []
        for b in range(B):
            nfeas = int(np.argmin(feas[b])) if not feas[b].all() else ymax
            if nfeas == 0:
                out.append((np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0), True))
                continue
            swb = sw[b, :nfeas]
            change = np.ones(nfeas, dtype=bool)
            change[1:] = np.any(swb[1:] != swb[:-1], axis=1)
            starts = np.nonzero(change)[0]
            ends = np.append(starts[1:], nfeas)
            P = pF_sum[b] + swb[starts].astype(float) @ rows[b, :, 1]
            out.append((starts + 1, ends, P, bool(np.all(np.diff(P) >= 0))))
        return out

    def _emit_greedy(self, k, jk, t, I, J, C, allowed):
        ids = tuple(self._item(i, t, self.pred_mask[i] & ~I, self.succ_mask[i] & J) for i in _bits(C))
        key = (t, ids)
        got = self.greedy_cache.get(key)
        if got is None:
            got = self._greedy_profiles(ids, t)
            self.greedy_cache[key] = got
        full = len(allowed) == len(self.ds[t])
        for ds, cost, ylo, yhi, mono in got:
            if not full:
                keep = np.isin(ds, allowed)
                if not keep.any():
                    continue
                ds, cost, ylo, yhi = ds[keep], cost[keep], ylo[keep], yhi[keep]
            self.tables.emit(k, jk, t, ds, cost, ylo, yhi, mono)

    def _greedy_profiles(self, item_ids: tuple, t: int):
        rows = [self.items[k][0] for k in item_ids]
        plain = all(self.items[k][1] for k in item_ids)
        ds, caps = self.ds[t], self.cap[t]
        out = []
        if plain:
            # F and the order of the ratios do not depend on d: one pass over y = 1..S
            runs = self._greedy_runs(rows, 1, int(caps.max()))
            if runs:
                lo, hi, P, E, W = (np.array(c) for c in zip(*runs))
                dcol = ds[:, None].astype(float)
                cost = stage_tps(E[None, :], W[None, :], P[None, :], dcol, self.N, self.B)
                mono = bool(np.all(np.diff(P) >= 0))
                yhi = np.minimum(hi[None, :], caps[:, None])
                out.append((ds, cost, np.broadcast_to(lo, yhi.shape), yhi, mono))
        else:
            for d, cap in zip(ds.tolist(), caps.tolist()):
                runs = self._greedy_runs(rows, d, cap)
                if runs:
                    lo, hi, P, E, W = (np.array(c) for c in zip(*runs))
                    cost = stage_tps(E, W, P, d, self.N, self.B)
                    mono = bool(np.all(np.diff(cost) >= 0))
                    out.append((np.array([d]), cost[None, :], lo[None, :], hi[None, :], mono))
        return out

    def _greedy_runs(self, rows, d: int, ymax: int):
        """Piper's rule for y = 1..ymax on one stage: runs (y_lo, y_hi, P, E, W) of equal
        choice, up to the first y where no choice fits."""
        n = len(rows)
        N, B = self.N, self.B
        c = [[stage_tps(e, w, p, d, N, B) for (p, e, w, a, b) in row] for row in rows]
        F = [min(range(len(ci)), key=lambda l, ci=ci: (ci[l], l)) for ci in c]
        O = [(1 - F[i]) if len(rows[i]) == 2 else F[i] for i in range(n)]
        y = np.arange(1, ymax + 1, dtype=float)[:, None]
        aF = np.array([rows[i][F[i]][3] for i in range(n)])
        bF = np.array([rows[i][F[i]][4] for i in range(n)])
        aO = np.array([rows[i][O[i]][3] for i in range(n)])
        bO = np.array([rows[i][O[i]][4] for i in range(n)])
        mF = aF[None, :] * y + bF[None, :]
        mO = aO[None, :] * y + bO[None, :]
        dc = np.array([c[i][O[i]] - c[i][F[i]] for i in range(n)])
        sw, feas = greedy_choice_over_y(dc, mF, mO, self.M)
        nfeas = int(np.argmin(feas)) if not feas.all() else ymax
        if nfeas == 0:
            return []
        sw = sw[:nfeas]
        change = np.ones(nfeas, dtype=bool)
        change[1:] = np.any(sw[1:] != sw[:-1], axis=1)
        starts = np.nonzero(change)[0]
        ends = np.append(starts[1:], nfeas)
        out = []
        for s0, s1 in zip(starts.tolist(), ends.tolist()):
            mask = sw[s0]
            chosen = [rows[i][O[i] if mask[i] else F[i]] for i in range(n)]
            out.append((s0 + 1, s1, sum(o[0] for o in chosen), sum(o[1] for o in chosen), sum(o[2] for o in chosen)))
        return out


def _staircase(key: np.ndarray, ycap: np.ndarray) -> np.ndarray:
    """Indices, by increasing ``key`` (ties: larger capacity first), of the points whose y
    capacity rises above every earlier point's and is >= 1: the step function
    y -> least key among the points that hold y microbatches."""
    order = np.lexsort((-ycap, key))
    yc = ycap[order]
    best = np.maximum.accumulate(yc)
    rise = np.ones(len(yc), dtype=bool)
    rise[1:] = yc[1:] > best[:-1]
    rise &= yc >= 1
    return order[rise]


def _membership(masks: list[int], n: int) -> np.ndarray:
    """0/1 matrix (len(masks) x n): bit i of each mask."""
    words = (n + 63) // 64
    out = np.zeros((len(masks), words * 64), dtype=np.uint8)
    for w in range(words):
        col = np.array([(m >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for m in masks], dtype=np.uint64)
        bits = np.unpackbits(col.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        out[:, 64 * w : 64 * w + 64] = bits
    return out[:, :n].astype(float)


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class _Search:
    """The min-devices decision for a threshold T, and the search over T."""

    def __init__(self, tb: _Tables, n_ideals: int, S: int, K: int, work_of=None, work_total: float = 0.0):
        self.S, self.K, self.nI = S, K, n_ideals
        self.tb = tb
        # per group: the work of the part in front of the stage (all \\ I) and behind it (J)
        if work_of is not None and len(tb.g_I):
            self.g_wf = np.maximum(work_total - work_of[tb.g_I], 0.0)
            self.g_wb = work_of[tb.g_J]
            self.g_front = tb.g_I != n_ideals - 1
            self.g_back = tb.g_J != 0
        else:
            self.g_wf = None
        n = len(tb.g_I)
        # blocks of groups with the same (I, d), in increasing I: relaxed together
        self.by_Id = np.lexsort((tb.g_J, tb.g_d, tb.g_I))
        key_I, key_d = tb.g_I[self.by_Id], tb.g_d[self.by_Id]
        cut = np.ones(n, dtype=bool)
        if n:
            cut[1:] = (key_I[1:] != key_I[:-1]) | (key_d[1:] != key_d[:-1])
        self.block_start = np.append(np.nonzero(cut)[0], n)
        # groups are stored by increasing I (see _Tables.finalize): each I's range
        self.set_bounds = np.searchsorted(tb.g_I, np.arange(n_ideals + 1))
        # for the t-dominance test: groups of the same (I, J, d) ordered by t
        self.by_IJd = np.lexsort((tb.g_dev, tb.g_d, tb.g_J, tb.g_I))
        gI, gJ, gd = tb.g_I[self.by_IJd], tb.g_J[self.by_IJd], tb.g_d[self.by_IJd]
        self.same_prev = []
        for k in (1, 2, 3):
            same = np.zeros(n, dtype=bool)
            if n > k:
                same[k:] = (gI[k:] == gI[:-k]) & (gJ[k:] == gJ[:-k]) & (gd[k:] == gd[:-k])
            self.same_prev.append((k, same))

    def candidates(self) -> np.ndarray:
        c = np.unique(self.tb.cost)
        return c[np.isfinite(c)]

    def _usable(self, T: float):
        """Per group: the largest usable s (0 = unusable) for threshold T, after dropping
        groups that another t of the same (I, J, d) covers with fewer devices."""
        tb, S = self.tb, self.S
        ok = (tb.cost <= T).astype(np.int64)
        cnt = np.add.reduceat(ok, tb.g_start)
        last = tb.g_start + np.maximum(cnt, 1) - 1
        ymax = np.where(cnt > 0, tb.yhi[last], 0)
        hi = np.minimum(S, tb.g_d * ymax)
        hi = np.where((cnt > 0) & (hi >= tb.g_d), hi, 0)
        mono = tb.g_mono
        # a group with more devices and no larger range than a smaller-t group is useless
        h = hi[self.by_IJd]
        m = mono[self.by_IJd]
        dominated = np.zeros(len(h), dtype=bool)
        for k, same in self.same_prev:
            prev_h = np.zeros(len(h), dtype=np.int64)
            prev_h[k:] = h[:-k]
            prev_m = np.zeros(len(h), dtype=bool)
            prev_m[k:] = m[:-k]
            dominated |= same & prev_m & m & (prev_h >= h)
        drop = np.zeros(len(h), dtype=bool)
        drop[self.by_IJd] = dominated
        if self.g_wf is not None and 0 < T < math.inf:
            # a plan with every stage <= T needs >= work / T devices in front of the stage
            # and behind it (at least one each when not empty)
            lbf = np.where(self.g_front, np.maximum(1, np.ceil(self.g_wf / T * (1 - 1e-9))), 0)
            lbb = np.where(self.g_back, np.maximum(1, np.ceil(self.g_wb / T * (1 - 1e-9))), 0)
            drop |= lbf + tb.g_dev + lbb > self.K
        hi = np.where(drop, 0, hi)
        return hi

    def decide(self, T: float, want_plan: bool = False):
        """f[I][s] = fewest devices of a plan for I with suffix bound s and every stage
        <= T (and back-pointers to the groups used).

        The candidate stages of one I with the same d are relaxed together: rows
        f[J][0 : width] + t d (one per usable group, cut at the group's largest usable s)
        and their column minimum, written to f[I][d : d + width]."""
        tb, S = self.tb, self.S
        f = np.full((self.nI, S + 1), _INF, dtype=np.int64)
        f[0, :] = 0
        bp = np.full((self.nI, S + 1), -1, dtype=np.int64) if want_plan else None
        if not len(tb.g_I):
            return f, bp
        hi = self._usable(T)
        use = (hi > 0) & tb.g_mono
        if S + 1 <= SMALL_S:
            self._decide_by_set(f, bp, hi, use, T)
            return f, bp
        odd = np.nonzero((hi > 0) & ~tb.g_mono)[0]
        odd = odd[np.argsort(tb.g_I[odd], kind="stable")]
        odd_pos = 0
        order = self.by_Id
        use_o = use[order]
        bs = self.block_start
        # blocks with at least one usable group
        nz = np.add.reduceat(use_o.astype(np.int64), bs[:-1]) if len(bs) > 1 else np.zeros(0, dtype=np.int64)
        cur_I = 0
        for bk in np.nonzero(nz)[0].tolist():
            a, b = bs[bk], bs[bk + 1]
            g = order[a:b][use_o[a:b]]
            I = int(tb.g_I[g[0]])
            if I != cur_I:
                while odd_pos < len(odd) and tb.g_I[odd[odd_pos]] < I:
                    self._relax_runs(f, bp, int(odd[odd_pos]), T)
                    odd_pos += 1
                cur_I = I
            d = int(tb.g_d[g[0]])
            gh = hi[g]
            width = int(gh.max()) - d + 1
            rows = f[tb.g_J[g], :width] + tb.g_dev[g][:, None]
            if (gh != gh[0]).any():
                rows[np.arange(width)[None, :] > (gh - d)[:, None]] = _INF
            dst = f[I, d : d + width]
            if want_plan:
                arg = rows.argmin(axis=0)
                best = rows[arg, np.arange(width)]
                better = best < dst
                dst[better] = best[better]
                bp[I, d : d + width][better] = g[arg[better]]
            else:
                np.minimum(dst, rows.min(axis=0), out=dst)
        while odd_pos < len(odd):
            self._relax_runs(f, bp, int(odd[odd_pos]), T)
            odd_pos += 1
        return f, bp

    def _decide_by_set(self, f, bp, hi, use, T):
        """decide() for a small S: all usable groups of one I in one matrix (rows:
        groups, columns: s), read from f by a 2D gather."""
        tb, S = self.tb, self.S
        s_row = np.arange(S + 1)
        bounds = self.set_bounds
        odd = np.nonzero((hi > 0) & ~tb.g_mono)[0]
        odd_pos = 0
        for I in range(1, self.nI):
            a, b = bounds[I], bounds[I + 1]
            g = a + np.nonzero(use[a:b])[0]
            if len(g):
                col = s_row[None, :] - tb.g_d[g][:, None]
                vals = f[tb.g_J[g][:, None], np.maximum(col, 0)] + tb.g_dev[g][:, None]
                vals[(col < 0) | (s_row[None, :] > hi[g][:, None])] = _INF
                if bp is not None:
                    arg = vals.argmin(axis=0)
                    best = vals[arg, s_row]
                    better = best < f[I]
                    f[I, better] = best[better]
                    bp[I, better] = g[arg[better]]
                else:
                    np.minimum(f[I], vals.min(axis=0), out=f[I])
            while odd_pos < len(odd) and odd[odd_pos] < b:
                self._relax_runs(f, bp, int(odd[odd_pos]), T)
                odd_pos += 1

    def _relax_runs(self, f, bp, g, T):
        tb, S = self.tb, self.S
        d, I, J, dev = int(tb.g_d[g]), int(tb.g_I[g]), int(tb.g_J[g]), int(tb.g_dev[g])
        a = int(tb.g_start[g])
        b = a + int(tb.g_n[g])
        for c, lo, hi in zip(tb.cost[a:b], tb.ylo[a:b], tb.yhi[a:b]):
            if not c <= T:
                continue
            lo, hi = max(d, (int(lo) - 1) * d + 1), min(S, int(hi) * d)
            if hi < lo:
                continue
            src = f[J, lo - d : hi + 1 - d] + dev
            dst = f[I, lo : hi + 1]
            better = src < dst
            if better.any():
                dst[better] = src[better]
                if bp is not None:
                    bp[I, lo : hi + 1][better] = g

    def plan_start(self, f) -> int:
        """The suffix bound s at which the plan is read: fewest devices, then smallest s."""
        row = f[-1]
        return int(np.argmin(row))

    def stage_cost_at(self, g: int, y: int) -> float:
        """The cost group g's table gives for y microbatches in flight."""
        tb = self.tb
        a = int(tb.g_start[g])
        b = a + int(tb.g_n[g])
        if tb.g_mono[g]:
            k = a + int(np.searchsorted(tb.yhi[a:b], y))
            return float(tb.cost[k])
        for k in range(a, b):
            if tb.ylo[k] <= y <= tb.yhi[k]:
                return float(tb.cost[k])
        raise InternalError(f"dp: group {g} has no entry for y = {y}")

    def bottleneck_index(self, f, bp, cands) -> int:
        """Index in ``cands`` of the largest stage cost of the plan held in (f, bp)."""
        tb = self.tb
        s = self.plan_start(f)
        Ik, worst = self.nI - 1, -math.inf
        while Ik != 0:
            g = int(bp[Ik, s])
            d = int(tb.g_d[g])
            worst = max(worst, self.stage_cost_at(g, -(-s // d)))
            Ik, s = int(tb.g_J[g]), s - d
        return int(np.searchsorted(cands, worst))

    def least_devices(self) -> int:
        """Fewest devices of any plan that fits in memory (no bound on T)."""
        f, _ = self.decide(math.inf)
        return int(f[-1].min())


def solve_dp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    knapsack: str = "exact",
    max_ideals: int = DEFAULT_MAX_IDEALS,
    progress: bool = False,
) -> Solution:
    """Optimal pipeline plan by Piper's DP over successor-closed sets (cost model sec. 4).

    Parameters
    ----------
    instance : Instance
        The profiled graph with K, M, B, N.
    restrictions : Restrictions
        Ablations and caps (max_d, max_t, excluded option ids).
    knapsack : {"exact", "greedy"}
        How each stage's options are chosen: ``"exact"`` solves the knapsack exactly (the
        DP is then exact: status OPTIMAL); ``"greedy"`` follows Piper's rule (sec. 5) to
        reproduce the original planner's numbers (status FEASIBLE: it proves nothing).
    max_ideals : int
        Refuse graphs with more successor-closed sets than this.
    progress : bool
        Show a progress bar on stderr when it is a terminal.

    Returns
    -------
    Solution
        method ``"dp"`` or ``"dp-greedy"``; ``objective`` is the DP's value (the largest
        stage TPS), ``tps`` the evaluator's value for the plan. ``info`` holds the counts
        (ideals, stage candidates, profiles, search steps). When no plan fits, status
        INFEASIBLE with ``message`` naming the bound that is tight.

    Raises
    ------
    SizeLimitError
        More than ``max_ideals`` successor-closed sets.
    InputError
        Unknown ``knapsack``; greedy mode with more than two options for some (node, t).
    InternalError
        The plan failed the evaluator's check (a bug).

    References
    ----------
    Tarnawski, Narayanan, Phanishayee. Piper: Multidimensional Planner for DNN
    Parallelization. NeurIPS 2021, sec. 4 (the DP) and sec. 5 (option choice).
    """
    t0 = time.perf_counter()
    if knapsack not in ("exact", "greedy"):
        raise InputError(f"knapsack must be 'exact' or 'greedy', got {knapsack!r}")
    greedy = knapsack == "greedy"
    method = "dp-greedy" if greedy else "dp"
    inst = restrictions.apply(instance)
    if greedy:
        for nd in inst.nodes:
            for t, opts in nd.options.items():
                if len(opts) > 2:
                    raise InputError(
                        f"{instance.source}: --knapsack greedy follows Piper's rule, defined for at most two "
                        f"options per (node, t); node {nd.id} has {len(opts)} options for t = {t} "
                        f"(use --knapsack exact, or --exclude-option)"
                    )
    K, N = instance.K, instance.N
    S = min(N, K)
    d_values = [d for d in restrictions.d_values(instance) if d <= S]
    info: dict = {"knapsack": knapsack}

    def done(sol: Solution) -> Solution:
        sol.seconds = time.perf_counter() - t0
        sol.info = {**info, **sol.info}
        return checked_solution(instance, sol, restrictions=restrictions)

    bare = [nd.id for nd in inst.nodes if not nd.options]
    if bare:
        return done(
            Solution(
                method,
                Status.INFEASIBLE,
                message=f"node {bare[0]} has no option left after the restrictions {restrictions.to_dict()}",
            )
        )

    too_wide = [nd.id for nd in inst.nodes if min(nd.options) > K]
    if too_wide:
        v = too_wide[0]
        return done(
            Solution(
                method,
                Status.INFEASIBLE,
                message=f"K = {K} devices is too few: node {v} has options only for t >= {min(inst.node[v].options)}",
            )
        )

    ideals = enumerate_ideals(inst, max_ideals)
    info["ideals"] = len(ideals)

    bar = _Progress(progress)
    with bar:
        ub = None
        if len(ideals) > CHAIN_FIRST:
            # an upper bound from the same DP restricted to the suffixes of one topological
            # order (each is successor-closed): it lets the full DP skip every stage that
            # cannot be part of a plan at least as good (see _Builder)
            chain = _suffix_ideals(inst)
            cb = _Builder(inst, chain, d_values, S, greedy)
            ctb = cb.build(progress=bar.task("chain bound", len(chain)))
            got = _search_T(_Search(ctb, len(chain), S, K, cb.work_of, cb.work_total), K, bar, cb.work_total / K)
            if got is not None:
                ub = got[0]
                info["chain_bound"] = ub
        builder = _Builder(inst, ideals, d_values, S, greedy, ub=ub)
        tb = builder.build(progress=bar.task("stage tables", len(ideals)))
        search = _Search(tb, len(ideals), S, K, builder.work_of, builder.work_total)
        info["stage_pairs"] = builder.pairs
        info["stage_candidates"] = int(len(tb.g_I))
        got = _search_T(search, K, bar, builder.work_total / K)
        if got is None or got[0] > (ub if ub is not None else math.inf):
            if ub is not None:
                raise InternalError(f"{method}: the pruned DP lost the chain plan of value {ub!r}")
            least = search.least_devices()
            if least >= _INF:
                msg = (
                    f"no split into stages fits in memory M = {instance.M:.6g} bytes per device within "
                    f"sum of d <= min(N, K) = {S} and sum of t*d <= K = {K}, even with the least-memory options"
                )
            else:
                msg = f"K = {K} devices is too few: the plan with the fewest devices that fits in memory needs {least}"
            return done(Solution(method, Status.INFEASIBLE, message=msg, info={"search_steps": 1}))
        T, f, bp, steps, n_cands = got
        info["thresholds"] = n_cands
    info["search_steps"] = steps
    plan, stage_costs = _rebuild(instance, inst, ideals, search, f, bp, T, greedy)
    if max(stage_costs) > T * (1 + 1e-12) + 1e-300:
        raise InternalError(f"{method}: rebuilt plan has a stage of cost {max(stage_costs)!r} above the DP's value {T!r}")
    status = Status.FEASIBLE if greedy else Status.OPTIMAL
    return done(Solution(method, status, plan=plan, objective=T))


#: Above this many successor-closed sets, a chain-restricted DP first gives an upper bound
#: that prunes the full DP's stage candidates.
CHAIN_FIRST = 5000


def _suffix_ideals(inst: Instance) -> list[int]:
    """The suffixes of a topological order (input order breaking ties), as bitmasks by size."""
    import networkx as nx

    pos = {v: i for i, v in enumerate(inst.node_ids)}
    order = list(nx.lexicographical_topological_sort(inst.graph, key=pos.__getitem__))
    out, mask = [0], 0
    for v in reversed(order):
        mask |= 1 << pos[v]
        out.append(mask)
    return out


def _search_T(search: "_Search", K: int, bar, lower: float = 0.0) -> tuple | None:
    """The least threshold T at which a plan fits on K devices, with its tables (f, bp);
    None when no plan fits at all.

    Every candidate index <= lo fails (all below ``lower``, a proven lower bound on T,
    do); cands[hi] is the bottleneck of a plan in hand, and each feasible probe lowers it
    to its own plan's bottleneck. The next probe is, in order of preference:
    where the fewest devices D(T) would reach K if D were proportional to 1/T (when the
    last probe's D says something: D < K, or infeasible with a finite D); just below hi
    (after a plan using exactly K devices, once in a row); otherwise, or when the bracket
    did not halve over two probes, the middle candidate."""
    cands = search.candidates()
    f, bp = search.decide(math.inf, want_plan=True)
    least = int(f[-1].min())
    if least > K:
        return None
    hi = search.bottleneck_index(f, bp, cands)
    lo = min(int(np.searchsorted(cands, lower * (1.0 - 1e-9))) - 1, hi - 1)
    est: float | None = float(cands[hi]) * least / K
    below, last = False, ""
    widths: list[int] = []
    steps = 1
    tick = bar.task("search", max(1, int(math.ceil(math.log2(max(2, len(cands)))))))
    while hi - lo > 1:
        width = hi - lo
        stalled = len(widths) >= 2 and width > widths[-2] // 2
        kind = "mid"
        if est is not None and not stalled:
            idx = min(max(int(np.searchsorted(cands, est)), lo + 1), hi - 1)
            kind = "est"
        elif below and not stalled and last != "below":
            idx = hi - 1
            kind = "below"
        else:
            idx = (lo + hi) // 2
        last = kind
        widths.append(width)
        steps += 1
        tick(steps)
        T_probe = float(cands[idx])
        f2, bp2 = search.decide(T_probe, want_plan=True)
        D = int(f2[-1].min())
        if D <= K:
            f, bp = f2, bp2
            hi = search.bottleneck_index(f, bp, cands)
            if hi > idx:
                raise InternalError(f"dp: the plan found at threshold {T_probe!r} has a stage costing {float(cands[hi])!r}")
            est = float(cands[hi]) * D / K if D < K else None
            below = D == K
        else:
            lo = idx
            est = T_probe * D / K if D < _INF else None
            below = False
    return float(cands[hi]), f, bp, steps, int(len(cands))


def _rebuild(instance, inst, ideals, search: _Search, f, bp, T, greedy):
    s = search.plan_start(f)
    Ik = len(ideals) - 1
    ids = inst.node_ids
    stages, costs = [], []
    while Ik != 0:
        g = int(bp[Ik, s])
        if g < 0:
            raise InternalError(f"dp: no back-pointer at set {Ik}, s = {s}")
        J, d = int(search.tb.g_J[g]), int(search.tb.g_d[g])
        t = int(search.tb.g_dev[g]) // d
        C = ideals[Ik] & ~ideals[J]
        nodes = tuple(ids[i] for i in _bits(C))
        y = -(-s // d)
        chooser = greedy_options if greedy else exact_options
        opts = chooser(inst, nodes, t, d, y)
        if opts is None:
            raise InternalError(f"dp: stage {nodes} with t={t}, d={d}, y={y} has no option choice at rebuild")
        costs.append(stage_cost(instance, nodes, d, opts).tps)
        stages.append(Stage(nodes, d, t, {v: o.id for v, o in opts.items()}))
        Ik, s = J, s - d
    return Plan(tuple(stages)), costs


class _Progress:
    """A rich progress display on stderr, only when asked and stderr is a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress

            self._p = Progress(console=Console(stderr=True), transient=True)
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def task(self, name: str, total: int):
        if self._p is None:
            return lambda k: None
        tid = self._p.add_task(name, total=total)
        return lambda k: self._p.update(tid, completed=k)
