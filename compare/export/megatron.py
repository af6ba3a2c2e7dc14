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
  --recompute-num-layers k`` (the first k layers of each stage, min(k, its layers)). For any
  other mix, the best of these settings on the plan's stages that fits in memory, with
  comment lines naming the stages that change and the cost (:mod:`compare.export.recompute`);
  refused when none fits.
"""

from __future__ import annotations

from compare.builders.transformer_costs import FULL, SELECTIVE, VANILLA
from compare.export.layout import PlanLayout
from compare.export.recompute import Setting, Substitution, runnable_recomputation, stage_mixes

__all__ = [
    "megatron_arguments",
    "megatron_settings",
    "megatron_text",
    "pipeline_layout_string",
    "stage_mixes",
]


def _exact_recompute(layout: PlanLayout) -> tuple[list[str], str] | None:
    """Megatron-LM's recomputation arguments that run exactly the plan's choice, and a note
    ("" or one line on which layers the block method recomputes); None when no setting
    does (selective next to another choice, full recomputation on a number of layers per
    stage that is not min(k, its layers) for one k, or on other layers of layers that
    differ)."""
    used = {o for st in layout.stages for o in st.options}
    if used <= {VANILLA}:
        return [], ""
    if used == {SELECTIVE}:
        return [SELECTIVE_ARGS], ""
    if used == {FULL}:
        return list(FULL_UNIFORM_ARGS), ""
    if SELECTIVE in used:
        return None
    # full and vanilla: the block method recomputes the first min(k, n) layers of a stage
    fulls = [st.option_counts().get(FULL, 0) for st in layout.stages]
    k = max(fulls)
    if any(f != min(k, st.count) for f, st in zip(fulls, layout.stages)):
        return None
    first = all(
        all((o == FULL) == (j < k) for j, o in enumerate(st.options)) for st in layout.stages
    )
    if not first and not layout.identical_layers:
        return None
    note = "" if first else (
        f"# block recomputation: the first {k} layers of each stage (the plan picks others of "
        "its identical layers: the same time and memory)"
    )  # fmt: skip
    return block_arguments(k), note


#: The arguments of selective recomputation (the attention core of every layer) and of full
#: recomputation of every layer.
SELECTIVE_ARGS = "--recompute-granularity selective"
FULL_UNIFORM_ARGS = (
    "--recompute-granularity full",
    "--recompute-method uniform",
    "--recompute-num-layers 1",
)


def block_arguments(k: int) -> list[str]:
    """Full recomputation of the first k layers of every stage."""
    return [
        "--recompute-granularity full",
        "--recompute-method block",
        f"--recompute-num-layers {k}",
    ]


def megatron_settings(layout: PlanLayout) -> list[Setting]:
    """Every recomputation Megatron-LM can run on the plan's stages: none, selective in
    every layer, full in every layer, and full in the first k layers of each stage
    (block, k = 1 .. the most layers of a stage - 1), each with its arguments."""
    counts = [st.count for st in layout.stages]

    def every(option: str) -> tuple[tuple[str, ...], ...]:
        return tuple((option,) * n for n in counts)

    out = [
        Setting("no recomputation", every(VANILLA), []),
        Setting("selective recomputation in every layer", every(SELECTIVE), [SELECTIVE_ARGS]),
        Setting("full recomputation in every layer", every(FULL), list(FULL_UNIFORM_ARGS)),
    ]
    for k in range(1, max(counts, default=0)):
        options = tuple((FULL,) * min(k, n) + (VANILLA,) * (n - min(k, n)) for n in counts)
        out.append(
            Setting(
                f"full recomputation in the first {k} layers of each stage",
                options,
                block_arguments(k),
            )
        )
    return out


def recompute_arguments(layout: PlanLayout) -> tuple[list[str], list[str], Substitution | None]:
    """Megatron-LM's recomputation arguments for the plan, comment lines on them, and the
    :class:`~compare.export.recompute.Substitution` when they are not the plan's own choice.

    Megatron-LM sets recomputation once for every stage. When the plan's per-layer choice
    is none of its settings (e.g. selective recomputation in one layer of two stages and
    none elsewhere), the arguments are those of the best setting on the plan's stages and
    degrees that fits in memory on every stage, judged by the evaluator, and the comment
    lines name the stages that change and the cost.

    Raises
    ------
    ExportError
        No setting of Megatron-LM fits in memory on every stage.
    """
    exact = _exact_recompute(layout)
    if exact is not None:
        args, note = exact
        return args, [note] if note else [], None
    sub = runnable_recomputation(layout, megatron_settings(layout), "megatron")
    return list(sub.setting.value), sub.notes(), sub


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
        what Megatron-LM derives from the world size), ``notes`` (comment lines) and
        ``substitution`` (None, or the :class:`~compare.export.recompute.Substitution` as a
        dict when the recomputation is not the plan's own, :func:`recompute_arguments`).

    Raises
    ------
    ExportError
        No recomputation setting of Megatron-LM fits in memory on every stage.
    """
    recompute, notes, substitution = recompute_arguments(layout)
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
        "notes": notes,
        "substitution": substitution.to_dict() if substitution else None,
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
        f"# planned TPS {layout.tps:.6g} s per microbatch (piper-ilp's cost model, "
        f"efficiency {m.efficiency:g} on {m.hardware.get('name', '?')})",
        *args["notes"],
        "# vocabulary: from the tokenizer (Megatron-LM pads it to a multiple of 128 x tensor "
        "parallel); optimizer: Adam without --use-distributed-optimizer (18 bytes/parameter)",
    ]
    lines = args["parallel"] + args["model"]
    body = [f"{a} \\" for a in lines[:-1]] + [lines[-1]]
    return "\n".join(head + body) + "\n"
