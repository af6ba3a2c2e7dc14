"""``piper-ilp export``: a plan as Megatron-LM arguments or torchtitan settings (contract
sec. 12)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import (
    BandwidthOpt,
    BatchOpt,
    DevicesOpt,
    JsonOpt,
    MemoryOpt,
    cli_errors,
    fail,
    stderr,
)


def register(app: typer.Typer) -> None:
    @app.command("export")
    @cli_errors
    def export_command(
        instance: Annotated[str, typer.Argument(help="Instance JSON written by from-config.")],
        plan: Annotated[str, typer.Argument(help="Plan JSON (solve -o).")],
        to: Annotated[str, typer.Option("--to", help="megatron or torchtitan.")],
        output: Annotated[
            Optional[Path],
            typer.Option(
                "--output", "-o", help="Write to this file instead of printing.", show_default=False
            ),
        ] = None,
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Turn PLAN into the framework's settings: Megatron-LM's command-line arguments
        (--to megatron) or torchtitan's parallelism TOML (--to torchtitan). A plan the
        framework cannot run (stages with different t or d, a stage that is not a run of
        layers, a model torchtitan has no modules for) is refused in one line, exit 2. A
        recomputation per layer that the framework cannot set is replaced by the best
        setting it can run that fits in memory, with comment lines (and a note on stderr)
        naming the stages that change and the cost; refused when none fits. The settings
        (-K, -M, -N, -B) must be those the plan was solved for."""
        import json

        from compare.export import (
            FRAMEWORKS,
            megatron_arguments,
            megatron_text,
            plan_layout,
            torchtitan_toml,
        )
        from compare.export.torchtitan import torchtitan_settings
        from piper_ilp.evaluate import check_plan_matches
        from piper_ilp.files import atomic_write_text, check_writable
        from piper_ilp.instance import instance_from_dict, parse_setting
        from piper_ilp.jsonfile import read_json
        from piper_ilp.plan import load_plan

        if to not in FRAMEWORKS:
            fail(f"error: --to {to!r}: choose {' or '.join(FRAMEWORKS)}")
        if output is not None:
            check_writable(output, "export", inputs={instance: "instance", plan: "plan"})
        data = read_json(instance)
        given = {
            name: parse_setting(name, text)
            for name, text in (("K", devices), ("M", memory), ("N", batch), ("B", bandwidth))
            if text is not None
        }
        inst = instance_from_dict(data, source=instance).with_settings(**given)
        p = load_plan(plan)
        mismatch = check_plan_matches(inst, p)
        if mismatch is not None:
            fail(f"error: {plan}: {mismatch}")
        layout = plan_layout(data, inst, p, to)
        settings = megatron_arguments(layout) if to == "megatron" else torchtitan_settings(layout)
        if json_out:
            text = json.dumps({"framework": to, **settings}) + "\n"
        else:
            text = megatron_text(layout) if to == "megatron" else torchtitan_toml(layout)
        if output is not None:
            atomic_write_text(output, text)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
        if settings["substitution"] is not None:  # not what was planned: say so off the output
            stderr.print(f"piper-ilp: note: {settings['substitution']['summary']}", markup=False)
