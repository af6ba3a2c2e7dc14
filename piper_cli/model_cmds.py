"""``piper-ilp from-config``: an instance from a transformer's configuration (contract
sec. 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import (
    INPUT_PANEL,
    OUTPUT_PANEL,
    SETTINGS,
    JsonOpt,
    cli_errors,
    fail,
    note_bare_sizes,
    option,
    print_json_line,
    stdout,
    with_groups,
)
from piper_cli.format import raw_and_human


def _list_presets() -> None:
    from compare.builders import transformer_costs as tc
    from compare.builders.hardware import HARDWARE_PRESETS
    from compare.builders.transformer import MODEL_PRESETS

    stdout.print("models (MODEL):", markup=False)
    for name, c in MODEL_PRESETS.items():
        mlp = "SwiGLU" if c.gated_mlp else "GeLU"
        stdout.print(
            f"  {name:<12} {tc.model_parameters(c) / 1e9:7.2f}e9 parameters, "
            f"{c.num_layers} layers, h {c.hidden_size}, {c.num_heads} heads ({c.num_kv_heads} "
            f"kv), MLP {c.intermediate_size} {mlp}, vocabulary {c.vocab_size}, seq_len {c.seq_len}",
            markup=False,
        )
    stdout.print("hardware (--hardware):", markup=False)
    for name, hw in HARDWARE_PRESETS.items():
        stdout.print(
            f"  {name:<12} {hw.peak_flops / 1e12:g} TFLOP/s, {hw.hbm_bytes / 1e9:g} GB, NVLink "
            f"{hw.nvlink_bandwidth / 1e9:g} GB/s, network {hw.network_bandwidth / 1e9:g} GB/s per "
            f"GPU, {hw.gpus_per_node} GPUs per node",
            markup=False,
        )


def _count_text(n: float) -> str:
    """A parameter count as the docs write it: 68.98e9 (in billions from 1e9 to 1e13),
    else in plain scientific notation.

    >>> _count_text(68_976_648_192), _count_text(39), _count_text(8.192e23)
    ('68.98e9', '39', '8.192e+23')
    """
    if 1e9 <= n < 1e13:
        return f"{n / 1e9:.4g}e9"
    return f"{n:.4g}"


def _tp_list(text: str | None) -> tuple[int, ...] | None:
    from piper_ilp.errors import InputError

    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise InputError(
            f"--tp-degrees: a comma-separated list of whole numbers, got {text!r}"
        ) from None


def register(app: typer.Typer) -> None:
    @app.command("from-config")
    @cli_errors
    @with_groups
    def from_config_command(
        model: Annotated[
            Optional[str],
            typer.Argument(
                help="A preset (see --list) or a Hugging Face style config.json.",
                show_default=False,
            ),
        ] = None,
        hardware: Annotated[
            Optional[str],
            option(
                INPUT_PANEL,
                "--hardware",
                help="A preset (see --list) or a JSON file.",
                metavar="NAME",
            ),
        ] = None,
        seq_len: Annotated[
            Optional[int],
            option(
                INPUT_PANEL, "--seq-len", help="Tokens per sequence (model's context).", metavar="N"
            ),
        ] = None,
        micro_batch_size: Annotated[
            int,
            option(
                INPUT_PANEL,
                "--micro-batch-size",
                help="Sequences per microbatch b (1).",
                metavar="B",
            ),
        ] = 1,
        efficiency: Annotated[
            float,
            option(
                INPUT_PANEL,
                "--efficiency",
                help="Share of peak FLOP/s, in (0, 1] (0.5).",
                metavar="F",
            ),
        ] = 0.5,
        tp_degrees: Annotated[
            Optional[str],
            option(INPUT_PANEL, "--tp-degrees", help="Degrees t offered (below).", metavar="LIST"),
        ] = None,
        cluster: dict = SETTINGS,
        output: Annotated[
            Optional[Path],
            option(OUTPUT_PANEL, "--output", "-o", help="The instance JSON.", metavar="FILE"),
        ] = None,
        list_presets: Annotated[
            bool,
            option(OUTPUT_PANEL, "--list", help="List the model and hardware presets."),
        ] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Write an instance (cost model secs. 1 and 12) from a decoder-only transformer's
        configuration, with no profiler: node 0 the embedding, 1..L the layers (options
        vanilla, selective recomp, activation recomp per t), L+1 the final norm, output
        layer and loss. K defaults to one node, M to the GPU's memory, N to K and B to the
        network bandwidth per GPU. --tp-degrees defaults to the degrees that fit a node
        and divide the heads. --json prints one summary object."""
        devices, memory, batch, bandwidth = (cluster[k] for k in SETTINGS.params)
        import json

        from compare.builders import transformer_costs as tc
        from compare.builders.hardware import load_hardware
        from compare.builders.transformer import load_model, transformer_instance
        from piper_ilp.errors import InputError
        from piper_ilp.files import atomic_write_text, check_writable
        from piper_ilp.instance import instance_from_dict, parse_setting

        if list_presets:
            _list_presets()
            return
        if model is None or hardware is None or output is None:
            fail("error: from-config needs MODEL, --hardware and -o (or --list)")
        inputs = {
            p: what for p, what in ((model, "config"), (hardware, "hardware")) if Path(p).exists()
        }
        check_writable(output, "instance", inputs=inputs)
        note_bare_sizes(memory=[memory], bandwidth=[bandwidth])
        settings = {
            k: parse_setting(name, text)
            for k, name, text in (
                ("devices", "K", devices),
                ("memory", "M", memory),
                ("batch", "N", batch),
                ("bandwidth", "B", bandwidth),
            )
            if text is not None
        }
        cfg, hw = load_model(model), load_hardware(hardware)
        data = transformer_instance(
            cfg,
            hw,
            seq_len=seq_len,
            micro_batch_size=micro_batch_size,
            efficiency=efficiency,
            tp_degrees=_tp_list(tp_degrees),
            **settings,
        )
        try:  # what solve will read: every derived number within the supported range
            inst = instance_from_dict(data, source=f"{model} on {hw.name}")
        except InputError as exc:
            raise InputError(
                f"{exc} (derived by from-config from the model's sizes, the hardware, --seq-len "
                "and --micro-batch-size)"
            ) from None
        atomic_write_text(output, json.dumps(data, indent=1) + "\n")
        sec = data["model"]
        summary = {
            "model": cfg.name,
            "parameters": sec["parameters"],
            "peak_flops": hw.peak_flops,
            "layers": cfg.num_layers,
            "nodes": len(inst.nodes),
            "seq_len": sec["seq_len"],
            "micro_batch_size": micro_batch_size,
            "hardware": hw.to_dict(),
            "efficiency": efficiency,
            "tp_degrees": inst.t_values,
            "flops_per_microbatch": tc.model_training_flops(cfg, micro_batch_size, sec["seq_len"]),
            "settings": {"K": inst.K, "M": inst.M, "N": inst.N, "B": inst.B},
            "output": str(output),
        }
        if json_out:
            print_json_line(summary)
            return
        stdout.print(
            f"{output}: {cfg.name}, {_count_text(summary['parameters'])} parameters, "
            f"{len(inst.nodes)} nodes (embedding, {cfg.num_layers} layers, head), seq_len "
            f"{summary['seq_len']}, micro-batch {micro_batch_size}; {hw.name} at efficiency "
            f"{efficiency:g}, t in {inst.t_values}; {raw_and_human(inst)}",
            markup=False,
        )
