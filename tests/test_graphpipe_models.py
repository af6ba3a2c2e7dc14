"""GraphPipe-like models (compare/builders/graphpipe.py, ``towers --preset``) and issue 35's
bench rows (``bench modes --graphpipe``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from compare.bench.modes import measure_isolated
from compare.builders.deepen import repeated_chain
from compare.builders.graphpipe import PRESETS, Preset, graphpipe_model
from compare.crosscheck.brute import solve_brute
from dp.modes import solve_modes
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict, load_instance
from piper_ilp.mode import Mode

BERT = "piper-inputs/bert32a100.json"
_KINDS = ("embedding", "layer", "fusion", "top MLP", "head", "input", "interaction")


def _opt(tps, a, b, w=0.5, fw=(), bw=()):
    return {
        "id": "vanilla", "timePerSample": tps, "parameterSize": w, "memoryUsageA": a,
        "memoryUsageB": b, "syncTimeFw": {str(u): 0.1 for u in fw},
        "syncTimeBw": {str(x): 0.2 for x in bw},
    }  # fmt: skip


def _tiny_profile():
    """input 0 -> embedding 1 -> layers 2, 3, 4 -> head 5 (distinct numbers per kind)."""
    nodes = [
        {"id": 0, "name": "in", "TMPCs": {"1": [_opt(0.0, 1, 0, 0, (), [1])]}},
        {"id": 1, "name": "emb", "TMPCs": {"1": [_opt(0.1, 2, 9, 4, [0], [2])]}},
    ]
    nodes += [
        {"id": i, "name": "layer", "TMPCs": {"1": [_opt(1.0, 3, 1, 1, [i - 1], [i + 1])]}}
        for i in (2, 3, 4)
    ]
    nodes += [{"id": 5, "name": "head", "TMPCs": {"1": [_opt(0.3, 1, 1, 1, [4], [])]}}]
    costs = [0.5, 2.0, 1.0, 1.0, 3.0]  # input->emb, emb->layer, layer->layer x2, layer->head
    return instance_from_dict(
        {
            "maxDevices": 4, "maxMemoryPerDevice": 40, "bandwidth": 1, "mbsInBatch": 4,
            "nodes": nodes,
            "edges": [
                {"sourceId": i, "destId": i + 1, "communicationCost": c}
                for i, c in enumerate(costs)
            ],
        },
        source="tiny",
    )  # fmt: skip


def test_models_of_a_tiny_profile_have_the_documented_shape_and_bytes():
    prof = _tiny_profile()
    mmt = graphpipe_model(prof, Preset("mmt", 2, 2, 1))
    # input, 2 x (embedding + 2 layers), 1 fusion layer, head
    assert [n.name for n in mmt.nodes] == [
        "input", "branch 0 embedding", "branch 0 layer 0", "branch 0 layer 1",
        "branch 1 embedding", "branch 1 layer 0", "branch 1 layer 1", "fusion 0", "head",
    ]  # fmt: skip
    edges = {(e.src, e.dst): e.c for e in mmt.edges}
    assert edges == {
        (0, 1): 0.5, (1, 2): 2.0, (2, 3): 1.0, (3, 7): 1.0,
        (0, 4): 0.5, (4, 5): 2.0, (5, 6): 1.0, (6, 7): 1.0, (7, 8): 3.0,
    }  # fmt: skip
    dlrm = graphpipe_model(prof, Preset("dlrm", 3, 0, 1))
    edges = {(e.src, e.dst): e.c for e in dlrm.edges}
    # input 0, tables 1-3, interaction 4 (a copy of the input), top MLP 5, head 6
    assert edges == {
        (0, 1): 0.5, (0, 2): 0.5, (0, 3): 0.5, (1, 4): 2.0, (2, 4): 2.0, (3, 4): 2.0,
        (4, 5): 2.0, (5, 6): 3.0,
    }  # fmt: skip
    assert dlrm.node[4].name == "interaction" and dlrm.node[4].options[1][0].p == 0.0
    for model in (mmt, dlrm):  # sync entries exactly for the new neighbours
        g = model.graph
        for v in model.node_ids:
            for opts in model.node[v].options.values():
                assert set(opts[0].sfw) == set(g.predecessors(v))
                assert set(opts[0].sbw) == set(g.successors(v))


@pytest.mark.parametrize("mode", [Mode("graph"), Mode("graph", "batch-time")])
def test_graph_dp_matches_brute_on_a_small_dlrm_like_model(mode):
    model = graphpipe_model(_tiny_profile(), Preset("dlrm", 3, 0, 1))
    dp = solve_modes(model, mode=mode)
    ref = solve_brute(model, mode=mode)
    assert dp.status.value == ref.status.value == "optimal"
    assert dp.value == pytest.approx(ref.value, rel=1e-9)


def test_bad_presets_are_refused():
    prof = _tiny_profile()
    with pytest.raises(InputError, match="unknown model"):
        graphpipe_model(prof, "mmt3")
    with pytest.raises(InputError, match=">= 2 branches"):
        graphpipe_model(prof, Preset("mmt", 1, 2, 1))
    no_input = instance_from_dict(
        {**_dict_without_input(prof)}, source="no-input"
    )  # the embedding has nothing before it
    with pytest.raises(InputError, match="no input node"):
        graphpipe_model(no_input, "dlrm8")


def _dict_without_input(prof):
    from piper_ilp.instance import instance_to_dict

    data = instance_to_dict(prof)
    data["nodes"] = [n for n in data["nodes"] if n["id"] != 0]
    for n in data["nodes"]:
        for opts in n["TMPCs"].values():
            for o in opts:
                o["syncTimeFw"].pop("0", None)
    data["edges"] = [e for e in data["edges"] if e["sourceId"] != 0]
    return data


def test_presets_copy_berts_layers(shared_dir):
    bert = load_instance(shared_dir / BERT)
    chain = repeated_chain(bert)  # BERT: embedding 1 -> layers 3, 5, ..., 35 -> pooler 36
    layer = bert.node[chain[len(chain) // 2]]  # the template: the middle transformer layer
    emb, head, inp = bert.node[1], bert.node[36], bert.node[0]
    sizes = {"mmt2": 1 + 2 * 13 + 2 + 1, "mmt4": 1 + 4 * 7 + 2 + 1, "dlrm8": 1 + 8 + 1 + 2 + 1}
    for name in PRESETS:
        model = graphpipe_model(bert, name)
        assert len(model.nodes) == sizes[name]
        assert (model.K, model.M, model.N, model.B) == (bert.K, bert.M, bert.N, bert.B)
        for v in model.node_ids:
            node = model.node[v]
            kind = next(k for k in _KINDS if k in node.name)
            proto = {"embedding": emb, "layer": layer, "fusion": layer, "top MLP": layer,
                     "head": head, "input": inp, "interaction": inp}[kind]  # fmt: skip
            for t, opts in node.options.items():
                assert [(o.id, o.p, o.w, o.a, o.b) for o in opts] == [
                    (o.id, o.p, o.w, o.a, o.b) for o in proto.options[t]
                ]
    dlrm = graphpipe_model(bert, "dlrm8")
    assert sorted(dlrm.graph.successors(0)) == list(range(1, 9))
    assert sorted(dlrm.graph.predecessors(9)) == list(range(1, 9))


def test_towers_preset_command(shared_dir, tmp_path):
    out = tmp_path / "dlrm8.json"
    base = [sys.executable, "-m", "piper_cli", "towers", str(shared_dir / BERT)]
    run = subprocess.run(
        [*base, "--preset", "dlrm8", "-K", "32", "-o", str(out)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    model = load_instance(out)
    assert len(model.nodes) == 13 and model.K == 32
    for extra in (["--preset", "mmt3"], ["--preset", "mmt2", "-L", "2,2"], []):
        bad = subprocess.run(
            [*base, *extra, "-o", str(tmp_path / "x.json")], capture_output=True, text=True
        )
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_isolated_bench_row_reports_the_dp_value_and_its_resources(tmp_path):
    from piper_ilp.instance import instance_to_dict

    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(instance_to_dict(_tiny_profile())))
    mode = Mode("graph", "batch-time")
    row = measure_isolated(str(path), "t", [1, 2], 4, 40 / 2**30, mode, limit=60)
    from compare.builders.towers import towers

    direct = solve_modes(towers(load_instance(path), [1, 2]), mode=mode)
    assert row["status"] == "optimal" and row["value"] == direct.value
    assert row["mode"] == mode.label and row["cpu"] > 0 and row["peak_rss_mb"] > 1
