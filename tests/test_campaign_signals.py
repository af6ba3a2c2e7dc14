"""``piper-ilp campaign`` under real signals, sent to a real campaign process.

Each test starts ``python -m piper_cli campaign`` with two workers in a subprocess whose
environment carries a unique mark (inherited by the workers), waits until a few results
are written, signals the campaign process, and then checks: the exit status, the one
"interrupted" line, that no process with the mark is left once the command has exited (the
workers and the solvers they started ended before it), that
every line of results.jsonl is whole JSON, and that ``--resume`` ends with exactly
``count`` distinct instances. Also: the lock that refuses a second campaign on one
folder, and an unwritable ``--out``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from builders import run_piper

from compare.experiments.campaign import RESULTS, make_specs

REPO = Path(__file__).resolve().parents[1]
MARK_VAR = "PIPER_CAMPAIGN_TEST_MARK"
COUNT = 200
ARGS = [
    "--count",
    str(COUNT),
    "--seed",
    "5",
    "--nodes",
    "4-6",
    "--methods",
    "dp,brute",
    "--workers",
    "2",
    "--no-progress",
]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/environ").exists(), reason="needs Linux /proc to find leftover processes"
)


def _kill(proc: subprocess.Popen) -> None:
    """Kill ``proc`` unless it has ended (the guard of every test's ``finally``)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _env(mark: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env[MARK_VAR] = mark
    return env


def _start(out: Path, mark: str, *extra: str, args: list[str] = ARGS) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "piper_cli", "campaign", *args, "--out", str(out), *extra],
        cwd=REPO,
        env=_env(mark),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _marked(mark: str) -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process whose environment has the mark."""
    needle = f"{MARK_VAR}={mark}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            found[int(entry.name)] = int(fields[1])
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _lines(out: Path) -> list[str]:
    path = out / RESULTS
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _wait_for_results(proc: subprocess.Popen, out: Path, n: int = 3, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while len(_lines(out)) < n:
        assert proc.poll() is None, f"the campaign ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "no results in time"
        time.sleep(0.02)


def _wait_gone(mark: str, limit: float = 15.0) -> dict[int, int]:
    deadline = time.monotonic() + limit
    left = _marked(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _marked(mark)
    return left


def _interrupt_then_resume(
    tmp_path: Path, signum: int, group: bool = False, scheduler: str = "local"
) -> tuple[int, str]:
    """Signal the campaign process (``group``: its whole process group, as Ctrl-C on a
    terminal does), then resume it."""
    out = tmp_path / "camp"
    mark = uuid.uuid4().hex
    proc = _start(out, mark, "--scheduler", scheduler)
    try:
        _wait_for_results(proc, out)
        workers = [
            pid
            for pid, ppid in _marked(mark).items()
            if ppid == proc.pid and b"spawn_main" in _cmdline(pid)
        ]
        assert len(workers) == 2, _marked(mark)  # the two workers are running
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill(proc)
    if signum == signal.SIGKILL:  # the workers end by themselves (the parent-death signal)
        left = _wait_gone(mark)
    else:  # the command returns only when its workers have ended: nothing is left at once
        left = _marked(mark)
    assert not left, f"processes left after the campaign ended: {left}"
    lines = _lines(out)
    assert 0 < len(lines) < COUNT
    recs = [json.loads(line) for line in lines]  # every line is whole JSON
    assert len({r["id"] for r in recs}) == len(recs)
    # --resume finishes the campaign: exactly COUNT distinct instances, none twice
    done = run_piper(
        "campaign", *ARGS, "--out", out, "--resume", cwd=REPO, env=_env(mark), timeout=600
    )
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["id"] for line in _lines(out)]
    assert len(ids) == COUNT and sorted(ids) == sorted(
        s.id for s in make_specs(COUNT, 5, nodes=(4, 6))
    )
    assert json.loads((out / "summary.json").read_text())["instances"] == COUNT
    assert f"{COUNT} instances" in done.stdout
    assert not _wait_gone(mark)
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, group, status, scheduler",
    [
        (signal.SIGINT, False, 130, "local"),
        (signal.SIGINT, True, 130, "local"),
        (signal.SIGTERM, False, 143, "local"),
        (signal.SIGINT, False, 130, "processes"),
        (signal.SIGTERM, True, 143, "processes"),
    ],
)
def test_signal_ends_the_campaign_and_resume_completes_it(
    tmp_path, signum, group, status, scheduler
):
    code, err = _interrupt_then_resume(tmp_path, signum, group, scheduler)
    assert code == status
    assert err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err, err


@pytest.mark.slow
def test_workers_die_with_a_killed_campaign(tmp_path):
    code, err = _interrupt_then_resume(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL


@pytest.mark.slow
def test_a_second_campaign_on_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "camp"
    mark = uuid.uuid4().hex
    first = _start(out, mark, "--count", "100000")  # still running while the second tries
    try:
        _wait_for_results(first, out)
        for extra in ((), ("--resume",)):
            second = run_piper(
                "campaign", *ARGS, "--out", out, *extra, cwd=REPO, env=_env(mark), timeout=120
            )
            assert second.returncode == 2, second.stderr
            assert second.stderr.count("\n") == 1 and "another campaign" in second.stderr, (
                second.stderr
            )
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    finally:
        _kill(first)
    assert first.returncode == 130
    assert not _wait_gone(mark)
    recs = [json.loads(line) for line in _lines(out)]
    assert len({r["id"] for r in recs}) == len(recs)  # nothing written twice


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_unwritable_out_is_refused_before_any_work(tmp_path, where):
    if where == "under-a-file":
        blocker = tmp_path / "file"
        blocker.write_text("x")
        out = blocker / "camp"
    else:
        out = Path("/proc/piper-campaign-test")
    r = subprocess.run(
        [sys.executable, "-m", "piper_cli", "campaign", *ARGS, "--out", str(out)],
        cwd=REPO,
        env=_env(uuid.uuid4().hex),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and str(out) in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
    assert not out.exists()


def _cbc_available() -> bool:
    try:
        from piper_ilp.milp.cbc import cbc_path

        cbc_path()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _cbc_available(), reason="needs PuLP's bundled CBC")
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_campaign_leaves_no_solver_temporary_folder(tmp_path, signum, status):
    # CBC's model goes to $TMPDIR/piper-cbc-*; the workers used to be SIGKILLed, so their
    # clean-up never ran (the folder and the CBC process itself were left behind)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "camp"
    mark = uuid.uuid4().hex
    env = dict(_env(mark), TMPDIR=str(tmp))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "piper_cli",
            "campaign",
            "--count",
            "20",
            "--seed",
            "3",
            "--nodes",
            "6-9",
            "--methods",
            "dp,cbc",
            "--workers",
            "2",
            "--scheduler",
            "processes",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob("piper-cbc-*")):  # a worker is in CBC
            assert proc.poll() is None, f"the campaign ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "CBC never started"
            time.sleep(0.01)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill(proc)
    assert proc.returncode == status and "interrupted" in err, err
    assert not _wait_gone(mark), "processes left (workers or CBC)"
    assert list(tmp.iterdir()) == []


def _solving(mark: str, campaign: int) -> list[int]:
    """The marked processes two levels below the campaign: solvers started by a worker (CBC,
    SCIP's forked solver process)."""
    found = _marked(mark)
    return [pid for pid, ppid in found.items() if found.get(ppid) == campaign]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["local", "processes"])
@pytest.mark.parametrize("method", ["cbc", "scip"])
def test_no_solver_process_outlives_an_interrupted_campaign(tmp_path, method, scheduler):
    # a dask worker runs its job in a thread, which cannot clean up: its CBC process (in a
    # session of its own) used to be left running after the campaign had exited
    out = tmp_path / "camp"
    mark = uuid.uuid4().hex
    args = ["--count", "20", "--seed", "3", "--nodes", "8-10", "--methods", f"dp,{method}"]
    args += ["--workers", "2", "--no-progress", "--scheduler", scheduler]
    proc = _start(out, mark, args=args)
    try:
        deadline = time.monotonic() + 120
        while not _solving(mark, proc.pid):
            assert proc.poll() is None, f"the campaign ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "no solver process started"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        _kill(proc)
    assert proc.returncode == 130 and err.count("\n") == 1 and "interrupted" in err, err
    left = _marked(mark)  # at once: the command returned only when its processes had ended
    assert not left, f"processes left after the campaign ended: {left}"
