"""``piper-ilp ladder``: check the DP against the MILP on growing sub-instances, then scale up."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from piper_cli.common import (
    METHOD_PANEL,
    SETTINGS,
    ForceOpt,
    InFlightOpt,
    JsonOpt,
    MaxIdealsOpt,
    UniformOpt,
    cli_errors,
    load_with_overrides,
    option,
    print_json_line,
    stderr,
    stdout,
    with_groups,
)
from piper_cli.evaluate_cmd import InstanceArg


def register(app: typer.Typer) -> None:
    @app.command("ladder")
    @cli_errors
    @with_groups
    def ladder_command(
        instance: InstanceArg,
        max_nodes: Annotated[
            int, option(METHOD_PANEL, "--max-nodes", min=1, metavar="N", help="Largest rung (24).")
        ] = 24,
        time_limit: Annotated[
            float,
            option(
                METHOD_PANEL,
                "--time-limit",
                min=0.0,
                metavar="SECONDS",
                help="CP-SAT per rung (60).",
            ),
        ] = 60.0,
        full_time_limit: Annotated[
            float,
            option(
                METHOD_PANEL,
                "--full-time-limit",
                min=0.0,
                metavar="SECONDS",
                help="Bound at full size (120).",
            ),
        ] = 120.0,
        cluster: dict = SETTINGS,
        in_flight: InFlightOpt = None,
        uniform: UniformOpt = False,
        force: ForceOpt = False,
        max_ideals: MaxIdealsOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Check the DP small, then scale it up with a certified gap.

        Verify dp == CP-SAT on prefixes of the model with fewer devices and microbatches
        (rungs), then run the DP at full size and certify its gap with the lower bound of the
        path formulation (CP-SAT's where the path formulation does not apply).
        --in-flight schedule runs every solve under sec. 11's in-flight rule. With --uniform
        every rung and the full size solve the uniform problem (every stage the same t and
        d). --force and --max-ideals reach every DP solve as in solve (--force also the
        rungs' CP-SAT). Exit 1 when a rung is a mismatch."""
        from compare.experiments.ladder import run_ladder
        from piper_ilp.solution import Restrictions

        inst = load_with_overrides(instance, **cluster)

        def on_rung(r) -> None:
            # on stderr as each rung ends (a terminal or not): an interrupted ladder still
            # shows the rungs it finished
            stderr.print(
                f"rung {r.blocks} blocks ({r.nodes} nodes, K={r.K}, N={r.N}): {r.verdict} "
                f"({r.seconds:.2f} CPU s)",
                markup=False,
            )
            sys.stderr.flush()

        lad = run_ladder(
            inst,
            Restrictions(uniform=uniform),
            max_nodes=max_nodes,
            time_limit=time_limit,
            full_time_limit=full_time_limit,
            on_rung=on_rung,
            in_flight=in_flight.value if in_flight is not None else "piper",
            force=force,
            max_ideals=max_ideals,
        )
        if json_out:
            print_json_line(lad.to_dict())
            raise typer.Exit(lad.exit_code)
        stdout.print(
            f"{'blocks':>6} {'nodes':>5} {'K':>4} {'N':>4}  {'verdict':<12} {'optimum s':>12} "
            f"{'CPU s':>8}",
            markup=False,
        )
        for r in lad.rungs:  # labelled by blocks, as the progress lines are
            opt = "-" if r.optimum is None else f"{r.optimum:.6g}"
            stdout.print(
                f"{r.blocks:>6} {r.nodes:>5} {r.K:>4} {r.N:>4}  {r.verdict:<12} {opt:>12} "
                f"{r.seconds:>8.2f}",
                markup=False,
            )
        f = lad.full
        tps = "-" if f["tps"] is None else f"{f['tps']:.6g} s"
        stdout.print(
            f"full size ({len(inst.nodes)} nodes, K={inst.K}, N={inst.N}): DP {f['status']} TPS "
            f"{tps}; lower bound {f['bound']:.6g} s "
            f"({f.get('milp_method', 'cpsat')}: {f.get('milp_status')})",
            markup=False,
        )
        if lad.gap is not None:
            stdout.print(
                f"certified gap: {100 * lad.gap:.3g}% (the DP's plan is within this of the "
                "optimum)",
                markup=False,
            )
        raise typer.Exit(lad.exit_code)
