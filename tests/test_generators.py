"""Random instance families (compare/generators.py): valid, deterministic, varied."""

from __future__ import annotations

import networkx as nx
import pytest

from compare.brute import solve_brute
from compare.generators import FAMILIES, random_graph, random_instance
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict, instance_to_dict
from piper_ilp.solution import Status


def all_options(inst):
    for node in inst.nodes:
        for t, opts in node.options.items():
            for o in opts:
                yield node, t, o


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("integer", [False, True])
def test_valid_and_deterministic(family, integer):
    for n in (1, 2, 5, 8, 12):
        for seed in range(4):
            inst = random_instance(family, n, seed, integer=integer, options_per_t=(1, 3), t_values=(1, 2, 4))
            assert len(inst.nodes) == n
            # round trip through the loader's validation gives the same instance
            again = instance_from_dict(instance_to_dict(inst), source=inst.source)
            assert again == inst
            assert random_instance(family, n, seed, integer=integer, options_per_t=(1, 3), t_values=(1, 2, 4)) == inst
            assert nx.is_directed_acyclic_graph(inst.graph)
            for e in inst.edges:
                assert e.c >= 0
            for node, t, o in all_options(inst):
                assert t in (1, 2, 4)
                assert 1 <= len(node.options[t]) <= 3
                assert min(o.p, o.w, o.a, o.b) >= 0
                assert all(x >= 0 for x in [*o.sfw.values(), *o.sbw.values()])
                if integer:
                    assert all(float(x).is_integer() for x in [o.p, o.w, o.a, o.b, *o.sfw.values(), *o.sbw.values()])
            if integer:
                assert inst.B == 1 and float(inst.M).is_integer()
                assert all(float(e.c).is_integer() for e in inst.edges)
            assert 1 <= inst.K <= 8 and inst.N in (1, 2, 4, 6, 8)


def test_seeds_differ_and_families_differ():
    a = random_instance("skip", 6, 1)
    assert random_instance("skip", 6, 2) != a
    assert random_instance("chain", 6, 1) != a
    assert random_instance("skip", 6, 1, integer=True) != a


def test_family_shapes():
    for seed in range(10):
        chain = random_graph("chain", 6, seed)
        assert sorted(chain.edges) == [(i, i + 1) for i in range(5)]
        skip = random_graph("skip", 6, seed)
        assert set(chain.edges) < set(skip.edges)  # the chain plus at least one skip edge
        assert all(v - u in (1, 2, 3) for u, v in skip.edges)
        fj = random_graph("fork-join", 7, seed)
        assert max(d for _, d in fj.out_degree) >= 2 and max(d for _, d in fj.in_degree) >= 2
        assert nx.is_weakly_connected(fj)
        sp = random_graph("series-parallel", 7, seed)
        # two terminals: one source and one sink
        assert [v for v, d in sp.in_degree if d == 0] == [0]
        assert [v for v, d in sp.out_degree if d == 0] == [6]
        lay = random_graph("layered", 8, seed)
        assert lay.number_of_nodes() == 8 and nx.is_directed_acyclic_graph(lay)
    # the layered family is not always a chain: some graph has a node with two successors
    assert any(max(d for _, d in random_graph("layered", 8, s).out_degree) >= 2 for s in range(10))


def test_node_ids_vary():
    kinds = set()
    for seed in range(30):
        inst = random_instance("chain", 5, seed)
        ids = inst.node_ids
        kinds.add("plain" if ids == list(range(5)) else "other")
        # the edges use the same ids as the nodes (a path through every node)
        assert nx.is_weakly_connected(inst.graph) and len(inst.edges) == 4
        if any(v < 0 for v in ids):
            kinds.add("negative")
        if sorted(ids) != ids:
            kinds.add("unsorted")
    assert {"plain", "other", "unsorted"} <= kinds


@pytest.mark.parametrize("integer", [False, True])
def test_recompute_option_trades_memory_for_time(integer):
    for seed in range(5):
        inst = random_instance("chain", 4, seed, options_per_t=2, integer=integer)
        for node in inst.nodes:
            for t, (van, rec) in node.options.items():
                assert (van.id, rec.id) == ("vanilla", "activation recomp")
                assert rec.a < van.a and rec.p > van.p


@pytest.mark.parametrize("integer", [False, True])
def test_tensor_parallel_options_are_faster_per_device(integer):
    for seed in range(5):
        inst = random_instance("chain", 4, seed, t_values=(1, 2), integer=integer)
        for node in inst.nodes:
            if 2 in node.options:
                t1, t2 = node.options[1][0].p, node.options[2][0].p
                assert t2 < t1 or (integer and t2 == t1 == 1)


def test_memory_tight_binds_loose_does_not():
    statuses = []
    for seed in range(30):
        tight = random_instance("skip", 4, seed, memory="tight")
        statuses.append(solve_brute(tight).status)
        loose = random_instance("skip", 4, seed, memory="loose")
        assert solve_brute(loose).status is Status.OPTIMAL  # nothing is out of memory
    assert Status.INFEASIBLE in statuses and statuses.count(Status.OPTIMAL) >= 15


def test_memory_factor_and_settings():
    inst = random_instance("chain", 3, 0, memory=0.0, K=4, N=2, B=10.0)
    assert (inst.K, inst.N, inst.B) == (4, 2, 10.0)
    least = max(min(o.a + o.b for opts in n.options.values() for o in opts) for n in inst.nodes)
    assert inst.M == pytest.approx(least)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"family": "tree"},
        {"n_nodes": 0},
        {"options_per_t": 0},
        {"options_per_t": (3, 1)},
        {"memory": "huge"},
        {"t_values": (0,)},
        {"K": 0},
    ],
)
def test_bad_parameters(kwargs):
    args = {"family": "chain", "n_nodes": 3, "seed": 0} | kwargs
    with pytest.raises(InputError):
        random_instance(**args)
