"""Candidate stages and their cost tables (the first step of the DP, cost model sec. 4).

Entry point: :func:`build_stage_tables`. For every successor-closed set I, a vectorised
subset test over the family finds the sets J inside it; each pair kept (after the memory
and upper-bound tests) names a stage C = I \\ J. A stage's *state* -- its cut edges (a
bitmask; the cut bytes are the ``fsum`` of their terms, never a running total kept by
adding and subtracting), its weights W and (exact mode) the Pareto frontier of its option
choices (sums of p, a, b) -- is made from the state of C minus one node without
successors in C (remembered per C, :data:`STATE_MEMO_POINTS`; exact mode:
:mod:`dp.exact_states`, greedy mode: ``_state``). For every t and d
the stage's least cost is a step function of y with few corners (exact mode: computed
once per (C, t) and shared by every pair with that C), or Piper's rule for each y (greedy
mode, :mod:`dp.greedy_rule`, on the original planner's floats, per stage and d). Memory
decisions are exact (sec. 7): float sums decide away from the boundary,
:class:`dp.option_choice.OptionChoices` (exact integer sums) near it (greedy mode: the rule's
own running sums, and the choice it takes must fit exactly too).
The frontier filters compare memory with a few low bits cleared (:data:`FILTER_LOW_BITS`),
so a kept row may stand for a dropped choice that needs a little less: every decision on a
frontier row treats values up to :func:`dp.memory.kept_row_limit` as near the boundary.

Exact mode works in batches (``_flush_exact``): the stages of many sets I are queued,
their missing states made by increasing size, all states of one size in one numpy pass
(:mod:`dp.exact_states`: which rows of a frontier dominate which, and why rows that can
only serve y = 1 need less, is written there), their rows likewise, and the waiting
pairs' groups looked up at once. Each state comes from one parent by the same float
operations, whatever the batches, so the tables hold the same stages and points.

This module is longer than 600 lines because its three emitters (exact on "plain" nodes,
exact on general nodes, greedy) share the builder's caches and per-stage arrays.

Symbols: I, J successor-closed sets (bitmasks over node positions), C = I \\ J the stage,
t, d the degrees, y microbatches in flight, S = min(N, K) the largest suffix sum of d,
E cut-edge bytes, W sum of w, P sum of p, a and b memory per microbatch and constant.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from functools import partial

import numpy as np

from dp.deadline import Deadline
from dp.exact_states import ExactStates
from dp.exact_sums import fsum_rows
from dp.greedy_rule import (
    greedy_last_y,
    greedy_node_rows,
    greedy_rule_grid,
    piper_cost,
    running_sum,
)
from dp.knapsack import (
    _y_capacity_and_memory,
    monotone_runs,
    pareto_frontier,
    pareto_mask,
    pieces,
    stage_items,
    stage_tps_from_sums,
    y_capacities,
)
from dp.memory import fits_certainly_limit, fits_possibly_limit, float_band, kept_row_limit
from dp.option_choice import OptionChoices
from piper_ilp.cost import cut_edge_bytes
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance

__all__ = ["StageTables", "build_stage_tables", "bits", "membership", "sorted_unique"]

#: The builder remembers the state of every stage C it has made (so a stage shared by many
#: pairs (I, J) is made once) until its states and their frontier rows pass this many
#: (exact mode: about 40 bytes per row; greedy mode counts the states); then it forgets
#: them all and goes on.
STATE_MEMO_POINTS = 1_000_000
#: Exact mode queues the stages and makes their states and rows many per numpy pass, once
#: this many stages, sets I or pairs (I, J) wait (rows: about this many frontier points
#: per pass, :func:`dp.knapsack.pieces`).
EXACT_BATCH_STAGES = 16_384
EXACT_BATCH_SETS = 16_384
EXACT_BATCH_PAIRS = 131_072
EXACT_BATCH_POINTS = 50_000
#: Sets x sets of the family the subset test of :meth:`_StageTableBuilder._candidate_pairs`
#: holds at once (bytes of a bool matrix, plus the pairs it keeps).
BUILD_BLOCK_ELEMENTS = 1 << 20
#: The frontier filters compare memory with this many low mantissa bits cleared
#: (:func:`dp.memory.truncate_low_bits`): choices whose memory is exactly the same (the
#: same layer recomputed at another place) have float sums that differ in the last bits,
#: and kept both, a third more rows on ResNet-50. The decisions allow for it
#: (:func:`dp.memory.kept_row_limit`).
FILTER_LOW_BITS = 10


class StageTables:
    """Stage tables in flat arrays.

    A *row* is the table of one stage C under one (t, d): the corners of its step
    function y -> least cost, point j costing ``cost`` and serving y in [``ylo``,
    ``yhi``]. A *group* is one candidate stage (I, J, t, d) and names its row; the pairs
    (I, J) with the same C = I \\\\ J share their rows (exact mode), so the points are
    stored once per (C, t, d), not once per pair. In a monotone row the points are sorted
    by cost and ``yhi`` rises, so for a threshold T the usable y are 1..yhi of the last
    point with cost <= T. Greedy mode may give non-monotone rows; their points are read
    as separate y ranges. Every row has at least one point.

    After :meth:`finalize`, per row: ``row_start`` (index of its first point),
    ``row_points``, ``row_monotone``; per point: ``cost`` (float64), ``ylo``, ``yhi``
    (int32); per group (sorted by I): ``group_set`` and ``group_back`` (indices of I and
    J in the family), ``group_row``, ``group_d``, ``group_devices`` (t d),
    ``group_monotone`` (int32 where the values fit, else int64; bool).
    :func:`build_stage_tables` adds ``pairs``, ``work_of`` and ``front_work_of``.

    The rows and groups are collected in flat typed buffers (:mod:`array`) while they are
    built, so a row or a run of groups costs its numbers and no Python objects; runs
    made many at a time (exact mode) are kept as numpy chunks and joined once.
    """

    #: bytes per group at the peak, counted by the size guard: the finalized arrays (set,
    #: back, row, d, devices: 4 bytes each; monotone: 1) plus what the decision adds
    #: (:data:`dp.threshold_search.DECISION_GROUP_BYTES`, counted by the caller)
    GROUP_BYTES = 4 * 5 + 1
    #: bytes per run of groups while building (I, J, first row, count: int64 each)
    RUN_BYTES = 32
    #: bytes per point: cost float64, ylo and yhi int32, and the search's sorted copy of
    #: the costs (the thresholds) and a flag per threshold
    POINT_BYTES = 8 + 4 + 4 + 8 + 1
    #: bytes per row (t, d, points: int64 while built; start int64, monotone once finalized)
    ROW_BYTES = 8 * 3 + 1 + 8 + 8

    def __init__(
        self,
        max_bytes: float | None = None,
        source: str = "<instance>",
        extra_group_bytes: int = 0,
        max_y: int = 2**31 - 1,
    ):
        # per row: t, d, number of points, monotone; per point: cost, ylo, yhi
        self.row_t, self.row_d_buf, self.row_npts = array("q"), array("q"), array("q")
        self.row_mono = array("b")
        self.y_dtype = np.int32 if max_y < 2**31 else np.int64
        self.y_code = "i" if self.y_dtype == np.int32 else "q"
        if self.y_dtype == np.int64:
            self.POINT_BYTES = 8 + 8 + 8 + 8 + 1
        self.pt_cost, self.pt_ylo, self.pt_yhi = array("d"), array(self.y_code), array(self.y_code)
        self.n_rows = 0
        # runs of groups: I, J, first row, number of rows (one at a time into typed
        # buffers; many at a time as numpy chunks, in order: see _run_chunk)
        self.runs = [array("q"), array("q"), array("q"), array("q")]
        self.run_chunks: list[tuple[np.ndarray, ...]] = []
        self.n_groups = 0
        self.max_bytes = max_bytes
        #: per-group bytes that other parts (the decision) will add, counted by the guard
        self.extra_group_bytes = extra_group_bytes
        self.nbytes = 0
        self.source = source

    def _grow(self, nbytes: int):
        self.nbytes += nbytes
        if self.max_bytes is not None and self.nbytes > self.max_bytes:
            raise SizeLimitError(
                f"{self.source}: the DP's stage tables and decision arrays passed {self.max_bytes / 2**30:.1f} GiB "
                f"while being built (too many candidate stages x (t, d) x y ranges); lower K or N, restrict t or d "
                f"(--max-t, --max-d), or pass --force (force=True) if memory allows"
            )

    def add_rows(self, t, ds, cost2d, ylo2d, yhi2d, monotone=True, keep=None) -> int:
        """Store one row per entry of ``ds`` (points: the columns of the 2D arrays, or
        those where ``keep`` is true, which must leave each row at least one); returns
        the index of the first row."""
        if keep is None:
            npts = np.full(len(ds), cost2d.shape[1], dtype=np.int64)
            cost, ylo, yhi = cost2d.ravel(), ylo2d.ravel(), yhi2d.ravel()
        else:
            npts = keep.sum(axis=1)
            cost, ylo, yhi = cost2d[keep], ylo2d[keep], yhi2d[keep]
        return self._append(t, ds, npts, cost, ylo, yhi, monotone)

    def add_flat_rows(self, t, ds, npts, cost, yhi) -> int:
        """Store one row per entry of ``ds`` with ``npts`` points each, the points given
        end to end (``cost``, ``yhi``; ylo is 1 for every point); returns the index of
        the first row."""
        return self._append(t, ds, npts, cost, np.ones(len(cost), dtype=self.y_dtype), yhi, True)

    def add_ragged_rows(self, t, ds, npts, cost, ylo, yhi, monotone) -> int:
        """Store one row per entry of ``ds`` with ``npts`` points each (at least one), the
        points given end to end, and per row whether it is ``monotone`` (array of bool);
        returns the index of the first row."""
        return self._append(t, ds, npts, cost, ylo, yhi, monotone)

    def _append(self, t, ds, npts, cost, ylo, yhi, monotone) -> int:
        """Append rows (per entry of ``ds``: ``npts`` points, given end to end; ``monotone``
        one bool for all or one per row) to the typed buffers; returns the index of the
        first row."""
        nr = len(ds)
        first = self.n_rows
        self.row_t.frombytes(memoryview(np.full(nr, t, dtype=np.int64)).cast("B"))
        self.row_d_buf.frombytes(memoryview(np.ascontiguousarray(ds, dtype=np.int64)).cast("B"))
        self.row_npts.frombytes(memoryview(np.ascontiguousarray(npts, dtype=np.int64)).cast("B"))
        mono = np.broadcast_to(np.asarray(monotone, dtype=np.int8), (nr,))
        self.row_mono.frombytes(memoryview(np.ascontiguousarray(mono)).cast("B"))
        self.pt_cost.frombytes(memoryview(np.ascontiguousarray(cost, dtype=np.float64)).cast("B"))
        self.pt_ylo.frombytes(memoryview(np.ascontiguousarray(ylo, dtype=self.y_dtype)).cast("B"))
        self.pt_yhi.frombytes(memoryview(np.ascontiguousarray(yhi, dtype=self.y_dtype)).cast("B"))
        self.n_rows += nr
        self._grow(self.POINT_BYTES * len(cost) + self.ROW_BYTES * nr)
        return first

    def add_groups(self, k: int, jk: int, row: int, count: int):
        """Groups (I = set k, J = set jk) for the ``count`` rows from ``row`` on."""
        runs = self.runs
        runs[0].append(k)
        runs[1].append(jk)
        runs[2].append(row)
        runs[3].append(count)
        self.n_groups += count
        self._grow(self.RUN_BYTES + (self.GROUP_BYTES + self.extra_group_bytes) * count)

    def add_runs(self, ks: np.ndarray, jks: np.ndarray, rows: np.ndarray, counts: np.ndarray):
        """Runs of groups (I = set ks[i], J = set jks[i]) for the counts[i] rows from
        rows[i] on (int64 arrays, >= 0; kept as they are, or as int32 where they fit: the
        caller must not change them), sorted by I. Kept as a chunk, joined once by
        :meth:`finalize` (appended to the typed buffers, they were copied again at every
        growth: 35 ms of wide12's)."""
        self._run_chunk()
        self.run_chunks.append(
            tuple(_compact(np.asarray(a, dtype=np.int64)) for a in (ks, jks, rows, counts))
        )
        total = int(counts.sum())
        self.n_groups += total
        self._grow(self.RUN_BYTES * len(ks) + (self.GROUP_BYTES + self.extra_group_bytes) * total)

    def _run_chunk(self):
        """Move the runs in the typed buffers to a chunk of their own (keeps the order)."""
        if len(self.runs[0]):
            self.run_chunks.append(tuple(np.frombuffer(a, dtype=np.int64) for a in self.runs))
            self.runs = [array("q") for _ in range(4)]

    def finalize(self):
        def take(buf, dtype):
            # no copy: the array keeps the buffer alive (and is never resized again)
            return np.frombuffer(buf, dtype=dtype) if len(buf) else np.empty(0, dtype=dtype)

        npts = take(self.row_npts, np.int64)
        self.row_npts = array("q")
        self.row_points = npts
        self.row_start = np.zeros(len(npts), dtype=np.int64)
        if len(npts):
            np.cumsum(npts[:-1], out=self.row_start[1:])
        self.row_monotone = take(self.row_mono, np.int8).astype(bool)
        self.row_mono = array("b")
        self.cost = take(self.pt_cost, np.float64)
        self.pt_cost = array("d")
        self.ylo = take(self.pt_ylo, self.y_dtype)
        self.yhi = take(self.pt_yhi, self.y_dtype)
        self.pt_ylo, self.pt_yhi = array(self.y_code), array(self.y_code)
        row_d = take(self.row_d_buf, np.int64)
        row_t = take(self.row_t, np.int64)
        self.row_d_buf, self.row_t = array("q"), array("q")
        row_dev = row_t * row_d
        del row_t
        vd = np.int32 if not len(row_dev) or int(row_dev.max()) < 2**31 else np.int64
        row_d, row_dev = row_d.astype(vd), row_dev.astype(vd)
        self._run_chunk()
        chunks = [list(c) for c in self.run_chunks]
        self.run_chunks = []
        n_runs = sum(len(c[0]) for c in chunks)

        def column(i):  # one column of the runs, joined; the chunks' copies freed at once
            got = np.concatenate([c[i] for c in chunks]) if chunks else np.empty(0, dtype=np.int64)
            for c in chunks:
                c[i] = None
            return got

        idx = np.int32 if max(self.n_rows, self.n_groups, n_runs) < 2**31 - 1 else np.int64
        r_cnt = column(3)
        n = int(r_cnt.sum())
        # group g of a run starting at group g0 has row r_row + (g - g0)
        self.group_set = np.repeat(column(0).astype(idx), r_cnt)
        self.group_back = np.repeat(column(1).astype(idx), r_cnt)
        self.group_row = np.repeat((column(2) - (np.cumsum(r_cnt) - r_cnt)).astype(idx), r_cnt)
        self.group_row += np.arange(n, dtype=idx)
        del r_cnt, chunks
        self.runs = [array("q") for _ in range(4)]
        # groups must be processed by increasing I (J is always smaller than I); the
        # builder emits them so, the sort is a fallback
        if n > 1 and not bool(np.all(self.group_set[1:] >= self.group_set[:-1])):
            order = np.argsort(self.group_set, kind="stable")
            self.group_set, self.group_back, self.group_row = (
                self.group_set[order],
                self.group_back[order],
                self.group_row[order],
            )
            del order
        self.group_d = row_d[self.group_row]
        self.group_devices = row_dev[self.group_row]
        self.group_monotone = self.row_monotone[self.group_row]


def _compact(a: np.ndarray) -> np.ndarray:
    """``a`` (int64, >= 0) as int32 when every value fits, else as it is."""
    return a.astype(np.int32) if len(a) and int(a.max()) < 2**31 else a


def build_stage_tables(
    inst: Instance,
    ideals: list[int],
    d_values: list[int],
    S: int,
    greedy: bool,
    choices: OptionChoices,
    *,
    ub: float | None = None,
    progress=None,
    plain_paths: bool = True,
    max_bytes: float | None = None,
    group_bytes: int = 0,
    deadline: Deadline | None = None,
) -> StageTables:
    """The stage tables of every candidate stage I \\\\ J of the family ``ideals``.

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions.
    ideals : list of int
        Successor-closed sets as bitmasks, by size (the empty set first, the whole graph
        last); every I \\\\ J with I, J in the family and J inside I is a candidate.
    d_values : list of int
        The allowed data-parallel degrees (divisors of N, at most S).
    S : int
        min(N, K), the largest suffix sum of d.
    greedy : bool
        Piper's rule (sec. 5) instead of the exact choice.
    choices : OptionChoices
        The memo of exact choices, used near the memory boundary.
    ub : float, optional
        An upper bound on the optimum: stages that cannot be in a plan of value <= ub
        (device lower bounds from work / ub and least memory / M) are skipped.
    progress : callable, optional
        Called with the number of sets done.
    plain_paths : bool
        Use the fast paths for nodes whose options differ only in p, a, b (False: treat
        every node as general; the same tables, slower; for tests).
    max_bytes : float, optional
        Refuse (SizeLimitError, one line saying what to change) as soon as the tables pass
        this many bytes while being built; None: no limit.
    group_bytes : int
        Bytes per candidate stage that the caller will add (the decision's own arrays),
        counted against ``max_bytes`` too.
    deadline : Deadline, optional
        Checked per set and per stage made: :class:`dp.deadline.TimeUp` once it passes.

    Returns
    -------
    StageTables
        With ``pairs`` (stage candidates (I, J) kept), ``work_of`` and ``front_work_of``
        (per set: least device-seconds per sample inside it and outside it).
    """
    builder = _StageTableBuilder(inst, ideals, d_values, S, greedy, choices, ub, plain_paths)
    if deadline is not None:
        builder.check = deadline.check
    builder.tables.max_bytes, builder.tables.source = max_bytes, inst.source
    builder.tables.extra_group_bytes = group_bytes
    tables = builder.build(progress or (lambda k: None))
    tables.pairs = builder.pairs
    tables.work_of = builder.work_of
    tables.front_work_of = builder.front_work_of
    return tables


class _StageTableBuilder:
    """Builds the stage tables: for every I, its subsets J in the family, and the stage
    C = I \\\\ J grown one node at a time (states remembered per C)."""

    def __init__(self, inst, ideals, d_values, S, greedy, choices, ub, plain_paths):
        self.inst = inst
        # an upper bound of 0 (a plan of TPS 0 exists) prunes nothing by work: every stage may
        # then cost 0, and work / ub would divide by zero
        self.ub = ub if ub is not None and 0.0 < ub < math.inf else None
        self.check = Deadline(None).check  # raises TimeUp past the solve's time limit
        self.ideals = ideals
        self.index = {I: k for k, I in enumerate(ideals)}
        self.S = S
        self.greedy = greedy
        self.choices = choices
        self.N, self.B, self.M, self.K = inst.N, inst.B, inst.M, inst.K
        ids = inst.node_ids
        self.ids = ids
        self.pos = {v: i for i, v in enumerate(ids)}
        n = len(ids)
        # float memory sums decide only away from the boundary (dp.memory)
        band = float_band(2 * n + 2)
        self.mem_sure = fits_certainly_limit(self.M, band)
        self.mem_maybe = fits_possibly_limit(self.M, band)
        # decisions on frontier rows: a row kept by the filters (at most one drop per node
        # added, per option group and for the node's own options) may stand for a choice
        # that needs a little less; between mem_maybe and this, the exact sums decide
        self.mem_kept = kept_row_limit(self.M, band, 2 * n + 2, FILTER_LOW_BITS)
        self.pred_mask = [0] * n
        self.succ_mask = [0] * n
        # edges by index e; cut-mask bit 2e: e = (u -> v) cut at its head v (u outside the
        # stage, in front), bit 2e + 1: cut at its tail u (v behind the stage)
        self.preds: list[list[tuple[int, float, int]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float, int]]] = [[] for _ in range(n)]
        self.edge_ends: list[tuple[int, int, float]] = []
        for e in inst.edges:
            u, v = self.pos[e.src], self.pos[e.dst]
            k = len(self.edge_ends)
            self.edge_ends.append((u, v, e.c))
            self.pred_mask[v] |= 1 << u
            self.succ_mask[u] |= 1 << v
            self.preds[v].append((u, e.c, k))
            self.succs[u].append((v, e.c, k))
        # sink filters (_low_sink): offsets c with masks of the nodes u with an edge to
        # u + c (such a u is no sink of a set holding u + c); the few offsets that cover
        # the most nodes, chosen greedily
        self.sink_filters = self._sink_filters(n)
        self.plus_bits = [0] * n
        self.minus_bits = [0] * n
        for k, (u, v, _) in enumerate(self.edge_ends):
            self.plus_bits[v] |= 1 << (2 * k)
            self.minus_bits[u] |= 1 << (2 * k)
            self.plus_bits[u] |= 1 << (2 * k + 1)
            self.minus_bits[v] |= 1 << (2 * k + 1)
        self.cut_terms: dict[int, list] = {}
        self.cut_bytes_memo: dict[tuple[int, int], float] = {}
        self.t_values = inst.t_values
        self.ds = {
            t: np.array([d for d in d_values if t * d <= self.K and d <= S], dtype=np.int64)
            for t in self.t_values
        }
        self.cap = {t: -(-S // self.ds[t]) for t in self.t_values}
        # per (node, t): options as arrays; "plain" = options differ only in p, a, b
        self.opt_pab: dict[tuple[int, int], np.ndarray] = {}
        self.greedy_pending: list = []
        self.plain: dict[tuple[int, int], bool] = {}
        self.m1min: dict[tuple[int, int], float] = {}
        for i, nd in enumerate(inst.nodes):
            for t, opts in nd.options.items():
                o0 = opts[0]
                self.plain[(i, t)] = plain_paths and all(
                    o.w == o0.w and dict(o.sfw) == dict(o0.sfw) and dict(o.sbw) == dict(o0.sbw)
                    for o in opts
                )
                rows = np.array(
                    [(o.p, o.a, o.b, o.a + o.b, S * o.a + o.b) for o in opts], dtype=float
                )
                # options dominated in (p, memory at y = 1, memory at y = S) never help
                self.opt_pab[(i, t)] = (
                    rows[pareto_mask(rows[:, (0, 3, 4)])] if len(rows) > 1 else rows
                )
                self.m1min[(i, t)] = min(o.a + o.b for o in opts)
        # per (node, t) for the states: (plain, least a + b, w of the first option, options)
        self.node_t = {
            (i, t): (self.plain[(i, t)], self.m1min[(i, t)], opts[0].w, self.opt_pab[(i, t)])
            for i, nd in enumerate(inst.nodes)
            for t, opts in nd.options.items()
        }
        if greedy:
            self.greedy_plain_data = {t: self._greedy_plain_data(t) for t in self.t_values}
        self.tables = StageTables(max_y=S)
        self.item_id: dict[tuple, int] = {}
        self.items: list[tuple] = []
        self.node_item: dict[tuple, int] = {}
        self.greedy_cache: dict[tuple, list] = {}
        # greedy mode: the rows of stage C under t (plain stages: first row, and the count
        # of rows before each d of ds[t]), and of each profile of greedy_cache, stored once
        # and shared by the pairs
        self.greedy_rows: dict[tuple[int, int], tuple[int, list]] = {}
        self.greedy_profile_rows: dict[tuple, list] = {}
        # exact mode: the rows of stage C per t, shared by every pair (I, J) with
        # I \\ J = C (its stage id; see build and _flush_exact)
        self.block_memo: dict[int, int] = {}
        # per stage id (in queue order), per t, its rows: first row (-1: none for this t)
        # and the running count of rows by d; whether it has rows for some t
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
        # exact mode: stages whose rows are still to be made and the sets I whose pairs
        # wait for them (see _flush_exact)
        self.exact_stages: list = []
        self.exact_sinks: list = []  # per queued stage: its nodes without successors in it
        self.sinks_over: dict[int, int] = {}  # per set J (index): see _sinks_over
        self.exact_pairs: list = []
        self.exact_pair_count = 0
        self.state_memo_points = STATE_MEMO_POINTS
        # exact mode: table points costing more than this cannot be in a plan of value <= ub
        self.cost_cut = None if ub is None or greedy else ub * (1.0 + 1e-9)
        # greedy mode: stage states (W, plain, None, least memory) per stage C with the cut
        # bitmasks (plus, minus) of its nodes; forgotten wholesale past state_memo_points
        # points (exact mode: self.states)
        self.state_memo: dict[int, tuple] = {}
        self.memo_points = 0
        self.empty_state = ({t: (0.0, True, None, 0.0) for t in self.t_values}, 0, 0)
        self.pairs = 0
        # work_v = least device-seconds per sample of node v (min over t, options of t p):
        # a stage C needs t d >= work(C) / T devices to cost <= T
        self.work_node = [
            min((t * o.p for t, opts in nd.options.items() for o in opts), default=0.0)
            for nd in inst.nodes
        ]
        # least memory of node v (min over t, options of a + b; every stage has y >= 1): a
        # part X needs at least sum / M stages, each on a device of its own
        self.mem_node = [
            min((o.a + o.b for opts in nd.options.values() for o in opts), default=0.0)
            for nd in inst.nodes
        ]
        # work and least memory of every set of the family and of its complement, each a
        # sum of its own non-negative terms
        member = membership(ideals, n)
        work = np.array(self.work_node, dtype=float)
        mem = np.array(self.mem_node, dtype=float)
        self.work_of = member @ work if n else np.zeros(len(ideals))
        self.mem_of = member @ mem if n else np.zeros(len(ideals))
        self.front_work_of = (1.0 - member) @ work if n else np.zeros(len(ideals))
        self.front_mem_of = (1.0 - member) @ mem if n else np.zeros(len(ideals))
        self.all_mask = (1 << n) - 1
        # exact mode: the states of the stages, in flat arrays (they hold no reference to
        # the builder: with the cyclic collector paused, a cycle would keep both alive)
        self.states = (
            None
            if greedy
            else ExactStates(
                self,
                FILTER_LOW_BITS,
                partial(lowest_sink, succ=self.succ_mask, filters=self.sink_filters),
            )
        )

    # ---- cut edges ----------------------------------------------------------------------
    # Edge e = (u -> v) has a head bit 2e (cut at v: v in the stage, u not) and a tail bit
    # 2e + 1 (cut at u: u in the stage, v not). With plus[x] = head bits of x's in-edges |
    # tail bits of its out-edges and minus[x] = head bits of its out-edges | tail bits of
    # its in-edges, the cut of a stage C is OR(plus over C) & ~OR(minus over C): two ORs
    # per node added, exact, in any order.

    def _cut_terms(self, t: int) -> list:
        """Per cut bit (head bit 2e, tail bit 2e + 1 of edge e): its term of E under t,
        cut_edge_bytes with the endpoint's first option for t (nan when the endpoint has
        no option for t)."""
        terms = self.cut_terms.get(t)
        if terms is None:
            terms = []
            ids = self.ids
            for u, v, c in self.edge_ends:
                ov = self.inst.nodes[v].options.get(t)
                ou = self.inst.nodes[u].options.get(t)
                terms.append(cut_edge_bytes(c, ov[0].sfw[ids[u]]) if ov else math.nan)
                terms.append(cut_edge_bytes(c, ou[0].sbw[ids[v]]) if ou else math.nan)
            self.cut_terms[t] = terms
        return terms

    def _cut_bytes(self, t: int, cut: int) -> float:
        """E of a plain stage under t: fsum over its cut edges of cut_edge_bytes, with each
        endpoint's first option for t (plain nodes: every option has the same sfw, sbw)."""
        key = (t, cut)
        got = self.cut_bytes_memo.get(key)
        if got is None:
            terms = self._cut_terms(t)
            vals = []
            m = cut
            while m:  # (bits(cut), inline: this runs once per stage and cut in greedy mode)
                low = m & -m
                vals.append(terms[low.bit_length() - 1])
                m ^= low
            got = math.fsum(vals)
            self.cut_bytes_memo[key] = got
        return got

    def _cut_bytes_many(self, t: int, cuts: list) -> np.ndarray:
        """:meth:`_cut_bytes` of many cut bitmasks at once, the same floats: each mask's
        terms laid out in a row (:func:`dp.exact_sums.fsum_rows`)."""
        terms = np.array(self._cut_terms(t), dtype=float)
        m = len(cuts)
        if not m or not len(terms):
            return np.zeros(m)
        nb = (len(terms) + 7) // 8
        raw = np.frombuffer(
            b"".join(c.to_bytes(nb, "little") for c in cuts), dtype=np.uint8
        ).reshape(m, nb)
        # the set bits, row by row and rising: only the non-zero bytes are unpacked (a cut
        # has a few edges of many)
        r, byte = np.nonzero(raw)
        k, bit = np.nonzero(np.unpackbits(raw[r, byte][:, None], axis=1, bitorder="little"))
        r, col = r[k], byte[k] * 8 + bit
        cnt = np.bincount(r, minlength=m)
        vals = np.zeros((m, int(cnt.max()) if len(r) else 0))
        vals[r, np.arange(len(r)) - (np.cumsum(cnt) - cnt)[r]] = terms[col]
        return fsum_rows(vals)

    # ---- the states ---------------------------------------------------------------------
    def _lb(
        self, work: np.ndarray, nonempty: np.ndarray, mem: np.ndarray | float = 0.0
    ) -> np.ndarray:
        """Fewest devices each part (work, least memory) needs when every stage costs
        <= ub (0 for an empty part), elementwise."""
        # capped at K + 1 (more than any plan has), so a huge ratio never overflows ceil
        cap = self.K + 1
        by_work = np.minimum(work / self.ub * (1.0 - 1e-9), cap)
        by_mem = np.minimum(mem / self.M * (1.0 - 1e-9), cap)
        lb = np.maximum(np.maximum(1.0, np.ceil(by_work)), np.ceil(by_mem)).astype(np.int64)
        return np.where(nonempty, lb, 0)

    def _candidate_pairs(self, masks: np.ndarray):
        """Per set I of the family (index k >= 1, in order): (k, js, dev_lo, dev_hi), the
        sets J inside I whose stage C = I \\ J is kept (increasing J) and, with an upper
        bound, each one's device range [dev_lo, dev_hi] (else None, None); sets with no
        plan within the bound are skipped. Made for blocks of sets at once (a subset
        test of blocks x sets, :data:`BUILD_BLOCK_ELEMENTS`).

        A pair is skipped when the least memory of C's nodes cannot fit (then no option
        choice of any t does). With an upper bound ub on the optimum, a stage C between a
        front part (all \\ I) and a back part J is kept only when lb(C) + lb(front) +
        lb(J) <= K, lb(X) = max(1, ceil(work(X) / ub), ceil(least memory(X) / M)) (0 for
        an empty part; for C the work alone): each stage of a plan of value <= ub needs
        t d >= work / ub devices. Work and memory of C are differences of the sets' sums,
        lowered by a bound on their rounding error, so every bound is a true lower bound."""
        ideals, ub, K = self.ideals, self.ub, self.K
        nI = len(ideals)
        n = len(self.ids)
        # differences of float sums of non-negative terms: error at most about 2 n eps of
        # the larger sum (each sum is within n eps of the exact one)
        rel_err = (2 * n + 8) * 2.0**-52
        work_of, mem_of = self.work_of, self.mem_of
        if ub is not None:
            # device lower bounds of the part behind each stage (J) and in front of it
            lb_back = self._lb(work_of, np.array([I != 0 for I in ideals], dtype=bool), mem_of)
            front_nonempty = np.array([(self.all_mask & ~I) != 0 for I in ideals], dtype=bool)
            lb_front = self._lb(self.front_work_of, front_nonempty, self.front_mem_of)
            # the stages of I need at least ceil(work(I) / ub) devices in all
            live = lb_front + self._lb(work_of, True) <= K
            slack = 1.0 - 1e-9
            all_devices = sorted_unique(
                np.concatenate(
                    [t * self.ds[t] for t in self.t_values] + [np.zeros(1, dtype=np.int64)]
                )
            )
        block = max(1, BUILD_BLOCK_ELEMENTS // max(nI, 1))
        for k0 in range(1, nI, block):
            ks = np.arange(k0, min(nI, k0 + block))
            if ub is not None:
                ks = ks[live[ks]]
                if not len(ks):
                    continue
            k1 = int(ks[-1])
            # inside[r, j]: J = ideals[j] (j < ks[r]) is a subset of I = ideals[ks[r]]
            inside = np.arange(k1)[None, :] < ks[:, None]
            for w in range(masks.shape[1]):
                inside &= (masks[None, :k1, w] & ~masks[ks, w][:, None]) == 0
            r, js = np.nonzero(inside)
            del inside
            kk = ks[r]
            mem_c = (mem_of[kk] - mem_of[js]) - rel_err * mem_of[kk]
            fit = mem_c <= self.mem_maybe
            r, js, kk = r[fit], js[fit], kk[fit]
            dev_lo = dev_hi = None
            if ub is not None:
                work_c = np.maximum((work_of[kk] - work_of[js]) - rel_err * work_of[kk], 0.0)
                dev_lo = np.minimum(work_c / ub * slack, K + 1)
                lbc = np.maximum(1, np.ceil(dev_lo)).astype(np.int64)
                room = K - lb_front[kk] - lb_back[js]
                ok = lbc <= room
                # and some allowed t d lies in [dev_lo, room]
                at = np.minimum(np.searchsorted(all_devices, dev_lo), len(all_devices) - 1)
                ok &= all_devices[at] >= dev_lo
                ok &= all_devices[at] <= room
                r, js, dev_lo, dev_hi = r[ok], js[ok], dev_lo[ok], room[ok]
            cuts = np.searchsorted(r, np.arange(len(ks) + 1)).tolist()
            for i, k in enumerate(ks.tolist()):
                a, b = cuts[i], cuts[i + 1]
                if ub is None:
                    yield k, js[a:b], None, None
                else:
                    yield k, js[a:b], dev_lo[a:b], dev_hi[a:b]

    def build(self, progress) -> StageTables:
        """For each I: the sets J of the family inside it (:meth:`_candidate_pairs`), and
        for each kept pair the stage C = I \\ J (its state, grown one node at a time and
        remembered per C, :meth:`_state`)."""
        if self.states is not None:
            self.states.check = self.check  # (the solve's deadline, set after __init__)
        ideals = self.ideals
        ub = self.ub
        n = len(self.ids)
        words = max(1, (n + 63) // 64)
        masks = np.array(
            [[(m >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for w in range(words)] for m in ideals],
            dtype=np.uint64,
        )
        for k, js, dev_lo, dev_hi in self._candidate_pairs(masks):
            progress(k)
            self.check()
            I = ideals[k]
            # largest J first: C grows, and its state extends a state of this I just made
            if self.greedy:
                if dev_lo is not None:
                    dev_lo, dev_hi = dev_lo.tolist(), dev_hi.tolist()
                for pos in range(len(js) - 1, -1, -1):
                    J = ideals[js[pos]]
                    C = I & ~J
                    sts, cut = self._state(C)
                    if sts:
                        self.pairs += 1
                        self._emit_pair(
                            k, I, J, cut, sts, None if ub is None else (dev_lo[pos], dev_hi[pos])
                        )
                continue
            # exact mode: the rows of C (per t: the rows' t d and the first row) are made
            # once per C (queued and made many stages at a time, :meth:`_flush_exact`);
            # each pair emits the slice of them its device range allows, once its stages
            # are made (the pairs of this I wait in the queue with them)
            memo = self.block_memo
            jks = js[::-1]
            if words == 1:  # the stages as 64-bit masks, made in one pass
                Cs = (masks[k, 0] & ~masks[jks, 0]).tolist()
            else:
                Cs = [I & ~ideals[jk] for jk in jks.tolist()]
            sids = list(map(memo.get, Cs))
            pos = 0
            n_new = sids.count(None)
            queue, sinks = self.exact_stages, self.exact_sinks
            for _ in range(n_new):  # (list.index finds the new stages without a Python loop)
                pos = sids.index(None, pos)
                C = Cs[pos]
                sid = memo.get(C)  # (an earlier J of this I may have queued it)
                if sid is None:  # queued for _flush_exact, which makes its state and rows
                    sid = memo[C] = self.n_stages
                    self.n_stages += 1
                    queue.append(C)
                    sinks.append(self._sinks_over(int(jks[pos])) & C)
                sids[pos] = sid
            if len(jks):
                self.exact_pairs.append((k, jks, sids, dev_lo, dev_hi))
                self.exact_pair_count += len(jks)
            if (
                len(self.exact_stages) >= EXACT_BATCH_STAGES
                or len(self.exact_pairs) >= EXACT_BATCH_SETS
                or self.exact_pair_count >= EXACT_BATCH_PAIRS
            ):
                self._flush_exact()
        progress(len(ideals) - 1)  # (sets that no plan within the bound reaches are skipped)
        if self.exact_pairs or self.exact_stages:
            self._flush_exact()
        if self.greedy_pending:
            self._flush_greedy()
        # the memos are not needed any more: free them before the tables are assembled
        self.state_memo.clear()
        self.block_memo.clear()
        self.states = None
        self.tables.finalize()
        return self.tables

    def _state(self, C: int):
        """Greedy mode: the state of stage C (dict t -> (W, plain, None, least memory), only
        the t where some choice may fit) and its cut-edge bitmask, from the state of C minus
        a node without successors in C (found in the memo, or made first, and so on down)."""
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
            v = self._low_sink(X)
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

    def _sinks_over(self, jk: int) -> int:
        """The nodes outside J = ideals[jk] whose successors all lie in J (remembered per
        J). For a successor-closed I holding J, the nodes of the stage I \\ J without
        successors in it are these nodes of I \\ J: a successor of a node of I is in I,
        so it is outside the stage iff it is in J."""
        got = self.sinks_over.get(jk)
        if got is None:
            outside = self.all_mask & ~self.ideals[jk]
            preds = 0
            for w in bits(outside):
                preds |= self.pred_mask[w]
            got = self.sinks_over[jk] = outside & ~preds
        return got

    def _sink_filters(self, n: int, most: int = 4) -> list[tuple[int, int]]:
        """Up to ``most`` pairs (c, mask of the nodes u with an edge u -> u + c), chosen
        greedily to cover the most nodes not covered yet (ResNet's node order has edges
        to u - 1 and u + 3 as often as to u + 1)."""
        succ = self.succ_mask
        offsets: dict[int, int] = {}
        for u in range(n):
            for v in bits(succ[u]):
                offsets[v - u] = offsets.get(v - u, 0) | 1 << u
        out = []
        covered = 0
        for _ in range(most):
            c, mask = max(
                offsets.items(),
                key=lambda kv: ((kv[1] & ~covered).bit_count(), -abs(kv[0])),
                default=(0, 0),
            )
            if not mask & ~covered:
                break
            out.append((c, mask))
            covered |= mask
            del offsets[c]
        return out

    def _low_sink(self, X: int) -> int:
        """The lowest node of X (a non-empty set, bitmask) with no successor in X (one
        exists: the graph is acyclic); the node the states peel off X."""
        return lowest_sink(X, self.succ_mask, self.sink_filters)

    def _extend(self, st, v: int, t: int):
        """Greedy mode: state of stage C + v under t, (W, plain, None, m1min), or None when
        no option choice can fit (then no larger stage fits either). (Exact mode:
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

    # ---- one candidate stage -------------------------------------------------------------
    def _emit_pair(
        self, k: int, I: int, J: int, cut: int, states: dict, devices: tuple | None = None
    ):
        """Greedy mode: tables of stage C = I \\\\ J for each t (and each d with t d in
        ``devices`` = (least, most), when given). (Exact mode shares the tables per C:
        the queue of :meth:`_flush_exact`.)"""
        jk = self.index[J]
        C = I & ~J
        for t, (W, plain, fr, _) in states.items():
            ds, caps = self.ds[t], self.cap[t]
            if devices is not None:
                keep = (t * ds >= devices[0]) & (t * ds <= devices[1])
                if not keep.all():
                    ds, caps = ds[keep], caps[keep]
            if not len(ds):
                continue
            if plain:
                self._emit_greedy_plain(k, jk, t, C, self._cut_bytes(t, cut), W, ds)
            else:
                self._emit_greedy(k, jk, t, I, J, C, ds)

    def _flush_exact(self):
        """Make the states of the queued stages (:class:`dp.exact_states.ExactStates`),
        then their rows (plain stages: many per numpy pass, :meth:`_exact_plain_batch`;
        general ones one at a time, :meth:`_exact_blocks`), then emit the queued pairs'
        groups in their order. The states are forgotten once they pass
        ``state_memo_points`` (states plus frontier rows)."""
        stages, self.exact_stages = self.exact_stages, []
        sinks, self.exact_sinks = self.exact_sinks, []
        states = self.states
        ids = np.array(states.make(stages, sinks), dtype=np.int64)
        q0 = self.n_recorded
        n = len(stages)
        self._grow_stage_arrays(q0 + n)
        self.n_recorded += n
        nonempty = np.zeros(n, dtype=bool)
        for t in self.t_values:
            alive = states.alive[t][ids]
            nonempty |= alive
            plain = states.plain[t][ids]
            for i in np.flatnonzero(alive & ~plain).tolist():  # general stages
                s = int(ids[i])
                blocks = self._exact_blocks(
                    stages[i], t, states.cut(s), float(states.W[t][s]), False, None
                )
                self._record_rows(t, q0 + i, *self._store_rows(t, blocks))
            fast = np.flatnonzero(alive & plain)
            # in pieces of about EXACT_BATCH_POINTS frontier rows
            for a, b in pieces(states.cnt[t][ids[fast]], EXACT_BATCH_POINTS):
                self.check()
                self._exact_plain_batch(t, stages, ids, q0, fast[a:b])
        self.stage_nonempty[q0 : q0 + n] = nonempty
        if states.size() > self.state_memo_points:
            states.forget()
        self._emit_pairs()

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
        pairs, self.exact_pairs = self.exact_pairs, []
        self.exact_pair_count = 0
        if not pairs:
            return
        cnt_per = np.array([len(p[1]) for p in pairs], dtype=np.int64)
        K = np.repeat(np.array([p[0] for p in pairs], dtype=np.int64), cnt_per)
        JK = np.concatenate([p[1] for p in pairs]).astype(np.int64, copy=False)
        SID = np.fromiter(
            itertools.chain.from_iterable(p[2] for p in pairs), dtype=np.int64, count=len(JK)
        )
        self.pairs += int(self.stage_nonempty[SID].sum())
        if self.ub is not None:
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
            if self.ub is None:
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

    def _exact_plain_batch(self, t: int, stages: list, ids: np.ndarray, q0: int, pick: np.ndarray):
        """The rows under t of the plain stages ``stages[i]`` (state ``ids[i]``, stage id
        q0 + i) for i in ``pick``, at once: the same float operations per point as
        :meth:`_exact_blocks` (y capacities, the staircase, the costs per d, the upper
        bound's cut), on their frontiers laid end to end. Stages where the float sums do
        not decide every y, or where no point holds y = 1, go through
        :meth:`_exact_blocks` one at a time."""
        states = self.states
        ds, caps = self.ds[t], self.cap[t]
        nd = len(ds)
        sp = ids[pick]
        lens = states.cnt[t][sp]
        ns = len(pick)
        seg = np.repeat(np.arange(ns), lens)
        starts = np.cumsum(lens) - lens
        F = states.store[t][np.repeat(states.off[t][sp] - starts, lens) + np.arange(len(seg))]
        A, Bm = F[:, 1], F[:, 2]
        maybe, mem_at = _y_capacity_and_memory(A, Bm, self.mem_kept, self.S)
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
        slow = undecided | (nk_of == 0)
        for r in np.flatnonzero(slow).tolist():
            i, s = int(pick[r]), int(sp[r])
            blocks = self._exact_blocks(
                stages[i], t, states.cut(s), float(states.W[t][s]), True, states.frontier(t, s)
            )
            self._record_rows(t, q0 + i, *self._store_rows(t, blocks))
        if bool(slow.all()):
            return
        fast = np.flatnonzero(~slow)
        E = self._cut_bytes_many(t, states.cuts(sp[fast].tolist()))
        Wv = states.W[t][sp[fast]]
        # stage s of the batch (its index among the fast ones) per kept point
        rank = np.cumsum(~slow) - 1
        sk = rank[segk]
        nf = len(fast)
        Pk, ycap = F[kept, 0], maybe[kept]
        dcol = ds[:, None].astype(float)
        cost = stage_tps_from_sums(
            E[sk][None, :], Wv[sk][None, :], Pk[None, :], dcol, self.N, self.B
        )
        yhi = np.minimum(ycap[None, :], caps[:, None])
        keep = _serves_more(yhi, sk[1:] != sk[:-1])
        cut = self.cost_cut
        if cut is not None:
            keep &= cost <= cut
        # lay the points out row by row: stage, then d, then the stage's points
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
        self._record_rows(t, q0 + pick[fast], cums, firsts)

    def _store_rows(self, t: int, blocks: list) -> tuple[np.ndarray, int]:
        """Store the rows of ``blocks`` (monotone, by increasing d) in the tables, without
        the points that serve no y their row's point before them does not
        (:func:`_serves_more`), without those that cost more than the upper bound allows
        (with a relative margin of 1e-9, so every plan of value <= ub keeps all its
        points) and without rows left empty; the running count of the rows by d (over
        ``self.ds[t]``, from 0) and the index of the first row (the rows are consecutive)."""
        devs: list[int] = []
        first = self.tables.n_rows
        cut = self.cost_cut
        for bdevs, bds, cost, ylo, yhi in blocks:
            keep = _serves_more(yhi)
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

    def _exact_blocks(self, C: int, t: int, cut: int, W: float, plain: bool, fr) -> list:
        """The exact tables of stage C under t for every allowed d: blocks (t d as a list,
        ds, cost, ylo, yhi), rows by increasing d."""
        ds, caps = self.ds[t], self.cap[t]
        blocks = []
        if plain:
            E = self._cut_bytes(t, cut)
            P, A, Bm = fr[:, 0], fr[:, 1], fr[:, 2]
            sure, maybe, decided = y_capacities(A, Bm, self.mem_sure, self.mem_kept, self.S)
            if decided:
                keep = _staircase(P, sure)
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
        nodes = [self.ids[i] for i in bits(C)]
        fr = pareto_frontier(stage_items(self.inst, nodes, t), self.M, y_range=(1, self.S))
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
            keep = _staircase(cost, yc)
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
        the exact choice (:class:`OptionChoices`, exact memory sums). Returns the table
        row (cost, ylo, yhi) as 1 x points arrays, or None when no y fits."""
        sure = np.minimum(sure, cap)
        maybe = np.minimum(maybe, cap)
        val = np.full(cap + 2, np.inf)
        np.minimum.at(val, sure, cost)
        val = np.minimum.accumulate(val[::-1])[::-1][1 : cap + 1]  # y = 1..cap
        for ya, yb, got in self._exact_runs(
            C, t, d, _union(zip((sure + 1).tolist(), maybe.tolist()))
        ):
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

    def _exact_runs(self, C, t, d, spans):
        """The exact least cost of stage C under (t, d) at every y of ``spans`` (disjoint
        sorted (first, last) ranges), as runs (first y, last y, cost) of one cost (inf
        where nothing fits): :func:`dp.knapsack.monotone_runs` over the spans' y in order,
        so a span costs a few exact choices per step of the cost rather than one per y
        (a million y, for K = 2^20, took minutes)."""
        starts = list(itertools.accumulate((b - a + 1 for a, b in spans), initial=0))

        def y_at(i):  # the i-th y of the spans
            k = bisect.bisect_right(starts, i) - 1
            return spans[k][0] + i - starts[k]

        def cost(i):
            got = self.choices.exact_cost(C, t, d, y_at(i))
            return math.inf if got is None else got

        out = []
        for i, j, c in monotone_runs(
            starts[-1], cost
        ):  # back to y, split where the spans have gaps
            while i <= j:
                k = bisect.bisect_right(starts, i) - 1
                end = min(j, starts[k + 1] - 1)
                out.append((y_at(i), y_at(end), c))
                i = end + 1
        return out

    # ---- greedy mode -----------------------------------------------------------------------
    def _item(self, i: int, t: int, cut_in: int, cut_out: int) -> int:
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

    def _greedy_plain_data(self, t: int):
        """Greedy mode, plain nodes under t: per node position i, its options as
        (p0, p1, a0, b0, a1, b1, w, two options) (a single option repeated), its incident
        edges in the order Piper's rule sums them (dp.greedy_rule: incoming, then outgoing,
        each in input order) as the terms 2 (c + sync) and the other end's position
        (padding: the term 0 at the node itself, never cut), and a class id per node (equal
        for equal options)."""
        n = len(self.ids)
        ids = self.ids
        opt = np.full((n, 8), np.nan)
        deg = max((len(self.preds[i]) + len(self.succs[i]) for i in range(n)), default=0)
        terms = np.zeros((n, deg))
        other = np.tile(np.arange(n)[:, None], (1, deg))
        for i, nd in enumerate(self.inst.nodes):
            opts = nd.options.get(t)
            if not opts or len(opts) > 2 or not self.plain[(i, t)]:
                continue
            o0, o1 = opts[0], opts[-1]
            opt[i] = (o0.p, o1.p, o0.a, o0.b, o1.a, o1.b, o0.w, float(len(opts) == 2))
            ends = [(u, cut_edge_bytes(c, o0.sfw[ids[u]])) for u, c, _ in self.preds[i]]
            ends += [(x, cut_edge_bytes(c, o0.sbw[ids[x]])) for x, c, _ in self.succs[i]]
            for j, (u, term) in enumerate(ends):
                other[i, j], terms[i, j] = u, term
        # nodes with the same options share a class (the rule sees only these numbers)
        classes: dict[bytes, int] = {}
        cls = np.array([classes.setdefault(row.tobytes(), len(classes)) for row in opt])
        return opt, terms, other, cls.astype(np.int64)

    def _emit_greedy_plain(self, k, jk, t, C, E, W, ds):
        """Piper's rule on a stage whose nodes' options differ only in p, a, b: queued, the
        rows of C under t made once for every d (many stages at a time, see
        :meth:`_flush_greedy`); E and W come from the state."""
        self.greedy_pending.append((k, jk, t, C, E, W, ds))
        if len(self.greedy_pending) >= 4096:
            self._flush_greedy()

    def _flush_greedy(self):
        """Make the rows of every queued plain stage C under t that has none yet
        (:meth:`_greedy_plain_rows`), then emit each queued pair's groups: the rows of its
        d (a contiguous range of ``ds[t]``) that have points."""
        pending, self.greedy_pending = self.greedy_pending, []
        memo = self.greedy_rows
        new: dict[int, dict[int, tuple]] = {}
        for _k, _jk, t, C, E, W, _ds in pending:
            if (C, t) not in memo:
                new.setdefault(t, {})[C] = (E, W)
        for t, stages in new.items():
            self.check()
            self._greedy_plain_rows(t, list(stages.items()))
        for k, jk, t, C, _E, _W, ds in pending:
            first, cum = memo[(C, t)]
            i0 = 0 if len(ds) == len(self.ds[t]) else int(np.searchsorted(self.ds[t], ds[0]))
            lo, hi = cum[i0], cum[i0 + len(ds)]
            if hi > lo:
                self.tables.add_groups(k, jk, first + lo, hi - lo)

    def _greedy_plain_rows(self, t: int, stages: list):
        """The rows of plain stages C under t, one per d of ``ds[t]`` where Piper's rule
        finds a choice for some y <= cap (``stages`` lists (C, (E, W))), stored stage by
        stage, d by d, into ``greedy_rows[(C, t)]`` = (first row, count of rows before each
        d). A node's cost depends on d and on its own cut edges, so the rule's node rows
        (dp.greedy_rule) are made per stage and d; stages whose nodes have the same options
        and cut bytes, in order, share their runs of y (:meth:`_greedy_plain_runs`)."""
        opt, terms, other, cls = self.greedy_plain_data[t]
        ds, caps = self.ds[t], self.cap[t]
        G, D = len(stages), len(ds)
        node_lists = [list(bits(C)) for C, _ in stages]
        sizes = np.array([len(x) for x in node_lists], dtype=np.int64)
        pos = np.fromiter(itertools.chain.from_iterable(node_lists), dtype=np.int64)
        g_of = np.repeat(np.arange(G), sizes)
        ends = np.cumsum(sizes)
        inside = membership([C for C, _ in stages], len(self.ids))
        e = running_sum(terms[pos] * (1.0 - inside[g_of[:, None], other[pos]]))
        # one representative per distinct (classes, cut bytes) sequence
        key_cls, key_e = cls[pos].tobytes(), e.tobytes()
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
        keep = np.zeros(G, dtype=bool)
        keep[rep] = True
        node_keep = keep[g_of]
        r_pos, r_e = pos[node_keep], e[node_keep]
        r_sizes = sizes[rep]
        r_of = np.repeat(np.arange(len(rep)), r_sizes)
        r_col = np.arange(len(r_pos)) - np.repeat(np.cumsum(r_sizes) - r_sizes, r_sizes)
        p0, p1, a0, b0, a1, b1, w, two = opt[r_pos].T
        two = two > 0
        E = np.array([ew[0] for _, ew in stages])
        W = np.array([ew[1] for _, ew in stages])
        width = int(sizes.max())
        cnt = np.zeros((G, D), dtype=np.int64)
        mono = np.ones((G, D), dtype=bool)
        points = []
        for j, d in enumerate(ds.tolist()):
            c0 = piper_cost(p0, r_e, w, d, self.N, self.B)
            c1 = piper_cost(p1, r_e, w, d, self.N, self.B)
            F = two & (c0 > c1)  # option 1 is F
            blocks = np.zeros((len(rep), width, 8))
            blocks[r_of, r_col] = np.stack(
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
            run_u, lo, hi, P, u_mono = self._greedy_plain_runs(blocks, r_sizes, int(caps[j]))
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
        # the points by stage, then d (stable: each d's points are by stage already)
        g_all = np.concatenate([x[0] for x in points])
        order = np.argsort(g_all, kind="stable")
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
        for g, (C, _) in enumerate(stages):
            self.greedy_rows[(C, t)] = (int(base[g]), cum[g].tolist())

    def _greedy_plain_runs(self, blocks: np.ndarray, sizes: np.ndarray, cap: int):
        """Piper's rule for y = 1..cap on node-row blocks (U, width, 8) (rows made by
        :meth:`_greedy_plain_rows`; block u has ``sizes[u]`` nodes, then zero padding),
        many blocks per numpy call. Returns the runs of equal choice over the y where the
        rule finds one, by block and y: block, y_lo, y_hi, P (the chosen p summed node by
        node in input order), and per block whether its runs are monotone (y = 1..k
        without gaps, P never falling)."""
        U = len(blocks)
        # above its last y the rule finds no choice for a block: the grid stops there
        last = greedy_last_y(
            *(blocks[:, :, j] for j in range(1, 5)), blocks[:, :, 5] > 0, cap, self.M
        )
        by_size = np.lexsort((sizes, last))
        by_size = by_size[last[by_size] > 0]
        parts = [(np.empty(0, dtype=np.int64),) * 3 + (np.empty(0),)]
        u_mono = np.ones(U, dtype=bool)
        step = max(1, 200_000 // (cap * max(1, int(sizes.max()))))
        for c0 in range(0, len(by_size), step):
            self.check()
            idx = by_size[c0 : c0 + step]
            block = blocks[idx, : int(sizes[idx].max())]
            ymax = int(last[idx].max())
            ys = np.arange(1, ymax + 1)
            sw, feas = greedy_rule_grid(
                *(block[:, :, j] for j in range(5)), block[:, :, 5] > 0, ys, self.M
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
            u_mono[idx] = ok
            parts.append((idx[sg], sy + 1, ey + 1, P))
        run_u, lo, hi, P = (np.concatenate([x[k] for x in parts]) for k in range(4))
        order = np.lexsort((lo, run_u))
        return run_u[order], lo[order], hi[order], P[order], u_mono

    def _emit_greedy(self, k, jk, t, I, J, C, allowed):
        ids = tuple(
            self._item(i, t, self.pred_mask[i] & ~I, self.succ_mask[i] & J) for i in bits(C)
        )
        key = (t, ids)
        got = self.greedy_cache.get(key)
        if got is None:
            got = self._greedy_profiles(ids, t)
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

    def _greedy_profiles(self, item_ids: tuple, t: int):
        """Piper's rule on a stage with general nodes, for each d (the ranking depends on d)
        and y = 1..cap: groups (ds, cost, ylo, yhi, monotone)."""
        rows = [self.items[k][0] for k in item_ids]
        out = []
        for d, cap in zip(self.ds[t].tolist(), self.cap[t].tolist()):
            runs = self._greedy_runs(rows, d, cap)
            if runs:
                lo, hi, P, E, W = (np.array(c) for c in zip(*runs))
                cost = stage_tps_from_sums(E, W, P, d, self.N, self.B)
                mono = _is_monotone(lo, hi, cost)
                out.append((np.array([d]), cost[None, :], lo[None, :], hi[None, :], mono))
        return out

    def _greedy_runs(self, rows, d: int, ymax: int):
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
        starts, ends, _ = _runs_batch(sw, feas)
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


def _runs_batch(sw: np.ndarray, feas: np.ndarray):
    """Maximal runs of consecutive y (axis 1 of ``sw`` (G, Y, n), y = index + 1) where the
    rule finds a choice (``feas`` (G, Y)) and the choice does not change. Returns per
    stage the arrays of first and last y of its runs, and whether the feasible y are
    1..k for some k (no gaps)."""
    G, Y = feas.shape
    same = np.ones((G, Y), dtype=bool)
    if Y > 1:
        same[:, 1:] = ~np.any(sw[:, 1:] != sw[:, :-1], axis=2)
    start = feas.copy()
    start[:, 1:] &= ~feas[:, :-1] | ~same[:, 1:]
    end = feas.copy()
    end[:, :-1] &= ~feas[:, 1:] | ~same[:, 1:]
    nfeas = feas.sum(axis=1)
    first_gap = np.where(feas.all(axis=1), Y, np.argmin(feas, axis=1))
    contiguous = first_gap == nfeas
    sg, sy = np.nonzero(start)
    eg, ey = np.nonzero(end)
    cut_s = np.searchsorted(sg, np.arange(G + 1))
    cut_e = np.searchsorted(eg, np.arange(G + 1))
    starts = [sy[cut_s[g] : cut_s[g + 1]] + 1 for g in range(G)]
    ends = [ey[cut_e[g] : cut_e[g + 1]] + 1 for g in range(G)]
    return starts, ends, contiguous


def _is_monotone(lo: np.ndarray, hi: np.ndarray, cost: np.ndarray) -> bool:
    """The runs cover y = 1..hi[-1] without gaps and their cost never falls: the group
    can be read as a monotone step function."""
    if not len(lo):
        return True
    return bool(lo[0] == 1 and np.all(lo[1:] == hi[:-1] + 1) and np.all(np.diff(cost) >= 0))


def _union(spans) -> list[tuple[int, int]]:
    """Integer ranges (first, last), empty ones dropped, as disjoint sorted ranges."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(sp for sp in spans if sp[0] <= sp[1]):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _serves_more(yhi: np.ndarray, new_stage: np.ndarray | None = None) -> np.ndarray:
    """Which points of monotone rows (one row per line of ``yhi``: a stage's points, by
    rising cost, under one d) serve a y the point before them does not: yhi rises, or the
    point is the first of its stage (``new_stage[j - 1]`` for column j, when several
    stages lie side by side). The others -- the points after the first that reaches d's
    cap on y -- cost more for the same y and are left out of the tables."""
    keep = np.ones(yhi.shape, dtype=bool)
    keep[:, 1:] = yhi[:, 1:] != yhi[:, :-1]
    if new_stage is not None:
        keep[:, 1:] |= new_stage[None, :]
    return keep


def lowest_sink(X: int, succ: list, filters: list) -> int:
    """The lowest node of X (a non-empty set, bitmask) with no successor in X (``succ``:
    each node's successors as a bitmask); ``filters`` (offset c, mask of the nodes u with
    an edge u -> u + c) skip nodes with a successor at u + c in X first."""
    m = X
    for c, mask in filters:
        m &= ~((X >> c if c > 0 else X << -c) & mask)
    while True:
        low = m & -m
        u = low.bit_length() - 1
        if not succ[u] & X:
            return u
        m ^= low


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


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending: ``np.unique(a)`` for arrays without NaN
    (each NaN is kept here), by the same sort. numpy's own ``unique`` loads ``numpy.ma`` on
    its first call, a cost every ``piper-ilp solve`` would pay at start-up.

    >>> sorted_unique(np.array([3.0, 1.0, 3.0, np.inf, 1.0])).tolist()
    [1.0, 3.0, inf]
    """
    s = np.sort(a, axis=None)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def membership(masks: list[int], n: int) -> np.ndarray:
    """0/1 matrix (len(masks) x n): bit i of each mask."""
    words = (n + 63) // 64
    out = np.zeros((len(masks), words * 64), dtype=np.uint8)
    for w in range(words):
        col = np.array([(m >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for m in masks], dtype=np.uint64)
        bits = np.unpackbits(col.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        out[:, 64 * w : 64 * w + 64] = bits
    return out[:, :n].astype(float)


def bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
