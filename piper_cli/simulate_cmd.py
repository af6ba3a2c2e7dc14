"""``piper-ilp simulate``: a discrete-event simulation of a plan's schedule, with a Gantt chart."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from piper_cli.common import (
    MODE,
    OUTPUT_PANEL,
    RUN_PANEL,
    SETTINGS,
    IgnoreMetadataOpt,
    JsonOpt,
    cli_errors,
    option,
    print_json_line,
    stdout,
    with_groups,
)
from piper_cli.evaluate_cmd import InstanceArg, PlanArg, in_flight_note, load_plan_settings


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @cli_errors
    @with_groups
    def simulate_command(
        instance: InstanceArg,
        plan: PlanArg,
        cluster: dict = SETTINGS,
        ignore_metadata: IgnoreMetadataOpt = False,
        mode_flags: dict = MODE.without("objective"),
        microbatches: Annotated[
            Optional[int],
            option(
                RUN_PANEL, "--microbatches", min=1, metavar="N", help="Default: N, or 8N for 1f1b."
            ),
        ] = None,
        forward_fraction: Annotated[
            float,
            option(RUN_PANEL, "--forward-fraction", metavar="F", help="Forward pass share (1/3)."),
        ] = 1.0 / 3.0,
        gantt: Annotated[
            Optional[str],
            option(OUTPUT_PANEL, "--gantt", metavar="FILE", help="Gantt chart (.png or .svg)."),
        ] = None,
        gantt_microbatches: Annotated[
            int,
            option(
                OUTPUT_PANEL, "--gantt-microbatches", min=1, metavar="N", help="Chart length (24)."
            ),
        ] = 24,
        json_out: JsonOpt = False,
    ) -> None:
        """Simulate a plan's pipeline schedule and compare it with the model.

        An event-by-event simulation: the steady-state period against max TPS, the batch time
        against sec. 9's formula, and each replica's peak microbatches in flight against the
        model's y. The settings and the mode are taken as by evaluate (the plan's metadata,
        else the instance file's; a flag overrides either). --microbatches defaults to N for
        the flush schedules and max(8N, 64) for 1f1b; --forward-fraction 1 makes one task
        per microbatch and stage; the chart covers the time --gantt-microbatches took."""
        from compare.experiments.plot import gantt_caption, gantt_chart
        from compare.simulation.simulate import simulate
        from piper_ilp.files import check_writable

        if gantt:
            check_writable(gantt, "Gantt chart", inputs={instance: "instance", plan: "plan"})
        got = load_plan_settings(instance, plan, cluster, mode_flags, ignore_metadata)
        inst, p, mode = got.instance, got.plan, got.mode
        schedule, pipeline = mode.schedule, mode.pipeline
        note = in_flight_note(p, mode)
        sim = simulate(
            inst,
            p,
            schedule=schedule,
            pipeline=pipeline,
            microbatches=microbatches,
            forward_fraction=forward_fraction,
            plan_source=plan,
            in_flight=mode.in_flight,
        )
        if gantt:
            finish: dict[int, float] = {}
            for t in sim.tasks:
                finish[t.mb] = max(finish.get(t.mb, 0.0), t.end)
            cut = sorted(finish.values())[min(gantt_microbatches, len(finish)) - 1]
            gantt_chart(sim, gantt, until=cut)
        if json_out:
            print_json_line({**sim.to_dict(), "settings_from": got.origin, "in_flight_note": note})
            return
        rule = "" if mode.in_flight == "piper" else f", in-flight budgets of rule {mode.in_flight}"
        got.print_header(
            f"{schedule}, {pipeline} pipeline{rule}, {sim.microbatches} microbatches simulated",
            note,
        )
        ratio = f"{sim.period / sim.max_tps:.4f}" if sim.max_tps > 0 else "-"
        stdout.print(
            f"period      {sim.period:.6g} s per microbatch (max TPS {sim.max_tps:.6g} s; ratio "
            f"{ratio})",
            markup=False,
        )
        if schedule == "1f1b" and sim.period < sim.max_tps * (1 - 1e-9):
            stdout.print(
                "            below max TPS, so not yet the steady state: simulate more "
                "--microbatches",
                markup=False,
            )
        stdout.print(
            f"batch time  {sim.batch_time:.6g} s simulated, {sim.model_batch_time:.6g} s by the "
            "model (sec. 9)",
            markup=False,
        )
        stdout.print("stage   d   t      TPS s  y model  peak in flight", markup=False)
        for s in sim.stages:
            flag = "  > model" if s["peak_in_flight"] > s["y_model"] else ""
            stdout.print(
                f"{s['stage']:5d} {s['d']:3d} {s['t']:3d} {s['tps']:10.4g} {s['y_model']:8d} "
                f"{s['peak_in_flight']:15d}{flag}",
                markup=False,
            )
        if gantt:
            caption = " ".join(gantt_caption(sim, until=cut).split())
            stdout.print(f"wrote {gantt}: {caption}", markup=False)
