"""``piper-ilp bench`` (piper_cli/bench_cmds.py over compare/bench/dp.py): profiles found
from --profiles / $PIPER_PROFILES / ../shared, CPU time and RSS per run from a fresh
worker, the size guard and the timeout, a reference planner run on the same instances,
and --json checked before any run."""

from __future__ import annotations

import json
import sys

import pytest
from builders import PATIENCE, process_alive, read_pid, wait_until
from typer.testing import CliRunner

from compare.bench.dp import (
    CONFIGS,
    compare_reference,
    find_profiles,
    parse_reference_output,
    row_line,
    run_config,
    run_reference,
    wide_instance,
)
from dp import count_ideals, solve_dp
from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.instance import save_instance

runner = CliRunner()
WIDE8 = next(c for c in CONFIGS if c.name == "wide8")


def _bench(*args, env=None):
    return runner.invoke(app, ["bench", *args], env=env)


def _bench_wide8_reference(reference, out):
    """Bench the wide8 row (greedy, one repeat) beside a reference command; the result and
    the row that --json wrote to ``out``."""
    r = _bench(
        "--only", "wide8", "--modes", "greedy", "--repeat", "1", "--reference", reference,
        "--json", str(out),
    )  # fmt: skip
    return r, json.loads(out.read_text())["rows"][0]


def test_configurations_of_the_paper_are_all_there():
    names = {c.name for c in CONFIGS}
    assert {
        "bert32-K64",
        "bert32-K512",
        "bert32-K2048",
        "bert64-K1024",
        "bert96-K2048",
        "resnet-K8",
        "resnet-K64",
        "gnmt-K8",
        "gnmt-K64",
        "gnmt-K256",
        "wide8",
        "wide12",
        "wide16",
    } <= names
    deep = [c for c in CONFIGS if c.layers]
    assert deep and all(c.chain_only for c in deep)  # the paper's deeper BERTs: chain edges only


def test_wide_family_counts():
    # a source, w independent branch layers and a sink: 2^w + 2 successor-closed sets
    for w in (3, 8):
        inst = wide_instance(w)
        assert len(inst.nodes) == w + 2 and len(inst.edges) == 2 * w
        assert count_ideals(inst) == 2**w + 2


def test_missing_profiles_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _bench("--only", "resnet-K8", "--profiles", str(empty))
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert str(empty) in r.output and "--profiles" in r.output and "PIPER_PROFILES" in r.output
    r = _bench("--only", "resnet-K8", env={"PIPER_PROFILES": str(empty)})
    assert r.exit_code == 2 and "$PIPER_PROFILES" in r.output and str(empty) in r.output
    # the last default: ../shared/piper-inputs beside the current directory
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(InputError, match="shared/piper-inputs"):
        find_profiles(None, ["resnet"], environ={}, cwd=work)
    (tmp_path / "shared" / "piper-inputs").mkdir(parents=True)
    (tmp_path / "shared" / "piper-inputs" / "resnet.json").write_text("{}")
    assert (
        find_profiles(None, ["resnet"], environ={}, cwd=work)
        == tmp_path / "shared" / "piper-inputs"
    )
    assert find_profiles(None, [], environ={}, cwd=work) is None  # the wide family needs none


def test_wide_row_has_cpu_and_rss(tmp_path):
    out = tmp_path / "bench.json"
    r = _bench("--only", "wide8", "--modes", "greedy", "--repeat", "1", "--json", str(out))
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 1
    row = rows[0]
    assert row["config"] == "wide8" and row["mode"] == "greedy" and row["status"] == "feasible"
    # the same instance solved here gives the same TPS as the worker's
    inst = wide_instance(8, K=WIDE8.K, M=WIDE8.M_gib * 2**30, N=WIDE8.N, B=WIDE8.B_gib * 2**30)
    assert row["tps"] == solve_dp(inst, knapsack="greedy").tps
    assert row["ideals"] == 2**8 + 2
    assert 0 < row["cpu_solve"] <= row["cpu_process"] and row["rss_mb"] > 10
    assert "wide8" in r.output and "feasible" in r.output
    # the compiled rule's one-time load is measured apart: in the worker's CPU, not the solve's
    worker = row.get("cpu_worker", row["cpu_process"])
    assert 0 < row["cpu_kernel_load"] and row["cpu_solve"] + row["cpu_kernel_load"] <= worker
    assert "one-time load of the compiled rule" in r.output


def test_exact_rows_do_not_load_the_compiled_rule():
    row = run_config(WIDE8, "exact", None, timeout=120, max_ideals=10**6)
    assert row["status"] == "optimal" and "cpu_kernel_load" not in row


def test_size_guard_refuses_and_timeout_kills():
    row = run_config(WIDE8, "exact", None, timeout=60, max_ideals=100)
    assert row["status"] == "refused" and "100" in row["message"] and "tps" not in row
    row = run_config(
        WIDE8, "exact", None, timeout=0.01, max_ideals=10**6
    )  # far less than a process start
    assert row["status"] == "timeout"
    r = _bench("--only", "wide16", "--modes", "greedy")  # 65,538 sets: above the default guard
    assert r.exit_code == 0 and "refused" in r.output


def test_reference_planner_runs_on_the_same_instance(tmp_path):
    # a stand-in reference: checks that the placeholders carry the instance and its
    # settings, then burns some CPU
    script = tmp_path / "ref.py"
    script.write_text(
        "import json, sys\nd = json.load(open(sys.argv[1]))\nassert d['maxDevices'] == "
        "int(sys.argv[2]) and d['mbsInBatch'] == int(sys.argv[4])\nassert "
        "float(d['maxMemoryPerDevice']) == float(sys.argv[3]) and float(d['bandwidth']) == "
        "float(sys.argv[5])\nassert len(d['nodes']) == 10\nsum(i * i for i in range(3_000_000))\n"
    )
    out = tmp_path / "bench.json"
    cmd = f"{sys.executable} {script} {{instance}} {{devices}} {{memory}} {{batch}} {{bandwidth}}"
    r, row = _bench_wide8_reference(cmd, out)
    assert r.exit_code == 0, r.output
    assert row["ref_status"] == "ok", row
    assert row["ref_cpu"] > 0.05 and row["ref_rss_mb"] > 1
    assert row["ratio"] == pytest.approx(row["cpu_process"] / row["ref_cpu"])
    # a failing reference is reported, not hidden
    bad = f"{sys.executable} -c 'import sys; sys.exit(3)' {{instance}}"
    r, row = _bench_wide8_reference(bad, out)
    assert (
        r.exit_code == 0
        and row["ref_status"] == "error"
        and "exit status 3" in row["ref_message"]
        and "ratio" not in row
    )


def test_reference_output_convention_is_parsed():
    text = "FAIL: nothing\nsearch-cpu-seconds: 0.25\n  tps: 0.5\nstages: 3\ntps: 0.125\n"
    assert parse_reference_output(text) == {
        "ref_search_cpu": 0.25,
        "ref_tps": 0.125,
    }  # the last line wins
    assert parse_reference_output("tps: inf\n") == {"ref_tps": float("inf"), "ref_no_plan": True}
    assert parse_reference_output("tps: nan\n")["ref_no_plan"] is True
    # not numbers, a negative or infinite CPU time, other keys: ignored
    assert (
        parse_reference_output(
            "tps: fast\nsearch-cpu-seconds: -1\nsearch-cpu-seconds: inf\ncpu: 3\n"
        )
        == {}
    )
    assert parse_reference_output("") == {}


def test_reference_ratios_and_tps_agreement():
    ours = {
        "config": "c",
        "mode": "greedy",
        "status": "feasible",
        "tps": 0.002,
        "cpu_solve": 0.5,
        "cpu_process": 2.0,
    }
    ref = {
        "ref_status": "ok",
        "ref_cpu": 8.0,
        "ref_search_cpu": 5.0,
        "ref_tps": 0.002 * (1 + 1e-12),
    }
    got = compare_reference(ours, ref)
    assert got["ratio"] == 2.0 / 8.0 and got["ratio_search"] == 0.5 / 5.0
    assert got["tps_agree"] is True  # within relative 1e-9
    assert "DIFF" not in row_line({**ours, **got}) and "same" in row_line({**ours, **got})
    # a disagreement is a finding: flagged on the row with both values and the direction
    got = compare_reference(ours, {**ref, "ref_tps": 0.0025})
    assert got["tps_agree"] is False and got["tps_rel_diff"] == pytest.approx(-0.2)
    line = row_line({**ours, **got})
    assert "DIFF" in line and "TPS DIFFERS" in line and "ours lower" in line and "0.0025" in line
    line = row_line({**ours, **compare_reference(ours, {**ref, "ref_tps": 0.0015})})
    assert "ours HIGHER" in line
    # no plan on both sides agrees; on one side only it does not
    infeasible = {**ours, "status": "infeasible", "tps": None}
    assert compare_reference(infeasible, {**ref, "ref_tps": float("inf")})["tps_agree"] is True
    got = compare_reference(infeasible, ref)
    assert got["tps_agree"] is False and "found no plan" in row_line({**infeasible, **got})
    # a reference that printed neither line: the whole-process ratio only
    got = compare_reference(ours, {"ref_status": "ok", "ref_cpu": 4.0})
    assert got["ratio"] == 0.5 and "ratio_search" not in got and got["tps_agree"] is None
    # our run without a TPS (timeout): nothing to compare
    assert compare_reference({**ours, "status": "timeout", "tps": None}, ref)["tps_agree"] is None
    # a failed reference gives no ratio
    got = compare_reference(ours, {"ref_status": "error", "ref_message": "exit status 1"})
    assert "ratio" not in got and "tps_agree" not in got


def _fake_reference(tmp_path, name, lines):
    script = tmp_path / name
    script.write_text(
        "import sys\n"
        + "".join(f"print({line!r})\n" for line in lines)
        + "sum(i * i for i in range(1_000_000))\n"
    )
    return f"{sys.executable} {script} {{instance}}"


def test_reference_output_in_the_bench(tmp_path):
    inst = wide_instance(8, K=WIDE8.K, M=WIDE8.M_gib * 2**30, N=WIDE8.N, B=WIDE8.B_gib * 2**30)
    tps = solve_dp(inst, knapsack="greedy").tps
    out = tmp_path / "bench.json"
    # a reference that agrees, and says how long its search took
    cmd = _fake_reference(
        tmp_path, "agree.py", ["some chatter", "search-cpu-seconds: 0.5", f"tps: {tps!r}"]
    )
    r, row = _bench_wide8_reference(cmd, out)
    assert r.exit_code == 0, r.output
    assert row["ref_status"] == "ok" and row["ref_search_cpu"] == 0.5 and row["ref_tps"] == tps
    assert row["ratio_search"] == pytest.approx(row["cpu_solve"] / 0.5)
    assert row["ratio"] == pytest.approx(row["cpu_process"] / row["ref_cpu"])
    assert row["tps_agree"] is True and "same" in r.output and "differs" not in r.output
    # a reference that disagrees: flagged on the row and summed up after the table
    cmd = _fake_reference(
        tmp_path, "differ.py", ["search-cpu-seconds: 0.5", f"tps: {tps * 1.01!r}"]
    )
    r, row = _bench_wide8_reference(cmd, out)
    assert r.exit_code == 0, r.output
    assert row["tps_agree"] is False and row["tps_rel_diff"] == pytest.approx(1 / 1.01 - 1)
    assert "DIFF" in r.output and "TPS DIFFERS" in r.output and "ours lower" in r.output
    assert "TPS differs from the reference on 1 row(s): wide8 greedy" in r.output
    # a reference that found no plan while we did
    cmd = _fake_reference(tmp_path, "noplan.py", ["tps: inf"])
    r, row = _bench_wide8_reference(cmd, out)
    assert row["ref_no_plan"] is True and row["ref_tps"] is None and row["tps_agree"] is False
    # a reference that prints neither line still gets the whole-process ratio
    cmd = _fake_reference(tmp_path, "quiet.py", ["done"])
    r, row = _bench_wide8_reference(cmd, out)
    assert r.exit_code == 0, r.output
    assert row["ref_status"] == "ok" and row["ratio"] == pytest.approx(
        row["cpu_process"] / row["ref_cpu"]
    )
    assert "ratio_search" not in row and "ref_tps" not in row and row["tps_agree"] is None
    # the reference's own peak RSS, not this process's (which Linux carries across exec)
    assert row["ref_rss_mb"] is None or row["ref_rss_mb"] < 40


def test_reference_killed_at_the_timeout_reports_the_cpu_it_used(tmp_path):
    script = tmp_path / "forever.py"
    script.write_text("print('tps: 1.0')\nwhile True:\n    pass\n")
    inst = wide_instance(3)
    path = tmp_path / "inst.json"
    save_instance(inst, path)
    ref = run_reference(f"{sys.executable} {script} {{instance}}", path, inst, timeout=1.0)
    assert ref["ref_status"] == "timeout" and "killed after 1 s" in ref["ref_message"]
    assert (
        ref["ref_cpu"] > 0 and "ref_tps" not in ref
    )  # what it printed before the kill is not a result
    got = compare_reference(
        {
            "config": "c",
            "mode": "exact",
            "status": "optimal",
            "tps": 1.0,
            "cpu_solve": 1.0,
            "cpu_process": 1.0,
        },
        ref,
    )
    assert "ratio" not in got and "ratio_search" not in got and "tps_agree" not in got


def _wait_dead(pid: int) -> bool:
    return wait_until(lambda: not process_alive(pid))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_reference_leaves_no_process_behind(tmp_path):
    """A reference run through a shell takes what it started with it: a background
    process it leaves when it exits, and its children when it is killed at the timeout."""
    inst = wide_instance(3)
    path = tmp_path / "inst.json"
    save_instance(inst, path)
    left = tmp_path / "left.pid"
    ref = run_reference(
        f"sh -c 'sleep 60 & echo $! > {left}; echo tps: 1.0' {{instance}}", path, inst, timeout=30.0
    )
    assert ref["ref_status"] == "ok"
    assert _wait_dead(read_pid(left))
    child = tmp_path / "child.pid"
    # under a heavy load the shell may not reach the sleep within a short time-out: then
    # nothing was left to test, and a longer one is tried
    for timeout in (1.0, 10.0, 100.0):
        ref = run_reference(
            f"sh -c 'sleep 300 & echo $! > {child}.tmp && mv {child}.tmp {child}; wait' "
            "{instance}",
            path,
            inst,
            timeout=timeout,
        )
        assert ref["ref_status"] == "timeout"
        if read_pid(child) is not None:
            break
    assert _wait_dead(read_pid(child))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupted_bench_kills_the_reference_and_its_children(tmp_path, sig):
    import os
    import signal
    import subprocess

    child = tmp_path / "child.pid"
    shell = tmp_path / "shell.pid"
    cmd = (
        f"sh -c 'echo $$ > {shell}.tmp && mv {shell}.tmp {shell}; sleep 300 & "
        f"echo $! > {child}.tmp && mv {child}.tmp {child}; wait' {{instance}}"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "piper_cli",
            "bench",
            "--only",
            "wide8",
            "--modes",
            "exact",
            "--repeat",
            "1",
            "--reference",
            cmd,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # every wait on a condition with a generous bound (PATIENCE: a load of 20 on 2 cores
    # made 5 s too short), and whatever is left is killed even when the test fails
    try:
        started = wait_until(lambda: read_pid(child) is not None or proc.poll() is not None)
        assert started and read_pid(child) is not None, proc.communicate()
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=PATIENCE)
        assert proc.returncode == 128 + getattr(signal, sig), err
        assert "interrupted" in err and "Traceback" not in err
        assert _wait_dead(read_pid(shell)) and _wait_dead(read_pid(child))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for path in (shell, child):
            pid = read_pid(path)
            if pid is not None and process_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_bad_usage_refused_before_any_run(tmp_path):
    for args, what in (
        (["--json", str(tmp_path / "no" / "b.json")], "does not exist"),
        (["--reference", "planner {instance} {k}"], "placeholder"),
        (["--reference", "planner"], "{instance}"),
        (["--modes", "fast"], "--modes"),
        (["--only", "bert7"], "unknown configuration"),
    ):
        r = _bench("--only", "wide8", *args) if "--only" not in args else _bench(*args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.count("\n") == 1 and what in r.output, (args, r.output)
        assert "wide8  " not in r.output  # no row was run


@pytest.mark.shared
def test_bert_row_matches_the_original_planner(shared_dir, tmp_path):
    out = tmp_path / "bench.json"
    env = {"PIPER_PROFILES": str(shared_dir / "piper-inputs")}
    r = _bench(
        "--only", "bert32-K512", "--modes", "greedy", "--repeat", "1", "--json", str(out), env=env
    )
    assert r.exit_code == 0, r.output
    row = json.loads(out.read_text())["rows"][0]
    assert row["status"] == "feasible" and row["ideals"] == 43
    assert row["tps"] == pytest.approx(
        0.00256112784601, rel=1e-9
    )  # the original planner's TPS (greedy)
    assert row["cpu_solve"] > 0 and row["rss_mb"] > 10 and row["stage_candidates"] > 0


# ---- the other suites: bench milp, bench modes ----


def test_bench_modes_prints_one_json_line_per_instance_and_mode():
    from compare.bench.modes import MODES
    from compare.crosscheck.methods import run_method

    r = _bench("modes", "--wide", "2", "--towers", "")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.output.splitlines()]
    assert [row["mode"] for row in rows] == [m.label for m in MODES]
    inst = wide_instance(2)
    for row, mode in zip(rows, MODES):
        assert row["instance"] == inst.source and row["status"] == "optimal"
        assert row["value"] == run_method(inst, "dp", mode=mode).value and row["labels"] > 0


def test_bench_milp_runs_the_backends_on_random_dags(tmp_path):
    from compare.builders.generators import FAMILIES, random_instance

    out = tmp_path / "milp.json"
    r = _bench(
        "milp", "--sizes", "4", "--seeds", "1", "--bert-k", "", "--time-limit", "60",
        "--backends", "cbc", "--json", str(out),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "| random n=4 | cbc | 2 | 1 |" in r.output  # threads 2 (the default), 1 run
    (rec,) = json.loads(out.read_text())["records"]
    inst = random_instance(FAMILIES[0], 4, 0, memory=0.6)
    best = solve_dp(inst)
    assert rec["status"] == best.status.value
    assert rec["tps"] == pytest.approx(best.tps, rel=1e-6)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--quick", "milp"], "--quick: an option of the DP bench, given before 'milp'"),
        (["milp", "--memory", "half"], "--memory: expected tight, loose or a fraction"),
        (["milp", "--backends", "gurobi"], "--backends: expected some of cpsat, cbc, scip"),
        (["milp", "--threads", "65"], "--threads: the solver threads must be a whole number"),
        (["milp", "--sizes", "4,x"], "--sizes: expected comma-separated whole numbers"),
    ],
)
def test_bench_suites_refuse_bad_options_before_any_run(args, says):
    r = _bench(*args)
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and says in r.output, r.output


def test_bench_small_pays_the_compiled_rule_s_load_apart():
    from compare.bench.small import run_small, small_instances, summary

    rows = run_small(small_instances(["chain"], [8], [0]), ["exact", "greedy"])
    by_mode = {r["mode"]: r for r in rows}
    assert by_mode["greedy"]["status"] in ("feasible", "infeasible")
    assert "cpu_kernel_load" not in by_mode["exact"] and by_mode["greedy"]["cpu_kernel_load"] > 0
    assert any("one-time load of the compiled rule" in line for line in summary(rows))
