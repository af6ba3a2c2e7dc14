"""Uniform degrees (``--uniform``, contract sec. 12): every stage has the same t and d, an
exact restriction in the DP, the MILP backends and brute, in verify and in campaigns."""

from __future__ import annotations

import itertools
import math

import pytest
from builders import json_lines, make_instance, option_dict
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import run_method
from compare.crosscheck.verify import verify_instance
from compare.experiments.campaign import read_results, replay_command, run_campaign
from compare.experiments.sweep import run_sweep, sweep_points
from dp.solver import solve_dp
from dp.uniform import pair_lower_bound
from piper_cli import app
from piper_ilp.errors import SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import save_instance
from piper_ilp.milp.model import build_model, model_size
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan, Stage, load_plan
from piper_ilp.solution import Restrictions, Status, divisors

runner = CliRunner()
UNIFORM = Restrictions(uniform=True)


def two_degrees():
    """Node 0 runs only with t = 2 (p = 1); node 1 with t = 1 (p = 1) or t = 2 (p = 10);
    K = 3, N = 2, no edge costs, no weights. Free: stages {0} at (t, d) = (2, 1) and {1} at
    (1, 1) (3 devices, sum d = 2), TPS 1. Uniform: t = 1 leaves node 0 without an option, two
    stages at t = 2 need 4 > K devices, and so does d = 2, so one stage {0, 1} at (2, 1):
    TPS 1 + 10 = 11. Cost of uniformity 11."""
    return make_instance(
        [
            (0, {"2": [option_dict(p=1.0, sbw={1: 0.0})]}),
            (
                1,
                {"1": [option_dict(p=1.0, sfw={0: 0.0})], "2": [option_dict(p=10.0, sfw={0: 0.0})]},
            ),
        ],
        edges=[(0, 1, 0.0)],
        K=3,
        N=2,
    )


def uniform_plans(inst):
    """Every plan whose stages share one (t, d), naively: all ordered set partitions of the
    nodes (contiguous or not: the evaluator refuses the others), all pairs, all options."""
    ids = inst.node_ids
    pairs = [(t, d) for t in inst.t_values for d in divisors(inst.N) if t * d <= inst.K]
    for k in range(1, len(ids) + 1):
        for labels in itertools.product(range(k), repeat=len(ids)):
            if set(labels) != set(range(k)):
                continue
            groups = [tuple(v for v, lab in zip(ids, labels) if lab == i) for i in range(k)]
            for t, d in pairs:
                choices = [[o.id for o in inst.node[v].options.get(t, ())] for v in ids]
                for pick in itertools.product(*choices):
                    chosen = dict(zip(ids, pick))
                    yield Plan(tuple(Stage(g, d, t, {v: chosen[v] for v in g}) for g in groups))


def uniform_oracle(inst, mode=DEFAULT_MODE) -> float:
    """The least value over every valid uniform plan (:func:`uniform_plans`), judged by the
    evaluator."""
    best = math.inf
    for plan in uniform_plans(inst):
        ev = evaluate(inst, plan, mode)
        if ev.valid:
            best = min(best, ev.value)
    return best


# ---- the restriction itself ----


def test_violation_names_the_first_stage_off_the_common_pair():
    inst = two_degrees()
    plan = Plan((Stage((0,), 1, 2, {0: "vanilla"}), Stage((1,), 1, 1, {1: "vanilla"})))
    assert evaluate(inst, plan).valid
    assert Restrictions().violation(inst, plan) is None
    why = UNIFORM.violation(inst, plan)
    assert why is not None and "stage 1" in why and "not uniform" in why
    assert UNIFORM.fixed(2, 1).violation(inst, plan).startswith("stage 1 has t = 1")


def test_uniform_pairs_and_fixed_degrees():
    inst = random_instance("chain", 4, seed=3, t_values=(1, 2))
    pairs = UNIFORM.uniform_pairs(inst)
    assert pairs and all(t * d <= inst.K and inst.N % d == 0 for t, d in pairs)
    t, d = pairs[-1]
    fixed = UNIFORM.fixed(t, d)
    assert not fixed.uniform and fixed.d_values(inst) == [d]
    assert fixed.apply(inst).t_values == [t]
    assert fixed.to_dict()["degrees"] == [t, d] and "uniform" not in fixed.to_dict()
    assert UNIFORM.to_dict()["uniform"] is True and "uniform" not in Restrictions().to_dict()


# ---- every exact method agrees with the naive enumeration ----


def test_hand_worked_cost_of_uniformity():
    inst = two_degrees()
    free = solve_dp(inst)
    assert free.status is Status.OPTIMAL and free.value == pytest.approx(1.0)
    for method in ("dp", "brute", "cpsat", "cbc", "scip"):
        sol = run_method(inst, method, UNIFORM)
        assert sol.status is Status.OPTIMAL, (method, sol.message)
        assert sol.value == pytest.approx(11.0, rel=1e-6), method
        assert len({(st.t, st.d) for st in sol.plan.stages}) == 1


@pytest.mark.parametrize("family", ["chain", "layered", "fork-join", "skip"])
@pytest.mark.parametrize("seed", range(4))
def test_dp_brute_and_milp_find_the_uniform_optimum(family, seed):
    inst = random_instance(family, 4, seed=seed, t_values=(1, 2))
    want = uniform_oracle(inst)
    for method in ("dp", "brute", "cpsat"):
        sol = run_method(inst, method, UNIFORM)
        if math.isinf(want):
            assert sol.status is Status.INFEASIBLE, method
            continue
        assert sol.status is Status.OPTIMAL, (method, sol.message)
        assert sol.value == pytest.approx(want, rel=1e-6), method
        assert UNIFORM.violation(inst, sol.plan) is None
    free = solve_dp(inst)
    if free.value is not None and not math.isinf(want):
        assert free.value <= want * (1 + 1e-9)


@pytest.mark.parametrize(
    "mode", [Mode(pipeline="graph"), Mode(objective="batch-time"), Mode(schedule="gpipe")]
)
def test_uniform_in_other_modes(mode):
    for seed in range(3):
        inst = random_instance("fork-join", 4, seed=seed, t_values=(1, 2), memory="loose")
        want = uniform_oracle(inst, mode)
        for method in ("dp", "brute", "cpsat"):
            sol = run_method(inst, method, UNIFORM, mode=mode)
            if math.isinf(want):
                assert sol.status is Status.INFEASIBLE, (method, seed)
            else:
                assert sol.value == pytest.approx(want, rel=1e-6), (method, seed, mode.label)


def test_the_dp_skips_pairs_that_cannot_win_and_says_how_many_it_ran():
    inst = random_instance("chain", 5, seed=1, t_values=(1, 2, 4), memory="loose")
    sol = solve_dp(inst, UNIFORM)
    u = sol.info["uniform"]
    assert u["pairs"] == len(UNIFORM.uniform_pairs(inst))
    assert u["runs"] + u["skipped"] == u["pairs"] and u["best"] == [
        sol.plan.stages[0].t,
        sol.plan.stages[0].d,
    ]
    assert sol.value == pytest.approx(solve_brute(inst, UNIFORM).value, rel=1e-12)


def test_the_milp_holds_one_configuration_for_every_slot():
    inst = random_instance("layered", 4, seed=2, t_values=(1, 2))
    free, uni = model_size(inst), model_size(inst, UNIFORM)
    nC, S = uni["configurations"], uni["slots"]
    assert uni["variables"] - free["variables"] == nC
    assert uni["constraints"] - free["constraints"] == 1 + S * nC
    m = build_model(inst, UNIFORM)
    assert len(m.vars) == uni["variables"] and len(m.rows) == uni["constraints"]
    assert {r.name for r in m.rows} >= {"uniform_one", f"uniform[0,{1},{1}]"}


def test_a_stopped_uniform_dp_never_claims_optimal():
    inst = random_instance("layered", 6, seed=0, t_values=(1, 2))
    sol = solve_dp(inst, UNIFORM, time_limit=1e-9)
    assert sol.status in (Status.FEASIBLE, Status.UNKNOWN)


def test_pipedream_is_no_answer_when_its_plan_is_not_uniform():
    # PipeDream plans without the restriction: a plan that breaks it is no answer, not a crash
    for seed in range(6):
        inst = random_instance("chain", 5, seed=seed, memory="loose")
        sol = run_method(inst, "pipedream", UNIFORM)
        if sol.plan is not None:
            assert UNIFORM.violation(inst, sol.plan) is None
        else:
            assert sol.status is Status.UNKNOWN


# ---- verify, campaigns, the CLI ----


def test_verify_matches_on_the_uniform_problem():
    v = verify_instance(two_degrees(), ("dp", "cpsat", "brute"), UNIFORM, greedy=False)
    assert v.verdict == "match" and v.optimum == pytest.approx(11.0)
    assert v.restrictions.get("uniform") is True


def test_cli_verify_reports_the_cost_of_uniformity(tmp_path):
    path = tmp_path / "two.json"
    save_instance(two_degrees(), path)
    r = runner.invoke(
        app, ["verify", str(path), "--methods", "dp,brute", "--no-greedy", "--uniform-cost"]
    )
    assert r.exit_code == 0, r.output
    assert "cost of uniformity: uniform optimum 11 / free optimum 1 = 11 " in r.output
    assert r.output.count("uniform (one t and d for every stage)") == 1
    r = runner.invoke(
        app,
        ["verify", str(path), "--methods", "dp,brute", "--no-greedy", "--uniform-cost", "--json"],
    )
    free, uni = json_lines(r.output)
    assert free["optimum"] == pytest.approx(1.0) and "uniformity" not in free
    assert uni["uniformity"]["ratio"] == pytest.approx(11.0)
    assert uni["uniformity"]["verdicts"] == ["match", "match"]
    r = runner.invoke(app, ["verify", str(path), "--uniform", "--uniform-cost"])
    assert r.exit_code == 2 and "without --uniform" in r.output


def test_cli_solve_uniform_writes_a_uniform_plan(tmp_path):
    path, out = tmp_path / "two.json", tmp_path / "plan.json"
    save_instance(two_degrees(), path)
    r = runner.invoke(app, ["solve", str(path), "--uniform", "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert rec["tps"] == pytest.approx(11.0) and rec["restrictions"]["uniform"] is True
    plan = load_plan(out)
    assert plan.metadata["restrictions"]["uniform"] is True and len(plan.stages) == 1
    r = runner.invoke(app, ["solve", str(path), "--uniform"])
    # pairs (1, 1), (1, 2), (2, 1) (t d <= K = 3, d | N = 2); t = 1 leaves node 0 without an
    # option, an infinite bound: those two are skipped once (2, 1) has a plan
    want = "uniform: 3 (t, d) pairs, 1 DP runs (0 infeasible), 2 skipped by the bound"
    assert f"{want}, best (t, d) = (2, 1)" in r.output


def test_a_uniform_campaign_checks_the_uniform_problem(tmp_path):
    out = tmp_path / "camp"
    summary = run_campaign(
        out, 6, 3, nodes=(3, 4), methods=("dp", "cpsat", "brute"), workers=1, progress=False,
        uniform=True,
    )  # fmt: skip
    assert summary["parameters"]["uniform"] is True
    assert not summary["mismatches"] and summary["verdicts"].get("match", 0) >= 1
    recs = read_results(out)
    assert len(recs) == 6 and all(r["uniform"] is True for r in recs)
    line = replay_command(["dp"], {}, DEFAULT_MODE, time_limit=None, uniform=True)
    assert line.endswith("--uniform")


def test_the_sweep_has_a_uniform_variant(tmp_path):
    # seed 0: the free optimum at K = 4 is not uniform (6.95 < 7.88), so the variant matters
    inst = random_instance("chain", 5, seed=0, t_values=(1, 2), memory="loose")
    points = sweep_points([4, 8], [inst.M], [inst.N], [inst.B], ["all", "uniform"])
    rows = {(r["K"], r["variant"]): r for r in run_sweep(inst, points, tmp_path / "sw")}
    for K in (4, 8):
        ref = solve_brute(inst.with_settings(K=K), UNIFORM)
        row = rows[K, "uniform"]
        assert row["tps"] == pytest.approx(ref.value, rel=1e-12)
        assert (
            len(
                {
                    (s["tensorParallelDegree"], s["dataParallelDegree"])
                    for s in row["plan"]["stages"]
                }
            )
            == 1
        )
        assert row["tps"] >= rows[K, "all"]["tps"] * (1 - 1e-12)
    assert rows[4, "uniform"]["tps"] > rows[4, "all"]["tps"] * 1.1


def test_the_ladder_climbs_the_uniform_problem(tmp_path):
    path = tmp_path / "chain.json"
    # seed 7: uniform 8.84 against 6.55 free, so a ladder that forgot --uniform fails
    inst = random_instance("chain", 5, seed=7, t_values=(1, 2), memory="loose")
    save_instance(inst, path)
    r = runner.invoke(app, ["ladder", str(path), "--uniform", "--max-nodes", "4", "--json"])
    assert r.exit_code == 0, r.output
    (lad,) = json_lines(r.output)
    assert lad["rungs"] and all(g["verdict"] == "match" for g in lad["rungs"])
    stages = lad["full"]["plan"]["stages"]
    assert len({(s["tensorParallelDegree"], s["dataParallelDegree"]) for s in stages}) == 1
    assert lad["full"]["tps"] == pytest.approx(solve_brute(inst, UNIFORM).value, rel=1e-12)


def test_the_pair_bound_counts_stages_side_by_side_under_graph_pipelining():
    # N = 2 microbatches, K = 8 devices, d = 1: sequential plans have at most N / d = 2
    # stages, graph-pipelined ones up to K / (t d) = 8 (branches run side by side, h <= N)
    inst = random_instance("fork-join", 6, seed=1, t_values=(1,), K=8, N=2)
    work = math.fsum(min(o.p for o in n.options[1]) for n in inst.nodes)
    seq = pair_lower_bound(inst, UNIFORM, 1, 1)
    graph = pair_lower_bound(inst, UNIFORM, 1, 1, Mode(pipeline="graph"))
    assert seq == pytest.approx(work / 2) and graph == pytest.approx(work / 6)
    sol = run_method(inst, "dp", UNIFORM, mode=Mode(pipeline="graph"))
    assert sol.value == pytest.approx(solve_brute(inst, UNIFORM, mode=Mode(pipeline="graph")).value)


def test_uniform_progress_lines_on_stderr_and_the_time_limit(tmp_path):
    # --uniform runs the DP once per (t, d) pair: thousands of pairs at a large K and N, so
    # --progress says how far it got (on stderr, a terminal or not); --time-limit stops it
    # between pairs (here before the first) and the last line says so
    from builders import cli as run_cli

    path = tmp_path / "small.json"
    inst = random_instance("chain", 5, seed=2, t_values=(1, 2), K=8, N=4)
    save_instance(inst, path)
    n = len(Restrictions(uniform=True).uniform_pairs(inst))
    r = run_cli("solve", path, "--uniform", "--progress")
    lines = [line for line in r.stderr.splitlines() if line.startswith("uniform: ")]
    assert lines[0] == f"uniform: {n} (t, d) pairs to try, by their lower bound", r.stderr
    assert lines[-1].startswith(f"uniform: {n} of {n} pairs done ("), lines
    assert "stopped" not in lines[-1] and "best TPS " in lines[-1], lines
    assert "uniform: " not in run_cli("solve", path, "--uniform", "--no-progress").stderr
    r = run_cli("solve", path, "--uniform", "--progress", "--time-limit", "0", code=3)
    lines = [line for line in r.stderr.splitlines() if line.startswith("uniform: ")]
    assert lines[-1].startswith(f"uniform: 0 of {n} pairs done (0 skipped by the bound), no "), (
        lines
    )
    assert lines[-1].endswith("(stopped by the time limit)") and "optimal" not in r.stdout, r.stdout


def test_a_stopped_uniform_dp_names_the_limit_it_was_given():
    # the message named the last run's share of the limit (what it had left), or nothing
    # when the best plan came from a run that finished: it names the limit the caller gave
    inst = random_instance("layered", 6, seed=0, t_values=(1, 2))
    n = len(UNIFORM.uniform_pairs(inst))
    sol = solve_dp(inst, UNIFORM, time_limit=1e-9)
    assert sol.status is Status.UNKNOWN
    assert (
        sol.message
        == f"time limit of 1e-09 s reached with 0 of {n} (t, d) pairs tried: no plan yet"
    )
    free = solve_dp(inst, UNIFORM)
    assert free.status is Status.OPTIMAL and "time limit" not in (free.message or "")


def test_more_pairs_than_the_limit_are_refused_unless_forced(tmp_path):
    # K = 2^20 and N = 963,761,198,400 (6,720 divisors): 11,011 (t, d) pairs, each a DP run
    # unless its bound rules it out; refused in one line naming the count, --force runs
    # them (here stopped by a time limit of 0: no pair tried, never optimal)
    from builders import cli as run_cli

    inst = random_instance("chain", 4, seed=2, t_values=(1, 2, 4, 8), K=2**20, N=963761198400)
    n = len(UNIFORM.uniform_pairs(inst))
    assert n == 11011
    path = tmp_path / "wide.json"
    save_instance(inst, path)
    r = run_cli("solve", path, "--uniform", code=2)
    assert f"--uniform tries {n:,} (t, d) pairs" in r.output and "--force" in r.output, r.output
    r = run_cli("solve", path, "--uniform", "--force", "--time-limit", 0, code=3)
    assert f"time limit of 0 s reached with 0 of {n:,} (t, d) pairs tried" in r.output, r.output
    # the limit is a parameter: a small instance under a lower one
    small = random_instance("chain", 3, seed=1, t_values=(1, 2), K=4, N=4)
    with pytest.raises(SizeLimitError, match=r"above the limit of 2,"):
        solve_dp(small, UNIFORM, max_pairs=2)
    forced = solve_dp(small, UNIFORM, max_pairs=2, force=True)
    assert forced.value == pytest.approx(solve_dp(small, UNIFORM).value, rel=1e-12)
