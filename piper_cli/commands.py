"""The typer application: the root options (``--version``) and the commands' registration.

The command modules import only typer, rich and the standard library at load time; the
solvers (numpy, networkx, OR-Tools, PuLP) load when a command runs, so ``--help`` and
usage errors answer at once.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(
    name="piper-ilp",
    help="Piper's DNN-parallelization planner: an optimized DP checked against an exact MILP "
    "(CP-SAT, CBC, SCIP), a second formulation (path) and exhaustive search (brute).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from piper_ilp.version import __version__

        print(f"piper-ilp {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Plan pipeline, data and tensor parallelism for a profiled layer graph (Piper's problem),
    and cross-check the DP against an exact MILP.

    Exit status: 0 success, 1 an invalid plan / a mismatch / an internal error,
    2 bad input or usage (or standard output cannot be written), 3 inconclusive
    (verify), 130 interrupted (SIGINT), 141 standard output closed by its reader
    (quietly, as for SIGPIPE), 143 terminated (SIGTERM).

    Outputs (-o and the like): an input file of the command (under any name) or a
    folder is refused; a file is replaced atomically (a symlink's target; the link
    stays); a device or FIFO is written in place, so -o /dev/stdout prints.
    """


def _register() -> None:
    import piper_cli.bench_cmds as bench_cmds
    import piper_cli.compare_cmds as compare_cmds
    import piper_cli.evaluate_cmd as evaluate_cmd
    import piper_cli.export_cmd as export_cmd
    import piper_cli.ladder_cmd as ladder_cmd
    import piper_cli.model_cmds as model_cmds
    import piper_cli.pipedream_cmds as pipedream_cmds
    import piper_cli.simulate_cmd as simulate_cmd
    import piper_cli.solve_cmd as solve_cmd
    import piper_cli.sweep_cmds as sweep_cmds

    evaluate_cmd.register(app)
    solve_cmd.register(app)
    compare_cmds.register(app)
    bench_cmds.register(app)
    sweep_cmds.register(app)
    simulate_cmd.register(app)
    ladder_cmd.register(app)
    pipedream_cmds.register(app)
    model_cmds.register(app)
    export_cmd.register(app)
    _unwrap_help(app)


def unwrap_paragraphs(text: str) -> str:
    r"""A docstring as help text: each paragraph on one line (the source's line breaks,
    made at 100 columns, would otherwise break the help mid-sentence at 80), paragraphs
    apart; the first paragraph is the summary.

    >>> unwrap_paragraphs("One\n    line.\n\n    Two\n    lines.")
    'One line.\n\nTwo lines.'
    """
    import inspect

    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _unwrap_help(group: typer.Typer) -> None:
    """Give every command of ``group`` (and its sub-groups) its docstring unwrapped as its
    help (:func:`unwrap_paragraphs`); a help given explicitly is unwrapped as well."""
    for info in group.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if doc:
            info.help = unwrap_paragraphs(doc)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


_register()
