"""The graph-pipelining MILP's symmetry rows (piper_ilp/milp/symmetry.py, docs/milp.md
"Symmetry rows") and the batch time's throughput floor: every valid plan's canonical form is
a point of the model at its value, the canonical form is in the plan's orbit, the classes
found are the interchangeable chains and only those, and CP-SAT with both agrees with the
exhaustive search in every graph mode; and CP-SAT's SAT presolve regression that the floor's
first version (its plan passed on as a hint) ran into."""

from __future__ import annotations

import math

import pytest
from builders import every_plan
from test_dp_symmetry import branchy
from test_milp_modes import _check_plan_in_model

from compare.builders.generators import random_instance
from compare.crosscheck.brute import brute_applies, solve_brute
from piper_ilp.evaluate import evaluate
from piper_ilp.milp import model_size, solve_milp
from piper_ilp.milp.model import formulate, index_sets, size_of_sets
from piper_ilp.milp.symmetry import canonical_plan, chains, find_symmetry
from piper_ilp.mode import ALL_MODES, Mode
from piper_ilp.solution import Restrictions, Status

GRAPH = [m for m in ALL_MODES if m.graph]


def _rows_hold(inst, plan, sym) -> bool:
    """The symmetry rows, read on a plan: consecutive stages without an edge from the first
    to the second in increasing least rank; each class's first nodes in non-decreasing
    stages."""
    stage_of = {v: i for i, s in enumerate(plan.stages) for v in s.nodes}
    for a, b in zip(plan.stages, plan.stages[1:]):
        edge = any(x in b.nodes for v in a.nodes for x, _ in inst.out_edges[v])
        if not edge and min(sym.rank[v] for v in a.nodes) > min(sym.rank[v] for v in b.nodes):
            return False
    return all(
        stage_of[c1[0]] <= stage_of[c2[0]] for cls in sym.classes for c1, c2 in zip(cls, cls[1:])
    )


def test_chains_and_classes():
    inst = branchy(3)
    sym = find_symmetry(inst)
    assert sym.classes and all(len(cls) >= 2 for cls in sym.classes)
    covered = [v for cls in sym.classes for c in cls for v in c]
    assert len(covered) == len(set(covered))
    assert sorted(v for c in chains(inst) for v in c) == sorted(inst.node_ids)
    for seed in range(40):
        plain, odd = find_symmetry(branchy(seed)), find_symmetry(branchy(seed, perturb=True))
        n_plain = sum(len(cls) for cls in plain.classes)
        assert sum(len(cls) for cls in odd.classes) < n_plain
        assert find_symmetry(branchy(seed, names=True)).classes == plain.classes
    # random numbers per layer: nothing is interchangeable
    assert find_symmetry(random_instance("towers", 8, 1)).classes == ()


@pytest.mark.parametrize("mode", GRAPH[:4], ids=lambda m: m.label)
def test_every_valid_plan_has_a_canonical_point(mode):
    checked = 0
    for seed in (13, 23, 24):  # 4, 3 and 4 nodes: every plan is quick to list
        inst = branchy(seed)
        st = index_sets(inst, Restrictions(), mode, symmetry=True)
        assert st.sym is not None and st.sym.classes
        form = formulate(st, strong=True)
        valid = [p for p in every_plan(inst) if evaluate(inst, p, mode).valid]
        for plan in valid[::4]:
            ev = evaluate(inst, plan, mode)
            canon = canonical_plan(inst, plan, st.sym)
            again = evaluate(inst, canon, mode)
            assert again.valid and again.value == ev.value
            assert _rows_hold(inst, canon, st.sym)
            _check_plan_in_model(form, plan, ev.value)
            checked += 1
    assert checked > 20


def test_model_size_counts_the_symmetry_rows():
    for seed in range(4):
        inst = branchy(seed)
        for mode in (Mode("graph"), Mode("graph", "batch-time")):
            st = index_sets(inst, Restrictions(), mode, symmetry=True)
            m = formulate(st, strong=True).model
            size = size_of_sets(st, strong=True)
            assert size["variables"] == len(m.vars)
            assert size["binaries"] == sum(1 for v in m.vars if v.kind == "binary")
            assert size["constraints"] == len(m.rows)
            plain = model_size(inst, mode=mode, strong=True)
            assert plain["variables"] < size["variables"]
            assert {"key", "adj", "adj_any"} <= {v.name.split("[")[0] for v in m.vars}


@pytest.mark.parametrize("mode", GRAPH, ids=lambda m: m.label)
def test_cpsat_with_symmetry_and_floor_agrees_with_brute(mode):
    checked = 0
    for seed in range(24):
        inst = branchy(seed) if seed % 2 == 0 else random_instance("fork-join", 6, seed, K=8, N=8)
        if len(inst.nodes) > 7 or not brute_applies(inst):
            continue
        ref = solve_brute(inst, mode=mode)
        got = solve_milp(inst, backend="cpsat", threads=1, mode=mode)
        assert got.status == ref.status, (seed, got.message)
        if ref.status is Status.OPTIMAL:
            assert math.isclose(got.value, ref.value, rel_tol=1e-6), seed
            checked += 1
            if mode.batch_time:
                assert got.info["throughput_floor"]["status"] == "optimal"
    assert checked >= 5


def test_the_floor_and_the_rows_can_be_switched_off():
    inst = branchy(24)  # feasible (branchy(2) is not)
    mode = Mode("graph", "batch-time")
    on = solve_milp(inst, backend="cpsat", threads=1, mode=mode)
    off = solve_milp(
        inst, backend="cpsat", threads=1, mode=mode, throughput_floor=False, symmetry=False
    )
    assert on.status is off.status is Status.OPTIMAL
    assert math.isclose(on.value, off.value, rel_tol=1e-6)
    assert "throughput_floor" in on.info and "throughput_floor" not in off.info
    assert on.info["symmetry"] and "symmetry" not in off.info
    assert on.info["variables"] > off.info["variables"]


def test_cpsat_sat_presolve_regression():
    # CP-SAT 9.15's SAT presolve proved 31.6128 here with this warm start (and called the
    # model infeasible without it at the same time unit); the optimum is 31.2682
    from test_in_flight import _pressed

    from piper_ilp.plan import Plan, Stage

    inst = _pressed(37)
    mode = Mode("sequential", "batch-time", "1f1b", "schedule")
    ref = solve_brute(inst, mode=mode)
    v = "vanilla"
    r = "activation recomp"
    hint = Plan(
        (
            Stage((0,), 3, 1, {0: v}),
            Stage((1,), 3, 1, {1: v}),
            Stage((2,), 3, 1, {2: v}),
            Stage((3, 4), 3, 1, {3: r, 4: r}),
        )
    )
    assert evaluate(inst, hint, mode).value > ref.value * (1 + 1e-3)
    for threads in (1, 2):
        got = solve_milp(
            inst, backend="cpsat", mode=mode, hint=hint, threads=threads, throughput_floor=False
        )
        assert got.status is Status.OPTIMAL
        assert math.isclose(got.value, ref.value, rel_tol=1e-6), (got.value, ref.value)
