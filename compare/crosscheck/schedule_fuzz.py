"""The simulator as the referee of the in-flight rule (contract sec. 11): fuzz plans, simulate
their 1F1B schedule, and count the plans off their model.

A plan is *on its model* under an in-flight rule when 1F1B, each replica keeping the rule's
budget y (:func:`compare.simulation.simulate.simulate`), runs at a steady-state period of max
TPS (within :data:`RTOL` relative) with no replica holding more than its y microbatches. Under
``--in-flight schedule`` every plan must be on its model; a plan off it is a counterexample to
the rule. The same plans under Piper's rule are the control: they show that the fuzz finds
plans that the ceiling of y = ceil(h / d) leaves short.

Two kinds of plans, both pipelinings (``sequential``; ``graph`` on branching DAGs):

* :func:`random_plan_case`: a random DAG of :mod:`compare.builders.generators`, cut into
  stages along a random topological order, each stage with a random d in 1..8 (uneven), the
  stages' TPS set through the nodes' p (half of them tied at the bottleneck, the hardest case
  for a pipeline), no edge bytes, no memory limit that binds, N the least multiple of every d
  that holds the plan;
* :func:`dp_plan_case`: the DP's optimum (:func:`dp.solver.solve_dp`) of a random instance
  of the generators under the rule, N = 840 (every d in 1..8 divides it).

:func:`fuzz` runs both and counts; ``python -m compare.crosscheck.schedule_fuzz`` prints the
counts (the numbers in docs/in-flight.md come from it).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field

from compare.builders.generators import FAMILIES, random_instance
from compare.simulation.simulate import MAX_TASKS, simulate
from piper_ilp.instance import Instance, instance_from_dict
from piper_ilp.mode import Mode
from piper_ilp.pipeline import in_flight, stage_graph
from piper_ilp.plan import Plan, Stage

__all__ = [
    "RTOL",
    "RETRIES",
    "FORWARD_FRACTIONS",
    "Check",
    "FuzzCounts",
    "random_plan_case",
    "dp_plan_case",
    "check_plan",
    "fuzz",
    "main",
]

#: A period within this relative distance of max TPS is max TPS (the issue's 1e-9).
RTOL = 1e-9

#: How many times a reading below max TPS is simulated again, with four times the microbatches.
RETRIES = 3

#: The forward shares of a microbatch's work the fuzz simulates (1: one task per microbatch).
FORWARD_FRACTIONS = (1.0 / 3.0, 0.5, 0.9, 1.0)

#: The families whose DAGs branch (graph pipelining differs from sequential on them).
BRANCHING = ("layered", "series-parallel", "fork-join", "towers")

#: N for the DP's instances: every d in 1..8 divides it.
DP_N = 840


@dataclass(frozen=True)
class Check:
    """One plan simulated under one rule: ``ratio`` = 1F1B period / max TPS, ``peak_ok``
    (no replica above its y), ``microbatches`` simulated, and ``verdict``: "on" (ratio 1
    within :data:`RTOL` and peak within y), "off" (ratio above 1 + RTOL or a peak above y:
    a counterexample under ``schedule``) or "unsettled" (ratio below 1 - RTOL even with four
    times the microbatches: the window still in the transient, no steady state can be
    faster than max TPS)."""

    ratio: float
    peak_ok: bool
    microbatches: int
    verdict: str


@dataclass
class FuzzCounts:
    """Counts per (kind, rule): plans checked and their verdicts, the largest period ratio,
    and the first five plans per key not on their model (``examples``: seed, pipeline,
    forward fraction, d, ratio)."""

    checked: dict = field(default_factory=dict)
    examples: list = field(default_factory=list)

    def add(self, key: str, check: Check, example: dict) -> None:
        c = self.checked.setdefault(
            key, {"plans": 0, "on": 0, "off": 0, "unsettled": 0, "max_ratio": 0.0}
        )
        c["plans"] += 1
        c[check.verdict] += 1
        c["max_ratio"] = max(c["max_ratio"], check.ratio)
        if check.verdict != "on" and sum(e["key"] == key for e in self.examples) < 5:
            self.examples.append(
                {"key": key, **example, "ratio": check.ratio, "peak_ok": check.peak_ok}
            )

    def off(self, rule: str = "schedule") -> int:
        """Plans off their model under ``rule`` (every kind)."""
        return sum(c["off"] for k, c in self.checked.items() if k.endswith("/" + rule))


def _random_order(inst: Instance, rng: random.Random) -> list[int]:
    """A random topological order of the instance's nodes."""
    indeg = {v: 0 for v in inst.node_ids}
    for e in inst.edges:
        indeg[e.dst] += 1
    ready = [v for v, k in indeg.items() if k == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for w, _ in inst.out_edges[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return order


def random_plan_case(seed: int, pipeline: str = "sequential") -> tuple[Instance, Plan]:
    """A random plan and an instance made for it (see the module docstring): valid under
    both in-flight rules, every stage's TPS = its nodes' p / d exactly.

    Examples
    --------
    >>> inst, plan = random_plan_case(3, "graph")
    >>> from piper_ilp.evaluate import evaluate
    >>> evaluate(inst, plan, Mode("graph", in_flight="schedule")).valid
    True
    """
    rng = random.Random(seed)
    family = rng.choice(BRANCHING if pipeline == "graph" else FAMILIES)
    shape = random_instance(family, rng.randint(2, 9), seed=seed, memory="loose")
    order = _random_order(shape, rng)
    m = rng.randint(1, min(6, len(order)))
    cuts = sorted(rng.sample(range(1, len(order)), m - 1))
    parts = [order[a:b] for a, b in zip([0] + cuts, cuts + [len(order)])]
    d = [rng.choice((1, 1, 2, 3, 4, 5, 6, 7, 8)) for _ in parts]
    tps = [1.0 if rng.random() < 0.5 else rng.uniform(0.2, 1.0) for _ in parts]
    p: dict[int, float] = {}
    for nodes, di, ti in zip(parts, d, tps):
        weights = [rng.uniform(0.5, 1.5) for _ in nodes]
        total = sum(weights)
        for v, wt in zip(nodes, weights):
            p[v] = di * ti * wt / total
    plan = Plan(
        tuple(Stage(tuple(nodes), di, 1, {v: "v" for v in nodes}) for nodes, di in zip(parts, d))
    )
    # the least multiple of lcm(d) that holds the plan under both rules (q >= h)
    succ = stage_graph(shape, plan)
    need = max(in_flight(d, succ, pipeline, "schedule"))
    step = math.lcm(*d)
    N = step * -(-need // step)
    data = {
        "maxDevices": sum(d),
        "maxMemoryPerDevice": 1.0,
        "bandwidth": 1.0,
        "mbsInBatch": N,
        "nodes": [
            {
                "id": v,
                "TMPCs": {
                    "1": [
                        {
                            "id": "v",
                            "timePerSample": p[v],
                            "parameterSize": 0.0,
                            "memoryUsageA": 0.0,
                            "memoryUsageB": 0.0,
                            "syncTimeFw": {str(u): 0.0 for u, _ in shape.in_edges[v]},
                            "syncTimeBw": {str(x): 0.0 for x, _ in shape.out_edges[v]},
                        }
                    ]
                },
            }
            for v in shape.node_ids
        ],
        "edges": [
            {"sourceId": e.src, "destId": e.dst, "communicationCost": 0.0} for e in shape.edges
        ],
    }
    return instance_from_dict(data, source=f"<random plan {seed} ({family}, {pipeline})>"), plan


def dp_plan_case(seed: int, pipeline: str = "sequential", in_flight_rule: str = "schedule"):
    """The DP's optimal plan under ``Mode(pipeline, in_flight=in_flight_rule)`` of a random
    instance of the generators (K in 4..24, N = :data:`DP_N`), as (instance, plan), or None
    when the instance has no plan (or is too large for the graph DP's guards)."""
    from dp.solver import solve_dp
    from piper_ilp.errors import SizeLimitError

    rng = random.Random(seed)
    family = rng.choice(BRANCHING if pipeline == "graph" else FAMILIES)
    inst = random_instance(
        family,
        rng.randint(3, 8),
        seed=seed,
        K=rng.choice((4, 6, 8, 12, 16, 24)),
        N=DP_N,
        memory=rng.choice(("tight", 0.2, 0.5, "loose")),
    )
    try:
        sol = solve_dp(inst, mode=Mode(pipeline, in_flight=in_flight_rule))
    except SizeLimitError:
        return None
    return None if sol.plan is None else (inst, sol.plan)


def check_plan(
    instance: Instance,
    plan: Plan,
    pipeline: str,
    rule: str,
    forward_fraction: float = 1.0 / 3.0,
) -> Check:
    """Simulate ``plan`` under 1F1B with the budgets of ``rule`` and judge it (:class:`Check`).
    The run is long enough to read a steady state over whole cycles of lcm(d): max(64,
    8 max h, 4 lcm(d)) microbatches, four times that (up to :data:`RETRIES` times, within
    the simulator's task limit) while the reading is below max TPS: a stage whose TPS is
    close to the bottleneck's takes long to settle."""
    d = [st.d for st in plan.stages]
    from piper_ilp.evaluate import evaluate

    ev = evaluate(instance, plan, Mode(pipeline, in_flight=rule))
    count = max(64, 8 * max(r.s for r in ev.stages), 4 * math.lcm(*d))
    for attempt in range(RETRIES + 1):
        if attempt:
            count *= 4
        sim = simulate(
            instance,
            plan,
            schedule="1f1b",
            pipeline=pipeline,
            microbatches=count,
            forward_fraction=forward_fraction,
            in_flight=rule,
        )
        ratio = sim.period / sim.max_tps
        peak_ok = all(s["peak_in_flight"] <= s["y_model"] for s in sim.stages)
        if ratio >= 1 - RTOL or count * 4 * len(d) * 2 > MAX_TASKS:
            break
    if ratio > 1 + RTOL or not peak_ok:
        verdict = "off"
    elif ratio < 1 - RTOL:
        verdict = "unsettled"
    else:
        verdict = "on"
    return Check(ratio, peak_ok, count, verdict)


def fuzz(
    random_plans: int,
    dp_plans: int,
    seed: int = 0,
    fractions=FORWARD_FRACTIONS,
    control: bool = True,
    progress=None,
) -> FuzzCounts:
    """Check ``random_plans`` random plans and ``dp_plans`` DP-optimal plans per pipelining
    (sequential and graph), each at one forward fraction of ``fractions`` (in turn), under
    ``--in-flight schedule``; with ``control`` the random plans also under Piper's rule.
    Keys of the counts: ``KIND/PIPELINE/RULE``."""
    out = FuzzCounts()
    for pipeline in ("sequential", "graph"):
        for k in range(random_plans):
            s = seed + k
            inst, plan = random_plan_case(s, pipeline)
            f = fractions[k % len(fractions)]
            for rule in ("schedule", "piper") if control else ("schedule",):
                chk = check_plan(inst, plan, pipeline, rule, f)
                ex = {
                    "seed": s,
                    "pipeline": pipeline,
                    "fraction": f,
                    "d": [st.d for st in plan.stages],
                }
                out.add(f"random/{pipeline}/{rule}", chk, ex)
            if progress:
                progress(f"random/{pipeline}", k + 1)
        for k in range(dp_plans):
            s = seed + k
            case = dp_plan_case(s, pipeline)
            if case is None:
                continue
            f = fractions[k % len(fractions)]
            chk = check_plan(*case, pipeline, "schedule", f)
            ex = {
                "seed": s,
                "pipeline": pipeline,
                "fraction": f,
                "d": [st.d for st in case[1].stages],
            }
            out.add(f"dp/{pipeline}/schedule", chk, ex)
            if progress:
                progress(f"dp/{pipeline}", k + 1)
    return out


def main(argv=None) -> int:
    """``python -m compare.crosscheck.schedule_fuzz [--random R] [--dp D] [--seed S]``:
    prints the counts as JSON and exits 1 when a plan is off its model under ``schedule``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=1000, help="random plans per pipelining")
    ap.add_argument("--dp", type=int, default=250, help="DP-optimal plans per pipelining")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-control", action="store_true", help="skip Piper's rule on the random plans"
    )
    args = ap.parse_args(argv)
    t0 = time.process_time()

    def tick(what, k):
        if k % 100 == 0:
            print(f"{what}: {k}", file=sys.stderr, flush=True)

    counts = fuzz(args.random, args.dp, args.seed, control=not args.no_control, progress=tick)
    print(
        json.dumps(
            {
                "checked": counts.checked,
                "off_schedule": counts.off("schedule"),
                "examples": counts.examples,
                "cpu_seconds": time.process_time() - t0,
            },
            indent=1,
        )
    )
    return 1 if counts.off("schedule") else 0


if __name__ == "__main__":
    sys.exit(main())
