"""An instance from a decoder-only transformer's configuration, with no profiler
(``piper-ilp from-config``, cost model sec. 12).

The model is a chain: node 0 the embedding, nodes 1..L the transformer layers, node L+1
the final norm, output layer and loss; edges i -> i+1 carry the 16-bit activations of one
microbatch. Each layer offers, for every tensor-parallel degree t it allows, the options
``vanilla``, ``selective recomp`` and ``activation recomp``; the embedding and the head one
option each, named ``embedding`` and ``head`` (no recomputation; ``--exclude-option`` of a
layer option leaves them alone). The numbers come from
:mod:`compare.builders.transformer_costs` (one function per formula) and the hardware
(:mod:`compare.builders.hardware`).

The instance JSON also carries a ``model`` section (ignored by the loader) naming the
configuration, the hardware and the microbatch shape: :func:`read_model_section` gives it
back to ``piper-ilp export``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compare.builders import transformer_costs as tc
from compare.builders.hardware import Hardware, check_name, hardware_from_dict, preset_or_file
from compare.builders.transformer_costs import TransformerConfig
from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_BATCH, MAX_DEVICES, option_dict
from piper_ilp.jsonfile import describe_value, display_path, is_int, is_number

__all__ = [
    "TransformerConfig",
    "MODEL_PRESETS",
    "TP_DEGREES",
    "DEFAULT_EFFICIENCY",
    "GENERATOR",
    "MAX_LAYERS",
    "ModelSection",
    "load_model",
    "config_from_hf",
    "allowed_tp_degrees",
    "transformer_instance",
    "read_model_section",
    "check_model_section",
]

#: The tensor-parallel degrees offered when not told (sec. 12), within a node.
TP_DEGREES = (1, 2, 4, 8)
#: Fraction of the peak FLOP/s that matrix multiplications reach when not told.
DEFAULT_EFFICIENCY = 0.5
#: The ``model.generator`` an instance written by from-config carries.
GENERATOR = "piper-ilp from-config"
#: The most layers a model may have: the chain's L + 3 successor-closed sets stay within the
#: DP's default limit of 20,000, and the instance file within what the loader reads (each
#: layer writes about 4 KB). Published models have a few hundred at most.
MAX_LAYERS = 16384


def _gpt3(name: str, h: int, layers: int, heads: int) -> TransformerConfig:
    # Brown et al. 2020, Table 2.1 and sec. 2.1: GPT-2's architecture (learned positions,
    # LayerNorm, biases, GeLU MLP of 4h), 2,048-token context, GPT-2's 50,257-token BPE
    # vocabulary, tied input and output embeddings; dropout as in GPT-2 / Megatron-LM.
    return TransformerConfig(
        name, h, layers, heads, heads, 4 * h, 50257, 2048, True, "gelu", False, h // heads,
        True, "layernorm", True, True, 2048,
    )  # fmt: skip


def _llama(name, h, layers, heads, kv, f, vocab, ctx) -> TransformerConfig:
    # Touvron et al. 2023 (Llama 2), Dubey et al. 2024 (Llama 3) and the models' Hugging Face
    # config.json: RMSNorm, rotary positions, SwiGLU, no biases, no dropout, untied output.
    return TransformerConfig(
        name, h, layers, heads, kv, f, vocab, ctx, False, "silu", True, h // heads,
        False, "rmsnorm", False, False, ctx,
    )  # fmt: skip


#: The presets (docs/from-config.md, "Model presets"). GPT-3 1.3B has 16 heads of 128 (the
#: paper's table says 24 heads of 128, which does not give d_model 2,048; Megatron-LM's
#: example uses 16) and 13B d_model 5,120 = 40 x 128 (the table's 5,140 is not a multiple
#: of 40). Llama-3 405B is Llama 3.1's, with 8 key-value heads (the paper, torchtitan).
MODEL_PRESETS: dict[str, TransformerConfig] = {
    "gpt3-1.3b": _gpt3("gpt3-1.3b", 2048, 24, 16),
    "gpt3-13b": _gpt3("gpt3-13b", 5120, 40, 40),
    "gpt3-175b": _gpt3("gpt3-175b", 12288, 96, 96),
    "llama2-7b": _llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096),
    "llama2-13b": _llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096),
    "llama2-70b": _llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096),
    "llama3-8b": _llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
    "llama3-70b": _llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
    "llama3-405b": replace(
        _llama("llama3-405b", 16384, 126, 128, 8, 53248, 128256, 8192), max_positions=131072
    ),
}

#: Hugging Face ``hidden_act`` values: gated (SwiGLU) and plain MLPs.
_GATED_ACTS = {"silu", "swish"}
_PLAIN_ACTS = {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu"}
#: The fields of a config.json that must be there (num_key_value_heads may be absent: MHA).
_HF_SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


def _positive_int(data: dict, key: str, where: str, most: int | None = None) -> int:
    if key not in data:
        raise InputError(f"{where}: missing field '{key}'")
    x = data[key]
    if not is_int(x) or x < 1:
        raise InputError(
            f"{where}: field '{key}' must be a whole number >= 1, got {describe_value(x)}"
        )
    if most is not None and x > most:
        raise InputError(f"{where}: field '{key}' is {x:,}, more than the limit of {most:,}")
    return x


#: Fields that make a config a mixture of experts (Mixtral, Qwen-MoE, DeepSeek), which the
#: dense block of :mod:`compare.builders.transformer_costs` does not model.
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")


def config_from_hf(data: Any, source: str = "<config>") -> TransformerConfig:
    """A :class:`TransformerConfig` from a Hugging Face style ``config.json`` object.

    Read: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads`` (absent: as many as the heads), ``intermediate_size``,
    ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``, ``hidden_act``
    (``silu``: a SwiGLU MLP; ``gelu`` and the like, ``relu``: a two-matrix MLP), and when
    present ``head_dim``, ``attention_bias``, ``mlp_bias``, ``attention_dropout``. The block
    is modelled as Llama's (RMSNorm, rotary positions); ``seq_len`` defaults to
    ``max_position_embeddings``.

    Raises
    ------
    InputError
        A missing or mistyped field, a size that is not a positive integer, more layers
        than :data:`MAX_LAYERS`, heads not divisible by the key-value heads, a hidden size
        not divisible by the heads (without ``head_dim``), an unknown ``hidden_act``, a
        mixture of experts, a name with a control character: one line naming ``source``
        and the field.
    """
    where = display_path(source)
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {describe_value(data)}")
    for key in _EXPERT_FIELDS:
        experts = data.get(key)
        if experts is not None and not (is_number(experts) and experts <= 1):
            raise InputError(
                f"{where}: field '{key}' is {describe_value(experts)}: a mixture of experts, "
                "which from-config does not model (dense decoder-only transformers only)"
            )
    h, layers, heads, f, vocab, ctx = (
        _positive_int(data, k, where, MAX_LAYERS if k == "num_hidden_layers" else None)
        for k in _HF_SIZES
    )
    kv = (
        _positive_int(data, "num_key_value_heads", where)
        if "num_key_value_heads" in data
        else heads
    )
    if heads % kv:
        raise InputError(
            f"{where}: field 'num_key_value_heads' ({kv}) must divide num_attention_heads ({heads})"
        )
    if "head_dim" in data and data["head_dim"] is not None:
        head_dim = _positive_int(data, "head_dim", where)
    elif h % heads:
        raise InputError(
            f"{where}: field 'num_attention_heads' ({heads}) must divide hidden_size ({h}) "
            "when there is no head_dim"
        )
    else:
        head_dim = h // heads
    for key in ("tie_word_embeddings", "hidden_act"):
        if key not in data:
            raise InputError(f"{where}: missing field '{key}'")
    tied = data["tie_word_embeddings"]
    if not isinstance(tied, bool):
        raise InputError(
            f"{where}: field 'tie_word_embeddings' must be true or false, "
            f"got {describe_value(tied)}"
        )
    act = data["hidden_act"]
    if not isinstance(act, str) or act not in _GATED_ACTS | _PLAIN_ACTS:
        known = ", ".join(sorted(_GATED_ACTS | _PLAIN_ACTS))
        raise InputError(
            f"{where}: field 'hidden_act' must be one of {known}, got {describe_value(act)}"
        )
    flags = {}
    for key in ("attention_bias", "mlp_bias"):
        flags[key] = data.get(key, False)
        if not isinstance(flags[key], bool):
            raise InputError(
                f"{where}: field '{key}' must be true or false, got {describe_value(flags[key])}"
            )
    if flags["attention_bias"] != flags["mlp_bias"]:
        raise InputError(
            f"{where}: field 'mlp_bias' ({flags['mlp_bias']}) differs from attention_bias: "
            "the model takes biases on all linear layers or on none"
        )
    drop = data.get("attention_dropout", 0.0)
    if not is_number(drop) or not 0 <= drop < 1:
        raise InputError(
            f"{where}: field 'attention_dropout' must be a number in [0, 1), "
            f"got {describe_value(drop)}"
        )
    name = data.get("_name_or_path")
    if name is not None and not isinstance(name, str):
        raise InputError(
            f"{where}: field '_name_or_path' must be a string, got {describe_value(name)}"
        )
    what = "field '_name_or_path'" if name else "the folder name (the model's name)"
    name = check_name(name or Path(str(source)).parent.name or str(source), where, what)
    return TransformerConfig(
        name, h, layers, heads, kv, f, vocab, ctx, tied, act, act in _GATED_ACTS, head_dim,
        False, "rmsnorm", flags["attention_bias"], drop > 0, ctx,
    )  # fmt: skip


def load_model(spec: str) -> TransformerConfig:
    """A preset by name (:data:`MODEL_PRESETS`) or the path of a ``config.json``.

    Raises
    ------
    InputError
        Neither a preset nor a file, a file that is not JSON, or a bad config (one line).
    """
    return preset_or_file(
        spec, MODEL_PRESETS, config_from_hf, "MODEL: unknown model", "a config.json file"
    )


def allowed_tp_degrees(
    cfg: TransformerConfig, hw: Hardware, wanted: tuple[int, ...] | None = None
) -> list[int]:
    """The tensor-parallel degrees t to offer: ``wanted`` (each checked), or those of
    :data:`TP_DEGREES` that fit in a node and divide the heads, the key-value heads and the
    MLP width (Megatron-LM's requirements).

    Raises
    ------
    InputError
        A wanted t that is not a whole number >= 1, above the GPUs per node, or that does
        not divide one of those sizes (naming it).
    """
    sizes = (
        ("num_attention_heads", cfg.num_heads),
        ("num_key_value_heads", cfg.num_kv_heads),
        ("intermediate_size", cfg.intermediate_size),
    )
    if wanted is None:
        return [
            t for t in TP_DEGREES if t <= hw.gpus_per_node and all(n % t == 0 for _, n in sizes)
        ]
    for t in wanted:
        if t < 1:
            raise InputError(f"--tp-degrees: t = {t} is not a whole number >= 1")
        if t > hw.gpus_per_node:
            raise InputError(
                f"--tp-degrees: t = {t} is above the {hw.gpus_per_node} GPUs per node of {hw.name}"
            )
        for field, n in sizes:
            if n % t:
                raise InputError(
                    f"--tp-degrees: t = {t} does not divide {field} = {n} of {cfg.name}"
                )
    return sorted(set(wanted))


@dataclass(frozen=True)
class ModelSection:
    """What an instance written by from-config says about its model (its ``model`` key):
    the configuration, the hardware, the microbatch shape and which node is which."""

    config: TransformerConfig
    hardware: dict
    seq_len: int
    micro_batch_size: int
    efficiency: float
    parameters: int

    @property
    def layers(self) -> int:
        return self.config.num_layers

    def to_dict(self) -> dict:
        L = self.config.num_layers
        return {
            "generator": GENERATOR,
            "name": self.config.name,
            "config": self.config.to_dict(),
            "hardware": dict(self.hardware),
            "seq_len": self.seq_len,
            "micro_batch_size": self.micro_batch_size,
            "efficiency": self.efficiency,
            "parameters": self.parameters,
            "nodes": {"embedding": 0, "layers": [1, L], "head": L + 1},
        }


def _section_field(sec: dict, key: str, kind: str, where: str) -> Any:
    """``sec[key]``, checked to be of ``kind``: "int" (a whole number >= 1), "bool", "str"
    or "fraction" (a number in (0, 1]); one line naming ``where`` and the field."""
    if key not in sec:
        raise InputError(f"{where}: the 'model' section is damaged: missing field '{key}'")
    x = sec[key]
    ok = {
        "int": lambda: is_int(x) and x >= 1,
        "bool": lambda: isinstance(x, bool),
        "str": lambda: isinstance(x, str),
        "fraction": lambda: is_number(x) and 0 < x <= 1,
    }[kind]()
    if not ok:
        want = {
            "int": "a whole number >= 1",
            "bool": "true or false",
            "str": "a string",
            "fraction": "a number in (0, 1]",
        }[kind]
        raise InputError(
            f"{where}: the 'model' section is damaged: field '{key}' must be {want}, got "
            f"{describe_value(x)}"
        )
    return x


def read_model_section(data: Any, source: str) -> ModelSection:
    """The :class:`ModelSection` of a parsed instance JSON written by from-config, every
    field checked.

    Raises
    ------
    InputError
        No ``model`` key, one that from-config did not write, or a field of it missing or
        of the wrong type (one line naming ``source`` and the field).
    """
    where = display_path(source)
    sec = data.get("model") if isinstance(data, dict) else None
    if not isinstance(sec, dict) or sec.get("generator") != GENERATOR:
        raise InputError(
            f"{where}: no 'model' section written by from-config: export needs an instance made "
            "by 'piper-ilp from-config' (it names the layers, the sequence length and the "
            "microbatch size)"
        )
    config = sec.get("config")
    if not isinstance(config, dict):
        raise InputError(
            f"{where}: the 'model' section is damaged: field 'config' must be an object, got "
            f"{describe_value(config)}"
        )
    fields = {f.name: str(f.type) for f in dataclasses.fields(TransformerConfig)}
    extra = sorted(set(config) - set(fields))
    if extra:
        raise InputError(
            f"{where}: the 'model' section is damaged: unknown field 'config.{extra[0]}'"
        )
    values = {k: _section_field(config, k, kind, f"{where}: config") for k, kind in fields.items()}
    cfg = TransformerConfig(**values)
    check_name(cfg.name, f"{where}: the 'model' section is damaged", "field 'config.name'")
    if cfg.norm not in ("layernorm", "rmsnorm"):
        raise InputError(
            f"{where}: the 'model' section is damaged: field 'config.norm' must be layernorm or "
            f"rmsnorm, got {describe_value(cfg.norm)}"
        )
    hardware = hardware_from_dict(sec.get("hardware"), f"{where}: model.hardware")
    if not isinstance(sec.get("parameters"), int) or isinstance(sec["parameters"], bool):
        raise InputError(
            f"{where}: the 'model' section is damaged: field 'parameters' must be a whole "
            f"number, got {describe_value(sec.get('parameters'))}"
        )
    return ModelSection(
        cfg,
        hardware.to_dict(),
        _section_field(sec, "seq_len", "int", where),
        _section_field(sec, "micro_batch_size", "int", where),
        float(_section_field(sec, "efficiency", "fraction", where)),
        sec["parameters"],
    )


def check_model_section(data: dict, section: ModelSection, t_values: list[int], where: str):
    """Check that the instance's nodes and edges are what from-config writes for its
    ``model`` section (so that a framework's settings made from the section describe the
    model that was planned).

    Raises
    ------
    InputError
        The first node (or the edges) that differs: the file was edited, or written by
        another version of from-config.
    """
    hw = hardware_from_dict(section.hardware, f"{where}: model.hardware")
    why = None
    try:
        again = transformer_instance(
            section.config,
            hw,
            seq_len=section.seq_len,
            micro_batch_size=section.micro_batch_size,
            efficiency=section.efficiency,
            tp_degrees=tuple(t_values),
        )
    except InputError as exc:
        why = f"from-config refuses it: {exc}"
    else:
        nodes = data.get("nodes")
        for i, (mine, theirs) in enumerate(zip(again["nodes"], nodes)):
            if mine != theirs:
                why = f"node {mine['id']} (nodes[{i}]) differs"
                break
        else:
            if len(again["nodes"]) != len(nodes):
                why = f"{len(nodes)} nodes instead of {len(again['nodes'])}"
            elif again["edges"] != data.get("edges"):
                why = "the edges differ"
    if why is not None:
        raise InputError(
            f"{where}: the numbers are not what from-config writes for the file's 'model' "
            f"section ({why}): the file was edited or written by another version; write it "
            "again with piper-ilp from-config"
        )


def _layer_option(
    cfg: TransformerConfig, hw: Hardware, b: int, s: int, t: int, option: str, E: float
) -> dict:
    """One layer's option (sec. 1 fields) for degree t."""
    held = tc.layer_parameters(cfg).held(t)
    p = tc.compute_seconds(tc.layer_training_flops(cfg, b, s, option), t, hw.peak_flops, E)
    p += tc.tp_collective_seconds(cfg, b, s, t, tc.tp_collectives(option), hw.nvlink_bandwidth)
    return option_dict(
        option, p, tc.gradient_bytes(held), tc.layer_activation_bytes(cfg, b, s, option, t),
        tc.weight_and_optimizer_bytes(held),
    )  # fmt: skip


def _end_option(
    cfg: TransformerConfig, hw: Hardware, b: int, s: int, t: int, part: str, E: float
) -> dict:
    """The embedding's (``part`` = "embedding") or the head's only option for degree t, with
    the part's name as its id (so that excluding a layer option never removes it)."""
    if part == "embedding":
        held, flops = tc.embedding_parameters(cfg).held(t), 0.0
        act = tc.embedding_activation_bytes(cfg, b, s, t)
    else:
        held, flops = tc.head_parameters(cfg, held=True).held(t), tc.head_training_flops(cfg, b, s)
        act = tc.head_activation_bytes(cfg, b, s, t)
    p = tc.compute_seconds(flops, t, hw.peak_flops, E)
    p += tc.tp_collective_seconds(cfg, b, s, t, tc.tp_collectives(part), hw.nvlink_bandwidth)
    return option_dict(part, p, tc.gradient_bytes(held), act, tc.weight_and_optimizer_bytes(held))


def transformer_instance(
    cfg: TransformerConfig,
    hw: Hardware,
    *,
    seq_len: int | None = None,
    micro_batch_size: int = 1,
    efficiency: float = DEFAULT_EFFICIENCY,
    devices: int | None = None,
    memory: float | None = None,
    batch: int | None = None,
    bandwidth: float | None = None,
    tp_degrees: tuple[int, ...] | None = None,
) -> dict:
    """The instance JSON object (sec. 1, plus the ``model`` section) of ``cfg`` on ``hw``.

    Parameters
    ----------
    cfg, hw : TransformerConfig, Hardware
        The model and the accelerator.
    seq_len : int, optional
        Tokens per sequence (default: ``cfg.seq_len``); at most ``cfg.max_positions``.
    micro_batch_size : int
        Sequences per microbatch b (one unit of work, a "sample" of secs. 1-3).
    efficiency : float
        Fraction of ``hw.peak_flops`` the matrix multiplications reach, in (0, 1].
    devices, memory, batch, bandwidth : optional
        K, M, N, B; default one node (``hw.gpus_per_node``), ``hw.hbm_bytes``, N = K and
        ``hw.network_bandwidth``.
    tp_degrees : tuple of int, optional
        The t values to offer (default :func:`allowed_tp_degrees`).

    Returns
    -------
    dict
        Ready for :func:`piper_ilp.instance.instance_from_dict` (which ignores ``model``).

    Raises
    ------
    InputError
        A sequence length or microbatch size that is not a positive whole number, a
        sequence longer than the model's positions, an efficiency outside (0, 1], a bad
        t (see :func:`allowed_tp_degrees`).

    Examples
    --------
    >>> from compare.builders.hardware import HARDWARE_PRESETS
    >>> data = transformer_instance(MODEL_PRESETS["llama3-8b"], HARDWARE_PRESETS["h100-80gb"])
    >>> len(data["nodes"]), data["nodes"][1]["name"], sorted(data["nodes"][1]["TMPCs"])
    (34, 'layer 1', ['1', '2', '4', '8'])
    """
    s = cfg.seq_len if seq_len is None else seq_len
    b = micro_batch_size
    for name, x in (("--seq-len", s), ("--micro-batch-size", b)):
        if not is_int(x) or x < 1:
            raise InputError(f"{name}: expected a whole number >= 1, got {x!r}")
    if s > cfg.max_positions:
        raise InputError(
            f"--seq-len: {s} tokens is more than max_position_embeddings = {cfg.max_positions} "
            f"of {cfg.name}"
        )
    if not (is_number(efficiency) and 0 < efficiency <= 1):
        raise InputError(f"--efficiency: expected a number in (0, 1], got {efficiency!r}")
    ts = allowed_tp_degrees(cfg, hw, tp_degrees)
    K = hw.gpus_per_node if devices is None else devices
    N = K if batch is None else batch
    if not (1 <= K <= MAX_DEVICES and 1 <= N <= MAX_BATCH):
        raise InputError(f"--devices / --batch: K = {K} and N = {N} must be whole numbers >= 1")
    L = cfg.num_layers
    c = tc.activation_edge_bytes(cfg, b, s)

    def node(i: int, name: str, make) -> dict:
        tmpcs = {}
        for t in ts:
            opts = make(t)
            for o in opts:  # chain neighbours: no extra bytes beyond the edge's own
                o["syncTimeFw"] = {str(i - 1): 0.0} if i > 0 else {}
                o["syncTimeBw"] = {str(i + 1): 0.0} if i <= L else {}
            tmpcs[str(t)] = opts
        return {"id": i, "name": name, "TMPCs": tmpcs}

    E = efficiency
    nodes = [node(0, "embedding", lambda t: [_end_option(cfg, hw, b, s, t, "embedding", E)])]
    for i in range(1, L + 1):
        nodes.append(
            node(
                i,
                f"layer {i}",
                lambda t: [_layer_option(cfg, hw, b, s, t, o, E) for o in tc.LAYER_OPTIONS],
            )
        )
    nodes.append(node(L + 1, "head", lambda t: [_end_option(cfg, hw, b, s, t, "head", E)]))
    section = ModelSection(cfg, hw.to_dict(), s, b, float(E), tc.model_parameters(cfg))
    return {
        "maxDevices": K,
        "maxMemoryPerDevice": hw.hbm_bytes if memory is None else memory,
        "bandwidth": hw.network_bandwidth if bandwidth is None else bandwidth,
        "mbsInBatch": N,
        "nodes": nodes,
        "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": c} for i in range(L + 1)],
        "model": section.to_dict(),
    }
