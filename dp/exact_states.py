"""The states of candidate stages in exact mode, in flat arrays (cost model sec. 4):
:class:`ExactStates` makes the states of many stages at once, by size, each from one
parent by one fixed sequence of float operations.
"""

from __future__ import annotations

import math

import numpy as np

from dp.knapsack import pareto_orders, pieces, two_column_orders
from dp.memory import truncate_low_bits

__all__ = ["ExactStates"]


class _NodeTable:
    """Per node, for one t: whether it has options for t, plain, its least a + b, the w of
    its first option, and its useful options (rows (p, a, b, a + b, S a + b) of ``opts``
    from ``start``, ``n_opt`` of them)."""

    def __init__(self, n: int, node_t: dict, t: int):
        self.has = np.zeros(n, dtype=bool)
        self.plain = np.zeros(n, dtype=bool)
        self.m1min = np.zeros(n)
        self.w_first = np.zeros(n)
        self.start = np.zeros(n, dtype=np.int64)
        self.n_opt = np.zeros(n, dtype=np.int64)
        rows = []
        at = 0
        for v in range(n):
            got = node_t.get((v, t))
            if got is None:
                continue
            plain, m1min, w_first, o = got
            self.has[v], self.plain[v], self.m1min[v], self.w_first[v] = True, plain, m1min, w_first
            self.start[v], self.n_opt[v] = at, len(o)
            rows.append(o)
            at += len(o)
        self.opts = np.concatenate(rows) if rows else np.zeros((0, 5))


class ExactStates:
    """The exact-mode states of candidate stages.

    A stage C's *state* under t says whether some option choice of C may fit (alive),
    whether all its nodes are plain (options that differ only in p, a, b), W (sum w), m1
    (least sum a + b) and, for a plain state, the Pareto frontier of its option choices:
    rows (P, A, Bm, m1, mS) with P = sum p, A = sum a, Bm = sum b, m1 = sum (a + b), mS =
    sum (S a + b). The state of C is made from the state of C minus its lowest node
    without successors in C, so every state comes from one parent by one fixed sequence of
    float operations.

    State s (0: the empty set) lives in per-t arrays, its frontier as rows ``off[s] ..
    off[s] + cnt[s] - 1`` of the t's frontier store. The missing states of many stages are
    made at once: by increasing size, all states of one size in one numpy pass per t, so
    a state costs a few Python operations (its set, parent and cut bitmasks) and no Python
    objects of its own.

    :meth:`make` returns the state ids of sets (making the missing ones); per t,
    ``alive``, ``plain``, ``W``, ``off`` and ``cnt`` (arrays by state id) and ``store[t]``
    (the frontier rows) describe them; :meth:`cuts` are their cut-edge bitmasks;
    :meth:`forget` drops every state but the empty set's (the caller does it once
    :meth:`size` passes its limit).

    Parameters
    ----------
    ctx : dp.stage_context.StageContext
        t values, S, the memory limits, each (node, t)'s options (``node_t``) and the
        deadline's check.
    geo : dp.stage_geometry.StageGeometry
        The cut bits each node sets and clears.
    low_bits : int
        The mantissa bits the frontier filters clear
        (:data:`dp.stage_context.FILTER_LOW_BITS`).
    low_sink : callable
        X -> the lowest node of X without successors in X.
    extend_rows : int
        States are extended in pieces of about this many new frontier rows.
    frontiers : bool
        Make the frontiers (exact mode). False (greedy mode): a state is W, m1, plain and
        alive only, alive as long as its least memory m1 may fit (no frontier is kept).
    """

    def __init__(self, ctx, geo, low_bits: int, low_sink, extend_rows: int, frontiers: bool = True):
        self.frontiers = frontiers
        self.low_sink = low_sink
        self.plus_bits, self.minus_bits = geo.plus_bits, geo.minus_bits
        self.t_values = list(ctx.t_values)
        self.mem_maybe, self.mem_kept, self.S = ctx.mem_maybe, ctx.mem_kept, ctx.S
        self.check = ctx.check
        self.low_bits = low_bits
        self.extend_rows = extend_rows
        n = len(ctx.ids)
        self.nodes = {t: _NodeTable(n, ctx.node_t, t) for t in self.t_values}
        self.forget()

    def forget(self):
        """Keep only the empty set's state: alive and plain for every t, W = m1 = 0, one
        frontier row of zeros."""
        self.id_of = {0: 0}
        self.plus, self.minus = [0], [0]
        self.n = 1
        self.alive = {t: np.ones(1, dtype=bool) for t in self.t_values}
        self.plain = {t: np.ones(1, dtype=bool) for t in self.t_values}
        self.W = {t: np.zeros(1) for t in self.t_values}
        self.m1 = {t: np.zeros(1) for t in self.t_values}
        self.off = {t: np.zeros(1, dtype=np.int64) for t in self.t_values}
        self.cnt = {t: np.ones(1, dtype=np.int64) for t in self.t_values}
        self.store = {t: np.zeros((1, 5)) for t in self.t_values}
        self.used = {t: 1 for t in self.t_values}

    def size(self) -> int:
        """States plus frontier rows kept."""
        return self.n + sum(self.used.values())

    def cuts(self, ids) -> list:
        """The cut-edge bitmasks of states ``ids``
        (:class:`dp.stage_geometry.StageGeometry`)."""
        plus, minus = self.plus, self.minus
        return [plus[s] & ~minus[s] for s in ids]

    def cut(self, s: int) -> int:
        """The cut-edge bitmask of state ``s``."""
        return self.cuts((s,))[0]

    def frontier(self, t: int, s: int) -> np.ndarray:
        """The frontier rows (P, A, Bm, m1, mS) of state ``s`` under t."""
        a = int(self.off[t][s])
        return self.store[t][a : a + int(self.cnt[t][s])]

    def _grow(self, n: int):
        """Room for n states in the per-state arrays (doubling)."""
        cap = len(self.W[self.t_values[0]])
        if n <= cap:
            return
        cap = max(n, 2 * cap, 1024)
        for arrays in (self.alive, self.plain, self.W, self.m1, self.off, self.cnt):
            for t, a in arrays.items():
                b = np.zeros(cap, dtype=a.dtype)
                b[: len(a)] = a
                arrays[t] = b

    def _append_rows(self, t: int, rows: np.ndarray) -> int:
        """Append frontier rows to the store of t (doubling); returns the first's index."""
        used = self.used[t]
        store = self.store[t]
        if used + len(rows) > len(store):
            grown = np.empty((max(used + len(rows), 2 * len(store)), 5))
            grown[:used] = store[:used]
            self.store[t] = store = grown
        store[used : used + len(rows)] = rows
        self.used[t] = used + len(rows)
        return used

    def make(self, Cs: list, sinks: list | None = None) -> list:
        """The state ids of the sets ``Cs``. The states missing on the way down (each X
        from X minus its lowest node without successors) are made by increasing size.
        ``sinks[i]``, when given, is the set of nodes of ``Cs[i]`` without successors in it
        (known from the pair (I, J); else ``low_sink`` finds the lowest)."""
        id_of = self.id_of
        low_sink = self.low_sink
        made: list[tuple[int, int]] = []  # (X minus v, v) per new state, by id
        levels: dict[int, list[int]] = {}
        n0 = self.n
        for i, C in enumerate(Cs):
            X = C
            size = X.bit_count()
            first = sinks[i] if sinks is not None else 0
            while X not in id_of:
                if first:
                    v = (first & -first).bit_length() - 1
                    first = 0
                else:
                    v = low_sink(X)
                Y = X & ~(1 << v)
                id_of[X] = n0 + len(made)
                levels.setdefault(size, []).append(len(made))
                made.append((Y, v))
                X, size = Y, size - 1
        if made:
            self._grow(n0 + len(made))
            parent = [id_of[Y] for Y, _ in made]
            node = [v for _, v in made]
            parent_a, node_a = np.array(parent, dtype=np.int64), np.array(node, dtype=np.int64)
            plus, minus = self.plus, self.minus
            plus.extend([0] * len(made))
            minus.extend([0] * len(made))
            pb, mb = self.plus_bits, self.minus_bits
            for size in sorted(levels):
                self.check()
                idx = levels[size]
                for i in idx:
                    p, v = parent[i], node[i]
                    plus[n0 + i] = plus[p] | pb[v]
                    minus[n0 + i] = minus[p] | mb[v]
                idx_a = np.array(idx, dtype=np.int64)
                self._extend(n0 + idx_a, parent_a[idx_a], node_a[idx_a])
            self.n = n0 + len(made)
        return [id_of[C] for C in Cs]

    def _extend(self, ids: np.ndarray, ps: np.ndarray, vs: np.ndarray):
        """States ``ids`` = states ``ps`` plus nodes ``vs``, for every t: dead when the
        parent is, when v has no option for t or when the least memory passes what may
        fit; else plain iff both are, W + w of v's first option when plain, and a plain
        state's frontier from its parent's (:meth:`_extend_frontiers`; without
        ``frontiers``, none: alive as it is)."""
        for t in self.t_values:
            nt = self.nodes[t]
            m1 = self.m1[t][ps] + nt.m1min[vs]
            ok = self.alive[t][ps] & nt.has[vs] & (m1 <= self.mem_maybe)
            plain = self.plain[t][ps] & nt.plain[vs]
            W = self.W[t][ps]
            self.W[t][ids] = np.where(plain, W + nt.w_first[vs], W)
            self.m1[t][ids] = m1
            self.plain[t][ids] = plain
            self.off[t][ids] = 0
            self.cnt[t][ids] = 0
            if not self.frontiers:
                self.alive[t][ids] = ok
                continue
            self.alive[t][ids] = ok & ~plain
            ext = np.flatnonzero(ok & plain)
            # in pieces of about extend_rows new rows
            for a, b in pieces(self.cnt[t][ps[ext]] * nt.n_opt[vs[ext]], self.extend_rows):
                self.check()
                self._extend_frontiers(t, ids[ext[a:b]], ps[ext[a:b]], vs[ext[a:b]])

    def _extend_frontiers(self, t: int, ids: np.ndarray, ps: np.ndarray, vs: np.ndarray):
        """The frontiers of plain states ``ids`` = plain states ``ps`` plus plain nodes
        ``vs`` under t, many at once. With one option the frontier only shifts (every row
        that may fit is kept); with more, the new rows are filtered:

        Memory at y in [1, S] is A y + Bm, between m1 and mS, so (P, m1, mS) decide
        dominance (the memory columns with ``low_bits`` low bits cleared). Where m1 is the
        same on every row, (P, mS) decide; else where Bm is, (P, A) decide (memory rises
        with A at every y, now and after any extension, which adds the same b to both
        rows); else where mS is, (P, m1). Those frontiers go
        through :func:`dp.knapsack.two_column_orders` together, the others through
        :func:`dp.knapsack.pareto_orders`. A new frontier is its rows in (P, ...) order:
        the sums with one option are then sorted runs, and the staircase by P of the
        tables' rows needs no sort. A state whose rows all fail is dead."""
        nt = self.nodes[t]
        store = self.store[t]
        flen = self.cnt[t][ps]
        n_opt = nt.n_opt[vs]
        n_items = len(ids)
        n_of = flen * n_opt
        # rows of all new frontiers: item, option (outer) and frontier row (inner); block
        # k = one option of one item plus the item's parent frontier, a run of the store
        # read by a cumulative sum of steps
        item = np.repeat(np.arange(n_items), n_of)
        first = np.cumsum(n_of) - n_of
        blen = np.repeat(flen, n_opt)
        bstart = np.repeat(self.off[t][ps], n_opt)
        step = np.ones(len(item), dtype=np.int64)
        step[0] = bstart[0]
        step[(np.cumsum(blen) - blen)[1:]] = bstart[1:] - (bstart[:-1] + blen[:-1] - 1)
        bopt = np.repeat(nt.start[vs], n_opt) + (
            np.arange(len(blen)) - np.repeat(np.cumsum(n_opt) - n_opt, n_opt)
        )
        new = store[np.cumsum(step)] + nt.opts[np.repeat(bopt, blen)]
        valid = new[:, 3] <= self.mem_kept
        self._mark_one_y(new)
        # the memory columns as the filters compare them, made when needed
        q: dict[int, np.ndarray] = {}

        def col(j):
            if j not in q:
                q[j] = truncate_low_bits(new[:, j], self.low_bits)
            return q[j]

        all_valid = bool(valid.all())

        def varies(j):  # per new frontier: column j takes two values on its valid rows
            c = col(j)
            hi = np.maximum.reduceat(c if all_valid else np.where(valid, c, -np.inf), first)
            lo = np.minimum.reduceat(c if all_valid else np.where(valid, c, np.inf), first)
            return hi > lo

        # the column that decides with P: mS where m1 is the same on every row, else A
        # where Bm is, else m1 where mS is (else none: cy = -1)
        cy = np.full(n_items, 4)
        m1_varies = varies(3)
        if m1_varies.any():
            cy = np.where(~m1_varies, 4, np.where(~varies(2), 1, np.where(~varies(4), 3, -1)))
        one = n_opt == 1
        three = (cy < 0) & ~one
        parts = []
        if one.any():
            parts.append(np.flatnonzero(valid & one[item]))
        if three.any():
            rows = np.flatnonzero(valid & three[item])
            parts.append(
                rows[
                    pareto_orders(
                        np.column_stack((new[rows, 0], col(3)[rows], col(4)[rows])), item[rows]
                    )
                ]
            )
        two = ~three & ~one
        if two.any():
            kinds = sorted(set(cy[two].tolist())) if m1_varies.any() else [4]
            if len(kinds) == 1:
                yr = col(kinds[0])
            else:
                yr = np.zeros(len(new))
                cyr = cy[item]
                for j in kinds:
                    at = cyr == j
                    yr[at] = col(j)[at]
            parts.append(
                two_column_orders(new[:, 0], yr, valid, first, n_of, np.flatnonzero(two), item)
            )
        kept = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if len(parts) > 1:  # by item (a radix sort where the item numbers fit 16 bits)
            key = item[kept]
            kept = kept[np.argsort(key.astype(np.int16) if n_items < 2**15 else key, kind="stable")]
        cnt = np.bincount(item[kept], minlength=n_items)
        at = self._append_rows(t, new[kept])
        self.off[t][ids] = at + np.cumsum(cnt) - cnt
        self.cnt[t][ids] = cnt
        self.alive[t][ids] = cnt > 0

    def _mark_one_y(self, fr: np.ndarray):
        """Set mS = inf (in place) on the frontier rows that can only ever serve y = 1: those
        whose float memory at y = 2 (A * 2 + Bm, as the y capacities compute it) is above
        what may fit. Memory only grows as the stage grows, so such a row and every row made
        from it stay out of every y >= 2, and (P, m1) alone decide its dominance: a row
        with P and m1 no larger serves y = 1 at least as well. (A row at inf dominates only
        rows at inf; rows at inf stay at inf when extended.)"""
        if self.S >= 2:
            far = fr[:, 1] * 2.0 + fr[:, 2] > self.mem_kept
            if far.any():
                fr[far, 4] = math.inf
