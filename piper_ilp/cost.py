"""The cost model's formulas (``docs/cost-model.md`` secs. 2.6, 3 and 7), each written once.

One function per term of the contract; the evaluator, the DP, the MILP, the exhaustive
oracle and the baselines all call these (the arithmetic ones work on floats and on numpy
arrays alike)::

    cut_edge_bytes(c, sync)   = 2 (c + sync)                      one cut edge, one direction
    node_edge_bytes(v, S)     = fsum of cut_edge_bytes over v's edges that leave S
    resync_bytes(w, d, N)     = 4 (d - 1) w / (d N)               one node's resync
    stage_tps(E, R, P, d, B)  = (E / d + R) / B + P / d           E, R, P: the stage's three sums
    node_memory(a, b, y)      = a y (+ b)                         summed by stage_memory with fsum
    memory_fits(used, M)      = used <= M                          no slack (sec. 7)
    microbatches_in_flight    = y = ceil(s / d)

where s is the suffix sum of data-parallel degrees from this stage to the last. Sums over a
stage's nodes are ``math.fsum`` (correctly rounded), as sec. 7 requires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping

from piper_ilp.instance import Instance, Option

__all__ = [
    "TPS_RTOL",
    "close",
    "cut_edge_bytes",
    "memory_fits",
    "microbatches_in_flight",
    "node_edge_bytes",
    "resync_bytes",
    "stage_tps",
    "StageCost",
    "stage_cost",
    "stage_memory",
]

#: Relative tolerance when two float computations of a TPS are compared.
TPS_RTOL = 1e-9


def memory_fits(used: float, M: float) -> bool:
    """True when ``used`` bytes fit in ``M``: ``used <= M`` exactly, with no slack (sec. 7)."""
    return used <= M


def close(x: float, y: float, rtol: float = TPS_RTOL) -> bool:
    """``x`` and ``y`` agree to relative tolerance ``rtol`` (absolute near zero)."""
    return abs(x - y) <= rtol * max(abs(x), abs(y), 1e-300) or x == y


def microbatches_in_flight(s: int, d: int) -> int:
    """y = ceil(s / d): microbatches a stage with degree d holds, s its suffix sum of d."""
    return -(-s // d)


def cut_edge_bytes(c, sync):
    """Bytes one cut edge costs its endpoint: 2 (c + sync), forward activations plus
    backward gradients (``sync`` is the node's sfw or sbw entry for that edge)."""
    return 2.0 * (c + sync)


def resync_bytes(w, d, N):
    """One node's data-parallel resync bytes per sample: 4 (d - 1) w / (d N)."""
    return 4.0 * (d - 1) * w / (d * N)


def stage_tps(edge_bytes, resync, p_sum, d, B):
    """A stage's TPS from its three sums (sec. 3): (edge_bytes / d + resync) / B + p_sum / d."""
    return (edge_bytes / d + resync) / B + p_sum / d


def node_edge_bytes(instance: Instance, v: int, opt: Option, stage: Collection[int]) -> float:
    """The cut-edge bytes of node ``v`` with option ``opt`` in a stage whose node set is
    ``stage``: 2 (c + sfw) per incoming edge from outside, 2 (c + sbw) per outgoing edge
    to outside, summed with ``fsum`` (no cancellation, whatever the magnitudes)."""
    terms = [cut_edge_bytes(c, opt.sfw[u]) for u, c in instance.in_edges[v] if u not in stage]
    terms += [cut_edge_bytes(c, opt.sbw[x]) for x, c in instance.out_edges[v] if x not in stage]
    return math.fsum(terms)


@dataclass(frozen=True)
class StageCost:
    """A stage's three sums (sec. 3) and its TPS.

    ``edge_bytes``, ``resync_bytes`` and ``p_sum`` are the ``fsum`` of the stage's per-node
    terms; ``tps`` is :func:`stage_tps` of them. ``compute`` (p_sum / d), ``edge``
    (edge_bytes / (d B)) and ``resync`` (resync_bytes / B) are the parts for display.
    """

    edge_bytes: float
    resync_bytes: float
    p_sum: float
    d: int
    B: float

    @property
    def tps(self) -> float:
        return stage_tps(self.edge_bytes, self.resync_bytes, self.p_sum, self.d, self.B)

    @property
    def compute(self) -> float:
        return self.p_sum / self.d

    @property
    def edge(self) -> float:
        return self.edge_bytes / self.d / self.B

    @property
    def resync(self) -> float:
        return self.resync_bytes / self.B


def stage_cost(
    instance: Instance, nodes: Collection[int], d: int, options: Mapping[int, Option]
) -> StageCost:
    """The TPS of a stage holding ``nodes`` with data-parallel degree ``d`` and the given
    option per node (the options already belong to the stage's t)."""
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    N = instance.N
    edge = math.fsum(node_edge_bytes(instance, v, options[v], members) for v in members)
    resync = math.fsum(resync_bytes(options[v].w, d, N) for v in members)
    p_sum = math.fsum(options[v].p for v in members)
    return StageCost(edge_bytes=edge, resync_bytes=resync, p_sum=p_sum, d=d, B=instance.B)


def stage_memory(nodes: Collection[int], options: Mapping[int, Option], y: int) -> float:
    """fsum over the stage's nodes of a * y and b (bytes per device, sec. 7)."""
    terms = []
    for v in nodes:
        terms.append(options[v].a * y)
        terms.append(options[v].b)
    return math.fsum(terms)
