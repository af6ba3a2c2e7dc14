"""Piper's rule shared across data-parallel degrees (dp.greedy_tables.shared_rule_runs)
gives, at every d, what the rule evaluated on each stage at that d alone (greedy_rule_grid
at y = 1..cap) gives, bit for bit: the same runs of y, the same P and the same monotone
flags, also where costs tie in exact arithmetic and their floats differ from one d to
another; and the rule on many stages of general nodes at once (general_rule_runs) gives
what it gives on each stage and d alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dp.greedy_rule import greedy_node_rows, greedy_rule_grid, running_sum
from dp.greedy_tables import general_rule_runs, plain_rule_columns, shared_rule_runs
from dp.table_arrays import choice_runs

N, B = 32, 25.0 * 2**30


def _classes(rng, k: int) -> np.ndarray:
    """k node classes (p0, p1, a0, b0, a1, b1, w, two): option 0 "vanilla" (more
    activation memory), option 1 recomputation (more time, less activation memory).
    Times are few and small multiples of one another, so that the ratios tie in exact
    arithmetic across classes; some classes differ in p only in the last bits (F may
    change with d), some have one option."""
    p = rng.choice([0.001, 0.002, 0.003, 0.0015], size=k)
    extra = rng.choice([0.0, 0.001, 0.002, 0.0005], size=k)
    a0 = rng.choice([64.0, 128.0, 96.0], size=k) * 2**20
    a1 = a0 * rng.choice([0.25, 0.5, 0.0], size=k)
    b = rng.choice([1.0, 2.0, 3.0], size=k) * 2**26
    w = rng.choice([0.0, 2**24, 3 * 2**23], size=k)
    two = rng.random(k) < 0.9
    p1 = p + extra
    near = rng.random(k) < 0.15
    p1 = np.where(near, np.nextafter(p, 0.0), p1)
    rows = np.stack([p, p1, a0, b, a1, b, w, two.astype(float)], axis=1)
    rows[~two, 1] = rows[~two, 0]
    rows[~two, 4] = rows[~two, 2]
    rows[~two, 5] = rows[~two, 3]
    return rows


def _case(seed: int):
    rng = np.random.default_rng(seed)
    cls = _classes(rng, 5)
    U = 40
    sizes = rng.integers(1, 13, size=U)
    which = rng.integers(0, len(cls), size=sizes.sum())
    # cut bytes: mostly 0, the first and last node of a block often cut
    e = np.where(
        rng.random(sizes.sum()) < 0.3, rng.choice([2**20, 3 * 2**19, 7e5], sizes.sum()), 0.0
    )
    ds = np.array([1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32])
    S = 64
    caps = -(-S // ds)
    need = rng.random((U, len(ds))) < 0.85
    M = float(rng.choice([1.5, 2.0, 3.0]) * 2**30)
    return cls, which, e, sizes, ds, caps, need, M


def _per_d(opt, e, sizes, ds, caps, need, M):
    """The rule on each stage at each d on its own, at y = 1..cap: per d, per needed
    stage its runs (first y, last y, P) and whether they are monotone."""
    starts = np.cumsum(sizes) - sizes
    out = []
    for j, d in enumerate(ds.tolist()):
        per = {}
        for u in np.flatnonzero(need[:, j]).tolist():
            at = np.arange(starts[u], starts[u] + sizes[u])
            c = plain_rule_columns(opt[at], e[at], d, N, B)
            cols = (*(c[None, :, k] for k in range(5)), c[None, :, 5] > 0)
            sw, feas = greedy_rule_grid(cols, np.arange(1, int(caps[j]) + 1), M)
            s0, s1, contiguous = choice_runs(sw, feas)
            P = running_sum(np.where(sw[0, s0[0] - 1], c[:, 7], c[:, 6]))
            mono = bool(contiguous[0]) and not (P[1:] < P[:-1]).any()
            per[u] = (s0[0].tolist(), s1[0].tolist(), P.tolist(), mono)
        out.append(per)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_shared_rule_runs_equal_the_rule_at_each_d(seed):
    classes, which, e, sizes, ds, caps, need, M = _case(seed)
    count, first, lo, hi, P, mono = shared_rule_runs(
        classes, which, e, sizes, ds, caps, need, (N, B, M), lambda: None
    )
    want = _per_d(classes[which], e, sizes, ds, caps, need, M)
    runs = 0
    for j in range(len(ds)):
        for u in range(len(sizes)):
            at = slice(first[u, j], first[u, j] + count[u, j])
            got = (lo[at].tolist(), hi[at].tolist(), P[at].tolist(), bool(mono[u, j]))
            assert got == want[j].get(u, ([], [], [], True)), (ds[j], u)
            runs += count[u, j]
    assert runs > 0


def _general_stages(rng, count: int):
    """Stages of general nodes: per node one or two options (p, E, w, a, b, e) whose
    costs tie in exact arithmetic or differ in the last bits, with cut bytes."""
    stages = []
    for _ in range(count):
        nodes = []
        for _ in range(int(rng.integers(1, 7))):
            e = float(rng.choice([0.0, 2**20, 7e5]))
            w = float(rng.choice([0.0, 2**24]))
            a0 = float(rng.choice([64.0, 96.0])) * 2**20
            b = float(rng.choice([1.0, 2.0])) * 2**26
            p = float(rng.choice([0.001, 0.002, 0.003]))
            opts = [(p, e * 1.0000001, w, a0, b, e)]
            if rng.random() < 0.85:
                p1 = p + float(rng.choice([0.0, 0.001, 0.0005]))
                p1 = float(np.nextafter(p, 0.0)) if rng.random() < 0.15 else p1
                a1 = a0 * float(rng.choice([0.25, 0.5]))
                opts.append((p1, e * 1.0000001, w, a1, b + float(rng.choice([0.0, 2**20])), e))
            nodes.append(opts)
        stages.append(nodes)
    return stages


def _general_by_stage(stages, ds, caps, M):
    """The rule on each stage and d alone (greedy_node_rows, greedy_rule_grid), its runs
    and the fsums of the chosen options."""
    out = []
    for k, stage in enumerate(stages):
        for jd, (d, cap) in enumerate(zip(ds.tolist(), caps.tolist())):
            nr = greedy_node_rows([[o[:1] + o[5:] + o[2:5] for o in x] for x in stage], d, N, B)
            cols = (nr.delta, nr.aF, nr.bF, nr.aO, nr.bO, nr.o_first)
            sw, feas = greedy_rule_grid(tuple(c[None, :] for c in cols), np.arange(1, cap + 1), M)
            starts, ends, _ = choice_runs(sw, feas)
            for s0, s1 in zip(starts[0].tolist(), ends[0].tolist()):
                mask = sw[0, s0 - 1]
                chosen = [x[nr.O[i] if mask[i] else nr.F[i]] for i, x in enumerate(stage)]
                sums = [math.fsum(o[c] for o in chosen) for c in range(3)]
                out.append((k * len(ds) + jd, s0, s1, *sums))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_general_rule_runs_equal_the_rule_per_stage(seed):
    rng = np.random.default_rng(seed)
    stages = _general_stages(rng, 300)
    ds = np.array([1, 2, 3, 4, 6, 8])
    caps = -(-24 // ds)
    M = float(rng.choice([0.4, 0.6, 1.0]) * 2**30)
    got = general_rule_runs(stages, ds, caps, (N, B, M), lambda: None)
    got = list(zip(*(x.tolist() for x in got)))
    want = _general_by_stage(stages, ds, caps, M)
    assert len(want) > 1000
    assert got == want
