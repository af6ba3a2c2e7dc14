"""The general stages made many at once (dp/general_stages.py) against the one-stage
functions they must reproduce bit for bit: pareto_frontier's rows, and the rows per d that
the y capacities and the staircase by cost give."""

import numpy as np
import pytest

from compare.builders.generators import random_instance
from dp.general_stages import GeneralStages
from dp.knapsack import (
    pareto_frontier,
    pareto_order,
    pareto_orders,
    stage_items,
    stage_tps_from_sums,
    y_capacities,
)
from dp.table_arrays import staircase


def _stages(inst, rng, count):
    """Random node sets (bitmasks over positions) whose nodes all have options for t."""
    n = len(inst.nodes)
    out = []
    for _ in range(count):
        size = int(rng.integers(1, n + 1))
        pos = rng.choice(n, size=size, replace=False)
        out.append(sum(1 << int(i) for i in pos))
    return out


def _cases():
    for fam, seed, opts in (
        ("layered", 1, 2),
        ("towers", 2, (1, 3)),
        ("numerics", 3, 2),
        ("series-parallel", 4, (2, 3)),
    ):
        yield fam, random_instance(fam, 9, seed, options_per_t=opts)


@pytest.mark.parametrize("fam,inst", list(_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_frontiers_and_rows_match_one_stage_at_a_time(fam, inst):
    rng = np.random.default_rng(11)
    S = min(inst.N, inst.K)
    ids = inst.node_ids
    gen = GeneralStages(inst, ids, S, lambda: None)
    for t in inst.t_values:
        ok = [i for i, nd in enumerate(inst.nodes) if t in nd.options]
        Cs = [
            C
            for C in _stages(inst, rng, 300)
            if all((C >> i) & 1 == 0 or i in ok for i in range(len(ids)))
        ]
        if not Cs:
            continue
        fr = gen.frontiers(Cs, t)
        starts = np.cumsum(fr.count) - fr.count
        ds = np.array([d for d in (1, 2, 3, 4, 6, 8) if d <= S and t * d <= inst.K], dtype=np.int64)
        caps = -(-S // ds)
        M = inst.M
        got = gen.rows(fr, ds, caps, M * (1 - 1e-12), M * (1 + 1e-12), None)
        row_at = np.cumsum(np.bincount(got.row_stage, minlength=len(Cs)))
        pt_at = np.concatenate(([0], np.cumsum(got.row_points)))
        for s, C in enumerate(Cs):
            nodes = [ids[i] for i in range(len(ids)) if (C >> i) & 1]
            want = pareto_frontier(stage_items(inst, nodes, t), M, y_range=(1, S))
            rows = fr.rows[starts[s] : starts[s] + fr.count[s]]
            for j, col in enumerate((want.P, want.E, want.W, want.A, want.Bm)):
                assert rows[:, j].tobytes() == np.asarray(col, dtype=float).tobytes(), (
                    fam,
                    t,
                    s,
                    j,
                )
            if not len(want):
                continue
            sure, maybe, decided = y_capacities(
                want.A, want.Bm, M * (1 - 1e-12), M * (1 + 1e-12), S
            )
            assert bool(got.decided[s]) == decided
            if not decided:
                continue
            # the rows of stage s, by d: the staircase by cost of the capped capacities
            r0 = int(row_at[s - 1]) if s else 0
            mine = {
                int(got.row_d[r]): (
                    got.cost[pt_at[r] : pt_at[r + 1]],
                    got.yhi[pt_at[r] : pt_at[r + 1]],
                )
                for r in range(r0, int(row_at[s]))
            }
            for d, cap in zip(ds.tolist(), caps.tolist()):
                cost = stage_tps_from_sums(want.E, want.W, want.P, d, inst.N, inst.B)
                yc = np.minimum(sure, cap)
                k = staircase(cost, yc)
                if not len(k):
                    assert d not in mine
                    continue
                assert mine[d][0].tobytes() == cost[k].tobytes()
                assert np.array_equal(mine[d][1], yc[k])


def test_pareto_orders_any_number_of_columns():
    """pareto_orders keeps, per array, what pareto_order keeps on it alone, for one to five
    columns, with columns constant in every array or in some."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        k = int(rng.integers(1, 6))
        nseg = int(rng.integers(1, 6))
        lens = rng.integers(1, int(rng.choice([4, 30, 600])), size=nseg)
        arrays = []
        const = rng.random(k) < 0.3
        for n in lens:
            a = rng.integers(0, int(rng.choice([2, 6, 50])), size=(n, k)).astype(float)
            a[:, const] = 2.0
            if rng.random() < 0.3:
                a[:, int(rng.integers(0, k))] = float(rng.integers(0, 3))
            arrays.append(a)
        got = pareto_orders(np.concatenate(arrays), np.repeat(np.arange(nseg), lens))
        starts = np.cumsum(lens) - lens
        want = np.concatenate([s + pareto_order(a) for s, a in zip(starts, arrays)])
        assert np.array_equal(np.sort(got), np.sort(want))
