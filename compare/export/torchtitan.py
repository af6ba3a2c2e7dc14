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
* ``activation_checkpoint``: ``mode`` ``none``, ``full`` (every layer) or ``selective``
  with ``selective_ac_option = "n"`` (full recomputation of every n-th layer of a stage;
  ``torchtitan/distributed/activation_checkpoint.py``, ``_apply_layer_sac``). torchtitan's
  other selective mode is op-level, not the attention core: for a plan with selective
  recomputation, or with any other choice of layers, the best of these settings on the
  plan's stages that fits in memory, with comment lines naming the stages that change and
  the cost (:mod:`compare.export.recompute`); refused when none fits.

Only Llama-shaped models (SwiGLU, RMSNorm, rotary positions, no biases, untied output) have
these module names; any other model is refused.
"""

from __future__ import annotations

import json

from compare.builders.transformer_costs import FULL, VANILLA
from compare.export.layout import ExportError, PlanLayout
from compare.export.recompute import Setting, Substitution, runnable_recomputation

__all__ = ["torchtitan_settings", "torchtitan_toml", "torchtitan_checkpointing"]


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


def torchtitan_checkpointing(layout: PlanLayout) -> list[Setting]:
    """The activation checkpointing torchtitan can run here, each with its
    ``[activation_checkpoint]`` values: none, full in every layer, and full in every n-th
    layer of each stage (``mode = "selective"``, ``selective_ac_option = "n"``: torchtitan
    counts the blocks a rank wraps and checkpoints those whose count is a multiple of n),
    n = 2 .. the most layers of a stage."""
    counts = [st.count for st in layout.stages]
    out = [
        Setting("no recomputation", tuple((VANILLA,) * n for n in counts), {"mode": "none"}),
        Setting(
            "full recomputation in every layer",
            tuple((FULL,) * n for n in counts),
            {"mode": "full"},
        ),
    ]
    for n in range(2, max(counts, default=0) + 1):
        options = tuple(
            tuple(FULL if (j + 1) % n == 0 else VANILLA for j in range(c)) for c in counts
        )
        out.append(
            Setting(
                f"full recomputation in layers {n}, {2 * n}, ... of each stage",
                options,
                {"mode": "selective", "selective_ac_option": str(n)},
            )
        )
    return out


def _checkpointing(layout: PlanLayout) -> tuple[dict, Substitution | None]:
    """``[activation_checkpoint]``: the setting that runs the plan's own choice, else the
    best that fits (:func:`~compare.export.recompute.runnable_recomputation`) and its
    substitution."""
    settings = torchtitan_checkpointing(layout)
    planned = tuple(st.options for st in layout.stages)
    for setting in settings:
        if setting.options == planned:
            return dict(setting.value), None
    sub = runnable_recomputation(layout, settings, "torchtitan")
    return dict(sub.setting.value), sub


def torchtitan_settings(layout: PlanLayout) -> dict:
    """The settings by TOML section: ``parallelism``, ``training``, ``activation_checkpoint``;
    and ``substitution`` and ``notes`` (as for Megatron-LM: None and [] when the
    checkpointing is the plan's own choice).

    Raises
    ------
    ExportError
        A model that is not Llama-shaped, or a plan whose recomputation torchtitan cannot
        run and for which neither of its modes fits in memory on every stage.
    """
    _check_model(layout)
    checkpointing, substitution = _checkpointing(layout)
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
        "activation_checkpoint": checkpointing,
        "substitution": substitution.to_dict() if substitution else None,
        "notes": substitution.notes() if substitution else [],
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
        f"{layout.tps:.6g} s per microbatch (piper-ilp's cost model)",
        "# data parallelism sharded d ways (FSDP): less memory per GPU than the plan assumes "
        "(whole copies), the same gradient bytes per batch",
        "# TOML as in torchtitan's train_configs (newer torchtitan: the same ParallelismConfig "
        "fields, in Python)",
    ]
    lines += settings["notes"]
    for section in ("parallelism", "training", "activation_checkpoint"):
        values = settings[section]
        lines.append("")
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
