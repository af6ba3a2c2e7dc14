"""compare/builders/deepen.py: deeper models from a repeated block (all edges, or chain
edges only as the paper)."""

from __future__ import annotations

import pytest

from compare.builders.deepen import deepen, repeated_chain
from dp import count_ideals, solve_dp
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance
from piper_ilp.solution import Status


def _opt(p, a, sfw, sbw):
    return {
        "id": "vanilla",
        "timePerSample": p,
        "parameterSize": 1.0,
        "memoryUsageA": a,
        "memoryUsageB": 0.0,
        "syncTimeFw": sfw,
        "syncTimeBw": sbw,
    }


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
        nodes.append(
            {"id": v, "name": names[v], "TMPCs": {"1": [_opt(1.0 + 0.01 * v, 2.0, sfw, sbw)]}}
        )
    return instance_from_dict(
        {
            "maxDevices": 4,
            "maxMemoryPerDevice": 1e3,
            "bandwidth": 1.0,
            "mbsInBatch": 4,
            "nodes": nodes,
            "edges": [{"sourceId": u, "destId": x, "communicationCost": c} for u, x, c in edges],
        }
    )


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


def test_deepen_chain_only_toy():
    inst = _toy()
    deep = deepen(inst, 6, chain_only=True)
    g = deep.graph
    assert repeated_chain(deep) == [1, 2, 6, 7, 8, 3]
    for prev, x, nxt in ((2, 6, 7), (6, 7, 8), (7, 8, 3)):
        # only the chain edges, with the template's chain-edge cost, and sync entries to match
        assert set(g.predecessors(x)) == {prev} and set(g.successors(x)) == {nxt}
        assert g[prev][x]["c"] == 2.0
        opt = deep.node[x].options[1][0]
        assert set(opt.sfw) == {prev} and set(opt.sbw) == {nxt}
        assert (
            opt.sfw[prev] == inst.node[2].options[1][0].sfw[1]
        )  # the template's entry for its chain predecessor
    assert not any(g.has_edge(5, x) for x in (6, 7, 8))  # the mask edge is not copied
    assert set(deep.node[5].options[1][0].sbw) == {1, 2, 3}
    assert len(deep.edges) == len(inst.edges) + 3
    assert solve_dp(deep).status == Status.OPTIMAL
    # the two rules differ exactly by the mask edges of the copies
    full = deepen(inst, 6)
    assert {(e.src, e.dst) for e in full.edges} - {(e.src, e.dst) for e in deep.edges} == {
        (5, 6),
        (5, 7),
        (5, 8),
    }


def test_deepen_template_choice():
    inst = _toy()
    with pytest.raises(InputError, match="template"):
        deepen(inst, 5, template=0)  # the first layer has no repeated predecessor
    with pytest.raises(InputError, match="template"):
        deepen(inst, 5, template=2)
    data = instance_to_dict(inst)
    data["nodes"][3]["name"] = "Other"  # layer 3 leaves the chain: 1 -> 2 only
    two = instance_from_dict(data)
    assert repeated_chain(two) == [1, 2]
    with pytest.raises(InputError, match="at least 3"):
        deepen(two, 4)


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.parametrize(
    "chain_only, tps",
    [
        # the original planner (greedy option choice) on its own 64-layer BERT, made by its
        # insertTransformerLayer (copies with only the chain edge), and on ours (all edges)
        (True, 0.002744925385753314),
        (False, 0.0027916480188687645),
    ],
)
def test_bert64_greedy_reproduces_the_original_planner(shared_dir, chain_only, tps):
    gib = 2**30
    bert = load_instance(shared_dir / "piper-inputs" / "bert32a100.json")
    deep = deepen(bert, 64, chain_only=chain_only).with_settings(
        K=1024, M=8 * gib, N=1920, B=25 * gib
    )
    assert len(repeated_chain(deep)) == 64
    sol = solve_dp(deep, knapsack="greedy")
    assert sol.status == Status.FEASIBLE
    assert sol.tps == pytest.approx(tps, rel=1e-9)
