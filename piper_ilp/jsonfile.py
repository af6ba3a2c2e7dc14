"""Reading JSON files strictly (instances and plans, cost model sec. 1): :func:`read_json`
refuses, in one line naming the file and the place, anything that is not plain, canonical,
finite JSON; the loaders (:mod:`piper_ilp.instance`, :mod:`piper_ilp.plan`) then check the
format. Also the supported range of numbers and the small type tests the loaders share.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
import os
import re
import stat
from pathlib import Path
from typing import Any

from piper_ilp.errors import InputError

__all__ = [
    "VALUE_MIN",
    "VALUE_MAX",
    "VALUE_RANGE_TEXT",
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "CANONICAL_INT",
    "CANONICAL_POSITIVE",
    "read_json",
    "read_file_bytes",
    "display_path",
    "is_number",
    "is_int",
    "is_text",
    "short_repr",
    "describe_value",
]

#: The supported range of numbers (README, Limits; the count limits are in
#: :mod:`piper_ilp.instance`). Every size and time (p, w, a, b, sfw, sbw, c) is 0 or in [VALUE_MIN,
#: VALUE_MAX]; M and B are in [VALUE_MIN, VALUE_MAX]. With the count limits, any sum over a stage
#: (at most MAX_NODES * (VALUE_MAX * MAX_BATCH + VALUE_MAX) < 1e49) and any product or
#: quotient of up to four such numbers and two counts stays within [1e-200, 1e200]:
#: finite, and far from the subnormal floats.
VALUE_MIN, VALUE_MAX = 1e-30, 1e30
#: The range of a size or time, as messages state it.
VALUE_RANGE_TEXT = f"0 or within [{VALUE_MIN:g}, {VALUE_MAX:g}]"

#: Largest instance or plan file read (bytes); larger files are refused before reading.
MAX_FILE_BYTES = 256 * 2**20
#: Deepest JSON nesting accepted (the formats need 6 levels).
MAX_JSON_DEPTH = 64

# --------------------------------------------------------------------------------------
# Reading JSON strictly
# --------------------------------------------------------------------------------------


def is_number(x: Any) -> bool:
    """Whether ``x`` is a JSON number as parsed: an int or a float, not a bool.

    Parameters
    ----------
    x : any
        A value as :func:`read_json` returns it, or part of one.

    Returns
    -------
    bool
        NaN and infinities count (the strict reader refuses them before this is asked).

    Examples
    --------
    >>> is_number(2.5), is_number(True), is_number("2")
    (True, False, False)
    """
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_int(x: Any) -> bool:
    """Whether ``x`` is a JSON integer as parsed: an int, not a bool (2.0 is not one).

    Parameters
    ----------
    x : any
        As for :func:`is_number`.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_int(2), is_int(2.0), is_int(False)
    (True, False, False)
    """
    return isinstance(x, int) and not isinstance(x, bool)


def display_path(path: str | Path) -> str:
    """``path`` as messages show it, so that a message stays one line.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    str
        ``path`` as given, or its ``repr`` when it holds a line break or another
        unprintable character.

    Examples
    --------
    >>> print(display_path("m.json"), display_path("m\\n.json"))
    m.json 'm\\n.json'
    """
    text = str(path)
    return text if text.isprintable() else repr(text)


class _Refused:
    """A JSON value the strict reader refuses, kept in place so that the walk after
    parsing can name where it sits (see :func:`_first_refused`)."""

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why


class _Object(dict):
    """A JSON object that had a key twice (the first repeated key in ``duplicate``)."""

    duplicate: str = ""


#: Integer literals longer than this are beyond every supported range (1e40 > VALUE_MAX).
_MAX_INT_DIGITS = 40
_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_BRACKET_OR_QUOTE = re.compile(rb'[\[\]{}"]')
#: A node id written as a JSON object key: no sign "+", no leading zeros, no spaces or "_".
CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]*")
#: A tensor-parallel degree t written as a key.
CANONICAL_POSITIVE = re.compile(r"[1-9][0-9]*")


def read_file_bytes(path: str | Path, limit: int) -> bytes:
    """The bytes of a regular file, at most ``limit``; anything else is refused without
    blocking and without reading (a FIFO, a device, a folder, a socket).

    Parameters
    ----------
    path : str or Path
        The file.
    limit : int
        The most bytes accepted.

    Returns
    -------
    bytes

    Raises
    ------
    InputError
        One line naming the file: missing, not a regular file, unreadable, or larger than
        ``limit``.
    """
    name = display_path(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"{name}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{name}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    kind = _file_kind(st.st_mode)
    if kind:
        raise InputError(f"{name}: is a {kind}, not a regular file")
    if st.st_size > limit:
        raise InputError(
            f"{name}: is {st.st_size} bytes, more than the limit of {limit} bytes "
            f"({limit / 2**20:g} MiB)"
        )
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        kind = _file_kind(os.fstat(fd).st_mode)  # replaced between the stat and the open
        if kind:
            raise InputError(f"{name}: is a {kind}, not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputError(f"{name}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise InputError(f"{name}: is more than the limit of {limit} bytes ({limit / 2**20:g} MiB)")
    return b"".join(chunks)


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def _too_deep(data: bytes, limit: int) -> int | None:
    """The byte offset where the JSON text first nests deeper than ``limit`` (brackets
    inside strings do not count), or None. Runs before the parser, which recurses."""
    brackets = _STRING_RE.sub(b"", data).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return None
    # depth after the k-th bracket (k from 1) = 2 * (openings so far) - k
    steps = brackets.translate(_BRACKET_STEP)
    if max(map(operator.sub, itertools.accumulate(steps), itertools.count(1))) <= limit:
        return None
    depth = 0
    pos = 0
    while True:  # the failure path only: find the place, skipping strings
        m = _BRACKET_OR_QUOTE.search(data, pos)
        if m is None:
            return len(data)
        ch = m.group()
        if ch == b'"':
            s = _STRING_RE.match(data, m.start())
            if s is None:
                return m.start()
            pos = s.end()
            continue
        depth += 1 if ch in b"[{" else -1
        if depth > limit:
            return m.start()
        pos = m.end()


def _parse_int(text: str) -> int | _Refused:
    if len(text) > _MAX_INT_DIGITS:
        return _Refused(
            f"an integer with {len(text.lstrip('-'))} digits is outside every supported range"
        )
    return int(text)


def _parse_float(text: str) -> float | _Refused:
    x = float(text)
    if not math.isfinite(x):
        return _Refused(f"{text[:20]} overflows a float (must be finite, at most {VALUE_MAX:g})")
    if x == 0 and re.search(r"[1-9]", re.split(r"[eE]", text)[0]):
        return _Refused(f"{text[:20]} underflows to 0 (the supported range is {VALUE_RANGE_TEXT})")
    return x


def _parse_constant(text: str) -> _Refused:
    return _Refused(f"{text} is not allowed (numbers must be finite)")


def read_json(
    path: str | Path, limit: int = MAX_FILE_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse a JSON file strictly.

    Parameters
    ----------
    path : str or Path
        The file (read by :func:`read_file_bytes`).
    limit : int
        The most bytes accepted.
    max_depth : int
        The deepest nesting accepted.

    Returns
    -------
    The parsed tree (dicts, lists, str, int, float, bool, None).

    Raises
    ------
    InputError
        One line naming the file and the place: a file that is not a regular file or is
        larger than ``limit`` bytes, bytes that are not UTF-8 (a UTF-8 byte-order mark is
        skipped), nesting deeper than ``max_depth``, invalid JSON, a key given twice in one
        object, NaN / Infinity / -Infinity, a number that overflows a float, and an integer
        literal of more than 40 digits.
    """
    name = display_path(path)
    data = read_file_bytes(path, limit)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(
            f"{name}: is UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}, line {line})"
        ) from None
    where = _too_deep(data, max_depth)
    if where is not None:
        line = data.count(b"\n", 0, where) + 1
        raise InputError(f"{name}: JSON nested more than {max_depth} levels deep (line {line})")
    refused = False

    def pairs_hook(pairs):
        nonlocal refused
        obj = _Object(pairs)
        if len(obj) != len(pairs):
            refused = True
            seen = set()
            for k, _ in pairs:
                if k in seen:
                    obj.duplicate = k
                    break
                seen.add(k)
        return obj

    def flag(parse):
        def hook(s):
            nonlocal refused
            x = parse(s)
            if isinstance(x, _Refused):
                refused = True
            return x

        return hook

    try:
        tree = json.loads(
            text,
            object_pairs_hook=pairs_hook,
            parse_int=flag(_parse_int),
            parse_float=flag(_parse_float),
            parse_constant=flag(_parse_constant),
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:  # cannot happen after the checks above
        raise InputError(
            f"{name}: invalid JSON: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    if refused:
        place, why = _first_refused(tree)
        raise InputError(f"{name}: {place}: {why}")
    return tree


def _first_refused(tree: Any) -> tuple[str, str]:
    """The JSON path of the first refused value (document order) and the reason."""
    stack: list[tuple[Any, str, str]] = [(tree, "top level", "")]
    while stack:
        obj, path, node = stack.pop()
        where = path + node
        if isinstance(obj, _Refused):
            return where, obj.why
        if isinstance(obj, _Object) and obj.duplicate:
            return where, f"key {short_repr(obj.duplicate)} appears twice in one object"
        if isinstance(obj, dict):
            items = [(v, _join(path, k), node) for k, v in obj.items()]
        elif isinstance(obj, list):
            items = []
            for i, v in enumerate(obj):
                p = f"{path}[{i}]" if path != "top level" else f"[{i}]"
                n = node
                if path == "nodes" and isinstance(v, dict) and is_int(v.get("id")):
                    n = f" (node {v['id']})"
                items.append((v, p, n))
        else:
            continue
        stack.extend(reversed(items))
    return "top level", "refused value"  # not reached


def _join(path: str, key: str) -> str:
    key = key if len(key) <= 40 else key[:37] + "..."
    part = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else json.dumps(key)
    if path == "top level":
        return part if not part.startswith('"') else f"[{part}]"
    return f"{path}.{part}" if not part.startswith('"') else f"{path}[{part}]"


def short_repr(x: Any) -> str:
    """``repr(x)`` cut to 40 characters, for one-line messages.

    Parameters
    ----------
    x : any
        The value a message names.

    Returns
    -------
    str
        At most 40 characters, the last three ``...`` when cut; an integer of more than 40
        digits is described by its digit count (never converted to text in full).

    Examples
    --------
    >>> short_repr("x" * 50)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    >>> short_repr(10**50)
    'an integer with 51 digits'
    """
    if is_int(x) and abs(x) >= 10**_MAX_INT_DIGITS:
        return (
            f"an integer with {len(str(abs(x))) if abs(x) < 10**4000 else 'more than 4000'} digits"
        )
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def is_text(x: Any) -> bool:
    """Whether ``x`` is a str that encodes as UTF-8 (no lone surrogate, such as a JSON
    ``"\\ud800"`` escape gives).

    Parameters
    ----------
    x : any
        A value as parsed; a JSON string may hold a lone surrogate, a Python str can.

    Returns
    -------
    bool
        False for anything but a str.

    Examples
    --------
    >>> is_text("layer 1"), is_text("\\ud800"), is_text(1)
    (True, False, False)
    """
    if not isinstance(x, str):
        return False
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def describe_value(x: Any) -> str:
    """What a JSON value is, for a message saying it is the wrong kind.

    Parameters
    ----------
    x : any
        A parsed JSON value.

    Returns
    -------
    str
        ``null``, ``a boolean``, ``an array``, ``an object``, the string (cut to 40
        characters) or the number (:func:`short_repr`).

    Examples
    --------
    >>> describe_value(None), describe_value([1]), describe_value("abc"), describe_value(2.5)
    ('null', 'an array', "the string 'abc'", '2.5')
    """
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
    return short_repr(x)
