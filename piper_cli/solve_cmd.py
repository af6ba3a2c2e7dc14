"""``piper-ilp solve INSTANCE...``: find an optimal plan with the DP or a MILP backend."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from piper_cli.common import (
    METHOD_PANEL,
    MODE,
    OUTPUT_PANEL,
    RESTRICTIONS,
    SETTINGS,
    JsonOpt,
    MaxIdealsOpt,
    ProgressOpt,
    ThreadsOpt,
    cli_errors,
    fail,
    load_with_settings,
    mode_from_flags,
    option,
    output_option,
    print_json_line,
    read_overrides,
    restrictions_from_flags,
    stderr,
    stdout,
    time_limit_option,
    with_groups,
)
from piper_cli.format import (
    format_model_time,
    format_seconds,
    option_table,
    plural,
    settings_line,
    stage_table,
)

if TYPE_CHECKING:
    from piper_ilp.instance import Instance
    from piper_ilp.mode import Mode
    from piper_ilp.settings import Settings
    from piper_ilp.solution import Restrictions, Solution

__all__ = [
    "register",
    "solution_record",
    "print_solution",
    "method_options",
    "check_applicable",
    "check_excluded_ids",
]


class Knapsack(str, enum.Enum):
    exact = "exact"
    greedy = "greedy"


TimeLimitOpt = time_limit_option("Stop after this long (never optimal).")
PlanOutputOpt = output_option("Write the plan (with its settings).")

#: The command-line flag of each solver option (the keyword of ``run_method``).
FLAGS: dict[str, str] = {
    "knapsack": "--knapsack",
    "max_ideals": "--max-ideals",
    "time_limit": "--time-limit",
    "threads": "--threads",
    "write_model": "--write-model",
    "hint_from_dp": "--hint-from-dp",
    "max_variables": "--max-variables",
    "force": "--force",
}


def method_options() -> dict[str, frozenset[str]]:
    """Each method's name -> the solver options (keywords of ``run_method``) it takes,
    from the methods registry."""
    from compare.crosscheck.methods import METHODS

    return {name: m.options - {"progress"} for name, m in METHODS.items()}


def check_applicable(
    method: str, given: dict[str, object], takes: dict[str, frozenset[str]]
) -> None:
    """Raise InputError (one line) when a solver option in ``given`` does not apply to
    ``method``, naming the methods it applies to; ``takes`` is :func:`method_options`."""
    from piper_ilp.errors import InputError

    if method not in takes:
        raise InputError(f"--method {method!r}: choose one of {', '.join(takes)}")
    for key, value in given.items():
        if key in takes[method]:
            continue
        flag = FLAGS.get(key, key)
        if key == "knapsack":
            flag = f"--knapsack {value}"
        users = [name for name, opts in takes.items() if key in opts]
        where = "--method " + ", ".join(users) if users else "no method"
        raise InputError(f"{flag} does not apply to --method {method}; it applies to {where}")


def check_excluded_ids(instance: Instance, exclude: list[str] | None) -> None:
    """Raise InputError naming an ``--exclude-option`` id that no node of ``instance`` has,
    with the ids that exist (a misspelt id would otherwise exclude nothing)."""
    from piper_ilp.errors import InputError

    if not exclude:
        return
    known = sorted(
        {opt.id for node in instance.nodes for opts in node.options.values() for opt in opts}
    )
    for option_id in exclude:
        if option_id not in known:
            raise InputError(
                f"--exclude-option {option_id!r}: no node of {instance.source} has this option; "
                f"its option ids are: {', '.join(repr(k) for k in known)}"
            )


def solution_record(instance: Instance, sol: Solution, restrictions: Restrictions) -> dict:
    """One JSON object for ``solve --json``: the instance and its settings, then the
    solution's fields (method, status, mode, objective (the value of the mode's objective:
    TPS or batch time), tps, plan, devices, sum_d, seconds, ...)."""
    rec = {
        "instance": instance.source,
        "settings": {"K": instance.K, "M": instance.M, "N": instance.N, "B": instance.B},
        "restrictions": restrictions.to_dict(),
    }
    rec.update(sol.to_dict())
    return rec


def value_text(mode: Mode, value: float | None, tps: float | None, digits: int = 7) -> str:
    """What was optimized, with its value in seconds: ``TPS 0.0012 s per sample``
    (throughput), or ``batch time 12.3 s (TPS 0.0012 s per sample)`` (batch-time)."""
    per_sample = f"TPS {format_model_time(tps, digits)} per sample"
    if not mode.batch_time:
        return per_sample
    return f"batch time {format_model_time(value, digits)} ({per_sample})"


def print_solution(instance: Instance, sol: Solution, detail: bool = False) -> None:
    """The human form: a header line (with the mode outside the default), the stage table
    (with ``detail``: every layer's option), and the status line, which says what was
    optimized. Times and sizes carry units; ``--json`` has the exact values."""
    from piper_ilp.evaluate import evaluate
    from piper_ilp.solution import Status

    mode_note = "" if sol.mode.is_default else f"; mode {sol.mode.label}"
    stdout.print(
        f"{instance.source}: {settings_line(instance)}; method {sol.method}{mode_note}",
        markup=False,
    )
    if sol.plan is not None:
        stdout.print(stage_table(evaluate(instance, sol.plan, sol.mode)))
        if detail:
            stdout.print(option_table(instance, sol.plan))
        extra = ""
        if sol.bound is not None and sol.status != Status.OPTIMAL:
            extra = f", bound {format_model_time(sol.bound, 7)}, gap {100 * (sol.gap or 0):.4g}%"
        stdout.print(
            f"{sol.status.value}: {value_text(sol.mode, sol.value, sol.tps)}, "
            f"{plural(len(sol.plan.stages), 'stage')}, "
            f"{sol.plan.devices} devices, sum d {sol.plan.sum_d}{extra} "
            f"({format_seconds(sol.seconds, 3)})",
            markup=False,
        )
    else:
        stdout.print(
            f"{sol.status.value}: no plan ({format_seconds(sol.seconds, 3)})", markup=False
        )
    if sol.message:
        stdout.print(f"  {sol.message}", markup=False)
    for key in ("variables", "constraints", "scaling_error", "ideals", "stage_candidates"):
        if key in sol.info:
            stdout.print(f"  {key}: {sol.info[key]}", markup=False)
    u = sol.info.get("uniform")
    if u:  # the DP under --uniform: one run per (t, d) pair (the counts above are the best run's)
        best = f", best (t, d) = ({u['best'][0]}, {u['best'][1]})" if u["best"] else ""
        stdout.print(
            f"  uniform: {u['pairs']} (t, d) pairs, {u['runs']} DP runs ({u['infeasible']} "
            f"infeasible), {u['skipped']} skipped by the bound{best}",
            markup=False,
        )


#: Exit statuses by precedence when several instances end differently: bad input (2) over
#: a backend error (1) over an inconclusive answer (3) over success (0).
_PRECEDENCE = {0: 0, 3: 1, 1: 2, 2: 3}


def _worse(a: int, b: int) -> int:
    return a if _PRECEDENCE[a] >= _PRECEDENCE[b] else b


def _remove_stale(output: Path, why: str) -> None:
    """Remove the plan a previous run left at ``output``, saying so in one line (a symlink's
    target, not the link; never a device or a FIFO: :func:`piper_ilp.files.remove_output`)."""
    from piper_ilp.errors import InputError
    from piper_ilp.files import remove_output

    try:
        if not remove_output(output):
            return
    except (OSError, InputError) as exc:
        stderr.print(
            f"piper-ilp: warning: {output} is from an earlier run and could not be removed: "
            f"{getattr(exc, 'strerror', None) or exc}",
            markup=False,
        )
        return
    stderr.print(f"piper-ilp: removed stale plan {output}: the new solve {why}", markup=False)


def register(app: typer.Typer) -> None:
    @app.command("solve")
    @cli_errors
    @with_groups
    def solve_command(
        instances: Annotated[list[str], typer.Argument(help="Instance JSON file(s).")],
        method: Annotated[
            str,
            option(
                METHOD_PANEL,
                "--method",
                metavar="NAME",
                help=(
                    "dp, path, columns, cpsat, cbc, scip, compiled, brute; greedy, 2bw, pipedream."
                ),
            ),
        ] = "dp",
        knapsack: Annotated[
            Knapsack, option(METHOD_PANEL, "--knapsack", help="DP: greedy is Piper's rule.")
        ] = Knapsack.exact,
        cluster: dict = SETTINGS,
        restrict: dict = RESTRICTIONS,
        mode_flags: dict = MODE,
        time_limit: TimeLimitOpt = None,
        threads: ThreadsOpt = None,
        write_model: Annotated[
            Optional[Path],
            option(
                METHOD_PANEL,
                "--write-model",
                "--write-lp",
                metavar="FILE",
                help="MILP: write the model.",
            ),
        ] = None,
        hint_from_dp: Annotated[
            bool, option(METHOD_PANEL, "--hint-from-dp", help="MILP: start from the DP's plan.")
        ] = False,
        force: Annotated[
            bool, option(METHOD_PANEL, "--force", help="Solve above the size guards.")
        ] = False,
        max_ideals: MaxIdealsOpt = None,
        max_variables: Annotated[
            Optional[int],
            option(
                METHOD_PANEL,
                "--max-variables",
                min=1,
                metavar="COUNT",
                help="MILP: refuse above this many variables.",
            ),
        ] = None,
        output: PlanOutputOpt = None,
        detail: Annotated[
            bool, option(OUTPUT_PANEL, "--detail", help="Also every layer's option.")
        ] = False,
        progress: ProgressOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Solve each INSTANCE; print its plan, TPS and status.

        Statuses: optimal (proven), feasible (a plan, not proven optimal), infeasible
        (proven), unknown (stopped with no plan), out-of-range, backend-error. With -o
        and no plan, a plan an earlier run left there is removed. Exit 0 answered, 1
        backend error, 2 bad input, 3 unknown or out-of-range. More: docs/usage.md.
        """
        solver_options = {
            key: value
            for key, value in (
                ("knapsack", knapsack.value if knapsack is Knapsack.greedy else None),
                ("max_ideals", max_ideals),
                ("time_limit", time_limit),
                ("threads", threads),
                ("write_model", write_model),
                ("hint_from_dp", hint_from_dp),
                ("max_variables", max_variables),
                ("force", force),
            )
            if value is not None and value is not False
        }
        check_applicable(method, solver_options, method_options())
        from compare.crosscheck.methods import METHODS, check_mode
        from piper_ilp.settings import Settings

        settings = Settings(  # checked once, before any instance is read
            mode=mode_from_flags(**mode_flags),
            time_limit=solver_options.pop("time_limit", None),
            threads=solver_options.pop("threads", None),
            overrides=read_overrides(**cluster),
            options=solver_options,
        )
        check_mode(METHODS[method], settings.mode)
        if len(instances) > 1 and (output is not None or write_model is not None):
            fail("error: --output and --write-model take a single instance")
        from piper_ilp.errors import InputError, InternalError
        from piper_ilp.files import check_writable

        for out, what in ((output, "plan"), (write_model, "model")):
            if out is not None:
                check_writable(out, what, inputs={p: "instance" for p in instances})

        restrictions = restrictions_from_flags(**restrict)
        show_progress = sys.stderr.isatty() if progress is None else progress
        worst = 0
        for path in instances:
            try:
                inst = load_with_settings(path, settings)
                check_excluded_ids(inst, restrict["exclude_option"])
                sol = _solve(inst, method, restrictions, settings, show_progress)
            except InputError as exc:
                stderr.print(f"piper-ilp: error: {exc}", markup=False)
                if json_out:
                    print_json_line({"instance": path, "method": method, "error": str(exc)})
                worst = _worse(worst, 2)
                if output is not None:
                    _remove_stale(output, "failed")
                continue
            except InternalError:
                if output is not None:
                    _remove_stale(output, "failed")
                raise
            if json_out:
                print_json_line(solution_record(inst, sol, restrictions))
            else:
                print_solution(inst, sol, detail=detail)
            if output is not None:
                _write_or_remove(output, inst, sol, method, restrictions, knapsack.value)
            worst = _worse(worst, _exit_status(sol))
        if worst:
            raise typer.Exit(worst)


def _solve(
    inst: Instance,
    method: str,
    restrictions: Restrictions,
    settings: Settings,
    progress: bool,
) -> Solution:
    """:func:`compare.crosscheck.methods.run_method` with the checked settings (their
    options applicable, by :func:`check_applicable`); the others keep the method's
    defaults."""
    from compare.crosscheck.methods import run_method

    return run_method(inst, method, restrictions, settings=settings, progress=progress)


def _exit_status(sol: Solution) -> int:
    from piper_ilp.solution import Status

    if sol.status == Status.BACKEND_ERROR:
        return 1
    if sol.status in (Status.UNKNOWN, Status.OUT_OF_RANGE):
        return 3
    return 0


def _write_or_remove(
    output: Path,
    inst: Instance,
    sol: Solution,
    method: str,
    restrictions: Restrictions,
    knapsack: str,
) -> None:
    """Write the solve's plan to ``output`` with its metadata; without a plan, remove a
    plan an earlier run left there (saying so), so that no stale plan looks current."""
    from piper_ilp.plan import plan_metadata, save_plan

    if sol.plan is not None:
        meta = plan_metadata(
            inst,
            method=method,
            restrictions=restrictions.to_dict(),
            mode=knapsack if method == "dp" else None,
            problem=sol.mode.to_dict(),
        )
        save_plan(sol.plan, output, metadata=meta)
    else:
        _remove_stale(
            output, _NO_PLAN.get(sol.status.value, f"ended {sol.status.value} with no plan")
        )


#: Why a solve gave no plan, for the line that reports a removed stale plan.
_NO_PLAN = {
    "infeasible": "is infeasible",
    "unknown": "ended with no plan (unknown)",
    "out-of-range": "is out of range for this method",
    "backend-error": "hit a backend error",
}
