"""``piper-ilp simulate``: a discrete-event simulation of a plan's schedule, with a Gantt chart."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from piper_cli.common import (
    BandwidthOpt,
    BatchOpt,
    DevicesOpt,
    InFlightOpt,
    JsonOpt,
    MemoryOpt,
    PipelineOpt,
    ScheduleOpt,
    cli_errors,
    print_json_line,
    stdout,
)
from piper_cli.evaluate_cmd import IgnoreMetadataOpt, in_flight_note, load_plan_settings


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @cli_errors
    def simulate_command(
        instance: Annotated[str, typer.Argument(help="Instance JSON.")],
        plan: Annotated[str, typer.Argument(help="Plan JSON (e.g. from solve -o).")],
        schedule: ScheduleOpt = None,
        in_flight: InFlightOpt = None,
        pipeline: PipelineOpt = None,
        microbatches: Annotated[
            Optional[int],
            typer.Option(
                "--microbatches",
                min=1,
                help="Microbatches to simulate (default: N for the flush schedules, max(8N, 64) "
                "for 1f1b).",
                show_default=False,
            ),
        ] = None,
        forward_fraction: Annotated[
            float,
            typer.Option(
                "--forward-fraction",
                help="Share of a microbatch's work done in the forward pass (1 = one task per "
                "microbatch and stage).",
            ),
        ] = 1.0 / 3.0,
        gantt: Annotated[
            Optional[str],
            typer.Option("--gantt", help="Write a Gantt chart (.png or .svg).", show_default=False),
        ] = None,
        gantt_microbatches: Annotated[
            int,
            typer.Option(
                "--gantt-microbatches",
                min=1,
                help="Draw the chart up to the time this many microbatches took.",
            ),
        ] = 24,
        json_out: JsonOpt = False,
        ignore_metadata: IgnoreMetadataOpt = False,
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
    ) -> None:
        """Simulate a plan's pipeline schedule and compare it with the model.

        An event-by-event simulation: the steady-state period against max TPS, the batch time
        against sec. 9's formula, and each replica's peak microbatches in flight against the
        model's y. The settings (K, M, N, B, the schedule, the pipelining and the in-flight
        rule, sec. 11: the budgets y the replicas keep) are those the plan's metadata
        records (solve -o), else the instance file's, 1f1b, sequential and piper; a flag
        overrides either, and the output says where each came from (a rule other than the
        recorded one is named in a note)."""
        from compare.experiments.plot import gantt_caption, gantt_chart
        from compare.simulation.simulate import simulate
        from piper_ilp.files import check_writable

        if gantt:
            check_writable(gantt, "Gantt chart", inputs={instance: "instance", plan: "plan"})
        got = load_plan_settings(
            instance,
            plan,
            dict(devices=devices, memory=memory, batch=batch, bandwidth=bandwidth),
            dict(pipeline=pipeline, schedule=schedule, in_flight=in_flight),
            ignore_metadata,
        )
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
        stdout.print(f"{inst.source}: {got.origin_line()}", markup=False)
        rule = "" if mode.in_flight == "piper" else f", in-flight budgets of rule {mode.in_flight}"
        stdout.print(
            f"{schedule}, {pipeline} pipeline{rule}, {sim.microbatches} microbatches simulated",
            markup=False,
        )
        if note:
            stdout.print(f"note: {note}", markup=False)
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
