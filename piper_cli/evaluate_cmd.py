"""``piper-ilp evaluate INSTANCE PLAN``: check a plan and report its TPS."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from piper_cli.common import (
    MODE,
    SETTINGS,
    IgnoreMetadataOpt,
    JsonOpt,
    cli_errors,
    fail,
    load_with_settings,
    mode_from_flags,
    print_json_line,
    read_overrides,
    stdout,
    with_groups,
)
from piper_cli.format import plural, settings_origin_line, stage_table

InstanceArg = Annotated[str, typer.Argument(help="Instance JSON file.")]
PlanArg = Annotated[str, typer.Argument(help="Plan JSON file (e.g. from solve -o).")]


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


@dataclass
class PlanSettings:
    """A plan with the instance and mode it is judged by (:func:`load_plan_settings`):
    ``origin`` maps each setting's name (K, M, N, B and the parts of the mode) to where
    its value came from (a key of :data:`piper_cli.format.ORIGINS`)."""

    instance: Any
    plan: Any
    mode: Any
    origin: dict[str, str]

    def origin_line(self) -> str:
        """``settings from the plan's metadata: K=8 ...; from the flags: ...``."""
        return settings_origin_line(self.instance, self.mode.to_dict(), self.origin)

    def print_header(self, line: str, note: str | None) -> None:
        """What evaluate and simulate print first: the instance and :meth:`origin_line`,
        then ``line`` (what is judged), then ``note`` (:func:`in_flight_note`) if any."""
        stdout.print(f"{self.instance.source}: {self.origin_line()}", markup=False)
        stdout.print(line, markup=False)
        if note:
            stdout.print(f"note: {note}", markup=False)


def load_plan_settings(
    instance: str,
    plan: str,
    overrides: dict[str, str | None],
    mode_flags: dict[str, Any],
    ignore_metadata: bool,
) -> PlanSettings:
    """Load INSTANCE and PLAN and settle the settings the plan is judged by: every setting
    the plan's metadata records (K, M, N, B and the mode: :meth:`Settings.from_metadata`),
    the instance file's (or the default mode) for the others, a flag over either.

    ``overrides`` are the raw texts of --devices, --memory, --batch, --bandwidth by
    :func:`piper_cli.common.read_overrides`'s keywords; ``mode_flags`` the mode flags by
    :func:`piper_cli.common.mode_from_flags`'s keywords (None: not given). A plan made for
    another model (or, without metadata, naming other node ids) is refused in one line, exit
    2, unless ``ignore_metadata``, which also leaves the recorded settings unused.
    """
    from piper_ilp.evaluate import check_plan_matches
    from piper_ilp.plan import load_plan
    from piper_ilp.settings import Settings

    flags = Settings(overrides=read_overrides(**overrides))  # checked before any file is read
    base = load_with_settings(instance, Settings())
    p = load_plan(plan)
    recorded = Settings() if ignore_metadata else Settings.from_metadata(p.metadata, plan)
    if not ignore_metadata:
        mismatch = check_plan_matches(recorded.apply(base), p)
        if mismatch is not None:
            fail(f"error: {plan}: {mismatch} (--ignore-metadata goes on anyway)", 2)
    mode = mode_from_flags(**mode_flags, base=recorded.mode)
    settings = recorded.replace(overrides={**recorded.overrides, **flags.overrides}, mode=mode)
    meta = {} if ignore_metadata else (p.metadata or {})
    origin = {
        name: "flags"
        if name in flags.overrides
        else "metadata"
        if name in recorded.overrides
        else "instance"
        for name in SETTING_NAMES
    }
    for name in mode.to_dict():
        given = mode_flags.get(name) is not None
        origin[name] = "flags" if given else "metadata" if meta.get(name) is not None else "default"
    return PlanSettings(settings.apply(base), p, mode, origin)


#: The cluster settings by name (piper_ilp.instance.SETTING_OPTIONS's keys, written out so
#: that --help does not load the core).
SETTING_NAMES = ("K", "M", "N", "B")


def _records_mode(plan) -> bool:
    """True when the plan's metadata names a pipelining, objective, schedule or in-flight rule."""
    from piper_ilp.mode import MODE_KEYS

    return any((plan.metadata or {}).get(k) is not None for k in MODE_KEYS)


def in_flight_note(plan, mode) -> str | None:
    """One line when ``plan`` was made under another in-flight rule (contract sec. 11) than
    the one ``mode`` judges it by, else None. A plan whose metadata records a mode but no
    rule was made before the rule existed: under ``piper``. A plan without a recorded mode
    says nothing."""
    from piper_ilp.mode import Mode

    recorded = Mode.from_dict(plan.metadata)
    if not _records_mode(plan) or recorded.in_flight == mode.in_flight:
        return None
    return (
        f"the plan was made under --in-flight {recorded.in_flight} and is judged here under "
        f"--in-flight {mode.in_flight}: its y, memory and batch limit are those of {mode.in_flight}"
    )


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    @cli_errors
    @with_groups
    def evaluate_command(
        instance: InstanceArg,
        plan: PlanArg,
        cluster: dict = SETTINGS,
        ignore_metadata: IgnoreMetadataOpt = False,
        mode_flags: dict = MODE,
        json_out: JsonOpt = False,
    ) -> None:
        """Check PLAN against INSTANCE (cost model sec. 2) and print its per-stage TPS (sec. 3).

        The plan is judged with the settings its metadata records (K, M, N, B and the
        mode, written by solve -o), the instance file's or the default mode for the
        others; a flag overrides either, and the first line says where each came from.
        The table shows each stage's microbatches in flight h and held y, and the plan's
        TPS and batch time (sec. 9). More: docs/usage.md.

        Exit 0 for a valid plan, 1 for an invalid one (every violated rule is listed),
        2 for bad input, and 2 (one line) for a plan that does not belong to the
        instance: its metadata names another model, or, with no metadata, its node ids
        are not the instance's (--ignore-metadata evaluates anyway).
        """
        from piper_ilp.evaluate import RULES, evaluate

        got = load_plan_settings(instance, plan, cluster, mode_flags, ignore_metadata)
        inst, p, mode = got.instance, got.plan, got.mode
        ev = evaluate(inst, p, mode)
        note = in_flight_note(p, mode)
        if json_out:
            print_json_line(
                {
                    **evaluation_to_dict(inst, plan, ev),
                    "settings_from": got.origin,
                    "in_flight_note": note,
                }
            )
        else:
            got.print_header(
                f"plan {plan}: {plural(len(p.stages), 'stage')}, {ev.devices} devices, "
                f"sum d = {ev.sum_d}; mode {mode.label}",
                note,
            )
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
