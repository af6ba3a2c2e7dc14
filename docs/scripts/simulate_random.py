"""Reproduce the random-plan numbers of docs/findings.md ("The schedule simulator").

    python docs/scripts/simulate_random.py dp-plans        # the DP's optimal plans of 60 seeds
    python docs/scripts/simulate_random.py fuzz 10000      # random plans, every schedule

``dp-plans``: seeds 100-159, family ``FAMILIES[seed % 5]`` (chain, skip, layered,
series-parallel, fork-join), 4 + seed % 4 nodes, the generator's own settings; the DP's
optimal plan of each instance that has one, simulated under 1f1b, 1f1b-flush and gpipe.

``fuzz COUNT``: plans 0..COUNT-1, each a random topological order of a seeded random
instance (3-7 nodes, t = 1, memory unlimited) cut into 1-5 stages of random degree d | N,
under each pipelining it is valid for, with forward fractions 1, 1/3, 1/2 and 0.9: the 1F1B
period (2,000 microbatches) against max TPS and the flush batch times against sec. 9's
model, apart for the cases where finding 1 applies (some arc i -> j the schedule follows
has y_i d_i < d_i + y_j d_j).
"""

from __future__ import annotations

import random
import statistics
import sys

import networkx as nx

from compare.builders.generators import FAMILIES, random_instance
from compare.simulation.simulate import simulate
from dp import solve_dp
from piper_ilp import evaluate
from piper_ilp.mode import Mode
from piper_ilp.pipeline import in_flight, microbatches_held, stage_graph
from piper_ilp.plan import Plan, Stage

FIVE = ("chain", "skip", "layered", "series-parallel", "fork-join")
REL = 1e-9


def dp_plans() -> None:
    """The DP's optimal plans of seeds 100-159 under the three schedules."""
    period, flush, gpipe, peak_ok, shapes = [], [], [], True, {}
    for seed in range(100, 160):
        inst = random_instance(FIVE[seed % 5], 4 + seed % 4, seed)
        plan = solve_dp(inst).plan
        if plan is None:
            continue
        runs = {s: simulate(inst, plan, schedule=s) for s in ("1f1b", "1f1b-flush", "gpipe")}
        r = runs["1f1b"].period / runs["1f1b"].max_tps
        period.append(r)
        if r > 1 + REL:
            key = (
                tuple(s.d for s in plan.stages),
                tuple(s["y_model"] for s in runs["1f1b"].stages),
            )
            shapes[key] = shapes.get(key, 0) + 1
        flush.append(runs["1f1b-flush"].batch_time / runs["1f1b-flush"].model_batch_time)
        gpipe.append(runs["gpipe"].batch_time / runs["gpipe"].model_batch_time)
        peak_ok &= all(s["peak_in_flight"] <= s["y_model"] for r in runs.values() for s in r.stages)
    at_max = sum(r <= 1 + REL for r in period)
    print(f"plans {len(period)}; 1f1b period at max TPS on {at_max}, at most {max(period):.4f}x")
    print("  above max TPS, (d per stage, y per stage): count", shapes)
    print(
        f"1f1b-flush batch / model: {min(flush):.4f}-{max(flush):.4f} "
        f"(median {statistics.median(flush):.4f})"
    )
    print(f"gpipe batch / model: {min(gpipe):.4f}-{max(gpipe):.4f}")
    print(f"peak in flight <= y everywhere: {peak_ok}")


def random_plan(k: int):
    """Plan ``k`` of the fuzz: the instance, the plan and the pipelinings it is valid under."""
    rng = random.Random(k)
    N = rng.choice([2, 3, 4, 6, 8, 12])
    fam = FAMILIES[k % len(FAMILIES)]
    inst = random_instance(fam, rng.randint(3, 7), seed=k, memory="loose", t_values=(1,))
    inst = inst.with_settings(K=10**6, M=1e18, N=N)
    order = list(nx.lexicographical_topological_sort(inst.graph, key=lambda v: rng.random()))
    cuts = sorted(rng.sample(range(1, len(order)), min(rng.randint(1, 5), len(order)) - 1))
    stages, left = [], N
    for a, b in zip([0] + cuts, cuts + [len(order)]):
        divisors = [x for x in range(1, N + 1) if N % x == 0]
        d = rng.choice([x for x in divisors if x <= left or x == 1 or rng.random() < 0.2])
        left = max(left - d, 1)
        stages.append(Stage(tuple(order[a:b]), d, 1, {v: "vanilla" for v in order[a:b]}))
    plan = Plan(tuple(stages))
    return inst, plan, [p for p in ("sequential", "graph") if evaluate(inst, plan, Mode(p)).valid]


def rounding_gap(inst, plan, pipeline: str) -> bool:
    """True where finding 1 applies: y_i d_i < d_i + y_j d_j on an arc the schedule follows."""
    d = [s.d for s in plan.stages]
    succ = stage_graph(inst, plan)
    run = [{i + 1} - {len(d)} for i in range(len(d))] if pipeline == "sequential" else succ
    y = [microbatches_held(h, di, inst.N) for h, di in zip(in_flight(d, succ, pipeline), d)]
    return any(y[i] * d[i] < d[i] + y[j] * d[j] for i in range(len(d)) for j in run[i])


def fuzz(count: int) -> None:
    """Flush batch times of ``count`` random plans against sec. 9's model."""
    cases = gap_cases = flow_shop = flow_shop_equal = 0
    over = {"1f1b-flush": [], "gpipe": []}
    over_without_gap = {"1f1b-flush": 0, "gpipe": 0}
    short = {False: [], True: []}  # 1f1b period above max TPS, without / with finding 1
    for k in range(count):
        inst, plan, pipelines = random_plan(k)
        d1 = all(s.d == 1 for s in plan.stages)
        for pipeline in pipelines:
            gap = rounding_gap(inst, plan, pipeline)
            for fraction in (1.0, 1 / 3, 1 / 2, 0.9):
                cases += 1
                gap_cases += gap
                sim = simulate(
                    inst,
                    plan,
                    schedule="1f1b",
                    pipeline=pipeline,
                    microbatches=2000,
                    forward_fraction=fraction,
                )
                ratio = sim.period / sim.max_tps
                if ratio > 1 + REL:
                    short[gap].append((ratio, tuple(s.d for s in plan.stages)))
                for schedule in over:
                    sim = simulate(
                        inst, plan, schedule=schedule, pipeline=pipeline, forward_fraction=fraction
                    )
                    ratio = sim.batch_time / sim.model_batch_time
                    if ratio > 1 + REL:
                        over[schedule].append(ratio)
                        over_without_gap[schedule] += not gap
                    if (
                        schedule == "1f1b-flush"
                        and d1
                        and fraction == 1.0
                        and pipeline == "sequential"
                    ):
                        flow_shop += 1
                        flow_shop_equal += abs(ratio - 1) <= 1e-12
    print(f"cases {cases} (plans {count}); finding 1 applies to {gap_cases}")
    worst = max(short[True], default=(1.0, ()))
    print(
        f"1f1b period above max TPS: {len(short[False])} cases without finding 1, "
        f"{len(short[True])} with it (up to {worst[0]:.4f}x, d = {worst[1]})"
    )
    for schedule, ratios in over.items():
        top = f", up to {max(ratios):.4f}x" if ratios else ""
        print(
            f"{schedule}: above the model in {len(ratios)} cases{top}; "
            f"of them without finding 1: {over_without_gap[schedule]}"
        )
    print(
        f"sequential, d = 1, forward fraction 1 (a flow shop): {flow_shop} cases, "
        f"equal to the model within 1e-12: {flow_shop_equal}"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["dp-plans"]:
        dp_plans()
    elif sys.argv[1:2] == ["fuzz"] and len(sys.argv) == 3:
        fuzz(int(sys.argv[2]))
    else:
        sys.exit(__doc__)
