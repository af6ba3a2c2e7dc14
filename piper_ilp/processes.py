"""Child processes bound to their parent's life: killed at once when it is interrupted, and
by the kernel when it dies.

:func:`run_in_child` runs a solver in a forked process (SCIP through OR-Tools' MPSolver:
:mod:`piper_ilp.milp.scip`, :mod:`piper_ilp.pipedream.milp`), which a KeyboardInterrupt
stops with SIGKILL; :func:`set_parent_death_signal` is also used by the guarded workers of
campaigns and the bench (:mod:`compare.experiments.worker_guard`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from piper_ilp.errors import InputError, InternalError

__all__ = ["interrupts_held", "run_in_child", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux:
    ``prctl(PR_SET_PDEATHSIG)``, which works even when the parent is SIGKILLed; strictly,
    when the thread that started this process ends).

    Returns
    -------
    bool
        False where that is not available.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the body runs, then deliver the first that came.

    For the few statements that start a process and keep its handle (``proc =
    subprocess.Popen(...)``): an interrupt raised inside them would leave a process running
    that nobody knows of. The signals keep their handlers' meaning (a Python handler runs
    when the body has ended, so a KeyboardInterrupt is raised from the ``with``); nothing is
    inherited by a started process, since an exec resets caught signals. Outside the main
    thread, or where a signal's handler was not set from Python, that signal is not held.

    Examples
    --------
    >>> import signal
    >>> before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
    >>> started = []
    >>> try:
    ...     with interrupts_held():
    ...         signal.raise_signal(signal.SIGINT)
    ...         started.append("handle kept")
    ... except KeyboardInterrupt:
    ...     print(started, "then interrupted")
    ['handle kept'] then interrupted
    >>> _ = signal.signal(signal.SIGINT, before)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    old = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:
            old[signum] = signal.signal(signum, lambda s, _frame: came.append(s))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if came:
            signal.raise_signal(came[0])


def run_in_child(
    target: Callable[..., Any],
    args: tuple = (),
    *,
    on_message: Callable[[Any], None] | None = None,
    tick: Callable[[], None] | None = None,
    name: str = "solver",
) -> Any:
    """Call ``target(*args, report)`` in a child process forked for it (``os.fork``: it
    works in a campaign's daemonic worker too), and return what it returns (pickled back
    through a pipe); ``report(message)`` in the child calls ``on_message(message)`` here,
    as the messages come. The child leads its own process group (a Ctrl-C at the terminal
    reaches only this process), takes the default action on SIGINT and SIGTERM, and is
    SIGKILLed by the kernel when this process dies. On any exception here, a
    KeyboardInterrupt included, the child is SIGKILLed (native threads and all) and reaped
    before the exception goes on. ``tick()`` runs about ten times a second while the child
    works.

    Raises
    ------
    InputError, InternalError
        Raised by ``target`` (any other exception of the child becomes an InternalError
        naming it), or an InternalError when the child dies without an answer.
    """
    from multiprocessing.connection import Pipe

    receive, send = Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's frames
        code = 1
        try:
            receive.close()
            code = _child_main(target, args, send)
        finally:
            os._exit(code)
    send.close()
    try:
        while True:
            if not receive.poll(0.1):
                if tick is not None:
                    tick()
                continue
            try:
                kind, payload = receive.recv()
            except EOFError:
                raise InternalError(
                    f"{name}: the solver process ended without an answer "
                    f"({_ended(os.waitpid(pid, 0)[1])})"
                ) from None
            if kind == "message":
                if on_message is not None:
                    on_message(payload)
            elif kind == "error":
                raise payload
            else:
                return payload
    except BaseException:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        raise
    finally:
        receive.close()
        try:
            os.waitpid(pid, 0)  # reap it (it has ended, or was SIGKILLed)
        except ChildProcessError:  # reaped above
            pass


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _child_main(target: Callable[..., Any], args: tuple, send) -> int:
    """The child of :func:`run_in_child`; returns its exit code."""
    os.setpgid(0, 0)
    set_parent_death_signal(signal.SIGKILL)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    try:
        result = target(*args, lambda message: send.send(("message", message)))
        send.send(("result", result))
        return 0
    except BaseException as exc:  # handed to the parent, which raises it
        if not isinstance(exc, (InputError, InternalError)):
            exc = InternalError(f"{type(exc).__name__}: {exc}")
        send.send(("error", exc))
        return 1
    finally:
        send.close()
