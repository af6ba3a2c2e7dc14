"""Standard output that cannot be written, for every command, in one place.

:func:`install` (called by :func:`piper_cli.entry.main` before anything prints) puts a
``sys.stdout`` over the same descriptor whose failed writes raise :class:`StdoutError`,
so that the CLI can tell a full disk or a closed pipe on standard output from any other
OSError (and so that click, which turns a broken pipe into a silent exit 1 of its own,
lets it through). :func:`report` then ends the run the way Unix tools do:

* the reader closed the pipe (EPIPE, e.g. ``piper-ilp random | head -c1``): no message,
  exit status 141 (128 + SIGPIPE, what a shell reports for a tool killed by SIGPIPE);
* any other failure (ENOSPC on ``> /dev/full``, EIO, ...): one line on stderr,
  ``piper-ilp: cannot write to standard output: No space left on device``, exit 2.

Either way standard output is then pointed at /dev/null, so that what is still buffered
cannot fail again (or print "Exception ignored") when the interpreter exits.

Standard library only, like :mod:`piper_cli.interrupts`.
"""

from __future__ import annotations

import errno
import io
import os
import sys

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_WRITE_ERROR", "StdoutError", "finish", "install", "report"]

#: Exit status after the reader of standard output went away: 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141
#: Exit status after any other failed write to standard output (bad input/output: 2).
EXIT_WRITE_ERROR = 2


class StdoutError(OSError):
    """A write to standard output failed; ``reason`` is the OSError it raised. Its own
    errno is None (click would otherwise handle a broken pipe itself, with exit 1)."""

    def __init__(self, reason: OSError):
        super().__init__(f"cannot write to standard output: {reason.strerror or reason}")
        self.reason = reason


class _StdoutRaw(io.FileIO):
    """The descriptor of standard output; an OSError of a write becomes StdoutError."""

    def write(self, data) -> int | None:
        try:
            return super().write(data)
        except BlockingIOError:  # a non-blocking descriptor: the buffer layer retries
            raise
        except OSError as exc:
            raise StdoutError(exc) from exc


class _State:
    fd: int | None = None


_state = _State()


def install() -> None:
    """Replace ``sys.stdout`` by a text stream over the same descriptor, with the same
    encoding and buffering, whose failed writes raise :class:`StdoutError`. Nothing is
    done when standard output is closed or not a real file."""
    out = sys.stdout
    if not isinstance(out, io.TextIOWrapper):
        return
    try:
        fd = out.fileno()
        out.flush()
    except (OSError, ValueError):
        return
    raw = _StdoutRaw(fd, "w", closefd=False)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=out.encoding,
        errors=out.errors,
        newline="\n",
        line_buffering=out.line_buffering,
        write_through=out.write_through,
    )
    _state.fd = fd


def report(exc: StdoutError) -> int:
    """End a run whose standard output failed: the exit status (141 for a closed pipe,
    quietly; 2 with one line on stderr otherwise); standard output now goes to /dev/null."""
    broken_pipe = getattr(exc.reason, "errno", None) == errno.EPIPE
    if not broken_pipe:
        try:
            sys.stderr.write(f"piper-ilp: {exc}\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr fails too: the status still tells
            pass
    fd = _state.fd if _state.fd is not None else 1
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except OSError:
        pass
    return EXIT_BROKEN_PIPE if broken_pipe else EXIT_WRITE_ERROR


def finish(code: int) -> int:
    """Flush standard output before the interpreter exits (a failure at exit would print
    "Exception ignored" and exit 120); the exit status: ``code``, or when the flush fails
    and ``code`` is 0, :func:`report`'s."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except StdoutError as exc:
        failed = report(exc)
        return code or failed
    except (OSError, ValueError):
        pass
    return code
