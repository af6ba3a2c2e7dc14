"""Figures: a sweep (``piper-ilp plot``), like the Piper paper's Fig. 1 and 2, and the Gantt
chart of a simulated schedule (``piper-ilp simulate --gantt``).

Sweeps:

One line per variant (and per combination of the settings that are not on the x axis, when
the sweep varied more than one): TPS (seconds per sample) or throughput (samples per
second) against K (``devices``), M (``memory``), N (``batch``) or B (``bandwidth``).
Each variant has its own colour and marker (lines that coincide stay visible). Axes are
logarithmic where the values are positive and span more than a factor of 10.
Runs without a plan (infeasible, refused) are left out of their line; a variant with no
run that has a plan is named in the legend ("no valid point: ...") and by
:func:`variants_without_points`, never dropped quietly.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

from piper_ilp.errors import InputError

__all__ = ["AXES", "gantt_caption", "gantt_chart", "plot_rows", "variants_without_points"]

#: x-axis name -> (row field, axis label)
AXES = {
    "devices": ("K", "devices K"),
    "memory": ("M", "memory per device M (GiB)"),
    "batch": ("N", "microbatches per batch N"),
    "bandwidth": ("B", "bandwidth B (GiB/s)"),
}
_SCALE = {"M": 2.0**-30, "B": 2.0**-30}
_METRICS = {"tps": "time per sample (s)", "throughput": "throughput (samples / s)"}


def _save(fig, out: Path) -> Path:
    """Save ``fig`` to ``out`` (its suffix gives the format) with
    :func:`piper_ilp.files.atomic_write_bytes`; close it."""
    import io

    import matplotlib.pyplot as plt

    from piper_ilp.files import atomic_write_bytes

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=out.suffix.lower().lstrip(".") or None)
    finally:
        plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
    return out


def _log_fits(values: Sequence[float]) -> bool:
    vals = [v for v in values if v is not None]
    return bool(vals) and min(vals) > 0 and max(vals) / min(vals) > 10


def _setting_text(field: str, value: float) -> str:
    if field in _SCALE:
        return f"{field}={value * _SCALE[field]:.4g} GiB" + ("/s" if field == "B" else "")
    return f"{field}={value:g}"


def variants_without_points(rows: Sequence[dict], metric: str = "tps") -> dict[str, str]:
    """The variants none of whose runs has a value of ``metric`` (no plan), each with its
    runs' statuses counted (``"infeasible 4, refused 1"``), in the rows' order.

    >>> variants_without_points([{"variant": "2bw", "status": "infeasible", "tps": None},
    ...                          {"variant": "all", "status": "optimal", "tps": 1.0}])
    {'2bw': 'infeasible 1'}
    """
    statuses: dict[str, dict[str, int]] = {}
    plotted = set()
    for r in rows:
        counts = statuses.setdefault(r["variant"], {})
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
        if r.get(metric) is not None:
            plotted.add(r["variant"])
    return {
        v: ", ".join(f"{s} {n}" for s, n in counts.items())
        for v, counts in statuses.items()
        if v not in plotted
    }


def plot_rows(
    rows: Sequence[dict],
    out: str | Path,
    *,
    x: str = "devices",
    metric: str = "tps",
    title: str | None = None,
) -> Path:
    """Draw the rows of a sweep into ``out`` (.png or .svg) and return its path.

    Raises
    ------
    InputError
        An unknown axis or metric, a file type other than .png/.svg, or no row with a plan.
    """
    if x not in AXES:
        raise InputError(f"--x {x!r}: choose one of {', '.join(AXES)}")
    if metric not in _METRICS:
        raise InputError(f"--y {metric!r}: choose one of {', '.join(_METRICS)}")
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"{out}: the figure must be a .png or .svg file")
    field, xlabel = AXES[x]
    others = [f for f, _ in AXES.values() if f != field]
    varied = [f for f in others if len({r.get(f) for r in rows}) > 1]
    lines: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r.get(metric) is None:
            continue
        key = (r["variant"],) + tuple((f, r[f]) for f in varied)
        lines[key].append((r[field] * _SCALE.get(field, 1.0), r[metric]))
    if not lines:
        raise InputError("no run of this sweep has a plan: nothing to plot")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    variants = sorted({key[0] for key in lines})
    combos = sorted({key[1:] for key in lines}, key=str)
    colors = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    markers = {v: "os^vDxP*"[i % 8] for i, v in enumerate(variants)}
    styles = {c: ("-", "--", ":", "-.")[i % 4] for i, c in enumerate(combos)}
    for key, pts in sorted(lines.items(), key=lambda kv: str(kv[0])):
        pts.sort()
        label = key[0] + "".join(f", {_setting_text(f, v)}" for f, v in key[1:])
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=markers[key[0]],
            markersize=5,
            label=label,
            color=colors[key[0]],
            linestyle=styles[key[1:]],
            fillstyle="none",
            linewidth=1.2,
        )
    xs = [p[0] for pts in lines.values() for p in pts]
    ys = [p[1] for pts in lines.values() for p in pts]
    if _log_fits(xs):
        ax.set_xscale("log", base=2 if field in ("K", "N") else 10)
    if _log_fits(ys):
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_METRICS[metric])
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    missing = variants_without_points(rows, metric)
    if missing:  # named in the legend, with no line
        ax.plot([], [], linestyle="none", label=f"no valid point: {', '.join(missing)}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def _gantt_rows(simulation, max_rows: int) -> list[tuple[int, int]]:
    """The (stage, replica) rows drawn: every replica when they fit in ``max_rows``, else
    replica 0 of each stage."""
    rows = [(s["stage"], r) for s in simulation.stages for r in range(s["d"])]
    return rows if len(rows) <= max_rows else [(s["stage"], 0) for s in simulation.stages]


def gantt_caption(simulation, *, max_rows: int = 48, until: float | None = None) -> str:
    """What :func:`gantt_chart` draws, for its title: the schedule, which replicas (every
    one, or replica 0 of each stage when they do not fit in ``max_rows`` rows) and which
    part of the run (up to ``until``: the microbatches finished by then, of those simulated).

    >>> from types import SimpleNamespace as NS
    >>> sim = NS(schedule="1f1b", pipeline="sequential", microbatches=64,
    ...          stages=[{"stage": 0, "d": 40}, {"stage": 1, "d": 24}],
    ...          tasks=[NS(mb=m, end=float(m + 1)) for m in range(64)])
    >>> print(gantt_caption(sim, until=24.0))
    1f1b, sequential pipeline: replica 0 of each of 2 stages (of 64 replicas);
    0-24 s, the first 24 of 64 microbatches simulated
    """
    rows = _gantt_rows(simulation, max_rows)
    total = sum(s["d"] for s in simulation.stages)
    n = len(simulation.stages)
    who = (
        f"every replica ({total})"
        if len(rows) == total
        else f"replica 0 of each of {n} stages (of {total} replicas)"
    )
    finish: dict[int, float] = {}
    for t in simulation.tasks:
        finish[t.mb] = max(finish.get(t.mb, 0.0), t.end)
    end = max(finish.values(), default=0.0)
    if until is None or until >= end:
        when = f"the whole run, {simulation.microbatches} microbatches"
    else:
        done = sum(1 for f in finish.values() if f <= until)
        when = (
            f"0-{until:.4g} s, the first {done} of {simulation.microbatches} microbatches simulated"
        )
    return f"{simulation.schedule}, {simulation.pipeline} pipeline: {who};\n{when}"


def gantt_chart(
    simulation,
    out: str | Path,
    *,
    max_rows: int = 48,
    until: float | None = None,
    title: str | None = None,
) -> Path:
    """Each replica's forward (light) and backward (dark) tasks over time, one row per
    replica, stage 0 on top (``simulation`` from :func:`compare.simulation.simulate.simulate`). With
    more than ``max_rows`` replicas, only replica 0 of each stage is drawn; ``until`` cuts the
    time axis (default: the whole run). The title says both (:func:`gantt_caption`).

    Raises
    ------
    InputError
        A file type other than .png/.svg.
    """
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"{out}: the Gantt chart must be a .png or .svg file")
    rows = _gantt_rows(simulation, max_rows)
    index = {row: k for k, row in enumerate(rows)}
    end = until if until is not None else max((t.end for t in simulation.tasks), default=1.0)
    bars: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for t in simulation.tasks:
        k = index.get((t.stage, t.replica))
        if k is None or t.start >= end:
            continue
        bars[(k, t.kind)].append((t.start, min(t.end, end) - t.start))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    height = max(2.5, 0.32 * len(rows) + 1.2)
    fig, ax = plt.subplots(figsize=(9, height))
    for (k, kind), spans in bars.items():
        stage = rows[k][0]
        color = f"C{stage % 10}"
        ax.broken_barh(
            spans,
            (k - 0.4, 0.8),
            facecolors=color,
            alpha=0.45 if kind == "F" else 0.95,
            edgecolor="black",
            linewidth=0.2,
        )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"stage {i} / r{r}" for i, r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, end)
    ax.set_xlabel("time (s)")
    ax.legend(
        handles=[
            Patch(facecolor="grey", alpha=0.45, label="forward"),
            Patch(facecolor="grey", alpha=0.95, label="backward"),
        ],
        fontsize=8,
        loc="upper right",
    )
    ax.set_title(title or gantt_caption(simulation, max_rows=max_rows, until=until), fontsize=9)
    fig.tight_layout()
    return _save(fig, out)
