"""The MILP in every mode (graph pipelining sec. 8, batch time and gpipe sec. 9) on every
backend, refereed by the exhaustive search (compare/crosscheck/brute.py) and by the evaluator.

What is checked:

* every valid plan (all of them, enumerated naively on tiny instances) is a point of the
  model, in floats (the big-M rows CBC and SCIP solve) and in CP-SAT's rounded integers,
  with the model's objective equal to the evaluator's value (floats) or at most the
  stated slack above it (CP-SAT): so a backend's bound is a bound on the true optimum;
* every backend's answer agrees with brute's in every mode: an "optimal" value within
  1e-6 relative of brute's optimum, "infeasible" only when brute finds no plan;
* the hand-made fork where graph pipelining fits and sequential does not;
* a warm start (brute's plan) in every mode.
"""

from __future__ import annotations

import math

import pytest
from builders import certify_stand_in, every_plan, fork_instance

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from piper_ilp.evaluate import evaluate
from piper_ilp.milp import build_model, cpsat, model_size, solve_milp
from piper_ilp.milp.model import formulate, index_sets
from piper_ilp.milp.scaled import Memory, TimeScale, big_m_rows, complete, scale
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Status

BACKENDS = ("cpsat", "cbc", "scip")
MODE_IDS = [m.label for m in ALL_MODES]
FAMILIES = ("fork-join", "layered", "series-parallel", "chain")


def case(k: int):
    """The k-th tiny random instance of the agreement tests (3-6 nodes, N = 4 or 8)."""
    family = FAMILIES[k % len(FAMILIES)]
    return random_instance(family, 3 + (k * 7) % 4, seed=500 + k, N=(4, 8)[k % 2], t_values=(1, 2))


def agree(inst, mode, backend, restrictions=Restrictions()):
    """Solve with the backend and brute; fail on any claim brute contradicts. Returns the
    backend's status."""
    ref = solve_brute(inst, restrictions, mode=mode, force=True)
    sol = solve_milp(inst, restrictions, backend=backend, mode=mode, time_limit=60)
    assert sol.mode == mode
    what = (
        f"{backend} {mode.label} {inst.source}: {sol.status.value} {sol.value!r} "
        f"({sol.message}); brute {ref.status.value} {ref.value!r}"
    )
    assert sol.status not in (Status.BACKEND_ERROR, Status.OUT_OF_RANGE), what
    if sol.status is Status.OPTIMAL:
        assert ref.status is Status.OPTIMAL, what
        assert math.isclose(sol.value, ref.value, rel_tol=1e-6), what
        assert evaluate(inst, sol.plan, mode).value == sol.value
    elif sol.status is Status.INFEASIBLE:
        assert ref.status is Status.INFEASIBLE, what
    if sol.bound is not None and ref.status is Status.OPTIMAL:
        assert sol.bound <= ref.value * (1 + 1e-6), what
    if sol.plan is not None:
        assert sol.value >= ref.value * (1 - 1e-12), what
    return sol.status


@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_cpsat_agrees_with_brute_in_every_mode(mode):
    statuses = [agree(case(k), mode, "cpsat") for k in (0, 2, 3, 4, 6, 7)]
    assert Status.OPTIMAL in statuses and Status.INFEASIBLE in statuses


@pytest.mark.parametrize("backend", ("cbc", "scip"))
@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_float_backends_agree_with_brute_in_every_mode(mode, backend):
    assert [agree(case(k), mode, backend) for k in (4, 7)] == [Status.OPTIMAL, Status.INFEASIBLE]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_agreement_sweep(mode, backend):
    count = 40 if backend == "cpsat" else 8
    for k in range(count):
        family = (*FAMILIES, "numerics")[k % 5]
        inst = random_instance(
            family, 3 + (k // 5) % 4, seed=9000 + k, N=(4, 8)[(k // 20) % 2], t_values=(1, 2)
        )
        agree(inst, mode, backend)


# ---- every valid plan is a point of the model ----


def _row_holds(terms, sense, rhs, values, tol):
    lhs = math.fsum(c * values[j] for j, c in terms)
    if sense == "<=":
        return lhs <= rhs + tol
    if sense == ">=":
        return lhs >= rhs - tol
    return abs(lhs - rhs) <= tol


def _check_plan_in_model(form, plan, value):
    """``plan`` (valid, with the evaluator's ``value``) satisfies the float big-M rows
    with objective = value, and CP-SAT's rounded integer rows with objective at most its
    slack above value."""
    st = form.sets
    m = form.model
    values, why = form.values_of(plan)
    assert values is not None, why
    ts = TimeScale.around(st.obj_bound, st.obj_bound)
    sm = scale(form, ts, Memory.RELAX)
    rows = big_m_rows(sm)
    full = complete(m, rows, values, sm.lb, integral=False)
    for j, var in enumerate(m.vars):
        assert sm.lb[j] - 1e-9 <= full[j] <= sm.ub[j] * (1 + 1e-9) + 1e-9, (
            var.name,
            full[j],
            sm.lb[j],
            sm.ub[j],
        )
    for r in rows:
        assert _row_holds(r.terms, r.sense, r.rhs, full, 1e-9 * (1 + abs(r.rhs))), r.name
    assert math.isclose(
        full[m.objective] * ts.unit, value, rel_tol=1e-9, abs_tol=1e-12 * st.obj_bound
    )
    # CP-SAT: the rounded rows in integers, exactly
    im = cpsat.integer_model(sm)
    steps, irows, dom = im.steps, im.rows, im.domains
    ifull = complete(m, irows, values, [d[0] for d in dom], integral=True)
    for r in irows:
        if r.enforce is not None and values[r.enforce] < 0.5:
            continue
        lhs = sum(c * ifull[j] for j, c in r.terms)
        assert {"<=": lhs <= r.rhs, ">=": lhs >= r.rhs, "==": lhs == r.rhs}[r.sense], r.name
    for j, (lo, hi) in enumerate(dom):
        assert lo <= ifull[j] <= hi, m.vars[j].name
    obj_steps = ifull[m.objective]
    assert obj_steps <= value / ts.unit * steps + im.slack + 1e-6 * obj_steps


@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_every_valid_plan_is_a_point_of_the_model(mode):
    # every third valid plan (the default lane's time), all of them together over the seeds
    checked = 0
    for family, seed in (("fork-join", 1), ("layered", 2), ("chain", 3)):
        n = 4 if family == "fork-join" else 3
        shape = dict(t_values=(1,), options_per_t=(1, 2), K=4, N=4)
        inst = random_instance(family, n, seed, **shape, memory="loose")
        form = formulate(index_sets(inst, Restrictions(), mode))
        for k, plan in enumerate(every_plan(inst)):
            ev = evaluate(inst, plan, mode)
            if ev.valid and k % 3 == seed % 3:
                _check_plan_in_model(form, plan, ev.value)
                checked += 1
    assert checked > 30


@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_model_size_counts_the_model(mode):
    for k in range(6):
        inst = case(k)
        size, m = model_size(inst, mode=mode), build_model(inst, mode=mode)
        assert size["variables"] == len(m.vars)
        assert size["binaries"] == sum(1 for v in m.vars if v.kind == "binary")
        assert size["constraints"] == len(m.rows)


def test_the_default_mode_is_the_original_model():
    inst = case(3)
    a, b = build_model(inst), build_model(inst, mode=DEFAULT_MODE)
    assert [v.name for v in a.vars] == [v.name for v in b.vars] and len(a.rows) == len(b.rows)
    assert not any(v.name.startswith(("h[", "arc[", "tau[", "L[", "Tbatch")) for v in a.vars)
    assert {v.name for v in build_model(inst, mode=Mode("graph", "batch-time")).vars} >= {
        "h[0]",
        "tau[0]",
        "L[0]",
        "Lmax",
        "Tbatch",
    }


# ---- the contract's example: graph pipelining fits where sequential does not ----


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_pipelining_beats_sequential_where_the_contract_says(backend):
    inst, r = fork_instance(), Restrictions(max_d=1)
    seq = solve_milp(inst, r, backend=backend)
    graph = solve_milp(inst, r, backend=backend, mode=Mode("graph"))
    assert seq.status is graph.status is Status.OPTIMAL
    assert graph.tps == 1.0 and len(graph.plan.stages) == 4
    assert seq.tps > graph.tps
    assert seq.tps == solve_brute(inst, r).tps
    # gpipe holds y = N / d = 4 everywhere: 4 > 3.5
    assert (
        solve_milp(inst, r, backend=backend, mode=Mode("graph", schedule="gpipe")).status
        is Status.INFEASIBLE
    )
    # batch time: 3 * 1 + the path 0 -> 1 -> 3 of 3 = 6
    bt = solve_milp(inst, r, backend=backend, mode=Mode("graph", "batch-time"))
    assert (
        bt.status is Status.OPTIMAL
        and bt.value == 6.0
        and bt.tps == 1.0
        and bt.mode == Mode("graph", "batch-time")
    )


# ---- warm starts ----


@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_a_plan_of_the_mode_is_a_warm_start(mode):
    inst = case(2)
    ref = solve_brute(inst, mode=mode)
    assert ref.status is Status.OPTIMAL
    sol = solve_milp(inst, backend="cpsat", mode=mode, hint=ref.plan)
    assert sol.info["hint"] == "used"
    assert sol.status is Status.OPTIMAL and math.isclose(sol.value, ref.value, rel_tol=1e-6)


def test_a_warm_start_invalid_under_the_mode_is_ignored_with_the_reason():
    inst, r = fork_instance(), Restrictions(max_d=1)
    graph_plan = solve_brute(inst, r, mode=Mode("graph")).plan  # four stages: over M sequentially
    sol = solve_milp(inst, r, backend="cpsat", hint=graph_plan)
    assert sol.info["hint"].startswith("ignored: not a valid plan") and "rule 6" in sol.info["hint"]
    sol = solve_milp(inst, r, backend="cpsat", hint=graph_plan, mode=Mode("graph"))
    assert sol.info["hint"] == "used" and sol.status is Status.OPTIMAL


def test_batch_time_with_one_microbatch():
    # N = 1: T_batch is the longest path alone
    for k in range(3):
        inst = random_instance(FAMILIES[k], 4, seed=70 + k, N=1, t_values=(1, 2))
        for mode in (Mode("sequential", "batch-time"), Mode("graph", "batch-time")):
            agree(inst, mode, "cpsat")


# ---- certification under a mode, with a stand-in backend ----


def _certify_fork_with(mode, answer_of):
    def claim(form, values, ref):
        return answer_of(values, ref.value)

    return certify_stand_in(fork_instance(), claim, Restrictions(max_d=1), mode)


def test_certification_compares_with_the_value_of_the_mode():
    from piper_ilp.milp.backend import Answer

    mode = Mode("graph", "batch-time")
    sol, ref = _certify_fork_with(mode, lambda v, x: Answer(Status.OPTIMAL, v, x, x))
    assert (
        sol.status is Status.OPTIMAL
        and sol.plan == ref.plan
        and sol.mode == mode
        and ref.value == 6.0
    )
    # the TPS (1.0) is not the batch time (6.0): a backend claiming it is caught
    sol, _ = _certify_fork_with(mode, lambda v, x: Answer(Status.OPTIMAL, v, 1.0, 1.0))
    assert sol.status is Status.BACKEND_ERROR and "batch time" in sol.message
    # an incumbent above its plan's value (an arc without an edge): the plan, not the number
    sol, _ = _certify_fork_with(
        mode, lambda v, x: Answer(Status.FEASIBLE, v, 2 * x, x / 2, stopped="time limit")
    )
    assert sol.status is Status.FEASIBLE and sol.objective is None and sol.plan is not None
    # ... but claimed optimal, it is a backend error
    sol, _ = _certify_fork_with(mode, lambda v, x: Answer(Status.OPTIMAL, v, 2 * x, 2 * x))
    assert sol.status is Status.BACKEND_ERROR


@pytest.mark.parametrize("mode", ALL_MODES, ids=MODE_IDS)
def test_every_valid_plan_is_a_point_with_the_strengthening_rows(mode):
    # the boundary and work rows (strong=True: CP-SAT's default) cut off no valid plan
    inst = random_instance(
        "layered", 4, 2, t_values=(1,), options_per_t=(1, 2), K=4, N=4, memory="loose"
    )
    form = formulate(index_sets(inst, Restrictions(), mode), strong=True)
    assert any(r.name == "work" for r in form.model.rows)
    checked = 0
    for plan in every_plan(inst):
        ev = evaluate(inst, plan, mode)
        if ev.valid and len(plan.stages) <= form.sets.S:
            _check_plan_in_model(form, plan, ev.value)
            checked += 1
    assert checked > 0
