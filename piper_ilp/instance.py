"""The Piper planning instance: a profiled layer graph plus the cluster settings.

This is sec. 1 of ``docs/cost-model.md``. An :class:`Instance` is immutable and
validated once, when it is loaded (:func:`load_instance`, :func:`instance_from_dict`);
every solver and the evaluator may then trust it.

Symbols (Tarnawski et al., NeurIPS 2021): K devices, M bytes of memory per device,
B bytes/s of bandwidth per device, N microbatches per batch; for each node v, each
tensor-parallel degree t and each option ("TMPC") l: p (seconds per sample),
w (weight bytes per device), a and b (memory = a * y + b), sfw / sbw (extra bytes
per incoming / outgoing edge).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from piper_ilp.errors import InputError
from piper_ilp.files import atomic_write_text

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "Option",
    "Node",
    "Edge",
    "Instance",
    "load_instance",
    "instance_from_dict",
    "instance_to_dict",
    "save_instance",
    "parse_size",
    "parse_count",
]


@dataclass(frozen=True)
class Option:
    """One way to run a node on a t-device group (a "TMPC").

    Attributes mirror the JSON fields: ``p`` = timePerSample, ``w`` = parameterSize,
    ``a`` = memoryUsageA, ``b`` = memoryUsageB, ``sfw`` = syncTimeFw keyed by the
    predecessor's id, ``sbw`` = syncTimeBw keyed by the successor's id.
    """

    id: str
    p: float
    w: float
    a: float
    b: float
    sfw: Mapping[int, float]
    sbw: Mapping[int, float]


@dataclass(frozen=True)
class Node:
    """A layer: its user-given ``id``, optional ``name`` and options per t."""

    id: int
    name: str | None
    options: Mapping[int, tuple[Option, ...]]

    def option(self, t: int, option_id: str) -> Option | None:
        """The option named ``option_id`` under degree ``t``, or None."""
        for opt in self.options.get(t, ()):
            if opt.id == option_id:
                return opt
        return None


@dataclass(frozen=True)
class Edge:
    """A data dependency ``src -> dst`` carrying ``c`` bytes per sample."""

    src: int
    dst: int
    c: float


@dataclass(frozen=True)
class Instance:
    """A validated Piper instance.

    ``nodes`` keep the input order; ids are the user's own everywhere.
    ``K`` maxDevices, ``M`` maxMemoryPerDevice, ``B`` bandwidth, ``N`` mbsInBatch.
    ``source`` names where it came from (a file path or a description) for messages.
    ``warnings`` holds non-fatal remarks found when loading.
    """

    K: int
    M: float
    B: float
    N: int
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    source: str = "<instance>"
    warnings: tuple[str, ...] = ()
    _cache: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    def fingerprint(self) -> str:
        """A short hash of the model itself (nodes, options, edges), without the settings
        K, M, N, B and the source: two loads of the same profile share it."""
        import hashlib

        data = instance_to_dict(self)
        for key in ("maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch"):
            data.pop(key, None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    # ---- derived views (computed once, cached) ----
    @property
    def node_ids(self) -> list[int]:
        return [n.id for n in self.nodes]

    @property
    def node(self) -> dict[int, Node]:
        """Node by id."""
        if "node" not in self._cache:
            self._cache["node"] = {n.id: n for n in self.nodes}
        return self._cache["node"]

    @property
    def graph(self) -> nx.DiGraph:
        """The layer graph as a networkx DiGraph (edge attribute ``c``). Do not mutate."""
        if "graph" not in self._cache:
            import networkx as nx  # loads on first use: the CLI's start-up does not need it

            g = nx.DiGraph()
            g.add_nodes_from(self.node_ids)
            g.add_edges_from((e.src, e.dst, {"c": e.c}) for e in self.edges)
            self._cache["graph"] = g
        return self._cache["graph"]

    @property
    def in_edges(self) -> dict[int, list[tuple[int, float]]]:
        """For each node id v: the list of (u, c(u, v)) over its incoming edges."""
        if "in_edges" not in self._cache:
            ins: dict[int, list[tuple[int, float]]] = {n.id: [] for n in self.nodes}
            for e in self.edges:
                ins[e.dst].append((e.src, e.c))
            self._cache["in_edges"] = ins
        return self._cache["in_edges"]

    @property
    def out_edges(self) -> dict[int, list[tuple[int, float]]]:
        """For each node id v: the list of (x, c(v, x)) over its outgoing edges."""
        if "out_edges" not in self._cache:
            outs: dict[int, list[tuple[int, float]]] = {n.id: [] for n in self.nodes}
            for e in self.edges:
                outs[e.src].append((e.dst, e.c))
            self._cache["out_edges"] = outs
        return self._cache["out_edges"]

    @property
    def t_values(self) -> list[int]:
        """All tensor-parallel degrees that some node offers, ascending."""
        return sorted({t for n in self.nodes for t in n.options})

    def with_settings(
        self,
        K: int | None = None,
        M: float | None = None,
        N: int | None = None,
        B: float | None = None,
    ) -> "Instance":
        """A copy with the cluster settings overridden (None keeps the value)."""
        changes: dict[str, Any] = {}
        for name, value, kind in (("K", K, int), ("M", M, float), ("N", N, int), ("B", B, float)):
            if value is None:
                continue
            if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"{self.source}: setting {name} must be an integer >= 1, got {value!r}")
            if kind is float and not (_is_number(value) and math.isfinite(value) and value > 0):
                raise InputError(f"{self.source}: setting {name} must be a finite number > 0, got {value!r}")
            changes[name] = kind(value)
        if not changes:
            return self
        return dataclasses.replace(self, _cache={}, **changes)

    def with_options(self, keep) -> "Instance":
        """A copy keeping only the options for which ``keep(node, t, option)`` is true.

        (node, t) pairs left with no option are dropped; a node may end with none
        at all, which makes every plan infeasible (not an input error).
        """
        nodes = []
        for n in self.nodes:
            opts = {}
            for t, lst in n.options.items():
                kept = tuple(o for o in lst if keep(n, t, o))
                if kept:
                    opts[t] = kept
            nodes.append(Node(n.id, n.name, opts))
        return dataclasses.replace(self, nodes=tuple(nodes), _cache={})


# --------------------------------------------------------------------------------------
# Sizes and counts given on the command line
# --------------------------------------------------------------------------------------

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*(/\s*s)?\s*$")


def parse_size(text: str | float | int, what: str = "size", rate: bool = False) -> float:
    """Parse a byte size (``8GiB``, ``80GB``, ``8e9``) or, with ``rate``, a bandwidth
    (``25GiB/s``, ``25e9``). Binary units (KiB, MiB, GiB, TiB) are powers of 2,
    decimal ones (KB, MB, GB, TB) powers of 10.

    Raises
    ------
    InputError
        When the text is not a positive finite size.

    Examples
    --------
    >>> parse_size("8GiB")
    8589934592.0
    >>> parse_size("25GiB/s", rate=True)
    26843545600.0
    >>> parse_size("80GB")
    80000000000.0
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS or (m.group(3) and not rate):
            hint = " (e.g. 25GiB/s or 2.5e10)" if rate else " (e.g. 8GiB, 80GB or 8e9)"
            raise InputError(f"{what}: cannot read {text!r} as a {'bandwidth' if rate else 'size'}{hint}")
        value = float(m.group(1)) * _UNITS[unit]
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{what}: must be a finite number > 0, got {text!r}")
    return value


def parse_count(text: str | int, what: str) -> int:
    """Parse a positive integer (devices, microbatches)."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(f"{what}: expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise InputError(f"{what}: expected a whole number >= 1, got {text!r}")
    return value


# --------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


def _read_json(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a JSON file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:  # NaN / Infinity literals
        raise InputError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: invalid JSON: nested too deeply") from None


def load_instance(path: str | Path) -> Instance:
    """Read and validate an instance JSON file (cost model sec. 1).

    Parameters
    ----------
    path : str or Path
        The JSON file.

    Returns
    -------
    Instance
        With ``source`` set to ``path``.

    Raises
    ------
    InputError
        With a one-line message naming the file and the node, edge or field at fault.
    """
    return instance_from_dict(_read_json(path), source=str(path))


class _Checker:
    """Field checks that raise InputError with a path-like location."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, msg: str):
        raise InputError(f"{self.source}: {where}: {msg}")

    def number(self, obj: Mapping, key: str, where: str, *, positive: bool = False) -> float:
        if key not in obj:
            self.fail(where, f"missing field '{key}'")
        x = obj[key]
        if not _is_number(x):
            self.fail(f"{where}.{key}", f"expected a number, got {_describe(x)}")
        x = float(x)
        if not math.isfinite(x):
            self.fail(f"{where}.{key}", "must be finite")
        if positive and x <= 0:
            self.fail(f"{where}.{key}", f"must be > 0, got {obj[key]!r}")
        if x < 0:
            self.fail(f"{where}.{key}", f"must be >= 0, got {obj[key]!r}")
        return x

    def integer(self, obj: Mapping, key: str, where: str, *, minimum: int | None = None) -> int:
        if key not in obj:
            self.fail(where, f"missing field '{key}'")
        x = obj[key]
        if not _is_int(x):
            self.fail(f"{where}.{key}", f"expected an integer, got {_describe(x)}")
        if minimum is not None and x < minimum:
            self.fail(f"{where}.{key}", f"must be >= {minimum}, got {x}")
        return x


def _describe(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, str):
        return f"the string {x[:40]!r}"
    if isinstance(x, list):
        return "an array"
    if isinstance(x, dict):
        return "an object"
    return repr(x)


def instance_from_dict(data: Any, source: str = "<instance>") -> Instance:
    """Validate a parsed instance JSON object and build an :class:`Instance`.

    Raises
    ------
    InputError
        On the first problem found, naming ``source`` and the node, edge or field.
    """
    ck = _Checker(source)
    if not isinstance(data, dict):
        ck.fail("top level", f"expected a JSON object, got {_describe(data)}")
    K = ck.integer(data, "maxDevices", "instance", minimum=1)
    M = ck.number(data, "maxMemoryPerDevice", "instance", positive=True)
    B = ck.number(data, "bandwidth", "instance", positive=True)
    if "mbsInBatch" in data and "maxBatchSize" in data and data["mbsInBatch"] != data["maxBatchSize"]:
        ck.fail("instance", "both 'mbsInBatch' and its alias 'maxBatchSize' are given, with different values")
    batch_key = "mbsInBatch" if "mbsInBatch" in data or "maxBatchSize" not in data else "maxBatchSize"
    N = ck.integer(data, batch_key, "instance", minimum=1)

    raw_nodes = data.get("nodes")
    if "nodes" not in data:
        ck.fail("instance", "missing field 'nodes'")
    if not isinstance(raw_nodes, list):
        ck.fail("instance.nodes", f"expected an array, got {_describe(raw_nodes)}")
    if not raw_nodes:
        ck.fail("instance.nodes", "is empty; a model needs at least one node")
    raw_edges = data.get("edges", None)
    if "edges" not in data:
        ck.fail("instance", "missing field 'edges' (use [] for a graph with no edges)")
    if not isinstance(raw_edges, list):
        ck.fail("instance.edges", f"expected an array, got {_describe(raw_edges)}")

    # nodes: ids first, so that edges and sync entries can be checked against them
    ids: list[int] = []
    seen: set[int] = set()
    for i, rn in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        if not isinstance(rn, dict):
            ck.fail(where, f"expected an object, got {_describe(rn)}")
        nid = ck.integer(rn, "id", where)
        if nid in seen:
            ck.fail(f"node {nid}", f"duplicate node id (nodes[{i}])")
        seen.add(nid)
        ids.append(nid)

    # edges
    edges: list[Edge] = []
    pairs: set[tuple[int, int]] = set()
    for j, re_ in enumerate(raw_edges):
        where = f"edges[{j}]"
        if not isinstance(re_, dict):
            ck.fail(where, f"expected an object, got {_describe(re_)}")
        u = ck.integer(re_, "sourceId", where)
        v = ck.integer(re_, "destId", where)
        where = f"edge {u}->{v} (edges[{j}])"
        c = ck.number(re_, "communicationCost", where)
        for end, nid in (("sourceId", u), ("destId", v)):
            if nid not in seen:
                ck.fail(where, f"{end} {nid} is not a node id")
        if u == v:
            ck.fail(where, "self-loop (an edge from a node to itself is a cycle)")
        if (u, v) in pairs:
            ck.fail(where, "duplicate edge")
        pairs.add((u, v))
        edges.append(Edge(u, v, c))

    preds: dict[int, set[int]] = {nid: set() for nid in ids}
    succs: dict[int, set[int]] = {nid: set() for nid in ids}
    for e in edges:
        preds[e.dst].add(e.src)
        succs[e.src].add(e.dst)

    import networkx as nx  # loads on first use: the CLI's start-up does not need it

    g = nx.DiGraph()
    g.add_nodes_from(ids)
    g.add_edges_from(pairs)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}"
        ck.fail("edges", f"the graph has a cycle: {path}")

    warnings: list[str] = []
    nodes: list[Node] = []
    for i, rn in enumerate(raw_nodes):
        nid = rn["id"]
        where = f"node {nid}"
        name = rn.get("name")
        if name is not None and not isinstance(name, str):
            ck.fail(f"{where}.name", f"expected a string, got {_describe(name)}")
        if "TMPCs" not in rn:
            ck.fail(where, "missing field 'TMPCs'")
        tm = rn["TMPCs"]
        if not isinstance(tm, dict):
            ck.fail(f"{where}.TMPCs", f"expected an object keyed by tensor-parallel degree, got {_describe(tm)}")
        if not tm:
            ck.fail(f"{where}.TMPCs", "is empty; every node needs at least one option")
        options: dict[int, tuple[Option, ...]] = {}
        for key, lst in tm.items():
            if not (isinstance(key, str) and re.fullmatch(r"[1-9][0-9]*", key)):
                ck.fail(f"{where}.TMPCs", f"key {key!r} is not a positive integer tensor-parallel degree")
            t = int(key)
            wt = f'{where}.TMPCs["{key}"]'
            if not isinstance(lst, list):
                ck.fail(wt, f"expected an array of options, got {_describe(lst)}")
            if not lst:
                ck.fail(wt, "is empty (omit the key if the node has no option for this t)")
            opts: list[Option] = []
            oids: set[str] = set()
            for k, ro in enumerate(lst):
                wo = f"{wt}[{k}]"
                if not isinstance(ro, dict):
                    ck.fail(wo, f"expected an object, got {_describe(ro)}")
                if "id" not in ro:
                    ck.fail(wo, "missing field 'id'")
                oid = ro["id"]
                if not isinstance(oid, str) or not oid:
                    ck.fail(f"{wo}.id", f"expected a non-empty string, got {_describe(oid)}")
                if oid in oids:
                    ck.fail(wo, f"duplicate option id {oid!r} for t = {t}")
                oids.add(oid)
                wo = f"{wt} option {oid!r}"
                p = ck.number(ro, "timePerSample", wo)
                w = ck.number(ro, "parameterSize", wo)
                a = ck.number(ro, "memoryUsageA", wo)
                b = ck.number(ro, "memoryUsageB", wo)
                sfw = _sync(ck, ro, "syncTimeFw", wo, preds[nid], "incoming edge from")
                sbw = _sync(ck, ro, "syncTimeBw", wo, succs[nid], "outgoing edge to")
                opts.append(Option(oid, p, w, a, b, sfw, sbw))
            options[t] = tuple(opts)
        options = dict(sorted(options.items()))
        if 1 not in options:
            warnings.append(f"{source}: node {nid} has no option for t = 1; it can only sit in stages with t in {sorted(options)}")
        nodes.append(Node(nid, name, options))

    return Instance(K=K, M=M, B=B, N=N, nodes=tuple(nodes), edges=tuple(edges), source=source, warnings=tuple(warnings))


def _sync(ck: _Checker, ro: Mapping, key: str, where: str, expected: set[int], what: str) -> dict[int, float]:
    if key not in ro:
        ck.fail(where, f"missing field '{key}'")
    raw = ro[key]
    if not isinstance(raw, dict):
        ck.fail(f"{where}.{key}", f"expected an object keyed by node id, got {_describe(raw)}")
    out: dict[int, float] = {}
    for k, val in raw.items():
        if not (isinstance(k, str) and re.fullmatch(r"-?[0-9]+", k)):
            ck.fail(f"{where}.{key}", f"key {k!r} is not a node id")
        nid = int(k)
        if nid not in expected:
            ck.fail(f"{where}.{key}", f"entry for {nid}, but there is no {what} node {nid}")
        if nid in out:
            ck.fail(f"{where}.{key}", f"two entries for node {nid}")
        out[nid] = ck.number(raw, k, f"{where}.{key}")
    missing = sorted(expected - out.keys())
    if missing:
        ck.fail(f"{where}.{key}", f"no entry for the {what} node {missing[0]}")
    return out


# --------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------


def instance_to_dict(instance: Instance) -> dict:
    """The instance in the JSON format of sec. 1 (``mbsInBatch`` spelling)."""
    nodes = []
    for n in instance.nodes:
        d: dict[str, Any] = {"id": n.id}
        if n.name is not None:
            d["name"] = n.name
        d["TMPCs"] = {
            str(t): [
                {
                    "id": o.id,
                    "timePerSample": o.p,
                    "parameterSize": o.w,
                    "memoryUsageA": o.a,
                    "memoryUsageB": o.b,
                    "syncTimeFw": {str(k): v for k, v in o.sfw.items()},
                    "syncTimeBw": {str(k): v for k, v in o.sbw.items()},
                }
                for o in opts
            ]
            for t, opts in n.options.items()
        }
        nodes.append(d)
    return {
        "maxDevices": instance.K,
        "maxMemoryPerDevice": instance.M,
        "bandwidth": instance.B,
        "mbsInBatch": instance.N,
        "nodes": nodes,
        "edges": [{"sourceId": e.src, "destId": e.dst, "communicationCost": e.c} for e in instance.edges],
    }


def save_instance(instance: Instance, path: str | Path) -> None:
    """Write the instance as JSON (readable by :func:`load_instance`)."""
    atomic_write_text(path, json.dumps(instance_to_dict(instance), indent=1) + "\n")
