"""Worker processes that never outlive their parent (used by campaigns and the bench).

A worker calls :func:`guard_worker` first: it ignores SIGINT (the parent decides what an
interrupt does), turns SIGTERM into KeyboardInterrupt (so that a parent stopping its
workers lets the running job clean up: ``finally`` blocks run, a MILP backend kills its
solver process and removes its temporary folder; a second SIGTERM ends the worker at once),
leads its own process group (so that :func:`kill_group` also ends the subprocesses it
started in that group), asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``, Linux; this works even when the parent is SIGKILLed) and starts a
watchdog thread that checks the parent pid (the fallback elsewhere, and for a parent that
died before the request took effect).

A parent stops its workers with :func:`stop_workers`: SIGTERM first, SIGKILL to its group
when it is not gone within the grace period.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from piper_ilp.processes import set_parent_death_signal

__all__ = ["guard_worker", "kill_group", "set_parent_death_signal", "stop_workers"]


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


def _terminate(signum, frame) -> None:  # noqa: ARG001 (the signal module's signature)
    """SIGTERM in a worker: KeyboardInterrupt in its main thread, so that the job's clean-up
    runs as it unwinds; a second SIGTERM takes the default action (the worker ends)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise KeyboardInterrupt


def guard_worker(parent_pid: int, watch_period: float = 0.5) -> None:
    """Bind this (worker) process to ``parent_pid``'s life; see the module docstring. The
    worker's loop should end quietly on KeyboardInterrupt (SIGTERM)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        _die_with_group()
    threading.Thread(
        target=_watch_parent, args=(parent_pid, watch_period), daemon=True, name="parent-watchdog"
    ).start()


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


def stop_workers(procs, grace: float = 5.0) -> None:
    """Stop guarded workers (``multiprocessing`` processes): SIGTERM to each, so that its
    running job cleans up (temporary folders, solver processes), a wait of at most ``grace``
    seconds for all of them, then SIGKILL to the group of each one still alive (itself and
    its subprocesses in that group)."""
    for proc in procs:
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        kill_group(proc.pid if proc.exitcode is None else None)
