"""Deeper models from a profile with a repeated block.

The Piper paper's scalability study grows BERT-32 to 48, 64 and 96 transformer layers.
:func:`deepen` does the same to any profile whose layers include a chain of identical
layers: copies of one layer of that chain are inserted into it. Two rules:

* all edges (the default): each copy gets every edge the copied layer has (the chain
  edges, and also those from shared inputs such as BERT's attention mask) and matching
  syncTimeFw / syncTimeBw entries on both ends: a faithful deeper model;
* chain only (``chain_only=True``): each copy gets only the chain edges (from the
  previous layer, to the next), as the original planner's code made the paper's deeper
  BERTs (it leaves out the other incoming edges, e.g. the attention mask). Use it to
  reproduce the paper's scalability numbers.
"""

from __future__ import annotations

import copy

from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_NODES, Instance, instance_from_dict, instance_to_dict

__all__ = ["repeated_chain", "chain_between", "deepen"]


def _signature(node) -> tuple:
    """What makes two layers copies of each other: the same name and the same options
    (ids per t). Profiled numbers of identical layers differ by measurement noise, so they
    are compared only for unnamed layers."""
    shape = tuple((t, tuple(o.id for o in opts)) for t, opts in sorted(node.options.items()))
    if node.name is None:
        return (
            None,
            shape,
            tuple(
                (t, tuple((o.p, o.w, o.a, o.b) for o in opts))
                for t, opts in sorted(node.options.items())
            ),
        )
    return (node.name, shape)


def repeated_chain(instance: Instance) -> list[int]:
    """The longest path v_1 -> v_2 -> ... -> v_m (m >= 2) of copies of one layer (same name
    and option ids; unnamed layers: same numbers too), as node ids; [] when there is none.

    Examples
    --------
    For BERT-32 (``bert32a100.json``) these are the 32 transformer layers.
    """
    sig = {n.id: _signature(n) for n in instance.nodes}
    best: list[int] = []
    nxt: dict[int, list[int]] = {}
    has_prev: set[int] = set()
    for e in instance.edges:
        if sig[e.src] == sig[e.dst]:
            nxt.setdefault(e.src, []).append(e.dst)
            has_prev.add(e.dst)
    # the same-signature edges form a DAG: the longest path from each node, from the sinks
    # up (reverse topological order of the layer graph; no recursion, whatever the depth)
    import networkx as nx

    length: dict[int, int] = {}
    succ_on_path: dict[int, int | None] = {}
    for v in reversed(list(nx.topological_sort(instance.graph))):
        length[v], succ_on_path[v] = 1, None
        for x in nxt.get(v, ()):
            if length[x] + 1 > length[v]:  # the first longest successor, as listed
                length[v], succ_on_path[v] = length[x] + 1, x
    for v in instance.node_ids:
        if v in nxt and v not in has_prev and length[v] > len(best):
            path, u = [], v
            while u is not None:
                path.append(u)
                u = succ_on_path[u]
            best = path
    return best if len(best) >= 2 else []


def chain_between(instance: Instance, what: str, roles: str) -> tuple[list, object, object]:
    """The repeated chain (at least 3 layers) of ``instance`` with the edge into it from its
    costliest predecessor and the edge out of it to its costliest successor, for the
    builders that copy its layers (:mod:`compare.builders.towers`,
    :mod:`compare.builders.graphpipe`).

    Parameters
    ----------
    what : str
        What is built, named in messages (``"towers"``).
    roles : str
        What the layers before and after the chain become, named in messages.

    Returns
    -------
    (chain, into, out_of)
        The chain's node ids and the two edges.

    Raises
    ------
    InputError
        No such chain, or it lacks a layer before or after it.
    """
    src = instance.source
    chain = repeated_chain(instance)
    if len(chain) < 3:
        raise InputError(
            f"{src}: no repeated chain of at least 3 layers (same name and options) to build "
            f"{what} from"
        )
    preds = [e for e in instance.edges if e.dst == chain[0] and e.src not in chain]
    succs = [e for e in instance.edges if e.src == chain[-1] and e.dst not in chain]
    if not preds or not succs:
        raise InputError(
            f"{src}: its repeated chain needs a layer before it and one after it ({roles})"
        )
    # the chain's own neighbours: the predecessor with the costliest edge into it, likewise out
    into = max(preds, key=lambda e: (e.c, -e.src))
    out_of = max(succs, key=lambda e: (e.c, -e.dst))
    return chain, into, out_of


def deepen(
    instance: Instance, layers: int, *, chain_only: bool = False, template: int | None = None
) -> Instance:
    """A copy of ``instance`` whose repeated chain (see :func:`repeated_chain`) has
    ``layers`` layers.

    One layer of the chain is the template (its profiled numbers are used). Its copies go right
    after it in the chain and in the node list, with fresh ids (above the largest id). Each copy
    gets: the template's options (with sync entries re-keyed to its own neighbours), an edge from
    the previous chain layer and to the next one with the template's chain edge costs, and
    every other edge of the template (e.g. from the attention mask), whose other end gets a
    matching sync entry copied from its entry for the template. With ``chain_only`` the
    copies get the chain edges alone (and only the sync entries of their chain
    neighbours): the original planner's rule for the paper's deeper models.

    Parameters
    ----------
    instance : Instance
    layers : int
        The number of repeated layers wanted; at least the current number.
    chain_only : bool
        Copy only the chain edges (the paper's deeper BERTs), not the template's other
        edges (e.g. the attention mask).
    template : int, optional
        Which layer is copied, as a position in the chain (1 .. m - 2: it needs a
        repeated predecessor and successor). Default: the middle one (m // 2) for all
        edges; for ``chain_only`` the last layer with a repeated successor (m - 2), the
        layer the original planner copies (the one its hash set of layer ids yields
        first), so that its numbers are reproduced exactly.

    Returns
    -------
    Instance
        Validated (through :func:`piper_ilp.instance.instance_from_dict`); ``source`` says
        how it was made.

    Raises
    ------
    InputError
        When no repeated chain (of at least 3 layers) can be found, ``layers`` is below
        its length, or ``template`` is not a position in 1 .. m - 2.
    """
    chain = repeated_chain(instance)
    if not chain:
        raise InputError(
            f"{instance.source}: no repeated block found (no edge joins two layers with the same "
            "name and option ids)"
        )
    m = len(chain)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < m:
        raise InputError(
            f"{instance.source}: --layers must be a whole number >= {m} (its repeated chain has "
            f"{m} layers), got {layers!r}"
        )
    extra = layers - m
    if len(instance.nodes) + extra > MAX_NODES:
        raise InputError(
            f"{instance.source}: {len(instance.nodes) + extra} nodes, more than the supported "
            f"{MAX_NODES}"
        )
    rule = "chain edges only" if chain_only else "all edges"
    data = instance_to_dict(instance)
    if extra == 0:
        return instance_from_dict(
            data, source=f"{instance.source} (deepened to {layers} layers, {rule})"
        )
    if m < 3:
        raise InputError(
            f"{instance.source}: its repeated chain has only {m} layers; deepening copies a layer "
            "with a repeated predecessor and successor, so it needs at least 3"
        )
    if template is None:
        k = m - 2 if chain_only else m // 2
    elif isinstance(template, int) and not isinstance(template, bool) and 1 <= template <= m - 2:
        k = template
    else:
        raise InputError(
            f"{instance.source}: template must be a chain position in 1..{m - 2}, got {template!r}"
        )
    tpl = chain[k]
    succ = chain[k + 1]  # the chain successor of the template
    by_id = {nd["id"]: nd for nd in data["nodes"]}
    tnode = by_id[tpl]
    next_id = max(by_id) + 1
    new_ids = list(range(next_id, next_id + extra))
    chain_c = next(
        e["communicationCost"]
        for e in data["edges"]
        if e["sourceId"] == tpl and e["destId"] == succ
    )

    edges = [e for e in data["edges"] if not (e["sourceId"] == tpl and e["destId"] == succ)]
    seq = [tpl] + new_ids + [succ]
    for a, b in zip(seq, seq[1:]):
        edges.append({"sourceId": a, "destId": b, "communicationCost": chain_c})
    # the template's other edges, copied to every new layer
    chain_pred = chain[k - 1] if k > 0 else None
    other_in = [e for e in data["edges"] if e["destId"] == tpl and e["sourceId"] != chain_pred]
    other_out = [e for e in data["edges"] if e["sourceId"] == tpl and e["destId"] != succ]
    dropped_fw = [str(e["sourceId"]) for e in other_in]
    dropped_bw = [str(e["destId"]) for e in other_out]
    if chain_only:
        other_in, other_out = [], []
    for x in new_ids:
        for e in other_in:
            edges.append(
                {
                    "sourceId": e["sourceId"],
                    "destId": x,
                    "communicationCost": e["communicationCost"],
                }
            )
        for e in other_out:
            edges.append(
                {"sourceId": x, "destId": e["destId"], "communicationCost": e["communicationCost"]}
            )

    def rekey(d: dict, old: int, new: int) -> dict:
        out = dict(d)
        out[str(new)] = out.pop(str(old))
        return out

    # sync entries of the template's chain successor and of the template itself
    for opts in by_id[succ]["TMPCs"].values():
        for o in opts:
            o["syncTimeFw"] = rekey(o["syncTimeFw"], tpl, new_ids[-1])
    new_nodes = []
    for j, x in enumerate(new_ids):
        nd = copy.deepcopy(tnode)
        nd["id"] = x
        prev = seq[j]
        nxt = seq[j + 2]
        for opts in nd["TMPCs"].values():
            for o in opts:
                if chain_pred is not None:
                    o["syncTimeFw"] = rekey(o["syncTimeFw"], chain_pred, prev)
                o["syncTimeBw"] = rekey(o["syncTimeBw"], succ, nxt)
                if chain_only:  # the copy has no other edge, so no other sync entry
                    o["syncTimeFw"] = {
                        k: v for k, v in o["syncTimeFw"].items() if k not in dropped_fw
                    }
                    o["syncTimeBw"] = {
                        k: v for k, v in o["syncTimeBw"].items() if k not in dropped_bw
                    }
        new_nodes.append(nd)
    for opts in tnode["TMPCs"].values():
        for o in opts:
            o["syncTimeBw"] = rekey(o["syncTimeBw"], succ, new_ids[0])
    # the other ends of the copied edges get matching sync entries
    for ends, end, field in (
        (other_in, "sourceId", "syncTimeBw"),
        (other_out, "destId", "syncTimeFw"),
    ):
        for e in ends:
            for opts in by_id[e[end]]["TMPCs"].values():
                for o in opts:
                    val = o[field][str(tpl)]
                    for x in new_ids:
                        o[field][str(x)] = val
    # node list: the copies right after the template
    nodes = []
    for nd in data["nodes"]:
        nodes.append(nd)
        if nd["id"] == tpl:
            nodes.extend(new_nodes)
    data["nodes"] = nodes
    data["edges"] = edges
    return instance_from_dict(
        data, source=f"{instance.source} (deepened to {layers} layers, {rule})"
    )
