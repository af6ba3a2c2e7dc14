"""Issue 30 point 7: the commands agree on units and words. The cost model's times in
seconds everywhere, sizes in human units beside raw bytes, "1 stage", an external
planner's rejected plan shown as invalid, pipedream's -K/-M/-B, brute's advice."""

from __future__ import annotations

import json
import re

from conftest import INPUTS
from typer.testing import CliRunner

from piper_cli import app

runner = CliRunner()
SMALL = str(INPUTS / "small.json")


def _seconds(text: str, what: str) -> float:
    """The number after ``what`` in ``text``, which must be followed by the unit s."""
    m = re.search(re.escape(what) + r" ([0-9.e+-]+) (\w+)", text)
    assert m is not None, (what, text)
    assert m.group(2) == "s", f"{what} printed in {m.group(2)!r}, not s: {m.group(0)}"
    return float(m.group(1))


def test_solve_evaluate_verify_and_simulate_print_the_tps_in_seconds(tmp_path):
    plan = tmp_path / "p.json"
    solve = runner.invoke(app, ["solve", SMALL, "-o", str(plan)])
    evaluate = runner.invoke(app, ["evaluate", SMALL, str(plan)])
    verify = runner.invoke(app, ["verify", SMALL, "--methods", "dp,brute"])
    simulate = runner.invoke(app, ["simulate", SMALL, str(plan)])
    for r in (solve, evaluate, verify, simulate):
        assert r.exit_code == 0, r.output
    exact = json.loads(runner.invoke(app, ["solve", SMALL, "--json"]).output)["tps"]
    assert abs(_seconds(solve.output, "TPS") - exact) <= 1e-6 * exact
    assert _seconds(evaluate.output, "TPS") == float(f"{exact:.12g}")
    assert _seconds(verify.output, "optimum TPS") == float(f"{exact:.12g}")
    assert _seconds(simulate.output, "max TPS") == float(f"{exact:.6g}")
    # the stage tables: every time column in s (solve's and evaluate's are one function)
    header = [line for line in solve.output.splitlines() if line.startswith("stage")][0]
    assert header.split()[-4:] == ["s", "s", "s", "s"], header
    for r in (solve, evaluate, verify, simulate):  # no model time in another unit
        assert not re.search(r"(TPS|batch time|period|bound) [0-9.e+-]+ (ms|us)\b", r.output)


def test_one_stage_is_singular(tmp_path):
    plan = tmp_path / "p.json"
    r = runner.invoke(app, ["solve", SMALL, "-K", "1", "-M", "1GiB", "-o", str(plan)])
    assert r.exit_code == 0 and ", 1 stage, 1 devices" in r.output, r.output
    r = runner.invoke(app, ["evaluate", SMALL, str(plan)])
    assert r.exit_code == 0 and ": 1 stage, 1 devices" in r.output, r.output


def test_sizes_carry_human_units_beside_raw_bytes(tmp_path):
    r = runner.invoke(app, ["solve", SMALL, "-M", "2KiB"])
    assert "memory M = 2048.0 bytes (2 KiB) per device" in r.output, r.output
    plan = tmp_path / "p.json"
    assert runner.invoke(app, ["solve", SMALL, "-o", str(plan)]).exit_code == 0
    r = runner.invoke(app, ["evaluate", SMALL, str(plan), "-M", "100MiB"])
    assert r.exit_code == 1, r.output
    assert re.search(
        r"memory [0-9.e+]+ bytes \([0-9.]+ MiB\) with y = \d+ exceeds M = "
        r"1\.04858e\+08 bytes \(100 MiB\)",
        r.output,
    ), r.output


def test_an_external_plan_the_evaluator_rejects_shows_as_invalid(tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text(
        '#!/bin/sh\necho \'{"stages": [{"nodes": [0, 1, 2, 3, 4, 5, 6], '
        '"dataParallelDegree": 64, "tensorParallelDegree": 1, "TMPCids": {}}]}\'\n'
    )
    script.chmod(0o755)
    r = runner.invoke(app, ["verify", SMALL, "--methods", "dp", "--external", f"bad={script}"])
    rows = {
        line.split()[0]: line.split()[1]
        for line in r.output.splitlines()
        if line[:4] in ("dp  ", "bad ")
    }
    assert rows == {"dp": "optimal", "bad": "invalid"}, r.output
    assert (
        "bad's plan (status invalid)" in r.output and "bad's plan (status feasible)" not in r.output
    )
    r = runner.invoke(
        app, ["verify", SMALL, "--methods", "dp", "--external", f"bad={script}", "--json"]
    )
    rec = json.loads(r.output.splitlines()[0])
    assert rec["methods"]["bad"]["status"] == "invalid", rec["methods"]["bad"]


def test_pipedream_takes_the_short_flags_of_every_other_command(tmp_path):
    src = tmp_path / "graph.txt"
    src.write_text(
        "node1 -- Input -- forward_compute_time=0.0, backward_compute_time=0.0, "
        "activation_size=7.0, parameter_size=0.0\n"
        "node2 -- Linear(a) -- forward_compute_time=600.0, backward_compute_time=400.0, "
        "activation_size=10.0, parameter_size=0.0\n"
        "node3 -- Linear(c) -- forward_compute_time=1000.0, backward_compute_time=3000.0, "
        "activation_size=30.0, parameter_size=2e9\n"
        "\tnode1 -- node2\n\tnode2 -- node3\n"
    )
    new = runner.invoke(
        app, ["pipedream", str(src), "-K", "2", "-B", "1GB/s", "-M", "16GB", "--json"]
    )
    old = runner.invoke(
        app, ["pipedream", str(src), "-n", "2", "-b", "1GB/s", "-s", "16GB", "--json"]
    )
    assert new.exit_code == 0 and old.exit_code == 0, (new.output, old.output)
    drop = ("cpu_seconds",)
    a, b = ({k: v for k, v in json.loads(r.output).items() if k not in drop} for r in (new, old))
    assert a == b and a["machines_used"] == 2


def test_brute_says_which_methods_to_use_without_naming_verifys_flag(tmp_path):
    # a random 30-node chain is beyond exhaustive search
    from compare.builders.generators import random_instance
    from piper_ilp.instance import save_instance

    path = tmp_path / "chain.json"
    save_instance(random_instance("chain", 30, seed=1, memory="loose", K=4, N=4), path)
    r = runner.invoke(app, ["solve", str(path), "--method", "brute"])
    assert r.exit_code == 2, r.output
    assert "--methods" not in r.output
    # the registry's other exact methods for the mode (a fixed "dp, cpsat or cbc" left out
    # scip, path and columns)
    from compare.crosscheck.methods import METHODS

    line = " ".join(r.output.split())
    named = line.rsplit("; use ", 1)[1].rstrip(".").replace(" or ", ", ").split(", ")
    # (never compiled: the DP again, for at most 15 nodes)
    assert set(named) == {n for n, m in METHODS.items() if m.all_modes} - {
        "brute",
        "columns",
        "compiled",
    }


def test_a_row_skipped_for_size_shows_no_time(tmp_path):
    # the size guards solve nothing; a skipped row showed the seconds of the guard and of
    # loading the MILP's modules (4.12 s wall for cpsat on bert32a100 K=64 under load)
    from compare.builders.generators import random_instance
    from piper_ilp.instance import save_instance

    path = tmp_path / "chain.json"
    save_instance(random_instance("chain", 30, seed=1, memory="loose", K=4, N=4), path)
    r = runner.invoke(app, ["verify", str(path), "--methods", "dp,brute", "--no-greedy"])
    rows = {line.split()[0]: line.split() for line in r.output.splitlines() if line.strip()}
    assert rows["brute"][1:] == ["skipped", "-", "-", "-", "-"], r.output
    assert rows["dp"][1] == "optimal" and rows["dp"][-1] in ("ms", "s"), r.output
