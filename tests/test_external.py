"""External planners (``--external NAME=COMMAND``): run, checked by the evaluator, never a proof."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from builders import PATIENCE, process_alive, read_pid, run_piper, wait_until

from compare.builders.generators import random_instance
from compare.crosscheck.external import parse_external, solve_external
from dp import solve_dp
from piper_ilp import evaluate, load_instance
from piper_ilp.errors import InputError, InternalError
from piper_ilp.solution import Status

REPO = Path(__file__).resolve().parents[1]
PLANNER = REPO / "examples" / "planners" / "split_planner.py"
PY = sys.executable


def test_parse_external_refuses_bad_forms():
    assert parse_external("a=b {devices}") == ("a", "b {devices}")
    for bad in ("noequals", "=cmd", "x=", "1x=cmd", "x=cmd {nope}"):
        with pytest.raises(InputError):
            parse_external(bad)
    with pytest.raises(InputError, match="already a method"):
        parse_external("dp=cmd", taken=("dp",))


def test_the_example_planner_gives_a_valid_plan_checked_against_the_optimum():
    inst = load_instance(REPO / "inputs" / "small.json").with_settings(M=6e8)
    sol = solve_external(
        inst,
        f"{PY} {PLANNER} {{instance}} --devices {{devices}} --memory {{memory}} --batch {{batch}}",
        name="split",
    )
    assert sol.status is Status.FEASIBLE and sol.method == "split"
    ev = evaluate(inst, sol.plan)
    assert ev.valid and sol.tps == ev.tps
    assert sol.tps >= solve_dp(inst).tps


def test_an_invalid_plan_is_the_planners_error():
    # at the file's own M the example's t = 1 split does not fit: the evaluator rejects it
    inst = load_instance(REPO / "inputs" / "small.json")
    with pytest.raises(InternalError, match="external planner split.*rule 6"):
        solve_external(inst, f"{PY} {PLANNER} {{instance}}", name="split")


@pytest.mark.parametrize(
    "command,why",
    [
        ("exit 3", "exited with status 3"),
        ("echo not json", "printed no plan JSON"),
        ("echo '{\"stages\": 5}'", "printed no plan JSON"),
        ("echo oops >&2; false", "oops"),
    ],
)
def test_planner_failures_are_backend_errors(command, why):
    inst = random_instance("chain", 3, seed=0)
    sol = solve_external(inst, command, name="bad")
    assert sol.status is Status.BACKEND_ERROR and why in sol.message and sol.plan is None


def test_a_timeout_kills_the_planners_whole_process_group(tmp_path):
    marker = tmp_path / "child.pid"
    inst = random_instance("chain", 3, seed=0)
    # the planner starts a grandchild that would outlive a plain kill of the shell
    cmd = f"sleep 300 & echo $! > {marker}.tmp && mv {marker}.tmp {marker}; wait"
    # under a heavy load the shell may not reach the sleep within a short time-out: then
    # nothing was left to test, and a longer one is tried
    for timeout in (1.0, 10.0, 100.0):
        sol = solve_external(inst, cmd, name="slow", timeout=timeout)
        assert sol.status is Status.BACKEND_ERROR and "killed" in sol.message
        if read_pid(marker) is not None:
            break
    pid = read_pid(marker)
    assert pid is not None
    assert wait_until(lambda: not process_alive(pid))


def test_an_interrupt_kills_the_planner_and_removes_its_folder(tmp_path):
    # a real process running solve_external gets a real SIGINT while the planner sleeps;
    # every wait is on a condition with a generous bound (a load of 15-26 on 2 cores made
    # 10 and 20 s too short), and whatever is left is killed even when the test fails
    work = tmp_path / "work"
    work.mkdir()
    pidfile = tmp_path / "planner.pid"
    # the shell becomes the sleep (exec): the pid written is the planner's, written whole.
    # The child takes SIGINT as Ctrl-C whatever it inherits: started with `&` by a
    # non-interactive shell (a script, a CI runner), Python ignores SIGINT, and the test
    # then waited its whole PATIENCE and failed
    script = (
        "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from compare.crosscheck.external import solve_external\nfrom "
        "compare.builders.generators import random_instance\ntry:\n    "
        f"solve_external(random_instance('chain', 3, seed=0), 'echo $$ > {pidfile}.tmp && "
        f"mv {pidfile}.tmp {pidfile} && exec sleep 300', "
        f"name='slow', workdir={str(work)!r})\nexcept KeyboardInterrupt:\n    sys.exit(130)\n"
    )
    proc = subprocess.Popen([PY, "-c", script], cwd=REPO, stderr=subprocess.PIPE, text=True)
    planner = None
    try:
        started = wait_until(lambda: read_pid(pidfile) is not None or proc.poll() is not None)
        planner = read_pid(pidfile)
        assert started and planner is not None, f"no planner started: {proc.poll()}"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=PATIENCE)
        assert proc.returncode == 130, err
        assert list(work.iterdir()) == []
        assert wait_until(lambda: not process_alive(planner))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if planner is not None and process_alive(planner):
            os.kill(planner, signal.SIGKILL)


def test_verify_reports_an_external_planners_gap_and_calls_its_invalid_plan_a_mismatch():
    from compare.crosscheck.verify import verify_instance

    cmd = f"{PY} {PLANNER} {{instance}} --devices {{devices}} --memory {{memory}} --batch {{batch}}"
    inst = load_instance(REPO / "inputs" / "small.json")
    good = verify_instance(
        inst.with_settings(M=6e8), ("dp", "brute", "2bw"), externals={"split": cmd}
    )
    assert good.verdict == "match" and set(good.gaps) == {"split", "2bw", "greedy"}
    assert good.gaps["split"] == pytest.approx(good.results["split"].tps / good.optimum - 1)
    assert all(g >= 0 for g in good.gaps.values())
    bad = verify_instance(inst, ("dp", "brute"), externals={"split": cmd})
    assert bad.verdict == "mismatch" and bad.involved == ["split"]
    assert any("split: its plan is invalid: rule 6" in p for p in bad.problems)
    with pytest.raises(InputError, match="already a method"):
        verify_instance(inst, ("dp",), externals={"dp": cmd})


def test_cli_verify_with_an_external_planner():
    cmd = (
        f"split={PY} {PLANNER} {{instance}} --memory {{memory}} --devices {{devices}} --batch "
        f"{{batch}}"
    )
    small = REPO / "inputs" / "small.json"
    args = ["--memory", "600MB", "--methods", "dp,brute,2bw", "--external", cmd, "--json"]
    p = run_piper("verify", small, *args, cwd=REPO)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout)
    assert (
        out["verdict"] == "match"
        and out["methods"]["split"]["kind"] == "heuristic"
        and "split" in out["gaps"]
    )
    p = run_piper("verify", small, "--external", "no-equals", cwd=REPO)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_a_campaign_shrinks_an_external_planners_mismatch_and_its_replay_reproduces_it(tmp_path):
    import json
    import shlex

    from typer.testing import CliRunner

    from compare.experiments.campaign import run_campaign
    from piper_cli import app

    script = tmp_path / "empty_planner.py"
    script.write_text("print('{\"stages\": []}')\n")  # an empty plan: invalid on every instance
    cmd = f"{shlex.quote(PY)} {shlex.quote(str(script))} {{instance}}"
    out = tmp_path / "camp"
    summary = run_campaign(
        out,
        2,
        1,
        families=("chain", "skip"),
        nodes=(4, 5),
        methods=("dp", "brute"),
        workers=1,
        progress=False,
        externals={"x": cmd},
        external_timeout=30.0,
        time_limit=20.0,
    )
    assert summary["verdicts"]["mismatch"] == 2
    for path in sorted((out / "counterexamples").glob("*.json")):
        data = json.loads(path.read_text())
        meta = data["counterexample"]
        # shrunk with the planner that disagreed, so it shrank; still a mismatch with every method
        assert (
            meta["shrunk_with"] == ["x"]
            and meta["shrink_steps"]
            and len(data["nodes"]) < meta["original"]["nodes"]
        )
        assert meta["verdict"] == "mismatch" and any(
            p.startswith("x: its plan is invalid") for p in meta["problems"]
        )
        words = shlex.split(meta["replay"])
        assert words[:3] == ["piper-ilp", "verify", "FILE"]
        assert ["--external", f"x={cmd}"] == words[
            words.index("--external") : words.index("--external") + 2
        ]
        assert "--external-timeout" in words and "--time-limit" in words and "dp,brute" in words
        result = CliRunner().invoke(app, [w if w != "FILE" else str(path) for w in words[1:]])
        assert result.exit_code == 1 and "mismatch" in result.output, result.output
