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


@njit(cache=True)
def _frontier(nodes, nn, ti, nopt, P, W, A, Bm, nodeE):
    """The option choices of a stage no other beats in (P, E, W, A, Bm) (float running
    sums in node order), each with its choice code."""
    cur = np.zeros((1, 5))
    code = np.zeros(1, np.int64)
    for q in range(nn):
        v = nodes[q]
        L = nopt[v, ti]
        m = cur.shape[0]
        new = np.empty((m * L, 5))
        ncode = np.empty(m * L, np.int64)
        r = 0
        for i in range(m):
            for opt in range(L):
                new[r, 0] = cur[i, 0] + P[v, ti, opt]
                new[r, 1] = cur[i, 1] + nodeE[q, opt]
                new[r, 2] = cur[i, 2] + W[v, ti, opt]
                new[r, 3] = cur[i, 3] + A[v, ti, opt]
                new[r, 4] = cur[i, 4] + Bm[v, ti, opt]
                ncode[r] = code[i] | (opt << (CODE_BITS * v))
                r += 1
        keep = np.ones(r, np.bool_)
        for i in range(r):
            for j in range(r):
                if i == j or not keep[j]:
                    continue
                le = True
                eq = True
                for c in range(5):
                    if new[j, c] > new[i, c]:
                        le = False
                        break
                    if new[j, c] != new[i, c]:
                        eq = False
                if le and (not eq or j < i):
                    keep[i] = False
                    break
        cnt = 0
        for i in range(r):
            if keep[i]:
                cnt += 1
        cur = np.empty((cnt, 5))
        code = np.empty(cnt, np.int64)
        cnt = 0
        for i in range(r):
            if keep[i]:
                cur[cnt] = new[i]
                code[cnt] = ncode[i]
                cnt += 1
    return code


@njit(cache=True)
def _stage_rows(C, n, ti, nopt, P, W, A, Bm, deg, nb, term, dv, S, N, M, B, cost, choice, sc):
    """cost[di, y] and choice[di, y] of stage C under t index ti: the least evaluator cost
    over the choices whose memory fsum fits M at y (y = 1..S), inf where none fits."""
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
    for q in range(nn):
        for opt in range(nopt[nodes[q], ti]):
            nodeE[q, opt] = _node_edge(nodes[q], ti, opt, C, deg, nb, term, buf, partials)
    codes = _frontier(nodes, nn, ti, nopt, P, W, A, Bm, nodeE)
    sc[0] += codes.shape[0]
    mask = (1 << CODE_BITS) - 1
    for pi in range(codes.shape[0]):
        cd = codes[pi]
        # the largest y whose memory fits (non-decreasing in y: a >= 0)
        ymax = 0
        for y in range(1, S + 1):
            for q in range(nn):
                v = nodes[q]
                o = (cd >> (CODE_BITS * v)) & mask
                buf[2 * q] = A[v, ti, o] * y
                buf[2 * q + 1] = Bm[v, ti, o]
            if fsum(buf, 2 * nn, partials) <= M:
                ymax = y
            else:
                break
        if ymax == 0:
            continue
        for q in range(nn):
            v = nodes[q]
            buf[q] = nodeE[q, (cd >> (CODE_BITS * v)) & mask]
        E = fsum(buf, nn, partials)
        for q in range(nn):
            v = nodes[q]
            buf[q] = P[v, ti, (cd >> (CODE_BITS * v)) & mask]
        Psum = fsum(buf, nn, partials)
        for di in range(dv.shape[0]):
            d = dv[di]
            for q in range(nn):
                v = nodes[q]
                buf[q] = 4.0 * (d - 1) * W[v, ti, (cd >> (CODE_BITS * v)) & mask] / (d * N)
            R = fsum(buf, nn, partials)
            c = (E / d + R) / B + Psum / d
            for y in range(1, ymax + 1):
                if c < cost[di, y]:
                    cost[di, y] = c
                    choice[di, y] = cd


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
