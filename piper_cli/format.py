"""Human output: tables of stages."""

from __future__ import annotations

from rich.table import Table

from piper_ilp.evaluate import Evaluation

__all__ = ["format_ids", "stage_table"]


def format_ids(ids) -> str:
    """Node ids as short runs: [0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (input order kept)."""
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


def _memory_unit(limit: float) -> tuple[str, float]:
    """The unit that shows a memory limit with a few significant digits."""
    for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if limit >= size:
            return name, float(size)
    return "bytes", 1.0


def stage_table(ev: Evaluation, title: str | None = None) -> Table:
    """A table with one row per stage: nodes, d, t, y, memory used / limit, TPS and its parts."""
    table = Table(title=title, title_justify="left")
    unit, scale = _memory_unit(ev.stages[0].memory_limit if ev.stages else 1.0)
    for col, just in (
        ("stage", "right"),
        ("nodes", "left"),
        ("d", "right"),
        ("t", "right"),
        ("y", "right"),
        (f"memory {unit}", "right"),
        (f"limit {unit}", "right"),
        ("compute s", "right"),
        ("cut-edge s", "right"),
        ("resync s", "right"),
        ("TPS s", "right"),
    ):
        table.add_column(col, justify=just)
    bottleneck = ev.bottleneck
    for r in ev.stages:
        c = r.cost
        mark = " *" if r.index == bottleneck else ""
        table.add_row(
            str(r.index),
            format_ids(r.nodes),
            str(r.d),
            str(r.t),
            str(r.y),
            "-" if r.memory is None else f"{r.memory / scale:.6g}",
            f"{r.memory_limit / scale:.6g}",
            "-" if c is None else f"{c.compute:.6g}",
            "-" if c is None else f"{c.edge:.6g}",
            "-" if c is None else f"{c.resync:.6g}",
            "-" if c is None else f"{c.tps:.12g}{mark}",
        )
    return table
