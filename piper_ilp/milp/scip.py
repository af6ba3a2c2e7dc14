"""The SCIP backend: the same big-M rows as CBC, through OR-Tools' MPSolver.

SCIP runs in a child process forked for each solve (:func:`piper_ilp.processes.run_in_child`):
it builds the model, solves it and sends back the status, the values, the objective and the
bound (and the model's LP text first, for ``write_model``, which this process writes). On
any exception here, a KeyboardInterrupt from Ctrl-C or SIGTERM included, the child is
SIGKILLed and reaped before the exception goes on: the solve stops at once, threads and all (SCIP's
``InterruptSolve`` returns within milliseconds, but with 2 threads its concurrent solvers
went on for many seconds, and the process waited for them), and SCIP writes no file.
(HiGHS is in OR-Tools too, but MPSolver passes it no parameters: its default 1e-4 relative
gap would make "optimal" mean "within 0.01%", so it is not offered.)
"""

from __future__ import annotations

import math
import time

from piper_ilp.errors import InputError, InternalError
from piper_ilp.milp.backend import Answer, Progress, Settings, write_model_file
from piper_ilp.milp.scaled import ScaledModel, big_m_rows, lp_name, objective_rows
from piper_ilp.processes import run_in_child
from piper_ilp.solution import Status

__all__ = ["solve"]

#: Absolute optimality gap in model units (1e-10 of the reference value).
GAP_ABS = 1e-7

#: How far (model units) the solver's objective may sit from its plan's value: its
#: feasibility tolerance on each row of a slot's TPS.
ABS_RESOLUTION = 1e-5

#: The relative accuracy to which SCIP's bound is trusted (as for CBC: its tolerances).
BOUND_RTOL = 1e-7

PARAMETERS = (
    f"numerics/feastol = 1e-9\nlimits/gap = 0\nlimits/absgap = {GAP_ABS}\nmisc/catchctrlc = FALSE\n"
)


def solve(sm: ScaledModel, settings: Settings) -> Answer:
    """Solve ``sm`` with SCIP in a child process (see the module docstring).

    Raises
    ------
    InputError
        When OR-Tools has no SCIP, or the model file cannot be written.
    InternalError
        When SCIP does not take the parameters, ends abnormally, or its process dies
        without an answer.
    """
    from ortools.linear_solver import pywraplp

    progress = Progress("scip", settings.progress)
    t0 = time.perf_counter()
    code, values, objective, best_bound = run_in_child(
        _solve_here,
        (sm, settings),
        on_message=lambda text: write_model_file(settings.write_model, text),
        tick=progress.update,
        name="scip",
    )
    wall = time.perf_counter() - t0
    status = {
        pywraplp.Solver.OPTIMAL: Status.OPTIMAL,
        pywraplp.Solver.FEASIBLE: Status.FEASIBLE,
        pywraplp.Solver.INFEASIBLE: Status.INFEASIBLE,
        pywraplp.Solver.NOT_SOLVED: Status.UNKNOWN,
    }.get(code)
    if status is None:
        raise InternalError(f"scip: the solver ended abnormally (MPSolver status {code})")
    ans = Answer(status, seconds=wall)
    if status in (Status.FEASIBLE, Status.UNKNOWN):
        ans.stopped = "time limit"
    unit = sm.scale.unit
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        ans.values = values
        ans.objective = objective * unit
        ans.resolution = 1e-9 * abs(ans.objective) + ABS_RESOLUTION * unit * max(
            1.0, objective_rows(sm.form) / 100
        )
    if status != Status.INFEASIBLE and math.isfinite(best_bound):
        ans.bound = (
            (best_bound - (GAP_ABS if status == Status.OPTIMAL else 0.0)) * unit * (1 - BOUND_RTOL)
        )
    progress.update(ans.objective, ans.bound, force=True)
    return ans


def _solve_here(sm: ScaledModel, settings: Settings, report) -> tuple:
    """Build the MPSolver model of ``sm`` and solve it with SCIP (in the child process);
    (MPSolver status, values of the integers, objective, bound), the model's LP text
    reported first when ``write_model`` asks for it."""
    from ortools.linear_solver import pywraplp

    m = sm.model
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        raise InputError("scip: this OR-Tools build has no SCIP solver")
    rows = big_m_rows(sm)
    mv = []
    for j, var in enumerate(m.vars):
        if var.kind == "continuous":
            mv.append(solver.NumVar(sm.lb[j], sm.ub[j], lp_name(var.name)))
        else:
            mv.append(solver.IntVar(sm.lb[j], sm.ub[j], lp_name(var.name)))
    inf = solver.infinity()
    for r in rows:
        lo, hi = {"<=": (-inf, r.rhs), ">=": (r.rhs, inf), "==": (r.rhs, r.rhs)}[r.sense]
        ct = solver.Constraint(lo, hi, lp_name(r.name))
        for j, c in r.terms:
            ct.SetCoefficient(mv[j], c)
    obj = solver.Objective()
    obj.SetCoefficient(mv[m.objective], 1.0)
    obj.SetMinimization()
    if settings.hint:
        pairs = sorted(settings.hint.items())
        solver.SetHint([mv[j] for j, _ in pairs], [float(v) for _, v in pairs])
    if settings.write_model is not None:
        report(solver.ExportModelAsLpFormat(False))
    if settings.time_limit is not None:
        solver.SetTimeLimit(int(math.ceil(settings.time_limit * 1000)))
    solver.SetNumThreads(settings.threads)
    params = PARAMETERS + ("presolving/maxrounds = 0\n" if settings.careful else "")
    if not solver.SetSolverSpecificParametersAsString(params):
        raise InternalError(f"scip: parameters not accepted: {params!r}")
    code = solver.Solve()
    values = objective = None
    if code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        values = {
            j: float(round(mv[j].solution_value()))
            for j, var in enumerate(m.vars)
            if var.kind != "continuous"
        }
        objective = obj.Value()
    bound = obj.BestBound() if code != pywraplp.Solver.INFEASIBLE else math.nan
    return code, values, objective, bound
