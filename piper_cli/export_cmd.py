"""``piper-ilp export``: a plan as Megatron-LM arguments or torchtitan settings (contract
sec. 12)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from piper_cli.common import (
    OUTPUT_PANEL,
    SETTINGS,
    IgnoreMetadataOpt,
    JsonOpt,
    cli_errors,
    fail,
    option,
    output_option,
    stderr,
    with_groups,
)
from piper_cli.evaluate_cmd import PlanArg, load_plan_settings

ExportOutputOpt = output_option("Write here instead of printing.")


def register(app: typer.Typer) -> None:
    @app.command("export")
    @cli_errors
    @with_groups
    def export_command(
        instance: Annotated[str, typer.Argument(help="Instance JSON written by from-config.")],
        plan: PlanArg,
        to: Annotated[
            str, option(OUTPUT_PANEL, "--to", metavar="NAME", help="megatron or torchtitan.")
        ],
        output: ExportOutputOpt = None,
        cluster: dict = SETTINGS,
        ignore_metadata: IgnoreMetadataOpt = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Turn PLAN into the framework's settings: Megatron-LM's command-line arguments
        (--to megatron) or torchtitan's parallelism TOML (--to torchtitan).

        A plan the framework cannot run (stages with different t or d, a stage that is
        not a run of layers, a model torchtitan has no modules for) is refused in one
        line, exit 2. A recomputation per layer that the framework cannot set is replaced
        by the best setting it can run that fits in memory, with comment lines (and a note
        on stderr) naming the stages that change and the cost; refused when none fits.
        The settings (K, M, N, B) and the mode are those the plan's metadata records (solve
        -o), else the instance file's, as for evaluate; a flag overrides either, and a note
        on stderr says where they came from when they are not the instance file's."""
        import json

        from compare.export import (
            FRAMEWORKS,
            megatron_arguments,
            megatron_text,
            plan_layout,
            torchtitan_toml,
        )
        from compare.export.torchtitan import torchtitan_settings
        from piper_ilp.files import atomic_write_text, check_writable
        from piper_ilp.instance import instance_from_dict
        from piper_ilp.jsonfile import read_json

        if to not in FRAMEWORKS:
            fail(f"error: --to {to!r}: choose {' or '.join(FRAMEWORKS)}")
        if output is not None:
            check_writable(output, "export", inputs={instance: "instance", plan: "plan"})
        got = load_plan_settings(instance, plan, cluster, {}, ignore_metadata)
        inst, p = got.instance, got.plan
        data = read_json(instance)
        file = instance_from_dict(data, source=instance)
        if (inst.K, inst.M, inst.N, inst.B) != (file.K, file.M, file.N, file.B):
            stderr.print(f"piper-ilp: note: {got.origin_line()}", markup=False)
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
