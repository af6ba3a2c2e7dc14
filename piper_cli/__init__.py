"""The ``piper-ilp`` command line: a thin layer over the Python API."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="piper-ilp",
    help="Piper's DNN-parallelization planner: an optimized DP checked against an exact MILP (CP-SAT, CBC).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Plan pipeline, data and tensor parallelism for a profiled layer graph (Piper's problem),
    and cross-check the DP against an exact MILP.

    Exit status: 0 success, 1 an invalid plan / a mismatch / an internal error,
    2 bad input or usage, 3 inconclusive (verify).
    """


def _register() -> None:
    from piper_cli import bench_cmds, compare_cmds, evaluate_cmd, solve_cmd

    evaluate_cmd.register(app)
    solve_cmd.register(app)
    compare_cmds.register(app)
    bench_cmds.register(app)
    __import__("piper_cli.pipedream_cmds").pipedream_cmds.register(app)


_register()


def main() -> None:
    """Entry point of the ``piper-ilp`` script.

    Usage errors (an unknown option, a value out of range, a missing argument) are one
    line on stderr and exit status 2, like bad input; the commands' own errors are
    handled by :func:`piper_cli.common.cli_errors`.
    """
    import sys

    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # typer's click exceptions (usage errors and the like)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # no arguments at all: the help text
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        path = ctx.command_path if ctx is not None else "piper-ilp"
        message = " ".join(exc.format_message().split())
        kind = "usage error" if exc.exit_code == 2 else "error"
        print(f"{path}: {kind}: {message} (see '{path} --help')", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("piper-ilp: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
