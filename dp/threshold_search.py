"""The search over the threshold T (step 3 of the DP, cost model sec. 4): the least
largest stage cost at which a plan fits in the device budget.

Entry point: :func:`search_threshold`; :class:`ThresholdDecision` decides one T over the
stage tables (a min-devices table over the successor-closed sets) and reads its plan. It
walks the tables in the order :class:`SetLayout` gives and relaxes its table, as the
least-bottleneck bound does its own, through :class:`RunRelaxation`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dp.deadline import Deadline
from dp.knapsack import run_ids, run_starts
from dp.table_arrays import sorted_unique
from dp.table_store import StageTables
from piper_ilp.errors import InternalError

__all__ = [
    "DEVICES_INF",
    "DEFAULT_SMALL_S",
    "Found",
    "RunRelaxation",
    "SetLayout",
    "ThresholdDecision",
    "search_threshold",
    "pair_d_order",
    "cost_profile",
    "decision_table_bytes",
]

#: "No plan": larger than any device count a plan can need; f + t d stays below 2**63.
DEVICES_INF = np.int64(1) << 61

#: Up to this many columns (S + 1) the plan read from f breaks ties between equal
#: stages by group index; above it, by (d, J, index). Either order gives an optimal plan;
#: the setting only picks among plans of equal value.
DEFAULT_SMALL_S = 96


#: Matrix elements (groups x columns) the decision relaxes at once: about 32 MB of int64.
DECIDE_ELEMENTS = 1 << 22
#: A set whose usable groups x columns reach this many elements is relaxed in a matrix of
#: its own; smaller sets of a run share matrices (their per-call cost would dominate).
SET_ELEMENTS = 1 << 12

#: Groups x columns (S + 1) up to which the search first finds the least bottleneck of
#: any plan (:meth:`ThresholdDecision.least_bottleneck`): one pass over every group and
#: column, where a decision takes only the groups usable at its T (so the pass costs a
#: few decisions' time).
BOTTLENECK_ELEMENTS = 1 << 24

#: Groups per chunk when the decision's per-group work is done piecewise (whole sets per
#: chunk): the temporaries stay near CHUNK_GROUPS x 100 bytes.
CHUNK_GROUPS = 1 << 20

#: Bytes per candidate stage (group) the decision holds on top of the stage tables: two
#: orders (int32), the dominance rank (uint8), and while deciding the usable range (int32)
#: and three flags (use, its reordering, unusable-or-odd).
DECISION_GROUP_BYTES = 4 + 4 + 1 + 4 + 3


def decision_table_bytes(n_ideals: int, S: int, n_groups_max: int = 2**31 - 2) -> int:
    """The bytes the size guard counts for the decision tables.

    Counted as two pairs of f (int64) and a back-pointer table (int32, or int64 above
    2**31 - 2 groups) per cell, sets x (S + 1) cells. The search holds one f at a time
    (twice as wide for small S) and the best plan as a path, so the count is an upper
    bound.

    Examples
    --------
    >>> decision_table_bytes(9, 4)
    1080
    """
    bp = 4 if n_groups_max < 2**31 - 1 else 8
    return 2 * (8 + bp) * n_ideals * (S + 1)


def pair_d_order(gI, gJ, gd, gdev, S: int) -> np.ndarray:
    """An order of the groups that puts each (I, J, d) together, by increasing t d.

    The builder emits each pair's groups together, t by t (increasing) and d by d, so one
    stable sort by (pair, d) gives it; where that does not hold (checked), the full sort by
    (I, J, d, t d).

    Parameters
    ----------
    gI, gJ, gd, gdev : numpy.ndarray
        Per group: the indices of I and J, d and t d.
    S : int
        The largest d.

    Returns
    -------
    numpy.ndarray
        The group indices in that order.
    """
    n = len(gI)
    if n > 1:
        newI = gI[1:] != gI[:-1]
        pair = run_ids(newI | (gJ[1:] != gJ[:-1]))
        # one pair id per (I, J): the sets come in order, and within a set each new
        # pair's J is below the last one's
        unique = not (~newI & (gJ[1:] > gJ[:-1])).any() and not (newI & (gI[1:] < gI[:-1])).any()
        if unique:
            o = np.argsort(pair * (S + 1) + gd, kind="stable")
            od, odev, op = gd[o], gdev[o], pair[o]
            same = (op[1:] == op[:-1]) & (od[1:] == od[:-1])
            if not (same & (odev[1:] <= odev[:-1])).any():
                return o
    return np.lexsort((gdev, gd, gJ, gI))


def cost_profile(tb: StageTables, gk, W: int, row_low, row_top) -> np.ndarray:
    """Each group's cost c(s) at every suffix bound s = 0..W - 1, the profile that
    :meth:`ThresholdDecision.least_bottleneck` relaxes.

    A point at column col = min(d yhi, W - 1) serves s up to col; in a monotone row the
    points rise in cost with yhi, so the first point to reach a column is its cheapest
    there, and c is the cost of the first point at or right of s. A non-monotone row
    counts as one point, its cheapest, at its largest y. Laid out as runs (each kept
    point over the columns since the last one, then inf to the end), one ``np.repeat``.

    Parameters
    ----------
    tb : StageTables
        Finalized stage tables.
    gk : numpy.ndarray
        The groups.
    W : int
        The number of columns.
    row_low, row_top : numpy.ndarray
        Per row of ``tb``: its cheapest point's cost and the largest y any point serves.

    Returns
    -------
    numpy.ndarray
        len(gk) x W: c(s), inf where the group serves no y.
    """
    r = tb.group_row[gk]
    mono = tb.group_monotone[gk]
    npts = np.where(mono, tb.row_points[r], 1)
    grp = np.repeat(np.arange(len(gk)), npts)
    first = np.cumsum(npts) - npts
    pt = tb.row_start[r][grp] + (np.arange(len(grp)) - first[grp])
    d = tb.group_d[gk].astype(np.int64)[grp]
    y = tb.yhi[pt].astype(np.int64)
    cost = tb.cost[pt]
    if not mono.all():
        odd = ~mono[grp]
        y[odd] = row_top[r][grp[odd]]
        cost[odd] = row_low[r][grp[odd]]
    col = np.minimum(d * y, W - 1)
    keep = np.ones(len(grp), dtype=bool)
    keep[1:] = (grp[1:] != grp[:-1]) | (col[1:] != col[:-1])  # the first point at a column
    grp, col, cost = grp[keep], col[keep], cost[keep]
    # runs: per group its points, then an inf run to column W - 1 (length 0 when the
    # last point reaches it)
    n_g = len(gk)
    cnt = np.bincount(grp, minlength=n_g) + 1
    end = np.cumsum(cnt)
    at = np.arange(len(grp)) + grp  # position of each point among the runs
    val = np.full(int(end[-1]), math.inf)
    val[at] = cost
    stop = np.full(len(val), W - 1)
    stop[at] = col
    length = np.diff(stop, prepend=-1)
    length[end[:-1]] = stop[end[:-1]] + 1  # each group starts again at column 0
    return np.repeat(val, length).reshape(n_g, W)


class SetLayout:
    """How a decision walks the groups of the stage tables ``tb`` (stored by increasing
    I): each set's range of groups, chunks of whole sets, the order and rank of the
    t-dominance test, and the runs of sets whose rows of f are relaxed together. Built
    once per table and read by :class:`ThresholdDecision` and :class:`RunRelaxation`.

    Parameters
    ----------
    tb : StageTables
        Finalized stage tables.
    n_ideals : int
        The number of sets of the family.
    S : int
        The largest column (:func:`pair_d_order` orders by d up to it).

    Attributes
    ----------
    set_bounds : numpy.ndarray
        Set I's groups are ``set_bounds[I]:set_bounds[I + 1]``.
    chunks : list of tuple
        Group ranges (a, b) of whole sets with about :data:`CHUNK_GROUPS` groups each (a
        set larger than that alone).
    by_IJd, dom_rank : numpy.ndarray
        Within each chunk, the groups of each (I, J, d) ordered by t (indices into the
        table), and each group's rank in its (I, J, d) run, capped at 3.
    runs : list of tuple
        Ranges [a, b) of consecutive sets none of whose stages starts in the range (J < a).
    """

    def __init__(self, tb: StageTables, n_ideals: int, S: int):
        self.tb = tb
        n = len(tb.group_set)
        idx = np.int32 if n < 2**31 - 1 else np.int64
        # groups are stored by increasing I (see StageTables.finalize): each I's range
        self.set_bounds = np.zeros(n_ideals + 1, dtype=np.int64)
        np.cumsum(np.bincount(tb.group_set, minlength=n_ideals), out=self.set_bounds[1:])
        # chunks of whole sets with about CHUNK_GROUPS groups each
        cuts = [0]
        target = CHUNK_GROUPS
        while cuts[-1] < n:
            k = int(np.searchsorted(self.set_bounds, cuts[-1] + target, side="right")) - 1
            end = int(self.set_bounds[k]) if k < len(self.set_bounds) else n
            if end <= cuts[-1]:  # one set holds more than a chunk: take it whole
                k = int(np.searchsorted(self.set_bounds, cuts[-1], side="right"))
                end = int(self.set_bounds[min(k, n_ideals)])
            cuts.append(min(end, n))
        self.chunks = list(zip(cuts[:-1], cuts[1:]))
        # for the t-dominance test, groups of the same (I, J, d) ordered by t (by_IJd)
        # and each one's rank in its (I, J, d) run, capped at 3 (dom_rank)
        self.by_IJd = np.empty(n, dtype=idx)
        self.dom_rank = np.zeros(n, dtype=np.uint8)
        for a, b in self.chunks:
            gI, gJ, gd, gdev = (
                tb.group_set[a:b],
                tb.group_back[a:b],
                tb.group_d[a:b],
                tb.group_devices[a:b],
            )
            o = pair_d_order(gI, gJ, gd, gdev, S)
            self.by_IJd[a:b] = o + a
            oI, oJ, od = gI[o], gJ[o], gd[o]
            rank = self.dom_rank[a:b]
            for k in (1, 2, 3):
                if b - a > k:
                    same = (oI[k:] == oI[:-k]) & (oJ[k:] == oJ[:-k]) & (od[k:] == od[:-k])
                    rank[k:][same] = k
            del o, oI, oJ, od
        # runs of consecutive sets none of whose stages starts in the run (J < the run's
        # first set): their rows of f depend only on earlier runs, so each run is relaxed
        # in one matrix (for families by size: one run per size)
        has = np.nonzero(self.set_bounds[1:] > self.set_bounds[:-1])[0]
        max_back = np.full(n_ideals, -1, dtype=np.int64)
        if len(has):
            max_back[has] = np.maximum.reduceat(tb.group_back, self.set_bounds[has])
        runs, start = [1], 1
        for I, mb in enumerate(max_back.tolist()):
            if I > start and mb >= start:
                runs.append(I)
                start = I
        runs.append(max(n_ideals, 1))
        self.runs = list(zip(runs[:-1], runs[1:]))


class RunRelaxation:
    """The relaxation over the sets of a table f that a decision (min-plus: devices) and
    the least-bottleneck bound (min-max: costs) share, a run of sets at a time
    (:attr:`SetLayout.runs`), with the row values given by the caller.

    Parameters
    ----------
    tb : StageTables
        Finalized stage tables.
    layout : SetLayout
        Their layout.
    schedule : bool
        Sec. 11's in-flight rule: stages read f[J][d floor(s / d) - d] and each run's rows
        become their running minima (:class:`ThresholdDecision`).
    """

    def __init__(self, tb: StageTables, layout: SetLayout, schedule: bool):
        self.tb, self.layout, self.schedule = tb, layout, schedule

    def relax(self, fp, f, hi, use, S, row_values, odd=(), relax_odd=None):
        """Relax f in place, a run of sets at a time (:attr:`SetLayout.runs`: sets whose
        stages start before the run): all groups ``use`` of the run in one matrix per width
        class (rows: groups, by increasing I; columns: s up to the group's largest usable
        s ``hi``; in pieces of at most :data:`DECIDE_ELEMENTS`); a group's row starts as
        f[J][s - d] (sec. 11's rule: f[J][d floor(s / d) - d], :meth:`_sources`), and
        ``row_values`` makes it the group's values; each set's column minimum over its rows
        goes to f[I]. Under sec. 11's rule each run's rows become their running minima
        before a later run reads them.

        Parameters
        ----------
        fp : numpy.ndarray
            The padded table: sets x 2 (S + 1), f its right half, the left half what
            stands for "no plan".
        f : numpy.ndarray
            The right half of ``fp``, row 0 (the empty set) filled in.
        hi, use : numpy.ndarray
            Per group: its largest usable s, and whether it is relaxed in the matrices.
        S : int
            The largest column of f.
        row_values : callable
            ``row_values(vals, groups, hi, W)``: the groups' values from the rows they
            read (``vals``, groups x W, may be changed in place).
        odd : sequence of int
            Groups (by increasing index) given to ``relax_odd`` one by one after their run.
        relax_odd : callable, optional
            Relaxes one group of ``odd``.
        """
        tb = self.tb
        bounds = self.layout.set_bounds
        odd_pos = 0
        # window of f's padded row J starting at S + 1 - d: f[J][s - d], "no plan" for s < d
        win = np.lib.stride_tricks.sliding_window_view(fp, S + 1, axis=1)
        for ra, rb in self.layout.runs:
            a, b = bounds[ra], bounds[rb]
            g = a + np.nonzero(use[a:b])[0]
            pieces = (
                []
                if not len(g)
                else [(g, hi[g])]
                if rb - ra == 1
                else self._width_classes(g, hi[g])
            )
            for gc, hc in pieces:
                step = max(1, DECIDE_ELEMENTS // (int(hc.max()) + 1))
                for k in range(0, len(gc), step):
                    gk, hk = gc[k : k + step], hc[k : k + step]
                    W = int(hk.max()) + 1
                    vals = row_values(self._sources(fp, win, gk, W, S), gk, hk, W)
                    Ik = tb.group_set[gk]
                    if Ik[0] == Ik[-1]:  # one set: a plain column minimum
                        dst = f[int(Ik[0]), :W]
                        np.minimum(dst, vals.min(axis=0), out=dst)
                        continue
                    first = run_starts(Ik)
                    rows = Ik[first]
                    f[rows, :W] = np.minimum(f[rows, :W], np.minimum.reduceat(vals, first, axis=0))
            while odd_pos < len(odd) and odd[odd_pos] < b:
                relax_odd(int(odd[odd_pos]))
                odd_pos += 1
            if self.schedule:
                np.minimum.accumulate(f[ra:rb], axis=1, out=f[ra:rb])

    def _sources(self, fp, win, gk, W: int, S: int):
        """Per group of ``gk``, the row of J that its columns s = 0..W - 1 read: f[J][s - d]
        (one window of ``fp``), or f[J][d floor(s / d) - d] under sec. 11's rule (a
        gather); "no plan" where the column read is below 0."""
        tb = self.tb
        d = tb.group_d[gk]
        if not self.schedule:
            return win[tb.group_back[gk], S + 1 - d, :W]
        d = d.astype(np.int64)[:, None]
        s = np.arange(W)[None, :]
        return fp[tb.group_back[gk].astype(np.int64)[:, None], S + 1 - d + s - s % d]

    def _width_classes(self, g, gh):
        """The usable groups ``g`` of a run (by increasing I; ``gh`` their usable s) in
        pieces (groups, their s): the small sets by width class (W = a set's largest
        usable s + 1, rounded up to a power of two), so no set is padded to more than
        twice its own width; each large set (groups x W >= SET_ELEMENTS) alone, unpadded.
        Each piece keeps its sets' order."""
        gI = self.tb.group_set[g]
        starts = run_starts(gI)
        width = np.maximum.reduceat(gh, starts) + 1
        count = np.diff(np.append(starts, len(g)))
        cls = np.ceil(np.log2(width)).astype(np.int64)
        large = count * width >= SET_ELEMENTS
        cls[large] = 64 + np.arange(int(large.sum()))
        cls = np.repeat(cls, count)
        if (cls[1:] < cls[:-1]).any():
            order = np.argsort(cls, kind="stable")
            g, gh, cls = g[order], gh[order], cls[order]
        cuts = run_starts(cls).tolist() + [len(g)]
        return [(g[x:y], gh[x:y]) for x, y in zip(cuts[:-1], cuts[1:])]


class ThresholdDecision:
    """The min-devices decision for a threshold T over the stage tables ``tb``:

        f[I][s] = min over J < I, t, d <= s with cost(I \\ J, t, d, ceil(s / d)) <= T
                  of f[J][s - d] + t d,        f[{}][s] = 0,

    feasible when min over s of f[all][s] <= ``budget``, s <= S = min(N, K) (Piper's
    dp[I][k][s] turned inside out: for a fixed T the devices become the value, so the
    table shrinks from K x S to S per set). Device counts are int64; a count at or above
    :data:`DEVICES_INF` means "no plan" (any K the loader admits is far below it: K <=
    2**40 keeps every sum of t d exact).

    Under the in-flight rule that the schedule keeps (contract sec. 11, ``in_flight=
    "schedule"``) the state is q, and a stage with d in front of a J holding q_J holds
    q = d ceil((d + q_J) / d), y = q / d. The table keeps its shape, with another
    transition:

        f[I][s] = min over J < I, t, d <= s with cost(I \\ J, t, d, floor(s / d)) <= T
                  of f[J][d floor(s / d) - d] + t d,

    each row then replaced by its running minimum over s (f[I][s] = fewest devices of a
    plan of I with q <= s). Exact: a plan with q_J <= d floor(s / d) - d has q_I <= d
    floor(s / d), so its stage holds at most the y it was costed at (the options chosen
    there fit, at the same TPS); and every plan is counted at its own q_I, where
    floor(s / d) = q_I / d is its y and d floor(s / d) - d = d ceil(q_J / d) >= q_J.
    Columns then run to S = min(N, 2K - 1), since q <= 2 sum d - 1.

    Per group it keeps only two orders and a rank (int32, int32, uint8: see
    :data:`DECISION_GROUP_BYTES`); the per-group work of a threshold is done in chunks of
    whole sets (:data:`CHUNK_GROUPS`), from per-set and per-row values.

    Parameters
    ----------
    tb : StageTables
        Finalized stage tables, with ``work_of`` and ``front_work_of``.
    n_ideals : int
        The number of sets of the family.
    S : int
        The largest column: min(N, K), the largest suffix bound s; under sec. 11's rule
        min(N, 2K - 1), the largest q.
    budget : int
        The devices a plan may use. The DP passes min(K, t_max S): a plan never uses
        more than t_max S devices, so a larger K budgets the same.
    small_s : int
        Up to this many columns S + 1, ties between equal stages are broken by group
        index, above it by (d, J, index) (:data:`DEFAULT_SMALL_S`).
    in_flight : {"piper", "schedule"}
        The in-flight rule: Piper's transition, or sec. 11's (above).
    """

    def __init__(
        self,
        tb: StageTables,
        n_ideals: int,
        S: int,
        budget: int,
        small_s: int = DEFAULT_SMALL_S,
        in_flight: str = "piper",
    ):
        self.S, self.budget, self.nI = S, budget, n_ideals
        #: sec. 11's rule: the floor transition and running minima (class docstring)
        self.schedule = in_flight == "schedule"
        self.small_s = small_s
        self.tb = tb
        n = len(tb.group_set)
        self.n = n
        self.hi_dtype = np.int32 if S < 2**31 - 1 else np.int64
        self.layout = SetLayout(tb, n_ideals, S)
        self.relaxation = RunRelaxation(tb, self.layout, self.schedule)
        # per set: the work in front of it (all \\ I) and behind it (J = the set)
        self.front_work = tb.front_work_of
        self.back_work = tb.work_of

    def y_at(self, s: int, d: int) -> int:
        """The y a stage with d is costed at in column s: ceil(s / d), or floor(s / d)
        under sec. 11's rule."""
        return s // d if self.schedule else -(-s // d)

    def candidates(self) -> np.ndarray:
        """The distinct finite costs of the tables, ascending: the thresholds T at which
        the optimum can lie."""
        c = sorted_unique(self.tb.cost)
        return c[np.isfinite(c)]

    def _usable(self, T: float):
        """Per group: the largest usable s (0 = unusable) for threshold T, after dropping
        groups that another t of the same (I, J, d) covers with fewer devices."""
        tb, S = self.tb, self.S
        # per row (every row has a point): the points with cost <= T, the y they serve
        cnt = (
            np.add.reduceat((tb.cost <= T).view(np.int8), tb.row_start, dtype=np.int64)
            if len(tb.row_start)
            else np.zeros(0, dtype=np.int64)
        )
        last = tb.row_start + np.maximum(cnt, 1) - 1
        row_ymax = (
            np.where(cnt > 0, tb.yhi[last], 0).astype(np.int64)
            if len(cnt)
            else np.zeros(0, dtype=np.int64)
        )
        del cnt, last
        lbf_set = lbb_set = None
        if self.n and 0 < T < math.inf:
            # a plan with every stage <= T needs >= work / T devices in front of the stage
            # and behind it (at least one each when not empty)
            nI = self.nI
            lbf_set = np.maximum(1, np.ceil(self.front_work / T * (1 - 1e-9)))
            lbf_set[nI - 1] = 0  # nothing in front of the whole graph
            lbb_set = np.maximum(1, np.ceil(self.back_work / T * (1 - 1e-9)))
            lbb_set[0] = 0  # nothing behind the empty set
        out = np.zeros(self.n, dtype=self.hi_dtype)
        for a, b in self.layout.chunks:
            gd = tb.group_d[a:b]
            hi = np.minimum(S, gd * row_ymax[tb.group_row[a:b]])
            hi[hi < gd] = 0  # ymax = 0 when no point costs <= T
            mono = tb.group_monotone[a:b]
            # a group with more devices and no larger range than a smaller-t group is useless
            o = self.layout.by_IJd[a:b] - a
            h = hi[o]
            m = mono[o]
            rank = self.layout.dom_rank[a:b]
            dominated = np.zeros(b - a, dtype=bool)
            for k in (1, 2, 3):
                if b - a > k:
                    dominated[k:] |= (rank[k:] >= k) & m[:-k] & m[k:] & (h[:-k] >= h[k:])
            drop = np.zeros(b - a, dtype=bool)
            drop[o] = dominated
            del o, h, m, dominated
            if lbf_set is not None:
                drop |= (
                    lbf_set[tb.group_set[a:b]] + tb.group_devices[a:b] + lbb_set[tb.group_back[a:b]]
                    > self.budget
                )
            hi[drop] = 0
            out[a:b] = hi
        return out

    def decide(self, T: float, cap: int | None = None, usable=None):
        """f[I][s] = fewest devices of a plan for I with suffix bound s and every stage
        <= T, for s <= ``cap`` (default S; f[I][s] reads only f[J][s - d], so the
        columns kept are exact).

        All usable candidate stages of one I are relaxed together (:meth:`_decide_by_set`).
        No back-pointers: the plan is read from f afterwards (:meth:`plan_path`), for one
        path only.

        Parameters
        ----------
        T : float
            The threshold: every stage costs <= T.
        cap : int, optional
            The largest suffix bound s computed (default S).
        usable : numpy.ndarray, optional
            Per group, its largest usable s at T, when already known.

        Returns
        -------
        numpy.ndarray of int64
            f, sets x (cap + 1); a value >= :data:`DEVICES_INF` means no plan.
        """
        tb = self.tb
        S = self.S if cap is None else max(0, min(int(cap), self.S))
        # f is the right half of a table padded with "no plan" on the left, so that
        # f[J][s - d] for s < d reads "no plan" from one window per group
        fp = np.full((self.nI, 2 * (S + 1)), DEVICES_INF, dtype=np.int64)
        f = fp[:, S + 1 :]
        f[0, :] = 0
        if not len(tb.group_set):
            self._last = (T, S, np.zeros(0, dtype=self.hi_dtype))
            return f
        hi = self._capped(self._usable(T) if usable is None else usable, S)
        self._last = (T, S, hi)
        use = hi > 0
        odd_flag = use & ~tb.group_monotone
        odd = np.nonzero(odd_flag)[0]
        del odd_flag
        use &= tb.group_monotone
        self._decide_by_set(fp, f, hi, use, T, odd, S)
        return f

    def _capped(self, hi, S: int):
        """The usable ranges ``hi`` cut at s <= S (0 where nothing is left)."""
        if S >= self.S:
            return hi
        hi = np.minimum(hi, S)
        hi[hi < self.tb.group_d] = 0
        return hi

    def decide_narrow(self, T: float, start: int = 64):
        """:meth:`decide` (T) on the first columns s <= cap only, widened until the fewest
        devices m of the whole graph there is <= cap: then no column past cap has fewer
        (a plan fitting at s fits at every s' down to its own sum of d, and a plan whose
        sum of d passes cap uses more than cap devices), so m, the first column reaching
        it and the plan read there are those of the full table. Not with usable groups
        whose rows are not monotone in y (their usable s need not reach down to d).

        Parameters
        ----------
        T : float
            The threshold.
        start : int
            The first cap (multiplied by 4 each time).

        Returns
        -------
        numpy.ndarray of int64
            f on the columns s <= the last cap.
        """
        usable = self._usable(T) if len(self.tb.group_set) else None
        if usable is not None and (usable.astype(bool) & ~self.tb.group_monotone).any():
            return self.decide(T, usable=usable)
        cap = start
        while cap < self.S:
            f = self.decide(T, cap, usable=usable)
            # sec. 11's rule: a plan of m devices has q <= 2 sum d - 1 <= 2 m - 1
            reach = 2 * int(f[-1].min()) - 1 if self.schedule else int(f[-1].min())
            if reach <= cap:
                return f
            cap *= 4
        return self.decide(T, usable=usable)

    def _decide_by_set(self, fp, f, hi, use, T, odd, S):
        """The relaxation of :meth:`decide` (:meth:`RunRelaxation.relax`): row g =
        f[J][s - d] + t d, cut above the group's usable range. ``odd``: the usable groups
        with non-monotone rows (by increasing index, so by increasing I), relaxed one by
        one after their run's matrix."""
        tb = self.tb
        s_all = np.arange(S + 1)

        def row_values(vals, gk, hk, W):
            vals += tb.group_devices[gk][:, None]
            if (hk != W - 1).any():
                vals[s_all[None, :W] > hk[:, None]] = DEVICES_INF
            return vals

        self.relaxation.relax(
            fp, f, hi, use, S, row_values, odd, lambda g: self._relax_runs(f, g, T, S)
        )

    def least_bottleneck(self, max_elements: int = BOTTLENECK_ELEMENTS) -> float:
        """A lower bound on the least threshold at which a plan fits: the least largest
        stage cost over all plans of the tables with any number of devices (suffix bounds
        s <= S),

            G[I][s] = min over groups of I with d <= s of max(G[J][s - d], c(s)),
            G[{}][s] = 0,

        c(s) the group's cost at y = ceil(s / d) (the first point of its row with d yhi >=
        s; a non-monotone row counts as its cheapest point over its whole range, which
        only lowers the bound; :func:`cost_profile`). A plan that fits in the budget at T
        is one of these plans, so the bound is <= T. When memory, not the devices, decides
        the optimum (ResNet), it is the optimum, and one decision there confirms it.

        Parameters
        ----------
        max_elements : int
            No bound when the groups x (S + 1) values pass this.

        Returns
        -------
        float
            The bound; inf when no group has a finite cost; -inf (no bound) when there is
            no group or the values pass ``max_elements``.
        """
        tb, S = self.tb, self.S
        if not self.n or self.n * (S + 1) > max_elements:
            return -math.inf
        # per row: its cheapest point and the largest y any point serves
        row_low = np.minimum.reduceat(tb.cost, tb.row_start)
        row_top = np.maximum.reduceat(tb.yhi, tb.row_start).astype(np.int64)
        # per group: the largest s it serves (0: none)
        top = np.minimum(S, tb.group_d.astype(np.int64) * row_top[tb.group_row])
        top[top < tb.group_d] = 0
        fp = np.full((self.nI, 2 * (S + 1)), math.inf)
        f = fp[:, S + 1 :]
        f[0, :] = 0.0

        def row_values(vals, gk, hk, W):
            np.maximum(vals, cost_profile(tb, gk, W, row_low, row_top), out=vals)
            return vals

        self.relaxation.relax(fp, f, top, top > 0, S, row_values)
        return float(f[-1].min())

    def _runs(self, g, T, S):
        """The ranges [lo, hi] of s <= S over which a non-monotone group g is usable at T."""
        tb = self.tb
        d = int(tb.group_d[g])
        row = int(tb.group_row[g])
        a = int(tb.row_start[row])
        b = a + int(tb.row_points[row])
        for c, lo, hi in zip(tb.cost[a:b], tb.ylo[a:b], tb.yhi[a:b]):
            if not c <= T:
                continue
            # the columns whose y (ceil(s / d); sec. 11: floor, up to the running minimum)
            # is in [lo, hi]
            first = int(lo) * d if self.schedule else (int(lo) - 1) * d + 1
            lo, hi = max(d, first), min(S, int(hi) * d)
            if hi >= lo:
                yield lo, hi

    def _relax_runs(self, f, g, T, S):
        tb = self.tb
        d, I, J, dev = (
            int(tb.group_d[g]),
            int(tb.group_set[g]),
            int(tb.group_back[g]),
            int(tb.group_devices[g]),
        )
        for lo, hi in self._runs(g, T, S):
            if self.schedule:
                s = np.arange(lo, hi + 1)
                src = f[J, s - s % d - d] + dev
            else:
                src = f[J, lo - d : hi + 1 - d] + dev
            dst = f[I, lo : hi + 1]
            np.minimum(dst, src, out=dst)

    def plan_path(self, f, T: float) -> list[tuple[int, int, int]]:
        """The plan held in f = :meth:`decide` (T) (the last decision made), as (I, s, g)
        per stage from the front (s the column the stage was costed in: its y is
        :meth:`y_at` (s, d)): at each (I, s), the group the relaxation met first among
        those that reach f[I][s] (blocks by d, then J, then index when S is large; by
        index when small; the non-monotone groups after, by index).

        Raises
        ------
        InternalError
            No group reaches a cell on the path (a bug).
        """
        S = f.shape[1] - 1
        T_last, S_last, hi = self._last
        if T_last != T or S_last != S:
            hi = self._capped(self._usable(T), S)
        tb = self.tb
        bounds = self.layout.set_bounds
        large = self.S + 1 > self.small_s
        s = self.plan_start(f)
        Ik = self.nI - 1
        path = []
        while Ik != 0:
            a, b = int(bounds[Ik]), int(bounds[Ik + 1])
            target = f[Ik, s]
            if self.schedule:  # the column where the running minimum reached it
                s = int(np.argmax(f[Ik, : s + 1] == target))
            gd = tb.group_d[a:b]
            h = hi[a:b]
            ok = (h > 0) & (gd <= s)
            back = s - s % gd - gd if self.schedule else s - gd
            val = f[tb.group_back[a:b], np.maximum(back, 0)] + tb.group_devices[a:b]
            hit = ok & (val == target)
            mono = tb.group_monotone[a:b]
            first = np.nonzero(hit & mono & (s <= h))[0]
            g = -1
            if len(first):
                if large:
                    k = np.lexsort((first, tb.group_back[a:b][first], gd[first]))[0]
                    g = a + int(first[k])
                else:
                    g = a + int(first[0])
            else:
                for k in np.nonzero(hit & ~mono)[0].tolist():
                    if any(lo <= s <= hi_ for lo, hi_ in self._runs(a + k, T, S)):
                        g = a + k
                        break
            if g < 0 or target >= DEVICES_INF:
                raise InternalError(f"dp: no stage reaches f[{Ik}][{s}] = {int(target)}")
            path.append((Ik, s, g))
            d = int(gd[g - a])
            Ik, s = int(tb.group_back[g]), (s - s % d - d if self.schedule else s - d)
        return path

    def plan_start(self, f) -> int:
        """The suffix bound s at which the plan is read: fewest devices, then smallest s."""
        row = f[-1]
        return int(np.argmin(row))

    def stage_cost_at(self, g: int, y: int) -> float:
        """The cost group g's table gives for y microbatches in flight."""
        tb = self.tb
        row = int(tb.group_row[g])
        a = int(tb.row_start[row])
        b = a + int(tb.row_points[row])
        if tb.group_monotone[g]:
            k = a + int(np.searchsorted(tb.yhi[a:b], y))
            return float(tb.cost[k])
        for k in range(a, b):
            if tb.ylo[k] <= y <= tb.yhi[k]:
                return float(tb.cost[k])
        raise InternalError(f"dp: group {g} has no entry for y = {y}")

    def bottleneck_index(self, path, cands) -> int:
        """Index in ``cands`` of the largest stage cost of the plan ``path``."""
        tb = self.tb
        worst = -math.inf
        for _, s, g in path:
            d = int(tb.group_d[g])
            worst = max(worst, self.stage_cost_at(g, self.y_at(s, d)))
        return int(np.searchsorted(cands, worst))

    def least_devices(self) -> int:
        """Fewest devices of any plan that fits in memory (no bound on T)."""
        return int(self.decide_narrow(math.inf)[-1].min())


class Found(NamedTuple):
    """What :func:`search_threshold` found.

    Attributes
    ----------
    T : float
        The bottleneck of the plan in hand.
    path : tuple or None
        That plan (:meth:`ThresholdDecision.plan_path`), or None for the ``known`` plan.
    steps, candidates : int
        Decisions made, of ``candidates`` thresholds.
    lower : float
        A proven lower bound on the least threshold (T itself when the search finished).
    stopped : bool
        The deadline ended the search first.
    """

    T: float
    path: tuple | None
    steps: int
    candidates: int
    lower: float
    stopped: bool


def search_threshold(
    search: ThresholdDecision,
    budget: int,
    tick=None,
    lower: float = 0.0,
    upper: float = math.inf,
    known: int | None = None,
    deadline: Deadline | None = None,
) -> Found | None:
    """The least threshold T at which a plan fits in ``budget`` devices, with a plan of
    that bottleneck.

    The optimum is one of the finitely many stage costs in the tables (the candidates).
    First, without a ``known`` plan, the least bottleneck of any plan with devices
    unbounded (:meth:`ThresholdDecision.least_bottleneck`) bounds T from below; when it
    lies between ``lower`` and ``upper``, the first decision is there, and a plan that
    fits there is the answer (memory, not the devices, decides the optimum then:
    ResNet). Else the next decision is at ``upper``: at a bound, fewer groups are
    usable, and the plan read there starts the bracket nearer the optimum. With
    ``known`` and ``upper`` one of the candidates, there is no decision at ``upper``:
    the search starts from that plan.

    Then a bracket (lo, hi] of candidate indices: every index <= lo fails (all below
    ``lower`` and below the least bottleneck, proven lower bounds on T, do); cands[hi]
    is the bottleneck of a plan in hand, and each feasible probe lowers it to its own
    plan's bottleneck. The next probe is, in order of preference: where the fewest
    devices D(T) would reach the budget if D were proportional to 1 / T (when the last
    probe's D says something: D < budget, or infeasible with a finite D); just below hi
    (after a plan using exactly the budget, once in a row); otherwise, or when the
    bracket did not halve over two probes, the middle candidate.

    Parameters
    ----------
    search : ThresholdDecision
        The decision over the stage tables.
    budget : int
        The devices a plan may use (see :class:`ThresholdDecision`).
    tick : callable, optional
        Called with the number of decisions made so far (progress).
    lower : float
        A proven lower bound on T (the work bound: least device-seconds / budget).
    upper : float
        A plan with every stage <= ``upper`` is known to be in the tables (the chain
        bound's, see :func:`dp.threshold_dp.solve_threshold_dp`); inf without one.
    known : int, optional
        The devices of a plan of bottleneck ``upper`` found elsewhere (the chain bound's,
        from its own tables).
    deadline : Deadline, optional
        Checked before each decision.

    Returns
    -------
    Found or None
        None when no plan fits at ``upper`` (or at all). The path is None when the search
        started from the ``known`` plan and nothing below ``upper`` fits: that plan is
        the answer. Past the deadline, the plan in hand and the least candidate not yet
        ruled out as ``lower`` (``stopped`` True).

    Raises
    ------
    TimeUp
        The deadline passed before the first plan was in hand (:class:`dp.deadline.TimeUp`).
    InternalError
        A plan read at T has a stage above T, or below the least bottleneck (a bug).
    """
    cands = search.candidates()
    at = int(np.searchsorted(cands, upper))
    tick = tick or (lambda k: None)
    found, floor_at, steps = _least_bottleneck_step(
        search, cands, budget, tick, lower, upper, known, deadline
    )
    if found is not None:
        return found
    if known is not None and at < len(cands) and cands[at] == upper:
        least, path, hi = known, None, at
    else:
        if deadline is not None:
            deadline.check()
        f = search.decide_narrow(upper)
        least = int(f[-1].min())
        if least > budget:
            return None
        path, hi = _plan_in(search, cands, f, upper)
        del f
        steps += 1
    lo = min(max(int(np.searchsorted(cands, lower * (1.0 - 1e-9))) - 1, floor_at), hi - 1)
    est: float | None = float(cands[hi]) * least / budget
    below, last = False, ""
    widths: list[int] = []
    while hi - lo > 1:
        if deadline is not None and deadline.passed:
            return Found(float(cands[hi]), path, steps, int(len(cands)), float(cands[lo + 1]), True)
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
        f = search.decide(T_probe)
        D = int(f[-1].min())
        if D <= budget:
            path, hi = _plan_in(search, cands, f, T_probe)
            est = float(cands[hi]) * D / budget if D < budget else None
            below = D == budget
        else:
            lo = idx
            est = T_probe * D / budget if D < DEVICES_INF else None
            below = False
        del f
    return Found(float(cands[hi]), path, steps, int(len(cands)), float(cands[hi]), False)


def _plan_in(search: ThresholdDecision, cands, f, T: float):
    """The plan in f (the decision at T) and the index in ``cands`` of its bottleneck,
    which must be <= T."""
    path = search.plan_path(f, T)
    hi = search.bottleneck_index(path, cands)
    if float(cands[hi]) > T:
        raise InternalError(
            f"dp: the plan found at threshold {T!r} has a stage costing {float(cands[hi])!r}"
        )
    return path, hi


def _least_bottleneck_step(search, cands, budget, tick, lower, upper, known, deadline):
    """The first step of :func:`search_threshold`: the least bottleneck of any plan (devices
    unbounded), a lower bound, and when the plan there fits in the budget, the answer
    (memory decides ResNet's optimum). It is one pass over every group: not made when a
    known plan starts the search near the optimum; no decision there when it is no better
    than the work bound ``lower`` or not below ``upper``. Returns (the answer or None, the
    index of the last candidate known to fail (-1: none), decisions made)."""
    floor_at = -1
    floor = -math.inf
    if known is None:
        if deadline is not None:
            deadline.check()
        floor = search.least_bottleneck()
    if not math.isfinite(floor):
        return None, floor_at, 0
    floor_at = int(np.searchsorted(cands, floor)) - 1  # every candidate below it fails
    if not lower < floor < upper:
        return None, floor_at, 0
    if deadline is not None:
        deadline.check()
    tick(1)
    f = search.decide_narrow(floor)
    if int(f[-1].min()) <= budget:
        path, hi = _plan_in(search, cands, f, floor)
        if float(cands[hi]) < floor:
            raise InternalError(
                f"dp: a plan costing {float(cands[hi])!r} is below the least bottleneck {floor!r}"
            )
        return Found(floor, path, 1, int(len(cands)), floor, False), floor_at, 1
    return None, floor_at + 1, 1
