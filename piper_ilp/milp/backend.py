"""The interface of a MILP backend (``solve(ScaledModel, Settings) -> Answer``) and what
every backend shares: running a solver so that Ctrl-C stops it (:func:`run_stoppable`),
progress lines (:class:`Progress`) and writing the model file (:func:`write_model_file`)."""

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
    """What one backend call is asked (built by :func:`~piper_ilp.milp.certify.certify`
    per round; not the user-facing :class:`piper_ilp.settings.Settings`).

    Parameters
    ----------
    time_limit : float or None
        Seconds left for this call; None: no limit.
    threads : int
        Solver threads.
    write_model : str or Path, optional
        Where to write the model the backend is given (its own format).
    hint : dict, optional
        Values of the binary and integer variables (by index) to start from.
    progress : bool
        Print incumbent and bound lines on stderr.
    careful : bool
        The backend's presolve off: a second opinion on an "infeasible" claim.
    """

    time_limit: float | None
    threads: int
    write_model: str | Path | None = None
    hint: dict[int, float] | None = None
    progress: bool = False
    careful: bool = False  # presolve off: a second opinion on an "infeasible" claim


@dataclass
class Answer:
    """A backend's claim, before certification (:mod:`piper_ilp.milp.certify`).

    Attributes
    ----------
    status : Status
        As the backend reports it: OPTIMAL, FEASIBLE, INFEASIBLE or UNKNOWN.
    values : dict or None
        The values of the binaries and integers (rounded), by variable index, when it has
        a plan.
    objective : float or None
        Its value of that plan, in seconds.
    bound : float or None
        Its lower bound on the model's optimum, in seconds, already lowered by what the
        backend's own rounding can hide.
    resolution : float
        How far (seconds) ``objective`` may sit from the plan's true value.
    stopped : str or None
        Why it stopped early (``"time limit"``).
    seconds : float
        Its wall time.
    exact_bound : bool
        ``bound`` holds whatever the scale (integer arithmetic: CP-SAT).
    notes : list of str
        Remarks for the report.
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
    """Raised by a backend that cannot represent this model's numbers (the message says
    why); :func:`~piper_ilp.milp.certify.certify` turns it into Status.OUT_OF_RANGE."""


def run_stoppable(
    solve: Callable[[], object],
    stop: Callable[[], None],
    tick: Callable[[], None] | None = None,
    deadline: float | None = None,
):
    """Run a blocking solver call so that Ctrl-C stops it.

    ``solve()`` runs in a worker thread while the main thread waits, so that a
    KeyboardInterrupt (Ctrl-C, or a signal handler that raises it) reaches Python at once:
    then ``stop()`` asks the solver to stop, the worker is joined (a second Ctrl-C calls
    ``stop()`` again), the solver's own threads are given up to 10 s to end, and the
    exception is raised again.

    Parameters
    ----------
    solve : callable
        The solver call, no arguments.
    stop : callable
        Asks the running solver to stop (e.g. CP-SAT's ``stop_search``).
    tick : callable, optional
        Runs about ten times a second while waiting (progress).
    deadline : float, optional
        A ``time.monotonic()`` instant: ``stop()`` is called once when the solver is
        still running then (a solver that overruns its own time limit), and the wait goes
        on until it returns.

    Returns
    -------
    any
        What ``solve()`` returned.

    Raises
    ------
    BaseException
        Whatever ``solve()`` raised, or the KeyboardInterrupt (or other exception) that
        interrupted the wait.

    Examples
    --------
    >>> run_stoppable(lambda: 6 * 7, stop=lambda: None)
    42
    """
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
            if deadline is not None and time.monotonic() > deadline and worker.is_alive():
                stop()
                deadline = None
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
    """Incumbent and bound lines on stderr, at most once per ``interval`` seconds.

    Parameters
    ----------
    backend : str
        Begins each line.
    enabled : bool
        When False, :meth:`update` only records the values.
    interval : float
        Least seconds between two lines (unless forced).
    """

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
        """Record a new incumbent and / or bound and print a line when due.

        Parameters
        ----------
        incumbent, bound : float, optional
            Seconds; None keeps the last value.
        force : bool
            Print now (when enabled), even before ``interval`` has passed.
        """
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
    """Write a model file (atomically) for a person to read.

    Parameters
    ----------
    path : str or Path
    text : str
        The model in the backend's format.

    Raises
    ------
    InputError
        The path cannot be written: one line naming it.
    """
    from piper_ilp.files import atomic_write_text

    try:
        atomic_write_text(path, text)
    except InputError as exc:
        raise InputError(f"cannot write the model to {path}: {exc}") from None
