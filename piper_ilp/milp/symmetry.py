"""Symmetries that the graph-pipelining model breaks (docs/milp.md, "Symmetry rows"):
interchangeable chains found from the data (never from names), a rank of the nodes, and
the canonical form of a plan, the one point of its orbit that the rows admit.

Nothing here is shared with the DP (``dp/symmetry.py`` is the other lineage's own)."""

from __future__ import annotations

import dataclasses

from piper_ilp.instance import Instance, Option
from piper_ilp.plan import Plan, Stage

__all__ = ["Symmetry", "canonical_plan", "chains", "find_symmetry"]


@dataclasses.dataclass(frozen=True)
class Symmetry:
    """What the symmetry rows use, made by :func:`find_symmetry`.

    Attributes
    ----------
    classes : tuple of tuple of tuple of int
        Classes of at least two interchangeable chains, each chain its nodes in order,
        each class sorted by the rank of its chains' first nodes.
    rank : dict of int to int
        A total order of the nodes: the first nodes of the chains of every class first
        (class by class, in class order), then every other node in the instance's order.
    """

    classes: tuple[tuple[tuple[int, ...], ...], ...]
    rank: dict[int, int]


def chains(inst: Instance) -> list[tuple[int, ...]]:
    """The nodes cut into maximal chains: a -> b links a chain when a has one successor and
    b one predecessor. Every node is in exactly one chain (possibly alone).

    Parameters
    ----------
    inst : Instance

    Returns
    -------
    list of tuple of int
        In the order of their first nodes in ``inst.node_ids``.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> def node(v, edges):  # one option; no sync time on any edge
    ...     sfw = {str(u): 0.0 for u, x, _ in edges if x == v}
    ...     sbw = {str(x): 0.0 for u, x, _ in edges if u == v}
    ...     return v, {"1": [option_dict("v", 1.0, 0, 0, 0, sfw=sfw, sbw=sbw)]}
    >>> edges = [(0, 1, 1.0), (0, 2, 1.0), (2, 3, 1.0)]
    >>> nodes = [node(v, edges) for v in range(4)]
    >>> inst = instance_from_dict(instance_dict(nodes, edges, K=4, M=1e9, N=4, B=1e9))
    >>> chains(inst)
    [(0,), (1,), (2, 3)]
    """
    out_e, in_e = inst.out_edges, inst.in_edges
    nxt = {}
    for v in inst.node_ids:
        if len(out_e[v]) == 1:
            w = out_e[v][0][0]
            if len(in_e[w]) == 1:
                nxt[v] = w
    linked = set(nxt.values())
    result = []
    for v in inst.node_ids:
        if v in linked:
            continue
        chain = [v]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        result.append(tuple(chain))
    return result


def _same_option(o1: Option, o2: Option, sigma: dict[int, int]) -> bool:
    """o2 is o1 with the neighbours' ids mapped by sigma (the id itself is not data)."""
    return (
        (o1.p, o1.w, o1.a, o1.b) == (o2.p, o2.w, o2.a, o2.b)
        and {sigma.get(u, u): x for u, x in o1.sfw.items()} == dict(o2.sfw)
        and {sigma.get(u, u): x for u, x in o1.sbw.items()} == dict(o2.sbw)
    )


def _interchangeable(inst: Instance, c1: tuple[int, ...], c2: tuple[int, ...]) -> bool:
    """Whether swapping c1 and c2 node by node maps the instance onto itself: the same
    options position by position (sync bytes keyed by the mapped neighbour), the same
    edges and bytes, and every outside neighbour's sync bytes alike towards both."""
    if len(c1) != len(c2):
        return False
    sigma = dict(zip(c1, c2)) | dict(zip(c2, c1))
    for v1, v2 in zip(c1, c2):
        n1, n2 = inst.node[v1], inst.node[v2]
        if n1.options.keys() != n2.options.keys():
            return False
        for t, opts1 in n1.options.items():
            opts2 = n2.options[t]
            if len(opts1) != len(opts2):
                return False
            if not all(_same_option(a, b, sigma) for a, b in zip(opts1, opts2)):
                return False
        for edges in (inst.in_edges, inst.out_edges):
            mapped = sorted((sigma.get(u, u), c) for u, c in edges[v1])
            if mapped != sorted(edges[v2]):
                return False
    # an outside neighbour u (a predecessor of the heads, a successor of the tails) keys
    # its own sync bytes by the chain node: alike towards both chains
    for (head1, head2), (tail1, tail2) in [((c1[0], c2[0]), (c1[-1], c2[-1]))]:
        for u, _ in inst.in_edges[head1]:
            for opts in inst.node[u].options.values():
                if any(o.sbw.get(head1) != o.sbw.get(head2) for o in opts):
                    return False
        for u, _ in inst.out_edges[tail1]:
            for opts in inst.node[u].options.values():
                if any(o.sfw.get(tail1) != o.sfw.get(tail2) for o in opts):
                    return False
    return True


def find_symmetry(inst: Instance) -> Symmetry:
    """The classes of interchangeable chains of ``inst`` and the rank of its nodes.

    Two chains are interchangeable when swapping them node by node (the k-th node of one
    for the k-th of the other) maps the instance onto itself: the same number of nodes, the
    same options position by position (p, w, a, b, sync bytes keyed by the mapped
    neighbour), the same edges with the same bytes (so the same predecessors of the first
    nodes and successors of the last), and every outside neighbour's sync bytes alike
    towards both. Such a swap maps every plan to a plan with the same value in every mode.

    Parameters
    ----------
    inst : Instance
        The instance as the model sees it (after the restrictions).

    Returns
    -------
    Symmetry

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> def node(v, edges):  # one option; no sync time on any edge
    ...     sfw = {str(u): 0.0 for u, x, _ in edges if x == v}
    ...     sbw = {str(x): 0.0 for u, x, _ in edges if u == v}
    ...     return v, {"1": [option_dict("v", 1.0, 0, 0, 0, sfw=sfw, sbw=sbw)]}
    >>> edges = [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]
    >>> nodes = [node(v, edges) for v in range(4)]
    >>> sym = find_symmetry(instance_from_dict(instance_dict(nodes, edges, K=4, M=1e9, N=4, B=1e9)))
    >>> sym.classes, sym.rank
    ((((1,), (2,)),), {1: 0, 2: 1, 0: 2, 3: 3})
    """
    classes: list[list[tuple[int, ...]]] = []
    for c in chains(inst):
        for cls in classes:
            if _interchangeable(inst, cls[0], c):
                cls.append(c)
                break
        else:
            classes.append([c])
    multi = tuple(tuple(cls) for cls in classes if len(cls) > 1)
    heads = [c[0] for cls in multi for c in cls]
    order = heads + [v for v in inst.node_ids if v not in set(heads)]
    return Symmetry(multi, {v: k for k, v in enumerate(order)})


def _swap(inst: Instance, plan: Plan, c1: tuple[int, ...], c2: tuple[int, ...]) -> Plan:
    """The plan with chains c1 and c2 swapped node by node (each option by its position)."""
    sigma = dict(zip(c1, c2)) | dict(zip(c2, c1))
    stages = []
    for stg in plan.stages:
        options = {}
        for v, oid in stg.options.items():
            w = sigma.get(v, v)
            ids = [o.id for o in inst.node[v].options[stg.t]]
            options[w] = inst.node[w].options[stg.t][ids.index(oid)].id
        nodes = tuple(sorted(sigma.get(v, v) for v in stg.nodes))
        stages.append(dataclasses.replace(stg, nodes=nodes, options=options))
    return dataclasses.replace(plan, stages=tuple(stages))


def _adjacent(inst: Instance, s1: Stage, s2: Stage) -> bool:
    """Whether some edge goes from stage s1 to stage s2."""
    into = set(s2.nodes)
    return any(x in into for v in s1.nodes for x, _ in inst.out_edges[v])


def canonical_plan(inst: Instance, plan: Plan, sym: Symmetry) -> Plan:
    """The plan of ``plan``'s orbit that the symmetry rows admit: the same value in every
    mode, its stages in a topological order where two consecutive stages without an edge
    between them are in increasing least rank, and the first nodes of each class's chains
    in non-decreasing stage.

    Each step (swapping two consecutive stages without an edge, or two interchangeable
    chains) makes the vector of the nodes' stages, read in rank order, lexicographically
    smaller, so the loop ends, and it ends only where no step applies.

    Parameters
    ----------
    inst : Instance
        The instance the plan is for (after the restrictions).
    plan : Plan
        A plan whose stages are in a topological order of its stage graph.
    sym : Symmetry
        From :func:`find_symmetry` of ``inst``.

    Returns
    -------
    Plan
    """
    rank = sym.rank
    changed = True
    while changed:
        changed = False
        stage_of = {v: i for i, stg in enumerate(plan.stages) for v in stg.nodes}
        for cls in sym.classes:
            for c1, c2 in zip(cls, cls[1:]):
                if stage_of[c1[0]] > stage_of[c2[0]]:
                    plan = _swap(inst, plan, c1, c2)
                    changed = True
                    break
            if changed:
                break
        if changed:
            continue
        stages = list(plan.stages)
        for i in range(len(stages) - 1):
            a, b = stages[i], stages[i + 1]
            key_a, key_b = min(rank[v] for v in a.nodes), min(rank[v] for v in b.nodes)
            if key_b < key_a and not _adjacent(inst, a, b):
                stages[i], stages[i + 1] = b, a
                plan = dataclasses.replace(plan, stages=tuple(stages))
                changed = True
                break
    return plan
