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

__all__ = [
    "descendants",
    "end_processes",
    "guard_worker",
    "kill_group",
    "kill_trees",
    "process_tree",
    "set_parent_death_signal",
    "stop_workers",
]


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


def descendants(pid: int) -> list[tuple[int, str]]:
    """``pid``'s live descendants (children, grandchildren, ...) as (pid, start time) pairs,
    from Linux's ``/proc/PID/task/TID/children``; empty where that is not available.

    A process that leaves its parent's group or session (CBC, SCIP's solver process) is
    still its parent's child: it is found here, and only here, while its parent lives."""
    out: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                start = _stat(kid)
                if start is not None and start[0] not in ("Z", "X"):
                    out.append((kid, start[1]))
                    todo.append(kid)
    return out


def process_tree(pid: int) -> list[tuple[int, str]]:
    """``pid`` itself and its live descendants (:func:`descendants`), as (pid, start time)
    pairs; empty when it is gone."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return []
    return [(pid, st[1])] + descendants(pid)


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of ``pid`` from ``/proc/PID/stat``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _running(pid: int, start: str) -> bool:
    """True while the process ``pid`` that started at ``start`` runs (a zombie has ended;
    a pid reused since has another start time)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X") and st[1] == start


def end_processes(procs: list[tuple[int, str]], wait: float = 30.0) -> list[int]:
    """SIGKILL every process of ``procs`` (from :func:`descendants`, taken earlier) that
    still runs, and wait until none does, at most ``wait`` seconds (SIGKILL cannot be
    caught: only the kernel's tear-down takes time). Returns the pids still running after
    the wait (normally none)."""
    for pid, start in procs:
        if _running(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    deadline = time.monotonic() + wait
    left = [(p, t) for p, t in procs if _running(p, t)]
    while left and time.monotonic() < deadline:
        time.sleep(0.01)
        left = [(p, t) for p, t in left if _running(p, t)]
    return [p for p, _ in left]


def kill_trees(pids: list[int], wait: float = 30.0) -> list[int]:
    """End each child process of ours among ``pids`` and everything it started, at once:
    SIGSTOP it first (a stopped process starts nothing more), then take its tree
    (:func:`process_tree`), SIGKILL it all and wait until it has ended
    (:func:`end_processes`). A pid that is not our child (gone, or reused since) is left
    alone. Returns the pids still running after the wait (normally none)."""
    mine = [pid for pid in pids if _parent(pid) == os.getpid()]
    for pid in mine:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    return end_processes([p for pid in mine for p in process_tree(pid)], wait)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
