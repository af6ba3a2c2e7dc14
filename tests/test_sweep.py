"""Sweeps (grid x variants, resumable, CSV) and their figures."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import cli

from compare.baselines.twobw import solve_2bw
from compare.experiments.plot import plot_rows
from compare.experiments.sweep import CSV_FIELDS, read_rows, run_sweep, sweep_points
from dp import solve_dp
from piper_ilp import load_instance
from piper_ilp.errors import InputError
from piper_ilp.solution import Restrictions

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "inputs" / "small.json"
VARIANTS = ["all", "no-dp", "no-tp", "no-recompute", "greedy", "2bw"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    inst = load_instance(SMALL)
    points = sweep_points([4, 8], [2e8, 6e8], [inst.N], [inst.B], VARIANTS)
    rows = run_sweep(inst, points, out)
    return inst, points, rows, out


def test_every_point_is_one_row_with_the_methods_answer(swept):
    inst, points, rows, out = swept
    assert [r["id"] for r in rows] == [p.id for p in points] and len(rows) == 24
    for r in rows:
        i = inst.with_settings(K=r["K"], M=r["M"])
        if r["variant"] == "2bw":
            ref = solve_2bw(i)
        else:
            restr = {
                "all": Restrictions(),
                "greedy": Restrictions(),
                "no-dp": Restrictions(max_d=1),
                "no-tp": Restrictions(max_t=1),
                "no-recompute": Restrictions(exclude_options=frozenset({"activation recomp"})),
            }[r["variant"]]
            ref = solve_dp(i, restr, knapsack="greedy" if r["variant"] == "greedy" else "exact")
        assert r["status"] == ref.status.value and r["tps"] == ref.tps
        if r["variant"] == "no-dp" and r["plan"]:
            assert all(s["dataParallelDegree"] == 1 for s in r["plan"]["stages"])
        if r["variant"] == "no-tp" and r["plan"]:
            assert all(s["tensorParallelDegree"] == 1 for s in r["plan"]["stages"])


def test_the_csv_holds_the_same_rows(swept):
    _, _, rows, out = swept
    with (out / "results.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert tuple(table[0]) == CSV_FIELDS and len(table) == len(rows)
    for t, r in zip(table, rows):
        assert t["variant"] == r["variant"] and (
            t["tps"] == "" if r["tps"] is None else float(t["tps"]) == r["tps"]
        )


def test_resume_skips_finished_runs_and_a_second_sweep_is_refused(swept, tmp_path):
    inst, points, rows, out = swept
    with pytest.raises(InputError, match="already holds 24 results"):
        run_sweep(inst, points, out)
    seen = []
    again = run_sweep(inst, points, out, resume=True, on_row=seen.append)
    assert seen == [] and [r["id"] for r in again] == [r["id"] for r in rows]
    # a torn last line (a killed run) is skipped and that point runs again
    partial = tmp_path / "partial"
    partial.mkdir()
    lines = (out / "results.jsonl").read_text().splitlines()
    (partial / "results.jsonl").write_text(
        "\n".join(lines[:3]) + "\n" + lines[3][: len(lines[3]) // 2]
    )
    # results without the manifest that says what wrote them (a killed run always has it)
    with pytest.raises(InputError, match="sweep.json is missing"):
        run_sweep(inst, points, partial, resume=True)
    (partial / "sweep.json").write_text((out / "sweep.json").read_text())
    seen = []
    rows2 = run_sweep(inst, points, partial, resume=True, on_row=seen.append)
    assert len(seen) == 21 and len(read_rows(partial)) == 24 and len(rows2) == 24


def test_resume_with_more_grid_values_extends_the_sweep(swept, tmp_path):
    """Issue 30 point 3: --resume with more grid values (or variants) keeps every finished
    row and runs only the new points; another instance is still refused, briefly."""
    import shutil

    inst, points, rows, out = swept
    grown = tmp_path / "grown"
    shutil.copytree(out, grown)
    more = sweep_points([4, 8, 16], [2e8, 6e8], [inst.N], [inst.B], VARIANTS + ["uniform"])
    seen = []
    again = run_sweep(inst, more, grown, resume=True, on_row=seen.append)
    assert [r["id"] for r in again] == [p.id for p in more] and len(again) == 42
    assert len(seen) == 42 - 24 and {r["id"] for r in seen}.isdisjoint(p.id for p in points)
    old = {r["id"]: r for r in rows}
    assert all(r == old[r["id"]] for r in again if r["id"] in old)  # kept as they were
    fewer = sweep_points([4], [2e8, 6e8], [inst.N], [inst.B], VARIANTS)
    with pytest.raises(InputError) as err:
        run_sweep(inst, fewer, grown, resume=True)
    assert "other parameters: points; it may only grow (points)" in str(err.value)
    with pytest.raises(InputError, match="other parameters: instance"):
        run_sweep(_other_model(inst), more, grown, resume=True)


def _other_model(inst):
    from piper_ilp.instance import instance_from_dict, instance_to_dict

    data = instance_to_dict(inst)
    data["nodes"][1]["TMPCs"]["1"][0]["timePerSample"] *= 2
    return instance_from_dict(data)


def test_a_time_limit_per_point_stops_the_dp_variants(tmp_path):
    """Issue 30 point 4 (sweep): --time-limit is each point's: at 0 s every DP variant
    stops at its first check and claims no optimum (feasible with a plan, or unknown);
    2bw, which has no clock, runs as before. The folder records the limit."""
    inst = load_instance(SMALL)
    points = sweep_points([8], [2e8], [inst.N], [inst.B], ["all", "uniform", "greedy", "2bw"])
    rows = {r["variant"]: r for r in run_sweep(inst, points, tmp_path / "s", time_limit=0.0)}
    for v in ("all", "uniform", "greedy"):
        assert rows[v]["status"] in ("feasible", "unknown"), rows[v]
        assert "time limit" in rows[v]["message"] or "stopped" in rows[v]["message"], rows[v]
    assert rows["2bw"]["status"] == solve_2bw(inst.with_settings(K=8, M=2e8)).status.value
    free = {r["variant"]: r for r in run_sweep(inst, points, tmp_path / "free")}
    assert free["all"]["status"] == "optimal"
    with pytest.raises(InputError, match="time_limit 0.0 -> None"):
        run_sweep(inst, points, tmp_path / "s", resume=True)
    with pytest.raises(InputError, match="the time limit must be a finite number"):
        run_sweep(inst, points, tmp_path / "bad", time_limit=-1.0)


def test_the_cli_prints_a_progress_line_per_run_when_stderr_is_not_a_terminal(tmp_path):
    args = ["sweep", SMALL, "--out", tmp_path / "s", "--variants", "all", "--time-limit", 30]
    r = cli(*args, "-K", "4,8")
    lines = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in lines] == ["[1/2", "[2/2"], r.stderr
    assert all(": optimal TPS " in line and " CPU; " in line for line in lines), lines
    r = cli(*args, "-K", "4,8,16", "--resume")
    assert "[3/3] K=16 " in r.stderr and "[1/" not in r.stderr, r.stderr


def test_the_progress_line_gives_sizes_rates_and_times_in_human_units(tmp_path):
    # as every other command prints them (issue 30 point 7): not 8589934592.0 and
    # 10000000000.0; the TPS in seconds, the CPU time a duration
    args = ["sweep", SMALL, "--out", tmp_path / "s", "--variants", "all", "-K", "4"]
    r = cli(*args, "-M", "8GiB", "-B", "25GiB/s")
    (line,) = [line for line in r.stderr.splitlines() if line.startswith("[")]
    row = read_rows(tmp_path / "s")[0]
    assert line.startswith("[1/1] K=4 M=8 GiB N=4 B=25 GiB/s all: optimal TPS "), line
    assert f"TPS {row['tps']:.6g} s (" in line, line
    assert re.search(r"\((\d+(\.\d+)?) (s|ms|us) CPU; \d+ s elapsed\)$", line), line
    assert "8589934592" not in r.stderr and "e+" not in line, line


def test_unknown_variants_and_empty_lists_are_refused():
    with pytest.raises(InputError, match="unknown variant"):
        sweep_points([1], [1.0], [1], [1.0], ["fast"])
    with pytest.raises(InputError, match="--devices"):
        sweep_points([], [1.0], [1], [1.0], ["all"])


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_draws_one_line_per_variant(swept, tmp_path, suffix):
    _, _, rows, _ = swept
    path = plot_rows(rows, tmp_path / f"fig{suffix}", x="devices", title="small")
    data = path.read_bytes()
    assert (
        data.startswith(b"\x89PNG")
        if suffix == ".png"
        else b"no-recompute" in data and b"<svg" in data
    )


def test_plot_refuses_bad_axes_and_files(swept, tmp_path):
    _, _, rows, _ = swept
    with pytest.raises(InputError, match="--x"):
        plot_rows(rows, tmp_path / "f.png", x="time")
    with pytest.raises(InputError, match=".png or .svg"):
        plot_rows(rows, tmp_path / "f.pdf")
    with pytest.raises(InputError, match="nothing to plot"):
        plot_rows([dict(r, tps=None) for r in rows], tmp_path / "f.png")


def test_cli_sweep_then_plot(tmp_path):
    out = tmp_path / "s"

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "piper_cli", *a], capture_output=True, text=True, cwd=REPO
        )

    p = run(
        "sweep",
        str(SMALL),
        "--out",
        str(out),
        "--devices",
        "4,8",
        "--memory",
        "600MB",
        "--variants",
        "all,2bw",
    )
    assert p.returncode == 0, p.stderr
    assert len(read_rows(out)) == 4
    p = run("plot", str(out), "-o", str(tmp_path / "f.svg"))
    assert p.returncode == 0 and (tmp_path / "f.svg").exists()
    p = run("sweep", str(SMALL), "--out", str(out), "--devices", "4", "--variants", "nope")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args,says",
    [
        (["--devices", "2000000"], "--devices (K)"),
        (["--batch", "2000000000000"], "--batch (N)"),
        (["--memory", "1e31"], "--memory (M)"),
        (["--bandwidth", "1e-40"], "--bandwidth (B)"),
    ],
)
def test_cli_sweep_refuses_an_out_of_range_grid_value_before_any_work(tmp_path, args, says):
    """As solve does (exit 2, one line naming the option), not a worker's traceback and
    "internal error: a sweep worker process died" (exit 1) after the folder was made."""
    out = tmp_path / "s"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "piper_cli",
            "sweep",
            str(SMALL),
            "--out",
            str(out),
            "--scheduler",
            "processes",
            "--variants",
            "all",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 2, p.stderr
    assert (
        p.stderr.strip().splitlines() == [p.stderr.strip()]
        and says in p.stderr
        and "within [" in p.stderr
    )
    assert not out.exists()


def test_a_sweep_point_is_checked_when_it_is_made():
    """The API too: a point outside the supported ranges is refused (InputError naming the
    option) when it is made, before any sweep runs, by the check solve uses
    (check_setting)."""
    from compare.experiments.sweep import SweepPoint

    inst = load_instance(SMALL)
    with pytest.raises(
        InputError, match=r"--devices \(K\) must be an integer within \[1, 1048576\], got 2000000"
    ):
        sweep_points([8, 2_000_000], [inst.M], [inst.N], [inst.B], ["all"])
    with pytest.raises(InputError, match=r"--devices \(K\) must be an integer"):
        sweep_points([2.5], [inst.M], [inst.N], [inst.B], ["all"])  # was truncated to K = 2
    assert SweepPoint(8, inst.M, inst.N, inst.B, "all").K == 8
    with pytest.raises(InputError, match=r"--memory \(M\) must be a number within"):
        SweepPoint(8, 1e31, inst.N, inst.B, "all")


def test_an_external_planner_is_a_variant_of_the_sweep(tmp_path):
    planner = REPO / "examples" / "planners" / "split_planner.py"
    cmd = (
        f"{sys.executable} {planner} {{instance}} --devices {{devices}} --memory {{memory}} "
        f"--batch {{batch}}"
    )
    inst = load_instance(SMALL)
    points = sweep_points([8], [2e8, 6e8], [inst.N], [inst.B], ["all"], externals=("split",))
    rows = run_sweep(inst, points, tmp_path, externals={"split": cmd})
    by = {(r["M"], r["variant"]): r for r in rows}
    assert (
        by[(6e8, "split")]["status"] == "feasible"
        and by[(6e8, "split")]["tps"] >= by[(6e8, "all")]["tps"]
    )
    assert by[(2e8, "split")]["status"] == "invalid" and "rule 6" in by[(2e8, "split")]["message"]


def test_unwritable_figure_and_folder_paths_are_refused_in_one_line(swept, tmp_path):
    _, _, rows, out = swept
    for target in ("/proc/fig.png", str(tmp_path / "missing" / "fig.png")):
        p = subprocess.run(
            [sys.executable, "-m", "piper_cli", "plot", str(out), "-o", target],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert (
            p.returncode == 2
            and len(p.stderr.strip().splitlines()) == 1
            and "Traceback" not in p.stderr
        )


def test_plot_names_the_variants_with_no_valid_point(tmp_path):
    """Issue 30 point 8: a variant without any plan is said, not dropped quietly."""
    from typer.testing import CliRunner

    from compare.experiments.plot import variants_without_points
    from piper_cli import app

    inst = load_instance(SMALL)
    points = sweep_points([1, 8], [2e8], [inst.N], [inst.B], ["all", "2bw"])
    out = tmp_path / "s"
    rows = run_sweep(inst, points, out)
    assert [r["tps"] is None for r in rows] == [True, True, False, True]  # K=1 fits nothing
    assert variants_without_points(rows) == {"2bw": f"{rows[1]['status']} 2"}
    r = CliRunner().invoke(app, ["plot", str(out), "-o", str(tmp_path / "f.png")])
    assert r.exit_code == 0, r.output
    assert f"no valid point for 2bw ({rows[1]['status']} 2): not drawn" in r.output
    assert "all" not in variants_without_points(rows)


def test_a_bad_in_flight_rule_is_an_input_error_before_the_folder_is_made(tmp_path):
    inst = load_instance(SMALL)
    points = sweep_points([4], [inst.M], [inst.N], [inst.B], ["all"])
    with pytest.raises(InputError, match="in_flight: choose piper or schedule, got 'fifo'"):
        run_sweep(inst, points, tmp_path / "s", in_flight="fifo")
    assert not (tmp_path / "s").exists()


def test_json_safe_takes_numpy_arrays():
    # a row or a plan's info holding an array was a ValueError on the way to results.jsonl
    import json

    import numpy as np

    from piper_ilp.files import json_safe

    row = {"y": np.array([[1, 2], [3, 4]], dtype=np.int64), "tps": np.array([0.5, np.nan])}
    assert (
        json.dumps(json_safe(row), allow_nan=False) == '{"y": [[1, 2], [3, 4]], "tps": [0.5, null]}'
    )


def test_force_and_max_ideals_reach_the_dp_variants_as_in_solve(tmp_path):
    # a refused row names --max-ideals or --force: sweep takes both and passes them to the
    # DP variants (and greedy) as solve does; --force lifts the set-count guard too
    args = ["sweep", SMALL, "--variants", "all,greedy,uniform,2bw", "-K", "4", "--max-ideals", 5]
    cli(*args, "--out", tmp_path / "guarded")
    rows = {r["variant"]: r for r in read_rows(tmp_path / "guarded")}
    for v in ("all", "greedy", "uniform"):
        assert rows[v]["status"] == "refused" and "--max-ideals" in rows[v]["message"], rows[v]
    cli(*args, "--force", "--out", tmp_path / "forced")
    forced = {r["variant"]: r for r in read_rows(tmp_path / "forced")}
    inst = load_instance(SMALL).with_settings(K=4)
    assert forced["all"]["status"] == "optimal"
    assert forced["all"]["tps"] == pytest.approx(solve_dp(inst).tps, rel=1e-12)
    uniform = solve_dp(inst, Restrictions(uniform=True))
    assert forced["uniform"]["status"] == "optimal"
    assert forced["uniform"]["tps"] == pytest.approx(uniform.tps, rel=1e-12)
    assert forced["greedy"]["status"] == "feasible"
    assert forced["2bw"]["status"] == rows["2bw"]["status"]  # no guard of the DP's
