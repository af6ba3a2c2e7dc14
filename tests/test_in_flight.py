"""The in-flight budget that the schedule keeps (contract sec. 11, ``--in-flight schedule``):
the rule, the evaluator, every method against brute, the simulator as its referee, and the
flag on every command."""

from __future__ import annotations

import json
import math

import pytest
from builders import json_lines, make_instance, option_dict
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.brute import brute_applies, solve_brute
from compare.crosscheck.methods import run_method
from compare.crosscheck.schedule_fuzz import check_plan, fuzz, random_plan_case
from compare.experiments.campaign import mode_specs, parse_modes, replay_command
from compare.simulation.simulate import simulate
from dp.modes import solve_modes
from dp.solver import solve_dp
from piper_cli import app
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.milp.model import build_model, model_size
from piper_ilp.milp.solve import solve_milp
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, Mode
from piper_ilp.pipeline import front_in_flight, in_flight, microbatches_held
from piper_ilp.plan import Plan, Stage, load_plan
from piper_ilp.solution import Restrictions, Status

runner = CliRunner()
SCHEDULE = Mode(in_flight="schedule")
SCHEDULE_MODES = [m.with_in_flight("schedule") for m in ALL_MODES]


def chain(ps, K, N, a=0.0, M=1e9):
    """A chain of one-option nodes with p = ``ps`` and memory a per microbatch."""
    n = len(ps)
    nodes = []
    for i, p in enumerate(ps):
        sfw = {i - 1: 0.0} if i else {}
        sbw = {i + 1: 0.0} if i + 1 < n else {}
        nodes.append((i, {"1": [option_dict("v", p=p, a=a, sfw=sfw, sbw=sbw)]}))
    return make_instance(nodes, [(i, i + 1, 0.0) for i in range(n - 1)], K=K, N=N, M=M)


def staged(d, sizes=None):
    """A plan of a chain: stage i holds ``sizes[i]`` nodes (default 1) with degree d[i]."""
    sizes = sizes or [1] * len(d)
    out, v = [], 0
    for di, k in zip(d, sizes):
        nodes = tuple(range(v, v + k))
        out.append(Stage(nodes, di, 1, {u: "v" for u in nodes}))
        v += k
    return Plan(tuple(out))


# ---- the rule ------------------------------------------------------------------------


def test_q_rounds_each_stage_up_to_a_multiple_of_its_d():
    # d = 1, 2, 1: Piper's h = 4, 3, 1 (y = 4, 2, 1); the schedule's q = 5, 4, 1 (y = 5, 2, 1)
    assert in_flight([1, 2, 1], [], "sequential", "piper") == [4, 3, 1]
    assert in_flight([1, 2, 1], [], "sequential", "schedule") == [5, 4, 1]
    assert [microbatches_held(q, d, 8) for q, d in zip([5, 4, 1], [1, 2, 1])] == [5, 2, 1]
    # a stage with two successors takes the larger q, then rounds up: 3 * ceil((3 + 4) / 3)
    assert in_flight([3, 2, 4], [{1, 2}, set(), set()], "graph", "schedule") == [9, 2, 4]
    assert front_in_flight(3, 4, "schedule") == 9 and front_in_flight(3, 4) == 7


def test_with_every_d_one_the_schedules_rule_is_pipers():
    import random

    rng = random.Random(5)
    for _ in range(50):
        m = rng.randint(1, 6)
        succ = [{j for j in range(i + 1, m) if rng.random() < 0.4} for i in range(m)]
        for pipeline in ("sequential", "graph"):
            ones = [1] * m
            assert in_flight(ones, succ, pipeline, "schedule") == in_flight(ones, succ, pipeline)


def test_labels_and_ids_under_pipers_rule_are_unchanged():
    assert [m.label for m in ALL_MODES][:2] == [
        "sequential/throughput/1f1b",
        "sequential/throughput/gpipe",
    ]
    assert SCHEDULE.label == "sequential/throughput/1f1b/schedule" and not SCHEDULE.is_default
    assert Mode.parse("graph/batch-time/gpipe/schedule") == Mode(
        "graph", "batch-time", "gpipe", "schedule"
    )
    assert Mode.parse("graph", "schedule") == Mode("graph", in_flight="schedule")
    # a plan written before the rule existed records no in_flight: Piper's
    assert Mode.from_dict({"pipeline": "graph"}).in_flight == "piper"
    specs = mode_specs([_spec()], [DEFAULT_MODE, Mode("graph"), SCHEDULE])
    assert [s.id for s in specs] == [
        "x",
        "x@graph+throughput+1f1b",
        "x@sequential+throughput+1f1b+schedule",
    ]
    assert [m.label for m in parse_modes("all", "schedule")] == [m.label for m in SCHEDULE_MODES]
    assert "--in-flight" not in replay_command(["dp"], {}, DEFAULT_MODE)
    assert "--in-flight schedule" in replay_command(["dp"], {}, SCHEDULE)
    with pytest.raises(ValueError, match="in_flight: choose piper or schedule, got .lazy."):
        Mode(in_flight="lazy")


def _spec():
    from compare.experiments.campaign import Spec

    return Spec("x", "chain", 3, 0, False, (1,), (1, 1), "tight")


# ---- the evaluator -------------------------------------------------------------------


def test_the_evaluator_budgets_q_and_limits_max_q_by_n():
    inst = chain([1.0, 2.0, 1.0], K=4, N=4)
    plan = staged([1, 2, 1])
    piper, sched = evaluate(inst, plan), evaluate(inst, plan, SCHEDULE)
    assert piper.valid and [r.s for r in piper.stages] == [4, 3, 1]
    assert not sched.valid and [r.s for r in sched.stages] == [5, 4, 1]
    assert str(sched.violations[0]) == "rule 5: max q = 5 microbatches in flight exceeds N = 4"
    # memory: a = 1 per microbatch, M = 4 holds stage 0 at y = 4 (Piper) but not at y = 5
    inst = chain([1.0, 2.0, 1.0], K=4, N=8, a=1.0, M=4.0)
    assert evaluate(inst, plan).valid
    ev = evaluate(inst, plan, SCHEDULE)
    assert [r.y for r in ev.stages] == [5, 2, 1]
    assert [v.rule for v in ev.violations] == [6] and ev.violations[0].stage == 0


# ---- every method against the oracle --------------------------------------------------


def _pressed(k: int):
    """A tiny instance where memory presses: 3-5 nodes in a chain with a few skip edges,
    weights b of a quarter to half of M (so a stage holds one or two nodes), activations a
    that make y matter, a vanilla and a recompute option, K in {6, 8, 12}, N in {12, 24}:
    uneven d, where sec. 11's rounding changes the optimum of about one in twelve."""
    import random

    rng = random.Random(k)
    n = rng.randint(3, 5)
    edges = [(i, i + 1) for i in range(n - 1)]
    edges += [(i, j) for i in range(n) for j in range(i + 2, n) if rng.random() < 0.2]
    nodes = []
    for v in range(n):
        p, a, b = rng.uniform(1, 4), rng.uniform(0.02, 0.15), rng.uniform(0.25, 0.5)
        sfw = {u: 0.0 for u, x in edges if x == v}
        sbw = {x: 0.0 for u, x in edges if u == v}
        opts = [
            option_dict("vanilla", p=p, a=a, b=b, sfw=sfw, sbw=sbw),
            option_dict("activation recomp", p=1.3 * p, a=a / 4, b=b, sfw=sfw, sbw=sbw),
        ]
        nodes.append((v, {"1": opts}))
    cut = [(u, x, rng.uniform(0, 0.1)) for u, x in edges]
    return make_instance(nodes, cut, K=rng.choice((6, 8, 12)), N=rng.choice((12, 24)), M=1.0)


def _cases(mode: Mode, plain: int = 20, differing: int = 5):
    """The first ``plain`` pressed instances, and the first ``differing`` ones whose optimum
    under ``mode`` differs between the two rules (brute decides), each with brute's answer
    under the schedule's rule: the rule is tested where it matters."""
    out, found = [], 0
    for k in range(400):
        inst = _pressed(k)
        ref = solve_brute(inst, mode=mode)
        differs = ref.value != solve_brute(inst, mode=mode.with_in_flight("piper")).value
        if k < plain or (differs and found < differing):
            out.append((inst, ref))
            found += differs
        if k >= plain and found >= differing:
            break
    assert found >= differing, f"only {found} instances where the rule changes the optimum"
    return out


def _agree(got, ref, rtol=1e-9):
    assert got.status == ref.status, (got.status, ref.status, got.message)
    if ref.status is Status.OPTIMAL:
        assert math.isclose(got.value, ref.value, rel_tol=rtol), (got.value, ref.value)


@pytest.mark.parametrize("mode", SCHEDULE_MODES, ids=lambda m: m.label)
def test_the_dp_agrees_with_brute_under_the_schedules_rule(mode):
    for inst, ref in _cases(mode):
        got = solve_dp(inst, mode=mode)
        assert got.mode == mode
        _agree(got, ref)
    for k in range(12):  # and the generators' shapes and numbers
        inst = random_instance(("fork-join", "layered", "numerics")[k % 3], 4, 800 + k, K=8, N=8)
        if brute_applies(inst):
            _agree(solve_dp(inst, mode=mode), solve_brute(inst, mode=mode))


def test_the_threshold_dp_agrees_with_the_label_dp_under_the_schedules_rule():
    # the sequential, throughput mode under sec. 11's rule: the threshold DP's floor
    # transition and running minima against the label DP's q labels, on instances too
    # large for brute, and with the chain bound forced (chain_first=0)
    from dp.threshold_dp import solve_threshold_dp

    for k in range(20):
        inst = random_instance(
            ("chain", "skip", "layered")[k % 3], 6 + k % 4, 900 + k, K=16, N=24, memory=0.4
        )
        ref = solve_modes(inst, mode=SCHEDULE)
        for kw in ({}, {"chain_first": 0, "small_s": 1}):
            got = solve_threshold_dp(inst, in_flight="schedule", **kw)
            _agree(got, ref)


def test_an_optimum_whose_q_passes_k_is_found():
    # K = 3: d = 2, 1 needs q = 4 > K microbatches in flight (the DP's columns run to
    # min(N, 2K - 1)); nothing on 3 devices is faster than that plan's TPS 1
    inst = chain([2.0, 1.0], K=3, N=4)
    for solve in (
        lambda m: solve_dp(inst, mode=m),
        lambda m: solve_brute(inst, mode=m),
        lambda m: solve_milp(inst, backend="cpsat", mode=m),
    ):
        sol = solve(SCHEDULE)
        assert sol.status is Status.OPTIMAL and sol.value == 1.0
        assert [st.d for st in sol.plan.stages] == [2, 1]
        assert [r.s for r in evaluate(inst, sol.plan, SCHEDULE).stages] == [4, 1]


@pytest.mark.parametrize("mode", SCHEDULE_MODES, ids=lambda m: m.label)
def test_the_milp_agrees_with_brute_under_the_schedules_rule(mode):
    for inst, ref in _cases(mode, plain=2, differing=3):
        size, model = model_size(inst, mode=mode), build_model(inst, mode=mode)
        assert (size["variables"], size["constraints"]) == (len(model.vars), len(model.rows))
        got = solve_milp(inst, backend="cpsat", mode=mode, time_limit=60)
        assert got.status in (Status.OPTIMAL, Status.INFEASIBLE), got.message
        _agree(got, ref, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cbc", "scip"])
def test_the_other_backends_agree_where_the_rule_matters(backend):
    proven = 0
    for mode in (SCHEDULE, Mode("graph", "batch-time", in_flight="schedule")):
        for inst, ref in _cases(mode, plain=0, differing=2):
            got = solve_milp(inst, backend=backend, mode=mode, time_limit=60)
            if got.status in (Status.OPTIMAL, Status.INFEASIBLE):  # else it proved nothing
                _agree(got, ref, rtol=1e-6)
                proven += 1
    assert proven >= 3


def test_a_plan_as_hint_fits_the_schedules_milp():
    inst = _pressed(11)
    for mode in (SCHEDULE, Mode("graph", in_flight="schedule")):
        plan = solve_dp(inst, mode=mode).plan
        from piper_ilp.milp.model import formulate, index_sets

        values, why = formulate(index_sets(inst, Restrictions(), mode)).values_of(plan)
        assert values is not None, why
        sol = solve_milp(inst, backend="cpsat", mode=mode, hint=plan)
        assert sol.status is Status.OPTIMAL


def test_every_registered_method_plans_under_the_rule_or_refuses_it():
    # an instance where the rule changes the optimum (brute decides): each method that
    # solves every mode finds the schedule's optimum, not Piper's, and records the rule;
    # each other method (and an external planner) refuses it, so verify never compares a
    # method that ignores the rule (path refuses it as outside its modes: verify skips it)
    from compare.crosscheck.methods import METHODS, check_mode, external_method

    ((inst, ref),) = _cases(SCHEDULE, plain=0, differing=1)
    piper = solve_brute(inst)
    assert ref.status is piper.status is Status.OPTIMAL and ref.value != piper.value
    # path and columns cover Piper's rule only (and columns graph pipelining only): a size
    # refusal that verify shows as skipped
    refusals = {
        "path": "does not solve the mode .*/schedule",
        "columns": "graph pipelining only, not .*/schedule",
        "compiled": "solves only the default mode .*, not .*/schedule",
    }
    for name, m in METHODS.items():
        if name in refusals:
            with pytest.raises(SizeLimitError, match=refusals[name]):
                run_method(inst, name, mode=SCHEDULE)
        elif m.all_modes:
            sol = run_method(inst, name, mode=SCHEDULE)
            assert sol.mode == SCHEDULE, name
            _agree(sol, ref, rtol=m.rtol)
        else:
            with pytest.raises(InputError, match="solves only the default mode"):
                run_method(inst, name, mode=SCHEDULE)
    with pytest.raises(InputError, match="solves only the default mode"):
        check_mode(external_method("x", "true"), SCHEDULE)


# ---- uniform degrees (--uniform, sec. 12) under the schedule's rule ---------------------

UNIFORM = Restrictions(uniform=True)


def test_uniform_degrees_never_round():
    # every stage of a uniform plan has the same d, so every q is a multiple of d and
    # q_i = d ceil((d + q_j) / d) = d + q_j: the two rules give the same counts (with
    # uneven d they differ: d = 1, 2, 1 above)
    import random

    rng = random.Random(11)
    for _ in range(200):
        m, d = rng.randint(1, 6), rng.randint(1, 8)
        succ = [{j for j in range(i + 1, m) if rng.random() < 0.4} for i in range(m)]
        for pipeline in ("sequential", "graph"):
            same = [d] * m
            assert in_flight(same, succ, pipeline, "schedule") == in_flight(same, succ, pipeline)


@pytest.mark.parametrize(
    "mode",
    [SCHEDULE, Mode("graph", "batch-time", in_flight="schedule")],
    ids=lambda m: m.label,
)
def test_uniform_under_the_schedules_rule_in_every_exact_method(mode):
    # instances where the rule changes the free optimum (brute decides); the uniform
    # optimum under it is brute's, equals the uniform optimum under Piper's rule (above),
    # and dp and cpsat find it, record the rule and return a uniform plan valid under it
    for inst, ref in _cases(mode, plain=0, differing=3):
        want = solve_brute(inst, UNIFORM, mode=mode)
        _agree(solve_brute(inst, UNIFORM, mode=mode.with_in_flight("piper")), want)
        size, model = model_size(inst, UNIFORM, mode), build_model(inst, UNIFORM, mode)
        assert (size["variables"], size["constraints"]) == (len(model.vars), len(model.rows))
        for name in ("dp", "cpsat"):
            got = run_method(inst, name, UNIFORM, mode=mode)
            assert got.mode == mode, name
            _agree(got, want, rtol=1e-6)
            if got.plan is not None:
                assert evaluate(inst, got.plan, mode).valid
                assert UNIFORM.violation(inst, got.plan) is None
        if want.status is Status.OPTIMAL and ref.status is Status.OPTIMAL:
            assert want.value >= ref.value * (1 - 1e-9)  # a restriction never helps


def test_solve_and_verify_combine_uniform_and_the_rule(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    args = ["solve", str(path), "--uniform", "--in-flight", "schedule", "-o", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    plan = load_plan(out)
    assert plan.metadata["in_flight"] == "schedule"
    assert len({(st.t, st.d) for st in plan.stages}) == 1
    args = ["verify", str(path), "--methods", "dp,brute,cpsat", "--uniform"]
    r = runner.invoke(app, args + ["--in-flight", "schedule", "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert rec["verdict"] == "match" and rec["mode"]["in_flight"] == "schedule"
    assert rec["restrictions"]["uniform"] is True
    assert rec["optimum"] == pytest.approx(solve_brute(inst, UNIFORM, mode=SCHEDULE).value)


# ---- the simulator is the referee -----------------------------------------------------


def test_equal_stages_d_1_2_1_run_at_max_tps_only_under_the_schedules_rule():
    # README finding 1: d = 1, 2, 1 with equal TPS cannot reach max TPS within Piper's y
    inst = chain([1.0, 2.0, 1.0], K=4, N=8)
    plan = staged([1, 2, 1])
    slow = simulate(inst, plan, in_flight="piper")
    fast = simulate(inst, plan, in_flight="schedule")
    assert slow.period / slow.max_tps > 1.1
    assert fast.period == pytest.approx(fast.max_tps, rel=1e-9)
    assert [s["y_model"] for s in fast.stages] == [5, 2, 1]
    assert all(s["peak_in_flight"] <= s["y_model"] for s in fast.stages)
    assert fast.to_dict()["in_flight"] == "schedule"


def test_random_plans_are_on_their_model_under_the_schedules_rule_and_not_under_pipers():
    counts = fuzz(24, 4, seed=40)
    assert counts.off("schedule") == 0
    assert counts.off("piper") > 0  # the control: the fuzz finds Piper's rounding
    for key, c in counts.checked.items():
        if key.endswith("/schedule"):
            assert c["on"] == c["plans"] > 0, (key, c)


def test_check_plan_calls_a_short_budget_off():
    found = 0
    for seed in range(20):
        inst, plan = random_plan_case(seed, "sequential")
        if check_plan(inst, plan, "sequential", "piper").verdict == "off":
            found += 1
            assert check_plan(inst, plan, "sequential", "schedule").verdict == "on"
    assert found


@pytest.mark.slow
def test_fuzz_thousands_of_plans():
    counts = fuzz(500, 100, seed=7000)
    assert counts.off("schedule") == 0, counts.examples


# ---- the published configurations (the "done when") --------------------------

GIB = 2**30
CONFIGS = [
    ("bert32a100.json", 512, 8 * GIB, 1920),
    ("resnet.json", 8, 4 * GIB, 7680),
    ("bert32a100.json", 64, 2 * GIB, 512),
]


@pytest.mark.parametrize("name,K,M,N", CONFIGS, ids=lambda x: str(x))
def test_the_schedules_optimum_of_a_published_configuration_runs_at_max_tps(
    shared_dir, name, K, M, N
):
    from piper_ilp.instance import load_instance

    inst = load_instance(shared_dir / "piper-inputs" / name).with_settings(
        K=K, M=M, N=N, B=25 * GIB
    )
    sol = solve_dp(inst, mode=SCHEDULE)
    assert sol.status is Status.OPTIMAL
    sim = simulate(inst, sol.plan, in_flight="schedule")
    assert abs(sim.period / sim.max_tps - 1) <= 1e-9, sim.period / sim.max_tps
    assert all(s["peak_in_flight"] <= s["y_model"] for s in sim.stages)
    ev = evaluate(inst, sol.plan, SCHEDULE)
    assert [s["y_model"] for s in sim.stages] == [r.y for r in ev.stages]


# ---- the flag on every command --------------------------------------------------------


@pytest.fixture
def small(tmp_path):
    inst = chain([1.0, 2.0, 1.0], K=4, N=8, a=1.0, M=4.5)
    path = tmp_path / "chain.json"
    from piper_ilp.instance import instance_to_dict

    path.write_text(json.dumps(instance_to_dict(inst)))
    return path, inst


def test_solve_records_the_rule_and_evaluate_and_simulate_follow_it(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(path), "--in-flight", "schedule", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "mode sequential/throughput/1f1b/schedule" in r.output
    plan = load_plan(out)
    assert plan.metadata["in_flight"] == "schedule"

    r = runner.invoke(app, ["evaluate", str(path), str(out), "--json"])
    (rec,) = json_lines(r.output)
    assert rec["mode"]["in_flight"] == "schedule" and rec["in_flight_note"] is None
    assert [s["h"] for s in rec["stages"]] == [r_.s for r_ in evaluate(inst, plan, SCHEDULE).stages]

    r = runner.invoke(app, ["evaluate", str(path), str(out), "--in-flight", "piper"])
    assert "note: the plan was made under --in-flight schedule and is judged here under" in r.output

    r = runner.invoke(app, ["simulate", str(path), str(out), "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert rec["in_flight"] == "schedule" and rec["period"] == pytest.approx(rec["max_tps"])

    r = runner.invoke(app, ["simulate", str(path), str(out), "--in-flight", "piper"])
    assert r.exit_code == 0 and "note: the plan was made under --in-flight schedule" in r.output


def test_a_pipers_plan_judged_under_the_schedules_rule_says_so(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    from piper_ilp.plan import plan_metadata, save_plan

    # d = 1, 2, 1 holds y = 4 at stage 0 under Piper's rule (memory 4 <= 4.5), 5 under sec. 11's
    save_plan(staged([1, 2, 1]), out, plan_metadata(inst, method="hand", problem=Mode().to_dict()))
    r = runner.invoke(app, ["evaluate", str(path), str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["evaluate", str(path), str(out), "--in-flight", "schedule"])
    assert r.exit_code == 1
    note = "note: the plan was made under --in-flight piper and is judged here under --in-flight"
    assert note + " schedule" in r.output
    assert "rule 6" in r.output


def test_verify_names_the_rule(small):
    path, _ = small
    r = runner.invoke(
        app, ["verify", str(path), "--methods", "dp,brute", "--in-flight", "schedule", "--json"]
    )
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert rec["mode"]["in_flight"] == "schedule" and rec["verdict"] == "match"
    r = runner.invoke(
        app, ["verify", str(path), "--methods", "greedy,brute", "--in-flight", "schedule"]
    )
    assert r.exit_code == 2 and "method greedy solves only the default mode" in r.output


def test_campaign_under_the_schedules_rule_in_every_mode(tmp_path):
    out = tmp_path / "c"
    args = [
        "campaign",
        "--count",
        "2",
        "--seed",
        "4",
        "--nodes",
        "2-3",
        "--families",
        "chain,fork-join",
    ]
    args += ["--methods", "dp,brute", "--modes", "all", "--in-flight", "schedule", "--workers", "1"]
    args += ["--scheduler", "processes", "--no-progress", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(row["in_flight"] == "schedule" for row in rows)
    assert {row["mode"] for row in rows} == {m.label for m in SCHEDULE_MODES}
    assert all(row["id"].endswith("+schedule") for row in rows)


def test_sweep_and_ladder_take_the_rule(tmp_path, small):
    path, inst = small
    from compare.experiments.ladder import run_ladder
    from compare.experiments.sweep import run_sweep, sweep_points

    points = sweep_points([4], [inst.M], [8], [inst.B], ["all", "greedy"])
    rows = run_sweep(inst, points, tmp_path / "s", in_flight="schedule")
    by = {row["variant"]: row for row in rows}
    assert by["all"]["in_flight"] == "schedule"
    assert by["all"]["tps"] == solve_dp(inst, mode=SCHEDULE).tps
    assert (
        by["greedy"]["status"] == "refused"
        and "solves only the default mode" in by["greedy"]["message"]
    )
    with pytest.raises(
        InputError, match="in_flight 'schedule' -> 'piper'"
    ):  # the folder's parameters name the rule
        run_sweep(inst, points, tmp_path / "s", resume=True)
    lad = run_ladder(inst, max_nodes=2, time_limit=10, full_time_limit=10, in_flight="schedule")
    assert lad.to_dict()["in_flight"] == "schedule"
    assert lad.full["tps"] == solve_dp(inst, mode=SCHEDULE).tps


# ---- finding 2: the batch-time model against the simulator ----------------------------


def test_forwards_only_the_knapsack_formula_is_the_simulated_batch_time():
    from compare.crosscheck.batch_bound import knapsack_batch_time

    for seed in range(30):
        for pipeline in ("sequential", "graph"):
            inst, plan = random_plan_case(seed, pipeline)
            ev = evaluate(inst, plan, Mode(pipeline, in_flight="schedule"))
            tps, d = [r.cost.tps for r in ev.stages], [r.d for r in ev.stages]
            succ = [set(r.successors) for r in ev.stages]
            knap = knapsack_batch_time(tps, d, succ, inst.N, pipeline)
            for schedule in ("1f1b-flush", "gpipe"):
                sim = simulate(
                    inst,
                    plan,
                    schedule=schedule,
                    pipeline=pipeline,
                    forward_fraction=1.0,
                    in_flight="schedule",
                )
                assert sim.batch_time == pytest.approx(knap, rel=1e-9)
                assert sim.batch_time <= sim.model_batch_time * (1 + 1e-9)


def test_with_backward_passes_the_knapsack_formula_fails_on_a_graph_plan():
    # seed 397 (d = 3, 6, 6, graph pipelining), found by compare.crosscheck.batch_bound:
    # 1F1B-flush runs longer than the knapsack formula, still within sec. 9's formula
    from compare.crosscheck.batch_bound import knapsack_batch_time

    inst, plan = random_plan_case(397, "graph")
    ev = evaluate(inst, plan, Mode("graph", in_flight="schedule"))
    tps, d = [r.cost.tps for r in ev.stages], [r.d for r in ev.stages]
    knap = knapsack_batch_time(tps, d, [set(r.successors) for r in ev.stages], inst.N, "graph")
    sim = simulate(inst, plan, schedule="1f1b-flush", pipeline="graph", in_flight="schedule")
    assert sim.batch_time > knap * 1.1
    assert sim.batch_time <= sim.model_batch_time * (1 + 1e-9)


def test_the_bound_is_loosest_for_one_stage_of_d_n():
    # one stage, d = N = 8: the replicas run side by side (simulated N TPS), sec. 9 charges
    # (N - 1) TPS + d TPS = (2N - 1) TPS
    inst = chain([8.0], K=8, N=8)
    sim = simulate(inst, staged([8]), schedule="1f1b-flush", in_flight="schedule")
    assert sim.batch_time == pytest.approx(8.0) and sim.model_batch_time == pytest.approx(15.0)


def test_the_dps_greedy_option_rule_plans_under_the_schedule_rule_and_the_greedy_method_refuses():
    """hunt39 O1: the DP's greedy option rule (`--knapsack greedy`) is a DP mode and runs under
    either in-flight rule (Piper's rule at each stage's y from the budget), while the greedy
    method (Piper's planner as published) plans under Piper's rule only (docs/in-flight.md)."""
    schedule = Mode(in_flight="schedule")
    for seed in range(6):
        inst = random_instance("ties", 5, seed)
        with pytest.raises(InputError, match="greedy"):
            run_method(inst, "greedy", mode=schedule)
        greedy = solve_dp(inst, knapsack="greedy", mode=schedule)
        exact = solve_dp(inst, mode=schedule)
        assert greedy.plan is None or exact.plan is not None  # no plan where exact has none
        if greedy.plan is not None:
            ev = evaluate(inst, greedy.plan, schedule)
            assert ev.valid and ev.value == pytest.approx(greedy.objective, rel=1e-9)
            assert greedy.objective >= exact.objective
