"""``piper-ilp sweep`` and ``piper-ilp plot``: grids of settings and variants, and their figure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from piper_cli.common import (
    METHOD_PANEL,
    OUTPUT_PANEL,
    ForceOpt,
    InFlightOpt,
    MaxIdealsOpt,
    cli_errors,
    load_with_overrides,
    note_bare_sizes,
    option,
    output_option,
    setting_option,
    stderr,
    stdout,
    time_limit_option,
)
from piper_cli.compare_cmds import (
    RESULTS_PANEL,
    ExternalOpt,
    OutFolderOpt,
    SchedulerOpt,
    WorkersOpt,
    parse_externals,
    resolve_scheduler,
)
from piper_cli.evaluate_cmd import InstanceArg


def _list(text: str | None, what: str, parse) -> list | None:
    from piper_ilp.errors import InputError

    if text is None:
        return None
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InputError(f"{what}: give one or more comma-separated values")
    return [parse(x) for x in items]


def progress_line(row: dict, elapsed: float) -> str:
    """A sweep row for people: its point with M and B in binary units, its status, TPS (in
    seconds, as every command prints it), its CPU time and the sweep's elapsed time, e.g.
    ``K=16 M=190.7 MiB N=4 B=9.313 GiB/s all: optimal TPS 0.025175 s (68.5 ms CPU; 4 s
    elapsed)``; the exact values are in results.jsonl.

    Parameters
    ----------
    row : dict
        A row of :func:`compare.experiments.sweep.run_point`.
    elapsed : float
        Wall seconds since the sweep started.

    Returns
    -------
    str
    """
    from piper_cli.format import format_bytes, format_model_time, format_rate, format_seconds

    tps = "" if row["tps"] is None else f" TPS {format_model_time(row['tps'], 6)}"
    return (
        f"K={row['K']} M={format_bytes(row['M'])} N={row['N']} B={format_rate(row['B'])} "
        f"{row['variant']}: {row['status']}{tps} ({format_seconds(row['seconds'])} CPU; "
        f"{elapsed:.0f} s elapsed)"
    )


class _VariantsHelp(TyperCommand):
    """sweep's command: its --help lists the variants from the registry
    (:func:`compare.experiments.sweep.variants_text`), loaded only when the help is shown
    (``piper-ilp --help`` loads no project module)."""

    def format_help(self, ctx, formatter) -> None:
        from compare.experiments.sweep import variants_text

        if self.help and "{variants}" in self.help:
            self.help = self.help.replace("{variants}", variants_text())
        super().format_help(ctx, formatter)


def register(app: typer.Typer) -> None:
    @app.command("sweep", cls=_VariantsHelp)
    @cli_errors
    def sweep_command(
        instance: InstanceArg,
        out: OutFolderOpt,
        devices: setting_option(
            "--devices", "-K", "LIST", "K values (default: the file's)."
        ) = None,
        memory: setting_option("--memory", "-M", "SIZES", "M values: 8GiB,16GiB.") = None,
        batch: setting_option("--batch", "-N", "LIST", "N values.") = None,
        bandwidth: setting_option(
            "--bandwidth", "-B", "RATES", "B values: 25GiB/s,100Gbit/s."
        ) = None,
        variants: Annotated[
            str,
            option(
                METHOD_PANEL, "--variants", metavar="LIST", help="See below.", show_default=True
            ),
        ] = "all,no-dp,no-tp,no-recompute,2bw",
        in_flight: InFlightOpt = None,
        time_limit: time_limit_option("Per point: stop the DP, kill a planner.") = None,
        force: ForceOpt = False,
        max_ideals: MaxIdealsOpt = None,
        external: ExternalOpt = None,
        workers: WorkersOpt = 1,
        resume: Annotated[
            bool, option(RESULTS_PANEL, "--resume", help="Continue (more values grow it).")
        ] = False,
        scheduler: SchedulerOpt = None,
        progress: Annotated[
            bool, option(OUTPUT_PANEL, "--progress/--no-progress", help="A line per run (on).")
        ] = True,
    ) -> None:
        """Solve an instance over a grid of settings for each variant.

        The grid is every combination of the comma-separated K, M, N, B values given. The
        variants: {variants}; and the external planners (--external). One row per run in
        OUT/results.jsonl (as it finishes; --resume continues) and OUT/results.csv.
        --in-flight schedule solves every point under sec. 11's rule (the heuristic
        variants are then refused in their rows). --force and --max-ideals reach the DP
        variants as in solve. More: docs/sweeps.md."""
        from compare.experiments.jobs import Interrupted
        from compare.experiments.sweep import (
            PARAMETERS,
            RESULTS,
            TABLE,
            read_rows,
            run_sweep,
            sweep_points,
        )
        from piper_ilp.files import check_not_input
        from piper_ilp.instance import read_setting

        for name in (RESULTS, TABLE, PARAMETERS):
            check_not_input(Path(out) / name, {instance: "instance"}, "sweep's output")
        externals = parse_externals(external)
        inst = load_with_overrides(instance)
        note_bare_sizes(
            memory=_list(memory, "--memory", str) or [],
            bandwidth=_list(bandwidth, "--bandwidth", str) or [],
        )
        points = sweep_points(
            # read here, range-checked once when sweep_points makes the points
            _list(devices, "--devices", lambda x: read_setting("K", x)) or [inst.K],
            _list(memory, "--memory", lambda x: read_setting("M", x)) or [inst.M],
            _list(batch, "--batch", lambda x: read_setting("N", x)) or [inst.N],
            _list(bandwidth, "--bandwidth", lambda x: read_setting("B", x)) or [inst.B],
            [v.strip() for v in variants.split(",") if v.strip()],
            tuple(externals),
        )
        ids = {p.id for p in points}
        results = Path(out) / RESULTS
        done = [len(ids & {r["id"] for r in read_rows(out)}) if resume and results.exists() else 0]
        start = time.perf_counter()

        def on_row(row: dict) -> None:
            done[0] += 1
            if progress:  # a line per run, on a terminal or not (a log, CI, nohup)
                elapsed = time.perf_counter() - start
                stderr.print(
                    f"[{done[0]}/{len(points)}] {progress_line(row, elapsed)}", markup=False
                )

        try:
            rows = run_sweep(
                inst,
                points,
                out,
                workers=workers,
                resume=resume,
                on_row=on_row,
                externals=externals,
                scheduler=resolve_scheduler(scheduler),
                note=lambda text: stderr.print(f"piper-ilp: note: {text}", markup=False),
                in_flight=in_flight.value if in_flight is not None else "piper",
                time_limit=time_limit,
                force=force,
                max_ideals=max_ideals,
            )
        except Interrupted as exc:
            stderr.print(
                f"piper-ilp: interrupted ({exc.done} runs saved in {exc.results}; --resume goes "
                "on)",
                markup=False,
            )
            raise typer.Exit(128 + exc.signum) from None
        stdout.print(f"{len(rows)} runs in {out}/results.jsonl and {out}/{TABLE}", markup=False)

    @app.command("plot")
    @cli_errors
    def plot_command(
        folder: Annotated[str, typer.Argument(help="A sweep's --out folder.")],
        x: Annotated[
            str,
            option(
                OUTPUT_PANEL, "--x", help="devices, memory, batch or bandwidth.", show_default=True
            ),
        ] = "devices",
        y: Annotated[
            str, option(OUTPUT_PANEL, "--y", help="tps or throughput.", show_default=True)
        ] = "tps",
        output: output_option("Figure (.png, .svg); default DIR/sweep.png.", kind=str) = None,
        title: Annotated[
            Optional[str], option(OUTPUT_PANEL, "--title", help="Figure title.")
        ] = None,
    ) -> None:
        """Draw a sweep: TPS (or throughput) against one setting, one line per variant."""
        from compare.experiments.jobs import folder_kinds
        from compare.experiments.plot import plot_rows, variants_without_points
        from compare.experiments.sweep import RESULTS, read_rows
        from piper_ilp.errors import InputError
        from piper_ilp.files import check_writable

        if not Path(folder).is_dir():
            raise InputError(f"{folder}: not a folder (give a sweep's --out folder)")
        other = [k for k in folder_kinds(folder) if k != "sweep"]
        if other:
            raise InputError(
                f"{folder}: holds a {other[0]}'s results, not a sweep's (give a sweep's --out "
                "folder)"
            )
        target = Path(output) if output else Path(folder) / "sweep.png"
        check_writable(target, "figure", inputs={Path(folder) / RESULTS: "sweep results"})
        rows = read_rows(folder)
        if not rows:
            raise InputError(f"{folder}: no sweep results (results.jsonl is missing or empty)")
        path = plot_rows(rows, target, x=x, metric=y, title=title)
        stdout.print(f"wrote {path}", markup=False)
        for variant, statuses in variants_without_points(rows, y).items():
            stdout.print(f"no valid point for {variant} ({statuses}): not drawn", markup=False)
