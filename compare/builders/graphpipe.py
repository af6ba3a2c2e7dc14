"""GraphPipe-like multi-branch models built from a profile's own layers.

GraphPipe (Jeon et al.) plans multi-branch models: multi-modal transformers whose branches
(one per modality) meet in a fusion stack, and DLRM-like recommenders whose embedding
tables are branches joined by an interaction layer and an MLP. :func:`graphpipe_model`
builds such a model by copying the four kinds of layer a profile with a repeated block has
(BERT-32's, ``bert32a100.json``), so that every number is the profile's own:

* ``input``: the embedding's costliest predecessor (BERT's input tensor, no compute);
* ``embedding``: the repeated chain's costliest predecessor (BERT's embedding: a big
  table, little compute);
* ``layer``: the chain's middle layer (a transformer layer), ``prev`` and ``next`` its
  chain neighbours;
* ``head``: the chain's costliest successor (BERT's pooler).

Edges carry the profile's bytes of the edge between the same kinds (input -> embedding,
embedding -> first layer, layer -> next layer, last layer -> head); an edge out of the
DLRM's interaction carries the embedding's output bytes (the interaction passes on the
concatenated lookups). A copy's tensor-parallel sync entry for each new neighbour is its
prototype's entry for the neighbour of the same side in the profile (a layer's for
``prev`` and ``next``, the embedding's for the input and the first layer, the head's for
the last layer, the input's for the embedding); the profile's other edges (BERT's
attention mask) are left out, as :func:`compare.builders.towers.towers` leaves them out.

The presets (:data:`PRESETS`): ``mmt2`` and ``mmt4``, a multi-modal transformer with 2 or
4 modality branches (an embedding and ``layers`` layers each) from one input, a fusion
stack of ``fusion`` layers and the head; ``dlrm8``, 8 embedding branches from one input
joined by an interaction node (a copy of the input node: concatenation and dot products,
no profiled compute), then a top MLP of ``fusion`` layers (the profile has no plain MLP:
a transformer layer's numbers stand for it) and the head.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from compare.builders.deepen import chain_between
from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_NODES, Instance, instance_from_dict, instance_to_dict

__all__ = ["Preset", "PRESETS", "graphpipe_model"]


@dataclass(frozen=True)
class Preset:
    """One GraphPipe-like model shape.

    Attributes
    ----------
    kind : {"mmt", "dlrm"}
        Multi-modal transformer (each branch an embedding and layers) or DLRM-like (each
        branch one embedding table, joined by an interaction node).
    branches : int
        Number of parallel branches.
    layers : int
        Transformer layers per branch (``mmt`` only; 0 for ``dlrm``).
    fusion : int
        Layers after the join, before the head (the fusion stack or the top MLP).
    """

    kind: str
    branches: int
    layers: int
    fusion: int


#: The models of issue 35: 2- and 4-branch multi-modal transformers, DLRM with 8 tables.
PRESETS: dict[str, Preset] = {
    "mmt2": Preset("mmt", 2, 12, 2),
    "mmt4": Preset("mmt", 4, 6, 2),
    "dlrm8": Preset("dlrm", 8, 0, 2),
}


@dataclass(frozen=True)
class _Kinds:
    """The profile's node ids of each kind, and the bytes of the edges between kinds."""

    input: int
    embedding: int
    layer: int
    prev: int
    next: int
    head: int
    first: int  # the chain's first layer (the embedding's successor)
    last: int  # the chain's last layer (the head's predecessor)
    input_c: float  # input -> embedding
    into_c: float  # embedding -> first layer
    along_c: float  # layer -> next layer
    out_c: float  # last layer -> head


def _kinds(instance: Instance) -> _Kinds:
    """The kinds of layer of ``instance`` (see the module text), or InputError."""
    src = instance.source
    chain, into, out_of = chain_between(
        instance, "a GraphPipe-like model", "the embedding and the head"
    )
    inputs = [e for e in instance.edges if e.dst == into.src]
    if not inputs:
        raise InputError(
            f"{src}: node {into.src} (the layer before the repeated chain) has no input node "
            "before it"
        )
    inp = max(inputs, key=lambda e: (e.c, -e.src))
    k = len(chain) // 2
    along = next(e.c for e in instance.edges if e.src == chain[k] and e.dst == chain[k + 1])
    return _Kinds(
        inp.src, into.src, chain[k], chain[k - 1], chain[k + 1], out_of.dst, chain[0],
        chain[-1], inp.c, into.c, along, out_of.c,
    )  # fmt: skip


def _shape(preset: Preset, kinds: _Kinds):
    """Nodes (prototype ids, names) and edges (index pairs) of the model."""
    protos, names, edges = [kinds.input], ["input"], []

    def add(proto: int, name: str, pred: int | None) -> int:
        protos.append(proto)
        names.append(name)
        if pred is not None:
            edges.append((pred, len(protos) - 1))
        return len(protos) - 1

    ends = []
    for b in range(preset.branches):
        v = add(kinds.embedding, f"branch {b} embedding", 0)
        for j in range(preset.layers):
            v = add(kinds.layer, f"branch {b} layer {j}", v)
        ends.append(v)
    if preset.kind == "dlrm":
        join = add(kinds.input, "interaction", None)
        edges.extend((v, join) for v in ends)
        ends = [join]
    for j in range(preset.fusion):
        v = add(kinds.layer, f"{'top MLP' if preset.kind == 'dlrm' else 'fusion'} {j}", None)
        edges.extend((u, v) for u in ends)
        ends = [v]
    head = add(kinds.head, "head", None)
    edges.extend((u, head) for u in ends)
    return protos, names, edges


def _edge_bytes(kinds: _Kinds, protos: list[int], u: int, v: int) -> float:
    """The profile's bytes for an edge from a copy of ``protos[u]`` to one of ``protos[v]``."""
    a, b = protos[u], protos[v]
    if a == kinds.input and u != 0:  # the interaction passes on the embeddings' bytes
        return kinds.into_c
    if a == kinds.input:
        return kinds.input_c
    if a == kinds.embedding:
        return kinds.into_c
    return kinds.out_c if b == kinds.head else kinds.along_c


def _same_side(kinds: _Kinds, proto: int) -> tuple[int | None, int | None]:
    """The profile neighbours whose sync entries a copy of ``proto`` uses (before, after)."""
    return {
        kinds.input: (None, kinds.embedding),
        kinds.embedding: (kinds.input, kinds.first),
        kinds.layer: (kinds.prev, kinds.next),
        kinds.head: (kinds.last, None),
    }[proto]


def _node(data_node: dict, nid: int, name: str, before: list[int], after: list[int], sides):
    """A copy of ``data_node`` with id ``nid`` and sync entries for its new neighbours."""
    fw_key, bw_key = sides
    tmpcs = {}
    for t, opts in data_node["TMPCs"].items():
        new = []
        for o in opts:
            o = copy.deepcopy(o)
            fw = o["syncTimeFw"].get(str(fw_key), 0.0) if fw_key is not None else 0.0
            bw = o["syncTimeBw"].get(str(bw_key), 0.0) if bw_key is not None else 0.0
            o["syncTimeFw"] = {str(p): fw for p in before}
            o["syncTimeBw"] = {str(s): bw for s in after}
            new.append(o)
        tmpcs[t] = new
    return {"id": nid, "name": name, "TMPCs": tmpcs}


def graphpipe_model(instance: Instance, preset: str | Preset) -> Instance:
    """A GraphPipe-like multi-branch model of ``instance``'s layers (see the module text).

    Parameters
    ----------
    instance : Instance
        A profile with a repeated chain of at least 3 layers, a layer before it (the
        embedding) with an input node before that, and a layer after it (the head), such
        as ``bert32a100.json``.
    preset : str or Preset
        A name of :data:`PRESETS` (``mmt2``, ``mmt4``, ``dlrm8``) or a shape.

    Returns
    -------
    Instance
        Node 0 the input, then the branches one after the other, the join, the head last.
        K, M, N and B are the profile's.

    Raises
    ------
    InputError
        An unknown preset, a shape with fewer than 2 branches or a negative count, too many
        nodes, or a profile without the kinds of layer above.

    Examples
    --------
    >>> from piper_ilp.instance import load_instance
    >>> bert = load_instance("../shared/piper-inputs/bert32a100.json")  # doctest: +SKIP
    >>> m = graphpipe_model(bert, "dlrm8")  # doctest: +SKIP
    >>> len(m.nodes), len(m.edges)  # doctest: +SKIP
    (13, 20)
    """
    src = instance.source
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise InputError(
                f"--preset: unknown model {preset!r}; choose one of {', '.join(PRESETS)}"
            )
        label, preset = preset, PRESETS[preset]
    else:
        label = f"{preset.kind}{preset.branches}"
    counts = (preset.branches, preset.layers, preset.fusion)
    if (
        preset.kind not in ("mmt", "dlrm")
        or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts)
        or preset.branches < 2
    ):
        raise InputError(f"{src}: a GraphPipe-like model needs >= 2 branches, got {preset!r}")
    kinds = _kinds(instance)
    protos, names, edges = _shape(preset, kinds)
    if len(protos) > MAX_NODES:
        raise InputError(f"{src}: {len(protos)} nodes, more than the supported {MAX_NODES}")
    data = instance_to_dict(instance)
    by_id = {nd["id"]: nd for nd in data["nodes"]}
    preds = {i: [u for u, v in edges if v == i] for i in range(len(protos))}
    succs = {i: [v for u, v in edges if u == i] for i in range(len(protos))}
    data["nodes"] = [
        _node(by_id[p], i, names[i], preds[i], succs[i], _same_side(kinds, p))
        for i, p in enumerate(protos)
    ]
    data["edges"] = [
        {"sourceId": u, "destId": v, "communicationCost": _edge_bytes(kinds, protos, u, v)}
        for u, v in edges
    ]
    return instance_from_dict(data, source=f"{src} ({label})")
