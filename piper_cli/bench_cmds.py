"""``piper-ilp deepen`` (grow a profile's repeated block) and ``piper-ilp bench`` (the DP
benchmark of issue 6, against the original C++ planner's times)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import BandwidthOpt, BatchOpt, DevicesOpt, MemoryOpt, cli_errors, load_with_overrides, stdout
from piper_ilp.instance import save_instance


def register(app: typer.Typer) -> None:
    @app.command("deepen")
    @cli_errors
    def deepen_command(
        instance: Annotated[str, typer.Argument(help="Instance JSON file with a repeated block (e.g. bert32a100.json).")],
        layers: Annotated[int, typer.Option("--layers", "-L", help="Number of repeated layers wanted (at least the current number).")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the deeper instance.")],
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
    ) -> None:
        """Make a deeper model: copies of a repeated layer are inserted into the chain of such
        layers, with every edge the copied layer has and matching sync entries."""
        from compare.deepen import deepen, repeated_chain

        inst = load_with_overrides(instance, devices, memory, batch, bandwidth)
        before = len(repeated_chain(inst))
        deeper = deepen(inst, layers)
        save_instance(deeper, output)
        stdout.print(
            f"{output}: {len(deeper.nodes)} nodes, {len(deeper.edges)} edges "
            f"(repeated chain {before} -> {layers} layers)",
            markup=False,
        )

    @app.command("bench")
    def bench_command(
        quick: Annotated[bool, typer.Option("--quick", help="Only the small configurations, one run each.")] = False,
        json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the rows as JSON to this file.", show_default=False)] = None,
        only: Annotated[Optional[list[str]], typer.Option("--only", help="Configuration name (repeatable).", show_default=False)] = None,
        modes: Annotated[str, typer.Option("--modes", help="Comma-separated knapsack modes.")] = "exact,greedy",
        repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs per case when a run is short (median taken).")] = 3,
        timeout: Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds per run.")] = 900.0,
    ) -> None:
        """Benchmark the DP on the paper's configurations: seconds, peak RSS, TPS (exact and
        greedy), the ratio to the C++ planner's seconds, and the counts of sets and stages."""
        from compare.bench_dp import main as bench_main

        argv = ["--modes", modes, "--repeat", str(repeat), "--timeout", str(timeout)]
        if quick:
            argv.append("--quick")
        if json_out is not None:
            argv += ["--json", str(json_out)]
        for name in only or ():
            argv += ["--only", name]
        raise typer.Exit(bench_main(argv))
