"""The compiled kernel of :mod:`dp.compiled`: the stage tables and the search of the default
mode (sequential pipelining, throughput, 1f1b, Piper's in-flight rule), exact knapsack, as
numba functions over arrays, every stage cost and memory sum as the evaluator makes them
(``fsum``, cost model secs. 3 and 7). Imported only where numba is installed.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import types
from numba.typed import Dict

#: Bits per node position in a choice code (an option index per node).
CODE_BITS = 4


@njit(cache=True)
def fsum(vals, m, partials):
    """``math.fsum`` of ``vals[:m]`` (finite floats), bit for bit: Shewchuk's partials and
    CPython's final rounding; ``partials`` is scratch of at least m + 1 floats."""
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
        partials[i] = x
        np_ = i + 1
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
def _node_edge(v, ti, opt, C, deg, nb, term, buf, partials):
    """Node v's cut-edge bytes in stage C with option ``opt`` (the fsum of its terms)."""
    m = 0
    for k in range(deg[v]):
        if not (C >> nb[v, k]) & 1:
            buf[m] = term[v, ti, opt, k]
            m += 1
    return fsum(buf, m, partials)


#: Relative margin of the float sums: a sum of up to 2**20 non-negative terms is within
#: 2**20 * 2**-53 (about 1e-10) of its exact value; memory within MARGIN * M of M is decided
#: by fsum, and a choice prunes another by memory only when it needs MARGIN * M less.
MARGIN = 1e-9


@njit(cache=True)
def _key(e, w, p, d, N, B):
    """The pruning key of a partial choice: its p sum (d = 0: the stage's options differ
    only in p and memory) or the stage's TPS formula at d on its float sums."""
    if d == 0:
        return p
    return (e / d + 4.0 * (d - 1) * w / (d * N)) / B + p / d


@njit(cache=True)
def _frontier_at(nn, nL, pv, ev, wv, mv, shift, d, N, B, M, fm, fe, fw, fp, fk, fc, heads):
    """The choices of a stage at one y (option memories ``mv``) that no other beats: node
    by node, each kept partial choice extended by every option, in order of float memory
    (a merge of the options' lists, each sorted), kept when its key is below that of every
    kept choice needing MARGIN * M less memory (or the same float memory) and its memory is
    not surely above M. Returns (count, buffer row) of the kept choices, by memory."""
    hi = M * (1.0 + MARGIN)
    gap = M * MARGIN
    fm[0, 0] = 0.0
    fe[0, 0] = 0.0
    fw[0, 0] = 0.0
    fp[0, 0] = 0.0
    fc[0, 0] = 0
    r = 1
    src = 0
    for q in range(nn):
        L = nL[q]
        dst = 1 - src
        for o in range(L):
            heads[o] = 0
        out = 0
        j = 0  # kept choices out[:j] need at least gap less memory than the next
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
            while j < out and fm[dst, j] + gap <= bm:
                if fk[dst, j] < best:
                    best = fk[dst, j]
                j += 1
            e = fe[src, h] + ev[q, bo]
            w = fw[src, h] + wv[q, bo]
            p = fp[src, h] + pv[q, bo]
            k = _key(e, w, p, d, N, B)
            if k >= best:
                continue
            if out > 0 and fm[dst, out - 1] == bm and fk[dst, out - 1] <= k:
                continue
            fm[dst, out] = bm
            fe[dst, out] = e
            fw[dst, out] = w
            fp[dst, out] = p
            fk[dst, out] = k
            fc[dst, out] = fc[src, h] | (bo << shift[q])
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
        buf[q] = 4.0 * (d - 1) * W[v, ti, (code >> (CODE_BITS * v)) & mask] / (d * N)
    R = fsum(buf, nn, partials)
    return (E / d + R) / B + Psum / d


@njit(cache=True)
def _fits(code, nodes, nn, ti, A, Bm, y, M, buf, partials):
    """Whether a choice's memory fsum (a y, b) is at most M (cost model sec. 7)."""
    mask = (1 << CODE_BITS) - 1
    for q in range(nn):
        v = nodes[q]
        o = (code >> (CODE_BITS * v)) & mask
        buf[2 * q] = A[v, ti, o] * y
        buf[2 * q + 1] = Bm[v, ti, o]
    return fsum(buf, 2 * nn, partials) <= M


@njit(cache=True)
def _stage_rows(C, n, ti, nopt, P, W, A, Bm, deg, nb, term, dv, S, N, M, B, cost, choice, sc):
    """cost[di, y] and choice[di, y] of stage C under t index ti: the least evaluator cost
    over the choices whose memory fsum fits M at y (y up to ceil(S / d)), inf where none
    fits. Choices are pruned on float sums per (d, y) (per y when the stage's options
    differ only in p and memory), then the few left near the least are costed exactly."""
    nodes = np.empty(n, np.int64)
    nn = 0
    for v in range(n):
        if (C >> v) & 1:
            if nopt[v, ti] == 0:
                return
            nodes[nn] = v
            nn += 1
    Lmax = P.shape[2]
    buf = np.empty(max(2 * nn, nb.shape[1]) + 1)
    partials = np.empty(buf.shape[0] + 1)
    nodeE = np.empty((nn, Lmax))
    pv = np.empty((nn, Lmax))
    wv = np.empty((nn, Lmax))
    mv = np.empty((nn, Lmax))
    nL = np.empty(nn, np.int64)
    shift = np.empty(nn, np.int64)
    plain = True
    cap = 1
    for q in range(nn):
        v = nodes[q]
        nL[q] = nopt[v, ti]
        shift[q] = CODE_BITS * v
        if cap < 1 << 20:
            cap *= nL[q]
        for o in range(nL[q]):
            nodeE[q, o] = _node_edge(v, ti, o, C, deg, nb, term, buf, partials)
            pv[q, o] = P[v, ti, o]
            wv[q, o] = W[v, ti, o]
            if nodeE[q, o] != nodeE[q, 0] or wv[q, o] != wv[q, 0]:
                plain = False
    fm = np.empty((2, cap))
    fe = np.empty((2, cap))
    fw = np.empty((2, cap))
    fp = np.empty((2, cap))
    fk = np.empty((2, cap))
    fc = np.empty((2, cap), np.int64)
    heads = np.empty(Lmax, np.int64)
    lo = M * (1.0 - MARGIN)
    nd = dv.shape[0]
    for y in range(1, S + 1):
        for q in range(nn):
            v = nodes[q]
            for o in range(nL[q]):
                mv[q, o] = A[v, ti, o] * y + Bm[v, ti, o]
        for di in range(nd):
            d = dv[di]
            if (S + d - 1) // d < y:
                continue
            if plain and di > 0:
                kd = -1
            else:
                kd = 0 if plain else d
            if kd >= 0:
                r, row = _frontier_at(
                    nn, nL, pv, nodeE, wv, mv, shift, kd, N, B, M, fm, fe, fw, fp, fk, fc, heads
                )
                sc[0] += r
                # the choices that fit, and the least key among them
                least = np.inf
                for i in range(r):
                    ok = fm[row, i] <= lo or _fits(
                        fc[row, i], nodes, nn, ti, A, Bm, y, M, buf, partials
                    )
                    if ok:
                        if fk[row, i] < least:
                            least = fk[row, i]
                    else:
                        fk[row, i] = np.inf
            if least == np.inf:
                continue
            # the exact least among the choices within rounding of the least key
            for i in range(r):
                k = fk[row, i]
                if k <= least * (1.0 + MARGIN):
                    c = _exact_cost(fc[row, i], nodes, nn, ti, P, W, nodeE, d, N, B, buf, partials)
                    if c < cost[di, y]:
                        cost[di, y] = c
                        choice[di, y] = fc[row, i]


@njit(cache=True)
def solve_kernel(ideals, n, tv, nopt, P, W, A, Bm, deg, nb, term, dv, S, N, M, B, budget):
    """The least largest stage TPS over the plans, and the plan.

    Returns (T, plan, counts): plan rows (C, t, d, y, choice code) from the front, empty
    when no plan fits; counts (stages, pairs, frontier points)."""
    ni = ideals.shape[0]
    nt = tv.shape[0]
    nd = dv.shape[0]
    # the pairs (I, J), J strictly inside I, and their stages' ids
    ids = Dict.empty(key_type=types.int64, value_type=types.int64)
    pi_ = []
    pj_ = []
    pc_ = []
    for i in range(ni):
        I = ideals[i]
        for j in range(i):
            J = ideals[j]
            if J & ~I == 0:
                C = I & ~J
                if C not in ids:
                    ids[C] = len(ids)
                pi_.append(i)
                pj_.append(j)
                pc_.append(ids[C])
    nC = len(ids)
    Cs = np.empty(nC, np.int64)
    for C, k in ids.items():
        Cs[k] = C
    cost = np.full((nC, nt, nd, S + 1), np.inf)
    choice = np.zeros((nC, nt, nd, S + 1), np.int64)
    sc = np.zeros(1, np.int64)
    for k in range(nC):
        for ti in range(nt):
            _stage_rows(
                Cs[k], n, ti, nopt, P, W, A, Bm, deg, nb, term, dv, S, N, M, B,
                cost[k, ti], choice[k, ti], sc,
            )  # fmt: skip
    # the search: f[i, s, k] = least largest TPS of set i as the later stages with suffix
    # sum of d exactly s on exactly k devices
    f = np.full((ni, S + 1, budget + 1), np.inf)
    bp = np.full((ni, S + 1, budget + 1), -1, np.int64)
    f[0, 0, 0] = 0.0
    for p in range(len(pi_)):
        i = pi_[p]
        j = pj_[p]
        k0 = pc_[p]
        for ti in range(nt):
            t = tv[ti]
            for di in range(nd):
                d = dv[di]
                td = t * d
                if td > budget:
                    continue
                for s1 in range(S - d + 1):
                    s = s1 + d
                    c = cost[k0, ti, di, (s + d - 1) // d]
                    if c == np.inf:
                        continue
                    for k1 in range(budget - td + 1):
                        g = f[j, s1, k1]
                        if g == np.inf:
                            continue
                        v = c if c > g else g
                        if v < f[i, s, k1 + td]:
                            f[i, s, k1 + td] = v
                            bp[i, s, k1 + td] = ((p * nt + ti) * nd + di) * (S + 1) + s1
    best = np.inf
    bs = -1
    bk = -1
    for s in range(S + 1):
        for k in range(budget + 1):
            if f[ni - 1, s, k] < best:
                best = f[ni - 1, s, k]
                bs = s
                bk = k
    counts = np.array([nC, len(pi_), sc[0]], np.int64)
    plan = np.zeros((0, 5), np.int64)
    if bs < 0:
        return best, plan, counts
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
        y = (s + d - 1) // d
        rows.append((Cs[pc_[p]], t, d, y, choice[pc_[p], ti, di, y]))
        i, s, k = pj_[p], s1, k - t * d
    plan = np.empty((len(rows), 5), np.int64)
    for r in range(len(rows)):
        for c in range(5):
            plan[r, c] = rows[r][c]
    return best, plan, counts
