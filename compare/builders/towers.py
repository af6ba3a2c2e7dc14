"""Multi-branch models like GraphPipe's: parallel towers of a profile's repeated layer.

GraphPipe (Jeon et al.) plans models whose layers form several parallel branches joined at
the end (multi-modal transformers, candidate-generation towers). :func:`towers` builds such a
model from a bundled profile with a repeated block (BERT-32's transformer layers): a
source layer, ``len(layers)`` towers of ``layers[j]`` copies of the repeated layer each,
and a sink layer that joins them. Every number is the profile's own:

* the source is the repeated chain's predecessor (BERT's embedding), the sink its
  successor (BERT's head), with their options; each tower layer is a copy of one layer of
  the chain (the template, its middle one);
* edges: source -> first layer of each tower, along each tower, last layer -> sink, with
  the profile's costs of the corresponding chain edges (into the chain, along it, out of it);
* sync entries: the template's entries for its chain neighbours, the source's entry for
  the first chain layer (one per tower), the sink's entry for the last one (one per tower);
  the profile's other edges (e.g. BERT's attention mask) are left out, as the paper's
  deeper BERTs leave them out.

The towers are independent branches, so sequential pipelining (sec. 2) and graph
pipelining (sec. 8) differ on them: a branch's stages hold only the microbatches in flight
along their own branch.
"""

from __future__ import annotations

import copy
from typing import Sequence

from compare.builders.deepen import chain_between
from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_NODES, Instance, instance_from_dict, instance_to_dict

__all__ = ["towers"]


def _options(node: dict, fw: dict[str, float], bw: dict[str, float]) -> dict:
    """``node``'s TMPCs with the sync entries given for each option (by position)."""
    out = {}
    for t, opts in node["TMPCs"].items():
        new = []
        for o in opts:
            o = copy.deepcopy(o)
            o["syncTimeFw"] = {k: v(o) for k, v in fw.items()}
            o["syncTimeBw"] = {k: v(o) for k, v in bw.items()}
            new.append(o)
        out[t] = new
    return out


def towers(instance: Instance, layers: Sequence[int]) -> Instance:
    """A model of parallel towers of ``instance``'s repeated layer (see the module text).

    Parameters
    ----------
    instance : Instance
        A profile with a repeated chain of at least 3 layers (:func:`repeated_chain`).
    layers : sequence of int
        Layers per tower, one entry per tower (at least 2 towers, each >= 1 layer).

    Returns
    -------
    Instance
        Node ids: the source 0, tower j's layers next (tower by tower), the sink last.
        K, M, N and B are the profile's.

    Raises
    ------
    InputError
        No repeated chain (or one with no predecessor or successor outside it), fewer than
        two towers, or a tower with no layer.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> o = lambda fw, bw: {"id": "v", "timePerSample": 1, "parameterSize": 0, "memoryUsageA": 1,
    ...     "memoryUsageB": 0, "syncTimeFw": {str(u): 0 for u in fw},
    ...     "syncTimeBw": {str(x): 0 for x in bw}}
    >>> nodes = [{"id": 0, "name": "in", "TMPCs": {"1": [o([], [1])]}}]
    >>> nodes += [{"id": i, "name": "layer", "TMPCs": {"1": [o([i - 1], [i + 1])]}}
    ...           for i in (1, 2, 3)]
    >>> nodes += [{"id": 4, "name": "out", "TMPCs": {"1": [o([3], [])]}}]
    >>> inst = instance_from_dict({"maxDevices": 4, "maxMemoryPerDevice": 9, "bandwidth": 1,
    ...     "mbsInBatch": 4, "nodes": nodes,
    ...     "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 1} for i in range(4)]})
    >>> tw = towers(inst, [2, 1])
    >>> sorted((e.src, e.dst) for e in tw.edges)
    [(0, 1), (0, 3), (1, 2), (2, 4), (3, 4)]
    """
    src = instance.source
    layers = list(layers)
    if len(layers) < 2 or any(
        not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in layers
    ):
        raise InputError(
            f"{src}: towers need at least two towers of at least one layer each, got {layers!r}"
        )
    if sum(layers) + 2 > MAX_NODES:
        raise InputError(f"{src}: {sum(layers) + 2} nodes, more than the supported {MAX_NODES}")
    chain, into, out_of = chain_between(instance, "towers", "the towers' source and sink")
    k = len(chain) // 2
    tpl, prev, nxt = chain[k], chain[k - 1], chain[k + 1]
    along = next(e.c for e in instance.edges if e.src == tpl and e.dst == nxt)

    data = instance_to_dict(instance)
    by_id = {nd["id"]: nd for nd in data["nodes"]}
    first, last = chain[0], chain[-1]
    ids = []
    next_id = 1
    for n in layers:
        ids.append(list(range(next_id, next_id + n)))
        next_id += n
    sink = next_id
    nodes = [
        {
            "id": 0,
            "name": by_id[into.src].get("name") or "source",
            "TMPCs": _options(
                by_id[into.src],
                {},
                {str(t[0]): (lambda o: o["syncTimeBw"][str(first)]) for t in ids},
            ),
        }
    ]
    edges = []
    for tower in ids:
        edges.append({"sourceId": 0, "destId": tower[0], "communicationCost": into.c})
        for j, v in enumerate(tower):
            before = 0 if j == 0 else tower[j - 1]
            after = sink if j == len(tower) - 1 else tower[j + 1]
            nodes.append(
                {
                    "id": v,
                    "name": by_id[tpl].get("name") or "layer",
                    "TMPCs": _options(
                        by_id[tpl],
                        {str(before): lambda o: o["syncTimeFw"][str(prev)]},
                        {str(after): lambda o: o["syncTimeBw"][str(nxt)]},
                    ),
                }
            )
            if j + 1 < len(tower):
                edges.append({"sourceId": v, "destId": tower[j + 1], "communicationCost": along})
        edges.append({"sourceId": tower[-1], "destId": sink, "communicationCost": out_of.c})
    nodes.append(
        {
            "id": sink,
            "name": by_id[out_of.dst].get("name") or "sink",
            "TMPCs": _options(
                by_id[out_of.dst],
                {str(t[-1]): (lambda o: o["syncTimeFw"][str(last)]) for t in ids},
                {},
            ),
        }
    )
    data["nodes"], data["edges"] = nodes, edges
    shape = "+".join(map(str, layers))
    return instance_from_dict(data, source=f"{src} (towers {shape})")
