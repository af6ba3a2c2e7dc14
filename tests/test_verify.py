"""``piper-ilp verify`` and its verdict rules (compare/crosscheck/verify.py).

Most cases inject fake methods built on the exhaustive oracle, so that each rule of the
verdict (match, consistent, single-proof, inconclusive, error, mismatch) is exercised on
purpose; the real solvers run on inputs/small.json (the README's main command)."""

from __future__ import annotations

import json

import pytest
from builders import cli, option_dict
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.verify import parse_methods, plan_difference, verify_instance
from piper_cli import app
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict
from piper_ilp.mode import Mode
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status

opt = option_dict


# one node, p = 4, w = 1, K = N = 2, B = 1: optimum 3 with d = 2 (d = 1 gives 4)
ONE = instance_from_dict(
    {
        "maxDevices": 2,
        "maxMemoryPerDevice": 100.0,
        "bandwidth": 1.0,
        "mbsInBatch": 2,
        "nodes": [{"id": 9, "TMPCs": {"1": [opt(p=4.0, w=1.0, a=1.0)]}}],
        "edges": [],
    },
    "one",
)
D1 = Plan((Stage((9,), 1, 1, {9: "vanilla"}),))  # TPS 4
D2 = Plan((Stage((9,), 2, 1, {9: "vanilla"}),))  # TPS 3


def fake(method, status, plan=None, objective=None, bound=None, info=None):
    def solve(instance, restrictions, time_limit, threads):
        return Solution(
            method=method,
            status=status,
            plan=plan,
            objective=objective,
            bound=bound,
            info=dict(info or {}),
        )

    return solve


def brute_as(name):
    def solve(instance, restrictions, time_limit, threads):
        s = solve_brute(instance, restrictions)
        s.method = name
        return s

    return solve


def run(solvers, methods=None, instance=ONE, greedy=False):
    return verify_instance(instance, methods or tuple(solvers), solvers=solvers, greedy=greedy)


def test_match_when_all_prove_the_same_optimum():
    v = run({"dp": fake("dp", Status.OPTIMAL, D2, 3.0), "brute": brute_as("brute")})
    assert v.verdict == "match" and v.exit_code == 0
    assert v.optimum == pytest.approx(3.0) and not v.problems


def test_different_proven_optima_are_a_mismatch_with_the_first_difference():
    v = run({"dp": fake("dp", Status.OPTIMAL, D1, 4.0), "brute": brute_as("brute")})
    assert v.verdict == "mismatch" and v.exit_code == 1
    text = " ".join(v.problems)
    assert "proven optima differ: dp 4, brute 3" in text
    assert (
        "first difference at stage 0: dp has nodes [9:vanilla] d=1 t=1, brute has nodes "
        "[9:vanilla] d=2 t=1" in text
    )
    assert set(v.involved) == {"dp", "brute"}


def test_invalid_plan_is_a_mismatch_naming_the_rule():
    bad = Plan((Stage((9,), 3, 1, {9: "vanilla"}),))  # d = 3 does not divide N = 2 (rule 3)
    v = run({"dp": fake("dp", Status.OPTIMAL, bad, 4.0 / 3)})
    assert v.verdict == "mismatch"
    assert "dp: its plan is invalid: rule 3" in v.problems[0]


def test_value_that_is_not_the_plans_tps_is_a_mismatch():
    v = run({"dp": fake("dp", Status.OPTIMAL, D2, 2.9)})
    assert v.verdict == "mismatch" and "is not its plan's TPS 3" in v.problems[0]


def test_stated_accuracy_is_honoured():
    # a MILP's value may be off its plan's TPS by 1e-6 relative (contract sec. 7) plus the
    # absolute error it states; the DP's only by 1e-9
    ok = fake("cpsat", Status.OPTIMAL, D2, 3.0 + 2.5e-6, info={"scaling_error": 2.5e-6})
    assert run({"cpsat": ok, "brute": brute_as("brute")}).verdict == "match"
    # a stated error above 1e-6 of the value is no proof (the optimum's digits are lost)
    vague = fake("cpsat", Status.OPTIMAL, D2, 3.0, info={"scaling_error": 1e-5})
    v = run({"cpsat": vague, "brute": brute_as("brute")})
    assert (
        v.verdict == "single-proof"
        and not v.problems
        and v.results["cpsat"].status == "backend-error"
    )
    assert (
        "the error it states (1e-05) is more than 1e-06 of its plan's TPS 3: not a proof"
        in v.backend_errors[0]
    )
    within_rel = fake("cbc", Status.OPTIMAL, D2, 3.0 + 2e-6)  # 6.7e-7 relative
    assert run({"cbc": within_rel, "brute": brute_as("brute")}).verdict == "match"
    # beyond its accuracy the backend's claim is void: shown as its error, never a mismatch
    # blamed on the others, and the oracle's proof stands alone
    too_far = fake("cpsat", Status.OPTIMAL, D2, 3.0 + 5e-6)  # 1.7e-6 relative
    v = run({"cpsat": too_far, "brute": brute_as("brute")})
    assert v.verdict == "single-proof" and not v.problems and v.proofs == ["brute"]
    assert v.results["cpsat"].status == "backend-error"
    assert "cpsat: its objective 3.000005 is not its plan's TPS 3" in v.backend_errors[0]
    # the DP is held to 1e-9
    v = run({"dp": fake("dp", Status.OPTIMAL, D2, 3.0 + 5e-8), "brute": brute_as("brute")})
    assert v.verdict == "mismatch" and "dp: its objective" in v.problems[0]


def test_milp_stopped_early_is_consistent_when_bound_and_plan_bracket_the_optimum():
    early = fake("cpsat", Status.FEASIBLE, D1, 4.0, bound=2.5)  # 2.5 <= 3 <= 4
    v = run({"dp": brute_as("dp"), "brute": brute_as("brute"), "cpsat": early})
    assert v.verdict == "consistent" and v.exit_code == 0 and v.optimum == pytest.approx(3.0)
    # the DP's proof alone, beside a MILP that proved nothing: not a match
    v = run({"dp": brute_as("dp"), "cpsat": early})
    assert v.verdict == "single-proof" and v.exit_code == 4
    # a bound above the optimum is a false proof
    lying = fake("cpsat", Status.FEASIBLE, D1, 4.0, bound=3.5)
    v = run({"dp": brute_as("dp"), "cpsat": lying})
    assert v.verdict == "mismatch" and any(
        "lower bound 3.5 is above dp's valid plan (TPS 3)" in p for p in v.problems
    )
    # a heuristic plan better than a proven optimum refutes the proof
    v = run(
        {
            "dp": fake("dp", Status.OPTIMAL, D1, 4.0),
            "cpsat": fake("cpsat", Status.FEASIBLE, D2, 3.0, bound=2.0),
        }
    )
    assert v.verdict == "mismatch" and any("beats dp's proven optimum 4" in p for p in v.problems)


def test_nothing_proven_is_inconclusive():
    v = run(
        {
            "cpsat": fake("cpsat", Status.UNKNOWN, bound=1.0),
            "cbc": fake("cbc", Status.FEASIBLE, D1, 4.0, bound=2.0),
        }
    )
    assert v.verdict == "inconclusive" and v.exit_code == 3 and v.optimum is None


def test_infeasible_next_to_a_valid_plan_is_a_mismatch():
    v = run({"dp": fake("dp", Status.INFEASIBLE), "brute": brute_as("brute")})
    assert (
        v.verdict == "mismatch"
        and "dp proved infeasibility, but brute found a valid plan (TPS 3)" in v.problems[0]
    )
    # both infeasible: a match, reported as such
    none_fit = ONE.with_settings(M=0.5)
    v = run({"dp": fake("dp", Status.INFEASIBLE), "brute": brute_as("brute")}, instance=none_fit)
    assert v.verdict == "match" and v.infeasible and v.optimum is None


def test_crash_is_an_error_and_size_limit_is_skipped():
    def crash(instance, restrictions, time_limit, threads):
        raise ZeroDivisionError("boom")

    def too_big(instance, restrictions, time_limit, threads):
        raise SizeLimitError("too big for this method")

    v = run({"dp": crash, "brute": brute_as("brute")})
    assert v.verdict == "error" and v.exit_code == 1
    assert "dp: crashed: ZeroDivisionError: boom" in v.errors[0] and not v.problems
    v = run({"dp": brute_as("dp"), "brute": brute_as("brute"), "cpsat": too_big})
    assert v.verdict == "match" and v.results["cpsat"].status == "skipped"
    v = run({"cpsat": too_big})
    assert v.verdict == "inconclusive"


def test_restrictions_are_enforced_on_every_plan():
    v = verify_instance(
        ONE,
        ("dp",),
        Restrictions(max_d=1),
        solvers={"dp": fake("dp", Status.OPTIMAL, D2, 3.0)},
        greedy=False,
    )
    assert v.verdict == "mismatch" and "breaks the restrictions" in " ".join(v.problems)


def test_greedy_gap_is_reported():
    v = run(
        {
            "dp": brute_as("dp"),
            "brute": brute_as("brute"),
            "greedy": fake("dp-greedy", Status.FEASIBLE, D1, 4.0),
        },
        methods=("dp", "brute"),
        greedy=True,
    )
    assert v.verdict == "match" and v.proofs == ["dp", "brute"]
    assert v.greedy_tps == pytest.approx(4.0) and v.greedy_gap == pytest.approx(1.0 / 3.0)
    # a greedy plan below the optimum would be a bug in one of them
    v = run(
        {
            "dp": fake("dp", Status.OPTIMAL, D1, 4.0),
            "greedy": fake("dp-greedy", Status.FEASIBLE, D2, 3.0),
        },
        methods=("dp",),
        greedy=True,
    )
    assert v.verdict == "mismatch"


def test_parse_methods():
    assert parse_methods("dp, cbc") == ("dp", "cbc")
    for bad in ("", "dp,gurobi", "dp,dp"):
        with pytest.raises(InputError):
            parse_methods(bad)


def test_plan_difference_text():
    text = plan_difference(ONE, ("a", D1), ("b", D2))
    assert text.startswith(
        "first difference at stage 0: a has nodes [9:vanilla] d=1 t=1, b has nodes [9:vanilla] d=2 "
        "t=1"
    )
    assert "a's bottleneck is stage 0 (TPS 4" in text and "b's bottleneck is stage 0 (TPS 3" in text


# ---- the real solvers ----


def test_real_methods_agree_on_random_instances():
    # a handful of tiny instances through the DP, both MILP backends and the oracle
    for i, family in enumerate(("chain", "skip", "layered", "series-parallel", "fork-join")):
        inst = random_instance(family, 4, 100 + i, integer=bool(i % 2))
        v = verify_instance(inst, time_limit=30)
        assert v.verdict == "match", v.problems


def test_cli_verify_small_prints_match(inputs_dir):
    result = CliRunner().invoke(app, ["verify", str(inputs_dir / "small.json")])
    assert result.exit_code == 0, result.output
    assert "match: optimum TPS" in result.output
    assert "proved by 4 independent lineages: dp, path, milp (cpsat, cbc), brute" in result.output
    assert "greedy rule (Piper's option choice)" in result.output


def test_cli_verify_json_and_exit_codes(inputs_dir, tmp_path):
    result = CliRunner().invoke(
        app, ["verify", str(inputs_dir / "small.json"), "--methods", "dp,brute", "--json"]
    )
    assert result.exit_code == 0
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert rec["verdict"] == "match" and set(rec["methods"]) == {"dp", "brute", "greedy"}
    assert rec["methods"]["dp"]["tps"] == pytest.approx(rec["optimum"])
    # bad input: exit 2 and one line, no traceback
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = CliRunner().invoke(app, ["verify", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = CliRunner().invoke(
        app, ["verify", str(inputs_dir / "small.json"), "--methods", "dp,gurobi"]
    )
    assert result.exit_code == 2
    # a restriction flag is passed through: every plan must obey it, and it still matches
    result = CliRunner().invoke(
        app,
        ["verify", str(inputs_dir / "small.json"), "--methods", "dp,brute", "--no-tensor-parallel"],
    )
    assert result.exit_code == 0 and "match" in result.output


def test_cli_verify_brute_is_skipped_on_big_graphs(tmp_path):
    path = tmp_path / "big.json"
    chain = ["random", "--family", "chain", "--seed", 1, "--memory-kind", "loose"]
    cli(*chain, "--nodes", 12, "-o", path)
    result = CliRunner().invoke(app, ["verify", str(path), "--methods", "dp,brute", "--json"])
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert (
        rec["methods"]["brute"]["status"] == "skipped"
        and "at most 8 nodes" in rec["methods"]["brute"]["skipped"]
    )
    # the DP's proof alone is not a match
    assert rec["verdict"] == "single-proof" and rec["proofs"] == ["dp"] and result.exit_code == 4
    # --force runs brute past its size guard (a 9-node chain has only 2^8 partitions)
    path9 = tmp_path / "nine.json"
    cli(*chain, "--nodes", 9, "--t-values", 1, "-K", 2, "-N", 2, "-o", path9)
    result = CliRunner().invoke(app, ["verify", str(path9), "--methods", "dp,brute", "--json"])
    assert (
        json.loads(result.output.strip().splitlines()[-1])["methods"]["brute"]["status"]
        == "skipped"
    )
    result = CliRunner().invoke(
        app, ["verify", str(path9), "--methods", "dp,brute", "--force", "--json"]
    )
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert (
        rec["methods"]["brute"]["status"] == "optimal"
        and rec["verdict"] == "match"
        and result.exit_code == 0
    )


def test_cli_random_is_deterministic_and_valid(tmp_path):
    runner = CliRunner()
    a = runner.invoke(
        app, ["random", "--family", "fork-join", "--nodes", "7", "--seed", "5", "--integer"]
    )
    b = runner.invoke(
        app, ["random", "--family", "fork-join", "--nodes", "7", "--seed", "5", "--integer"]
    )
    assert a.exit_code == 0 and a.output == b.output
    data = json.loads(a.output)
    inst = instance_from_dict(data)
    assert len(inst.nodes) == 7 and inst.B == 1
    for args in (
        ["--family", "tree"],
        ["--options", "3-1"],
        ["--t-values", "0"],
        ["--memory-kind", "lots"],
    ):
        result = runner.invoke(app, ["random", *args])
        assert result.exit_code == 2, args


def test_mismatch_output_shows_problems_and_plans(capsys):
    from piper_cli.compare_cmds import print_verdict

    v = run({"dp": fake("dp", Status.OPTIMAL, D1, 4.0), "brute": brute_as("brute")})
    print_verdict(ONE, v)
    out = capsys.readouterr().out
    assert "mismatch: " in out and "proven optima differ: dp 4, brute 3" in out
    assert "dp's plan (status optimal)" in out and "brute's plan (status optimal)" in out


COUNTEREXAMPLES = sorted(
    (
        __import__("pathlib").Path(__file__).resolve().parents[1] / "compare" / "counterexamples"
    ).glob("*.json")
)


@pytest.mark.parametrize("path", COUNTEREXAMPLES, ids=[p.stem for p in COUNTEREXAMPLES])
def test_campaign_counterexamples_now_match(path):
    # found by the 2,000-instance campaign (a CP-SAT memory-scaling and a CBC wrong proof);
    # replayed exactly as `piper-ilp verify` does, with every method
    result = CliRunner().invoke(app, ["verify", str(path), "--json"])
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert rec["verdict"] == "match", rec["problems"]
    assert result.exit_code == 0


# ---- proofs, lineages and the statuses that are never proofs ----


def raises(exc):
    def solve(instance, restrictions, time_limit, threads):
        raise exc

    return solve


def test_one_lineage_alone_is_a_single_proof():
    # two MILP backends solve the same formulation: they are one lineage, not two proofs
    v = run(
        {
            "cpsat": fake("cpsat", Status.OPTIMAL, D2, 3.0, bound=3.0),
            "cbc": fake("cbc", Status.OPTIMAL, D2, 3.0, bound=3.0),
        }
    )
    assert v.verdict == "single-proof" and v.exit_code == 4
    assert (
        v.proofs == ["cpsat", "cbc"] and v.lineages == ["milp"] and v.optimum == pytest.approx(3.0)
    )
    # a MILP and the DP are independent
    v = run({"dp": brute_as("dp"), "cpsat": fake("cpsat", Status.OPTIMAL, D2, 3.0, bound=3.0)})
    assert v.verdict == "match" and v.lineages == ["dp", "milp"]
    # infeasibility proved by one method only
    v = run({"brute": brute_as("brute")}, instance=ONE.with_settings(M=0.5))
    assert v.verdict == "single-proof" and v.infeasible


def test_the_match_line_and_the_json_name_lineages_with_their_methods(capsys):
    from piper_cli.compare_cmds import print_verdict

    optimal = fake("cpsat", Status.OPTIMAL, D2, 3.0, bound=3.0)
    v = run({"dp": brute_as("dp"), "cpsat": optimal, "cbc": optimal})
    assert v.verdict == "match" and v.proofs == ["dp", "cpsat", "cbc"]
    # the two backends are one lineage: two independent lineages, not three proofs
    assert v.to_dict()["lineages"] == {"dp": ["dp"], "milp": ["cpsat", "cbc"]}
    print_verdict(ONE, v)
    out = capsys.readouterr().out
    assert "match: optimum TPS 3 s per sample, proved by 2 independent lineages: dp, milp " in out
    assert "(cpsat, cbc)" in out


def test_heuristic_optimal_is_never_a_proof():
    v = run({"greedy": fake("greedy", Status.OPTIMAL, D2, 3.0), "brute": brute_as("brute")})
    assert v.verdict == "single-proof" and v.proofs == ["brute"]


def test_out_of_range_is_never_a_proof_and_never_a_problem():
    oor = fake("cpsat", Status.OUT_OF_RANGE)
    v = run({"dp": brute_as("dp"), "brute": brute_as("brute"), "cpsat": oor})
    assert (
        v.verdict == "consistent" and v.results["cpsat"].status == "out-of-range" and not v.problems
    )
    v = run({"dp": brute_as("dp"), "cpsat": oor})
    assert v.verdict == "single-proof"
    # even with an "optimal"-looking value it proves nothing
    v = run(
        {
            "cpsat": fake("cpsat", Status.OUT_OF_RANGE, D1, 4.0, bound=4.0),
            "cbc": fake("cbc", Status.UNKNOWN),
        }
    )
    assert v.verdict == "inconclusive"


def test_backend_error_is_shown_not_blamed_on_the_dp():
    # a backend whose claim failed its own certification: its bound would contradict the DP
    broken = fake(
        "cpsat", Status.BACKEND_ERROR, None, None, bound=3.5, info={"why": "bound above its plan"}
    )
    v = run({"dp": brute_as("dp"), "brute": brute_as("brute"), "cpsat": broken})
    assert v.verdict == "consistent" and not v.problems and v.involved == []
    assert v.results["cpsat"].status == "backend-error" and v.backend_errors
    # an internal error raised inside a MILP backend is its own failure too
    v = run(
        {
            "dp": brute_as("dp"),
            "brute": brute_as("brute"),
            "cbc": raises(InternalError("cbc: plan rejected")),
        }
    )
    assert (
        v.verdict == "consistent"
        and "cbc: internal error: cbc: plan rejected" in v.backend_errors[0]
    )
    # but a valid plan is a fact, whoever found it: one below the DP's "optimum" refutes it
    v = run(
        {
            "dp": fake("dp", Status.OPTIMAL, D1, 4.0),
            "cpsat": fake("cpsat", Status.BACKEND_ERROR, D2, 3.0),
        }
    )
    assert (
        v.verdict == "mismatch"
        and "cpsat's plan (TPS 3) beats dp's proven optimum 4" in v.problems[0]
    )


@pytest.mark.parametrize("name", ["dp", "brute", "greedy"])
def test_internal_error_of_our_own_methods_is_an_error(name):
    solvers = {
        "dp": brute_as("dp"),
        "brute": brute_as("brute"),
        name: raises(InternalError("plan rejected by the evaluator")),
    }
    v = run(solvers, methods=("dp", "brute"), greedy=name == "greedy")
    assert v.verdict == "error" and v.exit_code == 1
    assert (
        v.errors == [f"{name}: internal error: plan rejected by the evaluator"]
        and not v.backend_errors
    )


def test_milp_proof_that_disagrees_is_a_mismatch():
    # a backend that certifies its own answer (value = its plan's TPS, bound = value) yet
    # claims a worse optimum than the oracle: that is a contradiction between proofs
    v = run(
        {"cpsat": fake("cpsat", Status.OPTIMAL, D1, 4.0, bound=4.0), "brute": brute_as("brute")}
    )
    assert v.verdict == "mismatch" and any(
        "proven optima differ: cpsat 4, brute 3" in p for p in v.problems
    )


def test_optimal_claim_needs_its_bound():
    v = run({"dp": fake("dp", Status.OPTIMAL, D2, 3.0, bound=2.0), "brute": brute_as("brute")})
    assert (
        v.verdict == "mismatch"
        and "dp: it claims optimal, but its bound 2 is below its plan's TPS 3" in v.problems
    )


def test_progress_names_each_method_before_it_runs():
    seen = []
    verify_instance(
        ONE,
        ("dp", "brute"),
        solvers={"dp": brute_as("dp"), "brute": brute_as("brute")},
        greedy=True,
        progress=seen.append,
    )
    assert seen == ["dp", "brute", "greedy"]


def test_unknown_injected_method_is_refused():
    with pytest.raises(InputError, match="unknown method 'gurobi'"):
        verify_instance(ONE, ("gurobi",), solvers={"gurobi": brute_as("gurobi")})


def test_real_methods_single_and_forced(tmp_path):
    inst = random_instance("chain", 3, 1, memory="loose")
    v = verify_instance(inst, ("brute",), greedy=False)
    assert v.verdict == "single-proof" and v.proofs == ["brute"]
    # force reaches the registry's methods: brute on 9 nodes runs instead of being skipped
    nine = random_instance("chain", 9, 1, memory="loose", t_values=(1,), K=2, N=2)
    assert verify_instance(nine, ("dp", "brute"), greedy=False).results["brute"].status == "skipped"
    v = verify_instance(nine, ("dp", "brute"), greedy=False, force=True)
    assert v.verdict == "match" and v.proofs == ["dp", "brute"]


# ---- the human output ----


def wide_verdict():
    """A verdict with the longest statuses, values and times the table can show."""
    long_tps = 1.2345678901234e-05
    plan_tps = fake("dp", Status.OPTIMAL, D2, 3.0)
    v = run(
        {
            "dp": plan_tps,
            "brute": brute_as("brute"),
            "cpsat": fake("cpsat", Status.BACKEND_ERROR, D1, 4.0, bound=long_tps),
            "cbc": fake("cbc", Status.OUT_OF_RANGE, bound=long_tps * 1e-300),
            "greedy": fake("greedy", Status.FEASIBLE, D1, 4.0),
        },
        methods=("dp", "brute", "cpsat", "cbc"),
        greedy=True,
    )
    for r in v.results.values():
        r.seconds = 3725.0  # "62 min 5 s"
    return v


def test_verdict_table_fits_80_columns():
    from rich.console import Console

    from piper_cli.compare_cmds import verdict_table

    console = Console(width=300, record=True, highlight=False)
    console.print(verdict_table(wide_verdict()))
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert (
        "backend-error" in text
        and "out-of-range" in text
        and "62 min 5 s" in text
        and "1.23456789e-305" in text
    )


def test_human_seconds():
    from piper_cli.compare_cmds import human_seconds

    assert [human_seconds(x) for x in (0.0, 0.00042, 0.0123, 0.9994, 3.21, 59.9, 245.0)] == [
        "0 ms",
        "0.42 ms",
        "12 ms",
        "999 ms",
        "3.21 s",
        "59.9 s",
        "4 min 5 s",
    ]


def test_cli_exit_status_for_several_instances(inputs_dir, tmp_path):
    # one instance single-proof (4) and one bad (2): the first of 1, 2, 3, 4 that occurs wins
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    small = str(inputs_dir / "small.json")
    result = CliRunner().invoke(app, ["verify", small, "--methods", "brute", "--no-greedy"])
    assert result.exit_code == 4 and "single-proof: optimum TPS" in result.output
    result = CliRunner().invoke(
        app, ["verify", small, str(bad), "--methods", "brute", "--no-greedy"]
    )
    assert result.exit_code == 2
    assert "exit" in CliRunner().invoke(app, ["verify", "--help"]).output.lower()
    assert "4 single-proof" in " ".join(
        CliRunner().invoke(app, ["verify", "--help"]).output.split()
    )


def test_cli_verify_detail_shows_every_plan(inputs_dir):
    result = CliRunner().invoke(
        app, ["verify", str(inputs_dir / "small.json"), "--methods", "dp,brute", "--detail"]
    )
    assert result.exit_code == 0, result.output
    assert (
        "dp's plan (status optimal)" in result.output
        and "brute's plan (status optimal)" in result.output
    )
    assert "sum d" in result.output


# --------------------------------------------------------------------------------------
# --milp-hint: the DP's plan as the MILP backends' warm start and cutoff
# --------------------------------------------------------------------------------------


def _exclude_plan(monkeypatch, plan):
    """Make the MILP unable to hold ``plan`` (a no-good row on its assignment): a model
    bug of the kind verify must catch."""
    import piper_ilp.milp.solve as milp_solve

    orig = milp_solve.formulate

    def formulate(st, strong=False):
        form = orig(st, strong)
        terms = []
        for i, stg in enumerate(plan.stages):
            for v in stg.nodes:
                ids = [o.id for o in st.opts[(v, stg.t)]]
                terms.append((form.z[v, i, stg.t, ids.index(stg.options[v])], 1.0))
        form.model.row("nogood", terms, "<=", len(terms) - 1)
        return form

    monkeypatch.setattr(milp_solve, "formulate", formulate)


def test_milp_hint_is_recorded_and_keeps_the_match():
    inst = random_instance("skip", 4, 1)
    v = verify_instance(inst, ("cpsat", "dp", "brute"), greedy=False, milp_hint=True)
    assert v.verdict == "match", v.problems
    assert list(v.results)[0] == "dp"  # run first, for its plan
    d = v.to_dict()
    assert d["milp_hint"] is True
    assert d["methods"]["cpsat"]["hint"].startswith("dp's plan (TPS")
    assert "hint" not in d["methods"]["dp"] and "hint" not in d["methods"]["brute"]
    assert d["methods"]["cpsat"]["info"]["hint"] == "used"
    plain = verify_instance(inst, ("dp", "cpsat"), greedy=False).to_dict()
    assert plain["milp_hint"] is False and "hint" not in plain["methods"]["cpsat"]


def test_milp_hint_goes_only_to_the_methods_that_take_one():
    # review38: the hint went to every method of kind milp, and columns (which takes none)
    # then failed with "option hint does not apply to method columns": verdict error, exit 1
    from piper_ilp.mode import Mode

    inst = random_instance("fork-join", 5, 3)
    v = verify_instance(
        inst, ("dp", "cpsat", "columns"), greedy=False, milp_hint=True, mode=Mode("graph")
    )
    assert v.verdict == "match", v.to_dict()
    d = v.to_dict()["methods"]
    assert d["cpsat"]["hint"].startswith("dp's plan") and "hint" not in d["columns"]


def test_milp_hint_never_hides_a_model_that_cannot_hold_the_dps_plan(monkeypatch):
    # without a hint the broken MILP proves a worse "optimum" (a mismatch); with the DP's
    # plan as hint and cutoff it finds nothing under the cutoff, a certification failure,
    # which under --milp-hint must still be a mismatch naming dp and the backend
    inst = random_instance("skip", 4, 1)
    from dp import solve_dp

    ref = solve_dp(inst)
    _exclude_plan(monkeypatch, ref.plan)
    plain = verify_instance(inst, ("dp", "cpsat"), greedy=False)
    assert plain.verdict == "mismatch" and "proven optima differ" in plain.problems[0]
    hinted = verify_instance(inst, ("dp", "cpsat"), greedy=False, milp_hint=True)
    assert hinted.verdict == "mismatch", hinted.to_dict()
    assert set(hinted.involved) == {"dp", "cpsat"}
    assert any("given dp's plan" in p and "failed certification" in p for p in hinted.problems)


def test_cli_verify_milp_hint_json(tmp_path):
    from piper_ilp.instance import save_instance

    path = tmp_path / "i.json"
    save_instance(random_instance("chain", 3, 2), path)
    res = CliRunner().invoke(
        app, ["verify", str(path), "--methods", "dp,cpsat", "--milp-hint", "--json", "--no-greedy"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output.strip().splitlines()[-1])
    assert d["milp_hint"] is True and d["methods"]["cpsat"]["hint"]


@pytest.mark.parametrize(
    "methods,lacks",
    [
        (
            "dp,brute",
            "none of them (path, cpsat, cbc, scip) that solves sequential/throughput/1f1b",
        ),
        (
            "dp,columns",
            "none of them (path, cpsat, cbc, scip) that solves sequential/throughput/1f1b",
        ),
        ("cpsat,brute", "no dp"),
    ],
)
def test_cli_verify_milp_hint_without_dp_and_a_milp_backend_is_refused(tmp_path, methods, lacks):
    """--milp-hint with no MILP method (or no DP to give the hint) was accepted and ignored."""
    from piper_ilp.instance import save_instance

    path = tmp_path / "i.json"
    save_instance(random_instance("chain", 3, 2), path)
    res = CliRunner().invoke(app, ["verify", str(path), "--methods", methods, "--milp-hint"])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        "piper-ilp: error: --milp-hint gives the DP's plan to the MILP methods that take a "
        f"hint, but --methods ({methods}) has {lacks}; add it or leave --milp-hint out"
    ]
    with pytest.raises(InputError, match="--milp-hint"):
        verify_instance(random_instance("chain", 3, 2), methods.split(","), milp_hint=True)


def test_milp_hint_refused_for_a_taker_that_refuses_says_why():
    # path takes a hint but not --uniform: the refusal named only the mode, which path solves
    inst = random_instance("chain", 3, 2)
    with pytest.raises(InputError) as err:
        verify_instance(inst, ("dp", "path"), Restrictions(uniform=True), milp_hint=True)
    text = str(err.value)
    assert "that solves sequential/throughput/1f1b (path: " in text
    assert "uniform" in text.split("(path: ")[1]


def test_a_milp_optimum_within_its_accuracy_still_refutes_the_dps_tighter_claim():
    # d = 2 costs 2 + w = 4 - 4e-7: 1e-7 relative below d = 1's 4. The MILP's optimum agrees
    # with the DP's within the MILP's 1e-6, but its plan is a fact 1e-7 below the DP's
    # "optimal", which claims 1e-9: that is a mismatch, not a match
    close_pair = instance_from_dict(
        {
            "maxDevices": 2,
            "maxMemoryPerDevice": 100.0,
            "bandwidth": 1.0,
            "mbsInBatch": 2,
            "nodes": [{"id": 9, "TMPCs": {"1": [opt(p=4.0, w=2.0 - 4e-7, a=1.0)]}}],
            "edges": [],
        },
        "close",
    )
    better = evaluate(close_pair, D2).tps
    assert 0 < (4.0 - better) / 4.0 < 1e-6
    v = run(
        {
            "dp": fake("dp", Status.OPTIMAL, D1, 4.0),
            "cpsat": fake("cpsat", Status.OPTIMAL, D2, better),
        },
        instance=close_pair,
    )
    assert v.verdict == "mismatch" and set(v.involved) == {"dp", "cpsat"}
    assert any(
        p.startswith("cpsat's plan (TPS 3.9999996) beats dp's proven optimum 4") for p in v.problems
    )
    # the same two plans, the DP's the better one: within the MILP's accuracy, a match
    v = run(
        {
            "dp": fake("dp", Status.OPTIMAL, D2, better),
            "cpsat": fake("cpsat", Status.OPTIMAL, D1, 4.0, bound=better),
        },
        instance=close_pair,
    )
    assert v.verdict == "match" and not v.problems


def _raises(exc):
    def solve(instance, restrictions, time_limit, threads):
        raise exc

    return solve


@pytest.mark.parametrize("name", ["columns", "path"])
@pytest.mark.parametrize("how", ["internal error", "bound above its own plan"])
def test_a_failure_of_our_own_formulations_is_an_error(name, how):
    # hunt38 F2: path and columns check their own plans and proofs (CP-SAT only solves their
    # models), so their failure is the project's, an error or a mismatch (exit 1), not a
    # third-party backend's error hidden behind "consistent" (exit 0)
    wrong = (
        _raises(InternalError(f"{name}: the model's plan is not valid"))
        if how == "internal error"
        else fake(name, Status.OPTIMAL, D2, 3.0, bound=3.5)
    )
    solvers = {"dp": brute_as("dp"), "brute": brute_as("brute"), name: wrong}
    v = verify_instance(ONE, ("dp", "brute", name), solvers=solvers, greedy=False)
    assert v.verdict in ("error", "mismatch") and v.exit_code == 1, (v.verdict, v.backend_errors)


def test_default_methods_depend_on_the_pipelining():
    """verify's defaults come from the registry (Method.default_for): in graph pipelining
    ``columns`` takes the place of ``path``, which solves only sequential modes; the
    sequential defaults are the list they always were."""
    from compare.crosscheck.methods import METHODS, default_methods
    from piper_ilp.mode import ALL_MODES, Mode

    assert default_methods() == ("dp", "path", "cpsat", "cbc", "brute")
    for mode in ALL_MODES:
        expected = ["dp", "path" if mode.pipeline == "sequential" else "columns"]
        assert default_methods(mode) == (*expected, "cpsat", "cbc", "brute"), mode.label
        assert all(METHODS[n].handles(mode) for n in default_methods(mode))
    assert default_methods(Mode("graph", in_flight="schedule"))[1] == "columns"
    seen = []  # without methods, verify_instance runs the mode's defaults, in their order
    fake = {name: brute_as(name) for name in ("dp", "path", "columns", "cpsat", "cbc", "brute")}
    for mode in (Mode(), Mode("graph", "batch-time")):
        seen.clear()
        v = verify_instance(ONE, solvers=fake, greedy=False, mode=mode, progress=seen.append)
        assert seen == list(default_methods(mode)) == list(v.results)


def test_cli_verify_graph_pipelining_runs_columns_by_default(tmp_path):
    path = tmp_path / "chain.json"
    cli(
        "random",
        "--family",
        "chain",
        "--nodes",
        3,
        "--seed",
        0,
        "--memory-kind",
        "loose",
        "-o",
        path,
    )
    result = CliRunner().invoke(app, ["verify", str(path), "--pipeline", "graph", "--json"])
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert list(rec["methods"]) == ["dp", "columns", "cpsat", "cbc", "brute"], result.output
    assert rec["methods"]["columns"]["status"] == "optimal" and rec["verdict"] == "match"
    result = CliRunner().invoke(app, ["verify", str(path), "--json"])  # sequential: as before
    rec = json.loads(result.output.strip().splitlines()[-1])
    assert list(rec["methods"]) == ["dp", "path", "cpsat", "cbc", "brute", "greedy"]


def test_each_result_holds_its_methods_registry_entry():
    """A MethodResult reads kind, lineage, accuracy and third_party from its Method (one
    place for those facts), not from copies that could drift."""
    from compare.crosscheck.methods import METHODS

    v = verify_instance(ONE, ("dp", "cpsat", "brute"), solvers={"cpsat": brute_as("cpsat")})
    for name, r in v.results.items():
        assert r.entry is METHODS[name] and r.method == name
        assert (r.kind, r.lineage, r.rtol, r.third_party) == (
            METHODS[name].kind,
            METHODS[name].lineage,
            METHODS[name].rtol,
            METHODS[name].third_party,
        )
    assert v.results["cpsat"].third_party and not v.results["dp"].third_party


@pytest.mark.parametrize(
    "mode,restrictions",
    [(Mode("graph"), Restrictions()), (Mode(), Restrictions(uniform=True))],
    ids=["graph", "uniform"],
)
def test_milp_hint_whose_only_taker_refuses_the_mode_is_refused(mode, restrictions):
    """hunt39 N1: path is the only listed method that takes a hint, but it refuses graph
    pipelining and uniform degrees before reading the instance, so `dp,path --milp-hint` ran
    with path skipped and the hint given to nobody (dp's single proof, milp_hint false)."""
    inst = random_instance("fork-join", 5, 7)
    with pytest.raises(InputError, match="none of them .* that solves"):
        verify_instance(inst, ("dp", "path"), restrictions, greedy=False, milp_hint=True, mode=mode)


def test_a_results_method_attributes_are_its_registry_entrys():
    from compare.crosscheck.methods import METHODS
    from compare.crosscheck.verify import MethodResult

    for name, m in METHODS.items():
        r = MethodResult(m)
        assert (r.method, r.kind, r.lineage, r.rtol, r.third_party) == (
            name,
            m.kind,
            m.lineage,
            m.rtol,
            m.third_party,
        )
    with pytest.raises(AttributeError):
        r.lineage = "another"  # never copied, so never changed apart from the entry
