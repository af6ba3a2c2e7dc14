"""The SCIP backend: the big-M rows (:func:`~piper_ilp.milp.scaled.big_m_rows`) in floating
point, as CBC gets them, solved by SCIP through OR-Tools' MPSolver in a child process that
:func:`solve` controls.
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

#: SCIP's threads, whatever the caller asks: with more than 1 MPSolver runs SCIP's
#: concurrent mode, which proved wrong optima (a 5-node fork-join DAG in the default mode:
#: 9.60998906637 where a valid plan has 9.45745527636, tests/test_milp_scip_proofs.py), so
#: SCIP is single-threaded and ``threads`` applies to CP-SAT and CBC only.
THREADS = 1

#: SCIP's parameters for every solve: feasibility tolerance 1e-9, no relative gap, the
#: absolute gap :data:`GAP_ABS`, and SCIP's own Ctrl-C handler off (an interrupt kills the
#: child process instead).
PARAMETERS = (
    f"numerics/feastol = 1e-9\nlimits/gap = 0\nlimits/absgap = {GAP_ABS}\nmisc/catchctrlc = FALSE\n"
)


def solve(sm: ScaledModel, settings: Settings) -> Answer:
    """Solve ``sm`` with SCIP: one backend call, before certification.

    SCIP runs in a child process forked for this call
    (:func:`piper_ilp.processes.run_in_child`), which builds the MPSolver model, solves it
    with :data:`PARAMETERS` and sends back the status, the values, the objective and the
    bound (and first the model's LP text when ``settings.write_model`` asks for it; this
    process writes the file). On any exception here, a KeyboardInterrupt from Ctrl-C or
    SIGTERM included, the child is SIGKILLed and reaped before the exception goes on, so
    the solve stops at once (SCIP's ``InterruptSolve`` returns quickly, but with 2 threads
    its concurrent solvers went on for many seconds); SCIP writes no file. SCIP runs
    :data:`THREADS` thread. HiGHS, also in OR-Tools, is not offered: MPSolver passes it no
    parameters, and its default relative gap of 1e-4 would make "optimal" mean "within
    0.01%".

    Parameters
    ----------
    sm : ScaledModel
    settings : Settings
        The backend call's settings (:class:`piper_ilp.milp.backend.Settings`): the time
        limit (rounded up to whole milliseconds), the model file, ``hint``
        (given to SCIP as a MIP start) and ``careful`` (SCIP's presolve off); its
        ``threads`` is not used (SCIP runs :data:`THREADS` thread).

    Returns
    -------
    Answer
        ``objective`` in seconds and ``values`` (the integers and binaries, rounded) when
        SCIP has a plan; ``bound`` (SCIP's best bound, less :data:`GAP_ABS` when optimal,
        lowered by :data:`BOUND_RTOL`) unless infeasible or not finite; ``stopped`` is
        ``"time limit"`` for FEASIBLE and UNKNOWN.

    Raises
    ------
    InputError
        OR-Tools has no SCIP, or the model file cannot be written.
    InternalError
        SCIP does not take the parameters, ends abnormally (an MPSolver status other than
        optimal, feasible, infeasible or not solved), or its process dies without an
        answer.
    KeyboardInterrupt
        Ctrl-C (or a signal handler raising it): the child process was killed first.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> from piper_ilp.milp.backend import Settings
    >>> from piper_ilp.milp.model import formulate, index_sets
    >>> from piper_ilp.milp.scaled import Memory, TimeScale, scale
    >>> from piper_ilp.solution import Restrictions
    >>> node = (0, {"1": [option_dict("v", p=2.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=2, M=10, N=2, B=1))
    >>> form = formulate(index_sets(inst, Restrictions()))
    >>> sm = scale(form, TimeScale.around(2.0, 2.0), Memory.RESTRICT)
    >>> ans = solve(sm, Settings(time_limit=10.0, threads=1))
    >>> ans.status.value, round(ans.objective, 9), ans.bound < ans.objective
    ('optimal', 1.0, True)
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
    """Build the MPSolver model of ``sm`` and solve it with SCIP, in the child process of
    :func:`solve`.

    Returns
    -------
    tuple
        (MPSolver status, values of the integers and binaries or None, objective in model
        units or None, best bound in model units or NaN when infeasible); the model's LP
        text is passed to ``report`` first when ``settings.write_model`` asks for it.
    """
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
    solver.SetNumThreads(THREADS)  # not settings.threads: see THREADS
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
