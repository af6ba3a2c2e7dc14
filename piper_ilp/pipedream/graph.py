"""PipeDream's profile format (``graph.txt``) and the preparation its planner applies.

A ``graph.txt`` file (PipeDream, ``profiler/*/profiles/<model>/graph.txt``) has two kinds
of lines:

* a node: ``nodeN -- DESCRIPTION -- forward_compute_time=F, backward_compute_time=G,
  activation_size=A, parameter_size=P`` (F and G in milliseconds per minibatch, A bytes of
  the node's output activation, P bytes of its weights; A may also be a list
  ``[a1; a2; ...]``, which counts as its sum);
* an edge: a tab, then ``nodeU -- nodeV``.

Every number is finite, >= 0 and at most :data:`VALUE_MAX` (1e30, the top of Piper's value
range), and so is a list's sum: then every sum, product and quotient PipeDream's planner
forms stays finite (``docs/pipedream.md``), and no time is ever infinite.

:func:`parse_graph` reads it (every bad line is one :class:`InputError` naming the file and
the line number). :func:`prepare` does what PipeDream's planner does before planning: inputs
(sources whose description starts with ``Input``) are dropped, then the sinks whose
description starts with ``__getitem__``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from piper_ilp.errors import InputError
from piper_ilp.instance import check_setting, nodes_on_cycles
from piper_ilp.jsonfile import VALUE_MAX

__all__ = [
    "PDNode",
    "PDGraph",
    "VALUE_MAX",
    "check_model_settings",
    "graph_text",
    "parse_graph",
    "parse_graph_text",
    "prepare",
    "Prepared",
]


@dataclass(frozen=True)
class PDNode:
    """One profiled layer. ``time`` = (F + G) / 1000 seconds per minibatch, ``activation``
    = A bytes (output activation), ``parameter`` = P bytes (weights)."""

    id: str
    desc: str
    forward_ms: float
    backward_ms: float
    activation: float
    parameter: float
    line: int = 0

    @property
    def time(self) -> float:
        """(F + G) / 1000: seconds per minibatch on one worker (as PipeDream sums it)."""
        return (self.forward_ms + self.backward_ms) / 1000.0


@dataclass(frozen=True)
class PDGraph:
    """A profile: nodes in file order and edges ``(u, v)`` (node ids) in file order."""

    nodes: tuple[PDNode, ...]
    edges: tuple[tuple[str, str], ...]
    source: str = "<graph>"

    @property
    def by_id(self) -> dict[str, PDNode]:
        return {n.id: n for n in self.nodes}


_FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
_NUM_RE = re.compile(r"^[+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")


_RANGE = f"a number within [0, {VALUE_MAX:g}]"


def _number(text: str, where: str) -> float:
    text = text.strip()
    if not _NUM_RE.match(text):
        raise InputError(f"{where}: expected {_RANGE}, got {text!r}")
    value = float(text)
    if not value <= VALUE_MAX:  # (inf too)
        raise InputError(f"{where}: expected {_RANGE}, got {text}")
    return value


def _node_line(text: str, where: str, line: int) -> PDNode:
    parts = text.split(" -- ")
    if len(parts) < 3:
        raise InputError(
            f"{where}: a node line needs 'ID -- DESCRIPTION -- forward_compute_time=..., ...'"
        )
    node_id = parts[0].strip()
    if not node_id or any(c.isspace() for c in node_id):
        raise InputError(f"{where}: bad node id {node_id!r}")
    desc = " -- ".join(parts[1:-1])
    metadata = parts[-1]
    if metadata.strip().startswith("stage_id=") and len(parts) >= 4:
        # A partitioned graph (PipeDream's planner output) ends with " -- stage_id=S".
        desc = " -- ".join(parts[1:-2])
        metadata = parts[-2]
    items = [s.strip() for s in metadata.split(", ")]
    if len(items) != 4:
        raise InputError(f"{where}: expected 4 fields {', '.join(_FIELDS)}, got {len(items)}")
    values = []
    for item, name in zip(items, _FIELDS):
        key, sep, raw = item.partition("=")
        if not sep or key.strip() != name:
            raise InputError(f"{where}: expected field {name}=..., got {item!r}")
        if name == "activation_size" and raw.strip().startswith("["):
            inner = raw.strip()
            if not inner.endswith("]"):
                raise InputError(f"{where}: activation_size list must end with ']', got {raw!r}")
            elems = [_number(e, f"{where}: {name}") for e in inner[1:-1].split(";") if e.strip()]
            total = math.fsum(elems)  # at most len(line) * 1e30: no overflow
            if total > VALUE_MAX:
                raise InputError(
                    f"{where}: {name}: the list's sum {total:g} is above {VALUE_MAX:g}"
                )
            values.append(total)
        else:
            values.append(_number(raw, f"{where}: {name}"))
    return PDNode(node_id, desc, values[0], values[1], values[2], values[3], line)


def parse_graph_text(text: str, source: str = "<graph>") -> PDGraph:
    """Parse the text of a ``graph.txt`` profile.

    Parameters
    ----------
    text : str
        The file's contents.
    source : str
        Name used in messages (the file path).

    Returns
    -------
    PDGraph

    Raises
    ------
    InputError
        On the first bad line (``source:LINE: ...``), a duplicate node, an edge naming an
        unknown node, a self-loop, a duplicate edge, a cycle or a file without nodes.

    Examples
    --------
    >>> g = parse_graph_text(
    ...     "node1 -- Input -- forward_compute_time=0, backward_compute_time=0, "
    ...     "activation_size=4.0, parameter_size=0\\n"
    ...     "node2 -- Linear -- forward_compute_time=1.5, backward_compute_time=2.5, "
    ...     "activation_size=8.0, parameter_size=16.0\\n\\tnode1 -- node2\\n"
    ... )
    >>> [n.id for n in g.nodes], g.edges, g.nodes[1].time
    (['node1', 'node2'], (('node1', 'node2'),), 0.004)
    """
    nodes: list[PDNode] = []
    seen: dict[str, int] = {}
    edges: list[tuple[str, str, int]] = []
    for lineno, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        if line.startswith("\t") or line.startswith(" "):
            parts = line.strip().split(" -- ")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise InputError(
                    f"{where}: an edge line is a tab, then 'nodeU -- nodeV', got {line.strip()!r}"
                )
            edges.append((parts[0].strip(), parts[1].strip(), lineno))
        else:
            node = _node_line(line.strip(), where, lineno)
            if node.id in seen:
                raise InputError(f"{where}: node {node.id} already defined on line {seen[node.id]}")
            seen[node.id] = lineno
            nodes.append(node)
    if not nodes:
        raise InputError(f"{source}: no node lines")
    pairs: set[tuple[str, str]] = set()
    for u, v, lineno in edges:
        for x in (u, v):
            if x not in seen:
                raise InputError(f"{source}:{lineno}: edge {u} -- {v} names unknown node {x}")
        if u == v:
            raise InputError(f"{source}:{lineno}: edge {u} -- {v} is a self-loop")
        if (u, v) in pairs:
            raise InputError(f"{source}:{lineno}: duplicate edge {u} -- {v}")
        pairs.add((u, v))
    graph = PDGraph(tuple(nodes), tuple((u, v) for u, v, _ in edges), source)
    _check_acyclic(graph)
    return graph


def graph_text(graph: PDGraph) -> str:
    """The ``graph.txt`` text of ``graph``: a node line per node, then an edge line per
    edge, numbers written with ``repr`` (exact). :func:`parse_graph_text` reads it back to
    the same nodes (line numbers aside) and edges.

    Examples
    --------
    >>> g = parse_graph_text(graph_text(PDGraph((PDNode("a", "X", 1.5, 0.0, 2.0, 1e30),), ())))
    >>> (g.nodes[0].forward_ms, g.nodes[0].parameter)
    (1.5, 1e+30)
    """
    lines = [
        f"{nd.id} -- {nd.desc} -- forward_compute_time={nd.forward_ms!r}, "
        f"backward_compute_time={nd.backward_ms!r}, activation_size={nd.activation!r}, "
        f"parameter_size={nd.parameter!r}"
        for nd in graph.nodes
    ]
    return "\n".join(lines + [f"\t{u} -- {v}" for u, v in graph.edges]) + "\n"


def parse_graph(path: str | Path) -> PDGraph:
    """Read a ``graph.txt`` file (see :func:`parse_graph_text`): a regular file of at most
    :data:`piper_ilp.jsonfile.MAX_FILE_BYTES`, read without blocking, as the JSON files are."""
    from piper_ilp.jsonfile import MAX_FILE_BYTES, read_file_bytes

    data = read_file_bytes(path, MAX_FILE_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_graph_text(text, str(path))


def _check_acyclic(graph: PDGraph) -> None:
    succs: dict[str, list[str]] = {n.id: [] for n in graph.nodes}
    for u, v in graph.edges:
        succs[u].append(v)
    left = nodes_on_cycles(succs)
    if left:
        raise InputError(f"{graph.source}: the graph has a cycle through {', '.join(left[:5])}")


@dataclass(frozen=True)
class Prepared:
    """The graph PipeDream's planner plans for (SOURCE point 1).

    ``nodes``: the kept nodes in file order; ``outs`` / ``ins``: for each kept node index,
    its out- / in-neighbours (indices) in edge-line order; ``inputs``: ids of the dropped
    input nodes; ``dropped_sinks``: ids of the dropped ``__getitem__`` sinks.
    """

    nodes: tuple[PDNode, ...]
    outs: tuple[tuple[int, ...], ...]
    ins: tuple[tuple[int, ...], ...]
    inputs: tuple[str, ...]
    dropped_sinks: tuple[str, ...]
    source: str = "<graph>"
    _cache: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    def sums(self, mask: int) -> tuple[float, float, float]:
        """fsum of compute time, activation and parameter bytes over the kept nodes whose
        indices are the bits of ``mask`` (a stage's totals in PipeDream's model)."""
        nodes = [self.nodes[v] for v in range(mask.bit_length()) if mask >> v & 1]
        return (
            math.fsum(nd.time for nd in nodes),
            math.fsum(nd.activation for nd in nodes),
            math.fsum(nd.parameter for nd in nodes),
        )


def _check_numbers(nd: PDNode, source: str) -> None:
    """A node's time, activation and parameter size within [0, VALUE_MAX]: what keeps every
    number PipeDream's planner forms finite."""
    for what, value in (
        ("time (F + G) / 1000", nd.time),
        ("activation size", nd.activation),
        ("parameter size", nd.parameter),
    ):
        if not 0 <= value <= VALUE_MAX:  # (nan and inf too)
            where = f"{source}:{nd.line}" if nd.line else source
            raise InputError(f"{where}: node {nd.id}: its {what} is {value!r}, not {_RANGE}")


def check_model_settings(bandwidths, memory: float | None = None) -> list[float]:
    """The bandwidths (bytes/s) and the memory (bytes; None when the memory rule is off) of
    PipeDream's model, each a number within [1e-30, 1e30] (Piper's B and M,
    :func:`piper_ilp.instance.check_setting`): with the graph's numbers at most
    :data:`VALUE_MAX`, every stage time and size the planner forms is then finite.
    Returns the bandwidths as floats.

    Raises
    ------
    InputError
        One line naming the setting and the range.
    """
    out = [check_setting("B", b, "bandwidth") for b in bandwidths]
    if memory is not None:
        check_setting("M", memory, "memory")
    return out


def prepare(graph: PDGraph) -> Prepared:
    """Drop what PipeDream's planner drops before planning.

    1. Every *source* (no incoming edge) whose description starts with ``Input`` is removed
       (with its edges); PipeDream zeroes its numbers and puts it back in stage 0 at the end.
    2. Then, once (not repeatedly), every *sink* (no outgoing edge) of what is left whose
       description starts with ``__getitem__`` is removed.

    Raises
    ------
    InputError
        When nothing is left to plan, or a node's time (F + G) / 1000, activation or
        parameter size is not a number within [0, :data:`VALUE_MAX`] (a graph made in code:
        the parser refuses such numbers on their line).
    """
    for nd in graph.nodes:
        _check_numbers(nd, graph.source)
    ids = [n.id for n in graph.nodes]
    has_in = {v for _, v in graph.edges}
    inputs = {n.id for n in graph.nodes if n.id not in has_in and n.desc.startswith("Input")}
    kept = [i for i in ids if i not in inputs]
    edges = [(u, v) for u, v in graph.edges if u not in inputs and v not in inputs]
    has_out = {u for u, _ in edges}
    by_id = graph.by_id
    sinks = {i for i in kept if i not in has_out and by_id[i].desc.startswith("__getitem__")}
    kept = [i for i in kept if i not in sinks]
    edges = [(u, v) for u, v in edges if u not in sinks and v not in sinks]
    if not kept:
        raise InputError(
            f"{graph.source}: nothing left to plan once the inputs and __getitem__ sinks are "
            "dropped"
        )
    index = {x: k for k, x in enumerate(kept)}
    outs: list[list[int]] = [[] for _ in kept]
    ins: list[list[int]] = [[] for _ in kept]
    for u, v in edges:
        outs[index[u]].append(index[v])
        ins[index[v]].append(index[u])
    return Prepared(
        tuple(by_id[i] for i in kept),
        tuple(tuple(o) for o in outs),
        tuple(tuple(x) for x in ins),
        tuple(i for i in ids if i in inputs),
        tuple(i for i in ids if i in sinks),
        graph.source,
    )
