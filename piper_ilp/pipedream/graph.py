"""PipeDream's profile format (``graph.txt``): reading it (:func:`parse_graph`), writing it
(:func:`graph_text`), the settings of PipeDream's model (:func:`check_model_settings`) and the
preparation its planner applies before planning (:func:`prepare`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from piper_ilp.bitmask import mask_bits
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
    """One profiled layer: a node line of ``graph.txt``.

    Attributes
    ----------
    id : str
        The node's id (``nodeN``).
    desc : str
        Its description (the layer, e.g. ``Linear(...)``; ``Input...`` for an input).
    forward_ms, backward_ms : float
        F and G: forward and backward compute time, milliseconds per minibatch on one
        worker.
    activation : float
        A: bytes of the node's output activation (a list's sum).
    parameter : float
        P: bytes of its weights.
    line : int
        Its line in the file (1-based); 0 for a node made in code.

    Examples
    --------
    >>> PDNode("node2", "Linear", 1.5, 2.5, 8.0, 16.0).time
    0.004
    """

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
    """A profile as read from ``graph.txt``.

    Attributes
    ----------
    nodes : tuple of PDNode
        In file order.
    edges : tuple of (str, str)
        ``(u, v)`` by node id, in file order.
    source : str
        The file's name, used in messages.
    """

    nodes: tuple[PDNode, ...]
    edges: tuple[tuple[str, str], ...]
    source: str = "<graph>"

    @property
    def by_id(self) -> dict[str, PDNode]:
        """The nodes by id (a new dict at each call)."""
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

    The file (PipeDream, ``profiler/*/profiles/<model>/graph.txt``) has two kinds of lines:

    * a node: ``nodeN -- DESCRIPTION -- forward_compute_time=F, backward_compute_time=G,
      activation_size=A, parameter_size=P`` (see :class:`PDNode`; A may also be a list
      ``[a1; a2; ...]``, which counts as its sum; a trailing `` -- stage_id=S``, as in a
      partitioned graph, is skipped);
    * an edge: a tab (or a space), then ``nodeU -- nodeV``.

    Every number is finite, >= 0 and at most :data:`VALUE_MAX` (1e30, the top of Piper's
    value range), and so is a list's sum: then every sum, product and quotient PipeDream's
    planner forms stays finite (``docs/pipedream.md``), and no time is ever infinite.

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
        On the first bad line (``source:LINE: ...``: a malformed line, a missing or
        misnamed field, a number not within [0, :data:`VALUE_MAX`], a duplicate node), an
        edge naming an unknown node, a self-loop, a duplicate edge (with the edge's line),
        a cycle or a file without nodes.

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
    edge, numbers written with ``repr`` (exact).

    Parameters
    ----------
    graph : PDGraph

    Returns
    -------
    str
        Text that :func:`parse_graph_text` reads back to the same nodes (line numbers
        aside) and edges.

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
    """Read a ``graph.txt`` file (the format at :func:`parse_graph_text`).

    Parameters
    ----------
    path : str or Path
        A regular file of at most :data:`piper_ilp.jsonfile.MAX_FILE_BYTES`, read without
        blocking, as the JSON files are (:func:`piper_ilp.jsonfile.read_file_bytes`).

    Returns
    -------
    PDGraph
        Its ``source`` is ``str(path)``.

    Raises
    ------
    InputError
        The file cannot be read, is too large or not a regular file, is not UTF-8, or
        :func:`parse_graph_text` refuses its text (``path:LINE: ...``).
    """
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
    """The graph PipeDream's planner plans for, made by :func:`prepare` (``docs/pipedream.md``,
    "What the planner does", point 1).

    Attributes
    ----------
    nodes : tuple of PDNode
        The kept nodes in file order; a node's index here is its index everywhere else.
    outs, ins : tuple of tuple of int
        For each kept node index, its out- / in-neighbours (indices) in edge-line order.
    inputs : tuple of str
        Ids of the dropped input nodes, in file order.
    dropped_sinks : tuple of str
        Ids of the dropped ``__getitem__`` sinks, in file order.
    source : str
        The file's name, used in messages.
    """

    nodes: tuple[PDNode, ...]
    outs: tuple[tuple[int, ...], ...]
    ins: tuple[tuple[int, ...], ...]
    inputs: tuple[str, ...]
    dropped_sinks: tuple[str, ...]
    source: str = "<graph>"
    _cache: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    def sums(self, mask: int) -> tuple[float, float, float]:
        """A stage's totals in PipeDream's model.

        Parameters
        ----------
        mask : int
            The stage's kept nodes: bit v set for node index v.

        Returns
        -------
        tuple of float
            (time, activation, parameter): :func:`math.fsum` of :attr:`PDNode.time`,
            ``activation`` and ``parameter`` over those nodes.

        Examples
        --------
        >>> g = parse_graph_text(graph_text(PDGraph(
        ...     (PDNode("a", "X", 1.0, 1.0, 2.0, 3.0), PDNode("b", "Y", 2.0, 2.0, 4.0, 5.0)),
        ...     (("a", "b"),))))
        >>> prepare(g).sums(0b11)
        (0.006, 6.0, 8.0)
        """
        nodes = [self.nodes[v] for v in mask_bits(mask)]
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
    """Check the settings of PipeDream's model against Piper's ranges of B and M.

    Each must be a number within [1e-30, 1e30] (:func:`piper_ilp.instance.check_setting`):
    with the graph's numbers at most :data:`VALUE_MAX`, every stage time and size the
    planner forms is then finite.

    Parameters
    ----------
    bandwidths : iterable of number
        The bandwidths, bytes/s (one per level of the hierarchy).
    memory : float or None
        The memory per worker, bytes; None when the memory rule is off (not checked).

    Returns
    -------
    list of float
        The bandwidths as floats.

    Raises
    ------
    InputError
        One line naming the setting and the range.

    Examples
    --------
    >>> check_model_settings([1e9, 25e9], 16e9)
    [1000000000.0, 25000000000.0]
    >>> check_model_settings([0])
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: bandwidth must be a number within [1e-30, 1e+30], got 0
    """
    out = [check_setting("B", b, "bandwidth") for b in bandwidths]
    if memory is not None:
        check_setting("M", memory, "memory")
    return out


def prepare(graph: PDGraph) -> Prepared:
    """Drop what PipeDream's planner drops before planning (``docs/pipedream.md``, "What the
    planner does", point 1).

    1. Every *source* (no incoming edge) whose description starts with ``Input`` is removed
       (with its edges); PipeDream zeroes its numbers and puts it back in stage 0 at the end.
    2. Then, once (not repeatedly), every *sink* (no outgoing edge) of what is left whose
       description starts with ``__getitem__`` is removed.

    Parameters
    ----------
    graph : PDGraph

    Returns
    -------
    Prepared

    Raises
    ------
    InputError
        When nothing is left to plan, or a node's time (F + G) / 1000, activation or
        parameter size is not a number within [0, :data:`VALUE_MAX`] (a graph made in code:
        the parser refuses such numbers on their line).

    Examples
    --------
    >>> g = parse_graph_text(graph_text(PDGraph(
    ...     (PDNode("in", "Input0", 0.0, 0.0, 4.0, 0.0), PDNode("a", "Linear", 1.0, 1.0, 8.0, 2.0),
    ...      PDNode("s", "__getitem__", 0.0, 0.0, 8.0, 0.0)),
    ...     (("in", "a"), ("a", "s")))))
    >>> p = prepare(g)
    >>> [n.id for n in p.nodes], p.inputs, p.dropped_sinks, p.outs
    (['a'], ('in',), ('s',), ((),))
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
