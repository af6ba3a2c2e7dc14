"""PipeDream's profiles and planner: parsing, preparation, states, the DP against hand
computations and exhaustive search, the mapping to Piper, the CLI."""

from __future__ import annotations

import json
import math
import re
import warnings

import networkx as nx
import pytest
from builders import cli_json
from typer.testing import CliRunner

from compare.baselines.pipedream import (
    brute_pipedream,
    check_pipedream,
    cross_check,
    plan_time,
    random_pd_graph,
)
from compare.builders.generators import FAMILIES, random_graph
from dp.pipedream import pipedream_dp, pipedream_plan_for, plan_graph
from piper_cli import app
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance
from piper_ilp.pipedream import (
    PDGraph,
    PDNode,
    antichain_states,
    graph_to_instance,
    parse_graph,
    parse_graph_text,
    piper_plan_from_pipedream,
    prepare,
)
from piper_ilp.pipedream.milp import solve_pipedream_milp

runner = CliRunner()


def line(node: str, desc: str, f: float, g: float, a: float, p: float) -> str:
    return (
        f"{node} -- {desc} -- forward_compute_time={f}, backward_compute_time={g}, "
        f"activation_size={a}, parameter_size={p}"
    )


def chain3(p_c: float = 2e9) -> PDGraph:
    """input -> a -> b -> c with F + G = 1, 1, 4 s and P_c = p_c bytes."""
    text = "\n".join(
        [
            line("node1", "Input", 5.0, 0.0, 7.0, 0.0),
            line("node2", "Linear(a)", 600.0, 400.0, 10.0, 0.0),
            line("node3", "ReLU(b)", 500.0, 500.0, 20.0, 0.0),
            line("node4", "Linear(c)", 1000.0, 3000.0, 30.0, p_c),
            "\tnode1 -- node2",
            "\tnode2 -- node3",
            "\tnode3 -- node4",
        ]
    )
    return parse_graph_text(text, "chain3.txt")


# ---------------------------------------------------------------------------- parsing


def test_parse_reads_descriptions_with_commas_and_activation_lists():
    text = "\n".join(
        [
            line("node1", "Input0", 0, 0, 0.0, 0),
            "node2 -- LSTM(1024, 1024, batch_first=True) -- forward_compute_time=1.5, "
            "backward_compute_time=2.5, activation_size=[6291456.0; 131072.0; 131072.0], "
            "parameter_size=8.0",
            "\tnode1 -- node2",
        ]
    )
    g = parse_graph_text(text, "x.txt")
    n2 = g.by_id["node2"]
    assert n2.desc == "LSTM(1024, 1024, batch_first=True)"
    assert n2.activation == 6291456.0 + 2 * 131072.0 and n2.time == pytest.approx(0.004)
    assert g.edges == (("node1", "node2"),)


@pytest.mark.parametrize(
    "text, needle",
    [
        (line("node1", "X", "a", 0, 1, 0), "x.txt:1: forward_compute_time"),
        (line("node1", "X", 1, 0, -1, 0), "x.txt:1: activation_size"),
        (line("node1", "X", "nan", 0, 1, 0), "x.txt:1: forward_compute_time"),
        (
            "node1 -- X -- forward_compute_time=1, backward_compute_time=0",
            "x.txt:1: expected 4 fields",
        ),
        ("node1 X", "x.txt:1: a node line"),
        (
            line("node1", "X", 1, 0, 1, 0) + "\n" + line("node1", "Y", 1, 0, 1, 0),
            "x.txt:2: node node1 already defined on line 1",
        ),
        (
            line("node1", "X", 1, 0, 1, 0) + "\n\tnode1 -- node9",
            "x.txt:2: edge node1 -- node9 names unknown node node9",
        ),
        (line("node1", "X", 1, 0, 1, 0) + "\n\tnode1 node1", "x.txt:2: an edge line"),
        (
            line("node1", "X", 1, 0, 1, 0)
            + "\n"
            + line("node2", "X", 1, 0, 1, 0)
            + "\n\tnode1 -- node2\n\tnode2 -- node1",
            "cycle",
        ),
        ("", "no node lines"),
    ],
)
def test_bad_lines_name_the_file_and_line(text, needle):
    with pytest.raises(InputError) as exc:
        parse_graph_text(text, "x.txt")
    assert needle in str(exc.value)


def test_prepare_drops_input_sources_and_getitem_sinks_once():
    text = "\n".join(
        [
            line("node1", "Input0", 0, 0, 5, 0),
            line("node2", "Input1", 0, 0, 5, 0),
            line("node3", "LSTM", 1, 1, 5, 5),
            line("node4", "__getitem__(0)", 0, 0, 5, 0),
            line("node5", "__getitem__(1)", 0, 0, 5, 0),
            line("node6", "Linear", 1, 1, 5, 5),
            "\tnode1 -- node3",
            "\tnode2 -- node6",
            "\tnode3 -- node4",
            "\tnode3 -- node5",
            "\tnode5 -- node6",
        ]
    )
    prep = prepare(parse_graph_text(text, "x.txt"))
    assert prep.inputs == ("node1", "node2")
    assert prep.dropped_sinks == ("node4",)  # node5 feeds node6: not a sink
    assert [n.id for n in prep.nodes] == ["node3", "node5", "node6"]
    assert prep.outs == ((1,), (2,), ())


# ---------------------------------------------------------------------------- states


def _prep_of(g: nx.DiGraph):
    nodes = tuple(PDNode(f"node{v}", "L", 1.0, 1.0, 1.0, 1.0) for v in sorted(g.nodes))
    return prepare(PDGraph(nodes, tuple((f"node{u}", f"node{v}") for u, v in sorted(g.edges))))


def test_states_of_single_source_graphs_are_all_nonempty_ideals_in_a_topological_order():
    checked = 0
    for fam in FAMILIES:
        for n in range(1, 8):
            for seed in range(6):
                g = random_graph(fam, n, seed)
                if sum(1 for v in g if g.in_degree(v) == 0) != 1:
                    continue
                st = antichain_states(_prep_of(g))
                ideals = set()
                for ac in nx.antichains(g):
                    if ac:
                        down = set(ac).union(*(nx.ancestors(g, a) for a in ac))
                        ideals.add(sum(1 << v for v in down))  # node v is index v here
                assert set(st.downset) == ideals and len(st.downset) == len(ideals)
                for j in range(len(st)):
                    anc = set(st.ancestors[j].tolist())
                    assert all(k < j for k in anc)  # a topological order
                    for k in range(len(st)):
                        inside = st.downset[k] & st.downset[j] == st.downset[k] and k != j
                        assert (k in anc) == inside
                assert st.downset[-1] == (1 << n) - 1
                checked += 1
    assert checked > 50


def test_state_sums_are_the_downset_sums():
    prep = prepare(chain3())
    st = antichain_states(prep)
    assert list(st.time) == [1.0, 2.0, 6.0]
    assert list(st.activation) == [10.0, 30.0, 60.0] and list(st.parameter) == [0.0, 0.0, 2e9]


# ---------------------------------------------------------------------------- the DP


def test_dp_hand_computed_chain():
    g = chain3()
    # n = 2: one stage on 2 replicas costs (6 + 4 * 2e9 / (1e9 * 2)) / 2 = 5; {a,b} | {c} costs
    # max(2, 4) = 4.
    r = plan_graph(g, [2], [1e9])
    assert r.time_per_stage == 4.0 and r.single_stage_time == 6.0
    assert [(s.nodes, s.replication) for s in r.stages] == [
        (("node2", "node3"), 1),
        (("node4",), 1),
    ]
    # n = 3: one stage on 3 replicas: (6 + 4 * 2 * 2e9 / (1e9 * 3)) / 3 = 34 / 9 beats every split
    # (>= 4).
    r = plan_graph(g, [3], [1e9])
    assert r.time_per_stage == pytest.approx(34 / 9, rel=1e-15)
    assert [(s.nodes, s.replication) for s in r.stages] == [(("node2", "node3", "node4"), 3)]
    # straight: 3 stages of one worker: max(1, 1, 4) = 4; exactly 2 machines: max(2, 4) = 4.
    assert plan_graph(g, [3], [1e9], straight=True).time_per_stage == 4.0
    # 5 workers, straight: only 3 states, so exactly 5 stages is impossible unless fewer are
    # allowed.
    assert plan_graph(g, [5], [1e9], straight=True).time_per_stage is None
    assert plan_graph(g, [5], [1e9], straight=True, fewer_machines=True).time_per_stage == 4.0


def test_dp_memory_rule_counts_the_workers_after_a_stage():
    g = chain3(p_c=0.0)
    # {a,b} | {c} on 1 + 1 workers: stage {a,b} stashes ceil(1 / 1) * (10 + 20) = 30 bytes.
    assert plan_graph(g, [2], [1e9], memory=30.0, memory_constraint=True).time_per_stage == 3.0
    # With 29 bytes only the single stage on 2 replicas (stashes ceil(0 / 2) * 60 = 0) fits.
    r = plan_graph(g, [2], [1e9], memory=29.0, memory_constraint=True)
    assert r.time_per_stage == 3.0 and [s.replication for s in r.stages] == [2]
    # Straight: {a} | {b,c} (stage {a} stashes 10 bytes) costs max(1, 5) = 5; below 10 bytes nothing
    # fits.
    r = plan_graph(g, [2], [1e9], memory=29.0, memory_constraint=True, straight=True)
    assert r.time_per_stage == 5.0 and [s.nodes for s in r.stages] == [
        ("node2",),
        ("node3", "node4"),
    ]
    assert (
        plan_graph(g, [2], [1e9], memory=9.0, memory_constraint=True, straight=True).time_per_stage
        is None
    )


def test_stage_parameter_bytes_are_an_fsum_not_a_difference_of_prefix_sums():
    """hunt3 item 1: P(LayerB) = 8 was taken as (1e17 + 8) - 1e17 = 0, so the DP answered
    1e-06 s for [LayerA r=1 | LayerB r=2], whose time is (4 * (2 - 1) * 8 / (1 * 2)) / 2 = 8 s."""
    text = "\n".join(
        [
            line("node2", "LayerA", 0.001, 0.000, 0.000, 1e17),
            line("node3", "LayerB", 0.000, 0.000, 0.000, 8.000),
            "\tnode2 -- node3",
        ]
    )
    g = parse_graph_text(text, "cancel.txt")
    prep = prepare(g)
    r = plan_graph(g, [3], [1.0])
    assert r.time_per_stage == 8.0 == brute_pipedream(prep, 3, 1.0).value
    assert [(s.nodes, s.replication) for s in r.stages] == [(("node2",), 1), (("node3",), 2)]
    # rows i > 0 of a level below the last take the same exact sums
    assert plan_graph(g, [3, 1], [1.0, 1.0]).time_per_stage == 8.0
    assert plan_graph(g, [1, 3], [1.0, 1.0]).time_per_stage == 8.0


def test_stage_sums_of_every_quantity_are_the_fsum_over_the_stage():
    # prefix sums 1e17 + 8 round to 1e17 (time in s: F / 1000), 1e17 + 24 to 1e17 + 32
    text = "\n".join(
        [
            line("node1", "A", 1e20, 0.0, 1e17, 1e17),
            line("node2", "B", 8000.0, 0.0, 24.0, 8.0),
            line("node3", "C", 0.25, 0.0, 0.5, 3.0),
            "\tnode1 -- node2",
            "\tnode2 -- node3",
        ]
    )
    g = parse_graph_text(text, "cancel3.txt")
    r = plan_graph(g, [3], [1e9], straight=True)
    assert [s.compute_time for s in r.stages] == [1e17, 8.0, 0.00025]  # was [1e17, 0.0, 16.0]
    prep = prepare(g)
    st = antichain_states(prep)
    for k in range(-1, len(st)):
        for j in range(k + 1, len(st)):
            T, A, P = prep.sums(st.downset[j] & ~(st.downset[k] if k >= 0 else 0))
            assert (
                st.between("time", k, j),
                st.between("activation", k, j),
                st.between("parameter", k, j),
            ) == (T, A, P)


def test_levels_of_one_worker_do_not_change_the_answer():
    g = parse_graph_text(
        "\n".join(
            [line(f"node{i}", "L", 1 + i, i % 3, 1e6 * i, 1e7 * (i % 4)) for i in range(1, 8)]
            + [
                "\tnode1 -- node2",
                "\tnode1 -- node3",
                "\tnode2 -- node4",
                "\tnode3 -- node4",
                "\tnode4 -- node5",
                "\tnode5 -- node6",
                "\tnode4 -- node6",
                "\tnode6 -- node7",
            ]
        ),
        "x.txt",
    )
    for n in (1, 2, 3, 5):
        one = plan_graph(g, [n], [1e9]).time_per_stage
        assert plan_graph(g, [n, 1], [1e9, 1e8]).time_per_stage == pytest.approx(one, rel=1e-12)
        assert plan_graph(g, [1, n], [1e8, 1e9]).time_per_stage == pytest.approx(one, rel=1e-12)


def test_dp_plan_is_timed_by_the_model_at_its_value():
    g = random_pd_graph("series-parallel", 7, 3)
    prep = prepare(g)
    st = antichain_states(prep)
    r = pipedream_dp(st, [4], [1e9])
    own = plan_time(prep, st, [(s.last, s.replication) for s in r.stages], 4, 1e9)
    assert own == pytest.approx(r.time_per_stage, rel=1e-12)


def test_dp_matches_exhaustive_search_on_60_random_cases():
    out = cross_check(60, seed=11)
    assert out["cases"] == 60 and out["mismatches"] == [] and out["matched"] == 60
    assert out["infeasible"] < 30  # most cases have a plan: the comparison is not vacuous


def test_dp_exhaustive_and_milp_agree_on_25_random_cases():
    out = cross_check(25, seed=3, milp=True)
    assert out["mismatches"] == [] and out["matched"] == 25
    assert out["milp_cases"] >= 15 and out["milp_matched"] == out["milp_cases"]


def test_dp_exhaustive_and_milp_agree_on_hostile_numbers():
    # numbers over 1e-30..1e30 (zeros, the ends, subnormals; one graph in ten with a number
    # above 1e30), isolated nodes, bandwidth and memory at the ends of their ranges: every
    # graph through the parser; no RuntimeWarning, no disagreement, the oversized refused
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        out = cross_check(40, seed=4, milp=True, numbers="hostile")
    assert out["mismatches"] == [] and out["matched"] + out["refused"] == 40
    assert out["refused"] >= 1 and out["matched"] >= 30
    assert out["milp_cases"] >= 15 and out["milp_matched"] == out["milp_cases"]


def test_the_milp_without_a_cutoff_claims_nothing_at_stage_times_beyond_1e9_s():
    # SCIP reads 1e20 as infinite ("coefficient ... is infinite" on stderr, and an answer
    # that is no proof): with one layer of 1e15 s, no cutoff gives out-of-range; the DP's
    # plan time as the cutoff gives the optimum
    text = line("node1", "Linear", 1e18, 0.0, 0.0, 0.0) + "\n"
    prep = prepare(parse_graph_text(text, "big.txt"))
    assert solve_pipedream_milp(prep, 1, 1e9).status == "out-of-range"
    r = solve_pipedream_milp(prep, 1, 1e9, cutoff=1e15)
    assert r.status == "optimal" and r.value == pytest.approx(1e15, rel=1e-6)


@pytest.mark.slow
def test_dp_exhaustive_and_milp_agree_on_300_random_cases():
    out = cross_check(300, seed=1, max_nodes=8, max_machines=6, milp=True)
    assert out["mismatches"] == [] and out["matched"] == 300
    assert out["milp_cases"] > 200 and out["milp_matched"] == out["milp_cases"]


def test_milp_hand_computed_chain_and_refusal():
    from piper_ilp.pipedream.milp import solve_pipedream_milp

    prep = prepare(chain3())
    r = solve_pipedream_milp(prep, 3, 1e9)
    assert (
        r.status == "optimal" and r.value == pytest.approx(34 / 9, rel=1e-6) and r.plan == [(2, 3)]
    )
    r = solve_pipedream_milp(
        prepare(chain3(p_c=0.0)), 2, 1e9, memory=9.0, memory_constraint=True, straight=True
    )
    assert r.status == "infeasible"
    with pytest.raises(InputError):
        solve_pipedream_milp(prep, 2, 1e9, memory_constraint=True, fewer_machines=True)


@pytest.mark.parametrize(
    "size,memory,fits",
    [
        (
            11.376838955064553,
            34.130516865193655,
            True,
        ),  # 3 * size rounds to memory; memory / size to 2.9999999999999996
        (
            170578442.1475958,
            511735326.44278735,
            False,
        ),  # 3 * size rounds above memory; memory / size to 3.0
    ],
)
def test_memory_rule_at_its_exact_boundary_is_the_same_in_dp_milp_and_exhaustive_search(
    size, memory, fits
):
    """The first of 4 straight stages stashes ceil(3 / 1) = 3 copies of its size; the MILP
    bounded them by floor(memory / size) and disagreed with the DP and exhaustive search,
    which compute 3 * size <= memory (both directions)."""
    from compare.baselines.pipedream import check_pipedream

    assert (3 * size <= memory) == fits and (math.floor(memory / size) >= 3) != fits
    text = "\n".join(
        [line("node1", "A", 1.0, 0.0, size, 0.0)]
        + [line(f"node{i}", "B", 1.0, 0.0, 0.0, 0.0) for i in (2, 3, 4)]
        + ["\tnode1 -- node2", "\tnode2 -- node3", "\tnode3 -- node4"]
    )
    prep = prepare(parse_graph_text(text, "boundary.txt"))
    v = check_pipedream(
        prep, antichain_states(prep), 4, 1e9, straight=True, memory=memory, memory_constraint=True
    )
    assert v["verdict"] == "match", v["problems"]
    want = 0.001 if fits else None
    assert v["values"] == {"dp": want, "brute": want, "milp": want}


def test_milp_memory_rule_with_a_tiny_stage_does_not_overflow():
    # floor(1e10 / 1e-300) is floor(inf): OverflowError before
    from piper_ilp.pipedream.milp import solve_pipedream_milp

    text = "\n".join(
        [
            line("node1", "A", 1.0, 0.0, 1e-300, 0.0),
            line("node2", "B", 1.0, 0.0, 0.0, 0.0),
            "\tnode1 -- node2",
        ]
    )
    r = solve_pipedream_milp(
        prepare(parse_graph_text(text, "tiny.txt")),
        2,
        1e9,
        memory=1e10,
        memory_constraint=True,
        straight=True,
    )
    assert r.status == "optimal" and r.plan == [(0, 1), (1, 1)]


def test_exhaustive_search_refuses_large_graphs():
    with pytest.raises(SizeLimitError):
        brute_pipedream(prepare(random_pd_graph("chain", 12, 0)), 2, 1e9)


def test_bad_settings_are_input_errors():
    st = antichain_states(prepare(chain3()))
    with pytest.raises(InputError):
        pipedream_dp(st, [2, 2], [1e9])
    with pytest.raises(InputError):
        pipedream_dp(st, [0], [1e9])
    with pytest.raises(InputError):
        pipedream_dp(st, [2], [0.0])


def test_bad_settings_outside_pipers_ranges_are_input_errors():
    # a bandwidth or memory outside [1e-30, 1e30] (Piper's B and M) would let the times and
    # sizes overflow: refused by the DP, exhaustive search and the MILP alike
    prep = prepare(chain3())
    st = antichain_states(prep)
    for call in (
        lambda: pipedream_dp(st, [2], [1e-300]),
        lambda: pipedream_dp(st, [2], [1e9], memory=1e300, memory_constraint=True),
        lambda: brute_pipedream(prep, 2, 1e-300),
        lambda: solve_pipedream_milp(prep, 2, 1e-300),
    ):
        with pytest.raises(InputError, match=r"within \[1e-30, 1e\+30\]"):
            call()


#: Issue 31's profiles with numbers near the float limit: F + G overflows, an activation
#: list whose sum overflows, two parameter sizes whose sum overflows (the original returns
#: the one-stage plan on 3 replicas with time inf); and a list of in-range elements whose
#: sum is above 1e30.
HUGE = {
    "time": (line("node1", "Linear", 1e308, 1e308, 1.0, 1.0), "1: forward_compute_time"),
    "activation list": (
        line("node1", "Linear", 1.0, 1.0, "[1e308; 1e308]", 1.0),
        "1: activation_size",
    ),
    "parameters": (
        line("node1", "Linear", 1.0, 1.0, 0.0, 1.0)
        + "\n"
        + line("node2", "Linear", 1.0, 1.0, 0.0, 1e308),
        "2: parameter_size",
    ),
    "list sum": (
        line("node1", "Linear", 1.0, 1.0, "[1e30; 1e30]", 1.0),
        "1: activation_size: the list's sum 2e+30 is above 1e+30",
    ),
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_numbers_above_1e30_are_refused_on_their_line(tmp_path, name):
    text, says = HUGE[name]
    text += "\n\tnode1 -- node2\n" if "node2" in text else "\n"
    with pytest.raises(InputError, match="^" + re.escape(f"x.txt:{says}")):
        parse_graph_text(text, "x.txt")
    src = tmp_path / "graph.txt"
    src.write_text(text)
    for args in (
        ["pipedream", str(src), "--machines", "3", "--bandwidth", "1e9"],
        ["verify", "--model", "pipedream", str(src), "--devices", "3", "--bandwidth", "1e9"],
        ["import", "pipedream", str(src), "-o", str(tmp_path / "inst.json")],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith(f"piper-ilp: error: {src}:{says}"), (args, r.output)
        assert r.output.count("\n") == 1, (args, r.output)


def test_a_graph_made_in_code_with_overflowing_numbers_is_refused_by_prepare():
    big = PDGraph((PDNode("a", "Linear", 1e308, 1e308, 0.0, 0.0, line=3),), (), "g")
    with pytest.raises(InputError, match=r"^g:3: node a: its time \(F \+ G\) / 1000 is inf"):
        prepare(big)


def test_the_largest_numbers_give_one_finite_answer_everywhere():
    # issue 31's third example at the top of the range: two layers of P = 1e30 bytes, no
    # activations, 3 workers, B = 1e-30, the memory rule at 1e9 bytes. Only the one stage on
    # 3 replicas fits (no worker after it: 0 copies stashed); its time is
    # (T + 4 (3 - 1) P / (B 3)) / 3 with T = 2 * (1 + 1) / 1000 s, P = 2e30: finite, and the
    # DP, exhaustive search and the MILP all return it, with no RuntimeWarning.
    text = "\n".join(
        [line(f"node{i}", "Linear", 1.0, 1.0, 0.0, 1e30) for i in (1, 2)] + ["\tnode1 -- node2"]
    )
    prep = prepare(parse_graph_text(text, "x.txt"))
    want = (0.004 + 4 * 2 * 2e30 / (1e-30 * 3)) / 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        v = check_pipedream(
            prep, antichain_states(prep), 3, 1e-30, memory=1e9, memory_constraint=True
        )
    assert v["verdict"] == "match" and v["problems"] == []
    assert v["values"]["dp"] == v["values"]["brute"] == want
    assert v["values"]["milp"] == pytest.approx(want, rel=1e-6)


# ---------------------------------------------------------------------------- Piper


def test_import_maps_numbers_and_round_trips():
    g = chain3()
    inst = graph_to_instance(g, devices=4, memory=1e10, batch=2, bandwidth=2e9)
    assert instance_from_dict(instance_to_dict(inst), "chain3.txt") == inst
    assert (inst.K, inst.M, inst.N, inst.B) == (4, 1e10, 2, 2e9)
    o = {n.id: n.options[1][0] for n in inst.nodes}
    assert o[1].p == 0 and o[1].a == 0  # the input is zeroed
    assert o[2].p == 1.0 and o[4].p == 4.0 and o[4].w == 2e9 and o[4].b == 2e9 and o[3].a == 20.0
    assert {(e.src, e.dst): e.c for e in inst.edges} == {(1, 2): 0.0, (2, 3): 10.0, (3, 4): 20.0}


def test_mapped_plan_is_judged_by_pipers_evaluator():
    g = chain3()
    inst = graph_to_instance(g, devices=3, memory=1e12, batch=2, bandwidth=1e30)
    m = pipedream_plan_for(
        inst, graph=g, machines=3, bandwidths=[1e9], memory_constraint=False, fewer_machines=False
    )
    # PipeDream puts all three layers on 3 replicas: d = 3 does not divide N = 2 (rule 3) and 3 > N
    # (rule 5).
    assert [s.replication for s in m.result.stages] == [3]
    assert not m.valid and {int(r.split()[1].rstrip(":")) for r in m.reasons} >= {3}
    # Straight, on N = 3: a valid plan, and Piper's TPS is PipeDream's value (edges cost ~1e-299 s
    # here).
    inst3 = inst.with_settings(N=3)
    m = pipedream_plan_for(
        inst3, graph=g, machines=3, bandwidths=[1e9], straight=True, memory_constraint=False
    )
    assert m.valid and m.tps == pytest.approx(m.result.time_per_stage, rel=1e-12)
    assert m.plan.stages[0].nodes[0] == 1  # the input sits in stage 0


def test_plan_from_instance_alone_equals_plan_from_graph():
    g = random_pd_graph("fork-join", 6, 5)
    inst = graph_to_instance(g, devices=3, batch=6)
    a = pipedream_plan_for(inst, graph=g, memory_constraint=False)
    b = pipedream_plan_for(inst, memory_constraint=False)
    assert b.result.time_per_stage == pytest.approx(a.result.time_per_stage, rel=1e-12)


def test_mapping_refuses_stages_that_miss_a_layer():
    g = chain3()
    with pytest.raises(InputError):
        piper_plan_from_pipedream(g, [(("node2",), 1)])


# ---------------------------------------------------------------------------- CLI


def test_cli_import_and_plan(tmp_path):
    src = tmp_path / "graph.txt"
    src.write_text(
        "\n".join(
            [
                line("node1", "Input", 0, 0, 7.0, 0.0),
                line("node2", "Linear(a)", 600.0, 400.0, 10.0, 0.0),
                line("node3", "ReLU(b)", 500.0, 500.0, 20.0, 0.0),
                line("node4", "Linear(c)", 1000.0, 3000.0, 30.0, 2e9),
                "\tnode1 -- node2",
                "\tnode2 -- node3",
                "\tnode3 -- node4",
            ]
        )
        + "\n"
    )
    out = tmp_path / "inst.json"
    r = runner.invoke(app, ["import", "pipedream", str(src), "-o", str(out), "-K", "4", "-N", "2"])
    assert r.exit_code == 0, r.output
    inst = load_instance(out)
    assert inst.K == 4 and inst.N == 2 and len(inst.nodes) == 4
    r = runner.invoke(
        app, ["pipedream", str(src), "--machines", "2", "--bandwidth", "1GB/s", "--json"]
    )
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    assert (
        rec["time_per_stage"] == 4.0
        and rec["single_stage_time"] == 6.0
        and rec["machines_used"] == 2
    )
    assert [(s["layers"], s["replication"]) for s in rec["stages"]] == [
        (["node2", "node3"], 1),
        (["node4"], 1),
    ]
    r = runner.invoke(app, ["pipedream", str(src), "--machines", "2,1", "--bandwidth", "1e9"])
    assert r.exit_code == 2 and "one bandwidth per level" in r.output


def test_cli_bad_line_is_one_line_exit_2(tmp_path):
    src = tmp_path / "graph.txt"
    src.write_text(line("node1", "X", 1, 0, 1, 0) + "\nnode2 -- Y -- junk\n")
    out = tmp_path / "inst.json"
    r = runner.invoke(app, ["import", "pipedream", str(src), "-o", str(out)])
    assert r.exit_code == 2 and f"{src}:2:" in r.output and r.output.count("\n") == 1
    assert not out.exists()
    r = runner.invoke(app, ["import", "pipedream", str(src), "-o", str(tmp_path / "no" / "x.json")])
    assert r.exit_code == 2 and "does not exist" in r.output


# ---------------------------------------------------------------------------- published profiles

MODELS = (
    "alexnet",
    "densenet121",
    "gnmt",
    "gnmt_large",
    "inception_v3",
    "nasnetalarge",
    "nasnetamobile",
    "resnet101",
    "resnet18",
    "resnet50",
    "resnext101",
    "resnext50",
    "squeezenet1_0",
    "vgg16",
)
TOO_MANY_STATES = {"inception_v3", "nasnetalarge", "nasnetamobile"}


@pytest.fixture(scope="module")
def pd_dir(shared_dir):
    d = shared_dir / "pipedream-inputs"
    if not d.is_dir():
        pytest.skip(f"needs PipeDream's profiles in {d} (not present)")
    return d


@pytest.mark.shared
def test_all_published_profiles_import(pd_dir, tmp_path):
    for model in MODELS:
        path = pd_dir / model / "graph.txt"
        g = parse_graph(path)
        inst = graph_to_instance(g, devices=8, batch=8)
        out = tmp_path / f"{model}.json"
        from piper_ilp.instance import save_instance

        save_instance(inst, out)
        back = load_instance(out)
        assert len(back.nodes) == len(g.nodes) and len(back.edges) == len(g.edges)
        total = math.fsum(n.options[1][0].p for n in back.nodes)
        prep = prepare(g)
        assert total == pytest.approx(
            math.fsum(n.time for n in prep.nodes)
            + math.fsum(g.by_id[x].time for x in prep.dropped_sinks),
            rel=1e-12,
        )


@pytest.mark.shared
def test_published_profiles_states(pd_dir):
    for model in MODELS:
        prep = prepare(parse_graph(pd_dir / model / "graph.txt"))
        if model in TOO_MANY_STATES:
            with pytest.raises(SizeLimitError):
                antichain_states(prep)
            continue
        st = antichain_states(prep)
        assert st.downset[-1] == (1 << len(prep.nodes)) - 1  # the last state is the whole model
        assert st.time[-1] == pytest.approx(math.fsum(n.time for n in prep.nodes), rel=1e-15)


@pytest.mark.shared
@pytest.mark.parametrize("model", ["alexnet", "vgg16"])
def test_straight_pipeline_on_a_chain_equals_pipers_optimum(pd_dir, model):
    """On a chain, PipeDream's straight pipeline with fewer machines allowed and Piper's DP
    without data parallelism solve the same problem (edges priced ~0 at B = 1e30, memory
    unlimited at M = 1e30)."""
    from dp.solver import solve_dp
    from piper_ilp.solution import Restrictions

    g = parse_graph(pd_dir / model / "graph.txt")
    for n in (2, 4, 7):
        pd = plan_graph(g, [n], [1e9], straight=True, fewer_machines=True)
        inst = graph_to_instance(g, devices=n, batch=n, memory=1e30, bandwidth=1e30)
        sol = solve_dp(inst, Restrictions(max_d=1, max_t=1))
        assert sol.tps == pytest.approx(pd.time_per_stage, rel=1e-9)
        mapped = pipedream_plan_for(
            inst,
            graph=g,
            machines=n,
            bandwidths=[1e9],
            straight=True,
            fewer_machines=True,
            memory_constraint=False,
        )
        assert mapped.valid and mapped.tps == pytest.approx(pd.time_per_stage, rel=1e-9)
        assert evaluate(inst, mapped.plan).tps == mapped.tps


def test_layers_not_reached_from_the_first_source_are_reported():
    # Two sources; node3 (second source) feeds only node4, a sink apart from node2's branch.
    text = "\n".join(
        [
            line("node1", "Conv", 1, 1, 1, 1),
            line("node2", "ReLU", 1, 1, 1, 1),
            line("node3", "Conv", 1, 1, 1, 1),
            line("node4", "Linear", 1, 1, 1, 1),
            "\tnode1 -- node2",
            "\tnode3 -- node4",
        ]
    )
    r = plan_graph(parse_graph_text(text, "x.txt"), [1], [1e9])
    covered = {x for s in r.stages for x in s.nodes}
    assert set(r.uncovered) == {"node1", "node2", "node3", "node4"} - covered and r.uncovered


# ------------------------------------------------------------- verify --model pipedream


def _graph_file(tmp_path, graph_text: str):
    path = tmp_path / "graph.txt"
    path.write_text(graph_text)
    return path


def test_verify_model_pipedream_on_a_tiny_graph_matches_exhaustive_search(tmp_path):
    text = "\n".join(
        [
            line("node1", "Input", 5.0, 0.0, 7.0, 0.0),
            line("node2", "Linear(a)", 600.0, 400.0, 10.0, 1e6),
            line("node3", "ReLU(b)", 500.0, 500.0, 20.0, 0.0),
            line("node4", "Linear(c)", 1000.0, 3000.0, 30.0, 2e9),
            "\tnode1 -- node2",
            "\tnode2 -- node3",
            "\tnode3 -- node4",
        ]
    )
    path = _graph_file(tmp_path, text)
    out = cli_json(
        "verify", "--model", "pipedream", path, "--devices", 3, "--bandwidth", "1GB/s", "--json"
    )
    assert out["verdict"] == "match" and out["referee"] == "brute" and out["milp_agrees"]
    g = parse_graph_text(text, "g")
    ref = brute_pipedream(prepare(g), 3, 1e9)
    assert (
        out["values"]["dp"] == pytest.approx(ref.value, rel=1e-9)
        and out["values"]["brute"] == ref.value
    )


def test_verify_model_pipedream_needs_workers_and_bandwidth(tmp_path):
    path = _graph_file(tmp_path, "\n".join([line("node1", "Linear(a)", 1.0, 1.0, 1.0, 1.0)]))
    res = CliRunner().invoke(app, ["verify", "--model", "pipedream", str(path)])
    assert res.exit_code == 2


def test_verify_model_pipedream_on_alexnet_uses_the_milp_as_referee(shared_dir):
    path = shared_dir / "pipedream-inputs" / "alexnet" / "graph.txt"
    out = cli_json(
        "verify", "--model", "pipedream", path, "--devices", 4, "--bandwidth", "1GB/s", "--json"
    )
    assert out["verdict"] == "match" and out["referee"] == "milp" and "brute" in out["skipped"]
    assert out["values"]["dp"] == pytest.approx(
        plan_graph(prepare(parse_graph(path)), [4], [1e9]).time_per_stage, rel=1e-12
    )


def test_verify_model_pipedream_skips_a_milp_too_large_for_it(pd_dir):
    # resnet50 on 16 workers: 339,816 MILP variables, above MAX_MILP_VARIABLES. The MILP is
    # skipped (not run), like exhaustive search, and the verdict is inconclusive; it used
    # to end the whole command with exit 2
    path = pd_dir / "resnet50" / "graph.txt"
    out = cli_json(
        "verify",
        "--model",
        "pipedream",
        path,
        "--devices",
        16,
        "--bandwidth",
        "1e9",
        "--json",
        code=3,
    )
    assert out["verdict"] == "inconclusive" and "MILP variables" in out["skipped"]["milp"]
    assert out["values"]["dp"] is not None


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_graph_files_must_be_regular_files(path):
    with pytest.raises(InputError, match="not a regular file"):
        parse_graph(path)


# ------------------------------------------------------------- sizes, refused before any work


def _chain_text(n_layers: int) -> str:
    lines = [line(f"node{i}", f"Linear({i})", 1.0, 2.0, 10.0, 1e6) for i in range(1, n_layers + 1)]
    return "\n".join(lines + [f"\tnode{i} -- node{i + 1}" for i in range(1, n_layers)])


def test_too_many_workers_are_refused_before_any_table():
    """``pipedream -n 100000000`` allocated 24 GB (a _ArrayMemoryError under a cap): the
    machine counts and the tables' sizes are checked first (check_size, which makes no
    table), naming the option."""
    from dp.pipedream import MAX_SPLIT, check_size

    st = antichain_states(prepare(parse_graph_text(_chain_text(20), "g")))
    with pytest.raises(
        InputError,
        match=r"^--machines: machine counts must be whole numbers within \[1, 1048576\], got "
        r"100000000$",
    ):
        check_size(st, [100_000_000], what="--machines")
    with pytest.raises(
        SizeLimitError,
        match=r"^--devices: 100,000 workers on a level need .* above the limit of [\d,]+; "
        r"use at most \d[\d,]* workers per level on this graph$",
    ):
        check_size(st, [100_000], what="--devices")
    with pytest.raises(SizeLimitError, match="a level below the last"):
        check_size(st, [200_000, 2], straight=True)
    # the largest count the message allows passes; one more is refused
    width = max(len(a) for a in st.ancestors)
    for limit in (MAX_SPLIT, 2_000):
        most = int(
            str(pytest.raises(SizeLimitError, check_size, st, [100_000], max_split=limit).value)
            .split("at most ")[1]
            .split()[0]
            .replace(",", "")
        )
        assert most * width * (most - 1) <= limit < (most + 1) * width * most
        check_size(st, [most], max_split=limit)
    # and the DP checks before it makes a table: under a small limit it refuses one worker
    # more than the limit allows, and solves with as many as it allows
    with pytest.raises(SizeLimitError, match="above the limit of 2,000"):
        pipedream_dp(st, [most + 1], [1e9], max_split=2_000)
    assert pipedream_dp(st, [most], [1e9], max_split=2_000).time_per_stage is not None


@pytest.mark.parametrize(
    "args,says",
    [
        (
            ["pipedream", "-n", "100000000", "-b", "1e9"],
            "--devices: machine counts must be whole numbers within",
        ),
        (["pipedream", "-n", "100000", "-b", "1e9"], "--devices: 100,000 workers on a level need"),
        (
            ["pipedream", "-K", "100000", "--bandwidth", "1e9"],
            "--devices: 100,000 workers on a level need",
        ),
        (
            ["verify", "--model", "pipedream", "--devices", "100000", "--bandwidth", "1e9"],
            "--devices: 100,000 workers",
        ),
    ],
)
def test_cli_too_many_workers_is_one_line_exit_2(tmp_path, args, says):
    # in a process whose address space is capped, so that were the check to go the tables
    # would fail to allocate (a traceback, not this line) rather than fill the memory
    import resource
    import subprocess
    import sys

    from conftest import REPO

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))

    path = _graph_file(tmp_path, _chain_text(20))
    argv = (
        [*args[:1], str(path), *args[1:]]
        if args[0] == "pipedream"
        else [*args[:3], str(path), *args[3:]]
    )
    cmd = [sys.executable, "-m", "piper_cli", *argv]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, preexec_fn=cap, timeout=300)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()] and says in res.stderr


@pytest.mark.parametrize("fewer", [False, True])
@pytest.mark.parametrize("straight", [False, True])
def test_exhaustive_search_counts_its_plans_before_trying_them(fewer, straight):
    """Refused above max_plans (verify --model pipedream with many workers on a tiny
    graph ran for ever); the count is exactly the plans it then tries."""
    prep = prepare(random_pd_graph("layered", 6, 3))
    n = 3 if straight else 7
    kw = dict(fewer_machines=fewer, straight=straight)
    seen = brute_pipedream(prep, n, 1e9, **kw).plans_seen
    assert seen > 0
    assert brute_pipedream(prep, n, 1e9, max_plans=seen, **kw).plans_seen == seen
    with pytest.raises(SizeLimitError, match=f"{seen:,} plans with {n} workers"):
        brute_pipedream(prep, n, 1e9, max_plans=seen - 1, **kw)


def test_a_valid_dp_plan_refutes_the_milps_proof_where_the_milp_is_the_referee():
    """With no exhaustive search (too many layers) the MILP's proof is the referee; a DP
    plan that is valid and beats it names the MILP, not the DP."""
    from compare.baselines.pipedream import check_pipedream
    from piper_ilp.pipedream import milp as pd_milp

    prep = prepare(chain3())
    st = antichain_states(prep)
    real = check_pipedream(prep, st, 2, 1e9, straight=True)
    assert real["verdict"] == "match"
    wrong = pd_milp.MilpResult(
        "optimal", real["values"]["dp"] * 2, real["values"]["dp"] * 2, None, 1
    )
    none = pd_milp.MilpResult("infeasible", None, None, None, 1)
    for fake in (wrong, none):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pd_milp, "solve_pipedream_milp", lambda *a, _r=fake, **k: _r)
            mp.setattr("compare.baselines.pipedream.brute_pipedream", _too_big)
            v = check_pipedream(prep, st, 2, 1e9, straight=True)
        assert v["referee"] == "milp" and v["verdict"] == "mismatch"
        assert len(v["problems"]) == 1 and v["problems"][0].startswith("milp: its proof"), v[
            "problems"
        ]
        assert "refuted by dp's valid plan" in v["problems"][0]


def _too_big(*a, **k):
    raise SizeLimitError("too many layers for exhaustive search (test)")


@pytest.mark.parametrize("f_ms", [1e14, 1e17])
def test_the_milp_with_a_valid_plans_cutoff_is_right_at_stage_times_of_1e10_s_and_more(f_ms):
    """hunt4: SCIP's absolute tolerances and its infinity (1e20) met the stage times as they
    were: two layers of 1 ms and f ms on 3 workers gave an "optimal" 5e10 s (1e14; the optimum
    is 1e11 / 3 s) and a false "infeasible" (1e17). The check now gives the MILP the DP's plan
    time as a cutoff."""
    from compare.baselines.pipedream import check_pipedream
    from piper_ilp.pipedream.milp import solve_pipedream_milp

    text = "\n".join(
        [
            line("node2", "L0", 1.0, 0.0, 0.0, 0.0),
            line("node3", "L1", f_ms, 0.0, 0.0, 0.0),
            "\tnode2 -- node3",
        ]
    )
    prep = prepare(parse_graph_text(text, "huge.txt"))
    want = brute_pipedream(prep, 3, 1e9).value
    assert want == pytest.approx(f_ms / 1000 / 3, rel=1e-12)
    r = solve_pipedream_milp(prep, 3, 1e9, cutoff=want * 1.5)
    assert r.status == "optimal" and r.value == pytest.approx(want, rel=1e-6)
    assert plan_time(prep, antichain_states(prep), r.plan, 3, 1e9) == pytest.approx(want, rel=1e-6)
    v = check_pipedream(prep, antichain_states(prep), 3, 1e9)
    assert v["verdict"] == "match" and v["milp_agrees"], v["problems"]


def test_mapping_names_layer_ids_the_graph_does_not_have():
    # a typo in a stage's layer ids was dropped silently, the rest mapped as if it were not there
    g = chain3()
    with pytest.raises(InputError, match=r"stage 1 holds layer id\(s\) node9 that the graph"):
        piper_plan_from_pipedream(g, [(("node2",), 1), (("node3", "node9", "node4"), 1)])


def test_the_milp_at_a_time_limit_of_0_claims_nothing():
    # OR-Tools reads SetTimeLimit(0) as no limit: SCIP ran to a proof ("optimal") with
    # time_limit=0; no time to solve now answers not-solved without SCIP, and a limit that
    # is not a finite number >= 0 is an InputError
    prep = prepare(chain3())
    assert solve_pipedream_milp(prep, 3, 1e9).status == "optimal"
    r = solve_pipedream_milp(prep, 3, 1e9, time_limit=0.0)
    assert (r.status, r.value, r.plan) == ("not-solved", None, None)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(InputError, match="time_limit: the time limit must be a finite"):
            solve_pipedream_milp(prep, 3, 1e9, time_limit=bad)
