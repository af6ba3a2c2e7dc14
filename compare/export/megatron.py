"""A uniform plan as Megatron-LM's command-line arguments (``export --to megatron``).

The arguments are current Megatron-LM's (``megatron/training/arguments.py`` and the
``TransformerConfig`` / ``ModelParallelConfig`` fields it turns into options, read at
commit d98e8a64ddf3, 2026-08-22; ``docs/from-config.md`` lists them):

* ``--tensor-model-parallel-size t``, ``--pipeline-model-parallel-size`` (the stages); the
  data-parallel size is not an argument: Megatron-LM takes world size / (t x stages), so
  the plan runs on stages x t x d GPUs;
* ``--num-layers``; layers per stage: nothing when every stage holds L / stages,
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` when only
  the first and last differ (each >= 1, the middle stages equal), else
  ``--pipeline-model-parallel-layout`` ("E" embedding, "t" a layer, "L" the loss with the
  final norm and output layer, stages split by "|", ``t*5`` five layers);
* ``--micro-batch-size b``, ``--global-batch-size N b``, ``--sequence-parallel`` with t > 1;
* recomputation, which Megatron-LM sets once for every stage: none; ``--recompute-granularity
  selective`` (the attention core, every layer); ``full`` with ``--recompute-method uniform
  --recompute-num-layers 1`` (every layer); ``full`` with ``--recompute-method block
  --recompute-num-layers k`` (the first k layers of each stage, min(k, its layers)). Any
  other mix is refused, naming the stages.
"""

from __future__ import annotations

from compare.builders.transformer_costs import FULL, SELECTIVE, VANILLA
from compare.export.layout import ExportError, PlanLayout

__all__ = ["megatron_arguments", "megatron_text", "pipeline_layout_string", "stage_mixes"]


def _stage_mix(st) -> str:
    counts = st.option_counts()
    return " + ".join(f"{counts[o]} {o}" for o in (VANILLA, SELECTIVE, FULL) if o in counts)


def stage_mixes(layout: PlanLayout) -> str:
    """Each run of stages with the same options: "stages 0-1: 4 vanilla + 1 selective
    recomp; stages 2-15: 5 vanilla" (stages without layers left out)."""
    runs: list[list] = []
    for st in layout.stages:
        if not st.count:
            continue
        mix = _stage_mix(st)
        if runs and runs[-1][2] == mix and runs[-1][1] == st.index - 1:
            runs[-1][1] = st.index
        else:
            runs.append([st.index, st.index, mix])
    return "; ".join(f"stage {a}: {m}" if a == b else f"stages {a}-{b}: {m}" for a, b, m in runs)


def recompute_arguments(layout: PlanLayout) -> tuple[list[str], str]:
    """Megatron-LM's recomputation arguments for the plan, and a note ("" or one line on
    which layers the block method recomputes).

    Raises
    ------
    ExportError
        A mix Megatron-LM cannot express: selective recomputation next to another choice,
        or full recomputation on a number of layers per stage that is not min(k, its layers)
        for one k (the message names the stages).
    """
    used = {o for st in layout.stages for o in st.options}
    if used <= {VANILLA}:
        return [], ""
    if used == {SELECTIVE}:
        return ["--recompute-granularity selective"], ""
    if used == {FULL}:
        return [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ], ""
    mixes = stage_mixes(layout)
    if SELECTIVE in used:
        raise ExportError(
            "cannot export to Megatron-LM: it recomputes one way in every layer "
            f"(--recompute-granularity), but the plan mixes them ({mixes}); solve with "
            "--exclude-option to keep one choice (e.g. --exclude-option vanilla "
            "--exclude-option 'activation recomp' for selective everywhere)"
        )
    # full and vanilla: the block method recomputes the first min(k, n) layers of a stage
    fulls = [st.option_counts().get(FULL, 0) for st in layout.stages]
    k = max(fulls)
    if any(f != min(k, st.count) for f, st in zip(fulls, layout.stages)):
        raise ExportError(
            "cannot export to Megatron-LM: --recompute-method block recomputes the first k "
            f"layers of every stage, but the plan recomputes different numbers ({mixes})"
        )
    first = all(
        all((o == FULL) == (j < k) for j, o in enumerate(st.options)) for st in layout.stages
    )
    if not first and not layout.identical_layers:
        raise ExportError(
            "cannot export to Megatron-LM: --recompute-method block recomputes the first "
            f"{k} layers of each stage, the plan other ones, and its layers differ"
        )
    note = "" if first else (
        f"# block recomputation: the first {k} layers of each stage (the plan picks others of "
        "its identical layers: the same time and memory)"
    )  # fmt: skip
    return [
        "--recompute-granularity full",
        "--recompute-method block",
        f"--recompute-num-layers {k}",
    ], note


def pipeline_layout_string(layout: PlanLayout) -> str:
    """The ``--pipeline-model-parallel-layout`` value of the plan's stages.

    >>> from types import SimpleNamespace as S
    >>> pipeline_layout_string(S(stages=[S(embedding=True, count=3, head=False),
    ...     S(embedding=False, count=1, head=False), S(embedding=False, count=0, head=True)]))
    'Et*3|t|L'
    """
    parts = []
    for st in layout.stages:
        body = "t" if st.count == 1 else f"t*{st.count}" if st.count > 1 else ""
        parts.append(("E" if st.embedding else "") + body + ("L" if st.head else ""))
    return "|".join(parts)


def layer_split_arguments(layout: PlanLayout) -> list[str]:
    """How Megatron-LM is told each stage's layers (see the module docstring)."""
    n = layout.layer_counts()
    P = len(n)
    if P == 1 or len(set(n)) == 1:
        return []
    middle = set(n[1:-1])
    if len(middle) <= 1 and n[0] >= 1 and n[-1] >= 1:
        m = middle.pop() if middle else None
        out = []
        if m is None or n[0] != m:
            out.append(f"--decoder-first-pipeline-num-layers {n[0]}")
        if m is None or n[-1] != m:
            out.append(f"--decoder-last-pipeline-num-layers {n[-1]}")
        return out
    return [f'--pipeline-model-parallel-layout "{pipeline_layout_string(layout)}"']


def model_arguments(layout: PlanLayout) -> list[str]:
    """The model's shape, as the instance was built (so that Megatron-LM trains the model
    that was planned)."""
    cfg, s = layout.model.config, layout.model.seq_len
    out = [
        f"--num-layers {cfg.num_layers}",
        f"--hidden-size {cfg.hidden_size}",
        f"--ffn-hidden-size {cfg.intermediate_size}",
        f"--num-attention-heads {cfg.num_heads}",
    ]
    if cfg.head_dim * cfg.num_heads != cfg.hidden_size:
        out.append(f"--kv-channels {cfg.head_dim}")
    if cfg.num_kv_heads != cfg.num_heads:
        out += ["--group-query-attention", f"--num-query-groups {cfg.num_kv_heads}"]
    out += [f"--seq-length {s}", f"--max-position-embeddings {cfg.max_positions}"]
    if cfg.gated_mlp:
        out.append("--swiglu")
    if cfg.norm == "rmsnorm":
        out.append("--normalization RMSNorm")
    if not cfg.learned_positions:
        out.append("--position-embedding-type rope")
    if not cfg.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if not cfg.bias:
        out.append("--disable-bias-linear")
    if not cfg.dropout:
        out += ["--attention-dropout 0", "--hidden-dropout 0"]
    out.append("--bf16")
    return out


def megatron_arguments(layout: PlanLayout) -> dict:
    """The plan as Megatron-LM arguments.

    Returns
    -------
    dict
        ``parallel`` (the parallelism, batch and recomputation arguments), ``model`` (the
        model's shape), ``world_size`` (GPUs: stages x t x d), ``data_parallel_size`` (d,
        what Megatron-LM derives from the world size) and ``notes`` (comment lines).

    Raises
    ------
    ExportError
        A recomputation mix Megatron-LM cannot express (:func:`recompute_arguments`).
    """
    recompute, note = recompute_arguments(layout)
    parallel = [
        f"--tensor-model-parallel-size {layout.t}",
        f"--pipeline-model-parallel-size {layout.pp}",
        *layer_split_arguments(layout),
        f"--micro-batch-size {layout.micro_batch_size}",
        f"--global-batch-size {layout.global_batch_size}",
    ]
    if layout.t > 1:
        parallel.append("--sequence-parallel")
    parallel += recompute
    return {
        "parallel": parallel,
        "model": model_arguments(layout),
        "world_size": layout.world_size,
        "data_parallel_size": layout.d,
        "notes": [note] if note else [],
    }


def megatron_text(layout: PlanLayout) -> str:
    """The arguments as shell lines (``\\`` continued), with comment lines on what they
    assume."""
    args = megatron_arguments(layout)
    m = layout.model
    head = [
        f"# Megatron-LM arguments for {m.config.name}: {layout.pp} pipeline stages x tensor "
        f"parallel {layout.t} x data parallel {layout.d}",
        f"# run on {layout.world_size} GPUs: Megatron-LM sets the data-parallel size to "
        f"{layout.world_size} / ({layout.t} x {layout.pp}) = {layout.d}",
        f"# layers per stage: {', '.join(map(str, layout.layer_counts()))}; "
        f"{layout.microbatches_per_replica} microbatches of {layout.micro_batch_size} x "
        f"{m.seq_len} tokens per replica and batch",
        f"# planned TPS {layout.tps * 1e3:.6g} ms per microbatch (piper-ilp's cost model, "
        f"efficiency {m.efficiency:g} on {m.hardware.get('name', '?')})",
        *args["notes"],
        "# vocabulary: from the tokenizer (Megatron-LM pads it to a multiple of 128 x tensor "
        "parallel); optimizer: Adam without --use-distributed-optimizer (18 bytes/parameter)",
    ]
    lines = args["parallel"] + args["model"]
    body = [f"{a} \\" for a in lines[:-1]] + [lines[-1]]
    return "\n".join(head + body) + "\n"
