"""``piper-ilp export``: uniform plans of from-config instances as Megatron-LM arguments and
torchtitan settings, and one-line refusals of what the framework cannot run (sec. 12)."""

from __future__ import annotations

import json
import re

import pytest
from builders import json_lines
from typer.testing import CliRunner

from compare.builders.hardware import HARDWARE_PRESETS
from compare.builders.transformer import MODEL_PRESETS, transformer_instance
from compare.export import ExportError, megatron_arguments, plan_layout, torchtitan_toml
from compare.export.torchtitan import torchtitan_settings
from piper_cli import app
from piper_ilp.instance import instance_from_dict
from piper_ilp.plan import Plan, Stage, load_plan, plan_metadata, save_plan

runner = CliRunner()
V, S, F = "vanilla", "selective recomp", "activation recomp"


def megatron_layout_stages(text: str) -> list[list[str]]:
    """Megatron-LM's parse_str_to_list (megatron/core/transformer/
    pipeline_parallel_layer_layout.py), transcribed: commas dropped, (..)*n and x*n
    unrolled, stages split by '|'."""
    text = text.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return [list(stage) for stage in text.split("|")]


def instance_data(name="llama3-8b", K=64, N=64, M=1e15):
    return transformer_instance(
        MODEL_PRESETS[name], HARDWARE_PRESETS["h100-80gb"], devices=K, batch=N, memory=M
    )


def plan_of(counts, t=2, d=4, options=None, L=32):
    """A plan with ``counts[i]`` layers in stage i (embedding in the first, head in the
    last), every stage at (t, d); ``options[i]`` the layers' option ids (default vanilla)."""
    assert sum(counts) == L
    stages, v = [], 1
    for i, n in enumerate(counts):
        nodes = (
            ([0] if i == 0 else [])
            + list(range(v, v + n))
            + ([L + 1] if i == len(counts) - 1 else [])
        )
        opts = (options or {}).get(i, [V] * n)
        chosen = {u: o for u, o in zip(range(v, v + n), opts)}
        if i == 0:
            chosen[0] = "embedding"
        if i == len(counts) - 1:
            chosen[L + 1] = "head"
        stages.append(Stage(tuple(nodes), d, t, chosen))
        v += n
    return Plan(tuple(stages))


def layout_of(counts, framework="megatron", data=None, **kw):
    data = data or instance_data()
    return plan_layout(data, instance_from_dict(data, "x.json"), plan_of(counts, **kw), framework)


# ---- Megatron-LM ----


def test_megatron_even_stages_need_no_layer_arguments():
    args = megatron_arguments(layout_of([8, 8, 8, 8]))
    par = args["parallel"]
    assert par[:2] == ["--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 4"]
    assert "--micro-batch-size 1" in par and "--global-batch-size 64" in par
    assert "--sequence-parallel" in par and not [
        a for a in par if "pipeline-num-layers" in a or "layout" in a
    ]
    assert args["world_size"] == 32 and args["data_parallel_size"] == 4
    assert "--num-layers 32" in args["model"] and "--num-query-groups 8" in args["model"]
    no_tp = megatron_arguments(layout_of([16, 16], t=1, d=8))["parallel"]
    assert "--sequence-parallel" not in no_tp and "--tensor-model-parallel-size 1" in no_tp


@pytest.mark.parametrize(
    "counts, want",
    [
        (
            [7, 9, 9, 7],
            ["--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7"],
        ),
        ([5, 9, 9, 9], ["--decoder-first-pipeline-num-layers 5"]),
        ([9, 9, 9, 5], ["--decoder-last-pipeline-num-layers 5"]),
        (
            [10, 22],
            ["--decoder-first-pipeline-num-layers 10", "--decoder-last-pipeline-num-layers 22"],
        ),
    ],
)
def test_megatron_uneven_first_and_last_stages(counts, want):
    par = megatron_arguments(layout_of(counts))["parallel"]
    assert [a for a in par if "pipeline-num-layers" in a] == want
    # Megatron-LM's rule (TransformerConfig): the layers not in a given first or last stage
    # split evenly over the other stages; that must give the plan's counts back
    given = {a.split()[0]: int(a.split()[1]) for a in want}
    first = given.get("--decoder-first-pipeline-num-layers")
    last = given.get("--decoder-last-pipeline-num-layers")
    rest = [i for i, x in enumerate((first, *[None] * (len(counts) - 2), last)) if x is None]
    if len(counts) == 2:
        rest = [i for i, x in enumerate((first, last)) if x is None]
    left = 32 - (first or 0) - (last or 0)
    got = [
        first if i == 0 and first else last if i == len(counts) - 1 and last else left // len(rest)
        for i in range(len(counts))
    ]
    assert got == counts and (not rest or left % len(rest) == 0)


@pytest.mark.parametrize(
    "counts",
    [[8, 10, 6, 8], [0, 16, 16], [16, 16, 0], [1, 30, 1, 0]],
)
def test_megatron_layout_string_parses_back_to_the_plan(counts):
    layout = layout_of(counts)
    (arg,) = [a for a in megatron_arguments(layout)["parallel"] if "layout" in a]
    stages = megatron_layout_stages(arg.split('"')[1])
    assert [s.count("t") for s in stages] == counts
    assert stages[0][0] == "E" and stages[-1][-1] == "L"
    assert sum(s.count("E") for s in stages) == 1 and sum(s.count("L") for s in stages) == 1


def test_megatron_recomputation_flags():
    par = megatron_arguments(layout_of([8, 8, 8, 8], options={i: [S] * 8 for i in range(4)}))
    assert "--recompute-granularity selective" in par["parallel"]
    par = megatron_arguments(layout_of([8, 8, 8, 8], options={i: [F] * 8 for i in range(4)}))
    assert par["parallel"][-3:] == [
        "--recompute-granularity full",
        "--recompute-method uniform",
        "--recompute-num-layers 1",
    ]
    # block: the first min(k, n) layers of every stage, k = 3
    opts = {0: [F, F, F, V, V, V], 1: [F, F, F] + [V] * 9, 2: [F, F], 3: [F, F, F] + [V] * 9}
    args = megatron_arguments(layout_of([6, 12, 2, 12], options=opts))
    assert args["parallel"][-2:] == ["--recompute-method block", "--recompute-num-layers 3"]
    assert args["notes"] == []
    # the same counts on other layers: equivalent (identical layers), said in a note
    opts[0] = [V, F, F, F, V, V]
    args = megatron_arguments(layout_of([6, 12, 2, 12], options=opts))
    assert "--recompute-num-layers 3" in args["parallel"] and "first 3 layers" in args["notes"][0]


@pytest.mark.parametrize(
    "opts, words",
    [
        (
            {0: [S] + [V] * 7},
            ["mixes", "stage 0: 7 vanilla + 1 selective recomp", "stages 1-3: 8 vanilla"],
        ),
        ({0: [F] * 8}, ["recomputes different numbers", "stage 0: 8 activation recomp"]),
        ({1: [F, F] + [V] * 6, 2: [F] + [V] * 7}, ["recomputes different numbers"]),
    ],
)
def test_megatron_refuses_a_recomputation_it_cannot_express(opts, words):
    with pytest.raises(ExportError) as err:
        megatron_arguments(layout_of([8, 8, 8, 8], options=opts))
    assert all(w in str(err.value) for w in words), str(err.value)


def test_a_plan_with_different_degrees_is_refused():
    data = instance_data()
    plan = plan_of([16, 16])
    plan = Plan((plan.stages[0], Stage(plan.stages[1].nodes, 2, 4, plan.stages[1].options)))
    with pytest.raises(
        ExportError, match=r"stage 1 has \(t, d\) = \(4, 2\) but stage 0 has \(2, 4\).*--uniform"
    ):
        plan_layout(data, instance_from_dict(data, "x.json"), plan, "megatron")


def test_an_instance_not_made_by_from_config_is_refused():
    data = instance_data()
    del data["model"]
    with pytest.raises(ExportError, match="no 'model' section"):
        plan_layout(data, instance_from_dict(data, "x.json"), plan_of([32]), "megatron")


def test_an_invalid_plan_is_refused():
    data = instance_data(M=1e9)  # 1 GB: nothing fits
    with pytest.raises(ExportError, match="not valid for this instance"):
        plan_layout(data, instance_from_dict(data, "x.json"), plan_of([32]), "megatron")


# ---- torchtitan ----


def test_torchtitan_modules_degrees_and_batch():
    layout = layout_of(
        [6, 10, 10, 6],
        framework="torchtitan",
        options={i: [F] * n for i, n in enumerate([6, 10, 10, 6])},
    )
    st = torchtitan_settings(layout)
    par = st["parallelism"]
    names = [m for part in par["module_fqns_per_model_part"] for m in part]
    assert names == ["tok_embeddings"] + [f"layers.{i}" for i in range(32)] + ["norm", "output"]
    assert [len(p) for p in par["module_fqns_per_model_part"]] == [7, 10, 10, 8]
    assert (par["pipeline_parallel_degree"], par["tensor_parallel_degree"]) == (4, 2)
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (4, 1)
    assert st["training"] == {"local_batch_size": 16, "seq_len": 8192}  # N / d = 64 / 4
    assert st["activation_checkpoint"] == {"mode": "full"}
    text = torchtitan_toml(layout)
    assert "[parallelism]" in text and 'pipeline_parallel_schedule = "1F1B"' in text
    assert '["tok_embeddings", "layers.0",' in text


@pytest.mark.parametrize(
    "opts, words",
    [({0: [S] * 8}, ["attention core"]), ({0: [F] + [V] * 7}, ["every layer or none", "stage 0"])],
)
def test_torchtitan_refuses_what_its_checkpointing_cannot_do(opts, words):
    with pytest.raises(ExportError) as err:
        torchtitan_settings(layout_of([8, 8, 8, 8], framework="torchtitan", options=opts))
    assert all(w in str(err.value) for w in words)


def test_torchtitan_refuses_a_model_without_llama_modules():
    data = instance_data("gpt3-1.3b", K=16, N=16)
    layout = plan_layout(
        data, instance_from_dict(data, "x.json"), plan_of([24], L=24, t=1, d=1), "torchtitan"
    )
    with pytest.raises(
        ExportError, match="GeLU MLP, learned positions, LayerNorm, biases, tied embeddings"
    ):
        torchtitan_settings(layout)


# ---- the command line ----


def solved_files(tmp_path, counts=(8, 8, 8, 8), **kw):
    data = instance_data()
    inst_path, plan_path = tmp_path / "l8.json", tmp_path / "plan.json"
    inst_path.write_text(json.dumps(data))
    inst = instance_from_dict(data, str(inst_path))
    save_plan(plan_of(list(counts), **kw), plan_path, metadata=plan_metadata(inst, method="dp"))
    return inst_path, plan_path


def test_cli_export_prints_writes_and_refuses(tmp_path):
    inst_path, plan_path = solved_files(tmp_path)
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    assert "--tensor-model-parallel-size 2 \\" in r.output and r.output.rstrip().endswith("--bf16")
    out = tmp_path / "titan.toml"
    r = runner.invoke(
        app, ["export", str(inst_path), str(plan_path), "--to", "torchtitan", "-o", str(out)]
    )
    assert r.exit_code == 0 and "[parallelism]" in out.read_text()
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron", "--json"])
    (rec,) = json_lines(r.output)
    assert rec["framework"] == "megatron" and rec["world_size"] == 32
    for bad in (["--to", "deepspeed"], ["--to", "megatron", "-N", "32"]):
        r = runner.invoke(app, ["export", str(inst_path), str(plan_path), *bad])
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    inst_path, plan_path = solved_files(tmp_path, options={0: [S] + [V] * 7})
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "mixes" in r.output


def test_llama2_70b_on_1024_h100s_uniform_plan_exports_its_degrees(tmp_path):
    # sec. 12's worked example: the uniform optimum mixes selective recomputation into two
    # stages (refused, naming them); with selective recomputation everywhere it exports
    path = tmp_path / "l70.json"
    args = ["llama2-70b", "--hardware", "h100-80gb", "--devices", "1024", "--batch", "1024"]
    assert runner.invoke(app, ["from-config", *args, "-o", str(path)]).exit_code == 0
    mixed, sel = tmp_path / "mixed.json", tmp_path / "sel.json"
    r = runner.invoke(app, ["solve", str(path), "--uniform", "-o", str(mixed)])
    assert r.exit_code == 0 and "optimal" in r.output, r.output
    r = runner.invoke(app, ["export", str(path), str(mixed), "--to", "megatron"])
    assert r.exit_code == 2 and "mixes" in r.output
    excl = ["--exclude-option", "vanilla", "--exclude-option", "activation recomp"]
    r = runner.invoke(app, ["solve", str(path), "--uniform", *excl, "-o", str(sel)])
    assert r.exit_code == 0 and "optimal" in r.output, r.output
    plan = load_plan(sel)
    r = runner.invoke(app, ["export", str(path), str(sel), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    assert f"--tensor-model-parallel-size {plan.stages[0].t} \\" in r.output
    assert f"--pipeline-model-parallel-size {len(plan.stages)} \\" in r.output
    assert "--recompute-granularity selective" in r.output
    assert f"run on {plan.devices} GPUs" in r.output
