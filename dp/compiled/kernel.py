"""The compiled kernel of :mod:`dp.compiled`: the stage tables and the search of the default
mode (sequential pipelining, throughput, 1f1b, Piper's in-flight rule), exact knapsack, as
numba functions over arrays, every stage cost and memory sum as the evaluator makes them
(``fsum``, cost model secs. 3 and 7). Imported by the first solve, not by the package.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dp.compiled import notice as _notice  # noqa: F401 (says numba's first compile)
from dp.compiled.cache_guard import drop_stale
from piper_ilp import cost as _cost

# compiled in from piper_ilp/cost.py, which numba's cache does not watch
drop_stale(__file__, (_cost.__file__,))

# the cost model's own functions, compiled: one formula in one function (cost model sec. 3)
stage_tps = njit(cache=True)(_cost.stage_tps)
resync_bytes = njit(cache=True)(_cost.resync_bytes)
microbatches_in_flight = njit(cache=True)(_cost.microbatches_in_flight)
memory_fits = njit(cache=True)(_cost.memory_fits)
cut_edge_bytes = njit(cache=True)(_cost.cut_edge_bytes)

#: Bits per node position in a choice code (an option index per node).
CODE_BITS = 4


@njit(cache=True)
def fsum(vals, m, partials):
    """``math.fsum`` of ``vals[:m]`` (finite floats), bit for bit: Shewchuk's partials and
    CPython's final rounding (a zero is no partial, so zeros alone sum to +0.0); one or two
    values directly (fsum is the correctly rounded sum: one IEEE addition, then + 0.0 for
    the sign of a zero). ``partials`` is scratch of at least m + 1 floats."""
    if m <= 1:
        return vals[0] + 0.0 if m == 1 else 0.0
    if m == 2:
        return (vals[0] + vals[1]) + 0.0
    np_ = 0
    for k in range(m):
        x = vals[k]
        i = 0
        for j in range(np_):
            y = partials[j]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                partials[i] = lo
                i += 1
            x = hi
        np_ = i
        if x != 0.0:
            partials[np_] = x
            np_ += 1
    hi = 0.0
    lo = 0.0
    n = np_
    if n > 0:
        n -= 1
        hi = partials[n]
        while n > 0:
            x = hi
            n -= 1
            y = partials[n]
            hi = x + y
            yr = hi - x
            lo = y - yr
            if lo != 0.0:
                break
        if n > 0 and ((lo < 0.0 and partials[n - 1] < 0.0) or (lo > 0.0 and partials[n - 1] > 0.0)):
            y = lo * 2.0
            x = hi + y
            yr = x - hi
            if y == yr:
                hi = x
    return hi


@njit(cache=True)
def _sum_exact(a, b, s):
    """Whether the float sum s = a + b is the real sum (TwoSum's error is 0)."""
    bb = s - a
    return (a - (s - bb)) + (b - bb) == 0.0


@njit(cache=True)
def _product_exact(a, b, p):
    """Whether the float product p = a b (finite, no overflow) is the real product
    (Dekker's TwoProduct error is 0)."""
    c = 134217729.0 * a
    ah = c - (c - a)
    al = a - ah
    c = 134217729.0 * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl == 0.0


@njit(cache=True)
def _node_edge(v, ti, opt, C, deg, nb, term, buf, partials):
    """Node v's cut-edge bytes in stage C with option ``opt`` (the fsum of its terms)."""
    m = 0
    for k in range(deg[v]):
        if not (C >> nb[v, k]) & 1:
            buf[m] = term[v, ti, opt, k]
            m += 1
    return fsum(buf, m, partials)


#: Relative margin of the float sums: a running sum of k non-negative terms (each a*y + b
#: rounded, or a few rounded operations) is within about (k + 4) 2**-53 of its exact value,
#: below 1e-14 for the MAX_NODES = 15 nodes of a stage. Memory within MARGIN * M of M is
#: decided by fsum, and a partial choice prunes another by memory only when it needs a
#: factor (1 - MARGIN) less (then its exact memory is less, with every extension).
MARGIN = 1e-13


@njit(cache=True)
def _key(e, w, p, d, N, B):
    """The pruning key of a partial choice: its p sum (d = 0: the stage's options differ
    only in p and memory) or the stage's TPS formula at d on its float sums."""
    if d == 0:
        return p
    return stage_tps(e, resync_bytes(w, d, N), p, d, B)


@njit(cache=True)
def _frontier_at(nn, nL, pv, ev, wv, mv, mx, shift, d, N, B, M, fm, fe, fw, fp, fk, fc, fx, heads):
    """The choices of a stage at one y (option memories ``mv``) that no other beats: node
    by node, each kept partial choice extended by every option, in order of float memory
    (a merge of the options' lists, each sorted), kept when its key is below that of every
    kept choice needing a factor (1 - MARGIN) less memory (or the same memory: the same
    float sum where both sums are exact, ``mx`` and ``fx`` saying which option memories
    and which kept sums are, or where every extension of either surely fits M) and its
    memory is not surely above M. Returns (count, buffer row) of the kept choices, by
    memory; count -1 when the buffers are too small."""
    hi = M * (1.0 + MARGIN)
    low = 1.0 - MARGIN
    roomy = M * (1.0 - 2.0 * MARGIN)
    fm[0, 0] = 0.0
    fe[0, 0] = 0.0
    fw[0, 0] = 0.0
    fp[0, 0] = 0.0
    fc[0, 0] = 0
    fx[0, 0] = True
    r = 1
    src = 0
    for q in range(nn):
        L = nL[q]
        dst = 1 - src
        for o in range(L):
            heads[o] = 0
        rest = 0.0  # the most memory the later nodes can add
        for q2 in range(q + 1, nn):
            rest += mv[q2, : nL[q2]].max()
        out = 0
        j = 0  # kept choices out[:j] need a factor (1 - MARGIN) less memory than the next
        best = np.inf  # the least key among them
        while True:
            bo = -1
            bm = np.inf
            for o in range(L):
                h = heads[o]
                if h < r:
                    m = fm[src, h] + mv[q, o]
                    if bo < 0 or m < bm:
                        bo = o
                        bm = m
            if bo < 0:
                break
            h = heads[bo]
            heads[bo] = h + 1
            if bm > hi:  # (this option's list is by memory: the rest is above M too)
                heads[bo] = r
                continue
            while j < out and fm[dst, j] <= bm * low:
                if fk[dst, j] < best:
                    best = fk[dst, j]
                j += 1
            e = fe[src, h] + ev[q, bo]
            w = fw[src, h] + wv[q, bo]
            p = fp[src, h] + pv[q, bo]
            k = _key(e, w, p, d, N, B)
            if k >= best:
                continue
            # the same float memory is the same memory where both sums are exact; else it
            # decides nothing where every extension surely fits
            exact = fx[src, h] and mx[q, bo] and _sum_exact(fm[src, h], mv[q, bo], bm)
            if out > 0 and fm[dst, out - 1] == bm and fk[dst, out - 1] <= k:
                if (exact and fx[dst, out - 1]) or bm + rest <= roomy:
                    continue
            if out == fm.shape[1]:
                return -1, 0  # (the caller grows the buffers and asks again)
            fm[dst, out] = bm
            fe[dst, out] = e
            fw[dst, out] = w
            fp[dst, out] = p
            fk[dst, out] = k
            fc[dst, out] = fc[src, h] | (bo << shift[q])
            fx[dst, out] = exact
            out += 1
        r = out
        src = dst
        if r == 0:
            break
    return r, src


@njit(cache=True)
def _exact_cost(code, nodes, nn, ti, P, W, nodeE, d, N, B, buf, partials):
    """The evaluator's TPS of a choice (cost model sec. 3: the fsum of each sum)."""
    mask = (1 << CODE_BITS) - 1
    for q in range(nn):
        buf[q] = nodeE[q, (code >> (CODE_BITS * nodes[q])) & mask]
    E = fsum(buf, nn, partials)
    for q in range(nn):
        buf[q] = P[nodes[q], ti, (code >> (CODE_BITS * nodes[q])) & mask]
    Psum = fsum(buf, nn, partials)
    for q in range(nn):
        v = nodes[q]
        buf[q] = resync_bytes(W[v, ti, (code >> (CODE_BITS * v)) & mask], d, N)
    R = fsum(buf, nn, partials)
    return stage_tps(E, R, Psum, d, B)


@njit(cache=True)
def _fits(code, nodes, nn, ti, A, Bm, y, M, buf, partials):
    """Whether a choice's memory fsum (a y, b) is at most M (cost model sec. 7)."""
    mask = (1 << CODE_BITS) - 1
    for q in range(nn):
        v = nodes[q]
        o = (code >> (CODE_BITS * v)) & mask
        buf[2 * q] = A[v, ti, o] * y
        buf[2 * q + 1] = Bm[v, ti, o]
    return memory_fits(fsum(buf, 2 * nn, partials), M)


@njit(cache=True)
def _prepare(C, n, ti, nopt, deg, nb, term, nodes, nodeE, buf, partials):
    """Stage C's node positions (into ``nodes``) and their options' cut-edge bytes under t
    index ti (into ``nodeE``, the fsum of each node's terms). Returns 1 when the options of
    every node differ only in p and memory, 0 when not, -1 when a node has no option."""
    nn = 0
    for v in range(n):
        if (C >> v) & 1:
            if nopt[v, ti] == 0:
                return -1
            nodes[nn] = v
            nn += 1
    plain = 1
    for q in range(nn):
        v = nodes[q]
        for o in range(nopt[v, ti]):
            nodeE[q, o] = _node_edge(v, ti, o, C, deg, nb, term, buf, partials)
            if nodeE[q, o] != nodeE[q, 0]:
                plain = 0
    return plain


@njit(cache=True)
def _fill(nodes, nn, plain, ti, y, di, nodeE, nopt, P, W, A, Bm, dv, S, N, M, B, cost, choice, wk):
    """cost[di, y] and choice[di, y] of one stage under t index ti (every d at this y when
    ``plain``): the least evaluator cost over the choices whose memory fsum fits M, inf
    where none fits. The choices are pruned on float sums (:func:`_frontier_at`), then the
    few within rounding of the least key are costed exactly. Returns 0; 1 when no choice
    fits at y (nothing written: the running sum of each node's least float memory passes
    M by more than MARGIN, which is when the frontier would end empty; it does at every
    larger y too); -1 when the scratch ``wk`` is too small (nothing written)."""
    pv, wv, mv, nL, shift, heads, buf, partials, fm, fe, fw, fp, fk, fc, sc, mx, fx = wk
    least_mem = 0.0
    for q in range(nn):
        v = nodes[q]
        nL[q] = nopt[v, ti]
        shift[q] = CODE_BITS * v
        m = np.inf
        for o in range(nL[q]):
            pv[q, o] = P[v, ti, o]
            wv[q, o] = W[v, ti, o]
            ay = A[v, ti, o] * y
            mv[q, o] = ay + Bm[v, ti, o]
            mx[q, o] = _product_exact(A[v, ti, o], float(y), ay) and _sum_exact(
                ay, Bm[v, ti, o], mv[q, o]
            )
            if wv[q, o] != wv[q, 0]:
                plain = 0
            if mv[q, o] < m:
                m = mv[q, o]
        least_mem += m
    if least_mem > M * (1.0 + MARGIN):
        return 1
    kd = 0 if plain else dv[di]
    r, row = _frontier_at(
        nn, nL, pv, nodeE, wv, mv, mx, shift, kd, N, B, M, fm, fe, fw, fp, fk, fc, fx, heads
    )
    if r < 0:
        return -1
    sc[0] += r
    lo = M * (1.0 - MARGIN)
    least = np.inf  # the least key among the choices that fit
    for i in range(r):
        if fm[row, i] <= lo or _fits(fc[row, i], nodes, nn, ti, A, Bm, y, M, buf, partials):
            if fk[row, i] < least:
                least = fk[row, i]
        else:
            fk[row, i] = np.inf
    for dj in range(dv.shape[0]):
        if dj != di and not (plain and (S + dv[dj] - 1) // dv[dj] >= y):
            continue
        cost[dj, y] = np.inf
        for i in range(r):
            if fk[row, i] <= least * (1.0 + MARGIN) and least < np.inf:
                c = _exact_cost(fc[row, i], nodes, nn, ti, P, W, nodeE, dv[dj], N, B, buf, partials)
                if c < cost[dj, y]:
                    cost[dj, y] = c
                    choice[dj, y] = fc[row, i]
    return 0


@njit(cache=True)
def _lower_bounds(nodes, nn, ti, nodeE, nopt, P, W, dv, N, B, out):
    """Per d index, a lower bound on the stage's evaluator cost under t index ti over every
    choice, memory aside (into ``out``): the sum over its nodes of each node's least term
    of the TPS formula, (e / d + resync) / B + p / d, less a factor MARGIN. The formula is
    a sum of such terms (cost model sec. 3) and every input is non-negative and within the
    supported range (no overflow, no subnormal), so the float sums differ from the exact
    ones by a few ulps relative, far below MARGIN."""
    for di in range(dv.shape[0]):
        d = dv[di]
        total = 0.0
        for q in range(nn):
            v = nodes[q]
            least = np.inf
            for o in range(nopt[v, ti]):
                c = stage_tps(nodeE[q, o], resync_bytes(W[v, ti, o], d, N), P[v, ti, o], d, B)
                if c < least:
                    least = c
            total += least
        out[di] = total * (1.0 - MARGIN)


@njit(cache=True)
def _scratch(n, Lmax, D, cap):
    """The work arrays of :func:`_fill` for frontiers of up to ``cap`` choices."""
    buf = np.empty(max(2 * n, D) + 1)
    return (
        np.empty((n, Lmax)),
        np.empty((n, Lmax)),
        np.empty((n, Lmax)),
        np.empty(n, np.int64),
        np.empty(n, np.int64),
        np.empty(Lmax, np.int64),
        buf,
        np.empty(buf.shape[0] + 1),
        np.empty((2, cap)),
        np.empty((2, cap)),
        np.empty((2, cap)),
        np.empty((2, cap)),
        np.empty((2, cap)),
        np.empty((2, cap), np.int64),
        np.zeros(1, np.int64),
        np.empty((n, Lmax), np.bool_),
        np.empty((2, cap), np.bool_),
    )


@njit(cache=True)
def _may_improve(f, i, j, s, s1, td, k_lo, budget, bound):
    """Whether a stage of cost at least ``bound`` after set j at (s1, k1) can lower some
    f[i, s, k1 + td]: some finite f[j, s1, k1] with max(bound, f[j, s1, k1]) below it."""
    for k1 in range(k_lo, budget - td + 1):
        g = f[j, s1, k1]
        if g == np.inf:
            continue
        v = bound if bound > g else g
        if v < f[i, s, k1 + td]:
            return True
    return False


@njit(cache=True)
def solve_kernel(
    ideals, n, tv, nopt, P, W, A, Bm, deg, nb, term, dv, S, N, M, B, budget, cap, max_bytes
):
    """The least largest stage TPS over the plans, and the plan.

    f[i, s, k] is the least largest TPS of set i as the later stages of a plan whose sum of
    d is s on k devices; a pair (I, J) peels the stage C = I \\ J off the front of I with
    (t, d) at y = ceil(s / d). A stage's cost at (t, d, y) is made when a pair first needs
    it (:func:`_fill`) and it may lower f[i, s, *]: the set behind has a plan at that s that
    alone, then with the stage's lower bound (:func:`_lower_bounds`), is below some entry
    (:func:`_may_improve`); at a y where no choice fits, and every larger one, it is inf.
    A cost not made is never read, so f is that of the full tables.

    Returns (T, plan, counts): plan rows (C, t, d, y, choice code) from the front, empty
    when no plan fits; counts (stages, pairs, frontier points, costs made, 1 when a
    frontier passed ``cap`` choices: nothing else is then valid, ask again with more; 2
    when the stages' cost tables would pass ``max_bytes``: nothing else is valid; costs
    skipped)."""
    ni = ideals.shape[0]
    nt = tv.shape[0]
    nd = dv.shape[0]
    Lmax = P.shape[2]
    Cs, pi_, pj_, pc_, size = _pairs(ideals, n)
    nC = Cs.shape[0]
    if nC * (nt * nd * (S + 1) * 16 + nt * n * Lmax * 8) > max_bytes:
        return np.inf, np.zeros((0, 5), np.int64), np.array([nC, len(pi_), 0, 0, 2, 0])
    cost = np.full((nC, nt, nd, S + 1), np.nan)  # nan: not made yet
    choice = np.zeros((nC, nt, nd, S + 1), np.int64)
    kind = np.full((nC, nt), -2, np.int64)  # -2: not prepared; else _prepare's answer
    nodes = np.empty((nC, n), np.int64)
    nodeE = np.empty((nC, nt, n, Lmax))
    lb = np.empty((nC, nt, nd))
    yinf = np.full((nC, nt), S + 1, np.int64)  # the least y where no choice fits (S + 1: none)
    wk = _scratch(n, Lmax, nb.shape[1], cap)
    made = 0
    skipped = 0
    f = np.full((ni, S + 1, budget + 1), np.inf)
    bp = np.full((ni, S + 1, budget + 1), -1, np.int64)
    kmin = np.full((ni, S + 1), budget + 1, np.int64)  # the least k of a finite f[i, s]
    f[0, 0, 0] = 0.0
    kmin[0, 0] = 0
    np_ = len(pi_)
    for p in range(np_):
        i = pi_[p]
        j = pj_[p]
        k0 = pc_[p]
        for ti in range(nt):
            if kind[k0, ti] == -1:
                continue
            t = tv[ti]
            for di in range(nd):
                if kind[k0, ti] == -1:  # (found by _prepare below: a node has no option)
                    break
                d = dv[di]
                td = t * d
                for s1 in range(S - d + 1):
                    if kmin[j, s1] + td > budget:
                        continue
                    s = s1 + d
                    y = microbatches_in_flight(s, d)
                    c = cost[k0, ti, di, y]
                    if c != c and y >= yinf[k0, ti]:  # no choice fits at a smaller y
                        cost[k0, ti, di, y] = np.inf
                        continue
                    if c != c:
                        # made only when it may lower f[i, s, *]: first by the set behind
                        # alone (costs are >= 0), then by the stage's lower bound
                        if kind[k0, ti] == -2:
                            bound = 0.0
                        else:
                            bound = lb[k0, ti, di]
                        if not _may_improve(f, i, j, s, s1, td, kmin[j, s1], budget, bound):
                            skipped += 1
                            continue
                        if kind[k0, ti] == -2:
                            kind[k0, ti] = _prepare(
                                Cs[k0], n, ti, nopt, deg, nb, term, nodes[k0], nodeE[k0, ti],
                                wk[6], wk[7],
                            )  # fmt: skip
                            if kind[k0, ti] == -1:
                                break
                            _lower_bounds(
                                nodes[k0], size[k0], ti, nodeE[k0, ti], nopt, P, W, dv, N, B,
                                lb[k0, ti],
                            )  # fmt: skip
                            if not _may_improve(
                                f, i, j, s, s1, td, kmin[j, s1], budget, lb[k0, ti, di]
                            ):
                                skipped += 1
                                continue
                        filled = _fill(
                            nodes[k0], size[k0], kind[k0, ti], ti, y, di, nodeE[k0, ti], nopt,
                            P, W, A, Bm, dv, S, N, M, B, cost[k0, ti], choice[k0, ti], wk,
                        )  # fmt: skip
                        if filled < 0:
                            return np.inf, np.zeros((0, 5), np.int64), np.array([0, 0, 0, 0, 1, 0])
                        made += 1
                        if filled == 1:
                            yinf[k0, ti] = y
                            cost[k0, ti, di, y] = np.inf
                            continue
                        c = cost[k0, ti, di, y]
                    if c == np.inf:
                        continue
                    for k1 in range(kmin[j, s1], budget - td + 1):
                        g = f[j, s1, k1]
                        if g == np.inf:
                            continue
                        v = c if c > g else g
                        if v < f[i, s, k1 + td]:
                            f[i, s, k1 + td] = v
                            bp[i, s, k1 + td] = ((p * nt + ti) * nd + di) * (S + 1) + s1
        if p + 1 == np_ or pi_[p + 1] != i:  # set i is done
            for s in range(S + 1):
                for k in range(budget + 1):
                    if f[i, s, k] < np.inf:
                        kmin[i, s] = k
                        break
    counts = np.array([nC, np_, wk[14][0], made, 0, skipped], np.int64)
    best, plan = _plan(f, bp, S, budget, dv, tv, Cs, pc_, pj_, choice)
    return best, plan, counts


@njit(cache=True)
def _pairs(ideals, n):
    """The pairs (I, J) of sets, J strictly inside I, by I (the sets come by size): their
    positions i and j, their stages' ids (C = I \\ J, ids by first appearance), and per
    stage id its bitmask and its number of nodes."""
    sid = np.full(1 << n, -1, np.int64)
    cs_ = []
    pi_ = []
    pj_ = []
    pc_ = []
    for i in range(ideals.shape[0]):
        I = ideals[i]
        for j in range(i):
            J = ideals[j]
            if J & ~I == 0:
                C = I & ~J
                if sid[C] < 0:
                    sid[C] = len(cs_)
                    cs_.append(C)
                pi_.append(i)
                pj_.append(j)
                pc_.append(sid[C])
    Cs = np.array(cs_, np.int64)
    size = np.zeros(Cs.shape[0], np.int64)
    for k in range(Cs.shape[0]):
        for v in range(n):
            size[k] += (Cs[k] >> v) & 1
    pi = np.array(pi_, np.int64)
    pj = np.array(pj_, np.int64)
    pc = np.array(pc_, np.int64)
    return Cs, pi, pj, pc, size


@njit(cache=True)
def _plan(f, bp, S, budget, dv, tv, Cs, pc_, pj_, choice):
    """The least f of the whole set (the last) and its plan's rows (C, t, d, y, choice
    code) from the front by the back-pointers; no rows when no plan fits."""
    ni = f.shape[0]
    nt = tv.shape[0]
    nd = dv.shape[0]
    best = np.inf
    bs = -1
    bk = -1
    for s in range(S + 1):
        for k in range(budget + 1):
            if f[ni - 1, s, k] < best:
                best = f[ni - 1, s, k]
                bs = s
                bk = k
    if bs < 0:
        return best, np.zeros((0, 5), np.int64)
    rows = []
    i, s, k = ni - 1, bs, bk
    while i != 0:
        code = bp[i, s, k]
        s1 = code % (S + 1)
        code //= S + 1
        di = code % nd
        code //= nd
        ti = code % nt
        p = code // nt
        d = dv[di]
        t = tv[ti]
        y = microbatches_in_flight(s, d)
        rows.append((Cs[pc_[p]], t, d, y, choice[pc_[p], ti, di, y]))
        i, s, k = pj_[p], s1, k - t * d
    plan = np.empty((len(rows), 5), np.int64)
    for r in range(len(rows)):
        for c in range(5):
            plan[r, c] = rows[r][c]
    return best, plan


@njit(cache=True)
def pack_arrays(nt, L, counts, pwab, sync_in, sync_out, nbf, csf, kin, deg):
    """The kernel's per-node arrays from flat ones (:func:`dp.compiled.small_dp.kernel_arrays`
    reads the options once into them): ``counts`` per (node, t index) its option count;
    ``pwab`` rows p, w, a, b per option in (node, t, option) order; per option its
    in-edges' sync bytes in ``sync_in`` and its out-edges' in ``sync_out`` (each node's
    edges in ``nbf`` / ``csf`` order: its ``kin`` in-edges' neighbour positions and c,
    then its out-edges'). Returns (nopt, P, W, A, Bm, nb, term) padded to L options and
    max(1, max deg) neighbours with zeros (a missing option's terms are 2 c)."""
    n = deg.shape[0]
    D = max(1, deg.max())
    nopt = counts.reshape(n, nt)
    P = np.zeros((n, nt, L))
    W = np.zeros((n, nt, L))
    A = np.zeros((n, nt, L))
    Bm = np.zeros((n, nt, L))
    nb = np.zeros((n, D), np.int64)
    c = np.zeros((n, D))
    sync = np.zeros(D)
    term = np.empty((n, nt, L, D))
    r = 0  # option, edge and sync entry read so far
    e = 0
    qi = 0
    qo = 0
    for v in range(n):
        k = deg[v]
        for j in range(k):
            nb[v, j] = nbf[e + j]
            c[v, j] = csf[e + j]
        e += k
        for ti in range(nt):
            for o in range(L):
                sync[:] = 0.0
                if o < nopt[v, ti]:
                    P[v, ti, o] = pwab[0, r]
                    W[v, ti, o] = pwab[1, r]
                    A[v, ti, o] = pwab[2, r]
                    Bm[v, ti, o] = pwab[3, r]
                    r += 1
                    for j in range(kin[v]):
                        sync[j] = sync_in[qi]
                        qi += 1
                    for j in range(kin[v], k):
                        sync[j] = sync_out[qo]
                        qo += 1
                for j in range(D):
                    term[v, ti, o, j] = cut_edge_bytes(c[v, j], sync[j])
    return nopt, P, W, A, Bm, nb, term


@njit(cache=True)
def successor_closed(nb, kin, deg, limit):
    """The successor-closed sets as :func:`dp.ideals.enumerate_ideals` gives them (bitmasks
    over the node positions, by size, each size ascending), from each node's neighbours
    ``nb`` (its ``kin`` predecessors, then its successors, ``deg`` in all); empty when
    there are more than ``limit``. Breadth-first by size, as :mod:`dp.ideals`: a set grows
    by a node whose successors are all in it."""
    n = deg.shape[0]
    succ = np.zeros(n, np.int64)
    pred = np.zeros(n, np.int64)
    sinks = 0
    for v in range(n):
        for j in range(kin[v], deg[v]):
            succ[v] |= 1 << nb[v, j]
            pred[nb[v, j]] |= 1 << v
        if succ[v] == 0:
            sinks |= 1 << v
    most = min(limit + 1, 1 << n)
    out = np.empty(most, np.int64)
    join = np.empty(most, np.int64)  # per set, the nodes that can join it
    seen = np.zeros(1 << n, np.bool_)
    out[0] = 0
    join[0] = sinks
    count = 1
    start = 0
    end = 1
    while start < end:
        for idx in range(start, end):
            I = out[idx]
            joinable = join[idx]
            for v in range(n):
                if not (joinable >> v) & 1:
                    continue
                J = I | (1 << v)
                if seen[J]:
                    continue
                if count == limit:
                    return out[:0]
                seen[J] = True
                grow = joinable & ~(1 << v)
                for u in range(n):
                    if (pred[v] >> u) & 1 and succ[u] & ~J == 0:
                        grow |= 1 << u
                out[count] = J
                join[count] = grow
                count += 1
        order = np.argsort(out[end:count])
        out[end:count] = out[end:count][order]
        join[end:count] = join[end:count][order]
        start = end
        end = count
    return out[:count].copy()


@njit(cache=True)
def kernel_inputs(n, nt, ints, floats, limit):
    """:func:`pack_arrays` and :func:`successor_closed` in one call, from two flat arrays
    (fewer conversions and calls, the fixed cost of a small solve): ``ints`` the option
    counts per (node, t index), then per node its in-edge count, its degree, then the
    neighbour positions; ``floats`` the options' p, then w, a, b, then the in-edges' and
    the out-edges' sync bytes, then the edges' c. Returns (ideals, nopt, P, W, A, Bm, deg,
    nb, term); ideals empty when there are more than ``limit``."""
    k = n * nt
    counts = ints[:k]
    kin = ints[k : k + n]
    deg = ints[k + n : k + 2 * n].copy()
    nbf = ints[k + 2 * n :]
    m = 0
    n_in = 0
    n_out = 0
    for v in range(n):
        mv = 0
        for ti in range(nt):
            mv += counts[v * nt + ti]
        m += mv
        n_in += mv * kin[v]
        n_out += mv * (deg[v] - kin[v])
    pwab = floats[: 4 * m].reshape(4, m)
    sync_in = floats[4 * m : 4 * m + n_in]
    sync_out = floats[4 * m + n_in : 4 * m + n_in + n_out]
    csf = floats[4 * m + n_in + n_out :]
    nopt, P, W, A, Bm, nb, term = pack_arrays(
        nt, counts.max(), counts, pwab, sync_in, sync_out, nbf, csf, kin, deg
    )
    ideals = successor_closed(nb, kin, deg, limit)
    return ideals, nopt, P, W, A, Bm, deg, nb, term
