"""Between PipeDream's profiles and Piper's instances and plans (``docs/pipedream.md``): a
``graph.txt`` profile as an instance (:func:`graph_to_instance`) and back
(:func:`instance_to_graph`), and a plan of PipeDream's planner as a Piper plan
(:func:`piper_plan_from_pipedream`).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from piper_ilp.errors import InputError
from piper_ilp.instance import Edge, Instance, Node, Option, instance_from_dict, instance_to_dict
from piper_ilp.pipedream.graph import PDGraph, PDNode, prepare
from piper_ilp.plan import Plan, Stage

__all__ = [
    "graph_to_instance",
    "node_id_map",
    "instance_to_graph",
    "piper_plan_from_pipedream",
    "VANILLA",
]

VANILLA = "vanilla"
_NODE_RE = re.compile(r"^node([0-9]+)$")

#: PipeDream's defaults: -s 16e9 bytes per worker, -b 1e9 bytes/s.
DEFAULT_MEMORY = 16e9
DEFAULT_BANDWIDTH = 1e9


def node_id_map(graph: PDGraph) -> dict[str, int]:
    """The integer Piper id of each ``graph.txt`` node id.

    Parameters
    ----------
    graph : PDGraph

    Returns
    -------
    dict
        The integer N of ``nodeN`` when every id has that form (and no two share an N),
        else 0, 1, 2, ... in file order.
    """
    nums = []
    for nd in graph.nodes:
        m = _NODE_RE.match(nd.id)
        if not m:
            break
        nums.append(int(m.group(1)))
    if len(nums) == len(graph.nodes) and len(set(nums)) == len(nums):
        return {nd.id: k for nd, k in zip(graph.nodes, nums)}
    return {nd.id: k for k, nd in enumerate(graph.nodes)}


def graph_to_instance(
    graph: PDGraph,
    devices: int = 1,
    memory: float = DEFAULT_MEMORY,
    batch: int = 1,
    bandwidth: float = DEFAULT_BANDWIDTH,
) -> Instance:
    """A Piper instance of a PipeDream profile.

    Every node of ``graph.txt`` becomes a Piper node with one option ``"vanilla"`` at
    t = 1, named ``"nodeN: DESCRIPTION"``, its id from :func:`node_id_map`:

    * p = (F + G) / 1000 seconds (PipeDream's time per minibatch; one PipeDream minibatch
      is one Piper sample / microbatch);
    * w = P bytes (the weights all-reduced by data parallelism);
    * a = A bytes per microbatch in flight (the node's output activation is stashed for
      the backward pass), b = P bytes (one copy of the weights);
    * edge (u -> v) carries c = A_u bytes (the source's activation), sfw = sbw = 0;
    * input nodes (sources whose description starts with ``Input``) are kept with p = w =
      a = b = 0 (PipeDream zeroes them and puts them in stage 0); their out-edges carry 0
      bytes, as PipeDream sets their activation to 0;
    * ``__getitem__`` sinks (dropped by PipeDream's planner) are kept with their own
      numbers (zero time in the published profiles); a plan puts them with their
      producer.

    Parameters
    ----------
    graph : PDGraph
    devices, memory, batch, bandwidth :
        K, M (bytes), N (microbatches per batch) and B (bytes/s) of the instance;
        PipeDream's defaults for M (16e9) and B (1e9).

    Returns
    -------
    Instance
        Validated as a loaded instance is (:func:`~piper_ilp.instance.instance_from_dict`).

    Raises
    ------
    InputError
        ``devices`` or ``batch`` not a whole number >= 1, ``memory`` or ``bandwidth`` not
        a finite number > 0, nothing left to plan once PipeDream's drops are made, or a
        number outside the supported range.

    Examples
    --------
    >>> from piper_ilp.pipedream.graph import parse_graph_text
    >>> g = parse_graph_text(
    ...     "node1 -- Input -- forward_compute_time=0, backward_compute_time=0, "
    ...     "activation_size=4.0, parameter_size=0\\n"
    ...     "node2 -- Linear -- forward_compute_time=1.5, backward_compute_time=2.5, "
    ...     "activation_size=8.0, parameter_size=16.0\\n\\tnode1 -- node2\\n"
    ... )
    >>> inst = graph_to_instance(g, devices=4, batch=8)
    >>> [(n.id, n.name) for n in inst.nodes]
    [(1, 'node1: Input'), (2, 'node2: Linear')]
    >>> o = inst.node[2].options[1][0]
    >>> (o.p, o.w, o.a, o.b), inst.edges[0].c  # the input's out-edge carries 0 bytes
    ((0.004, 16.0, 8.0, 16.0), 0.0)
    """
    for name, value in (("devices", devices), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a whole number >= 1, got {value!r}")
    for name, value in (("memory", memory), ("bandwidth", bandwidth)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    ids = node_id_map(graph)
    prep = prepare(graph)
    inputs = set(prep.inputs)
    by_id = graph.by_id
    ins: dict[str, list[str]] = {nd.id: [] for nd in graph.nodes}
    outs: dict[str, list[str]] = {nd.id: [] for nd in graph.nodes}
    for u, v in graph.edges:
        outs[u].append(v)
        ins[v].append(u)
    nodes = []
    for nd in graph.nodes:
        zero = nd.id in inputs
        opt = Option(
            id=VANILLA,
            p=0.0 if zero else nd.time,
            w=0.0 if zero else nd.parameter,
            a=0.0 if zero else nd.activation,
            b=0.0 if zero else nd.parameter,
            sfw={ids[u]: 0.0 for u in ins[nd.id]},
            sbw={ids[x]: 0.0 for x in outs[nd.id]},
        )
        nodes.append(Node(ids[nd.id], f"{nd.id}: {nd.desc}", {1: (opt,)}))
    edges = tuple(
        Edge(ids[u], ids[v], 0.0 if u in inputs else by_id[u].activation) for u, v in graph.edges
    )
    raw = Instance(
        K=devices,
        M=float(memory),
        B=float(bandwidth),
        N=batch,
        nodes=tuple(nodes),
        edges=edges,
        source=graph.source,
    )
    return instance_from_dict(instance_to_dict(raw), graph.source)


def instance_to_graph(instance: Instance, option: str = VANILLA) -> tuple[PDGraph, dict[str, int]]:
    """A PipeDream profile of a Piper instance, for running PipeDream's planner on it.

    Each node's option ``option`` at t = 1 (else its first option at t = 1) gives
    (F + G) / 1000 = p (F = 1000 p, G = 0), A = a and P = w; node ``v`` is named
    ``node<v>``. Its description is the part of the node's name after ``": "`` (as
    :func:`graph_to_instance` writes it), else ``"layer"``: so the inputs and
    ``__getitem__`` sinks of an imported profile are again dropped by the planner.

    Parameters
    ----------
    instance : Instance
    option : str
        The option id to take at t = 1.

    Returns
    -------
    (PDGraph, dict)
        The graph and the map from its node ids back to the instance's ids.

    Raises
    ------
    InputError
        When a node has no option at t = 1.
    """
    nodes = []
    back: dict[str, int] = {}
    for n in instance.nodes:
        opts = n.options.get(1, ())
        if not opts:
            raise InputError(
                f"{instance.source}: node {n.id} has no option at t = 1; PipeDream's planner needs "
                "one"
            )
        o = next((x for x in opts if x.id == option), opts[0])
        name = f"node{n.id}"
        back[name] = n.id
        desc = n.name.split(": ", 1)[1] if n.name and ": " in n.name else "layer"
        nodes.append(PDNode(name, desc, o.p * 1000.0, 0.0, o.a, o.w))
    edges = tuple((f"node{e.src}", f"node{e.dst}") for e in instance.edges)
    return PDGraph(tuple(nodes), edges, instance.source), back


def piper_plan_from_pipedream(
    graph: PDGraph,
    stages: Sequence[tuple[Sequence[str], int]],
    ids: Mapping[str, int] | None = None,
    option: str = VANILLA,
) -> Plan:
    """Map PipeDream's stages (layer ids, replication) to a Piper plan.

    Stage i gets d = its replication, t = 1 and option ``option`` for every node; inputs
    dropped by PipeDream join the first stage, dropped ``__getitem__`` sinks the stage of
    their latest producer (the first stage when they have none).

    Parameters
    ----------
    graph : PDGraph
        The profile the stages were planned on.
    stages : sequence of (sequence of str, int)
        PipeDream's stages in pipeline order: the ``graph.txt`` ids of their layers and
        their replication.
    ids : mapping, optional
        Piper id of each ``graph.txt`` id; by default :func:`node_id_map`.
    option : str
        The option id every node gets.

    Returns
    -------
    Plan
        One stage per PipeDream stage, in pipeline order, every node with ``option``.

    Raises
    ------
    InputError
        When a stage holds a layer id the graph does not have, a layer is in two stages,
        or no stage holds a layer that PipeDream plans.

    Examples
    --------
    >>> from piper_ilp.pipedream.graph import parse_graph_text
    >>> g = parse_graph_text(
    ...     "node1 -- Input -- forward_compute_time=0, backward_compute_time=0, "
    ...     "activation_size=4.0, parameter_size=0\\n"
    ...     "node2 -- Linear -- forward_compute_time=1.5, backward_compute_time=2.5, "
    ...     "activation_size=8.0, parameter_size=16.0\\n\\tnode1 -- node2\\n"
    ... )
    >>> piper_plan_from_pipedream(g, [(["node2"], 2)]).stages  # the input joins stage 0
    (Stage(nodes=(1, 2), d=2, t=1, options={1: 'vanilla', 2: 'vanilla'}),)
    """
    ids = dict(ids) if ids is not None else node_id_map(graph)
    prep = prepare(graph)
    known = {nd.id for nd in graph.nodes}
    where: dict[str, int] = {}
    for i, (layers, _) in enumerate(stages):
        unknown = [str(x) for x in layers if x not in known]
        if unknown:
            raise InputError(
                f"{graph.source}: stage {i} holds layer id(s) {', '.join(unknown[:5])}"
                f"{' ...' if len(unknown) > 5 else ''} that the graph does not have"
            )
        for x in layers:
            if x in where:
                raise InputError(f"{graph.source}: layer {x} is in stages {where[x]} and {i}")
            where[x] = i
    missing = [nd.id for nd in prep.nodes if nd.id not in where]
    if missing:
        raise InputError(f"{graph.source}: no stage holds layer(s) {', '.join(missing[:5])}")
    for x in prep.inputs:
        where[x] = 0
    preds: dict[str, list[str]] = {}
    for u, v in graph.edges:
        preds.setdefault(v, []).append(u)
    for x in prep.dropped_sinks:
        where[x] = max((where[u] for u in preds.get(x, []) if u in where), default=0)
    members: list[list[int]] = [[] for _ in stages]
    for nd in graph.nodes:
        members[where[nd.id]].append(ids[nd.id])
    return Plan(
        tuple(
            Stage(tuple(m), int(r), 1, {v: option for v in m}) for m, (_, r) in zip(members, stages)
        )
    )
