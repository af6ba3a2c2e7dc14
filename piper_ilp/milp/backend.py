"""What a backend takes and returns, and the machinery every backend shares: running a
solver so that Ctrl-C (KeyboardInterrupt) stops it, and throttled progress lines."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from piper_ilp.errors import InputError
from piper_ilp.solution import Status

__all__ = [
    "BACKENDS",
    "Settings",
    "Answer",
    "OutOfRange",
    "run_stoppable",
    "Progress",
    "write_model_file",
]

#: The backends :func:`~piper_ilp.milp.solve.solve_milp` accepts (here, where the method
#: registry can read them without loading the model and networkx).
BACKENDS = ("cpsat", "cbc", "scip")


@dataclass(frozen=True)
class Settings:
    """One backend call: ``time_limit`` seconds (None: none), ``threads``, ``write_model``
    (a path or None), ``hint`` (values of binaries and integers, or None), ``progress``,
    ``careful`` (the backend's presolve off, for a second opinion)."""

    time_limit: float | None
    threads: int
    write_model: str | Path | None = None
    hint: dict[int, float] | None = None
    progress: bool = False
    careful: bool = False  # presolve off: a second opinion on an "infeasible" claim


@dataclass
class Answer:
    """A backend's claim, before certification.

    ``status`` as the backend reports it (OPTIMAL, FEASIBLE, INFEASIBLE or UNKNOWN);
    ``values`` of the binaries and integers (rounded) when it has a plan; ``objective``
    its value of that plan and ``bound`` its lower bound on the model's optimum, both in
    seconds (``bound`` already lowered by what the backend's own rounding can hide);
    ``resolution`` how far (seconds) ``objective`` may sit from the plan's true TPS;
    ``stopped`` why it stopped early ("time limit"), ``seconds`` its wall time;
    ``exact_bound`` when ``bound`` holds whatever the scale (integer arithmetic).
    """

    status: Status
    values: dict[int, float] | None = None
    objective: float | None = None
    bound: float | None = None
    resolution: float = 0.0
    stopped: str | None = None
    seconds: float = 0.0
    exact_bound: bool = False
    notes: list[str] = field(default_factory=list)


class OutOfRange(Exception):
    """The backend cannot represent this model's numbers; the message says why."""


def run_stoppable(
    solve: Callable[[], object], stop: Callable[[], None], tick: Callable[[], None] | None = None
):
    """Run ``solve()`` in a worker thread and wait for it in the main thread, so that a
    KeyboardInterrupt (Ctrl-C, or a signal handler that raises it) reaches Python at
    once: then ``stop()`` asks the solver to stop, the worker is joined and the
    KeyboardInterrupt is raised again. ``tick()`` runs about ten times a second."""
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["result"] = solve()
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc

    before = _os_threads()
    worker = threading.Thread(target=work, name="milp-backend", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
            if tick is not None:
                tick()
    except BaseException:
        stop()
        while worker.is_alive():
            try:
                worker.join(0.1)
            except KeyboardInterrupt:  # a second Ctrl-C while stopping: keep stopping
                stop()
        # a stopped solver's own threads can outlive its return by a moment; exiting
        # the interpreter while they run aborts it (seen with CP-SAT), so wait for them
        deadline = time.monotonic() + 10.0
        while before is not None and (_os_threads() or 0) > before and time.monotonic() < deadline:
            try:
                time.sleep(0.02)
            except KeyboardInterrupt:
                pass
        raise
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("result")


def _os_threads() -> int | None:
    """This process's OS threads (None where /proc is not available)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


class Progress:
    """Incumbent and bound lines on stderr, at most once a second (when enabled)."""

    def __init__(self, backend: str, enabled: bool, interval: float = 1.0):
        self.backend = backend
        self.enabled = enabled
        self.interval = interval
        self._last = 0.0
        self._t0 = time.perf_counter()
        self.incumbent: float | None = None
        self.bound: float | None = None

    def update(
        self, incumbent: float | None = None, bound: float | None = None, force: bool = False
    ) -> None:
        if incumbent is not None:
            self.incumbent = incumbent
        if bound is not None:
            self.bound = bound
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        inc = "-" if self.incumbent is None else f"{self.incumbent:.9g}"
        bnd = "-" if self.bound is None else f"{self.bound:.9g}"
        print(
            f"{self.backend}: {now - self._t0:6.1f} s  incumbent {inc} s  bound {bnd} s",
            file=sys.stderr,
            flush=True,
        )


def write_model_file(path: str | Path, text: str) -> None:
    """Write a model file (atomically); a path that cannot be written is an InputError."""
    from piper_ilp.files import atomic_write_text

    try:
        atomic_write_text(path, text)
    except InputError as exc:
        raise InputError(f"cannot write the model to {path}: {exc}") from None
