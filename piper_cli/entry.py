"""The ``piper-ilp`` script's entry point (:func:`main`): signals, standard output and
usage errors around the typer application of :mod:`piper_cli.commands`."""

from __future__ import annotations

__all__ = ["main", "show_compile_notice", "single_threaded_blas"]


def main() -> None:
    """Entry point of the ``piper-ilp`` script and of ``python -m piper_cli``.

    SIGINT and SIGTERM are set to raise KeyboardInterrupt before anything else loads
    (:mod:`piper_cli.interrupts`); an interrupted command prints one line,
    ``piper-ilp: interrupted``, and exits 130 (SIGINT) or 143 (SIGTERM). Usage errors
    (an unknown option, a value out of range, a missing argument) are one line on stderr
    and exit status 2, like bad input; the commands' own errors are handled by
    :func:`piper_cli.common.cli_errors`. A failed write to standard output
    (:mod:`piper_cli.stdio`) ends any command the same way: a closed pipe quietly with
    exit 141, anything else (a full disk) with one line and exit 2. An interrupted
    command ends without the interpreter's finalization (:func:`piper_cli.interrupts.leave`).
    """
    import os
    import sys

    import piper_cli.interrupts as interrupts
    import piper_cli.stdio as stdio

    single_threaded_blas(os.environ)
    show_compile_notice(sys.stderr)
    interrupts.install()
    stdio.install()
    try:
        code = _run()
        if interrupts.pending():  # typer turns a KeyboardInterrupt outside a command into exit 130
            code = interrupts.report()
    except KeyboardInterrupt:
        code = interrupts.report()
    except stdio.StdoutError as exc:
        code = stdio.report(exc)
    code = stdio.finish(code)
    if code in interrupts.EXIT_CODES:  # interrupted, clean-up done (campaign, sweep: their line)
        interrupts.leave(code)
    sys.exit(code)


def single_threaded_blas(environ) -> None:
    """Ask numpy's BLAS (OpenBLAS) for one thread, unless the user chose a number.

    The planners here are single-threaded, and OpenBLAS's extra threads otherwise spin for
    a while after numpy's import and after each matrix product, about 0.13 s of CPU per
    ``piper-ilp solve`` on a 2-core machine (docs/benchmarks.md, "Start-up"). Set before
    numpy loads, in this process and the ones it starts (workers, the bench's runs).

    Parameters
    ----------
    environ : mutable mapping
        The environment to set ``OPENBLAS_NUM_THREADS`` in (``os.environ``).

    Examples
    --------
    >>> env = {}
    >>> single_threaded_blas(env)
    >>> env
    {'OPENBLAS_NUM_THREADS': '1'}
    """
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def show_compile_notice(stream) -> bool:
    """Show the line that says numba compiles its kernels (the first solve on a machine that
    runs one: 15-25 CPU s, :mod:`dp.compiled.notice`) on ``stream`` when it is a terminal,
    as the progress displays are; pipes and files get nothing. Returns whether it is shown.

    Examples
    --------
    >>> import io
    >>> show_compile_notice(io.StringIO())
    False
    """
    import logging

    if not stream.isatty():
        return False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("piper-ilp: %(message)s"))
    log = logging.getLogger("piper_ilp.compile")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return True


def _run() -> int:
    """Run the app on ``sys.argv``; return the exit status."""
    import sys

    import typer

    from piper_cli.commands import app

    try:
        code = app(standalone_mode=False, prog_name="piper-ilp")
    except typer.TyperException as exc:  # typer's click exceptions (usage errors and the like)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # no arguments at all: the help text
            return 2
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "piper-ilp"
        message = " ".join(exc.format_message().split())
        kind = "usage error" if exc.exit_code == 2 else "error"
        print(f"{path}: {kind}: {message} (see '{path} --help')", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        print("piper-ilp: aborted", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0
