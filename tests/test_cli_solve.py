"""``piper-ilp solve``: output shapes, statuses, exit codes, several files, -o."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compare.brute import solve_brute
from piper_cli import app
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.plan import load_plan
from piper_ilp.solution import Restrictions

runner = CliRunner()


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def small(inputs_dir):
    path = inputs_dir / "small.json"
    return path, load_instance(path)


def test_solve_json_matches_the_oracle_and_writes_the_plan(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(path), "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    oracle = solve_brute(inst)
    assert rec["status"] == "optimal" and rec["method"] == "dp"
    assert rec["tps"] == pytest.approx(oracle.tps, rel=1e-9)
    for key in ("instance", "plan", "devices", "sum_d", "seconds", "settings"):
        assert key in rec
    plan = load_plan(out)
    ev = evaluate(inst, plan)
    assert ev.valid and ev.tps == pytest.approx(rec["tps"], rel=1e-12)
    assert rec["devices"] == plan.devices <= inst.K


@pytest.mark.parametrize(
    "flags,restr",
    [
        (["--no-recompute"], Restrictions.from_flags(no_recompute=True)),
        (["--no-tensor-parallel"], Restrictions.from_flags(no_tensor_parallel=True)),
        (["--no-data-parallel"], Restrictions.from_flags(no_data_parallel=True)),
        (["--max-d", "2", "--exclude-option", "vanilla"], Restrictions(max_d=2, exclude_options=frozenset({"vanilla"}))),
    ],
)
def test_ablations_reach_the_restricted_optimum(small, flags, restr):
    path, inst = small
    r = runner.invoke(app, ["solve", str(path), "--json", *flags])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    oracle = solve_brute(inst, restr)
    assert rec["status"] == oracle.status.value
    if oracle.tps is None:
        assert rec["tps"] is None and rec["plan"] is None
    else:
        assert rec["tps"] == pytest.approx(oracle.tps, rel=1e-9)
        for st in rec["plan"]["stages"]:
            if restr.max_d:
                assert st["dataParallelDegree"] <= restr.max_d
            if restr.max_t:
                assert st["tensorParallelDegree"] <= restr.max_t
            assert not set(st["TMPCids"].values()) & restr.exclude_options


def test_infeasible_is_a_normal_answer(small):
    path, _ = small
    r = runner.invoke(app, ["solve", str(path), "--memory", "1MB"])
    assert r.exit_code == 0, r.output
    assert "infeasible" in r.output


def test_several_files_one_bad(tmp_path, small):
    path, _ = small
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = runner.invoke(app, ["solve", str(path), str(bad), str(path), "--json", "--knapsack", "greedy"])
    assert r.exit_code == 2
    recs = json_lines(r.output)
    assert [("error" in x) for x in recs] == [False, True, False]
    assert recs[0]["status"] == "feasible"  # greedy mode proves nothing
    assert recs[1]["instance"] == str(bad) and "invalid JSON" in recs[1]["error"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--method", "simplex"], "--method"),
        (["--method", "cbc", "--knapsack", "greedy"], "greedy"),
        (["--devices", "-3"], "--devices"),
    ],
)
def test_usage_errors_exit_2(small, args, needle):
    path, _ = small
    r = runner.invoke(app, ["solve", str(path), *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output and r.output.count("\n") == 1


def test_human_output_has_a_stage_table(small):
    path, _ = small
    r = runner.invoke(app, ["solve", str(path)])
    assert r.exit_code == 0, r.output
    assert "optimal: TPS" in r.output and "cut-edge" in r.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["solve"], "Missing argument"),
        (["solve", "inputs/small.json", "--bogus"], "No such option: --bogus"),
        (["solve", "inputs/small.json", "--time-limit", "-1"], "'--time-limit'"),
        (["frobnicate"], "No such command"),
    ],
)
def test_usage_errors_are_one_line_in_a_real_process(args, needle):
    import subprocess
    import sys

    from conftest import REPO

    proc = subprocess.run([sys.executable, "-m", "piper_cli", *args], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "usage error" in lines[0] and needle in lines[0], proc.stderr
