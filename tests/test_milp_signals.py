"""Interrupts with real signals to real processes: a MILP solve stopped by SIGINT or SIGTERM
(through the CLI) or by SIGTERM (through a handler that raises KeyboardInterrupt, as the
CLI's contract says) ends with KeyboardInterrupt, not a time limit; no solver child process
(CBC's binary, SCIP's forked solver) is left and no temporary file remains (TMPDIR points at
a fresh folder that is inspected).

The instance (a 10-node layered DAG, K = N = 16) takes every backend well over 5 s; the
signal is sent once the solver runs (for CBC: once its child process exists; for SCIP:
once its forked solver process has used a second of CPU time; for CP-SAT, in the process
itself: once the process has used 4 s of CPU time, the model written). PipeDream's MILP in
``verify --model pipedream`` is stopped the same way as SCIP. Nothing asserts on wall-clock
time: a process that does not stop within 60 s fails the test as hung, and one that ends
because of its 60 s limit would print a time-limit status instead of "interrupted".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from compare.builders.generators import random_instance
from piper_ilp.instance import save_instance

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

pytestmark = pytest.mark.slow


def _hard_instance(path: Path) -> Path:
    inst = random_instance("layered", 10, 3, t_values=(1, 2, 4), options_per_t=2, K=16, N=16)
    save_instance(inst, path)
    return path


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            out.append(int(d.name))
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid``."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _wait_until_solving(proc: subprocess.Popen, backend: str, tmpdir: Path) -> list[int]:
    """Wait until the solver runs; return the solver processes (CBC's binary, SCIP's forked
    process; none for CP-SAT, which runs in the process itself)."""
    deadline = time.monotonic() + 120  # a guard against a broken start, not a timing check
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if backend == "cbc":
            if _processes_mentioning(str(tmpdir)):
                time.sleep(0.5)
                return _processes_mentioning(str(tmpdir))
        elif backend == "scip":  # the solve runs in a child process
            solving = [c for c in _children(proc.pid) if _cpu_seconds(c) > 1.0]
            if solving:
                return solving
        elif _cpu_seconds(proc.pid) > 4.0:  # imports and the model take about 2 s
            return []
        time.sleep(0.1)
    pytest.fail("the solver never started")


def _gone(pids: list[int]) -> bool:
    """True when none of ``pids`` is alive (a zombie counts as alive: not reaped)."""
    return not any(Path(f"/proc/{p}").exists() for p in pids)


def _env(tmpdir: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(tmpdir)
    return env


def _start_solving(cmd: list, backend: str, tmp_path: Path) -> tuple:
    """Start ``cmd`` (a solve on the hard instance) with its own TMPDIR in ``tmp_path`` and
    wait until the solver runs; the process, the solver processes and that TMPDIR."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [PYTHON, *map(str, cmd)],
        env=_env(tmpdir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    return proc, _wait_until_solving(proc, backend, tmpdir), tmpdir


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"did not stop after the signal: {err[-2000:]}")
    return proc.returncode, out, err


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("backend", ["cbc", "cpsat", "scip"])
def test_a_signal_to_the_cli_stops_the_solve(tmp_path, backend, signum, code):
    inst = _hard_instance(tmp_path / "hard.json")
    cmd = ["-m", "piper_cli", "solve", inst, "--method", backend, "--time-limit", 60, "--force"]
    proc, solvers, tmpdir = _start_solving(cmd, backend, tmp_path)
    proc.send_signal(signum)
    got, out, err = _finish(proc)
    assert got == code, (got, out, err)
    assert "interrupted" in err and "time limit" not in out, (out, err)
    assert "Traceback" not in err
    assert _processes_mentioning(str(tmpdir)) == [] and _gone(solvers)
    assert _processes_mentioning(str(inst)) == []  # (SCIP's process has the CLI's command line)
    assert list(tmpdir.iterdir()) == []


DRIVER = textwrap.dedent(
    """
    import signal, sys
    from piper_ilp.instance import load_instance
    from piper_ilp.milp import solve_milp

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    inst = load_instance(sys.argv[1])
    try:
        sol = solve_milp(inst, backend=sys.argv[2], time_limit=60, force=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
        sys.exit(143)
    print("returned", sol.status)
    """
)


@pytest.mark.parametrize("backend", ["cbc", "cpsat", "scip"])
def test_sigterm_through_a_handler_stops_the_solve(tmp_path, backend):
    inst = _hard_instance(tmp_path / "hard.json")
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc, solvers, tmpdir = _start_solving([driver, inst, backend], backend, tmp_path)
    proc.send_signal(signal.SIGTERM)
    code, out, err = _finish(proc)
    assert code == 143 and out.strip() == "KeyboardInterrupt", (code, out, err)
    assert _processes_mentioning(str(tmpdir)) == [] and _gone(solvers)
    assert _processes_mentioning(str(inst)) == []
    assert list(tmpdir.iterdir()) == []


@pytest.mark.parametrize("backend", ["cbc", "cpsat", "scip"])
def test_a_finished_solve_leaves_no_files_and_no_process(tmp_path, backend):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    inst = tmp_path / "small.json"
    inst.write_bytes((REPO / "inputs" / "small.json").read_bytes())
    done = subprocess.run(
        [PYTHON, "-m", "piper_cli", "solve", str(inst), "--method", backend],
        env=_env(tmpdir),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "optimal" in done.stdout
    assert list(tmpdir.iterdir()) == []
    assert _processes_mentioning(str(tmpdir)) == [] and _processes_mentioning(str(inst)) == []


def _pipedream_graph(path: Path) -> Path:
    """A 40-layer chain profile on which PipeDream's MILP (24 workers, the memory rule at
    1e8 bytes) runs for well over 30 s."""
    from compare.baselines.pipedream import random_pd_graph
    from piper_ilp.pipedream import graph_text

    path.write_text(graph_text(random_pd_graph("chain", 40, 1)))
    return path


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_pipedreams_milp_in_verify(tmp_path, signum, code):
    # SCIP's own Ctrl-C handler used to swallow the interrupt there: "pressed CTRL-C" on
    # stdout, the MILP "not solved" and the command going on to exit 3
    graph = _pipedream_graph(tmp_path / "graph.txt")
    args = ["verify", "--model", "pipedream", str(graph), "--devices", "24"]
    proc = subprocess.Popen(
        [PYTHON, "-m", "piper_cli", *args, "--bandwidth", "1e9", "--memory", "1e8"],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    solvers = _wait_until_solving(proc, "scip", tmp_path)
    proc.send_signal(signum)
    got, out, err = _finish(proc)
    assert got == code and "interrupted" in err and "CTRL-C" not in out, (got, out, err)
    assert "Traceback" not in err and _gone(solvers)
    assert _processes_mentioning(str(graph)) == []
