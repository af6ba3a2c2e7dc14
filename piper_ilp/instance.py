"""The Piper planning instance (cost model sec. 1): a profiled layer graph plus the cluster
settings, read and validated once (:func:`load_instance`, :func:`instance_from_dict`) so that
every solver and the evaluator may trust it; the supported ranges; and the reading of K, M,
N, B given on the command line.

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
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from piper_ilp.errors import InputError
from piper_ilp.files import atomic_write_text
from piper_ilp.jsonfile import (  # noqa: F401 (MAX_FILE_BYTES, MAX_JSON_DEPTH: limits listed here too)
    CANONICAL_INT,
    CANONICAL_POSITIVE,
    MAX_FILE_BYTES,
    MAX_JSON_DEPTH,
    VALUE_MAX,
    VALUE_MIN,
    VALUE_RANGE_TEXT,
    describe_value,
    display_path,
    is_int,
    is_number,
    is_text,
    read_json,
    short_repr,
)

if TYPE_CHECKING:  # networkx loads on first use: the CLI's start-up does not need it
    import networkx as nx

__all__ = [
    "Option",
    "Node",
    "Edge",
    "Instance",
    "load_instance",
    "instance_from_dict",
    "instance_to_dict",
    "instance_dict",
    "option_dict",
    "save_instance",
    "parse_size",
    "bare_size_note",
    "human_bytes",
    "parse_setting",
    "read_setting",
    "check_setting",
    "SETTING_OPTIONS",
    "parse_count",
    "display_path",
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_DEVICES",
    "MAX_BATCH",
    "MAX_NODES",
    "MAX_EDGES",
    "ID_MIN",
    "ID_MAX",
    "VALUE_MIN",
    "VALUE_MAX",
]


# --------------------------------------------------------------------------------------
# Supported ranges (README "Limits"): every finite non-negative input inside them is
# handled exactly; anything outside is refused at load time with one line.
# --------------------------------------------------------------------------------------

#: K (maxDevices) and every tensor-parallel degree t lie in [1, MAX_DEVICES].
MAX_DEVICES = 2**20
#: N (mbsInBatch) lies in [1, MAX_BATCH]; with d <= K, every product d * N, t * d, K * N
#: of two counts is at most 2**60: exact in a 64-bit integer and in a float.
MAX_BATCH = 2**40
#: Node ids are 64-bit signed integers.
ID_MIN, ID_MAX = -(2**63), 2**63 - 1
#: Most nodes and edges in one instance.
MAX_NODES = 2**20
MAX_EDGES = 2**24

_SETTING_RANGE = f"within [{VALUE_MIN:g}, {VALUE_MAX:g}]"


@dataclass(frozen=True)
class Option:
    """One way to run a node on a t-device group (a "TMPC", cost model sec. 1).

    Attributes
    ----------
    id : str
        The option's name, unique within one (node, t) (``"vanilla"``,
        ``"activation recomp"``).
    p : float
        ``timePerSample``: forward + backward seconds per sample.
    w : float
        ``parameterSize``: weight bytes per device (resynced under data parallelism).
    a, b : float
        ``memoryUsageA``, ``memoryUsageB``: memory = a * y + b bytes.
    sfw : mapping
        ``syncTimeFw``: extra bytes per incoming edge, keyed by the predecessor's id.
    sbw : mapping
        ``syncTimeBw``: extra bytes per outgoing edge, keyed by the successor's id.
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
    """A layer of the model.

    Attributes
    ----------
    id : int
        The user's own id.
    name : str or None
    options : mapping
        ``{t: tuple of Option}``, t ascending; a t with no option is absent.
    """

    id: int
    name: str | None
    options: Mapping[int, tuple[Option, ...]]

    def option(self, t: int, option_id: str) -> Option | None:
        """The option named ``option_id`` under degree ``t``.

        Parameters
        ----------
        t : int
        option_id : str

        Returns
        -------
        Option or None
            None when the node has no such option.
        """
        for opt in self.options.get(t, ()):
            if opt.id == option_id:
                return opt
        return None


@dataclass(frozen=True)
class Edge:
    """A data dependency of the model.

    Attributes
    ----------
    src, dst : int
        The ids of its source and destination nodes.
    c : float
        Bytes per sample (``communicationCost``).
    """

    src: int
    dst: int
    c: float


@dataclass(frozen=True)
class Instance:
    """A Piper instance (cost model sec. 1), immutable.

    Built by :func:`load_instance` or :func:`instance_from_dict`, which validate it; the
    constructor itself checks nothing.

    Attributes
    ----------
    K : int
        ``maxDevices``.
    M : float
        ``maxMemoryPerDevice``, bytes.
    B : float
        ``bandwidth``, bytes/s.
    N : int
        ``mbsInBatch``, microbatches per batch.
    nodes : tuple of Node
        In the input's order; ids are the user's own everywhere.
    edges : tuple of Edge
    source : str
        Where it came from (a file path or a description), for messages.
    warnings : tuple of str
        Non-fatal remarks found when loading.
    """

    K: int
    M: float
    B: float
    N: int
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    source: str = "<instance>"
    warnings: tuple[str, ...] = ()
    # derived views, built once in __post_init__ (never mutated afterwards)
    _node: dict = field(init=False, repr=False, compare=False)
    _graph: "nx.DiGraph | None" = field(init=False, repr=False, compare=False)  # built on first use
    _in_edges: dict = field(init=False, repr=False, compare=False)
    _out_edges: dict = field(init=False, repr=False, compare=False)
    _t_values: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        node = {n.id: n for n in self.nodes}
        ins: dict[int, list[tuple[int, float]]] = {n.id: [] for n in self.nodes}
        outs: dict[int, list[tuple[int, float]]] = {n.id: [] for n in self.nodes}
        for e in self.edges:
            ins.setdefault(e.dst, []).append((e.src, e.c))
            outs.setdefault(e.src, []).append((e.dst, e.c))
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_graph", None)
        object.__setattr__(self, "_in_edges", ins)
        object.__setattr__(self, "_out_edges", outs)
        object.__setattr__(
            self, "_t_values", tuple(sorted({t for n in self.nodes for t in n.options}))
        )

    def fingerprint(self) -> str:
        """A short hash of the model itself: nodes (names included), options and edges,
        without the settings K, M, N, B and the source, so that two loads of the same
        profile share it (a plan's metadata records it).

        Returns
        -------
        str
            ``"sha256:"`` and 16 hex digits.
        """
        import hashlib

        data = instance_to_dict(self)
        for key in ("maxDevices", "maxMemoryPerDevice", "bandwidth", "mbsInBatch"):
            data.pop(key, None)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    # ---- derived views (built once: at construction, the graph on first use) ----
    @property
    def node_ids(self) -> list[int]:
        """The node ids, in the input's order (a new list)."""
        return [n.id for n in self.nodes]

    @property
    def node(self) -> dict[int, Node]:
        """Node by id. Do not mutate."""
        return self._node

    @property
    def graph(self) -> "nx.DiGraph":
        """The layer graph as a networkx DiGraph (edge attribute ``c``). Do not mutate.

        Built on first use, so that networkx loads only for the code that needs it (the
        MILP, the generators, the baselines): the DP and the evaluator work on
        :attr:`in_edges` / :attr:`out_edges`.
        """
        g = self._graph
        if g is None:
            import networkx as nx

            g = nx.DiGraph()
            g.add_nodes_from(self._node)
            g.add_edges_from((e.src, e.dst, {"c": e.c}) for e in self.edges)
            object.__setattr__(self, "_graph", g)
        return g

    @property
    def in_edges(self) -> dict[int, list[tuple[int, float]]]:
        """For each node id v: the list of (u, c(u, v)) over its incoming edges. Do not mutate."""
        return self._in_edges

    @property
    def out_edges(self) -> dict[int, list[tuple[int, float]]]:
        """For each node id v: the list of (x, c(v, x)) over its outgoing edges. Do not mutate."""
        return self._out_edges

    @property
    def t_values(self) -> list[int]:
        """All tensor-parallel degrees that some node offers, ascending."""
        return list(self._t_values)

    def with_settings(
        self,
        K: int | None = None,
        M: float | None = None,
        N: int | None = None,
        B: float | None = None,
    ) -> "Instance":
        """A copy with the cluster settings overridden.

        Parameters
        ----------
        K, M, N, B : optional
            The new values; None keeps the instance's.

        Returns
        -------
        Instance
            ``self`` when nothing is given.

        Raises
        ------
        InputError
            When a value is outside its supported range (K in [1, MAX_DEVICES], N in
            [1, MAX_BATCH], M and B in [VALUE_MIN, VALUE_MAX]); one line naming it.
        """
        changes: dict[str, Any] = {}
        for name, value in (("K", K), ("M", M), ("N", N), ("B", B)):
            if value is not None:
                where = f"{display_path(self.source)}: setting {name} ({_SETTING_FIELDS[name]})"
                changes[name] = check_setting(name, value, where)
        if not changes:
            return self
        return dataclasses.replace(self, **changes)

    def with_options(self, keep) -> "Instance":
        """A copy keeping only some options (the restrictions' ablations).

        Parameters
        ----------
        keep : callable
            ``keep(node, t, option) -> bool``.

        Returns
        -------
        Instance
            (node, t) pairs left with no option are dropped; a node may end with none at
            all, which makes every plan infeasible (not an input error). The warnings are
            kept as they were.
        """
        nodes = []
        for n in self.nodes:
            opts = {}
            for t, lst in n.options.items():
                kept = tuple(o for o in lst if keep(n, t, o))
                if kept:
                    opts[t] = kept
            nodes.append(Node(n.id, n.name, opts))
        return dataclasses.replace(self, nodes=tuple(nodes))


# --------------------------------------------------------------------------------------
# Sizes and counts given on the command line
# --------------------------------------------------------------------------------------

#: Prefixes of a size unit (any case): decimal ones powers of 10, binary ones powers of 2.
_PREFIXES = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*(/\s*s)?\s*$")
_UNIT_RE = re.compile(
    r"^(?P<prefix>[kmgtKMGT]i?)?(?:(?P<bits>[bB][iI][tT][sS]?)|(?P<bytes>B)|(?P<ambiguous>b))$"
)


def parse_size(text: str | float | int, what: str = "size", rate: bool = False) -> float:
    """Parse a byte size (``8GiB``, ``80GB``, ``8e9``) or, with ``rate``, a bandwidth
    (``25GiB/s``, ``25e9``). Binary units (KiB, MiB, GiB, TiB) are powers of 2,
    decimal ones (KB, MB, GB, TB) powers of 10; the prefix may be in any case. A capital
    ``B`` is bytes; bits are spelled ``bit`` (``25Gbit/s`` = 3.125e9 bytes/s). A lower-case
    ``b`` alone (``25Gb/s``, ``8gb``) is refused: it means bits by convention but bytes
    to many, so it is never guessed; so is a lower-case ``m`` alone (``600mB``: milli).
    A bare number is bytes (:func:`bare_size_note` says when that looks like a mistake).

    Parameters
    ----------
    text : str, float or int
        The size; a number is taken as bytes (bytes/s).
    what : str
        The option or field, named in messages.
    rate : bool
        A bandwidth: ``/s`` is allowed after the unit.

    Returns
    -------
    float
        Bytes (bytes/s). Not range-checked (:func:`check_setting` does that).

    Raises
    ------
    InputError
        When the text is not a positive finite size, or its unit is a lower-case ``b``
        (one line saying what to write instead).

    Examples
    --------
    >>> parse_size("8GiB")
    8589934592.0
    >>> parse_size("25GiB/s", rate=True)
    26843545600.0
    >>> parse_size("80GB")
    80000000000.0
    >>> parse_size("25Gbit/s", rate=True)
    3125000000.0
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text) if abs(text) < 2**1024 else math.inf  # a huge int: float() raises
    else:
        m = _SIZE_RE.match(str(text))
        u = _UNIT_RE.match(m.group(2)) if m and m.group(2) else None
        if not m or (m.group(2) and not u) or (m.group(3) and not rate):
            hint = " (e.g. 25GiB/s, 25Gbit/s or 2.5e10)" if rate else " (e.g. 8GiB, 80GB or 8e9)"
            raise InputError(
                f"{what}: cannot read {text!r} as a {'bandwidth' if rate else 'size'}{hint}"
            )
        prefix = (u.group("prefix") or "") if u else ""
        per_s = "/s" if m.group(3) else ""
        number = m.group(1)
        letter = "k" if prefix[:1] == "k" else prefix[:1].upper()
        decimal = letter + "B" + per_s
        binary = (prefix[:1].upper() + "iB" + per_s) if prefix else ""
        bits = f"{number}{letter}{prefix[1:]}bit{per_s}"
        bytes_forms = " or ".join(
            f"{number}{form}"
            for form in ((binary,) if prefix.endswith("i") else (decimal, binary))
            if form
        )
        if u is not None and u.group("ambiguous"):
            raise InputError(
                f"{what}: {text!r} is ambiguous (a lower-case b means bits, but is often meant as "
                f"bytes); write {bytes_forms} for bytes or {bits} for bits"
            )
        if prefix == "m":
            mega = bits if u.group("bits") else bytes_forms
            raise InputError(f"{what}: {text!r}: a lower-case m means milli; write {mega} for mega")
        value = float(m.group(1)) * _PREFIXES[prefix.lower()]
        if u is not None and u.group("bits"):
            value /= 8
    if not (math.isfinite(value) and value > 0):
        shown = (
            repr(text)
            if len(repr(text)) <= 40
            else f"{repr(text)[:20]}... ({len(repr(text))} chars)"
        )
        raise InputError(f"{what}: must be a finite number > 0, got {shown}")
    return value


_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(x: float, raw: str | None = None) -> str:
    """A size as messages print it: the raw number of bytes (``raw``, default ``x`` with 6
    significant digits) and, from 1 KiB on, the same in a binary unit beside it.

    Examples
    --------
    >>> human_bytes(8.0), human_bytes(8 * 2**30), human_bytes(2e8, repr(2e8))
    ('8 bytes', '8.58993e+09 bytes (8 GiB)', '200000000.0 bytes (190.7 MiB)')
    """
    text = f"{raw if raw is not None else format(x, '.6g')} bytes"
    if not (math.isfinite(x) and abs(x) >= 1024):
        return text
    i = 0
    while i + 1 < len(_BINARY_UNITS) and abs(x) >= 1024.0 ** (i + 2):
        i += 1
    return f"{text} ({float(format(x / 1024.0 ** (i + 1), '.4g')):g} {_BINARY_UNITS[i]})"


#: Below these a bare number (bytes, bytes/s) is implausible for a real device's memory or
#: link: :func:`bare_size_note` then names the unit forms.
PLAUSIBLE_MEMORY = 2.0**20
PLAUSIBLE_BANDWIDTH = 1e6


def bare_size_note(option: str, texts: Iterable[Any], rate: bool = False) -> str | None:
    """A note (not an error) when one of ``texts``, given for ``option``, is a bare number
    (no unit, so bytes or bytes/s) below :data:`PLAUSIBLE_MEMORY` (a size) or
    :data:`PLAUSIBLE_BANDWIDTH` (a ``rate``): it names the unit forms. At most one note
    for all of ``texts``; None when every text has a unit, or is large enough, or cannot
    be read or is out of range (errors report those).

    Examples
    --------
    >>> bare_size_note("--memory", ["8"])
    '--memory 8 is 8 bytes (a bare number is bytes); for a device write a unit: 8GiB or 8GB'
    >>> bare_size_note("--memory", ["8GiB", "4e9"]) is None
    True
    """
    for text in texts:
        m = _SIZE_RE.match(str(text))
        if not m or m.group(2):
            continue
        value = float(m.group(1))
        if not VALUE_MIN <= value < (PLAUSIBLE_BANDWIDTH if rate else PLAUSIBLE_MEMORY):
            continue  # plausible, or out of range (an error says so)
        number = m.group(1)
        if rate:
            return (
                f"{option} {text} is {number} bytes/s (a bare number is bytes/s); for a link "
                f"write a unit: {number}GB/s, {number}GiB/s or {number}Gbit/s"
            )
        return (
            f"{option} {text} is {number} bytes (a bare number is bytes); for a device write a "
            f"unit: {number}GiB or {number}GB"
        )
    return None


def check_setting(name: str, value: Any, where: str) -> int | float:
    """A setting checked against its supported range: K an integer within
    [1, MAX_DEVICES], N within [1, MAX_BATCH], M and B numbers within
    [VALUE_MIN, VALUE_MAX].

    The one check of a setting given apart from an instance file (:meth:`Instance.with_settings`,
    the command-line options, every point of a sweep).

    Parameters
    ----------
    name : str
        ``"K"``, ``"M"``, ``"N"`` or ``"B"``.
    value : any
        The value (no text: :func:`read_setting` reads that).
    where : str
        Begins the one-line message: a file's field, or the option that gave the value
        (``--devices (K)``).

    Returns
    -------
    int or float
        An int for K and N, a float for M and B.

    Raises
    ------
    InputError
        When the value is outside its range or of the wrong type (a bool is no number).
    ValueError
        ``name`` is not one of the four (a bug in the caller).

    Examples
    --------
    >>> check_setting("K", 2_000_000, "--devices (K)")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --devices (K) must be an integer within [1, 1048576], got 2000000
    """
    if name in ("K", "N"):
        hi = MAX_DEVICES if name == "K" else MAX_BATCH
        if not is_int(value) or not 1 <= value <= hi:
            raise InputError(
                f"{where} must be an integer within [1, {hi}], got {short_repr(value)}"
            )
        return int(value)
    if name not in ("M", "B"):
        raise ValueError(f"unknown setting {name!r}")
    x = _as_float(value)
    if x is None or not VALUE_MIN <= x <= VALUE_MAX:
        raise InputError(f"{where} must be a number {_SETTING_RANGE}, got {short_repr(value)}")
    return x


#: The command-line option of each setting.
SETTING_OPTIONS = {"K": "--devices", "M": "--memory", "N": "--batch", "B": "--bandwidth"}


def read_setting(name: str, text: str | int | float, option: str | None = None) -> int | float:
    """A setting given on the command line (``--devices 8``, ``--memory 8GiB``), read with
    :func:`parse_count` (K, N) or :func:`parse_size` (M; B as a rate) but not range-checked
    (a :class:`piper_ilp.settings.Settings` holding it checks that, once).

    Parameters
    ----------
    name : str
        ``"K"``, ``"M"``, ``"N"`` or ``"B"``.
    text : str, int or float
        The value as given.
    option : str, optional
        Named in messages; default the setting's own option, :data:`SETTING_OPTIONS`.

    Returns
    -------
    int or float
        An int for K and N, bytes (M) or bytes/s (B) as a float.

    Raises
    ------
    InputError
        The text is not a whole number >= 1 (K, N) or a size (M, B).

    Examples
    --------
    >>> read_setting("B", "25Gbit/s")
    3125000000.0
    >>> read_setting("K", "2000000")  # above MAX_DEVICES: the range is checked later
    2000000
    """
    option = option or SETTING_OPTIONS[name]
    if name in ("K", "N"):
        return parse_count(text, option)
    return parse_size(text, option, rate=name == "B")


def parse_setting(name: str, text: str | int | float, option: str | None = None) -> int | float:
    """A setting given on the command line, read by :func:`read_setting` and range-checked
    by :func:`check_setting`, before any work.

    Parameters
    ----------
    name, text, option
        As in :func:`read_setting`; ``option`` is named in every message.

    Returns
    -------
    int or float
        As from :func:`check_setting`.

    Raises
    ------
    InputError
        Unreadable, or outside the setting's range.

    Examples
    --------
    >>> parse_setting("B", "25Gbit/s")
    3125000000.0
    """
    option = option or SETTING_OPTIONS[name]
    return check_setting(name, read_setting(name, text, option), f"{option} ({name})")


def parse_count(text: str | int, what: str) -> int:
    """Parse a whole number >= 1 given as text (devices, microbatches), not range-checked.

    Parameters
    ----------
    text : str or int
        As Python's ``int()`` reads its text (surrounding spaces, a sign and ``_``
        between digits allowed).
    what : str
        The option, named in messages.

    Returns
    -------
    int

    Raises
    ------
    InputError
        Not a whole number, or below 1.

    Examples
    --------
    >>> parse_count(" 8 ", "--devices")
    8
    >>> parse_count("2.5", "--devices")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --devices: expected a whole number >= 1, got '2.5'
    """
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(f"{what}: expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise InputError(f"{what}: expected a whole number >= 1, got {text!r}")
    return value


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
    return instance_from_dict(read_json(path), source=str(path))


_SETTING_FIELDS = {
    "K": "maxDevices",
    "M": "maxMemoryPerDevice",
    "N": "mbsInBatch",
    "B": "bandwidth",
}


def _as_float(x: Any) -> float | None:
    """``x`` as a finite float, or None when it is not a number or not finite."""
    if not is_number(x):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


class _Checker:
    """Field checks that raise InputError with a path-like location."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, msg: str):
        raise InputError(f"{display_path(self.source)}: {where}: {msg}")

    def object(self, value: Any, where: str) -> Mapping:
        """``value`` itself, which must be a JSON object."""
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {describe_value(value)}")
        return value

    def array(self, data: Mapping, key: str, missing: str) -> list:
        """The JSON array ``data[key]`` of the instance; ``missing`` says what is wrong
        without it."""
        if key not in data:
            self.fail("instance", missing)
        raw = data[key]
        if not isinstance(raw, list):
            self.fail(f"instance.{key}", f"expected an array, got {describe_value(raw)}")
        return raw

    def number(self, obj: Mapping, key: str, where: str, *, setting: bool = False) -> float:
        """A size or time: 0 or within [VALUE_MIN, VALUE_MAX]; with ``setting`` (M, B)
        within [VALUE_MIN, VALUE_MAX]. ``-0.0`` reads as 0."""
        if key not in obj:
            self.fail(where, f"missing field '{key}'")
        x = obj[key]
        if not is_number(x):
            self.fail(f"{where}.{key}", f"expected a number, got {describe_value(x)}")
        f = _as_float(x)
        if f is None:
            rng = _SETTING_RANGE if setting else VALUE_RANGE_TEXT
            self.fail(
                f"{where}.{key}", f"{short_repr(x)} must be finite; the supported range is {rng}"
            )
        if f < 0 or (setting and f == 0):
            self.fail(
                f"{where}.{key}", f"must be {'> 0' if setting else '>= 0'}, got {short_repr(x)}"
            )
        if (setting or f != 0) and not VALUE_MIN <= f <= VALUE_MAX:
            rng = _SETTING_RANGE if setting else VALUE_RANGE_TEXT
            self.fail(f"{where}.{key}", f"{short_repr(x)} is outside the supported range: {rng}")
        return f + 0.0

    def integer(
        self, obj: Mapping, key: str, where: str, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        """An integer; with bounds, within [lo, hi]."""
        if key not in obj:
            self.fail(where, f"missing field '{key}'")
        x = obj[key]
        if not is_int(x):
            self.fail(f"{where}.{key}", f"expected an integer, got {describe_value(x)}")
        rng = f" (supported range [{lo}, {hi}])" if lo is not None and hi is not None else ""
        if lo is not None and x < lo:
            self.fail(f"{where}.{key}", f"must be >= {lo}{rng}, got {short_repr(x)}")
        if hi is not None and x > hi:
            self.fail(
                f"{where}.{key}", f"{short_repr(x)} is outside the supported range [{lo}, {hi}]"
            )
        return x


def topological_order(succs: Mapping[Any, Iterable[Any]]) -> list:
    """The topological order that follows the keys' order where it can.

    Kahn's algorithm: of the nodes whose predecessors are all placed, the first in the
    keys' order comes next (the lexicographically least topological order by key
    position).

    Parameters
    ----------
    succs : mapping
        Each node's successors; every node (successors included) must be a key.

    Returns
    -------
    list
        The nodes in that order; nodes on a cycle or after one are left out.

    Raises
    ------
    KeyError
        A successor that is not a key.

    Examples
    --------
    >>> topological_order({"b": ["a"], "c": [], "a": []})
    ['b', 'c', 'a']
    """
    import heapq

    keys = list(succs)
    pos = {v: i for i, v in enumerate(keys)}
    left = dict.fromkeys(keys, 0)
    for ws in succs.values():
        for w in ws:
            left[w] += 1
    ready = [pos[v] for v in keys if left[v] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = keys[heapq.heappop(ready)]
        order.append(v)
        for w in succs[v]:
            left[w] -= 1
            if left[w] == 0:
                heapq.heappush(ready, pos[w])
    return order


def nodes_on_cycles(succs: Mapping[Any, Iterable[Any]]) -> list:
    """The nodes that :func:`topological_order` cannot place.

    Parameters
    ----------
    succs : mapping
        As in :func:`topological_order` (which raises the same KeyError).

    Returns
    -------
    list
        Empty exactly when the graph is acyclic; otherwise the nodes on a cycle or after
        one, in the keys' order.

    Examples
    --------
    >>> nodes_on_cycles({1: {2}, 2: set()})
    []
    >>> nodes_on_cycles({1: {2}, 2: {3}, 3: {2}})
    [2, 3]
    """
    placed = set(topological_order(succs))
    return [v for v in succs if v not in placed]


def instance_from_dict(data: Any, source: str = "<instance>") -> Instance:
    """Validate a parsed instance JSON object and build an :class:`Instance` (cost model
    sec. 1).

    Every rule of sec. 1 is checked, and every number against the supported ranges
    (:data:`MAX_DEVICES`, :data:`MAX_BATCH`, :data:`MAX_NODES`, :data:`MAX_EDGES`, node ids
    within [:data:`ID_MIN`, :data:`ID_MAX`], sizes and times 0 or within
    [:data:`VALUE_MIN`, :data:`VALUE_MAX`]). A node with no option for t = 1 is allowed,
    with a warning in :attr:`Instance.warnings`.

    Parameters
    ----------
    data : any
        The parsed JSON (:func:`piper_ilp.jsonfile.read_json`).
    source : str
        The file or a description, named in messages and kept as
        :attr:`Instance.source`.

    Returns
    -------
    Instance

    Raises
    ------
    InputError
        On the first problem found, one line naming ``source`` and the node, edge or
        field: a missing or mistyped field, a number out of range, a duplicate node id or
        edge, an edge to an unknown node, a self-loop or a cycle (named), a t key that is
        not a canonical positive integer, a duplicate option id, a sync entry for a
        non-edge or a missing one.

    Examples
    --------
    >>> inst = instance_from_dict({
    ...     "maxDevices": 4, "maxMemoryPerDevice": 1e9, "bandwidth": 1e9, "mbsInBatch": 4,
    ...     "nodes": [
    ...         {"id": 0, "TMPCs": {"1": [option_dict("vanilla", 1.0, 0, 0, 0, sbw={"1": 0})]}},
    ...         {"id": 1, "TMPCs": {"2": [option_dict("vanilla", 0.5, 0, 0, 0, sfw={"0": 0})]}},
    ...     ],
    ...     "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 1e6}]}, "m.json")
    >>> inst.t_values, inst.in_edges[1]
    ([1, 2], [(0, 1000000.0)])
    >>> inst.warnings
    ('m.json: node 1 has no option for t = 1; it can only sit in stages with t in [2]',)
    """
    ck = _Checker(source)
    if not isinstance(data, dict):
        ck.fail("top level", f"expected a JSON object, got {describe_value(data)}")
    K = ck.integer(data, "maxDevices", "instance", lo=1, hi=MAX_DEVICES)
    M = ck.number(data, "maxMemoryPerDevice", "instance", setting=True)
    B = ck.number(data, "bandwidth", "instance", setting=True)
    if (
        "mbsInBatch" in data
        and "maxBatchSize" in data
        and data["mbsInBatch"] != data["maxBatchSize"]
    ):
        ck.fail(
            "instance",
            "both 'mbsInBatch' and its alias 'maxBatchSize' are given, with different values",
        )
    batch_key = (
        "mbsInBatch" if "mbsInBatch" in data or "maxBatchSize" not in data else "maxBatchSize"
    )
    N = ck.integer(data, batch_key, "instance", lo=1, hi=MAX_BATCH)

    raw_nodes = ck.array(data, "nodes", "missing field 'nodes'")
    if not raw_nodes:
        ck.fail("instance.nodes", "is empty; a model needs at least one node")
    raw_edges = ck.array(data, "edges", "missing field 'edges' (use [] for a graph with no edges)")
    if len(raw_nodes) > MAX_NODES:
        ck.fail(
            "instance.nodes", f"has {len(raw_nodes)} nodes, more than the supported {MAX_NODES}"
        )
    if len(raw_edges) > MAX_EDGES:
        ck.fail(
            "instance.edges", f"has {len(raw_edges)} edges, more than the supported {MAX_EDGES}"
        )

    # nodes: ids first, so that edges and sync entries can be checked against them
    ids: list[int] = []
    seen: set[int] = set()
    for i, rn in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        nid = ck.integer(ck.object(rn, where), "id", where, lo=ID_MIN, hi=ID_MAX)
        if nid in seen:
            ck.fail(f"node {nid}", f"duplicate node id (nodes[{i}])")
        seen.add(nid)
        ids.append(nid)

    # edges
    edges: list[Edge] = []
    pairs: set[tuple[int, int]] = set()
    for j, re_ in enumerate(raw_edges):
        where = f"edges[{j}]"
        u = ck.integer(ck.object(re_, where), "sourceId", where)
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

    if nodes_on_cycles(succs):
        import networkx as nx  # only to name a cycle: acyclic graphs load without it

        g = nx.DiGraph()
        g.add_nodes_from(ids)
        g.add_edges_from(pairs)
        cycle = nx.find_cycle(g)
        path = " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}"
        ck.fail("edges", f"the graph has a cycle: {path}")

    warnings: list[str] = []
    nodes: list[Node] = []
    for rn in raw_nodes:
        nid = rn["id"]
        where = f"node {nid}"
        name = rn.get("name")
        if name is not None and not is_text(name):
            ck.fail(
                f"{where}.name",
                f"expected a string of Unicode characters, got {describe_value(name)}",
            )
        if "TMPCs" not in rn:
            ck.fail(where, "missing field 'TMPCs'")
        tm = rn["TMPCs"]
        if not isinstance(tm, dict):
            ck.fail(
                f"{where}.TMPCs",
                f"expected an object keyed by tensor-parallel degree, got {describe_value(tm)}",
            )
        if not tm:
            ck.fail(f"{where}.TMPCs", "is empty; every node needs at least one option")
        options: dict[int, tuple[Option, ...]] = {}
        for key, lst in tm.items():
            if not (isinstance(key, str) and CANONICAL_POSITIVE.fullmatch(key)):
                ck.fail(
                    f"{where}.TMPCs",
                    f"key {short_repr(key)} is not a positive integer tensor-parallel degree "
                    "(written without sign, spaces or leading zeros)",
                )
            if len(key) > 7 or int(key) > MAX_DEVICES:
                ck.fail(
                    f"{where}.TMPCs",
                    f"t = {short_repr(key)} is outside the supported range [1, {MAX_DEVICES}]",
                )
            t = int(key)
            wt = f'{where}.TMPCs["{key}"]'
            if not isinstance(lst, list):
                ck.fail(wt, f"expected an array of options, got {describe_value(lst)}")
            if not lst:
                ck.fail(wt, "is empty (omit the key if the node has no option for this t)")
            options[t] = _options_at(ck, wt, t, lst, preds[nid], succs[nid])
        options = dict(sorted(options.items()))
        if 1 not in options:
            warnings.append(
                f"{display_path(source)}: node {nid} has no option for t = 1; it can only sit in "
                f"stages with t in {sorted(options)}"
            )
        nodes.append(Node(nid, name, options))

    return Instance(
        K=K,
        M=M,
        B=B,
        N=N,
        nodes=tuple(nodes),
        edges=tuple(edges),
        source=source,
        warnings=tuple(warnings),
    )


def _options_at(
    ck: _Checker, wt: str, t: int, lst: list, preds: set[int], succs: set[int]
) -> tuple[Option, ...]:
    """A node's options at tensor-parallel degree ``t`` (the array ``lst``, named ``wt`` in
    messages), checked: ids non-empty and distinct, numbers in range, sync entries for
    exactly the node's incoming (``preds``) and outgoing (``succs``) edges."""
    opts: list[Option] = []
    oids: set[str] = set()
    for k, ro in enumerate(lst):
        wo = f"{wt}[{k}]"
        if "id" not in ck.object(ro, wo):
            ck.fail(wo, "missing field 'id'")
        oid = ro["id"]
        if not is_text(oid) or not oid:
            ck.fail(
                f"{wo}.id",
                f"expected a non-empty string of Unicode characters, got {describe_value(oid)}",
            )
        if oid in oids:
            ck.fail(wo, f"duplicate option id {oid!r} for t = {t}")
        oids.add(oid)
        wo = f"{wt} option {oid!r}"
        p = ck.number(ro, "timePerSample", wo)
        w = ck.number(ro, "parameterSize", wo)
        a = ck.number(ro, "memoryUsageA", wo)
        b = ck.number(ro, "memoryUsageB", wo)
        sfw = _sync(ck, ro, "syncTimeFw", wo, preds, "incoming edge from")
        sbw = _sync(ck, ro, "syncTimeBw", wo, succs, "outgoing edge to")
        opts.append(Option(oid, p, w, a, b, sfw, sbw))
    return tuple(opts)


def _sync(
    ck: _Checker, ro: Mapping, key: str, where: str, expected: set[int], what: str
) -> dict[int, float]:
    if key not in ro:
        ck.fail(where, f"missing field '{key}'")
    raw = ro[key]
    if not isinstance(raw, dict):
        ck.fail(f"{where}.{key}", f"expected an object keyed by node id, got {describe_value(raw)}")
    out: dict[int, float] = {}
    for k in raw:
        if not (isinstance(k, str) and CANONICAL_INT.fullmatch(k)):
            ck.fail(
                f"{where}.{key}",
                f"key {short_repr(k)} is not a node id (an integer without '+', spaces or leading "
                "zeros)",
            )
        nid = int(k) if len(k) <= 20 else None
        if nid not in expected:
            ck.fail(f"{where}.{key}", f"entry for {k[:24]}, but there is no {what} node {k[:24]}")
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


def option_dict(
    oid: str,
    p: float,
    w: float,
    a: float,
    b: float,
    sfw: Mapping | None = None,
    sbw: Mapping | None = None,
) -> dict:
    """One option in the JSON form of cost model sec. 1, for building instances in code.

    Parameters
    ----------
    oid : str
        The option id.
    p, w, a, b : float
        timePerSample, parameterSize, memoryUsageA, memoryUsageB.
    sfw, sbw : mapping, optional
        syncTimeFw / syncTimeBw keyed by neighbour; the keys are kept as given (the JSON
        form wants each neighbour's id as a string).

    Returns
    -------
    dict

    Examples
    --------
    >>> option_dict("vanilla", 1.0, 0, 2.0, 0, sfw={"3": 0.5})["syncTimeFw"]
    {'3': 0.5}
    """
    return {
        "id": oid,
        "timePerSample": p,
        "parameterSize": w,
        "memoryUsageA": a,
        "memoryUsageB": b,
        "syncTimeFw": dict(sfw or {}),
        "syncTimeBw": dict(sbw or {}),
    }


def instance_dict(
    nodes: Iterable[tuple[int, Mapping]],
    edges: Iterable[tuple[int, int, float]] = (),
    *,
    K: int,
    M: float,
    N: int,
    B: float,
) -> dict:
    """An instance in the JSON form of cost model sec. 1, for building instances in code
    (read it with :func:`instance_from_dict`).

    Parameters
    ----------
    nodes : iterable of (int, mapping)
        Each node's id and its ``TMPCs``: options (:func:`option_dict`) keyed by t as a
        string.
    edges : iterable of (int, int, float), optional
        ``(sourceId, destId, communicationCost)``; default none.
    K, M, N, B : int, float, int, float
        maxDevices, maxMemoryPerDevice, mbsInBatch, bandwidth.

    Returns
    -------
    dict

    Examples
    --------
    >>> node = (0, {"1": [option_dict("v", p=2.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=2, M=10, N=2, B=1))
    >>> inst.node_ids, inst.K, inst.M
    ([0], 2, 10.0)
    """
    return {
        "maxDevices": K,
        "maxMemoryPerDevice": M,
        "bandwidth": B,
        "mbsInBatch": N,
        "nodes": [{"id": nid, "TMPCs": tmpcs} for nid, tmpcs in nodes],
        "edges": [{"sourceId": u, "destId": v, "communicationCost": c} for u, v, c in edges],
    }


def instance_to_dict(instance: Instance) -> dict:
    """The instance in the JSON format of cost model sec. 1 (``mbsInBatch`` spelling).

    Parameters
    ----------
    instance : Instance

    Returns
    -------
    dict
        Read back by :func:`instance_from_dict` to an equal instance (the source and the
        warnings aside).
    """
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
        "edges": [
            {"sourceId": e.src, "destId": e.dst, "communicationCost": e.c} for e in instance.edges
        ],
    }


def save_instance(instance: Instance, path: str | Path) -> None:
    """Write the instance as a JSON file (atomically), readable by :func:`load_instance`.

    Parameters
    ----------
    instance : Instance
    path : str or Path

    Raises
    ------
    InputError
        The file cannot be written (:func:`piper_ilp.files.atomic_write_text`).
    """
    atomic_write_text(path, json.dumps(instance_to_dict(instance), indent=1) + "\n")
