"""compare/deepen.py (deeper models from a repeated block) and compare/bench_dp.py."""

from __future__ import annotations

import json

import pytest

from compare.deepen import deepen, repeated_chain
from dp import count_ideals, solve_dp
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance
from piper_ilp.solution import Status


def _opt(p, a, sfw, sbw):
    return {"id": "vanilla", "timePerSample": p, "parameterSize": 1.0, "memoryUsageA": a, "memoryUsageB": 0.0,
            "syncTimeFw": sfw, "syncTimeBw": sbw}


def _toy():
    """input 0 -> layers 1, 2, 3 (a chain) -> head 4, plus a mask 5 feeding every layer."""
    layers = [1, 2, 3]
    edges = [(0, 1, 4.0), (1, 2, 2.0), (2, 3, 2.0), (3, 4, 4.0)] + [(5, v, 1.0) for v in layers]
    preds = {v: [u for u, x, _ in edges if x == v] for v in range(6)}
    succs = {v: [x for u, x, _ in edges if u == v] for v in range(6)}
    names = {0: "in", 1: "Layer", 2: "Layer", 3: "Layer", 4: "head", 5: "mask"}
    nodes = []
    for v in range(6):
        sfw = {str(u): 0.5 * u for u in preds[v]}
        sbw = {str(x): 0.25 * x for x in succs[v]}
        nodes.append({"id": v, "name": names[v], "TMPCs": {"1": [_opt(1.0 + 0.01 * v, 2.0, sfw, sbw)]}})
    return instance_from_dict({
        "maxDevices": 4, "maxMemoryPerDevice": 1e3, "bandwidth": 1.0, "mbsInBatch": 4, "nodes": nodes,
        "edges": [{"sourceId": u, "destId": x, "communicationCost": c} for u, x, c in edges],
    })


def test_repeated_chain_and_deepen_toy():
    inst = _toy()
    assert repeated_chain(inst) == [1, 2, 3]
    deep = deepen(inst, 6)
    assert repeated_chain(deep) == [1, 2, 6, 7, 8, 3]
    # the copies sit right after the template (layer 2) in the node list
    assert deep.node_ids == [0, 1, 2, 6, 7, 8, 3, 4, 5]
    g = deep.graph
    for x in (6, 7, 8):
        assert g.has_edge(5, x) and g[5][x]["c"] == 1.0  # the mask edge is copied
        opt = deep.node[x].options[1][0]
        assert set(opt.sfw) == set(g.predecessors(x)) and set(opt.sbw) == set(g.successors(x))
        assert opt.p == inst.node[2].options[1][0].p
    assert g.has_edge(8, 3) and not g.has_edge(2, 3) and g[2][6]["c"] == 2.0
    mask = deep.node[5].options[1][0]
    assert mask.sbw[6] == mask.sbw[2]
    assert deep.node[3].options[1][0].sfw[8] == inst.node[3].options[1][0].sfw[2]
    # a valid instance the DP can solve; same layer count is a plain copy
    assert solve_dp(deep).status == Status.OPTIMAL
    assert instance_to_dict(deepen(inst, 3)) == instance_to_dict(inst)


def test_deepen_errors():
    inst = _toy()
    with pytest.raises(InputError, match=">= 3"):
        deepen(inst, 2)
    data = instance_to_dict(inst)
    for nd in data["nodes"]:
        nd["name"] = f"n{nd['id']}"
    with pytest.raises(InputError, match="no repeated block"):
        deepen(instance_from_dict(data), 5)


@pytest.mark.shared
def test_deepen_bert(shared_dir):
    bert = load_instance(shared_dir / "piper-inputs" / "bert32a100.json")
    assert len(repeated_chain(bert)) == 32
    for layers in (48, 64):
        deep = deepen(bert, layers)
        assert len(repeated_chain(deep)) == layers
        assert len(deep.nodes) == len(bert.nodes) + layers - 32
        # every copy receives the attention mask (node 4), like the layers it copies
        assert all(deep.graph.has_edge(4, v) for v in repeated_chain(deep)[1:])
        assert count_ideals(deep) == 43 + layers - 32


@pytest.mark.shared
def test_bench_quick_rows(shared_dir, tmp_path):
    from compare import bench_dp

    out = tmp_path / "bench.json"
    assert bench_dp.main(["--only", "bert-K512", "--modes", "greedy", "--repeat", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1 and rows[0]["status"] == "feasible"
    assert abs(rows[0]["tps"] / 0.00256112784601 - 1) < 1e-9
    assert rows[0]["ratio"] == pytest.approx(rows[0]["seconds"] / 4.4)
    assert rows[0]["ideals"] == 43 and rows[0]["stage_candidates"] > 0 and rows[0]["rss_mb"] > 0
