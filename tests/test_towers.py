"""Multi-branch models (compare/builders/towers.py, the ``towers`` family) and what graph pipelining
(contract sec. 8) changes on them."""

from __future__ import annotations

import networkx as nx
import pytest
from builders import run_piper

from compare.builders.deepen import repeated_chain
from compare.builders.generators import random_graph, random_instance
from compare.builders.towers import towers
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.mode import Mode
from piper_ilp.plan import Plan, Stage


def test_towers_of_bert_layers_keep_the_profiles_numbers(shared_dir):
    bert = load_instance(shared_dir / "piper-inputs" / "bert32a100.json")
    model = towers(bert, [3, 2, 4])
    assert len(model.nodes) == 1 + 9 + 1 and len(model.edges) == 3 + (2 + 1 + 3) + 3
    g = model.graph
    assert list(g.successors(0)) and sorted(g.successors(0)) == [1, 4, 6]
    assert sorted(g.predecessors(10)) == [3, 5, 9]
    chain = repeated_chain(bert)
    layer = bert.node[chain[len(chain) // 2]]  # the template: the middle transformer layer
    for v in range(1, 10):  # every tower layer is a copy of it
        node = model.node[v]
        assert node.name == layer.name
        for t, opts in node.options.items():
            assert [(o.id, o.p, o.w, o.a, o.b) for o in opts] == [
                (o.id, o.p, o.w, o.a, o.b) for o in layer.options[t]
            ]
    # sync entries exactly for the new edges
    for v in model.node_ids:
        preds, succs = set(g.predecessors(v)), set(g.successors(v))
        for opts in model.node[v].options.values():
            for o in opts:
                assert set(o.sfw) == preds and set(o.sbw) == succs
    assert (model.K, model.M, model.N, model.B) == (bert.K, bert.M, bert.N, bert.B)


def test_graph_pipelining_never_needs_more_memory_on_towers(shared_dir):
    # the same plan, one stage per tower and the source and sink alone: sequentially the
    # first tower's stage holds all later stages' microbatches, under graph pipelining only
    # its own branch's (sec. 8: h_i <= s_i)
    bert = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(K=16, N=16)
    model = towers(bert, [2, 2, 2])
    stages = [(0,), (1, 2), (3, 4), (5, 6), (7,)]
    plan = Plan(tuple(Stage(nodes, 2, 1, {v: "vanilla" for v in nodes}) for nodes in stages))
    seq, graph = evaluate(model, plan), evaluate(model, plan, Mode("graph"))
    assert [r.s for r in seq.stages] == [10, 8, 6, 4, 2]
    assert [r.s for r in graph.stages] == [6, 4, 4, 4, 2]
    assert all(g.memory <= s.memory for g, s in zip(graph.stages, seq.stages))
    assert graph.stages[1].memory < seq.stages[1].memory
    assert graph.tps == seq.tps  # TPS per stage is the same (sec. 8)


def test_random_towers_family_has_parallel_branches():
    for seed in range(20):
        g = random_graph("towers", 7, seed)
        assert nx.is_directed_acyclic_graph(g)
        assert g.out_degree(0) >= 2 and g.in_degree(6) >= 2  # >= 2 towers from source to sink
        assert all(g.in_degree(v) == 1 and g.out_degree(v) == 1 for v in range(1, 6))
    inst = random_instance("towers", 6, seed=3)
    assert len(inst.nodes) == 6


def test_towers_command(shared_dir, tmp_path):
    out = tmp_path / "towers.json"
    bert = shared_dir / "piper-inputs" / "bert32a100.json"
    run = run_piper("towers", bert, "-L", "2,3", "-o", out, "-K", 8)
    assert run.returncode == 0, run.stderr
    assert len(load_instance(out).nodes) == 7 and load_instance(out).K == 8
    bad = run_piper("towers", shared_dir / "piper-inputs" / "gnmt.json", "-L", "2,3", "-o", out)
    assert (
        bad.returncode == 2
        and len(bad.stderr.strip().splitlines()) == 1
        and "repeated chain" in bad.stderr
    )


@pytest.mark.parametrize("layers", ["3", "2,0", "a,b"])
def test_towers_command_refuses_bad_layers(shared_dir, tmp_path, layers):
    bert = shared_dir / "piper-inputs" / "bert32a100.json"
    run = run_piper("towers", bert, "-L", layers, "-o", tmp_path / "x.json")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1


def test_towers_and_deepen_refuse_models_above_the_node_limit_at_once(shared_dir, tmp_path):
    # a layer count far past 2^20 nodes: one line, exit 2, before any building (was a traceback)
    for args in (
        ["towers", "-L", "99999999999999999999999,1"],
        ["deepen", "--layers", "99999999999999999999999"],
    ):
        bert = shared_dir / "piper-inputs" / "bert32a100.json"
        run = run_piper(args[0], bert, *args[1:], "-o", tmp_path / "x.json", timeout=60)
        assert (
            run.returncode == 2
            and len(run.stderr.strip().splitlines()) == 1
            and "more than the supported" in run.stderr
        )
        assert not (tmp_path / "x.json").exists()
