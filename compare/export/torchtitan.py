"""A uniform plan as torchtitan's parallelism settings (``export --to torchtitan``).

The TOML fragment of torchtitan's job configuration (``[parallelism]``, ``[training]``,
``[activation_checkpoint]``), as its ``train_configs/*.toml`` read them up to commit
238fa99 (2026-02-23); later torchtitan builds the same ``ParallelismConfig`` fields in
Python (commit 9810191bb, "TOML to Python Dataclass Registry"), with the same names.

* ``pipeline_parallel_degree`` = stages, ``tensor_parallel_degree`` = t;
  ``data_parallel_shard_degree`` = d (FSDP) and ``data_parallel_replicate_degree`` = 1:
  torchtitan of the TOML era runs replicated data parallelism (DDP) only without tensor or
  pipeline parallelism ("DDP has not supported > 1D parallelism"), so the d replicas shard
  their weights, gradients and optimizer state. Each GPU then holds less than the plan's
  memory (which assumes whole copies: the plan fits), and a batch moves the same gradient
  bytes when parameters stay gathered across microbatches (torchtitan's default with
  pipeline parallelism): a reduce-scatter and an all-gather, an all-reduce's worth;
* ``module_fqns_per_model_part``: per stage, ``tok_embeddings``, ``layers.<i>`` (0-based),
  ``norm`` and ``output`` (torchtitan's Llama modules); ``pipeline_parallel_schedule`` 1F1B;
* ``pipeline_parallel_microbatch_size`` = b and ``training.local_batch_size`` = (N / d) b
  sequences per data-parallel replica, ``training.seq_len``;
* ``activation_checkpoint.mode``: ``none`` or ``full`` (every layer). torchtitan's
  ``selective`` is op-level or every n-th layer, not the attention core: a plan with
  selective recomputation, or with full recomputation on some layers only, is refused.

Only Llama-shaped models (SwiGLU, RMSNorm, rotary positions, no biases, untied output) have
these module names; any other model is refused.
"""

from __future__ import annotations

import json

from compare.builders.transformer_costs import FULL, SELECTIVE, VANILLA
from compare.export.layout import ExportError, PlanLayout
from compare.export.megatron import stage_mixes

__all__ = ["torchtitan_settings", "torchtitan_toml"]


def _check_model(layout: PlanLayout) -> None:
    cfg = layout.model.config
    odd = [
        what
        for what, bad in (
            ("a GeLU MLP", not cfg.gated_mlp),
            ("learned positions", cfg.learned_positions),
            ("LayerNorm", cfg.norm != "rmsnorm"),
            ("biases", cfg.bias),
            ("tied embeddings", cfg.tied_embeddings),
        )
        if bad
    ]
    if odd:
        raise ExportError(
            f"cannot export to torchtitan: its Llama model (tok_embeddings, layers, norm, output) "
            f"is not {cfg.name}, which has {', '.join(odd)}; export it --to megatron"
        )


def _checkpoint_mode(layout: PlanLayout) -> str:
    used = {o for st in layout.stages for o in st.options}
    if used <= {VANILLA}:
        return "none"
    if used == {FULL}:
        return "full"
    if SELECTIVE in used:
        raise ExportError(
            "cannot export to torchtitan: the plan recomputes the attention core (selective "
            "recomp); torchtitan's selective checkpointing is op-level or every n-th layer"
        )
    mixes = stage_mixes(layout)
    raise ExportError(
        "cannot export to torchtitan: it checkpoints every layer or none (mode full or none), "
        f"the plan recomputes some layers in full ({mixes}); solve with --exclude-option to "
        "keep one choice"
    )


def torchtitan_settings(layout: PlanLayout) -> dict:
    """The settings by TOML section: ``parallelism``, ``training``, ``activation_checkpoint``.

    Raises
    ------
    ExportError
        A model that is not Llama-shaped, or a recomputation torchtitan cannot express.
    """
    _check_model(layout)
    mode = _checkpoint_mode(layout)
    parts = []
    for st in layout.stages:
        names = ["tok_embeddings"] if st.embedding else []
        names += [f"layers.{i - 1}" for i in range(st.first, st.first + st.count)]
        names += ["norm", "output"] if st.head else []
        parts.append(names)
    b = layout.micro_batch_size
    return {
        "parallelism": {
            "data_parallel_replicate_degree": 1,
            "data_parallel_shard_degree": layout.d,
            "tensor_parallel_degree": layout.t,
            "pipeline_parallel_degree": layout.pp,
            "pipeline_parallel_schedule": "1F1B",
            "pipeline_parallel_microbatch_size": b,
            "module_fqns_per_model_part": parts,
        },
        "training": {
            "local_batch_size": layout.microbatches_per_replica * b,
            "seq_len": layout.model.seq_len,
        },
        "activation_checkpoint": {"mode": mode},
    }


def _toml_value(x) -> str:
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, list):
        return "[" + ", ".join(_toml_value(v) for v in x) + "]"
    return str(x)


def torchtitan_toml(layout: PlanLayout) -> str:
    """The settings as a TOML fragment, with comment lines on what they assume."""
    settings = torchtitan_settings(layout)
    m = layout.model
    lines = [
        f"# torchtitan settings for {m.config.name}: {layout.pp} pipeline stages x tensor "
        f"parallel {layout.t} x data parallel {layout.d} = {layout.world_size} GPUs (NGPU)",
        f"# layers per stage: {', '.join(map(str, layout.layer_counts()))}; planned TPS "
        f"{layout.tps * 1e3:.6g} ms per microbatch (piper-ilp's cost model)",
        "# data parallelism sharded d ways (FSDP): less memory per GPU than the plan assumes "
        "(whole copies), the same gradient bytes per batch",
        "# TOML as in torchtitan's train_configs (newer torchtitan: the same ParallelismConfig "
        "fields, in Python)",
    ]
    for section, values in settings.items():
        lines.append("")
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
