"""The state network of the path formulation at one threshold, its least-devices path and
an exactly checked certificate (``docs/milp.md``, "The path formulation").

Nodes are (J, s): a successor-closed set J and the state s behind it (the in-flight
rule's, :mod:`~piper_ilp.milp.path_rule`). An arc J -> I with degrees (t, d) and limit L
gives one network arc (J, s) -> (I, after(s, d)) of cost t d for every s <= L in the
window the bounds of :mod:`~piper_ilp.milp.path_bounds` leave; arcs into the whole graph
end at one sink. A plan meeting the threshold is a path from (empty set, 0) to the sink
and back; the fewest devices over paths is at most K iff the threshold is met. The LP of
a shortest path is integral, so its dual (node potentials pi with pi(source) = 0 and
pi(head) <= pi(tail) + cost on every arc) proves a lower bound pi(sink) on every path's
devices: :func:`certificate` checks such potentials exactly, in integers.

The network is solved by OR-Tools' min-cost flow (one unit from source to sink; integer
costs, exact), and the potentials come from a relaxation over the sets in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from piper_ilp.errors import InternalError
from piper_ilp.milp.path_arcs import Arc
from piper_ilp.milp.path_bounds import UNREACHABLE, Bounds
from piper_ilp.milp.path_rule import InFlightRule

__all__ = ["StateNetwork", "build_network", "least_devices", "potentials", "certificate"]


@dataclass
class StateNetwork:
    """The network arcs as arrays (one entry per network arc): ``tail`` and ``head``
    node ids (node (J, s) is J * width + s; the sink is ``sink``), ``cost`` = t d,
    ``arc`` the index into ``arcs`` and ``state`` the s behind the stage."""

    arcs: list[Arc]
    width: int
    nsets: int
    tail: np.ndarray
    head: np.ndarray
    cost: np.ndarray
    arc: np.ndarray
    state: np.ndarray

    @property
    def sink(self) -> int:
        return self.nsets * self.width

    @property
    def size(self) -> int:
        return int(self.tail.size)


def _window(a: Arc, b: Bounds, K: int, N: int) -> tuple[int, int]:
    """The states behind arc a that a plan within K devices and N microbatches can have:
    at least sback(J); at most its limit, and such that the devices behind I (at least
    s + t d) and the sum of d behind I (s + d) leave room for the stages in front."""
    lo = b.sback[a.j]
    hi = min(a.limit, N - b.sfront[a.i] - a.d, K - b.front[a.i] - a.devices)
    return lo, hi


def build_network(
    arcs: list[Arc], bounds: Bounds, nsets: int, K: int, N: int, rule: InFlightRule
) -> StateNetwork:
    """The state network over the pruned arcs (see the module docstring)."""
    width = min(N, K) + 1
    last = nsets - 1
    tails, heads, costs, which, states = [], [], [], [], []
    for k, a in enumerate(arcs):
        lo, hi = _window(a, bounds, K, N)
        if hi < lo:
            continue
        s = np.arange(lo, hi + 1, dtype=np.int64)
        after = np.asarray(rule.after(s, a.d), dtype=np.int64)
        keep = after < width
        s, after = s[keep], after[keep]
        tails.append(a.j * width + s)
        heads.append(np.full(s.size, nsets * width) if a.i == last else a.i * width + after)
        costs.append(np.full(s.size, a.devices, dtype=np.int64))
        which.append(np.full(s.size, k, dtype=np.int64))
        states.append(s)

    def cat(parts):
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    return StateNetwork(
        arcs, width, nsets, cat(tails), cat(heads), cat(costs), cat(which), cat(states)
    )


def least_devices(net: StateNetwork) -> tuple[int | None, list[tuple[Arc, int]]]:
    """The fewest devices over source-sink paths (None: no path) and one such path, as
    (arc, state behind it) from the last stage to the first, by OR-Tools' min-cost flow.
    """
    from ortools.graph.python import min_cost_flow

    if net.size == 0:
        return None, []
    flow = min_cost_flow.SimpleMinCostFlow()
    flow.add_arcs_with_capacity_and_unit_cost(
        net.tail.astype(np.int32),
        net.head.astype(np.int32),
        np.ones(net.size, dtype=np.int64),
        net.cost,
    )
    flow.set_node_supply(0, 1)
    flow.set_node_supply(net.sink, -1)
    status = flow.solve()
    if status == flow.INFEASIBLE:
        return None, []
    if status != flow.OPTIMAL:
        raise InternalError(f"path formulation: min-cost flow ended with status {status}")
    used = np.flatnonzero(flow.flows(np.arange(net.size)) > 0)
    path = [(net.arcs[int(net.arc[e])], int(net.state[e])) for e in used]
    path.sort(key=lambda p: p[0].j)
    return int(flow.optimal_cost()), path


def potentials(net: StateNetwork, rule: InFlightRule) -> tuple[np.ndarray, int]:
    """Shortest distances from the source to every node (UNREACHABLE where none) and to
    the sink, relaxing the arcs in the order of their tail sets (every arc goes from a
    smaller set to a larger one, so each tail is final when its arcs are relaxed)."""
    dist = np.full(net.nsets * net.width, UNREACHABLE, dtype=np.int64)
    dist[0] = 0
    sink = UNREACHABLE
    order = np.argsort(net.tail // net.width, kind="stable")
    tail, head, cost = net.tail[order], net.head[order], net.cost[order]
    bounds = np.flatnonzero(np.diff(tail // net.width)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, tail.size]):
        reach = dist[tail[lo:hi]] + cost[lo:hi]
        into_sink = head[lo:hi] == net.sink
        if into_sink.any():
            sink = min(sink, int(reach[into_sink].min()))
        inner = ~into_sink
        np.minimum.at(dist, head[lo:hi][inner], reach[inner])
    return dist, sink


def certificate(net: StateNetwork, dist: np.ndarray, sink: int) -> bool:
    """True when ``dist`` (with ``sink`` the sink's value) are valid potentials: 0 at
    the source and pi(head) <= pi(tail) + cost on every arc whose tail is reachable. Then
    every source-sink path costs at least ``sink`` devices (LP duality of the shortest
    path, in exact integers)."""
    if dist[0] != 0:
        return False
    reach = dist[net.tail] < UNREACHABLE
    bound = dist[net.tail] + net.cost
    at_head = np.where(net.head == net.sink, sink, dist[np.minimum(net.head, dist.size - 1)])
    return bool(np.all(~reach | (at_head <= bound)))
