"""Human output: numbers with units, and the tables of stages and of option choices.

The helpers here are for people: bytes in binary units (``190.7 MiB``), rates
(``9.313 GiB/s``), a few significant digits. The times of the cost model (TPS, batch time,
a stage's compute, cut-edge and resync times, an option's p) are in seconds everywhere
(:func:`format_model_time`); how long a run took is a duration in a human unit
(:func:`format_seconds`). The exact values are in every command's ``--json`` output.
Tables fit 80 columns.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from rich.table import Table

    from piper_ilp.evaluate import Evaluation
    from piper_ilp.instance import Instance
    from piper_ilp.plan import Plan

__all__ = [
    "format_bytes",
    "format_rate",
    "format_seconds",
    "format_model_time",
    "format_ids",
    "settings_line",
    "settings_origin_line",
    "plural",
    "stage_table",
    "option_table",
]

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")


def _sig(x: float, digits: int = 4, max_decimals: int | None = None) -> str:
    """``x`` with ``digits`` significant digits in plain notation, trailing zeros dropped
    (exponent notation only far outside everyday magnitudes).

    >>> _sig(190.73486328125), _sig(0.0251751), _sig(12.0), _sig(1e20)
    ('190.7', '0.02518', '12', '1.000e+20')
    """
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    mag = math.floor(math.log10(abs(x)))
    if mag >= 12 or mag < -6:
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - mag)
    if max_decimals is not None:
        decimals = min(decimals, max_decimals)
    text = f"{x:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _binary_unit(x: float) -> tuple[str, float]:
    """The largest binary unit not above ``|x|`` (bytes below 1 KiB)."""
    i = 0
    while i + 1 < len(_BINARY) and abs(x) >= 1024.0 ** (i + 1):
        i += 1
    return _BINARY[i], 1024.0**i


def format_bytes(x: float, digits: int = 4) -> str:
    """Bytes in binary units with ``digits`` significant digits.

    >>> format_bytes(2e8), format_bytes(80 * 2**30), format_bytes(512), format_bytes(0)
    ('190.7 MiB', '80 GiB', '512 B', '0 B')
    """
    unit, scale = _binary_unit(x)
    return f"{_sig(x / scale, digits)} {unit}"


def format_rate(x: float, digits: int = 4) -> str:
    """Bytes per second in binary units.

    >>> format_rate(1e10)
    '9.313 GiB/s'
    """
    return format_bytes(x, digits) + "/s"


def _time_unit(x: float) -> tuple[str, float]:
    """s at 1 s and above, ms from 1 ms, us (microseconds, ASCII) below."""
    x = abs(x)
    if x >= 1.0 or x == 0:
        return "s", 1.0
    if x >= 1e-3:
        return "ms", 1e-3
    return "us", 1e-6


def format_seconds(x: float, digits: int = 4) -> str:
    """A time in s, ms or us with ``digits`` significant digits.

    >>> [format_seconds(x) for x in (0.025175, 43.7, 0.00000044, 0)]
    ['25.18 ms', '43.7 s', '0.44 us', '0 s']
    """
    unit, scale = _time_unit(x)
    return f"{_sig(x / scale, digits)} {unit}"


def format_model_time(x: float | None, digits: int = 7) -> str:
    """A time of the cost model (TPS, batch time, period) in seconds, the one unit every
    command prints them in, with ``digits`` significant digits.

    >>> format_model_time(0.002561128), format_model_time(6.187646940, 12)
    ('0.002561128 s', '6.18764694 s')
    """
    return "-" if x is None else f"{x:.{digits}g} s"


def format_ids(ids: Iterable[int]) -> str:
    """Node ids as short runs: [0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (input order kept).

    >>> format_ids([0, 1, 2, 5, 7, 8])
    '0-2,5,7-8'
    """
    ids = list(ids)
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def _wrap_runs(text: str, width: int) -> str:
    """Break a :func:`format_ids` string into lines of at most ``width`` characters, at
    commas only (a run such as ``12-40`` is never split).

    >>> print(_wrap_runs("0-3,5,7-12,14,16", 8))
    0-3,5,
    7-12,14,
    16
    """
    lines: list[str] = []
    line = ""
    for part in text.split(","):
        piece = part if not line else "," + part
        if line and len(line) + len(piece) + 1 > width:  # +1: the comma that ends the line
            lines.append(line + ",")
            line = part
        else:
            line += piece
    lines.append(line)
    return "\n".join(lines)


def settings_line(instance: Instance) -> str:
    """``K=8 M=190.7 MiB B=9.313 GiB/s N=4``: the instance's settings for a header line."""
    return f"K={instance.K} M={format_bytes(instance.M)} B={format_rate(instance.B)} N={instance.N}"


def plural(n: int, word: str, words: str | None = None) -> str:
    """``n`` and the word in the right number.

    >>> plural(1, "stage"), plural(3, "stage"), plural(1, "replica", "replicas")
    ('1 stage', '3 stages', '1 replica')
    """
    return f"{n} {word if n == 1 else (words or word + 's')}"


#: Where a setting came from (:func:`settings_origin_line`), in the order printed.
ORIGINS = {
    "metadata": "from the plan's metadata",
    "flags": "from the flags",
    "instance": "from the instance file",
    "default": "by default",
}


def settings_origin_line(instance: Instance, mode_parts: dict, origin: dict) -> str:
    """One line saying where each setting used came from: ``origin`` maps a setting's
    name (K, M, N, B, or a part of the mode, ``Mode.to_dict()``'s keys) to a key of
    :data:`ORIGINS`; ``mode_parts`` is ``Mode.to_dict()``.

    >>> from types import SimpleNamespace as NS
    >>> inst = NS(K=8, M=2**30, N=4, B=1e10)
    >>> settings_origin_line(inst, {"pipeline": "graph"},
    ...     {"K": "metadata", "M": "flags", "N": "metadata", "B": "instance",
    ...      "pipeline": "metadata"})
    "settings from the plan's metadata: K=8 N=4 pipeline=graph; from the flags: M=1 GiB; \
from the instance file: B=9.313 GiB/s"
    """
    shown = {
        "K": str(instance.K),
        "M": format_bytes(instance.M),
        "N": str(instance.N),
        "B": format_rate(instance.B),
        **{k: str(v) for k, v in mode_parts.items()},
    }
    groups = []
    for key, words in ORIGINS.items():
        names = [n for n in shown if origin.get(n) == key]
        if names:
            groups.append(f"{words}: " + " ".join(f"{n}={shown[n]}" for n in names))
    return "settings " + "; ".join(groups)


def _time_decimals(largest: float) -> int:
    """The decimals of a table's time columns (seconds): 4 significant digits of the
    largest time in the table (0 from 1000 s on)."""
    if not (math.isfinite(largest) and largest > 0):
        return 3
    return max(0, 3 - math.floor(math.log10(largest)))


def _time_value(x: float | None, decimals: int) -> str:
    """A time cell, in seconds with ``decimals`` decimals (trailing zeros dropped); a
    nonzero time that rounds to 0 shows as ``<1e-DECIMALS``.

    >>> _time_value(0.0024981, 6), _time_value(7.5e-08, 6), _time_value(None, 3)
    ('0.002498', '<1e-6', '-')
    """
    if x is None:
        return "-"
    if x != 0 and abs(x) < 0.5 * 10.0**-decimals:
        return f"<1e-{decimals}"
    text = f"{x:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def raw_and_human(instance: Instance) -> str:
    """``K=8 M=1.6e+10 (14.9 GiB) N=1 B=1e+09 (953.7 MiB/s)``: the settings with the raw
    numbers a file holds and the same in binary units beside them."""
    return (
        f"K={instance.K} M={instance.M:.6g} ({format_bytes(instance.M)}) N={instance.N} "
        f"B={instance.B:.6g} ({format_rate(instance.B)})"
    )


def _column_value(x: float | None, scale: float) -> str:
    """A table cell in the column's unit: 4 significant digits, at most 3 decimals."""
    if x is None:
        return "-"
    v = x / scale
    if v != 0 and abs(v) < 0.0005:
        return "<0.001"
    return _sig(v, 4, max_decimals=3)


def _new_table(title: str | None) -> Table:
    from rich import box
    from rich.table import Table

    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )


#: The widest the nodes column gets before it wraps (keeps stage tables within 80 columns).
NODES_WIDTH = 16


def stage_table(ev: Evaluation, title: str | None = None, flow: bool | None = None) -> Table:
    """A table with one row per stage: nodes, d, t, y, memory used, and the stage's time per
    sample split into compute (P/d), cut-edge transfers and the resync, then its TPS; the
    bottleneck stage is marked ``*``. One unit per column, named in the header (memory in
    the unit of the limit M, times in seconds); a memory above its
    limit is marked ``!``.

    With ``flow`` (default: when the evaluation's mode is not the default one) the table
    also has ``h``, the microbatches in flight (secs. 2 and 8; ``q`` under the in-flight
    rule of sec. 11), and, under graph pipelining, ``next``, the stage's successors in the
    stage graph."""
    from piper_ilp.cost import memory_fits

    if flow is None:
        flow = not ev.mode.is_default
    graph = ev.mode.graph
    held = "q" if ev.mode.in_flight == "schedule" else "h"

    table = _new_table(title)
    decimals = _time_decimals(
        max(
            (r.cost.tps for r in ev.stages if r.cost is not None and math.isfinite(r.cost.tps)),
            default=1.0,
        )
    )
    # the instance's M (a plan with no stages still has one); else the stages' own limit
    limit = ev.M if ev.M is not None else max((r.memory_limit for r in ev.stages), default=None)
    mem_unit, mem_scale = _binary_unit(limit if limit is not None else 1.0)
    table.add_column("stage", justify="right", no_wrap=True)
    table.add_column(
        "nodes", justify="left", max_width=NODES_WIDTH, overflow="fold"
    )  # fold: a run longer than the width
    for name in ("d", "t", held, "y") if flow else ("d", "t", "y"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column(f"memory\n{mem_unit}", justify="right", no_wrap=True)
    for name in ("compute", "cut-edge", "resync", "TPS"):
        table.add_column(f"{name}\ns", justify="right", no_wrap=True)
    if flow and graph:
        table.add_column("next", justify="left", no_wrap=True)
    bottleneck = ev.bottleneck
    over = False
    for r in ev.stages:
        c = r.cost
        memory = _column_value(r.memory, mem_scale)
        if r.memory is not None and not memory_fits(r.memory, r.memory_limit):
            memory += "!"
            over = True
        row = [
            f"{r.index}*" if r.index == bottleneck else str(r.index),
            _wrap_runs(format_ids(r.nodes), NODES_WIDTH),
            str(r.d),
            str(r.t),
            *((str(r.s),) if flow else ()),
            str(r.y),
            memory,
            _time_value(c.compute if c else None, decimals),
            _time_value(c.edge if c else None, decimals),
            _time_value(c.resync if c else None, decimals),
            _time_value(c.tps if c else None, decimals),
        ]
        if flow and graph:
            row.append(",".join(str(j) for j in r.successors) or "-")
        table.add_row(*row)
    notes = ["* the bottleneck stage"] if bottleneck is not None else []
    if flow:
        notes.append(
            f"{held} microbatches in flight"
            + (" (sec. 11's rule)" if held == "q" else "")
            + ("; next: successors in the stage graph" if graph else "")
        )
    if limit is not None:
        notes.append(f"memory limit M = {format_bytes(limit)}" + (" (! above it)" if over else ""))
    table.caption = "; ".join(notes)
    table.caption_justify = "left"
    return table


def option_table(instance: Instance, plan: Plan) -> Table:
    """The per-layer choices of a plan: for every node (in the instance's order) its stage,
    the stage's t and the option (TMPC) id chosen, with the option's time per sample p (s) and
    memory a, b in the units of the option's own magnitude."""
    table = _new_table(None)
    table.add_column("node", justify="right", no_wrap=True)
    table.add_column("name", justify="left", max_width=24, overflow="ellipsis", no_wrap=True)
    table.add_column("stage", justify="right", no_wrap=True)
    table.add_column("t", justify="right", no_wrap=True)
    table.add_column("option", justify="left", max_width=20, overflow="ellipsis", no_wrap=True)
    table.add_column("p s", justify="right", no_wrap=True)
    table.add_column("w", justify="right", no_wrap=True)
    from rich.text import Text  # user-given names and ids are plain text, never markup

    where = {v: (i, st) for i, st in enumerate(plan.stages) for v in st.nodes}
    for node in instance.nodes:
        if node.id not in where:
            table.add_row(str(node.id), Text(node.name or ""), "-", "-", "-", "-", "-")
            continue
        i, st = where[node.id]
        option_id = st.options.get(node.id)
        opt = node.option(st.t, option_id) if option_id is not None else None
        table.add_row(
            str(node.id),
            Text(node.name or ""),
            str(i),
            str(st.t),
            Text(option_id) if option_id is not None else "-",
            _sig(opt.p, 4) if opt is not None else "-",
            format_bytes(opt.w) if opt is not None else "-",
        )
    return table
