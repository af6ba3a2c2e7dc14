"""Reproduce docs/pipedream.md, "PipeDream's plan under Piper's contract": PipeDream's plans of
six models on K = 4, 8, 16 workers (N = K, M = 16 GB, B = 1 GB/s, its memory rule on, fewer
workers allowed), with replication and straight, mapped to Piper plans and judged by Piper's
evaluator. Run from the repository root with PipeDream's profiles in ../shared/pipedream-inputs:

    python docs/scripts/pipedream_mapping.py
"""

from __future__ import annotations

from dp.pipedream import pipedream_plan_for
from piper_ilp.pipedream.convert import graph_to_instance
from piper_ilp.pipedream.graph import parse_graph

MODELS = ("alexnet", "vgg16", "resnet18", "squeezenet1_0", "gnmt", "resnet50")


def main() -> None:
    for straight in (False, True):
        valid = total = no_plan = divide = memory = 0
        for model in MODELS:
            graph = parse_graph(f"../shared/pipedream-inputs/{model}/graph.txt")
            for K in (4, 8, 16):
                inst = graph_to_instance(graph, devices=K, memory=16e9, batch=K, bandwidth=1e9)
                m = pipedream_plan_for(
                    inst, graph=graph, machines=K, bandwidths=[1e9], memory=16e9, straight=straight
                )
                total += 1
                valid += m.valid
                if m.plan is None:
                    no_plan += 1
                elif not m.valid:
                    divide += any("divide" in r for r in m.reasons)
                    memory += any("memory" in r for r in m.reasons)
                if (model, K) == ("alexnet", 4) and m.valid:
                    print(
                        f"  alexnet K=4: Piper TPS {m.tps:.6g} s, PipeDream's objective "
                        f"{m.result.time_per_stage:.6g} s"
                    )
        kind = "straight" if straight else "replication"
        print(
            f"{kind}: {valid} of {total} mapped plans valid; invalid because a replication does "
            f"not divide N: {divide}, Piper's memory rule: {memory}; no PipeDream plan: {no_plan}"
        )


if __name__ == "__main__":
    main()
