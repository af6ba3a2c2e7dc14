"""Finding 2 against the simulator: is there a tighter batch-time formula than sec. 9's that
holds for every plan?

Sec. 9 charges T_batch = (N - 1) max_i TPS_i + the longest stage-graph path of d_i TPS_i.
Each replica of stage i takes d_i TPS_i per microbatch, so with forwards only (one task per
microbatch and stage) the simulated makespan is exactly a max-plus recursion whose value is

    T_knap = max over source-to-sink paths P of  sum_{i in P} d_i TPS_i
             + max { sum_{i in P} k_i d_i TPS_i : k_i >= 0 integers, sum_{i in P} k_i d_i <= N - 1 }

(:func:`knapsack_batch_time`): the path's latency plus an unbounded knapsack of the N - 1
later microbatches, stage i taking k_i of its replicas' turns. Sec. 9's formula is that
knapsack's linear relaxation ((N - 1) max TPS), so T_knap <= T_batch, equal when d = 1 at
the bottleneck. :func:`study` simulates random plans (:func:`compare.crosscheck.schedule_fuzz.
random_plan_case`) under ``1f1b-flush`` and ``gpipe`` at several forward fractions and
counts, per (pipelining, schedule, fraction), the plans whose simulated batch time exceeds
each formula, and the range of simulated / formula.

``python -m compare.crosscheck.batch_bound [--plans P] [--seed S] [--in-flight RULE]`` prints
the counts (docs/in-flight.md, "Finding 2").
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from compare.crosscheck.schedule_fuzz import FORWARD_FRACTIONS, random_plan_case
from compare.simulation.simulate import simulate
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import Mode

__all__ = ["knapsack_batch_time", "study", "main"]


def _knapsack(items: list[tuple[int, float]], capacity: int) -> float:
    """The largest sum of values of items (weight, value), each taken any number of times,
    with total weight <= ``capacity`` (an unbounded knapsack, by capacity)."""
    best = [0.0] * (capacity + 1)
    for c in range(1, capacity + 1):
        b = best[c - 1]
        for w, v in items:
            if w <= c and best[c - w] + v > b:
                b = best[c - w] + v
        best[c] = b
    return best[capacity]


def _paths(successors: list[set[int]]) -> list[list[int]]:
    """Every maximal path (a source to a sink) of the stage graph."""
    m = len(successors)
    has_pred = {j for s in successors for j in s}
    out: list[list[int]] = []

    def walk(i: int, acc: list[int]) -> None:
        if not successors[i]:
            out.append(acc + [i])
        for j in sorted(successors[i]):
            walk(j, acc + [i])

    for i in range(m):
        if i not in has_pred:
            walk(i, [])
    return out


def knapsack_batch_time(
    tps: list[float], d: list[int], successors: list[set[int]], N: int, pipeline: str
) -> float:
    """T_knap of the module docstring (sequential pipelining: the one path of all stages).

    Examples
    --------
    >>> knapsack_batch_time([1.0], [4], [set()], 8, "sequential")  # one stage, d = N / 2
    8.0
    >>> knapsack_batch_time([1.0, 1.0], [2, 3], [{1}, set()], 6, "sequential")
    10.0
    """
    m = len(tps)
    seq = [{i + 1} if i + 1 < m else set() for i in range(m)]
    best = 0.0
    for path in _paths(seq if pipeline == "sequential" else successors):
        latency = sum(d[i] * tps[i] for i in path)
        turns = _knapsack([(d[i], d[i] * tps[i]) for i in path], N - 1)
        best = max(best, latency + turns)
    return best


def study(plans: int, seed: int = 0, rule: str = "schedule", fractions=FORWARD_FRACTIONS) -> dict:
    """Simulate ``plans`` random plans per pipelining (seeds ``seed``...) under each flush
    schedule and forward fraction, budgets of the in-flight ``rule``; per key
    ``PIPELINE/SCHEDULE/FRACTION``: plans, how many simulate above sec. 9's T_batch and
    above T_knap (relative 1e-9), and the least and largest simulated / formula."""
    out: dict = {}
    for pipeline in ("sequential", "graph"):
        for k in range(plans):
            inst, plan = random_plan_case(seed + k, pipeline)
            ev = evaluate(inst, plan, Mode(pipeline, in_flight=rule))
            tps = [r.cost.tps for r in ev.stages]
            d = [r.d for r in ev.stages]
            succ = [set(r.successors) for r in ev.stages]
            knap = knapsack_batch_time(tps, d, succ, inst.N, pipeline)
            for schedule in ("1f1b-flush", "gpipe"):
                for f in fractions:
                    sim = simulate(
                        inst,
                        plan,
                        schedule=schedule,
                        pipeline=pipeline,
                        forward_fraction=f,
                        in_flight=rule,
                    )
                    key = f"{pipeline}/{schedule}/{f:.3g}"
                    c = out.setdefault(
                        key,
                        {
                            "plans": 0,
                            "above_sec9": 0,
                            "above_knap": 0,
                            "sec9": [float("inf"), 0.0],
                            "knap": [float("inf"), 0.0],
                            "worst_knap": None,
                        },
                    )
                    c["plans"] += 1
                    for name, value in (("sec9", sim.model_batch_time), ("knap", knap)):
                        r = sim.batch_time / value
                        c[name] = [min(c[name][0], r), max(c[name][1], r)]
                        if r > 1 + 1e-9:
                            c[f"above_{name}"] += 1
                            if name == "knap" and r >= c[name][1]:
                                c["worst_knap"] = {"seed": seed + k, "d": d, "ratio": r}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=500, help="random plans per pipelining")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--in-flight", default="schedule", choices=("piper", "schedule"))
    args = ap.parse_args(argv)
    t0 = time.process_time()
    result = study(args.plans, args.seed, args.in_flight)
    print(
        json.dumps(
            {"in_flight": args.in_flight, "study": result, "cpu_seconds": time.process_time() - t0},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
