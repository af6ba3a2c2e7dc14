#!/usr/bin/env python3
"""A small external planner, to show the protocol of ``--external NAME=COMMAND``.

Usage: split_planner.py INSTANCE.json [--devices K] [--memory M] [--batch N]

It reads a Piper instance (docs/cost-model.md sec. 1), and prints one plan JSON (sec. 2) on
standard output. It uses only the standard library, as a planner written in another
project would: nodes in one topological order are cut into m consecutive stages of about
equal compute time (p of each node's least-memory t = 1 option), d = t = 1, and each node
takes its least-memory option; it tries m = 1, 2, ... up to min(K, N) and prints the first split
whose stages all fit in memory (sec. 2, rule 6), or the split with the most stages when none does
(the evaluator will then reject it, and piper-ilp reports that as the planner's mismatch).
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def topological(nodes, edges):
    indeg = {n["id"]: 0 for n in nodes}
    succ = {n["id"]: [] for n in nodes}
    for e in edges:
        succ[e["sourceId"]].append(e["destId"])
        indeg[e["destId"]] += 1
    ready = [n["id"] for n in nodes if indeg[n["id"]] == 0]
    order = []
    while ready:
        v = ready.pop(0)
        order.append(v)
        for x in succ[v]:
            indeg[x] -= 1
            if indeg[x] == 0:
                ready.append(x)
    return order


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("instance")
    ap.add_argument("--devices", type=int)
    ap.add_argument("--memory", type=float)
    ap.add_argument("--batch", type=int)
    args = ap.parse_args()
    with open(args.instance, encoding="utf-8") as fh:
        inst = json.load(fh)
    M = args.memory if args.memory is not None else inst["maxMemoryPerDevice"]
    K = args.devices if args.devices is not None else inst["maxDevices"]
    N = args.batch if args.batch is not None else inst.get("mbsInBatch", inst.get("maxBatchSize"))
    nodes = {n["id"]: n for n in inst["nodes"]}
    order = topological(inst["nodes"], inst["edges"])
    option = {
        v: min(nodes[v]["TMPCs"]["1"], key=lambda o: o["memoryUsageA"] + o["memoryUsageB"])
        for v in order
    }
    total = sum(option[v]["timePerSample"] for v in order)
    stages = []
    for m in range(1, min(len(order), K, N) + 1):  # d = t = 1: m stages use m devices, sum d = m
        stages, current, acc = [], [], 0.0
        for v in order:
            current.append(v)
            acc += option[v]["timePerSample"]
            if acc >= total * (len(stages) + 1) / m and len(stages) < m - 1:
                stages.append(current)
                current = []
        stages.append(current)
        stages = [s for s in stages if s]
        k = len(stages)
        # stage i holds y = k - i microbatches in flight (d = 1 everywhere)
        fits = all(
            math.fsum(
                [option[v]["memoryUsageA"] * (k - i) for v in s]
                + [option[v]["memoryUsageB"] for v in s]
            )
            <= M
            for i, s in enumerate(stages)
        )
        if fits:
            break
    plan = {
        "stages": [
            {
                "nodes": s,
                "dataParallelDegree": 1,
                "tensorParallelDegree": 1,
                "TMPCids": {str(v): option[v]["id"] for v in s},
            }
            for s in stages
        ]
    }
    json.dump(plan, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
