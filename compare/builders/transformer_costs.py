"""The formulas of an analytic decoder-only transformer profile (cost model sec. 12), one
function per formula, each with its source.

Symbols: b sequences of s tokens per microbatch, hidden size h, a attention heads of
``head_dim`` dh, k key-value heads (grouped-query attention, k = a without it), MLP width f,
vocabulary V, t the tensor-parallel degree. 16-bit activations and weights; sequence
parallelism with tensor parallelism (Megatron-LM's practice), so every activation is split t
ways. ``docs/from-config.md`` derives the grouped-query and SwiGLU terms.

References
----------
.. [1] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
   Using Megatron-LM", SC'21, sec. 5.1 and appendix (FLOPs).
.. [2] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
   Models", MLSys 2023 (arXiv:2205.05198), sec. 4 and Table 2 (activation bytes).
.. [3] Megatron-LM, ``megatron/training/theoretical_memory_usage.py`` (18 bytes per
   parameter; the embedding's and the output layer's activations).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "TransformerConfig",
    "VANILLA",
    "SELECTIVE",
    "FULL",
    "LAYER_OPTIONS",
    "Params",
    "attention_parameters",
    "mlp_parameters",
    "norm_parameters",
    "layer_parameters",
    "embedding_parameters",
    "head_parameters",
    "model_parameters",
    "attention_forward_flops",
    "core_attention_forward_flops",
    "mlp_forward_flops",
    "layer_forward_flops",
    "layer_training_flops",
    "head_training_flops",
    "model_training_flops",
    "layer_activation_bytes",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "weight_and_optimizer_bytes",
    "gradient_bytes",
    "activation_edge_bytes",
    "tp_collectives",
    "tp_collective_seconds",
    "compute_seconds",
]


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer (pre-norm blocks of attention and MLP).

    ``num_kv_heads`` < ``num_heads`` is grouped-query attention; ``gated_mlp`` is a SwiGLU
    MLP (gate, up and down matrices of width ``intermediate_size``); ``learned_positions``
    a learned position embedding (else rotary, no parameters); ``norm`` is ``layernorm``
    (weight and bias) or ``rmsnorm``; ``bias`` puts biases on the linear layers;
    ``dropout`` keeps dropout masks for the backward; ``seq_len`` is the default sequence
    length (the model's training context).
    """

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_positions: int
    tied_embeddings: bool
    activation: str
    gated_mlp: bool
    head_dim: int
    learned_positions: bool
    norm: str
    bias: bool
    dropout: bool
    seq_len: int

    def to_dict(self) -> dict:
        return asdict(self)


#: The option ids of a transformer layer (sec. 12): no recomputation, the attention core
#: recomputed, the whole layer recomputed (only its input kept).
VANILLA, SELECTIVE, FULL = "vanilla", "selective recomp", "activation recomp"
LAYER_OPTIONS = (VANILLA, SELECTIVE, FULL)

#: Bytes per parameter held (mixed-precision Adam without a distributed optimizer): 16-bit
#: weights (2), fp32 main gradients (4), fp32 master weights (4), two fp32 Adam moments (8).
BYTES_PER_PARAMETER = 18
#: Bytes per parameter that the data-parallel resync all-reduces (fp32 gradients).
GRADIENT_BYTES_PER_PARAMETER = 4
#: Bytes of one activation element (16-bit).
ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class Params:
    """Parameters of a part of the model, split by how tensor parallelism holds them:
    ``sharded`` are divided t ways (the weight matrices, the vocabulary-parallel embedding,
    column-parallel biases), ``replicated`` are held whole by every GPU of the group (norms,
    row-parallel biases, learned position embeddings)."""

    sharded: int
    replicated: int

    @property
    def total(self) -> int:
        return self.sharded + self.replicated

    def held(self, t: int) -> float:
        """Parameters one GPU of a t-GPU tensor-parallel group holds."""
        return self.sharded / t + self.replicated

    def __add__(self, other: "Params") -> "Params":
        return Params(self.sharded + other.sharded, self.replicated + other.replicated)


# ---------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------


def attention_parameters(cfg: TransformerConfig) -> Params:
    """Self-attention: Q (h x a dh), K and V (h x k dh each, grouped-query attention),
    the output projection (a dh x h), and with ``bias`` their biases (Q, K, V column
    parallel, the output's row parallel). Source: the layer's shapes (Megatron-LM's
    ``theoretical_memory_usage.py`` counts the same matrices: 2 h^2 (1 + k / a) when
    a dh = h).

    >>> from compare.builders.transformer import MODEL_PRESETS
    >>> attention_parameters(MODEL_PRESETS["llama2-70b"]).total  # 2 h^2 (1 + 8 / 64)
    150994944
    """
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    matrices = h * q + 2 * h * kv + q * h
    if not cfg.bias:
        return Params(matrices, 0)
    return Params(matrices + q + 2 * kv, h)


def mlp_parameters(cfg: TransformerConfig) -> Params:
    """The MLP: two matrices h x f (GeLU) or three (SwiGLU: gate, up, down), and with
    ``bias`` their biases (the first layer's column parallel, the last one's row parallel).
    Source: the layer's shapes (Megatron-LM: 2 h f x 3/2 with ``--swiglu``)."""
    h, f = cfg.hidden_size, cfg.intermediate_size
    first = (2 if cfg.gated_mlp else 1) * h * f
    matrices = first + f * h
    if not cfg.bias:
        return Params(matrices, 0)
    return Params(matrices + (2 if cfg.gated_mlp else 1) * f, h)


def norm_parameters(cfg: TransformerConfig) -> Params:
    """One normalization: weight and bias of LayerNorm (2 h) or RMSNorm's weight (h),
    replicated (Megatron-LM: ``norm_size`` 2 or 1)."""
    return Params(0, (2 if cfg.norm == "layernorm" else 1) * cfg.hidden_size)


def layer_parameters(cfg: TransformerConfig) -> Params:
    """One transformer layer: attention, MLP and their two pre-normalizations. For a GPT
    shape (f = 4h, biases, LayerNorm) 12 h^2 + 13 h [1]."""
    norms = norm_parameters(cfg)
    return attention_parameters(cfg) + mlp_parameters(cfg) + norms + norms


def embedding_parameters(cfg: TransformerConfig) -> Params:
    """The word embedding V x h (vocabulary parallel) and, for learned positions, the
    position embedding P x h (replicated, P the maximum sequence length)."""
    h = cfg.hidden_size
    pos = cfg.max_positions * h if cfg.learned_positions else 0
    return Params(cfg.vocab_size * h, pos)


def head_parameters(cfg: TransformerConfig, *, held: bool = False) -> Params:
    """The final normalization and the output layer h x V. With tied embeddings the output
    layer is the word embedding: counted once in the model (``held=False``), but the stage
    that holds the head keeps its own copy (``held=True``; Megatron-LM keeps one on the
    last pipeline stage and all-reduces the two copies' gradients)."""
    out = 0 if cfg.tied_embeddings and not held else cfg.vocab_size * cfg.hidden_size
    return norm_parameters(cfg) + Params(out, 0)


def model_parameters(cfg: TransformerConfig) -> int:
    """Unique parameters of the model (tied embeddings once): embedding + L layers + final
    norm + output layer. GPT-3 175B: 174.6e9 (Brown et al. 2020, Table 2.1: 175.0B)."""
    return (
        embedding_parameters(cfg).total
        + cfg.num_layers * layer_parameters(cfg).total
        + head_parameters(cfg).total
    )


# ---------------------------------------------------------------------------------------
# FLOPs (matrix multiplications; fwd + bwd = 3 x fwd) [1]
# ---------------------------------------------------------------------------------------


def core_attention_forward_flops(cfg: TransformerConfig, b: int, s: int) -> float:
    """Q K^T and the attention over V: 2 x 2 b s^2 a dh (a dh = h: 4 b s^2 h [1]); causal
    masking is not discounted, as in [1]. Grouped-query attention does not change it (every
    query head attends)."""
    return 4.0 * b * s * s * cfg.num_heads * cfg.head_dim


def attention_forward_flops(cfg: TransformerConfig, b: int, s: int) -> float:
    """The attention block's forward: the Q, K, V projections 2 b s h (a dh + 2 k dh), the
    core (:func:`core_attention_forward_flops`) and the output projection 2 b s a dh h.
    GPT shape: 8 b s h^2 + 4 b s^2 h [1]."""
    h, q, kv = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return (
        2.0 * b * s * h * (q + 2 * kv)
        + core_attention_forward_flops(cfg, b, s)
        + 2.0 * b * s * q * h
    )


def mlp_forward_flops(cfg: TransformerConfig, b: int, s: int) -> float:
    """The MLP's forward: 2 b s h f per matrix, 2 matrices (GeLU; f = 4h: 16 b s h^2 [1])
    or 3 (SwiGLU)."""
    return (3 if cfg.gated_mlp else 2) * 2.0 * b * s * cfg.hidden_size * cfg.intermediate_size


def layer_forward_flops(cfg: TransformerConfig, b: int, s: int) -> float:
    """One layer's forward: 24 b s h^2 + 4 b s^2 h for a GPT shape [1]."""
    return attention_forward_flops(cfg, b, s) + mlp_forward_flops(cfg, b, s)


def layer_training_flops(cfg: TransformerConfig, b: int, s: int, option: str) -> float:
    """Forward and backward (3 x forward) plus the recomputation of ``option``: none
    (vanilla), the attention core's forward (selective) or the whole forward (full).
    GPT shape: 72 b s h^2 (1 + s / (6h)) vanilla, 96 b s h^2 (1 + s / (6h)) full [1]."""
    fwd = layer_forward_flops(cfg, b, s)
    extra = {
        VANILLA: 0.0,
        SELECTIVE: core_attention_forward_flops(cfg, b, s),
        FULL: fwd,
    }[option]
    return 3.0 * fwd + extra


def head_training_flops(cfg: TransformerConfig, b: int, s: int) -> float:
    """The output layer, forward and backward: 3 x 2 b s h V = 6 b s h V [1]."""
    return 6.0 * b * s * cfg.hidden_size * cfg.vocab_size


def model_training_flops(cfg: TransformerConfig, b: int, s: int, option: str = VANILLA) -> float:
    """The whole model per microbatch: L layers and the head (the embedding is a lookup).
    GPT shape, vanilla: 72 b s L h^2 (1 + s / (6h) + V / (12 L h)) [1]."""
    return cfg.num_layers * layer_training_flops(cfg, b, s, option) + head_training_flops(cfg, b, s)


# ---------------------------------------------------------------------------------------
# Activation memory per microbatch in flight (bytes, per GPU) [2]
# ---------------------------------------------------------------------------------------


def layer_activation_bytes(cfg: TransformerConfig, b: int, s: int, option: str, t: int) -> float:
    """Activations one layer keeps for its backward, per microbatch, on each GPU of a t-way
    tensor- and sequence-parallel group [2]:

    * norms: the inputs of the two normalizations, 2 x 2 s b h;
    * attention: the QKV input 2 s b h, Q 2 s b a dh, K and V 2 x 2 s b k dh, the output
      projection's input 2 s b a dh, the dropout mask s b h (with dropout); the core:
      the softmax output 2 a s^2 b, with dropout also its mask a s^2 b and output 2 a s^2 b;
    * MLP: the first layer's input 2 s b h, the activation function's inputs 2 s b f (GeLU)
      or 4 s b f (SwiGLU: gate and up, kept by a fused SwiGLU that recomputes its output),
      the last layer's input 2 s b f, the dropout mask s b h (with dropout).

    GPT shape with dropout: s b h (34 + 5 a s / h) [2]. Selective recomputation drops the
    core's term; full keeps only the layer's input, 2 s b h. Everything is divided by t
    (sequence parallelism splits what tensor parallelism does not).
    """
    h, f = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    sb, e = s * b, ACTIVATION_BYTES
    if option == FULL:
        return e * sb * h / t
    mask = sb * h if cfg.dropout else 0  # one byte per element
    norms = 2 * e * sb * h
    attention = e * sb * (h + q + 2 * kv + q) + mask
    mlp = e * sb * h + (2 if cfg.gated_mlp else 1) * e * sb * f + e * sb * f + mask
    core = 0
    if option == VANILLA:
        core = e * cfg.num_heads * s * sb + ((1 + e) * cfg.num_heads * s * sb if cfg.dropout else 0)
    return (norms + attention + mlp + core) / t


def embedding_activation_bytes(cfg: TransformerConfig, b: int, s: int, t: int) -> float:
    """The embedding's input token ids (8 bytes each, held whole by every GPU) and, with
    dropout, its dropout mask s b h / t [3]."""
    return 8.0 * s * b + (s * b * cfg.hidden_size / t if cfg.dropout else 0.0)


def head_activation_bytes(cfg: TransformerConfig, b: int, s: int, t: int) -> float:
    """The final norm's and the output layer's inputs (2 x 2 s b h) and the fp32 logits of
    the cross-entropy loss (4 s b V), split t ways: 4 s b h (1 + V / h) / t [3]."""
    return 4.0 * s * b * cfg.hidden_size * (1 + cfg.vocab_size / cfg.hidden_size) / t


# ---------------------------------------------------------------------------------------
# Weights, gradients, edges, time
# ---------------------------------------------------------------------------------------


def weight_and_optimizer_bytes(params_held: float) -> float:
    """memoryUsageB: 18 bytes per parameter held (16-bit weights, fp32 main gradients, fp32
    master weights, two fp32 Adam moments) [3]."""
    return BYTES_PER_PARAMETER * params_held


def gradient_bytes(params_held: float) -> float:
    """parameterSize: the fp32 gradients the data-parallel resync all-reduces, 4 bytes per
    parameter held (sec. 12)."""
    return GRADIENT_BYTES_PER_PARAMETER * params_held


def activation_edge_bytes(cfg: TransformerConfig, b: int, s: int) -> float:
    """An edge's communicationCost: the 16-bit activations of one microbatch, 2 b s h bytes
    (sec. 12)."""
    return ACTIVATION_BYTES * b * s * cfg.hidden_size


#: All-gathers and reduce-scatters of a (s, b, h) tensor per microbatch, forward and
#: backward, with sequence parallelism [2, sec. 4.2.2]: a layer 4 + 4 (full recomputation
#: runs its forward's 4 again), the vocabulary-parallel embedding and the output layer 1 + 1.
_COLLECTIVES = {VANILLA: 8, SELECTIVE: 8, FULL: 12, "embedding": 2, "head": 2}


def tp_collectives(part: str) -> int:
    """How many (s, b, h) all-gathers / reduce-scatters ``part`` runs per microbatch: a
    layer's option id, ``"embedding"`` or ``"head"``."""
    return _COLLECTIVES[part]


def tp_collective_seconds(
    cfg: TransformerConfig, b: int, s: int, t: int, count: int, nvlink_bandwidth: float
) -> float:
    """Time of ``count`` ring all-gathers or reduce-scatters of the 16-bit (s, b, h) tensor
    in a t-GPU group: each GPU sends (t - 1) / t of it per collective, at
    ``nvlink_bandwidth`` bytes/s (0 when t = 1)."""
    if t == 1:
        return 0.0
    return count * (t - 1) / t * activation_edge_bytes(cfg, b, s) / nvlink_bandwidth


def compute_seconds(flops: float, t: int, peak_flops: float, efficiency: float) -> float:
    """Matrix-multiplication time on a t-GPU group: FLOPs / (t x peak x efficiency)."""
    return flops / (t * peak_flops * efficiency)
