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
from piper_ilp.evaluate import evaluate
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


def llama70_layout(options, framework="megatron"):
    """16 stages of 5 layers of Llama-2-70B at (t, d) = (4, 16) on 1,024 H100s with 80 GB
    each (the uniform optimum's stages, sec. 12's worked example); ``options[i]`` the
    options of stage i's layers (default vanilla)."""
    data = instance_data("llama2-70b", K=1024, N=1024, M=80e9)
    inst = instance_from_dict(data, "l70.json")
    plan = plan_of([5] * 16, t=4, d=16, options=options, L=80)
    return plan_layout(data, inst, plan, framework), inst


def value_of(inst, options, **kw):
    """The evaluator's (valid, TPS) of the 16 x 5 Llama-2-70B plan with these options."""
    ev = evaluate(inst, plan_of([5] * 16, t=4, d=16, options=options, L=80, **kw))
    return ev.valid, ev.value


def test_megatron_runs_the_best_setting_that_fits_when_the_plan_mixes_recomputation():
    # the uniform optimum's choice: one selective layer in each of stages 0-1, none elsewhere;
    # without recomputation stage 0 does not fit, so the setting must recompute everywhere
    mixed = {0: [S] + [V] * 4, 1: [S] + [V] * 4}
    layout, inst = llama70_layout(mixed)
    args = megatron_arguments(layout)
    assert args["parallel"][:2] == [
        "--tensor-model-parallel-size 4",
        "--pipeline-model-parallel-size 16",
    ]
    assert args["parallel"][-1] == "--recompute-granularity selective"
    assert value_of(inst, {})[0] is False  # no recomputation: out of memory
    valid, selective = value_of(inst, {i: [S] * 5 for i in range(16)})
    assert valid
    sub = args["substitution"]
    assert sub["value"] == selective and sub["planned_value"] == value_of(inst, mixed)[1]
    assert sub["changed_stages"] == list(range(16)) and sub["objective"] == "TPS"
    assert sub["planned"] == "stages 0-1: 4 vanilla + 1 selective recomp; stages 2-15: 5 vanilla"
    # every other setting Megatron-LM has is out of memory or no better
    others = [{i: [F] * 5 for i in range(16)}] + [
        {i: [F] * k + [V] * (5 - k) for i in range(16)} for k in range(1, 5)
    ]
    for opts in others:
        ok, value = value_of(inst, opts)
        assert not ok or value >= selective
    assert "stages 0-15 change" in args["notes"][1] and "above the plan's" in args["notes"][1]
    assert "stages 0-1: 4 vanilla + 1 selective recomp" in args["notes"][0]
    # one unit per quantity (issue 30 point 7): the TPS in seconds, as every command prints it
    pct = (selective / sub["planned_value"] - 1) * 100
    cost = f"TPS {selective:.6g} s, {pct:.2f}% above the plan's {sub['planned_value']:.6g} s"
    assert cost in args["notes"][1] and cost in sub["summary"], (args["notes"][1], cost)


@pytest.mark.parametrize(
    "opts, label, changed",
    [
        ({3: [S] + [V] * 7}, "no recomputation", [3]),
        ({3: [F] * 8}, "no recomputation", [3]),
        ({1: [F, F] + [V] * 6, 2: [F] + [V] * 7}, "no recomputation", [1, 2]),
    ],
)
def test_megatron_substitution_with_memory_to_spare_drops_the_recomputation(opts, label, changed):
    layout = layout_of([8, 8, 8, 8], options=opts)
    args = megatron_arguments(layout)
    assert not [a for a in args["parallel"] if "recompute" in a]
    sub = args["substitution"]
    assert sub["exported"] == label and sub["changed_stages"] == changed
    plain = evaluate(layout.instance, plan_of([8, 8, 8, 8]))
    assert sub["value"] == plain.value <= sub["planned_value"]
    # recomputation in the last stage (the head's, the bottleneck) costs time; elsewhere not
    word = "below" if 3 in changed else "equal to"
    assert (sub["value"] < sub["planned_value"]) == (3 in changed)
    assert (
        f"{word} the plan's" in sub["summary"]
        and f"stage{'s' * (len(changed) > 1)} " in sub["summary"]
    )


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


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m, d: m["config"].update(num_layers="32"), ["field 'num_layers'", "whole number"]),
        (lambda m, d: m["config"].update(rope=True), ["unknown field 'config.rope'"]),
        (lambda m, d: m.pop("seq_len"), ["missing field 'seq_len'"]),
        (lambda m, d: m.update(efficiency=2), ["field 'efficiency'", "(0, 1]"]),
        (lambda m, d: m["config"].update(norm="batchnorm"), ["config.norm"]),
        # the name goes into comment lines: a line break would start a shell command
        (lambda m, d: m["config"].update(name="l\ntouch x #"), ["config.name", "control"]),
        (lambda m, d: m["hardware"].update(name="h\rx"), ["model.hardware", "'name'", "control"]),
        (lambda m, d: m.update(config=[1]), ["field 'config' must be an object"]),
        (lambda m, d: m["config"].update(hidden_size=2048), ["not what from-config writes"]),
        (lambda m, d: d["nodes"][3].update(name="x"), ["node", "differs", "edited"]),
        (
            lambda m, d: d["nodes"][3]["TMPCs"]["1"][0].update(memoryUsageA=1.0),
            ["node 3 (nodes[3]) differs"],
        ),
    ],
)
def test_a_damaged_or_edited_model_section_is_refused_naming_the_field(edit, words):
    # export trusts the 'model' section for the framework's shape arguments: a section
    # that does not describe the instance's numbers would export another model
    data = instance_data()
    edit(data["model"], data)
    with pytest.raises(ExportError) as err:
        plan_layout(data, instance_from_dict(data, "x.json"), plan_of([32]), "megatron")
    msg = str(err.value)
    assert msg.startswith("x.json") and all(w in msg for w in words), msg
    assert "\n" not in msg


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


def test_torchtitan_checkpoints_every_nth_layer_when_the_plan_does():
    # torchtitan's layer SAC (selective_ac_option = "n") counts the blocks of a stage and
    # checkpoints every n-th: stages of 8, 8, 6, 10 layers with full recomputation in
    # layers 3, 6, ... of each
    counts = [8, 8, 6, 10]
    opts = {i: [F if (j + 1) % 3 == 0 else V for j in range(n)] for i, n in enumerate(counts)}
    st = torchtitan_settings(layout_of(counts, framework="torchtitan", options=opts))
    assert st["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "3"}
    assert st["substitution"] is None and st["notes"] == []


def test_torchtitan_runs_the_best_setting_that_fits_when_it_cannot_run_the_plan():
    mixed = {0: [S] + [V] * 4, 1: [S] + [V] * 4}
    layout, inst = llama70_layout(mixed, "torchtitan")
    st = torchtitan_settings(layout)
    ac = st["activation_checkpoint"]
    # no recomputation does not fit; the exported setting does, and no other beats it
    assert value_of(inst, {})[0] is False
    every = {
        n: {i: [F if (j + 1) % n == 0 else V for j in range(5)] for i in range(16)}
        for n in range(1, 6)
    }
    fits = {n: value_of(inst, o) for n, o in every.items()}
    best = min((v, n) for n, (ok, v) in fits.items() if ok)
    want = (
        {"mode": "full"}
        if best[1] == 1
        else {"mode": "selective", "selective_ac_option": str(best[1])}
    )
    assert ac == want and st["substitution"]["value"] == best[0]
    text = torchtitan_toml(layout)
    assert "# recomputation: the plan's per-layer choice" in text and "selective recomp" in text


def test_torchtitan_drops_selective_recomputation_when_memory_allows():
    st = torchtitan_settings(layout_of([8, 8, 8, 8], framework="torchtitan", options={0: [S] * 8}))
    assert st["activation_checkpoint"] == {"mode": "none"}
    assert st["substitution"]["changed_stages"] == [0]


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
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "deepspeed"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    # a flag overrides the plan's settings, as for evaluate, and a note says so
    r = runner.invoke(
        app, ["export", str(inst_path), str(plan_path), "--to", "megatron", "-N", "32"]
    )
    assert r.exit_code == 0 and "--global-batch-size 32 \\" in r.stdout, r.output
    assert "from the flags: N=32" in r.stderr
    # stages at different degrees: what Megatron-LM cannot run at all
    data = json.loads(inst_path.read_text())
    inst = instance_from_dict(data, str(inst_path))
    two = plan_of([16, 16])
    two = Plan((two.stages[0], Stage(two.stages[1].nodes, 2, 4, two.stages[1].options)))
    save_plan(two, plan_path, metadata=plan_metadata(inst, method="dp"))
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "--uniform" in r.output


def test_cli_export_takes_the_settings_the_plan_was_solved_for(tmp_path):
    # issue 30 point 1 for export: a plan solved at another N than the instance file's is
    # exported with the N its metadata records (it was refused before), saying so
    inst_path, plan_path = solved_files(tmp_path)
    inst = instance_from_dict(json.loads(inst_path.read_text()), str(inst_path))
    solved_at = inst.with_settings(N=16)
    save_plan(plan_of([8, 8, 8, 8]), plan_path, metadata=plan_metadata(solved_at, method="dp"))
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    assert "--global-batch-size 16 \\" in r.stdout
    (note,) = r.stderr.splitlines()
    assert note.startswith("piper-ilp: note: settings from the plan's metadata: K=64 ")
    assert " N=16 " in note
    # the instance file's own settings: no note
    save_plan(plan_of([8, 8, 8, 8]), plan_path, metadata=plan_metadata(inst, method="dp"))
    r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", "megatron"])
    assert r.exit_code == 0 and "--global-batch-size 64 \\" in r.stdout and r.stderr == ""


def test_cli_export_of_a_recomputation_mix_says_what_it_runs_instead(tmp_path):
    inst_path, plan_path = solved_files(tmp_path, options={3: [S] + [V] * 7})
    for to in ("megatron", "torchtitan"):
        r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", to])
        assert r.exit_code == 0, r.output
        assert "# these settings run no recomputation instead (stage 3 change)" in r.stdout
        (note,) = r.stderr.splitlines()
        assert note.startswith("piper-ilp: note: the plan's recomputation is no ")
        assert "exported no recomputation instead" in note and "below the plan's" in note
        r = runner.invoke(app, ["export", str(inst_path), str(plan_path), "--to", to, "--json"])
        (rec,) = json_lines(r.stdout)
        assert rec["substitution"]["changed_stages"] == [3] and len(rec["notes"]) == 2


def test_llama2_70b_on_1024_h100s_uniform_plan_exports_its_degrees(tmp_path):
    # sec. 12's worked example: the uniform optimum mixes selective recomputation into two
    # stages (exported with selective recomputation everywhere, which fits in memory, and a
    # note); solved with selective recomputation everywhere it exports as planned
    path = tmp_path / "l70.json"
    args = ["llama2-70b", "--hardware", "h100-80gb", "--devices", "1024", "--batch", "1024"]
    assert runner.invoke(app, ["from-config", *args, "-o", str(path)]).exit_code == 0
    mixed, sel = tmp_path / "mixed.json", tmp_path / "sel.json"
    r = runner.invoke(app, ["solve", str(path), "--uniform", "-o", str(mixed)])
    assert r.exit_code == 0 and "optimal" in r.output, r.output
    # exported with selective recomputation in every stage, saying so and what it costs
    r = runner.invoke(app, ["export", str(path), str(mixed), "--to", "megatron"])
    assert r.exit_code == 0, r.output
    plan = load_plan(mixed)
    assert f"--tensor-model-parallel-size {plan.stages[0].t} \\" in r.stdout
    assert f"--pipeline-model-parallel-size {len(plan.stages)} \\" in r.stdout
    assert "--recompute-granularity selective" in r.stdout
    assert "exported selective recomputation in every layer instead" in r.stderr
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
    # the substitute is a uniform plan with selective recomputation everywhere: never below
    # that restriction's optimum
    r = runner.invoke(app, ["export", str(path), str(mixed), "--to", "megatron", "--json"])
    (rec,) = json_lines(r.stdout)
    best = evaluate(instance_from_dict(json.loads(path.read_text()), str(path)), plan)
    assert rec["substitution"]["value"] >= best.value * (1 - 1e-12)
