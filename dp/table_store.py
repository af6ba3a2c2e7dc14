"""The stage tables' storage: :class:`StageTables`, the candidate stages and their step
functions y -> least cost in flat arrays, filled by :func:`dp.stage_tables.build_stage_tables`
and read by the threshold search (:mod:`dp.threshold_search`) and the rebuild
(:mod:`dp.rebuild`).
"""

from __future__ import annotations

from array import array

import numpy as np

from dp.table_arrays import compact_index
from piper_ilp.errors import SizeLimitError

__all__ = ["StageTables"]


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
    :func:`dp.stage_tables.build_stage_tables` adds ``pairs``, ``work_of`` and
    ``front_work_of``.

    The rows and groups are collected in flat typed buffers (:mod:`array`) while they are
    built, so a row or a run of groups costs its numbers and no Python objects; runs
    made many at a time (exact mode) are kept as numpy chunks and joined once.

    Parameters
    ----------
    max_bytes : float, optional
        Refuse (:class:`~piper_ilp.errors.SizeLimitError`, one line) as soon as the
        tables pass this many bytes while they are built; None: no limit.
    source : str
        The instance's file name, for the message.
    extra_group_bytes : int
        Bytes per group that other parts (the decision) will add, counted by the guard.
    max_y : int
        The largest y a point may serve: y is stored as int32 below 2**31, else int64.
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
                f"{self.source}: the DP's stage tables and decision arrays passed "
                f"{self.max_bytes / 2**30:.1f} GiB while being built (too many candidate stages "
                f"x (t, d) x y ranges); lower K or N, restrict t or d (--max-t, --max-d), or pass "
                f"--force (force=True) if memory allows"
            )

    def add_rows(self, t, ds, cost2d, ylo2d, yhi2d, monotone=True, keep=None) -> int:
        """Store one row per entry of ``ds``.

        Parameters
        ----------
        t : int
            The tensor degree of the rows.
        ds : numpy.ndarray
            One d per row.
        cost2d, ylo2d, yhi2d : numpy.ndarray
            rows x points: each point's cost and the y range it serves.
        monotone : bool
            Whether the rows read as monotone step functions.
        keep : numpy.ndarray of bool, optional
            rows x points: the points to store (each row keeps at least one); None: all.

        Returns
        -------
        int
            The index of the first row stored (the rows are consecutive).
        """
        if keep is None:
            npts = np.full(len(ds), cost2d.shape[1], dtype=np.int64)
            cost, ylo, yhi = cost2d.ravel(), ylo2d.ravel(), yhi2d.ravel()
        else:
            npts = keep.sum(axis=1)
            cost, ylo, yhi = cost2d[keep], ylo2d[keep], yhi2d[keep]
        return self._append(t, ds, npts, cost, ylo, yhi, monotone)

    def add_flat_rows(self, t, ds, npts, cost, yhi) -> int:
        """Store monotone rows whose points are given end to end.

        Parameters
        ----------
        t : int
            The tensor degree of the rows.
        ds, npts : numpy.ndarray
            Per row, its d and its number of points.
        cost, yhi : numpy.ndarray
            Per point, its cost and its largest y (ylo is 1 for every point).

        Returns
        -------
        int
            The index of the first row stored.
        """
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
        """Store ``count`` groups (I = set ``k``, J = set ``jk`` of the family), one for
        each row from ``row`` on."""
        runs = self.runs
        runs[0].append(k)
        runs[1].append(jk)
        runs[2].append(row)
        runs[3].append(count)
        self.n_groups += count
        self._grow(self.RUN_BYTES + (self.GROUP_BYTES + self.extra_group_bytes) * count)

    def add_runs(self, ks: np.ndarray, jks: np.ndarray, rows: np.ndarray, counts: np.ndarray):
        """Store runs of groups: run i is I = set ``ks[i]``, J = set ``jks[i]``, one group
        for each of the ``counts[i]`` rows from ``rows[i]`` on.

        The arrays (int64, >= 0, sorted by I) are kept as they are, or as int32 where
        they fit, so the caller must not change them: a chunk joined once by
        :meth:`finalize` (appending to the typed buffers would copy them again at every
        growth)."""
        self._run_chunk()
        self.run_chunks.append(
            tuple(compact_index(np.asarray(a, dtype=np.int64)) for a in (ks, jks, rows, counts))
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
        """Turn the buffers into the arrays the search reads (see the class docstring):
        per row its first point, per group its set, back set, row, d, devices and
        monotone flag, the groups sorted by I. The buffers are freed as they go."""

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
        del r_cnt
        chunks.clear()
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
