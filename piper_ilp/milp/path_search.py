"""The path formulation's search: bisection on the bottleneck T, one decision per
threshold, and the proof at the end (``docs/milp.md``, "The path formulation").

For a threshold T the decision is "is there a plan whose every stage has least TPS <= T
within K devices": the fewest devices over the paths of the state network
(:mod:`~piper_ilp.milp.path_network`). The search brackets the optimum between a
threshold that is not met (lo) and the bottleneck of a plan found (hi), halving the gap
in log scale; a plan found lowers hi to its own bottleneck. At the end the decision just
below the best plan's bottleneck is proven (:mod:`~piper_ilp.milp.path_proof`): then no
plan has a stage with least TPS <= lo, every plan's value exceeds lo, and the best plan,
whose value the evaluator computes, is optimal within 1e-6 of it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from piper_ilp.cost import resync_bytes
from piper_ilp.errors import InternalError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.milp.path_arcs import COST_MARGIN, Arc, ArcCatalog
from piper_ilp.milp.path_bounds import usable_arcs
from piper_ilp.milp.path_network import build_network, least_devices
from piper_ilp.milp.path_rule import InFlightRule
from piper_ilp.mode import Mode
from piper_ilp.plan import Plan, Stage

__all__ = ["Decision", "Search", "lower_bound", "BRACKET_RTOL"]

#: The search stops when hi <= lo (1 + BRACKET_RTOL); the proof is then within about
#: this much (plus the cost margin) of the best plan's value.
BRACKET_RTOL = 1e-9


@dataclass
class Decision:
    """One threshold: the arcs usable, what the bounds left, the network's size, the
    fewest devices (None: no path) and a path of (arc, state behind it), last stage first."""

    threshold: float
    arcs: int
    kept: int
    network: int
    devices: int | None
    path: list[tuple[Arc, int]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def feasible(self) -> bool:
        return bool(self.path)

    def to_dict(self) -> dict:
        return {
            "threshold": self.threshold,
            "arcs": self.arcs,
            "kept": self.kept,
            "network": self.network,
            "devices": self.devices,
            "feasible": self.feasible,
            "seconds": self.seconds,
        }


def lower_bound(instance: Instance, degrees: list[int]) -> float:
    """A value every plan's bottleneck reaches: the largest of (sum of each node's least
    t p) / K (every device busy) and, for each node, its least part of a stage's TPS
    (p + (d - 1) 4 w / (N B)) / d over t, option and d (cut edges only add). Lowered by
    the cost margin for the float arithmetic.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> o = {"id": "v", "timePerSample": 4.0, "parameterSize": 0, "memoryUsageA": 0,
    ...      "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 2, "maxMemoryPerDevice": 1, "bandwidth": 1,
    ...     "mbsInBatch": 2, "nodes": [{"id": 0, "TMPCs": {"1": [o]}}], "edges": []})
    >>> round(lower_bound(inst, [1, 2]), 6)
    2.0
    """
    work = math.fsum(
        min(t * o.p for t, opts in n.options.items() for o in opts)
        for n in instance.nodes
        if n.options
    )
    single = 0.0
    for n in instance.nodes:
        least = math.inf
        for t, opts in n.options.items():
            for o in opts:
                for d in degrees:
                    if t * d <= instance.K:
                        part = o.p / d + resync_bytes(o.w, d, instance.N) / instance.B
                        least = min(least, part)
        if least < math.inf:
            single = max(single, least)
    return max(work / instance.K, single) * (1.0 - COST_MARGIN)


class Search:
    """Decisions at thresholds over one catalog of arcs, and the plans they give.

    Parameters
    ----------
    instance : Instance
        As given (plans are evaluated on it).
    restricted : Instance
        After the restrictions (the catalog's).
    catalog : ArcCatalog
    rule : InFlightRule
    mode : Mode
    """

    def __init__(
        self,
        instance: Instance,
        restricted: Instance,
        catalog: ArcCatalog,
        rule: InFlightRule,
        mode: Mode,
    ):
        self.instance = instance
        self.restricted = restricted
        self.catalog = catalog
        self.rule = rule
        self.mode = mode
        self.nsets = len(catalog.sets)
        self.decisions: list[Decision] = []

    def decide(self, threshold: float, deadline: float | None = None) -> Decision:
        """The fewest devices of a plan whose every stage has least TPS <= threshold
        (:class:`~piper_ilp.milp.path_arcs.TimeUp` when ``deadline`` passes first)."""
        start = time.process_time()
        inst = self.restricted
        computed, bounds = usable_arcs(self.catalog, threshold, inst.K, inst.N, deadline)
        net = build_network(bounds.arcs, bounds, self.nsets, inst.K, inst.N, self.rule)
        devices, path = least_devices(net)
        if devices is not None and devices > inst.K:
            path = []
        dec = Decision(
            threshold,
            computed,
            len(bounds.arcs),
            net.size,
            devices,
            path,
            time.process_time() - start,
        )
        self.decisions.append(dec)
        return dec

    def plan_of(self, path: list[tuple[Arc, int]]) -> tuple[Plan, float, list[float]]:
        """The plan of a path (stages in pipeline order, each with its least-cost options
        at the y it holds), the largest lower bound of its stages' least TPS, and each
        stage's float cost (for :meth:`evaluate` to compare with the evaluator's)."""
        stages = []
        costs = []
        bottleneck = 0.0
        N = self.restricted.N
        for arc, before in reversed(path):
            tab = arc.table
            m = tab.degrees.index(arc.d)
            y = self.rule.held(before, arc.d, N)
            step = tab.step_at(m, y)
            bottleneck = max(bottleneck, step.low)
            costs.append(step.cost)
            opts = {v: tab.options[k][step.choice[k]].id for k, v in enumerate(tab.nodes)}
            stages.append(Stage(tuple(tab.nodes), arc.d, arc.t, opts))
        return Plan(tuple(stages)), bottleneck, costs

    def evaluate(self, plan: Plan, costs: list[float]) -> float:
        """The evaluator's value of a plan found. A path is a valid plan by construction,
        and each stage's float cost is its TPS within :data:`COST_MARGIN` (the margin the
        lower bounds rely on): anything else is a bug, raised before any proof."""
        ev = evaluate(self.instance, plan, self.mode)
        if not ev.valid:
            raise InternalError(f"path formulation: a path's plan is not valid: {ev.violations[0]}")
        if ev.devices > self.instance.K:
            raise InternalError("path formulation: a path's plan uses more than K devices")
        for i, (report, cost) in enumerate(zip(ev.stages, costs)):
            tps = report.cost.tps
            if abs(tps - cost) > COST_MARGIN * tps:
                raise InternalError(
                    f"path formulation: stage {i}'s cost {cost!r} is not its TPS {tps!r} "
                    f"within {COST_MARGIN}"
                )
        return ev.value
