"""Successor-closed sets ("ideals") of the layer graph (cost model sec. 4).

A set I of nodes is successor-closed when every successor of a node of I is in I. The
DP's states are such sets: I holds the later stages of the pipeline, and a stage is a
difference C = I \\ J of two nested ones. Sets are bitmasks (Python ints) over the nodes'
positions 0..n-1 in input order.
"""

from __future__ import annotations

from typing import Callable

from piper_ilp.errors import InternalError, SizeLimitError
from piper_ilp.instance import Instance, topological_order

__all__ = [
    "count_ideals",
    "enumerate_ideals",
    "suffix_ideals",
    "successor_masks",
    "DEFAULT_MAX_IDEALS",
]

#: Default cap on the number of successor-closed sets, from a measurement: gnmt (17,914
#: sets, 78 nodes) takes 8-9 CPU seconds at K = 8 and about 2 minutes at K = 64 and 256
#: (7-8 million (set, subset) pairs, 9-12 million candidate stages, about 1 GB peak RSS
#: at K = 256; 2-core machine, exact mode, with the DP's pruning); the time grows with the
#: number of (set, subset) pairs, up to the square of the number of sets. The wide DAG of
#: 16 branches (65,538 sets, 43 million pairs, nearly none pruned) is refused.
DEFAULT_MAX_IDEALS = 20_000


def successor_masks(instance: Instance) -> list[int]:
    """For each node position i (input order), the bitmask of its direct successors'
    positions."""
    pos = {v: i for i, v in enumerate(instance.node_ids)}
    succ = [0] * len(pos)
    for e in instance.edges:
        succ[pos[e.src]] |= 1 << pos[e.dst]
    return succ


def _walk(
    instance: Instance, limit: int | None, on_new: Callable[[int], None] | None = None
) -> int:
    """Breadth-first over ideals by size (an ideal grows by a node whose successors are all
    in it). Returns the number found, or limit + 1 as soon as it passes ``limit`` (checked
    as every new set is found, so a graph with astronomically many sets stops at once).

    Each set carries the bitmask of the nodes that can join it; when v joins, the nodes
    that can join the result are the old ones but v, plus the predecessors of v whose
    successors are now all inside: O(joinable + predecessors) per new set, not O(n)."""
    succ = successor_masks(instance)
    n = len(succ)
    pred_lists: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        m = succ[u]
        while m:
            low = m & -m
            pred_lists[low.bit_length() - 1].append(u)
            m ^= low
    sinks = 0
    for v in range(n):
        if succ[v] == 0:
            sinks |= 1 << v
    level = {0: sinks}
    count = 1
    if on_new:
        on_new(0)
    while level:
        nxt: dict[int, int] = {}
        for I, joinable in level.items():
            m = joinable
            while m:
                low = m & -m
                m ^= low
                J = I | low
                if J in nxt:
                    continue
                grow = joinable & ~low
                for u in pred_lists[low.bit_length() - 1]:
                    if (succ[u] & ~J) == 0:
                        grow |= 1 << u
                nxt[J] = grow
                count += 1
                if limit is not None and count > limit:
                    return limit + 1
        if on_new:
            for J in sorted(nxt):
                on_new(J)
        level = nxt
    return count


def count_ideals(instance: Instance, limit: int | None = None) -> int:
    """The number of successor-closed sets of the instance's graph (the empty set and the
    whole graph included).

    Parameters
    ----------
    instance : Instance
    limit : int, optional
        Stop counting once the count exceeds ``limit`` and return ``limit + 1``.

    Returns
    -------
    int

    Examples
    --------
    A chain of n nodes has n + 1 successor-closed sets; n unconnected nodes have 2**n.

    >>> from piper_ilp.instance import instance_from_dict
    >>> o = {"id": "v", "timePerSample": 1, "parameterSize": 0, "memoryUsageA": 0,
    ...      "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 1, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": i, "TMPCs": {"1": [o]}} for i in range(3)],
    ...     "edges": []})
    >>> count_ideals(inst)
    8
    >>> count_ideals(inst, limit=5)
    6
    """
    return _walk(instance, limit)


def enumerate_ideals(instance: Instance, max_ideals: int) -> list[int]:
    """All successor-closed sets as bitmasks, ordered by size (the empty set first, the
    whole graph last).

    Parameters
    ----------
    instance : Instance
    max_ideals : int
        Refuse graphs with more sets than this.

    Returns
    -------
    list of int

    Raises
    ------
    SizeLimitError
        When there are more than ``max_ideals`` of them.
    """
    out: list[int] = []
    count = _walk(instance, max_ideals, out.append)
    if count > max_ideals:
        out.clear()
        # say how many there are, up to a bound on the extra work
        cap = min(10 * max_ideals, max_ideals + 50_000)
        total = _walk(instance, cap)
        said = f"more than {cap:,}" if total > cap else f"{total:,}"
        raise SizeLimitError(
            f"{instance.source}: the graph has {said} successor-closed sets (the DP's states), "
            f"above the limit of {max_ideals:,}; raise the limit (max_ideals / --max-ideals) if "
            "memory and time allow, or use a MILP method"
        )
    return out


def suffix_ideals(instance: Instance) -> list[int]:
    """The suffixes of one topological order, as bitmasks by size (the empty set first):
    successor-closed sets that form a chain, the family of the DP's chain bound.

    The order is the lexicographic one (networkx's ``lexicographical_topological_sort``
    keyed by input position): each step takes, of the nodes whose predecessors are all
    placed, the first in input order (:func:`piper_ilp.instance.topological_order`, so
    that the DP needs no networkx).

    Raises
    ------
    InternalError
        The graph has a cycle (the loader refuses such graphs).

    Examples
    --------
    Node 2 feeds node 0, so the order is 1, 2, 0 and its suffixes {0}, {2, 0}, all:

    >>> from piper_ilp.instance import instance_from_dict, option_dict
    >>> def node(i, fw, bw):
    ...     return {"id": i, "TMPCs": {"1": [option_dict("v", 1, 0, 0, 0, fw, bw)]}}
    >>> nodes = [node(0, {"2": 0}, {}), node(1, {}, {}), node(2, {}, {"0": 0})]
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 1, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": nodes,
    ...     "edges": [{"sourceId": 2, "destId": 0, "communicationCost": 0}]})
    >>> [bin(m) for m in suffix_ideals(inst)]
    ['0b0', '0b1', '0b101', '0b111']
    """
    ids = instance.node_ids
    pos = {v: i for i, v in enumerate(ids)}
    order = topological_order({v: [w for w, _ in instance.out_edges[v]] for v in ids})
    if len(order) != len(ids):
        raise InternalError(f"{instance.source}: the graph has a cycle")
    out, mask = [0], 0
    for v in reversed(order):
        mask |= 1 << pos[v]
        out.append(mask)
    return out
