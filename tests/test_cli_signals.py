"""SIGINT and SIGTERM to a real ``python -m piper_cli solve`` process: one line on stderr,
exit 130 / 143, no traceback, the process gone promptly, finished results kept.

The long-running instance is a 60-layer random chain for the DP (many candidate stages
for every (d, t) pair), so that the solve is still running when the signal comes; the
process is killed at the end of every test whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import INPUTS, REPO

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

#: Seconds the process may take to end after the signal. The contract is 2 s; the bound is
#: generous so that a loaded machine does not make the test fail.
EXIT_BOUND = 10.0


@pytest.fixture(scope="module")
def long_instance(tmp_path_factory) -> Path:
    from compare.builders.generators import random_instance
    from piper_ilp.instance import save_instance

    path = tmp_path_factory.mktemp("signals") / "chain60.json"
    save_instance(random_instance("chain", 60, 1, K=16, N=8, memory="loose"), path)
    return path


class Proc:
    """A CLI process whose stdout and stderr are read by threads (no pipe fills up)."""

    def __init__(self, args: list[str], cwd: Path):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.p = subprocess.Popen(
            [sys.executable, "-m", "piper_cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._threads = [
            threading.Thread(target=self._read, args=(self.p.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.p.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _read(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    def wait_for_stdout_line(self, timeout: float = 120.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.out:
                return self.out[0]
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no stdout line; stderr: {''.join(self.err)}")

    def wait_until_solving(self, timeout: float = 120.0) -> None:
        """Until the DP's numpy is loaded in the process (the solve has started), then a
        little longer so that the signal lands inside the DP."""
        maps = Path(f"/proc/{self.p.pid}/maps")
        if not maps.exists():
            time.sleep(3.0)
            return
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.p.poll() is None, f"the process ended early: {''.join(self.err)}"
            try:
                if "_multiarray_umath" in maps.read_text():
                    time.sleep(0.5)
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("the solve did not start")

    def signal_and_wait(self, signum: int) -> tuple[int, float]:
        t0 = time.monotonic()
        self.p.send_signal(signum)
        code = self.p.wait(timeout=EXIT_BOUND)
        elapsed = time.monotonic() - t0
        for t in self._threads:
            t.join(timeout=5)
        return code, elapsed

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def stop_while_solving(proc: Proc, signum: int, first_line: bool = False) -> tuple[int, str | None]:
    """Wait (for the first stdout line if ``first_line``, then) until ``proc`` solves, send
    ``signum`` and return its exit status and that line; the process never outlives this."""
    line = None
    try:
        if first_line:
            line = proc.wait_for_stdout_line()
        proc.wait_until_solving()
        assert proc.p.poll() is None, (
            "the solve finished before the signal; the test needs a longer instance"
        )
        rc, _ = proc.signal_and_wait(signum)
    finally:
        proc.kill()
    return rc, line


def assert_one_interrupt_line(err: list[str]) -> None:
    text = "".join(err)
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert lines == ["piper-ilp: interrupted"], text


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_a_dp_solve(tmp_path, long_instance, signum, code):
    proc = Proc(["solve", str(long_instance), "--json"], cwd=tmp_path)
    rc, _ = stop_while_solving(proc, signum)
    assert rc == code
    assert_one_interrupt_line(proc.err)
    assert proc.out == []  # no result for the interrupted instance


def test_finished_instances_are_kept(tmp_path, long_instance):
    """`solve small long --json`: the record of the finished instance is on stdout, whole,
    when SIGINT stops the second solve."""
    proc = Proc(["solve", str(INPUTS / "small.json"), str(long_instance), "--json"], cwd=tmp_path)
    rc, first = stop_while_solving(proc, signal.SIGINT, first_line=True)
    assert rc == 130
    assert_one_interrupt_line(proc.err)
    assert len(proc.out) == 1
    rec = json.loads(first)
    assert rec["instance"].endswith("small.json") and rec["status"] == "optimal"


def test_an_interrupted_solve_leaves_the_output_file_as_it_was(tmp_path, long_instance):
    plan = tmp_path / "plan.json"
    plan.write_text('{"earlier": true}\n')
    proc = Proc(["solve", str(long_instance), "-o", str(plan)], cwd=tmp_path)
    rc, _ = stop_while_solving(proc, signal.SIGTERM)
    assert rc == 143
    assert_one_interrupt_line(proc.err)
    assert plan.read_text() == '{"earlier": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left


def test_a_second_sigint_while_ending_keeps_the_status(tmp_path, long_instance):
    """Ctrl-C twice in a row: still one line, exit 130, no traceback."""
    proc = Proc(["solve", str(long_instance)], cwd=tmp_path)
    try:
        proc.wait_until_solving()
        proc.p.send_signal(signal.SIGINT)
        proc.p.send_signal(signal.SIGINT)
        rc = proc.p.wait(timeout=EXIT_BOUND)
        for t in proc._threads:
            t.join(timeout=5)
    finally:
        proc.kill()
    assert rc == 130
    assert_one_interrupt_line(proc.err)


def test_other_commands_get_the_same_handling(tmp_path, long_instance):
    """The handlers are installed by piper_cli.main for every command: SIGTERM to
    `verify --methods dp` on the long instance gives one line and 143."""
    proc = Proc(["verify", str(long_instance), "--methods", "dp"], cwd=tmp_path)
    rc, _ = stop_while_solving(proc, signal.SIGTERM)
    assert rc == 143
    text = "".join(proc.err)
    assert "Traceback" not in text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("piper-ilp: interrupted"), text


def _frontier_chain(path: Path, nodes: int, per: int) -> None:
    """A chain whose every option choice of up to ``per`` consecutive nodes is on the
    (memory, p) frontier and whose memory holds at most ``per`` nodes per stage: the
    compiled kernel spends seconds in one call."""
    from piper_ilp.instance import instance_from_dict, option_dict, save_instance

    top = 16.0**per
    base = 2 * top
    spec = []
    for q in range(nodes):
        opts = []
        for o in range(16):
            m = o * 16.0 ** (q % per)
            sfw = {str(q - 1): 0} if q else {}
            sbw = {str(q + 1): 0} if q < nodes - 1 else {}
            opts.append(option_dict(f"o{o}", 1.0 + (top - m) / top, 0, 0, base + m, sfw, sbw))
        spec.append({"id": q, "TMPCs": {"1": opts}})
    edges = [{"sourceId": q, "destId": q + 1, "communicationCost": 0} for q in range(nodes - 1)]
    inst = {"maxDevices": 8, "maxMemoryPerDevice": per * base + top, "bandwidth": 1.0}
    inst.update(mbsInBatch=8, nodes=spec, edges=edges)
    save_instance(instance_from_dict(inst), path)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigint_inside_the_compiled_kernel(tmp_path):
    """hunt8 F2: numba runs the handler where the kernel calls back into Python and wraps
    the KeyboardInterrupt in a SystemError: the command ended with a traceback and exit
    1. Now one line and 130, once the kernel returns (it cannot stop early)."""
    path = tmp_path / "frontier.json"
    _frontier_chain(path, 12, 5)
    proc = Proc(["solve", str(path), "--method", "compiled"], cwd=tmp_path)
    try:
        end = time.monotonic() + 300
        maps = Path(f"/proc/{proc.p.pid}/maps")
        while "numba" not in maps.read_text():  # the kernel's module is loaded
            assert proc.p.poll() is None and time.monotonic() < end, "".join(proc.err)
            time.sleep(0.05)
        start = _cpu_seconds(proc.p.pid)
        while _cpu_seconds(proc.p.pid) < start + 1.5:  # (its cache loaded, the kernel runs)
            assert proc.p.poll() is None and time.monotonic() < end, "".join(proc.err)
            time.sleep(0.05)
        proc.p.send_signal(signal.SIGINT)
        rc = proc.p.wait(timeout=300)  # the kernel runs to its end first
        for t in proc._threads:
            t.join(timeout=5)
    finally:
        proc.kill()
    assert rc == 130
    assert_one_interrupt_line(proc.err)
