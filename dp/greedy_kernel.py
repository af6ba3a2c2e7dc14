"""Piper's greedy rule (cost model sec. 5) compiled with numba: the one ranking and walk of
:mod:`dp.greedy_rule`, for rows of stages (:func:`rule_rows`) and for plain stages at every d
with the outcome shared across d (:func:`shared_runs`).

Every float is the one :mod:`dp.greedy_rule` describes (the original planner's, in its order
of operations; no fastmath, so no fused or reordered operation): m = a y + b, running sums
from 0.0 node by node, r = (c_O - c_F) / (m_F - m_O), the excess lowered one saving at a
time. Whether a choice fits exactly (sec. 7) is decided by its float sum away from M and by
``fsum`` (:func:`dp.compiled.kernel.fsum`) near it (:mod:`dp.memory`'s band). Imported on
first use (:func:`dp.greedy_rule.kernel`): numba's import and the compiled code's load from
its cache are paid once per process.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dp import memory as _memory
from dp.compiled import kernel as _kernel
from dp.compiled.cache_guard import drop_stale
from dp.compiled.kernel import fsum, memory_fits
from piper_ilp import cost as _cost

# compiled in from these files, which numba's cache does not watch
drop_stale(__file__, (_kernel.__file__, _memory.__file__, _cost.__file__))

__all__ = ["GREEDY_EPS", "rule_rows", "shared_runs"]

#: The absolute tolerance (bytes) of Piper's greedy rule (sec. 5, step 3).
GREEDY_EPS = 1e-9

float_band = njit(cache=True)(_memory.float_band)
fits_certainly_limit = njit(cache=True)(_memory.fits_certainly_limit)
fits_possibly_limit = njit(cache=True)(_memory.fits_possibly_limit)


@njit(cache=True)
def _fits(est, n, y, aF, bF, aO, bO, sw, M, terms, partials):
    """Whether the choice ``sw`` of n nodes (O where set) fits exactly: its float sum
    ``est`` decides away from M, the ``fsum`` of its a y and b terms near it."""
    band = float_band(2 * n)
    if est <= fits_certainly_limit(M, band):
        return True
    if est > fits_possibly_limit(M, band):
        return False
    for i in range(n):
        if sw[i]:
            terms[i] = aO[i] * y
            terms[n + i] = bO[i]
        else:
            terms[i] = aF[i] * y
            terms[n + i] = bF[i]
    return memory_fits(fsum(terms, 2 * n, partials), M)


@njit(cache=True)
def _less(r, a, b):
    """Whether node a comes before node b in the walk's order: ascending r, NaN last,
    ties by position (numpy's stable argsort)."""
    ra, rb = r[a], r[b]
    if ra < rb:
        return True
    if ra > rb:
        return False
    if ra == rb:
        return a < b
    if np.isnan(ra):
        return np.isnan(rb) and a < b
    return True


@njit(cache=True)
def _sort(order, r, n):
    """``order[:n]`` (a permutation of 0..n-1) sorted by :func:`_less`, by insertion:
    the order of the previous row of a stage is nearly sorted already."""
    for k in range(1, n):
        v = order[k]
        j = k - 1
        while j >= 0 and _less(r, v, order[j]):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = v


@njit(cache=True)
def _gap(r, sav, order, n, count):
    """How far the walk's outcome is from changing under other costs: the least relative
    gap (r_b - r_a) / r_b between neighbours a, b of the order after the last switched
    node (place ``count``) and between runs of equal savings among the switched ones.
    Both ratios 0, or r_b inf, count as inf (the order by position stays); other equal
    ratios, and ratios below 1e-290 but not 0, as 0. With each cost within relative kappa
    of its value at this d scaled (:func:`_spread`), a gap above 3 kappa + 1e-14 keeps
    every node before such a place before every node after it: the walk at that d
    switches the same nodes."""
    gap = np.inf
    for j in range(1, min(count, n - 1) + 1):
        a, b = order[j - 1], order[j]
        if j != count and sav[a] == sav[b]:
            continue
        ra, rb = r[a], r[b]
        if (0.0 < ra < 1e-290) or (0.0 < rb < 1e-290):
            g = 0.0
        elif np.isinf(rb):
            g = np.inf
        elif ra == rb:
            g = np.inf if ra == 0.0 else 0.0
        else:
            g = (rb - ra) / rb
        if g < gap:
            gap = g
    return gap


@njit(cache=True)
def _rule_row(dl, aF, bF, aO, bO, of, n, y, M, l_fits, sw, ws):
    """Piper's rule for one stage (n nodes in input order: c_O - c_F ``dl``, the memory
    slope and constant of F and O, O before F in the option list ``of``) at y.

    Writes the switched nodes to ``sw``; ``ws`` = (mF, mO, sav, r, order, terms,
    partials) is scratch (``order`` holds a permutation of 0..n-1, kept from row to row).
    Returns (fits, gap): whether the rule finds a choice that fits exactly, and
    :func:`_gap` for a walked row (inf where F fits, -inf where some counted ratio is
    not finite: such a row is walked again at every other d)."""
    mF, mO, sav, r, order, terms, partials = ws
    yf = float(y)
    sum_f = 0.0
    for i in range(n):
        sw[i] = False
        mF[i] = aF[i] * yf + bF[i]
        sum_f += mF[i]
    # step 1: F fits (its running sum against M, then exactly)
    if sum_f <= M:
        return _fits(sum_f, n, yf, aF, bF, aO, bO, sw, M, terms, partials), np.inf
    for i in range(n):
        mO[i] = aO[i] * yf + bO[i]
    # step 2: L, the first option of least memory, does not fit: no choice
    if not l_fits:
        sum_l = 0.0
        for i in range(n):
            sum_l += mO[i] if (mO[i] < mF[i] or (mO[i] == mF[i] and of[i])) else mF[i]
        if not sum_l <= M:
            return False, np.inf
    # step 3: switch nodes by ascending r = (c_O - c_F) / (m_F - m_O), ties by position,
    # until the excess falls below 1e-9
    finite = True
    n_valid = 0
    for i in range(n):
        sav[i] = mF[i] - mO[i]
        if sav[i] > GREEDY_EPS:
            r[i] = dl[i] / sav[i]
            n_valid += 1
            finite = finite and r[i] < np.inf
        else:
            sav[i] = 0.0
            r[i] = np.inf
    _sort(order, r, n)
    excess = sum_f - M
    count = n_valid
    for k in range(n):
        i = order[k]
        if sav[i] > 0.0:
            sw[i] = True
            excess = excess - sav[i]
            if excess < GREEDY_EPS:
                count = k + 1
                break
    est = 0.0
    for i in range(n):
        est += mO[i] if sw[i] else mF[i]
    fits = _fits(est, n, yf, aF, bF, aO, bO, sw, M, terms, partials)
    return fits, (_gap(r, sav, order, n, count) if finite else -np.inf)


@njit(cache=True)
def _scratch(n):
    """Scratch of :func:`_rule_row` for stages of up to n nodes."""
    order = np.arange(max(n, 1))
    z = np.zeros(max(n, 1))
    return (z, z.copy(), z.copy(), z.copy(), order, np.zeros(2 * n + 1), np.zeros(2 * n + 1))


@njit(cache=True)
def rule_rows(delta, aF, bF, aO, bO, of, stage_of, y, M, l_fits):
    """Piper's rule for R rows: row k is stage ``stage_of[k]`` of the (G, n) columns
    (padding: columns with delta = a = b = 0) at ``y[k]``. Returns (switched (R, n),
    fits (R,)), as :func:`dp.greedy_rule.greedy_rule_rows` documents them."""
    R, n = len(y), aF.shape[1]
    sw = np.zeros((R, n), dtype=np.bool_)
    ok = np.zeros(R, dtype=np.bool_)
    ws = _scratch(n)
    for k in range(R):
        g = stage_of[k]
        ok[k] = _rule_row(
            delta[g], aF[g], bF[g], aO[g], bO[g], of[g], n, y[k], M, l_fits, sw[k], ws
        )[0]
    return sw, ok


@njit(cache=True)
def _columns(opt, cls, kind, s, n, delta_k, F_k, j, cols):
    """The rule's columns of the block of n nodes from ``s`` at d index j: per node
    c_O - c_F, a_F, b_F, a_O, b_O, O before F, p_F, p_O (F the option of least cost at
    that d, ``F_k``; ``opt`` rows (p0, p1, a0, b0, a1, b1, w, two))."""
    dl, aF, bF, aO, bO, of, pF, pO = cols
    for i in range(n):
        row = opt[cls[s + i]]
        k = kind[s + i]
        dl[i] = delta_k[k, j]
        f = F_k[k, j]  # option 1 is F
        aF[i], bF[i], pF[i] = (row[4], row[5], row[1]) if f else (row[2], row[3], row[0])
        aO[i], bO[i], pO[i] = (row[2], row[3], row[0]) if f else (row[4], row[5], row[1])
        of[i] = f


@njit(cache=True)
def _last_y(aF, bF, aO, bO, of, n, cap, M):
    """The largest y <= cap at which the running sum of L's memory (step 2) is <= M, 0
    when there is none (the sum never falls as y grows: a binary search)."""
    lo, hi = 0, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        yf = float(max(mid, 1))
        s = 0.0
        for i in range(n):
            mf = aF[i] * yf + bF[i]
            mo = aO[i] * yf + bO[i]
            s += mo if (mo < mf or (mo == mf and of[i])) else mf
        if s <= M:
            lo = mid
        else:
            hi = mid - 1
    return lo


@njit(cache=True)
def _p_sum(sw, pF, pO, n):
    """P of a choice: p_O where switched, else p_F, added node by node from 0.0."""
    s = 0.0
    for i in range(n):
        s += pO[i] if sw[i] else pF[i]
    return s


@njit(cache=True)
def _rows(cols, n, Y, M, rows, ws):
    """The rule on the block at y = 1..Y (L fits at each): per row (``rows`` = (choice,
    fits, gap, same choice as the row before, P)) its outcome."""
    dl, aF, bF, aO, bO, of, pF, pO = cols
    ch, feas, gap, same, P, gmin = rows
    order = ws[4]
    for i in range(n):
        order[i] = i
    for t in range(Y):
        feas[t], gap[t] = _rule_row(dl, aF, bF, aO, bO, of, n, t + 1, M, True, ch[t], ws)
        gmin[t] = min(gap[t], gmin[t - 1]) if t else gap[t]
        eq = t > 0
        for i in range(n):
            if not eq:
                break
            eq = ch[t, i] == ch[t - 1, i]
        same[t] = eq
        P[t] = P[t - 1] if eq else _p_sum(ch[t], pF, pO, n)


@njit(cache=True)
def _equal(x, y, n):
    for i in range(n):
        if x[i] != y[i]:
            return False
    return True


@njit(cache=True)
def _emit(cols, dl_j, n, Y, again, thr, M, rows, ws, cur, prev, out, at):
    """The runs of equal choice at one d over y = 1..Y from the rows of the block's
    first d (``rows``, :func:`_rows`): with ``again``, a row whose gap is not above
    ``thr`` (3 kappa + 1e-14) is walked again with this d's costs ``dl_j``. Writes (first y,
    last y, P) per run to ``out`` from ``at``; returns the next free place and whether
    the runs cover 1..k without gaps with P never falling."""
    dl, aF, bF, aO, bO, of, pF, pO = cols
    ch, feas, gap, same, P, _ = rows
    lo, hi, PP = out
    start = at
    open_run = False
    prev_mod = False
    for t in range(Y):
        f = feas[t]
        mod = False
        if again and not gap[t] > thr:
            f2 = _rule_row(dl_j, aF, bF, aO, bO, of, n, t + 1, M, True, cur, ws)[0]
            if not _equal(cur, ch[t], n):
                mod, f = True, f2
        if t == 0:
            eq = False
        elif not mod and not prev_mod:
            eq = same[t]
        else:
            eq = _equal(cur if mod else ch[t], prev if prev_mod else ch[t - 1], n)
        if f and open_run and eq:
            hi[at - 1] = t + 1
        elif f:
            lo[at], hi[at] = t + 1, t + 1
            PP[at] = _p_sum(cur, pF, pO, n) if mod else P[t]
            at += 1
        open_run = f
        if mod:
            prev[:n] = cur[:n]
        prev_mod = mod
    return at, _mono(out, start, at)


@njit(cache=True)
def _mono(out, start, end):
    """Whether the runs ``out[start:end]`` cover y = 1..k without gaps, P never falling."""
    lo, hi, PP = out
    for k in range(start, end):
        if k == start and lo[k] != 1:
            return False
        if k > start and (lo[k] != hi[k - 1] + 1 or PP[k] < PP[k - 1]):
            return False
    return True


@njit(cache=True)
def _cut(out, r0, r1, Y, at):
    """The runs ``out[r0:r1]`` (by y) over y = 1..Y, written from place ``at``; returns
    the next free place."""
    lo, hi, PP = out
    for k in range(r0, r1):
        if lo[k] > Y:
            break
        lo[at], hi[at], PP[at] = lo[k], min(hi[k], Y), PP[k]
        at += 1
    return at


@njit(cache=True)
def _spread(delta_k, F_k, ds, ref, out):
    """Per kind of node, how far its costs at the d where its F is as at d index ``ref``
    may stray from d_ref / d times those at ``ref``: the largest |e| with delta_d =
    scale delta_ref (1 + e) (plain nodes: c_O - c_F = (p_O - p_F) / d in exact
    arithmetic, so e is rounding); inf where e cannot be said (a delta zero at one d
    only, or below 1e-290). Written to ``out``."""
    for k in range(delta_k.shape[0]):
        rd = delta_k[k, ref]
        kap = 0.0
        for j in range(len(ds)):
            if F_k[k, j] != F_k[k, ref]:
                continue
            dj = delta_k[k, j]
            if rd == 0.0 and dj == 0.0:
                e = 0.0
            elif abs(dj) < 1e-290 or abs(rd) < 1e-290:
                e = np.inf
            else:
                e = abs(dj / (ds[ref] / ds[j] * rd) - 1.0)
                if np.isnan(e):
                    e = np.inf
            kap = max(kap, e)
        out[k] = kap


@njit(cache=True)
def _same_F(F_k, kind, s, n, ref, j):
    for i in range(n):
        if F_k[kind[s + i], j] != F_k[kind[s + i], ref]:
            return False
    return True


@njit(cache=True)
def _buffers(nmax, Ymax):
    """The block's columns, rows and scratch (:func:`shared_runs`)."""
    z = np.zeros(nmax)
    cols = (z, z.copy(), z.copy(), z.copy(), z.copy(), np.zeros(nmax, np.bool_), z.copy(), z.copy())
    rows = (
        np.zeros((Ymax, nmax), dtype=np.bool_),
        np.zeros(Ymax, dtype=np.bool_),
        np.zeros(Ymax),
        np.zeros(Ymax, dtype=np.bool_),
        np.zeros(Ymax),
        np.zeros(Ymax),
    )
    return cols, rows


@njit(cache=True)
def shared_runs(opt, cls, kind, starts, sizes, delta_k, F_k, ds, caps, need, M, blocks, out, at):
    """Piper's rule on plain blocks at every d they are needed at, y = 1..cap, as runs of
    equal choice (:func:`dp.greedy_tables.shared_rule_runs` documents the arguments, caps
    non-increasing; ``blocks`` the blocks to do; ``out``: (lo, hi, P) arrays with room
    for their runs from place ``at``).

    Per block, the rule runs at its first d; at another d with the same F per node, a
    row's outcome is the first d's where its gap (:func:`_gap`) is above 3 kappa + 1e-14
    (kappa: the largest :func:`_spread` of its nodes, plus 1e-15), and the row is walked
    again at that d otherwise (where no row is, the first d's runs are cut at that d's
    last y); at a d where some node's F differs, the rule runs on its own. Returns
    (count, first) (blocks, D): the runs of each block and d, written to ``out`` (first y,
    last y, P) from ``first``; mono (blocks, D), whether a block's runs at d cover 1..k
    without gaps and P never falls (True where it is not needed); and the next free place
    of ``out``."""
    D, nb, K = len(ds), len(blocks), delta_k.shape[0]
    nmax = max(1, sizes[blocks].max()) if nb else 1
    cols, rows = _buffers(nmax, max(caps.max(), 1))
    ws = _scratch(nmax)
    cur = np.zeros(nmax, dtype=np.bool_)
    prev = np.zeros(nmax, dtype=np.bool_)
    dl_j = np.zeros(nmax)
    spread = np.zeros((D, K))
    spread_done = np.zeros(D, dtype=np.bool_)
    moves = np.zeros(K, dtype=np.bool_)
    for k in range(K):
        for j in range(D):
            moves[k] = moves[k] or F_k[k, j] != F_k[k, 0]
    count = np.zeros((nb, D), dtype=np.int64)
    first = np.zeros((nb, D), dtype=np.int64)
    mono = np.ones((nb, D), dtype=np.bool_)
    for b in range(nb):
        u = blocks[b]
        s, n = starts[u], sizes[u]
        ref = -1
        for j in range(D):
            if need[u, j]:
                ref = j
                break
        if ref < 0:
            continue
        if not spread_done[ref]:
            _spread(delta_k, F_k, ds, ref, spread[ref])
            spread_done[ref] = True
        kap, moving = 0.0, False
        for i in range(n):
            kap = max(kap, spread[ref, kind[s + i]])
            moving = moving or moves[kind[s + i]]
        thr = 3.0 * (kap + 1e-15) + 1e-14
        _columns(opt, cls, kind, s, n, delta_k, F_k, ref, cols)
        last = _last_y(cols[1], cols[2], cols[3], cols[4], cols[5], n, caps.max(), M)
        Y = min(last, caps[ref])
        _rows(cols, n, Y, M, rows, ws)
        first[b, ref] = at
        at, mono[b, ref] = _emit(cols, dl_j, n, Y, False, thr, M, rows, ws, cur, prev, out, at)
        count[b, ref] = at - first[b, ref]
        own = False
        for j in range(ref + 1, D):
            if not need[u, j]:
                continue
            if moving and not _same_F(F_k, kind, s, n, ref, j):
                own = True
                continue
            Y = min(last, caps[j])
            first[b, j] = at
            if Y and rows[5][Y - 1] <= thr:  # (some row's gap is not above thr)
                for i in range(n):
                    dl_j[i] = delta_k[kind[s + i], j]
                at, mono[b, j] = _emit(cols, dl_j, n, Y, True, thr, M, rows, ws, cur, prev, out, at)
            else:
                at = _cut(out, first[b, ref], first[b, ref] + count[b, ref], Y, at)
                mono[b, j] = _mono(out, first[b, j], at)
            count[b, j] = at - first[b, j]
        if not own:
            continue
        for j in range(ref + 1, D):  # (the d where some F differs: the rule on its own)
            if need[u, j] and not _same_F(F_k, kind, s, n, ref, j):
                _columns(opt, cls, kind, s, n, delta_k, F_k, j, cols)
                Y = min(last, caps[j])
                _rows(cols, n, Y, M, rows, ws)
                first[b, j] = at
                at, mono[b, j] = _emit(
                    cols, dl_j, n, Y, False, thr, M, rows, ws, cur, prev, out, at
                )
                count[b, j] = at - first[b, j]
    return count, first, mono, at
