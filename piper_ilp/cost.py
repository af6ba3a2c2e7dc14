"""The cost model's formulas (``docs/cost-model.md`` secs. 2.6 and 3), written once.

The evaluator and the exhaustive oracle compute every plan's time per sample (TPS)
through these functions; the DP and the MILP have their own, independent
formulations and are checked against the evaluator.

For a stage with node set S, degrees d and t, options (p, w, a, b, sfw, sbw) per node::

    edge_bytes(S) = sum_{v in S} [ sum_{(u->v), u not in S} 2 (c(u,v) + sfw_v[u])
                                 + sum_{(v->x), x not in S} 2 (c(v,x) + sbw_v[x]) ]
    resync_bytes  = sum_{v in S} 4 (d - 1) w_v / (d N)
    TPS           = (edge_bytes / d + resync_bytes) / B + (sum_{v in S} p_v) / d
    memory        = sum_{v in S} (a_v y + b_v) <= M,   y = ceil(s / d)

where s is the suffix sum of data-parallel degrees from this stage to the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping

from piper_ilp.instance import Instance, Option

__all__ = [
    "MEMORY_RTOL",
    "TPS_RTOL",
    "memory_fits",
    "microbatches_in_flight",
    "node_edge_bytes",
    "StageCost",
    "stage_cost",
    "stage_memory",
    "close",
]

#: Relative slack on the memory limit M for floating-point sums (a plan whose memory
#: exceeds M by less than this fraction is taken to fit). Every solver uses it.
MEMORY_RTOL = 1e-9

#: Relative tolerance when two float computations of a TPS are compared.
TPS_RTOL = 1e-9


def memory_fits(used: float, M: float) -> bool:
    """True when ``used`` bytes fit in ``M`` (with the relative slack MEMORY_RTOL)."""
    return used <= M * (1.0 + MEMORY_RTOL)


def close(x: float, y: float, rtol: float = TPS_RTOL) -> bool:
    """``x`` and ``y`` agree to relative tolerance ``rtol`` (absolute near zero)."""
    return abs(x - y) <= rtol * max(abs(x), abs(y), 1e-300) or x == y


def microbatches_in_flight(s: int, d: int) -> int:
    """y = ceil(s / d): microbatches a stage with degree d holds, s its suffix sum of d."""
    return -(-s // d)


def node_edge_bytes(instance: Instance, v: int, opt: Option, stage: Collection[int]) -> float:
    """The cut-edge bytes of node ``v`` with option ``opt`` in a stage whose node set is
    ``stage``: 2 (c + sfw) per incoming edge from outside, 2 (c + sbw) per outgoing edge
    to outside."""
    total = 0.0
    for u, c in instance.in_edges[v]:
        if u not in stage:
            total += 2.0 * (c + opt.sfw[u])
    for x, c in instance.out_edges[v]:
        if x not in stage:
            total += 2.0 * (c + opt.sbw[x])
    return total


@dataclass(frozen=True)
class StageCost:
    """A stage's TPS and its parts (seconds per sample): compute = sum p / d,
    edge = edge_bytes / (d B), resync = resync_bytes / B; tps is their sum."""

    compute: float
    edge: float
    resync: float

    @property
    def tps(self) -> float:
        return self.edge + self.resync + self.compute


def stage_cost(instance: Instance, nodes: Collection[int], d: int, options: Mapping[int, Option]) -> StageCost:
    """The TPS of a stage holding ``nodes`` with data-parallel degree ``d`` and the given
    option per node (the options already belong to the stage's t)."""
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    N, B = instance.N, instance.B
    edge_bytes = 0.0
    resync_bytes = 0.0
    p_sum = 0.0
    for v in members:
        opt = options[v]
        edge_bytes += node_edge_bytes(instance, v, opt, members)
        resync_bytes += 4.0 * (d - 1) * opt.w / (d * N)
        p_sum += opt.p
    return StageCost(compute=p_sum / d, edge=edge_bytes / d / B, resync=resync_bytes / B)


def stage_memory(nodes: Collection[int], options: Mapping[int, Option], y: int) -> float:
    """sum over the stage's nodes of a * y + b (bytes per device)."""
    return sum(options[v].a * y + options[v].b for v in nodes)
