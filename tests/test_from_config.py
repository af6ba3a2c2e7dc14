"""``piper-ilp from-config``: analytic transformer profiles (contract sec. 12). Every formula
against a case worked by hand, the published parameter counts, GPT-3 175B against Narayanan
et al.'s and Korthikanti et al.'s closed forms, Megatron-LM's theoretical memory, bad input."""

from __future__ import annotations

import json
import math

import pytest
from builders import json_lines
from typer.testing import CliRunner

from compare.builders import transformer_costs as tc
from compare.builders.hardware import HARDWARE_PRESETS, Hardware, load_hardware
from compare.builders.transformer import (
    MODEL_PRESETS,
    config_from_hf,
    read_model_section,
    transformer_instance,
)
from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict

runner = CliRunner()
GPT3 = MODEL_PRESETS["gpt3-175b"]
L70 = MODEL_PRESETS["llama2-70b"]
# a made-up GPU with round numbers, so that times are easy to work out
ROUND = Hardware("round", peak_flops=1e15, hbm_bytes=1e11, nvlink_bandwidth=1e11,
                 network_bandwidth=1e10, gpus_per_node=8)  # fmt: skip

LLAMA2_70B_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "max_position_embeddings": 4096,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}


def options(inst, node, t):
    return {o.id: o for o in inst.node[node].options[t]}


# ---- parameter counts ----


# GPT-3 175B: 96 (12 h^2 + 13 h) + (50257 + 2048) h + 2 h, h = 12288 (Brown et al. 2020 say
# 175.0e9; the 174.6e9 is this count)
GPT3_BY_HAND = 96 * (12 * 12288**2 + 13 * 12288) + (50257 + 2048) * 12288 + 2 * 12288
# Llama-2-70B: 80 (2 h^2 (1 + 8/64) + 3 h f + 2 h) + 2 V h + h, h = 8192, f = 28672, V = 32000
L70_BY_HAND = 80 * (2 * 8192**2 * 9 // 8 + 3 * 8192 * 28672 + 2 * 8192) + 2 * 32000 * 8192 + 8192
# Llama-3-8B: 32 (2 h^2 (1 + 8/32) + 3 h f + 2 h) + 2 V h + h, h = 4096, f = 14336, V = 128256
L8_BY_HAND = 32 * (2 * 4096**2 * 5 // 4 + 3 * 4096 * 14336 + 2 * 4096) + 2 * 128256 * 4096 + 4096


@pytest.mark.parametrize(
    "name, by_hand, published",
    [
        ("gpt3-175b", GPT3_BY_HAND, 174.6e9),
        ("llama2-70b", L70_BY_HAND, 68.98e9),
        ("llama3-8b", L8_BY_HAND, 8.03e9),
    ],
)
def test_parameter_counts_are_the_published_ones(name, by_hand, published):
    n = tc.model_parameters(MODEL_PRESETS[name])
    assert n == by_hand
    assert abs(n - published) <= 0.005 * published


def test_tied_embeddings_count_once_but_the_head_stage_holds_a_copy():
    h, V = GPT3.hidden_size, GPT3.vocab_size
    assert tc.head_parameters(GPT3).total == 2 * h  # the final LayerNorm only
    assert tc.head_parameters(GPT3, held=True).total == 2 * h + V * h
    assert tc.head_parameters(L70).total == 8192 + 32000 * 8192  # RMSNorm, untied output


# ---- GPT-3 175B: FLOPs, activations, weights, gradients, edges (sec. 12, "Done when") ----


@pytest.fixture(scope="module")
def gpt3():
    hw = HARDWARE_PRESETS["a100-80gb"]
    data = transformer_instance(GPT3, hw, efficiency=1.0, micro_batch_size=1)
    return instance_from_dict(data), hw


def test_gpt3_layer_flops_are_narayanan_s(gpt3):
    inst, hw = gpt3
    b, s, h = 1, 2048, 12288
    per_layer = 72 * b * s * h**2 * (1 + s / (6 * h))  # Narayanan et al. SC'21, fwd + bwd
    van = options(inst, 1, 1)
    assert van["vanilla"].p * hw.peak_flops == pytest.approx(per_layer, rel=1e-12)
    # full recomputation: 96 b s h^2 (1 + s / (6h)); selective adds the core's 4 b s^2 h
    assert van["activation recomp"].p * hw.peak_flops == pytest.approx(per_layer * 4 / 3, rel=1e-12)
    assert van["selective recomp"].p * hw.peak_flops == pytest.approx(
        per_layer + 4 * b * s * s * h, rel=1e-12
    )


def test_gpt3_model_flops_are_narayanan_s(gpt3):
    inst, hw = gpt3
    b, s, h, L, V = 1, 2048, 12288, 96, 50257
    whole = 72 * b * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    flops = math.fsum(options(inst, v, 1)[o].p for v, o in [(0, "embedding"), (97, "head")] +
                      [(i, "vanilla") for i in range(1, 97)]) * hw.peak_flops  # fmt: skip
    assert flops == pytest.approx(whole, rel=1e-9)
    assert tc.model_training_flops(GPT3, b, s) == pytest.approx(whole, rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_gpt3_activation_bytes_are_korthikanti_s(gpt3, t):
    inst, _ = gpt3
    b, s, h, a = 1, 2048, 12288, 96
    o = options(inst, 1, t)
    # Korthikanti et al. Table 2 with sequence parallelism
    assert o["vanilla"].a == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert o["selective recomp"].a == pytest.approx(34 * s * b * h / t, rel=1e-12)
    assert o["activation recomp"].a == pytest.approx(2 * s * b * h / t, rel=1e-12)


def test_gpt3_weight_gradient_and_edge_bytes(gpt3):
    inst, _ = gpt3
    h = 12288
    # t = 1: every parameter of 12 h^2 + 13 h; t = 8: the matrices and the column-parallel
    # biases (QKV 3h, first MLP 4h) split, LayerNorms (4h) and row-parallel biases (2h) not
    held = {1: 12 * h**2 + 13 * h, 8: (12 * h**2 + 7 * h) / 8 + 6 * h}
    for t, n in held.items():
        for o in inst.node[5].options[t]:
            assert o.b == pytest.approx(18 * n, rel=1e-12) and o.w == pytest.approx(
                4 * n, rel=1e-12
            )
    assert {e.c for e in inst.edges} == {2 * 1 * 2048 * h}
    # the embedding: (V + 2048 positions) h, the vocabulary split t ways
    emb = inst.node[0].options[8][0]
    assert emb.b == pytest.approx(18 * (50257 * h / 8 + 2048 * h), rel=1e-12)


# ---- grouped-query attention and SwiGLU (derived in docs/from-config.md) ----


def test_llama2_70b_layer_by_hand():
    b, s, h, f, a, k = 2, 1024, 8192, 28672, 64, 8
    d = h // a  # 128
    fwd = 2 * b * s * h * (a * d + 2 * k * d) + 4 * b * s * s * a * d + 2 * b * s * a * d * h
    fwd += 3 * 2 * b * s * h * f  # gate, up, down
    assert tc.layer_forward_flops(L70, b, s) == fwd
    # activations (t = 1, no dropout): norms 4sbh; QKV input 2sbh, Q 2sbh, K and V 2 x 2 s b
    # k d, output projection input 2sbh; MLP input 2sbh, gate and up 4sbf, down input 2sbf;
    # the softmax output 2 a s^2 b
    acts = (
        4 * s * b * h + (2 + 2 + 2) * s * b * h + 4 * s * b * k * d + 2 * s * b * h + 6 * s * b * f
    )
    assert tc.layer_activation_bytes(L70, b, s, "selective recomp", 1) == acts
    assert tc.layer_activation_bytes(L70, b, s, "vanilla", 1) == acts + 2 * a * s * s * b
    assert tc.layer_activation_bytes(L70, b, s, "vanilla", 4) == (acts + 2 * a * s * s * b) / 4
    assert tc.layer_activation_bytes(L70, b, s, "activation recomp", 2) == 2 * s * b * h / 2


def test_times_on_a_round_gpu():
    # peak 1e15, efficiency 0.5, NVLink 1e11 B/s: t = 2 splits the FLOPs and adds 8
    # collectives of (t - 1)/t x 2 b s h bytes (12 with full recomputation)
    b, s, h = 1, 4096, 8192
    data = transformer_instance(L70, ROUND, seq_len=s, efficiency=0.5)
    inst = instance_from_dict(data)
    for oid, n in (("vanilla", 8), ("selective recomp", 8), ("activation recomp", 12)):
        flops = tc.layer_training_flops(L70, b, s, oid)
        p = options(inst, 3, 2)[oid].p
        assert p == pytest.approx(flops / (2 * 0.5e15) + n * 0.5 * 2 * b * s * h / 1e11, rel=1e-12)
        assert options(inst, 3, 1)[oid].p == pytest.approx(flops / 0.5e15, rel=1e-12)
    head = options(inst, 81, 1)["head"]
    assert head.p == pytest.approx(6 * b * s * h * 32000 / 0.5e15, rel=1e-12)
    assert head.a == pytest.approx(4 * s * b * h * (1 + 32000 / h), rel=1e-12)
    assert (inst.K, inst.M, inst.N, inst.B) == (8, 1e11, 8, 1e10)


# ---- Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py) ----


def megatron_first_stage_bytes(cfg, s, b, t, pp) -> float:
    """Megatron-LM's compute_weight_and_optimizer_memory + compute_activation_memory for a
    dense model with sequence parallelism and selective recomputation, no distributed
    optimizer, non-interleaved 1F1B with at least pp microbatches (transcribed)."""
    h, f, a, k = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads
    norm = 1 if cfg.norm == "rmsnorm" else 2
    attention = 2 * h * h * (1 + k / a)
    mlp = 2 * h * f * (3 / 2 if cfg.gated_mlp else 1)
    tp_sharded = (attention + mlp) * cfg.num_layers / pp + h * cfg.vocab_size
    replicated = 2 * h * norm * cfg.num_layers / pp
    weights = (tp_sharded / t + replicated) * 18
    act = s * b * h * (18 + 4 * f / h) * cfg.num_layers
    act += 8 * s * b * pp + s * b * h * pp
    return weights + act / t


@pytest.mark.parametrize("name", ["gpt3-13b", "gpt3-175b"])
def test_first_stage_memory_agrees_with_megatron_where_the_assumptions_coincide(name):
    # GPT shapes, dropout, selective recomputation, t = 8, 8 stages of L / 8 layers, y = 8
    cfg = MODEL_PRESETS[name]
    inst = instance_from_dict(transformer_instance(cfg, HARDWARE_PRESETS["a100-80gb"]))
    per = cfg.num_layers // 8
    nodes = [(0, "embedding")] + [(i, "selective recomp") for i in range(1, per + 1)]
    ours = math.fsum(options(inst, v, 8)[o].a * 8 + options(inst, v, 8)[o].b for v, o in nodes)
    theirs = megatron_first_stage_bytes(cfg, 2048, 1, 8, 8)
    # their formula leaves out the learned position embedding (P h parameters, replicated;
    # GPT-3 13B: 0.19 of 6.1 GB) and the biases, and splits the token ids t ways
    positions = 18 * cfg.max_positions * cfg.hidden_size
    assert ours - positions == pytest.approx(theirs, rel=2e-3) and ours - positions > theirs


# ---- the instance and the CLI ----


def test_the_instance_is_a_chain_with_a_model_section():
    data = transformer_instance(MODEL_PRESETS["llama3-8b"], HARDWARE_PRESETS["h100-80gb"])
    inst = instance_from_dict(data)
    assert inst.node_ids == list(range(34))
    assert [(e.src, e.dst) for e in inst.edges] == [(i, i + 1) for i in range(33)]
    assert [n.name for n in inst.nodes[:2]] == ["embedding", "layer 1"]
    assert inst.t_values == [1, 2, 4, 8]
    sec = read_model_section(data, "x.json")
    assert sec.config == MODEL_PRESETS["llama3-8b"] and sec.seq_len == 8192
    with pytest.raises(InputError, match="no 'model' section"):
        read_model_section({"nodes": []}, "x.json")


def test_a_hugging_face_config_gives_the_preset_s_instance(tmp_path):
    cfg = config_from_hf(LLAMA2_70B_JSON, "config.json")
    hw = HARDWARE_PRESETS["h100-80gb"]
    a, b = transformer_instance(cfg, hw), transformer_instance(L70, hw)
    assert a["nodes"] == b["nodes"] and a["edges"] == b["edges"]
    no_kv = {k: v for k, v in LLAMA2_70B_JSON.items() if k != "num_key_value_heads"}
    assert config_from_hf(no_kv).num_kv_heads == 64  # absent: multi-head attention


@pytest.mark.parametrize(
    "change, field",
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"vocab_size": -5}, "vocab_size"),
        ({"num_key_value_heads": 6}, "num_key_value_heads"),
        ({"num_attention_heads": 60}, "num_attention_heads"),
        ({"hidden_act": "tanh"}, "hidden_act"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings"),
        ({"intermediate_size": 1.5}, "intermediate_size"),
        # a million layers took minutes and gigabytes before the instance was refused
        ({"num_hidden_layers": 16385}, "num_hidden_layers"),
        ({"_name_or_path": 5}, "_name_or_path"),
        # the name is printed in export's comment lines: a line break ended the comment and
        # made the rest a shell command in Megatron-LM's arguments
        ({"_name_or_path": "llama\ntouch /tmp/x #"}, "_name_or_path"),
        ({"_name_or_path": "a\u202eb"}, "_name_or_path"),
        # a mixture of experts was planned as a dense model (the experts' weights left out)
        ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts"),
        ({"num_experts": 60}, "num_experts"),
        ({"n_routed_experts": 64}, "n_routed_experts"),
    ],
)
def test_bad_configs_exit_2_naming_the_field(tmp_path, change, field):
    cfg = {**LLAMA2_70B_JSON, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = runner.invoke(
        app, ["from-config", str(path), "--hardware", "h100-80gb", "-o", str(tmp_path / "o.json")]
    )
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert field in r.output and str(path) in r.output
    assert not (tmp_path / "o.json").exists()


L70_H100 = ["llama2-70b", "--hardware", "h100-80gb"]


@pytest.mark.parametrize(
    "args, words",
    [
        (["gpt4", "--hardware", "h100-80gb"], ["unknown model 'gpt4'"]),
        (["llama2-70b", "--hardware", "tpu"], ["unknown hardware 'tpu'"]),
        ([*L70_H100, "--tp-degrees", "3"], ["t = 3", "num_attention_heads"]),
        ([*L70_H100, "--tp-degrees", "16"], ["t = 16", "GPUs per node"]),
        ([*L70_H100, "--seq-len", "0"], ["--seq-len"]),
        ([*L70_H100, "--seq-len", "8192"], ["max_position_embeddings"]),
        ([*L70_H100, "--micro-batch-size", "0"], ["--micro-batch-size"]),
        ([*L70_H100, "--efficiency", "1.5"], ["--efficiency"]),
        ([*L70_H100, "--devices", "0"], ["--devices"]),
    ],
)
def test_bad_arguments_exit_2_in_one_line(tmp_path, args, words):
    r = runner.invoke(app, ["from-config", *args, "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert all(w in r.output for w in words), r.output


def test_a_config_that_is_not_json_and_a_bad_hardware_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{hidden_size: 8}")
    r = runner.invoke(
        app, ["from-config", str(bad), "--hardware", "h100-80gb", "-o", str(tmp_path / "o.json")]
    )
    assert r.exit_code == 2 and "invalid JSON" in r.output and str(bad) in r.output
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({"peak_flops": 1e15, "hbm_bytes": 8e10, "nvlink_bandwidth": 0,
                              "network_bandwidth": 5e10, "gpus_per_node": 8}))  # fmt: skip
    r = runner.invoke(
        app, ["from-config", "llama3-8b", "--hardware", str(hw), "-o", str(tmp_path / "o.json")]
    )
    assert r.exit_code == 2 and "nvlink_bandwidth" in r.output
    hw.write_text(json.dumps({"peak_flops": 1e15}))
    with pytest.raises(InputError, match="missing field 'hbm_bytes'"):
        load_hardware(str(hw))


def test_a_misspelt_hardware_field_is_named_with_the_known_ones(tmp_path):
    # "peak_flop" read as "missing field 'peak_flops'", and a misspelt optional one
    # ("nmae") was dropped without a word
    good = {"peak_flops": 1e15, "hbm_bytes": 8e10, "nvlink_bandwidth": 4e11,
            "network_bandwidth": 5e10, "gpus_per_node": 8}  # fmt: skip
    hw = tmp_path / "hw.json"
    for typo, key in (("peak_flop", "peak_flops"), ("nmae", None)):
        data = {**good, typo: 1e15}
        if key is not None:
            del data[key]
        hw.write_text(json.dumps(data))
        known = "name, peak_flops, hbm_bytes, nvlink_bandwidth, network_bandwidth, gpus_per_node"
        with pytest.raises(
            InputError, match=f"unknown field '{typo}'; the known fields are {known}"
        ):
            load_hardware(str(hw))
        r = runner.invoke(
            app, ["from-config", "llama3-8b", "--hardware", str(hw), "-o", str(tmp_path / "o.json")]
        )
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert f"unknown field '{typo}'" in r.output and str(hw.name) in r.output, r.output
    hw.write_text(json.dumps({**good, "name": "my gpu"}))
    assert load_hardware(str(hw)).name == "my gpu"


def test_cli_writes_the_instance_and_a_json_summary(tmp_path):
    out = tmp_path / "l8.json"
    args = ["llama3-8b", "--hardware", "h100-80gb", "--devices", "64", "--batch", "128"]
    r = runner.invoke(app, ["from-config", *args, "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    (summary,) = json_lines(r.output)
    for key in (
        "parameters",
        "peak_flops",
        "layers",
        "nodes",
        "seq_len",
        "micro_batch_size",
        "hardware",
        "output",
    ):
        assert key in summary
    assert summary["parameters"] == tc.model_parameters(MODEL_PRESETS["llama3-8b"])
    assert summary["peak_flops"] == 989.4e12 and summary["nodes"] == 34 and summary["layers"] == 32
    assert summary["settings"] == {"K": 64, "M": 80e9, "N": 128, "B": 50e9}
    assert json.loads(out.read_text())["model"]["name"] == "llama3-8b"
    r = runner.invoke(app, ["from-config", "--list"])
    assert r.exit_code == 0 and "llama3-405b" in r.output and "h100-80gb" in r.output


@pytest.mark.parametrize(
    "change, field",
    [
        ({"peak_flops": 1e-300}, "peak_flops"),
        ({"hbm_bytes": 1e40}, "hbm_bytes"),
        ({"network_bandwidth": 1e-40}, "network_bandwidth"),
        ({"gpus_per_node": 10**9}, "gpus_per_node"),
        # printed in export's comment lines: a line break would start a shell line
        ({"name": "h100\ntouch /tmp/x #"}, "name"),
    ],
)
def test_hardware_numbers_out_of_range_name_the_hardware_file(tmp_path, change, field):
    # these numbers gave an instance out of range, refused naming the output file and an
    # instance field the user never wrote (or, for gpus_per_node, --devices and --batch)
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({**HARDWARE_PRESETS["h100-80gb"].to_dict(), **change}))
    out = tmp_path / "o.json"
    r = runner.invoke(app, ["from-config", "llama3-8b", "--hardware", str(hw), "-o", str(out)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert f"{hw}: field '{field}'" in r.output, r.output
    assert not out.exists()


def test_derived_numbers_out_of_range_name_the_config_not_the_output(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA2_70B_JSON, "hidden_size": 10**30}))
    out = tmp_path / "o.json"
    r = runner.invoke(app, ["from-config", str(path), "--hardware", "h100-80gb", "-o", str(out)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert str(path) in r.output and "derived by from-config" in r.output
    assert str(out) not in r.output and not out.exists()


def test_the_summary_line_writes_parameter_counts_readably(tmp_path):
    # were printed as '8.192e+14e9' and the like; with V = 1e20 the two embeddings, 2 V h =
    # 1.6384e24, outweigh the rest (69e9)
    out = tmp_path / "o.json"
    for vocab, want in ((32000, "68.98e9 parameters"), (10**20, "1.638e+24 parameters")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**LLAMA2_70B_JSON, "vocab_size": vocab}))
        r = runner.invoke(
            app, ["from-config", str(path), "--hardware", "h100-80gb", "-o", str(out)]
        )
        assert r.exit_code == 0 and want in r.output, r.output
