"""The mode (contract secs. 8-9) as a first-class argument: the registry, verify, campaigns
and the CLI's --pipeline / --objective / --schedule / --modes."""

from __future__ import annotations

import json

import pytest
from builders import json_lines
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import METHODS, run_method
from compare.crosscheck.verify import verify_instance
from compare.experiments.campaign import (
    make_specs,
    mode_specs,
    parse_modes,
    read_results,
    run_campaign,
)
from piper_cli import app
from piper_cli.common import Objective, Pipeline, Schedule, mode_from_flags
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, OBJECTIVES, PIPELINES, SCHEDULES, Mode
from piper_ilp.plan import load_plan
from piper_ilp.solution import Solution, Status

runner = CliRunner()

GRAPH_BATCH = Mode("graph", "batch-time", "1f1b")


@pytest.fixture(scope="module")
def small(inputs_dir):
    path = inputs_dir / "small.json"
    return path, load_instance(path)


# ---- the registry --------------------------------------------------------------------


def test_cli_choices_are_the_cores():
    assert tuple(x.value for x in Pipeline) == PIPELINES
    assert tuple(x.value for x in Objective) == OBJECTIVES
    assert tuple(x.value for x in Schedule) == SCHEDULES
    assert mode_from_flags() == DEFAULT_MODE
    assert mode_from_flags(None, Objective.batch_time, None, base=Mode("graph")) == Mode(
        "graph", "batch-time"
    )


def test_which_methods_handle_every_mode():
    every = {name for name, m in METHODS.items() if m.all_modes}
    assert {"dp", "cpsat", "cbc", "brute"} <= every
    assert not every & {"greedy", "2bw", "pipedream"}


@pytest.mark.parametrize("name", ["greedy", "2bw", "pipedream"])
def test_a_default_only_method_refuses_another_mode(name):
    inst = random_instance("chain", 3, 0, memory="loose")
    with pytest.raises(InputError) as info:
        run_method(inst, name, mode=Mode("graph"))
    text = str(info.value)
    assert "\n" not in text and name in text and "graph/throughput/1f1b" in text


def test_run_method_brute_in_a_mode_reports_that_modes_value():
    inst = random_instance("fork-join", 4, 3, memory="loose")
    sol = run_method(inst, "brute", mode=GRAPH_BATCH)
    assert sol.mode == GRAPH_BATCH and sol.status is Status.OPTIMAL
    ev = evaluate(inst, sol.plan, GRAPH_BATCH)
    assert sol.value == ev.batch_time and sol.tps == ev.tps and sol.value > sol.tps
    assert sol.to_dict()["objective"] == sol.value and sol.to_dict()["mode"]["pipeline"] == "graph"


# ---- verify --------------------------------------------------------------------------


def test_verify_compares_the_modes_value_not_the_tps():
    inst = random_instance("fork-join", 4, 3, memory="loose")
    mode = Mode("sequential", "batch-time", "gpipe")
    ref = solve_brute(inst, mode=mode)

    def claims_tps(
        instance, restrictions, time_limit, threads
    ):  # an "optimal" whose value is the TPS
        return Solution(
            "dp", Status.OPTIMAL, plan=ref.plan, objective=ref.tps, bound=ref.tps, mode=mode
        )

    good = verify_instance(inst, ("brute",), mode=mode)
    assert good.verdict == "single-proof" and good.optimum == ref.value and good.mode == mode
    assert "greedy" not in good.results  # Piper's rule solves only the default mode
    bad = verify_instance(inst, ("dp", "brute"), mode=mode, solvers={"dp": claims_tps})
    assert bad.verdict == "mismatch"
    assert any("batch time" in p for p in bad.problems)


def test_verify_refuses_a_default_only_method_or_external_in_another_mode():
    inst = random_instance("chain", 3, 0, memory="loose")
    with pytest.raises(InputError, match="method greedy solves only the default mode"):
        verify_instance(inst, ("brute", "greedy"), mode=Mode("graph"))
    with pytest.raises(InputError, match="method mine solves only the default mode"):
        verify_instance(inst, ("brute",), mode=Mode("graph"), externals={"mine": "true"})


# ---- solve, verify, evaluate on the command line --------------------------------------


def test_solve_json_in_a_non_default_mode(small):
    path, inst = small
    r = runner.invoke(
        app,
        [
            "solve",
            str(path),
            "--method",
            "brute",
            "--json",
            "--pipeline",
            "graph",
            "--objective",
            "batch-time",
            "--schedule",
            "gpipe",
        ],
    )
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    mode = Mode("graph", "batch-time", "gpipe")
    ref = solve_brute(inst, mode=mode)
    assert rec["mode"] == mode.to_dict()
    assert rec["objective"] == ref.value and rec["tps"] == ref.tps
    r = runner.invoke(app, ["solve", str(path), "--method", "brute", "--objective", "batch-time"])
    assert r.exit_code == 0, r.output
    assert (
        "mode sequential/batch-time/1f1b" in r.output
        and "optimal: batch time" in r.output
        and "(TPS" in r.output
    )


def test_solve_dp_in_the_default_mode_keeps_its_record(small):
    path, inst = small
    r = runner.invoke(app, ["solve", str(path), "--json"])
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    assert (
        rec["mode"] == DEFAULT_MODE.to_dict()
        and rec["objective"] == rec["tps"] == solve_brute(inst).tps
    )
    r = runner.invoke(app, ["solve", str(path)])
    assert "optimal: TPS" in r.output and "mode " not in r.output


def test_bad_mode_values_and_default_only_methods_are_usage_errors(small):
    path, _ = small
    for flag, value in (("--pipeline", "tree"), ("--objective", "latency"), ("--schedule", "zb")):
        r = runner.invoke(app, ["solve", str(path), flag, value])
        assert r.exit_code == 2 and flag in r.output
    r = runner.invoke(app, ["solve", str(path), "--method", "greedy", "--pipeline", "graph"])
    assert r.exit_code == 2
    assert (
        "method greedy solves only the default mode sequential/throughput/1f1b, not "
        "graph/throughput/1f1b" in r.output
    )
    r = runner.invoke(app, ["verify", str(path), "--methods", "brute,2bw", "--schedule", "gpipe"])
    assert r.exit_code == 2 and "method 2bw" in r.output


def test_verify_json_in_a_non_default_mode(small):
    path, inst = small
    mode = Mode("sequential", "batch-time", "gpipe")
    r = runner.invoke(
        app,
        [
            "verify",
            str(path),
            "--methods",
            "brute",
            "--json",
            "--objective",
            "batch-time",
            "--schedule",
            "gpipe",
        ],
    )
    assert r.exit_code == 4, r.output  # brute alone: single-proof
    (rec,) = json_lines(r.output)
    assert rec["verdict"] == "single-proof" and rec["mode"] == mode.to_dict()
    assert rec["optimum"] == solve_brute(inst, mode=mode).value
    assert "greedy" not in rec["methods"]
    r = runner.invoke(app, ["verify", str(path), "--methods", "brute", "--objective", "batch-time"])
    assert "optimum batch time" in r.output and "batch time s" in r.output


def test_the_mode_travels_with_the_plan_from_solve_to_evaluate(tmp_path, small):
    path, inst = small
    out = tmp_path / "plan.json"
    r = runner.invoke(
        app, ["solve", str(path), "--method", "brute", "--pipeline", "graph", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    meta = load_plan(out).metadata
    assert (meta["pipeline"], meta["objective"], meta["schedule"]) == (
        "graph",
        "throughput",
        "1f1b",
    )
    plan = load_plan(out)

    r = runner.invoke(app, ["evaluate", str(path), str(out), "--json"])  # no flag: the plan's mode
    assert r.exit_code == 0, r.output
    (rec,) = json_lines(r.output)
    ev = evaluate(inst, plan, Mode("graph"))
    assert rec["mode"] == Mode("graph").to_dict()
    assert [s["h"] for s in rec["stages"]] == [s.s for s in ev.stages]
    assert [s["successors"] for s in rec["stages"]] == [list(s.successors) for s in ev.stages]
    assert (
        rec["tps"] == ev.tps and rec["batch_time"] == ev.batch_time and rec["objective"] == ev.tps
    )

    r = runner.invoke(
        app,
        [
            "evaluate",
            str(path),
            str(out),
            "--json",
            "--pipeline",
            "sequential",
            "--objective",
            "batch-time",
        ],
    )
    (rec,) = json_lines(r.output)  # a flag overrides its part of the recorded mode
    seq = evaluate(inst, plan, Mode("sequential", "batch-time"))
    assert rec["mode"] == Mode("sequential", "batch-time").to_dict()
    assert [s["h"] for s in rec["stages"]] == [s.s for s in seq.stages] and rec[
        "objective"
    ] == seq.batch_time

    r = runner.invoke(app, ["evaluate", str(path), str(out)])
    assert r.exit_code == 0, r.output
    assert "mode graph/throughput/1f1b" in r.output
    assert "settings from the plan's metadata: " in r.output and " pipeline=graph " in r.output
    assert "next" in r.output and "batch time" in r.output and "TPS" in r.output


def test_a_bad_mode_in_a_plans_metadata_is_one_line(tmp_path, small):
    path, _ = small
    out = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", str(path), "-o", str(out)]).exit_code == 0
    data = json.loads(out.read_text())
    data["metadata"]["pipeline"] = "tree"
    out.write_text(json.dumps(data))
    r = runner.invoke(app, ["evaluate", str(path), str(out)])
    assert r.exit_code == 2 and "metadata.pipeline" in r.output and "tree" in r.output


# ---- campaigns -----------------------------------------------------------------------


def test_parse_modes_and_mode_specs():
    assert parse_modes(None) == (DEFAULT_MODE,) and parse_modes("all") == ALL_MODES
    assert parse_modes("graph/batch-time/gpipe,sequential") == (
        Mode("graph", "batch-time", "gpipe"),
        DEFAULT_MODE,
    )
    for bad in ("tree", "graph,graph/throughput", "a/b/c/d"):
        with pytest.raises(InputError):
            parse_modes(bad)
    specs = mode_specs(make_specs(2, 0), ALL_MODES)
    assert (
        len(specs) == 16
        and len({s.id for s in specs}) == 16
        and all("/" not in s.id for s in specs)
    )
    assert [s.id for s in specs[:8]].count(
        specs[0].instance_id
    ) == 1  # the default mode keeps the plain id


def test_a_campaign_refuses_a_default_only_method_in_another_mode(tmp_path):
    with pytest.raises(InputError, match="method greedy"):
        run_campaign(tmp_path / "c", 1, 0, methods=("brute", "greedy"), modes=(Mode("graph"),))


def test_cli_campaign_over_every_mode(tmp_path):
    out = tmp_path / "modes"
    args = [
        "campaign",
        "--count",
        "2",
        "--seed",
        "3",
        "--nodes",
        "2-3",
        "--families",
        "chain,fork-join",
        "--methods",
        "brute",
        "--modes",
        "all",
        "--workers",
        "1",
        "--scheduler",
        "processes",
        "--no-progress",
        "--out",
        str(out),
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = read_results(out)
    assert len(rows) == 2 * len(ALL_MODES)
    keys = {(row["instance_id"], row["mode"]) for row in rows}
    assert len(keys) == len(rows) and {m for _, m in keys} == {m.label for m in ALL_MODES}
    assert all(row["spec"]["mode"] == row["mode"] for row in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["modes"] == [m.label for m in ALL_MODES]
    assert {label: sum(c.values()) for label, c in summary["by_mode"].items()} == {
        m.label: 2 for m in ALL_MODES
    }
    assert summary["verdicts"]["mismatch"] == summary["verdicts"]["error"] == 0
    assert summary["distinct_instances"] == 2 and summary["parameters"]["modes"] == [
        m.label for m in ALL_MODES
    ]
    assert "16 checks (2 instances, 8 modes)" in r.output and "graph/batch-time/gpipe" in r.output
    r = runner.invoke(app, args + ["--resume"])  # nothing left to do
    assert r.exit_code == 0 and len(read_results(out)) == 16
    assert json.loads((out / "summary.json").read_text())["resumed"] == 16
    r = runner.invoke(app, args[:-2] + ["--modes", "graph", "--out", str(out), "--resume"])
    assert r.exit_code == 2 and "modes" in r.output
    r = runner.invoke(app, args + ["--pipeline", "graph"])
    assert r.exit_code == 2 and "--modes replaces" in r.output


def test_resume_of_a_folder_from_before_modes(tmp_path):
    out = tmp_path / "old"
    run_campaign(out, 1, 0, nodes=(2, 2), methods=("brute",), progress=False)
    params = json.loads((out / "campaign.json").read_text())
    del params["modes"]  # as written before --modes existed
    (out / "campaign.json").write_text(json.dumps(params))
    s = run_campaign(out, 1, 0, nodes=(2, 2), methods=("brute",), progress=False, resume=True)
    assert s["resumed"] == 1 and s["modes"] == [DEFAULT_MODE.label]


@pytest.mark.parametrize("text", ["", " , ", "all,graph", "ALL,sequential"])
def test_modes_lists_with_an_empty_label_or_all_among_others_are_refused(text):
    from compare.experiments.campaign import parse_modes

    with pytest.raises(InputError):
        parse_modes(text)
    assert len(parse_modes("ALL")) == 8 and parse_modes("graph")[0].label == "graph/throughput/1f1b"
