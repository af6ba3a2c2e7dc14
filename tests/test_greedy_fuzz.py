"""``piper-ilp greedy-fuzz`` (compare/bench/greedy_fuzz.py): greedy mode against a reference
planner, here a stand-in script whose answers are known (the original C++ planner is not
needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from compare.bench.greedy_fuzz import check_fuzz_command, compare_one, fuzz_greedy
from compare.builders.generators import random_instance
from piper_ilp.errors import InputError

FAKE = """
import json, sys
from dp.solver import solve_dp
from piper_ilp.instance import load_instance
from piper_ilp.plan import plan_to_dict
path, plan_path, how = sys.argv[1:4]
if how == "fail":
    print("FAIL: something", flush=True)
    sys.exit(1)
if how == "silent":
    sys.exit(0)
inst = load_instance(path)
sol = solve_dp(inst, knapsack="greedy")
tps = sol.tps if sol.plan is not None else float("inf")
if how == "off":
    tps *= 1.01
print("search-cpu-seconds: 0.001")
print(f"tps: {tps!r}")
if sol.plan is not None and how in ("same", "badplan", "worseplan"):
    plan = plan_to_dict(sol.plan)
    if how == "badplan":  # a node left out: rule 1 of sec. 2
        plan["stages"][0]["nodes"] = plan["stages"][0]["nodes"][1:]
    if how == "worseplan":  # everything in one stage with d = t = 1: another value
        ids = [v for st in plan["stages"] for v in st["nodes"]]
        opts = {str(v): o for st in plan["stages"] for v, o in st["TMPCids"].items()}
        plan = {"stages": [{"nodes": ids, "dataParallelDegree": 1, "tensorParallelDegree": 1,
                            "TMPCids": opts}]}
    with open(plan_path, "w") as f:
        json.dump(plan, f)
"""


@pytest.fixture()
def fake(tmp_path) -> str:
    script = tmp_path / "fake_planner.py"
    script.write_text(FAKE)
    return f"{sys.executable} {script} {{instance}} {{plan}}"


def _inst(seed=3):
    # a chain of 4 from the ties family with two stages' worth of devices: a plan exists
    return random_instance("ties", 4, seed, K=2, N=2, memory="loose")


def test_outcomes(fake, tmp_path):
    inst = _inst()
    got = {how: compare_one(inst, f"{fake} {how}", tmp_path) for how in ("same", "off", "fail")}
    assert got["same"]["outcome"] == "same"
    assert got["same"]["ref_plan_value"] == pytest.approx(got["same"]["tps"], rel=1e-12)
    assert got["off"]["outcome"] == "tps-differs"
    assert got["fail"]["outcome"] == "reference-failed"
    assert "exit status 1: FAIL: something" in got["fail"]["message"]
    silent = compare_one(inst, f"{fake} silent", tmp_path)
    assert silent["outcome"] == "reference-failed" and "tps:" in silent["message"]
    bad = compare_one(inst, f"{fake} badplan", tmp_path)
    assert bad["outcome"] == "reference-plan-rejected" and bad["tps_agree"] is True


def test_plan_value_differs(fake, tmp_path):
    # the same TPS printed, but the plan written is another one (one stage, d = 1)
    inst = _inst()
    got = compare_one(inst, f"{fake} worseplan", tmp_path)
    assert got["outcome"] == "plan-value-differs", got


def test_fuzz_counts_and_refusals(fake):
    summary = fuzz_greedy(f"{fake} same", count=6, seed=10, nodes=(2, 4))
    assert summary["counts"]["same"] == 6 and summary["differences"] == []
    assert summary["plans_compared"] >= 1
    with pytest.raises(InputError, match="unknown family"):
        fuzz_greedy(f"{fake} same", family="nope", count=1)
    with pytest.raises(InputError, match="no {instance} placeholder"):
        check_fuzz_command("planner {plan}")
    with pytest.raises(InputError, match="bad placeholder"):
        check_fuzz_command("planner {instance} {oops}")


def test_cli_exit_status_and_json(fake, tmp_path):
    out = tmp_path / "fuzz.json"
    base = [sys.executable, "-m", "piper_cli", "greedy-fuzz", "--count", "3", "--nodes", "3-4"]
    same = subprocess.run(
        [*base, "--reference", f"{fake} same", "--json", str(out)], capture_output=True, text=True
    )
    assert same.returncode == 0, same.stderr
    assert "same 3, tps-differs 0" in same.stdout
    data = json.loads(out.read_text())
    assert data["counts"]["same"] == 3 and len(data["records"]) == 3
    off = subprocess.run([*base, "--reference", f"{fake} off"], capture_output=True, text=True)
    assert off.returncode == 1
    assert "tps-differs" in off.stdout
    bad = subprocess.run([*base, "--reference", "planner"], capture_output=True, text=True)
    assert bad.returncode == 2 and "no {instance} placeholder" in bad.stderr


def test_no_files_left_behind(fake):
    def ours():
        return {p for p in Path(tempfile.gettempdir()).iterdir() if "piper-greedy-fuzz" in p.name}

    before = ours()
    fuzz_greedy(f"{fake} same", count=2, seed=0)
    assert ours() == before
