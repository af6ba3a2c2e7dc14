"""``piper-ilp solve INSTANCE...``: find an optimal plan with the DP or a MILP backend."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import (
    BandwidthOpt,
    BatchOpt,
    DevicesOpt,
    ExcludeOptionOpt,
    JsonOpt,
    MaxDOpt,
    MaxTOpt,
    MemoryOpt,
    NoDataParallelOpt,
    NoRecomputeOpt,
    NoTensorParallelOpt,
    cli_errors,
    fail,
    load_with_overrides,
    print_json_line,
    restrictions_from_flags,
    stderr,
    stdout,
)
from piper_cli.format import stage_table
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.plan import save_plan
from piper_ilp.solution import Restrictions, Solution, Status
from compare.methods import METHODS, run_method


class Knapsack(str, enum.Enum):
    exact = "exact"
    greedy = "greedy"


def solution_record(instance: Instance, sol: Solution, restrictions: Restrictions) -> dict:
    """One JSON object for ``solve --json``: the instance and its settings, then the
    solution's fields (method, status, tps, plan, devices, sum_d, seconds, ...)."""
    rec = {
        "instance": instance.source,
        "settings": {"K": instance.K, "M": instance.M, "N": instance.N, "B": instance.B},
        "restrictions": restrictions.to_dict(),
    }
    rec.update(sol.to_dict())
    return rec


def print_solution(instance: Instance, sol: Solution) -> None:
    """The human form: a header line, the stage table, and the status line."""
    stdout.print(
        f"{instance.source}: K={instance.K} M={instance.M:.6g} B={instance.B:.6g} N={instance.N}; "
        f"method {sol.method}",
        markup=False,
    )
    if sol.plan is not None:
        stdout.print(stage_table(evaluate(instance, sol.plan)))
        extra = ""
        if sol.bound is not None and sol.status != Status.OPTIMAL:
            extra = f", bound {sol.bound:.12g}, gap {100 * (sol.gap or 0):.4g}%"
        stdout.print(
            f"{sol.status}: TPS {sol.tps:.12g} s per sample, {len(sol.plan.stages)} stages, "
            f"{sol.plan.devices} devices, sum d = {sol.plan.sum_d}{extra} ({sol.seconds:.3g} s)",
            markup=False,
        )
    else:
        stdout.print(f"{sol.status}: no plan ({sol.seconds:.3g} s)", markup=False)
    if sol.message:
        stdout.print(f"  {sol.message}", markup=False)
    for key in ("variables", "constraints", "scaling_error", "ideals", "stage_candidates"):
        if key in sol.info:
            stdout.print(f"  {key}: {sol.info[key]}", markup=False)


def register(app: typer.Typer) -> None:
    @app.command("solve")
    @cli_errors
    def solve_command(
        instances: Annotated[list[str], typer.Argument(help="Instance JSON file(s).")],
        method: Annotated[str, typer.Option("--method", help=f"Solver: {', '.join(METHODS)}.")] = "dp",
        knapsack: Annotated[Knapsack, typer.Option("--knapsack", help="DP option choice: exact, or Piper's greedy rule (sec. 5).")] = Knapsack.exact,
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
        no_data_parallel: NoDataParallelOpt = False,
        no_tensor_parallel: NoTensorParallelOpt = False,
        no_recompute: NoRecomputeOpt = False,
        exclude_option: ExcludeOptionOpt = None,
        max_d: MaxDOpt = None,
        max_t: MaxTOpt = None,
        time_limit: Annotated[Optional[float], typer.Option("--time-limit", min=0.0, help="MILP: seconds before stopping (status feasible/unknown).", show_default=False)] = None,
        threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="MILP: solver threads.", show_default=False)] = None,
        write_model: Annotated[Optional[Path], typer.Option("--write-model", "--write-lp", help="MILP: write the model (CBC: LP file; CP-SAT: model proto as text).", show_default=False)] = None,
        hint_from_dp: Annotated[bool, typer.Option("--hint-from-dp", help="MILP: warm-start with the DP's plan.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Solve even above the size guard.")] = False,
        max_ideals: Annotated[Optional[int], typer.Option("--max-ideals", min=1, help="DP: refuse above this many successor-closed sets.", show_default=False)] = None,
        max_variables: Annotated[Optional[int], typer.Option("--max-variables", min=1, help="MILP: refuse above this many variables (unless --force).", show_default=False)] = None,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the plan (object form) to this file.", show_default=False)] = None,
        progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal).", show_default=False)] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Solve each INSTANCE; print its plan, TPS and status.

        Statuses: optimal (proven), feasible (a plan, not proven optimal: a time limit, or
        greedy mode), infeasible (proven: no plan fits), unknown (stopped with no plan).
        Exit 0 when every instance got an answer, 2 on bad input, 3 when some instance
        ended unknown.
        """
        if method not in METHODS:
            fail(f"error: --method {method!r}: choose one of {', '.join(METHODS)}")
        if len(instances) > 1 and (output is not None or write_model is not None):
            fail("error: --output and --write-model take a single instance")
        if knapsack is Knapsack.greedy and method != "dp":
            fail("error: --knapsack greedy applies to --method dp only")
        restrictions = restrictions_from_flags(no_data_parallel, no_tensor_parallel, no_recompute, exclude_option, max_d, max_t)
        show_progress = sys.stderr.isatty() if progress is None else progress
        worst = 0
        for path in instances:
            try:
                inst = load_with_overrides(path, devices, memory, batch, bandwidth)
                sol = run_method(
                    inst,
                    method,
                    restrictions,
                    knapsack=knapsack.value if method == "dp" else None,
                    time_limit=time_limit,
                    threads=threads,
                    write_model=write_model,
                    hint_from_dp=hint_from_dp,
                    force=force,
                    max_ideals=max_ideals,
                    max_variables=max_variables,
                    progress=show_progress,
                )
            except InputError as exc:
                stderr.print(f"piper-ilp: error: {exc}", markup=False)
                if json_out:
                    print_json_line({"instance": path, "method": method, "error": str(exc)})
                worst = max(worst, 2)
                continue
            if json_out:
                print_json_line(solution_record(inst, sol, restrictions))
            else:
                print_solution(inst, sol)
            if output is not None and sol.plan is not None:
                save_plan(sol.plan, output)
            if sol.status == Status.UNKNOWN:
                worst = max(worst, 3) if worst != 2 else 2
        if worst:
            raise typer.Exit(worst)
