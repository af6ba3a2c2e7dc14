"""SIGINT and SIGTERM for every command, in one place.

:func:`install` (called first thing by :func:`piper_cli.entry.main`) makes both signals raise
:class:`KeyboardInterrupt` in the main thread and records which one came. Library code
(the DP, the MILP backends, campaign workers) therefore handles only KeyboardInterrupt:
it kills its children, removes its temporary files and re-raises. At the top, the CLI
prints one line, ``piper-ilp: interrupted``, and exits 128 + the signal's number
(130 for SIGINT, 143 for SIGTERM) -- see :func:`report`.

A process forked from the CLI (a multiprocessing worker) inherits the handler; there it
takes the signal's default action instead (the worker ends), so that only the main
process turns signals into KeyboardInterrupt.

This module imports nothing beyond the standard library: it is installed before the
command modules load, so that a signal during start-up is handled the same way.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["install", "pending", "report", "exit_code", "leave", "EXIT_CODES"]

#: The exit statuses of an interrupted command: 128 + SIGINT, 128 + SIGTERM.
EXIT_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)


class _State:
    """What came: the first signal's number (None: no signal yet), whether the one line
    was printed, and the process that installed the handlers."""

    signum: int | None = None
    reported: bool = False
    pid: int | None = None


_state = _State()


def _raise_interrupt(signum: int, frame) -> None:  # noqa: ARG001 (the signal module's signature)
    if os.getpid() != _state.pid:  # a forked child inherited the handler: the default action
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _state.signum is None:
        _state.signum = signum
    raise KeyboardInterrupt


def install() -> None:
    """Make SIGINT and SIGTERM raise KeyboardInterrupt in this process (main thread only,
    as Python delivers signals there), recording which signal came."""
    _state.pid = os.getpid()
    _state.signum = None
    _state.reported = False
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _raise_interrupt)


def pending() -> bool:
    """True when a signal came and its line has not been printed yet."""
    return _state.signum is not None and not _state.reported


def exit_code() -> int:
    """128 + the signal's number: 130 for SIGINT (also when KeyboardInterrupt came without
    a signal, e.g. raised by code), 143 for SIGTERM."""
    return 128 + (_state.signum if _state.signum is not None else signal.SIGINT)


def leave(code: int) -> None:
    """End the process now with ``code``: flush standard output and error, then
    ``os._exit``, without the interpreter's finalization.

    For an interrupted command, whose clean-up already ran while the KeyboardInterrupt
    unwound (solver processes killed, temporary folders removed, workers stopped, files
    written atomically or not at all). Finalization would then only free every object one
    by one: with OR-Tools and a model loaded that is most of the CPU an interrupt costs
    (docs/usage.md, "Exit statuses, interrupts and output files").
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _exit_now(signum: int, frame) -> None:  # noqa: ARG001
    leave(exit_code())


def report() -> int:
    """Print ``piper-ilp: interrupted`` once on stderr and return the exit status.

    From here on a further SIGINT or SIGTERM (a second Ctrl-C while the process is ending)
    exits at once with the same status instead of raising inside the clean-up. Without
    :func:`install` (the app called from Python, e.g. by tests) it only prints.
    """
    installed = _state.pid == os.getpid()
    if installed and _state.reported:
        return exit_code()
    blocked = False
    if installed:
        try:  # no signal between the line and the new handlers: the line is printed once
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            blocked = True
        except (AttributeError, OSError, ValueError):
            pass
    try:
        try:
            if sys.stderr.isatty():
                sys.stderr.write("\r\x1b[K")  # clear a progress line the interrupted solve left
            sys.stderr.write("piper-ilp: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed: the status still tells
            pass
        if installed:
            _state.reported = True
            try:
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, _exit_now)
            except ValueError:  # not the main thread
                pass
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    return exit_code()
