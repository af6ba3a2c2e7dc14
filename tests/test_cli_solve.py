"""``piper-ilp solve``: output shapes, statuses, exit codes, several files, -o."""

from __future__ import annotations

import json
import math

import pytest
from builders import json_lines
from typer.testing import CliRunner

from compare.crosscheck.brute import solve_brute
from piper_cli import app
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.plan import load_plan
from piper_ilp.solution import Restrictions

runner = CliRunner()


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
        (
            ["--max-d", "2", "--exclude-option", "vanilla"],
            Restrictions(max_d=2, exclude_options=frozenset({"vanilla"})),
        ),
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
    r = runner.invoke(
        app, ["solve", str(path), str(bad), str(path), "--json", "--knapsack", "greedy"]
    )
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

    proc = subprocess.run(
        [sys.executable, "-m", "piper_cli", *args], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "usage error" in lines[0] and needle in lines[0], proc.stderr


# ---- options that do not apply to the method, unknown option ids ----


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--method", "dp", "--write-model", "model.lp"], "--write-model"),
        (["--method", "brute", "--max-variables", "10"], "--max-variables"),
        (["--method", "dp", "--threads", "2"], "--threads"),
        (["--method", "brute", "--threads", "2"], "--threads"),
        (["--method", "dp", "--hint-from-dp"], "--hint-from-dp"),
        (["--method", "brute", "--hint-from-dp"], "--hint-from-dp"),
        (["--method", "dp", "--max-variables", "10"], "--max-variables"),
        (["--method", "cpsat", "--knapsack", "greedy"], "--knapsack greedy"),
        (["--method", "brute", "--knapsack", "greedy"], "--knapsack greedy"),
        (["--method", "cbc", "--max-ideals", "10"], "--max-ideals"),
    ],
)
def test_an_option_that_does_not_apply_is_an_error(tmp_path, small, args, needle):
    path, _ = small
    r = runner.invoke(app, ["solve", str(path), "--json", *args])
    assert r.exit_code == 2, r.output
    lines = r.output.splitlines()
    assert len(lines) == 1 and needle in lines[0] and "does not apply" in lines[0], r.output
    assert not (tmp_path / "model.lp").exists()


def test_an_unknown_exclude_option_id_is_an_error_naming_the_ids(small):
    path, inst = small
    r = runner.invoke(app, ["solve", str(path), "--exclude-option", "vanila"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.splitlines()
    assert "'vanila'" in line
    ids = {opt.id for node in inst.nodes for opts in node.options.values() for opt in opts}
    assert ids and all(repr(i) in line for i in ids)


# ---- output files ----


def test_an_unwritable_output_is_refused_before_solving(tmp_path, small):
    path, _ = small
    r = runner.invoke(
        app, ["solve", str(path), "--json", "-o", str(tmp_path / "no-such-folder" / "plan.json")]
    )
    assert r.exit_code == 2
    lines = r.output.splitlines()
    assert len(lines) == 1 and "no-such-folder" in lines[0]
    assert json_lines(r.output) == []  # nothing was solved


def test_an_unwritable_model_path_is_refused_before_solving(tmp_path, small):
    path, _ = small
    r = runner.invoke(
        app, ["solve", str(path), "--method", "cpsat", "--json", "--write-model", str(tmp_path)]
    )
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert str(tmp_path) in line and "folder" in line


def test_the_plan_file_carries_what_it_was_solved_for(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    r = runner.invoke(
        app,
        ["solve", str(path), "-K", "16", "--max-d", "2", "--knapsack", "greedy", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    meta = json.loads(out.read_text())["metadata"]
    assert meta["instance"] == inst.fingerprint()
    assert (meta["K"], meta["M"], meta["N"], meta["B"]) == (16, inst.M, inst.N, inst.B)
    assert meta["method"] == "dp" and meta["mode"] == "greedy"
    assert meta["restrictions"]["max_d"] == 2
    assert evaluate(inst.with_settings(K=16), load_plan(out)).valid
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left


def test_an_infeasible_resolve_removes_the_stale_plan_and_says_so(tmp_path, small):
    path, _ = small
    out = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(path), "-o", str(out)]).exit_code == 0
    assert out.exists()
    r = runner.invoke(app, ["solve", str(path), "--memory", "1MB", "--json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert rec["status"] == "infeasible"
    assert not out.exists()
    removed = [line for line in r.output.splitlines() if "removed stale plan" in line]
    assert len(removed) == 1 and str(out) in removed[0] and "infeasible" in removed[0]


def test_a_failed_resolve_removes_the_stale_plan(tmp_path, small):
    path, _ = small
    out = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(path), "-o", str(out)]).exit_code == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = runner.invoke(app, ["solve", str(bad), "-o", str(out)])
    assert r.exit_code == 2
    assert not out.exists()
    assert any("removed stale plan" in line and "failed" in line for line in r.output.splitlines())


def test_nothing_is_removed_when_there_was_no_plan(tmp_path, small):
    path, _ = small
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(path), "--memory", "1MB", "-o", str(out)])
    assert r.exit_code == 0
    assert "removed" not in r.output and not out.exists()


def test_several_instances_refuse_one_output(tmp_path, small):
    path, _ = small
    r = runner.invoke(app, ["solve", str(path), str(path), "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 2 and r.output.count("\n") == 1


# ---- honest human output ----


def test_version():
    from piper_ilp import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.output == f"piper-ilp {__version__}\n"


def test_the_summary_line_has_units(small):
    path, inst = small
    r = runner.invoke(app, ["solve", str(path)])
    assert r.exit_code == 0, r.output
    header = r.output.splitlines()[0]
    # small.json: M = 2e8 bytes = 190.73 MiB, B = 1e10 bytes/s = 9.313 GiB/s
    assert inst.M == 2e8 and inst.B == 1e10
    assert "M=190.7 MiB" in header and "B=9.313 GiB/s" in header and "e+" not in header


def test_tables_fit_80_columns_and_detail_lists_each_layer(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["solve", str(path), "--detail", "-K", "64", "-N", "16", "-o", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    # every line but the header (which names the file) fits 80 columns
    assert all(len(line) <= 80 for line in lines[1:]), "\n".join(
        line for line in lines if len(line) > 80
    )
    plan = load_plan(out)
    chosen = {v: st.options[v] for st in plan.stages for v in st.nodes}
    for node in inst.nodes:
        rows = [
            line
            for line in lines
            if line.split()[:1] == [str(node.id)] and (node.name or "") in line
        ]
        assert len(rows) == 1 and chosen[node.id] in rows[0], (node.id, lines)
    plain = runner.invoke(app, ["solve", str(path), "-K", "64", "-N", "16"])
    assert "option" not in plain.output.splitlines()[0] and not any(
        "activation recomp" in x for x in plain.output.splitlines()
    )


def test_exit_status_precedence_over_several_instances(tmp_path, small):
    """With several instances the exit status is the worst one's: bad input (2) over an
    unknown answer (3) over an answer (0), whatever the order of the files."""
    path, _ = small
    opt = {"id": "v", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 1}
    opt.update({"memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}})
    wide = tmp_path / "wide.json"  # its only option needs t = 2 > K: infeasible at once
    wide.write_text(
        json.dumps(
            {
                "maxDevices": 1,
                "maxMemoryPerDevice": 10,
                "bandwidth": 1,
                "mbsInBatch": 1,
                "nodes": [{"id": 0, "TMPCs": {"2": [opt]}}],
                "edges": [],
            }
        )
    )
    missing = tmp_path / "missing.json"

    def status(*files):
        r = runner.invoke(app, ["solve", *map(str, files), "--time-limit", "0", "--json"])
        return r.exit_code, [rec.get("status") for rec in json_lines(r.output)]

    assert status(wide) == (0, ["infeasible"])
    assert status(path) == (3, ["unknown"])  # stopped at once, with no plan
    assert status(wide, path) == (3, ["infeasible", "unknown"])
    assert status(path, wide) == (3, ["unknown", "infeasible"])
    assert status(missing, wide, path)[0] == 2 and status(wide, path, missing)[0] == 2


def test_help_loads_no_solver_library():
    """`piper-ilp --help` loads typer and rich, not numpy, networkx, OR-Tools or PuLP."""
    import subprocess
    import sys

    from conftest import REPO

    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "piper_cli", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0 and "solve" in proc.stdout
    loaded = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "typer" in loaded
    assert not loaded & {"numpy", "networkx", "ortools", "pulp"}, sorted(
        loaded & {"numpy", "networkx", "ortools", "pulp"}
    )


def test_version_in_a_real_process():
    import subprocess
    import sys

    from conftest import REPO

    proc = subprocess.run(
        [sys.executable, "-m", "piper_cli", "--version"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0 and proc.stdout.startswith("piper-ilp ") and proc.stderr == ""


def test_the_plan_never_overwrites_the_instance(tmp_path, small):
    path, _ = small
    copy = tmp_path / "inst.json"
    copy.write_text(path.read_text())
    r = runner.invoke(app, ["solve", str(copy), "-o", str(copy)])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "instance" in r.output
    assert copy.read_text() == path.read_text()


@pytest.mark.parametrize(
    "args,says",
    [
        (
            ["solve", "--method", "cpsat", "--threads", "100000"],
            "--threads: the solver threads must be a whole number within [1, 64], got 100000",
        ),
        (
            ["solve", "--method", "scip", "--threads", "100000"],
            "--threads: the solver threads must be a whole number within [1, 64], got 100000",
        ),
        (
            ["solve", "--method", "cbc", "--threads", "65"],
            "--threads: the solver threads must be a whole number within [1, 64], got 65",
        ),
        (
            ["verify", "--threads", "65"],
            "--threads: the solver threads must be a whole number within [1, 64], got 65",
        ),
        (
            ["ladder", "--time-limit", "inf"],
            "--time-limit: the time limit must be a finite number of seconds >= 0, got inf",
        ),
        (
            ["ladder", "--full-time-limit", "inf"],
            "--full-time-limit: the time limit must be a finite number of seconds >= 0, got inf",
        ),
    ],
)
def test_solver_settings_are_range_checked_before_any_work(tmp_path, small, args, says):
    """cpsat with 100,000 threads was "internal error ... MODEL_INVALID" (exit 1), scip
    printed [paramset.c] errors and exited 0, cbc crashed at 256; ladder --time-limit inf
    marked every rung "error" (exit 1): now one line, exit 2, before any solve. solve and
    verify refuse before they read an instance (here one that does not exist); the ladder
    before its first rung (each prints a line as it ends)."""
    where = small[0] if args[0] == "ladder" else tmp_path / "not-read.json"
    r = runner.invoke(app, [args[0], str(where), *args[1:]])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [f"piper-ilp: error: {says}"]


def test_the_settings_check_their_values_when_built():
    from piper_ilp.errors import InputError
    from piper_ilp.settings import MAX_THREADS, Settings

    Settings(time_limit=0.0, threads=1)
    Settings(time_limit=None, threads=MAX_THREADS)

    for bad in (
        dict(threads=0),
        dict(threads=MAX_THREADS + 1),
        dict(threads=True),
        dict(threads=2.0),
        dict(time_limit=math.inf),
        dict(time_limit=-1.0),
        dict(time_limit=math.nan),
    ):
        with pytest.raises(InputError):
            Settings(**bad)
