"""Campaigns (compare/experiments/campaign.py) and shrinking (compare/crosscheck/shrink.py).

The harness tests itself: a deliberately wrong solver is injected, must be caught, and
its counterexample shrunk to a handful of nodes that ``piper-ilp verify`` replays. The
seeded campaign of 200 random DAGs over all families runs every real method."""

from __future__ import annotations

import functools
import json

import pytest
from typer.testing import CliRunner

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.shrink import shrink, variants
from compare.crosscheck.verify import verify_instance
from compare.experiments.campaign import (
    LOCK,
    RESULTS,
    CampaignInterrupted,
    make_specs,
    read_results,
    replay_command,
    run_campaign,
    spec_instance,
    summarize,
    summary_lines,
)
from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.instance import load_instance
from piper_ilp.mode import DEFAULT_MODE
from piper_ilp.solution import Restrictions

# ---- deliberately wrong solvers (module level, so that worker processes can load them) ----


def dp_without_data_parallelism(instance, restrictions, time_limit, threads):
    """Claims optimality while never trying d > 1."""
    s = solve_brute(
        instance,
        Restrictions(
            max_d=1, max_t=restrictions.max_t, exclude_options=restrictions.exclude_options
        ),
    )
    s.method = "dp"
    return s


def dp_ignoring_memory(instance, restrictions, time_limit, threads):
    """Never checks the memory limit M: its plans may not fit."""
    s = solve_brute(instance.with_settings(M=1e30), restrictions)
    s.method = "dp"
    return s


def honest_brute(instance, restrictions, time_limit, threads):
    return solve_brute(instance, restrictions)


def first_failing(bad, family="skip", n=7):
    for seed in range(50):
        inst = random_instance(family, n, seed)
        if (
            verify_instance(inst, ("dp", "brute"), solvers={"dp": bad}, greedy=False).verdict
            == "mismatch"
        ):
            return inst
    raise AssertionError("the wrong solver was never caught")


@pytest.mark.parametrize(
    "bad, most_nodes", [(dp_without_data_parallelism, 1), (dp_ignoring_memory, 3)]
)
def test_wrong_solver_is_caught_and_shrunk(bad, most_nodes):
    inst = first_failing(bad)
    assert len(inst.nodes) == 7

    def fails(candidate):
        return (
            verify_instance(candidate, ("dp", "brute"), solvers={"dp": bad}, greedy=False).verdict
            == "mismatch"
        )

    res = shrink(inst, fails)
    assert res.finished and res.steps
    small = res.instance
    assert (
        len(small.nodes) <= most_nodes
    )  # a single node shows "no data parallelism"; memory needs a few
    assert fails(small)
    # honest methods agree on the shrunk instance: the disagreement is the wrong solver's
    assert verify_instance(small, ("dp", "cpsat", "brute"), time_limit=30).verdict == "match"


def test_shrink_variants_are_valid_and_smaller():
    inst = random_instance("fork-join", 6, 2, options_per_t=(1, 3), t_values=(1, 2, 4))
    seen = set()
    for text, data in variants(inst):
        seen.add(text.split()[0])
        assert len(data["nodes"]) <= len(inst.nodes)
    assert {"drop", "K", "N", "every"} <= seen


def test_campaign_catches_a_wrong_solver_saves_and_replays_counterexamples(tmp_path):
    out = tmp_path / "camp"
    summary = run_campaign(
        out,
        10,
        3,
        families=("skip", "fork-join"),
        nodes=(4, 6),
        methods=("dp", "brute"),
        solvers={"dp": dp_without_data_parallelism, "brute": honest_brute},
        workers=2,
        progress=False,
    )
    records = read_results(out)
    assert len(records) == 10 and summary["instances"] == 10
    bad = [r for r in records if r["verdict"] == "mismatch"]
    assert bad, "the wrong solver went unnoticed"
    assert summary["verdicts"]["mismatch"] == len(bad) and sorted(summary["mismatches"]) == sorted(
        r["id"] for r in bad
    )
    for r in bad:
        path = out / "counterexamples" / f"{r['id']}.json"
        assert r["counterexample"] == str(path) and path.exists()
        assert r["shrunk_nodes"] <= 2
        small = load_instance(path)  # a valid instance (the extra field is ignored)
        meta = json.loads(path.read_text())["counterexample"]
        assert (
            meta["campaign_id"] == r["id"]
            and meta["verdict"] == "mismatch"
            and meta["shrink_steps"]
        )
        # the wrong solver still fails on it, and the CLI replays it with the real methods
        assert (
            verify_instance(
                small, ("dp", "brute"), solvers={"dp": dp_without_data_parallelism}
            ).verdict
            == "mismatch"
        )
        result = CliRunner().invoke(app, ["verify", str(path), "--methods", "dp,brute"])
        assert result.exit_code == 0 and "match" in result.output


def test_campaign_resume_after_a_kill(tmp_path):
    out = tmp_path / "camp"
    kwargs = dict(
        families=("chain", "layered"), nodes=(2, 4), methods=("brute",), workers=1, progress=False
    )
    run_campaign(out, 6, 11, **kwargs)
    lines = (out / RESULTS).read_text().splitlines()
    assert len(lines) == 6
    # simulate a run killed mid-write: three full lines and a torn one
    (out / RESULTS).write_text("\n".join(lines[:3]) + "\n" + lines[3][:25])
    with pytest.raises(InputError, match="--resume"):
        run_campaign(out, 6, 11, **kwargs)
    with pytest.raises(InputError, match="other parameters"):
        run_campaign(out, 6, 12, resume=True, **kwargs)
    seen = []
    summary = run_campaign(out, 6, 11, resume=True, on_record=seen.append, **kwargs)
    assert len(seen) == 3 and summary["resumed"] == 3
    ids = [r["id"] for r in read_results(out)]
    assert sorted(ids) == sorted(s.id for s in make_specs(6, 11, ("chain", "layered"), (2, 4)))
    assert summary["instances"] == 6


def test_resume_with_a_larger_count_extends_the_campaign(tmp_path):
    """Issue 30 point 3: the first instances of a larger campaign are the smaller one's
    (instance i is a function of the seed and i), so --resume with a larger --count keeps
    every finished result and runs only the new ones; a smaller count or another changed
    parameter is refused in one short line naming the parameters."""
    out = tmp_path / "camp"
    kwargs = dict(
        families=("chain", "skip"), nodes=(2, 4), methods=("brute",), workers=1, progress=False
    )
    assert (
        make_specs(4, 5, ("chain", "skip"), (2, 4))
        == make_specs(7, 5, ("chain", "skip"), (2, 4))[:4]
    )
    run_campaign(out, 4, 5, **kwargs)
    first = {r["id"]: r for r in read_results(out)}
    seen = []
    summary = run_campaign(out, 7, 5, resume=True, on_record=seen.append, **kwargs)
    assert summary["resumed"] == 4 and summary["instances"] == 7 and len(seen) == 3
    records = read_results(out)
    assert [r["id"] for r in records] == [s.id for s in make_specs(7, 5, ("chain", "skip"), (2, 4))]
    assert all(records[i] == first[records[i]["id"]] for i in range(4))  # kept, not rerun
    assert json.loads((out / "campaign.json").read_text())["count"] == 7
    for count, seed, families, says in (
        (6, 5, ("chain", "skip"), "count 7 -> 6"),
        (7, 6, ("chain", "skip"), "seed 5 -> 6"),
        (8, 5, ("chain",), "families ['chain', 'skip'] -> ['chain']"),
    ):
        with pytest.raises(InputError) as err:
            run_campaign(out, count, seed, resume=True, **{**kwargs, "families": families})
        msg = str(err.value)
        assert says in msg and "it may only grow (count)" in msg and len(msg) < 200, msg
        assert "\n" not in msg


def test_a_signal_stops_the_campaign_and_resume_counts_each_instance_once(tmp_path):
    import multiprocessing
    import signal

    out = tmp_path / "camp"
    kwargs = dict(
        families=("chain", "skip"), nodes=(3, 5), methods=("dp", "brute"), workers=2, progress=False
    )
    seen = []

    def interrupt_after_two(rec):
        seen.append(rec["id"])
        if len(seen) == 2:
            signal.raise_signal(signal.SIGTERM)  # as `kill` would: the handler only records it

    with pytest.raises(CampaignInterrupted) as info:
        run_campaign(out, 12, 8, on_record=interrupt_after_two, **kwargs)
    assert info.value.signum == signal.SIGTERM and info.value.done == len(read_results(out)) >= 2
    assert not multiprocessing.active_children()  # the workers are gone
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handlers are restored
    assert not (out / "summary.json").exists()
    summary = run_campaign(out, 12, 8, resume=True, **kwargs)
    ids = [r["id"] for r in read_results(out)]
    assert (
        len((out / RESULTS).read_text().splitlines())
        == len(ids)
        == len(set(ids))
        == 12
        == summary["instances"]
    )


def test_lock_and_duplicate_lines(tmp_path):
    import fcntl
    import os

    out = tmp_path / "camp"
    kwargs = dict(families=("chain",), nodes=(2, 3), methods=("brute",), workers=1, progress=False)
    out.mkdir()
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another campaign holds the folder
        with pytest.raises(InputError, match="another campaign"):
            run_campaign(out, 3, 1, **kwargs)
    finally:
        os.close(fd)
    assert not (out / RESULTS).exists()
    run_campaign(out, 3, 1, **kwargs)
    lines = (out / RESULTS).read_text().splitlines()
    (out / RESULTS).write_text("\n".join(lines + lines[:2]) + "\n")  # the same ids written twice
    assert [r["id"] for r in read_results(out)] == [json.loads(x)["id"] for x in lines]
    assert run_campaign(out, 3, 1, resume=True, **kwargs)["instances"] == 3


def test_specs_are_deterministic_and_cover_families():
    specs = make_specs(50, 4)
    assert specs == make_specs(50, 4) and specs != make_specs(50, 5)
    assert {s.family for s in specs} == set(FAMILIES)
    assert all(3 <= s.n_nodes <= 7 for s in specs)
    assert spec_instance(specs[0]) == spec_instance(specs[0])
    with pytest.raises(InputError):
        make_specs(3, 0, families=("tree",))
    with pytest.raises(InputError):
        make_specs(3, 0, nodes=(5, 2))


def test_summary_statistics():
    keys = ("id", "family", "verdict", "greedy_gap", "seconds", "statuses")
    brute_skipped = ({"dp": 2.0, "brute": 9.0}, {"dp": "optimal", "brute": "skipped"})
    recs = [
        dict(zip(keys, ("a", "chain", "match", 0.0, {"dp": 1.0}, {"dp": "optimal"}))),
        dict(zip(keys, ("b", "chain", "match", 0.1, {"dp": 3.0}, {"dp": "optimal"}))),
        dict(zip(keys, ("c", "skip", "mismatch", None, *brute_skipped))),
    ]
    s = summarize(recs)
    assert s["verdicts"] == {
        "match": 2,
        "consistent": 0,
        "single-proof": 0,
        "inconclusive": 0,
        "error": 0,
        "mismatch": 1,
        "harness-error": 0,
    }
    assert s["by_family"] == {"chain": {"match": 2}, "skip": {"mismatch": 1}}
    assert (
        s["greedy_gap"]["count"] == 2
        and s["greedy_gap"]["worse"] == 1
        and s["greedy_gap"]["max"] == pytest.approx(0.1)
    )
    assert s["seconds"]["dp"]["p50"] == pytest.approx(2.0) and s["seconds"]["dp"]["max"] == 3.0
    assert "brute" not in s["seconds"]  # skipped runs carry no solve time
    assert s["mismatches"] == ["c"]


def test_cli_campaign(tmp_path):
    out = tmp_path / "cli"
    args = "campaign --count 4 --seed 2 --nodes 2-3 --methods dp,brute --workers 1".split()
    args += ["--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "4 instances: match 4" in result.output
    assert len(read_results(out)) == 4 and (out / "summary.json").exists()
    result = CliRunner().invoke(app, args)  # results present, no --resume
    assert result.exit_code == 2 and "--resume" in result.output
    result = CliRunner().invoke(app, args + ["--resume"])
    assert result.exit_code == 0 and len(read_results(out)) == 4
    result = CliRunner().invoke(
        app, ["campaign", "--count", "2", "--nodes", "9-3", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2


@pytest.mark.slow
def test_seeded_campaign_of_200_random_dags(tmp_path):
    # The CI campaign: 200 random DAGs over all five families, the DP, both MILP backends and
    # the exhaustive oracle (where it applies); any mismatch fails the suite.
    summary = run_campaign(
        tmp_path / "ci",
        200,
        20261122,
        nodes=(2, 6),
        methods=("dp", "cpsat", "cbc", "brute"),
        time_limit=60,
        workers=2,
        progress=False,
    )
    print(
        "\n".join(
            __import__("compare.experiments.campaign", fromlist=["summary_lines"]).summary_lines(
                summary
            )
        )
    )
    assert summary["instances"] == 200
    assert summary["verdicts"]["mismatch"] == 0, summary["mismatches"]
    assert set(summary["by_family"]) == set(FAMILIES)
    assert summary["verdicts"]["match"] >= 190  # "consistent" only if a MILP hit 60 s on 6 nodes
    assert (
        summary["statuses"]["brute"].get("optimal", 0)
        + summary["statuses"]["brute"].get("infeasible", 0)
        >= 180
    )


# ---- the harness's own failures are not mismatches ----------------------------------------


def test_a_harness_error_is_its_own_verdict_not_a_mismatch():
    from compare.experiments.campaign import HARNESS_ERROR, Spec, run_spec

    # the instance cannot be made (as the > 250-node id bug did): nothing is checked
    rec = run_spec(
        Spec("00000-bad-n3", "no-such-family", 3, 0, False, (1,), (1, 1), "tight"),
        methods=("brute",),
    )
    assert rec["verdict"] == HARNESS_ERROR == "harness-error"
    assert "InputError" in rec["harness_error"] and "no-such-family" in rec["harness_error"]
    assert (
        rec["problems"] == [f"harness error: {rec['harness_error']}"]
        and "counterexample_instance" not in rec
    )


def test_campaign_counts_harness_errors_apart_and_the_cli_exits_1(tmp_path):
    import compare.experiments.campaign as campaign

    out = tmp_path / "camp"
    # a solver name the registry does not know makes every check raise in the harness
    summary = run_campaign(
        out,
        3,
        1,
        families=("chain",),
        nodes=(2, 3),
        methods=("brute",),
        solvers={"no-such-method": honest_brute},
        workers=1,
        progress=False,
    )
    assert summary["verdicts"]["harness-error"] == 3 and summary["verdicts"]["mismatch"] == 0
    assert summary["verdicts"]["error"] == 0 and summary["mismatches"] == []
    assert sorted(summary["harness_errors"]) == sorted(
        s.id for s in make_specs(3, 1, ("chain",), (2, 3))
    )
    assert not (out / "counterexamples").exists()
    lines = campaign.summary_lines(summary)
    assert "mismatch 0, harness error 3" in lines[0] and any(
        x.startswith("harness errors: ") for x in lines
    )
    assert summarize([])["verdicts"]["harness-error"] == 0
    assert "harness" not in campaign.summary_lines(summarize([]))[0]
    # the CLI: exit 1, as on a mismatch or an error (resuming the same campaign: every
    # instance is done, so its summary is the records above)
    result = CliRunner().invoke(
        app,
        ["campaign", "--count", "3", "--seed", "1", "--families", "chain", "--nodes", "2-3"]
        + ["--methods", "brute", "--out", str(out), "--resume", "--workers", "1"],
    )
    assert result.exit_code == 1 and "harness error 3" in result.output, result.output


def test_campaign_greedy_gap_runs_only_when_asked(tmp_path):
    kwargs = dict(families=("chain",), nodes=(3, 4), methods=("dp",), workers=1, progress=False)
    on = run_campaign(tmp_path / "on", 4, 2, greedy_gap=True, **kwargs)
    assert on["greedy_gap"]["count"] > 0 and on["greedy_gap"]["not_run"] == 0
    assert any(r["greedy_tps"] is not None for r in read_results(tmp_path / "on"))
    off = run_campaign(tmp_path / "off", 4, 2, **kwargs)  # the default: not run
    records = read_results(tmp_path / "off")
    assert all(r["greedy_tps"] is None and r["greedy_gap_run"] is False for r in records)
    assert off["greedy_gap"] == {"count": 0, "not_run": 4}
    assert off["verdicts"] == on["verdicts"]  # the methods' verdicts do not depend on it
    assert "greedy rule's gap: not measured on 4 instances (--greedy-gap measures it)" in "\n".join(
        summary_lines(off)
    )
    with pytest.raises(InputError, match="greedy_gap"):  # resume with the other setting
        run_campaign(tmp_path / "off", 4, 2, resume=True, greedy_gap=True, **kwargs)
    args = ["campaign", "--count", "2", "--families", "chain", "--nodes", "3-4"]
    args += ["--methods", "dp", "--no-progress", "--out"]
    for flag, line in (
        ("--no-greedy-gap", "greedy rule's gap: not measured on 2 instances"),  # the default
        (None, "greedy rule's gap: not measured on 2 instances"),
        ("--greedy-gap", "greedy rule vs optimum over "),
    ):
        result = CliRunner().invoke(
            app, args + [str(tmp_path / f"cli{flag}")] + [flag] * bool(flag)
        )
        assert result.exit_code == 0, result.output
        assert line in result.output, result.output


def test_campaign_force_runs_the_methods_past_their_size_guards(tmp_path):
    # brute refuses graphs above 8 nodes unless forced, as in verify --force
    kwargs = dict(families=("chain",), nodes=(9, 9), methods=("dp", "brute"), workers=1)
    run_campaign(tmp_path / "plain", 2, 1, progress=False, **kwargs)
    assert [r["statuses"]["brute"] for r in read_results(tmp_path / "plain")] == ["skipped"] * 2
    with pytest.raises(InputError, match="force"):  # resume with the other setting
        run_campaign(tmp_path / "plain", 2, 1, resume=True, force=True, **kwargs)
    args = ["campaign", "--count", "2", "--seed", "1", "--families", "chain", "--nodes", "9-9"]
    args += ["--methods", "dp,brute", "--no-progress", "--force", "--out", str(tmp_path / "f")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    records = read_results(tmp_path / "f")
    assert [(r["statuses"]["brute"], r["verdict"]) for r in records] == [("optimal", "match")] * 2
    assert "--force" in replay_command(["dp"], {}, DEFAULT_MODE, force=True)
    assert "--force" not in replay_command(["dp"], {}, DEFAULT_MODE)


def _named(name):
    """honest_brute under another method's name (module level: workers load it)."""
    return functools.partial(_brute_named, name=name)


def _brute_named(instance, restrictions, time_limit, threads, *, name):
    s = solve_brute(instance, restrictions)
    s.method = name
    return s


FAKES = {n: _named(n) for n in ("dp", "path", "columns", "cpsat", "cbc", "brute")}


def test_campaign_default_methods_are_each_modes(tmp_path):
    """Without methods, each mode runs its default methods (``columns`` in graph
    pipelining, ``path`` in sequential), recorded per mode in the parameters when they
    differ; one list, as before, when they do not."""
    from compare.crosscheck.methods import default_methods
    from piper_ilp.mode import Mode

    kwargs = dict(families=("chain",), nodes=(2, 3), workers=1, progress=False, solvers=FAKES)
    graph = Mode("graph")
    run_campaign(tmp_path / "two", 2, 3, modes=(DEFAULT_MODE, graph), **kwargs)
    for rec in read_results(tmp_path / "two"):
        assert list(rec["statuses"]) == list(default_methods(Mode.parse(rec["mode"]))), rec
    params = json.loads((tmp_path / "two" / "campaign.json").read_text())
    assert params["methods"] == {
        DEFAULT_MODE.label: ["dp", "path", "cpsat", "cbc", "brute"],
        graph.label: ["dp", "columns", "cpsat", "cbc", "brute"],
    }
    run_campaign(tmp_path / "one", 2, 3, **kwargs)
    params = json.loads((tmp_path / "one" / "campaign.json").read_text())
    assert params["methods"] == ["dp", "path", "cpsat", "cbc", "brute"]


@pytest.mark.parametrize("graph", [False, True])
def test_resuming_a_campaign_from_before_the_mode_dependent_defaults(tmp_path, graph):
    """A folder made when the default methods were dp,path,cpsat,cbc,brute in every mode
    (one list in its parameters): in sequential pipelining it resumes with the defaults (the
    same list); in graph pipelining the defaults now differ, and resuming without --methods
    is refused in one line naming the --methods that resumes it as it was made."""
    from piper_ilp.mode import Mode

    out = tmp_path / "old"
    old = ("dp", "path", "cpsat", "cbc", "brute")
    modes = (Mode("graph"),) if graph else (DEFAULT_MODE,)
    kwargs = dict(families=("chain",), nodes=(2, 3), workers=1, progress=False, solvers=FAKES)
    run_campaign(out, 4, 7, methods=old, modes=modes, **kwargs)
    lines = (out / RESULTS).read_text().splitlines()
    (out / RESULTS).write_text("\n".join(lines[:2]) + "\n")  # killed after two
    if graph:
        with pytest.raises(InputError) as err:
            run_campaign(out, 4, 7, resume=True, modes=modes, **kwargs)
        msg = str(err.value)
        assert "add --methods dp,path,cpsat,cbc,brute to resume it" in msg, msg
        assert "graph/throughput/1f1b: dp,columns,cpsat,cbc,brute" in msg, msg
        args = ["campaign", "--count", "4", "--seed", "7", "--families", "chain", "--nodes"]
        args += ["2-3", "--pipeline", "graph", "--out", str(out), "--resume", "--workers", "1"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "add --methods dp,path" in result.output
        summary = run_campaign(out, 4, 7, resume=True, methods=old, modes=modes, **kwargs)
    else:
        summary = run_campaign(out, 4, 7, resume=True, modes=modes, **kwargs)
    assert summary["resumed"] == 2 and summary["instances"] == 4
