"""Worker processes that never outlive their parent (used by campaigns and the bench).

A worker calls :func:`guard_worker` first: it ignores SIGINT (the parent decides what an
interrupt does), leads its own process group (so that :func:`kill_group` also ends the
subprocesses it started, e.g. a MILP backend's CBC), asks the kernel for SIGKILL when
its parent dies (``PR_SET_PDEATHSIG``, Linux; this works even when the parent is
SIGKILLed) and starts a watchdog thread that checks the parent pid (the fallback
elsewhere, and for a parent that died before the request took effect).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["guard_worker", "kill_group", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux);
    False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_group() -> None:
    """End this worker and, when it leads its own process group, everything it started."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    except OSError:
        pass
    os._exit(1)


def _watch_parent(parent_pid: int, period: float) -> None:
    while True:
        time.sleep(period)
        if os.getppid() != parent_pid:
            _die_with_group()


def guard_worker(parent_pid: int, watch_period: float = 0.5) -> None:
    """Bind this (worker) process to ``parent_pid``'s life; see the module docstring."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        _die_with_group()
    threading.Thread(target=_watch_parent, args=(parent_pid, watch_period), daemon=True, name="parent-watchdog").start()


def kill_group(pid: int | None) -> None:
    """SIGKILL the process group a guarded worker leads (itself and its subprocesses);
    nothing when it is already gone."""
    if pid is None:
        return
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
