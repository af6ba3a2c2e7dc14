"""``piper-ilp evaluate INSTANCE PLAN``: check a plan and report its TPS."""

from __future__ import annotations

from typing import Annotated

import typer

from piper_cli.common import (
    BandwidthOpt,
    BatchOpt,
    DevicesOpt,
    InFlightOpt,
    JsonOpt,
    MemoryOpt,
    ObjectiveOpt,
    PipelineOpt,
    ScheduleOpt,
    cli_errors,
    fail,
    load_with_overrides,
    mode_from_flags,
    print_json_line,
    stdout,
)
from piper_cli.format import settings_line, stage_table


def evaluation_to_dict(instance, plan_path: str, ev) -> dict:
    return {
        "instance": instance.source,
        "plan": plan_path,
        "settings": {"K": instance.K, "M": instance.M, "N": instance.N, "B": instance.B},
        "mode": ev.mode.to_dict(),
        "valid": ev.valid,
        "objective": ev.value,
        "tps": ev.tps,
        "batch_time": ev.batch_time,
        "devices": ev.devices,
        "sum_d": ev.sum_d,
        "bottleneck": ev.bottleneck,
        "stages": [
            {
                "index": r.index,
                "nodes": list(r.nodes),
                "d": r.d,
                "t": r.t,
                "s": r.s,
                "h": r.s,
                "y": r.y,
                "successors": list(r.successors),
                "memory": r.memory,
                "memory_limit": r.memory_limit,
                "compute": r.cost.compute if r.cost else None,
                "edge": r.cost.edge if r.cost else None,
                "resync": r.cost.resync if r.cost else None,
                "tps": r.cost.tps if r.cost else None,
            }
            for r in ev.stages
        ],
        "violations": [
            {"rule": v.rule, "stage": v.stage, "node": v.node, "message": v.message}
            for v in ev.violations
        ],
    }


IgnoreMetadataOpt = Annotated[
    bool,
    typer.Option(
        "--ignore-metadata",
        help="Go on even when the plan was made for another instance or other settings.",
    ),
]


def load_matching_plan(inst, plan: str, ignore_metadata: bool):
    """Load PLAN and refuse, in one line (exit 2), a plan that does not belong to ``inst``
    (its metadata names another model or other K, M, N, B, or its node ids differ)."""
    from piper_ilp.evaluate import check_plan_matches
    from piper_ilp.plan import load_plan

    p = load_plan(plan)
    if not ignore_metadata:
        mismatch = check_plan_matches(inst, p)
        if mismatch is not None:
            fail(f"error: {plan}: {mismatch} (--ignore-metadata goes on anyway)", 2)
    return p


def _records_mode(plan) -> bool:
    """True when the plan's metadata names a pipelining, objective, schedule or in-flight rule."""
    from piper_ilp.mode import MODE_KEYS

    return any((plan.metadata or {}).get(k) is not None for k in MODE_KEYS)


def in_flight_note(plan, recorded, mode) -> str | None:
    """One line when ``plan`` was made under another in-flight rule (contract sec. 11) than
    the one ``mode`` judges it by, else None. A plan whose metadata records a mode but no
    rule was made before the rule existed: under ``piper``. A plan without a recorded mode
    says nothing."""
    if not _records_mode(plan) or recorded.in_flight == mode.in_flight:
        return None
    return (
        f"the plan was made under --in-flight {recorded.in_flight} and is judged here under "
        f"--in-flight {mode.in_flight}: its y, memory and batch limit are those of {mode.in_flight}"
    )


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @cli_errors
    def evaluate_command(
        instance: Annotated[str, typer.Argument(help="Instance JSON file.")],
        plan: Annotated[str, typer.Argument(help="Plan JSON file (either TMPCids form).")],
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
        json_out: JsonOpt = False,
        ignore_metadata: IgnoreMetadataOpt = False,
        pipeline: PipelineOpt = None,
        objective: ObjectiveOpt = None,
        schedule: ScheduleOpt = None,
        in_flight: InFlightOpt = None,
    ) -> None:
        """Check PLAN against INSTANCE (cost model sec. 2) and print its per-stage TPS (sec. 3).

        The plan is judged in the mode its metadata records (solve -o writes it: the
        pipelining, objective, schedule and in-flight rule it was solved for; secs. 8, 9,
        11), or in the default mode when it records none; --pipeline, --objective,
        --schedule and --in-flight override those parts (judged under another in-flight
        rule than it was made for, a note says so). The table shows each stage's
        microbatches in flight h (q under --in-flight schedule) and held y (and, under
        graph pipelining, its successors); the plan's TPS and its batch time with a flush
        (sec. 9) are both printed.

        Exit 0 for a valid plan, 1 for an invalid one (every violated rule is listed),
        2 for bad input, and 2 (one line) for a plan that does not belong to the
        instance: its metadata names another model or other K, M, N, B, or, with no
        metadata, its node ids are not the instance's (--ignore-metadata evaluates anyway).
        """
        from piper_ilp.evaluate import RULES, evaluate
        from piper_ilp.mode import Mode

        inst = load_with_overrides(instance, devices, memory, batch, bandwidth)
        p = load_matching_plan(inst, plan, ignore_metadata)
        recorded = Mode.from_dict(p.metadata)
        mode = mode_from_flags(pipeline, objective, schedule, base=recorded, in_flight=in_flight)
        given = any(x is not None for x in (pipeline, objective, schedule, in_flight))
        ev = evaluate(inst, p, mode)
        note = in_flight_note(p, recorded, mode)
        if json_out:
            print_json_line({**evaluation_to_dict(inst, plan, ev), "in_flight_note": note})
        else:
            stdout.print(f"{inst.source}: {settings_line(inst)}", markup=False)
            source = (
                "from the flags"
                if given and mode != recorded
                else "recorded in the plan"
                if _records_mode(p)
                else "the default"
            )
            stdout.print(
                f"plan {plan}: {len(p.stages)} stages, {ev.devices} devices, sum d = {ev.sum_d}; "
                f"mode {mode.label} ({source})",
                markup=False,
            )
            if note:
                stdout.print(f"note: {note}", markup=False)
            stdout.print(stage_table(ev, flow=True))
            if ev.valid:
                tps = f"TPS {ev.tps:.12g} s per sample (stage {ev.bottleneck} is the bottleneck)"
                batch = (
                    f"batch time {ev.batch_time:.12g} s (N = {inst.N} microbatches, a flush "
                    "per batch)"
                )
                first, second = (batch, tps) if mode.batch_time else (tps, batch)
                stdout.print(f"valid plan, {first}; {second}", markup=False)
            else:
                stdout.print(f"INVALID plan: {len(ev.violations)} violation(s)", markup=False)
                for v in ev.violations:
                    stdout.print(f"  {v}  [{RULES[v.rule]}]", markup=False)
        if not ev.valid:
            raise typer.Exit(1)
