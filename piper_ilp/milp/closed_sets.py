"""The successor-closed sets of a layer graph and the stages between them (the path
formulation's own enumeration; ``docs/milp.md``, "The path formulation").

A set I of nodes is successor-closed when every successor of a node of I is in I; a
stage is C = I \\ J for two such sets J strictly inside I (contract sec. 2, rule 2). Sets
are bitmasks over the nodes' positions in ``instance.node_ids``. Written here, apart from
the DP's enumeration, so that the MILP lineage shares none of the DP's code; the tests
check both functions against their definitions on every subset of small graphs.
"""

from __future__ import annotations

from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance

__all__ = ["closed_sets", "stage_pairs", "successor_bits"]


def successor_bits(instance: Instance) -> list[int]:
    """For each node position, the bitmask of its direct successors' positions.

    Examples
    --------
    >>> inst = _chain_example(2)
    >>> successor_bits(inst)
    [2, 0]
    """
    pos = {v: i for i, v in enumerate(instance.node_ids)}
    succ = [0] * len(pos)
    for e in instance.edges:
        succ[pos[e.src]] |= 1 << pos[e.dst]
    return succ


def closed_sets(instance: Instance, limit: int) -> list[int]:
    """Every successor-closed set of the graph, as bitmasks, by size (the empty set
    first, the whole graph last).

    A set grows by one node whose successors are all inside it; every successor-closed
    set is reached that way from the empty set (remove a node of the set with no
    successor in it, repeatedly).

    Parameters
    ----------
    instance : Instance
    limit : int
        Refuse graphs with more sets than this.

    Returns
    -------
    list of int

    Raises
    ------
    SizeLimitError
        More than ``limit`` sets (one line naming the file).

    Examples
    --------
    A chain 0 -> 1 -> 2 has the sets {}, {2}, {1, 2}, {0, 1, 2}:

    >>> closed_sets(_chain_example(3), 100)
    [0, 4, 6, 7]
    """
    succ = successor_bits(instance)
    n = len(succ)
    found = {0}
    level = [0]
    out = [0]
    while level:
        nxt: set[int] = set()
        for s in level:
            for v in range(n):
                bit = 1 << v
                if not s & bit and succ[v] & ~s == 0:
                    grown = s | bit
                    if grown not in found:
                        found.add(grown)
                        nxt.add(grown)
                        if len(found) > limit:
                            raise SizeLimitError(
                                f"{instance.source}: the graph has more than {limit:,} "
                                "successor-closed sets, above the path formulation's limit"
                            )
        level = sorted(nxt)
        out.extend(level)
    return out


def stage_pairs(sets: list[int]) -> list[tuple[int, int]]:
    """Every pair (j, i) of indices into ``sets`` with sets[j] strictly inside sets[i]:
    the stage C = sets[i] \\ sets[j] can sit in front of the stages holding sets[j].

    Examples
    --------
    >>> stage_pairs([0, 4, 6, 7])
    [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    """
    out = []
    for i, big in enumerate(sets):
        for j in range(i):
            small = sets[j]
            if small & ~big == 0 and small != big:
                out.append((j, i))
    return out


def _chain_example(n: int) -> Instance:
    """A chain 0 -> 1 -> ... -> n-1 of unit nodes (the docstrings' example)."""
    from piper_ilp.instance import instance_from_dict

    def node(i: int) -> dict:
        opt = {
            "id": "v",
            "timePerSample": 1,
            "parameterSize": 0,
            "memoryUsageA": 0,
            "memoryUsageB": 0,
            "syncTimeFw": {str(i - 1): 0} if i > 0 else {},
            "syncTimeBw": {str(i + 1): 0} if i < n - 1 else {},
        }
        return {"id": i, "TMPCs": {"1": [opt]}}

    edges = [{"sourceId": i, "destId": i + 1, "communicationCost": 0} for i in range(n - 1)]
    return instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": 1,
            "bandwidth": 1,
            "mbsInBatch": 1,
            "nodes": [node(i) for i in range(n)],
            "edges": edges,
        }
    )
