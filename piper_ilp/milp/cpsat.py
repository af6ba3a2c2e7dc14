"""The CP-SAT backend (OR-Tools): the scaled model in integers, every rounding the relaxing
way (:func:`integer_model`), indicators native, solved by :func:`solve`.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from piper_ilp.errors import InternalError
from piper_ilp.milp.backend import (
    Answer,
    OutOfRange,
    Progress,
    Settings,
    run_stoppable,
    write_model_file,
)
from piper_ilp.milp.scaled import (
    RELAX_MARGIN,
    RESTRICT_MARGIN,
    Memory,
    ScaledModel,
    ScaledRow,
    complete,
)
from piper_ilp.solution import Status

__all__ = ["IntegerModel", "integer_model", "solve"]

#: Integer scale of the memory rows (a power of two: c * R is exact).
MEMORY_SCALE = 2**40

#: Seconds after the time limit at which a CP-SAT search still running is stopped.
STOP_GRACE = 0.5

#: Largest magnitude of an integer expression CP-SAT is given (its int64 arithmetic
#: must not overflow while it adds terms up).
INT_LIMIT = 2**60


def _steps_per_unit(sm: ScaledModel) -> int:
    """Integer steps per model unit: fine enough that the rounding of one TPS row (one
    step per active term) stays below 1e-7 of the reference value."""
    st = sm.form.sets
    base = max(1_000_000, 10_000 * (st.n + 2 * len(st.edges) + 1))
    # the batch time: the unit is set from T_batch ~ N T, and T's rounding counts N - 1 times
    return base * st.inst.N if st.batch else base


def _slack_steps(sm: ScaledModel) -> int:
    """How many steps the rounded model's objective of a true plan may sit above its
    value: T = ceil(TPS) (one step; every cost is rounded down), counted N - 1 times in
    the batch time (tau and L are sums of rounded-down integers: not above)."""
    st = sm.form.sets
    return max(1, st.inst.N - 1) if st.batch else 1


def _int_rows(sm: ScaledModel, steps: int) -> list[ScaledRow]:
    m = sm.model
    out = []
    for r in sm.rows:
        if r.kind == "exact":
            if any(c != int(c) for _, c in r.terms) or r.rhs != int(r.rhs):
                raise InternalError(f"cpsat: row {r.name} has non-integer data")
            terms = [(j, int(c)) for j, c in r.terms]
            rhs = int(r.rhs)
        elif r.kind == "time":
            if r.sense != ">=" or r.rhs != 0:
                raise InternalError(f"cpsat: time row {r.name} must read ... >= 0")
            terms = []
            for j, c in r.terms:
                if m.vars[j].kind == "continuous":
                    if c != int(c):
                        raise InternalError(
                            f"cpsat: row {r.name} has a non-integer coefficient on a continuous "
                            "variable"
                        )
                    terms.append((j, int(c)))
                elif c < 0:  # a cost: rounded down (the row relaxes)
                    terms.append((j, -math.floor(-c * steps)))
                else:  # a big-M: rounded up (the row relaxes)
                    terms.append((j, math.ceil(c * steps)))
            rhs = 0
        elif r.kind == "memory":
            if sm.memory == Memory.RELAX:
                terms = [(j, math.floor(c * MEMORY_SCALE)) for j, c in r.terms]
                rhs = math.floor(MEMORY_SCALE * (1 + RELAX_MARGIN))
            else:
                terms = [(j, math.ceil(c * MEMORY_SCALE)) for j, c in r.terms]
                rhs = math.floor(MEMORY_SCALE * (1 - RESTRICT_MARGIN))
        else:
            raise InternalError(f"unknown row kind {r.kind}")
        out.append(
            ScaledRow([(j, c) for j, c in terms if c != 0], r.sense, rhs, r.enforce, r.name, r.kind)
        )
    return out


def _domains(sm: ScaledModel, steps: int) -> list[tuple[int, int]]:
    out = []
    for j, var in enumerate(sm.model.vars):
        if var.kind == "continuous":
            out.append((math.floor(sm.lb[j] * steps), math.ceil(sm.ub[j] * steps)))
        else:
            out.append((int(sm.lb[j]), int(sm.ub[j])))
    return out


def _check_range(rows: list[ScaledRow], dom: list[tuple[int, int]]) -> None:
    for lo, hi in dom:
        if max(abs(lo), abs(hi)) > INT_LIMIT:
            raise OutOfRange(f"cpsat: a variable's domain ({lo}..{hi}) exceeds 2^60 integer steps")
    for r in rows:
        reach = sum(abs(c) * max(abs(dom[j][0]), abs(dom[j][1])) for j, c in r.terms) + abs(r.rhs)
        if reach > INT_LIMIT:
            raise OutOfRange(
                f"cpsat: row {r.name} reaches {reach:.3g} in integer steps, above 2^60"
            )


@dataclass(frozen=True)
class IntegerModel:
    """The scaled model as CP-SAT is given it (:func:`integer_model`).

    Attributes
    ----------
    steps : int
        Integer steps per model unit.
    rows : list of ScaledRow
        The rows with integer coefficients.
    domains : list of (int, int)
        Each variable's integer (lo, hi); continuous ones in steps.
    slack : int
        How many steps the objective of a true plan may sit above its value.
    """

    steps: int
    rows: list[ScaledRow]
    domains: list[tuple[int, int]]
    slack: int


def integer_model(sm: ScaledModel) -> IntegerModel:
    """The integer rows and domains CP-SAT solves for ``sm``.

    CP-SAT needs integer coefficients. Time rows are counted in integer steps of the model
    unit, fine enough that one row's rounding stays below 1e-7 of the reference value;
    every rounding goes the relaxing way (a cost rounded down, a big-M up), so every plan
    of the true problem stays in the model with T at most one step above its TPS (N - 1
    steps for the batch time), and CP-SAT's bound less that slack is a lower bound on the
    true optimum. Memory rows are scaled by R = :data:`MEMORY_SCALE` and rounded down
    against R (1 + e) (relaxed) or up against R (1 - e) (restricted; see
    :class:`~piper_ilp.milp.scaled.Memory`).

    Parameters
    ----------
    sm : ScaledModel

    Returns
    -------
    IntegerModel

    Raises
    ------
    InternalError
        A row whose data cannot be what the formulation writes (a bug).
    """
    steps = _steps_per_unit(sm)
    return IntegerModel(steps, _int_rows(sm, steps), _domains(sm, steps), _slack_steps(sm))


_LOG = re.compile(r"^#(?:\d+|Bound|Done|Model)\s.*?best:(\S+)\s+next:\[(\S+?),")


def solve(sm: ScaledModel, settings: Settings) -> Answer:
    """Solve ``sm`` with CP-SAT: one backend call, before certification.

    Builds the model from :func:`integer_model` (variables named as in the formulation),
    adds the hint, writes the model when asked (its protobuf text), sets the parameters
    (threads, time limit, the inclusion presolve off: google/or-tools#5293), solves under
    :func:`~piper_ilp.milp.backend.run_stoppable` and reads the answer. The time limit
    covers the call: CP-SAT gets what is left of it after building its model, and is
    stopped :data:`STOP_GRACE` seconds after it if it has not ended by then.

    Parameters
    ----------
    sm : ScaledModel
    settings : Settings
        The backend call's settings (:class:`piper_ilp.milp.backend.Settings`);
        ``careful`` has no effect here.

    Returns
    -------
    Answer
        With ``exact_bound`` set (the bound, less the rounding slack, holds whatever the
        scale); ``stopped`` is ``"time limit"`` for FEASIBLE and UNKNOWN.

    Raises
    ------
    OutOfRange
        A domain or a row's reach exceeds 2^60 integer steps, or CP-SAT finds an
        overflow in the model.
    InternalError
        The model is invalid otherwise, or a row's data is not what the formulation
        writes (a bug).
    InputError
        The model file cannot be written.
    KeyboardInterrupt
        Ctrl-C: the search was stopped first.
    """
    # the time limit covers the whole call: importing CP-SAT and building its model count
    deadline = None if settings.time_limit is None else time.monotonic() + settings.time_limit
    from ortools.sat.python import cp_model

    m = sm.model
    im = integer_model(sm)
    steps, rows, dom = im.steps, im.rows, im.domains
    _check_range(rows, dom)
    sec_per_step = sm.scale.unit / steps

    cm = cp_model.CpModel()
    cv = []
    for j, var in enumerate(m.vars):
        if var.kind == "binary":
            cv.append(cm.new_bool_var(var.name))
        else:
            cv.append(cm.new_int_var(dom[j][0], dom[j][1], var.name))
    for r in rows:
        expr = cp_model.LinearExpr.weighted_sum(
            [cv[j] for j, _ in r.terms], [c for _, c in r.terms]
        )
        if r.sense == "<=":
            ct = cm.add(expr <= r.rhs)
        elif r.sense == ">=":
            ct = cm.add(expr >= r.rhs)
        else:
            ct = cm.add(expr == r.rhs)
        ct.with_name(r.name)
        if r.enforce is not None:
            ct.only_enforce_if(cv[r.enforce])
    cm.minimize(cv[m.objective])
    if settings.hint:
        full = complete(m, rows, settings.hint, [d[0] for d in dom], integral=True)
        for j, val in full.items():
            lo, hi = dom[j]
            cm.add_hint(cv[j], min(max(int(round(val)), lo), hi))
    if settings.write_model is not None:
        write_model_file(settings.write_model, str(cm.proto))

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = settings.threads
    if deadline is not None:
        p.max_time_in_seconds = max(0.0, deadline - time.monotonic())
    # CP-SAT 9.15 can certify a wrong optimum after its at-most-one + linear inclusion
    # presolve (google/or-tools#5293); that presolve step is switched off.
    p.presolve_inclusion_work_limit = 0
    # ... and its SAT presolve called a feasible model infeasible (and proved a wrong
    # optimum with a warm start) at one time unit (test_cpsat_sat_presolve_regression in
    # tests/test_milp_symmetry.py); cp_model_probing_level = 0 avoided it too
    p.cp_model_use_sat_presolve = False
    # the linear relaxation of every row (indicators included) in the LP-based search
    p.linearization_level = 2
    # Ctrl-C is Python's: CP-SAT's own SIGINT handler would end the solve as if its
    # time limit were reached (and its handler can abort the process)
    p.catch_sigint_signal = False
    progress = Progress("cpsat", settings.progress)
    if settings.progress:
        p.log_search_progress = True
        p.log_to_stdout = False

        def on_log(line: str) -> None:
            mt = _LOG.match(line)
            if mt:
                try:
                    progress.update(
                        float(mt.group(1)) * sec_per_step, float(mt.group(2)) * sec_per_step
                    )
                except ValueError:
                    pass

        solver.log_callback = on_log
    t0 = time.perf_counter()
    # CP-SAT can overrun its own limit (its presolve, on a loaded machine): stopped then
    late = None if deadline is None else deadline + STOP_GRACE
    code = run_stoppable(lambda: solver.solve(cm), solver.stop_search, deadline=late)
    wall = time.perf_counter() - t0
    status = {
        cp_model.OPTIMAL: Status.OPTIMAL,
        cp_model.FEASIBLE: Status.FEASIBLE,
        cp_model.INFEASIBLE: Status.INFEASIBLE,
        cp_model.UNKNOWN: Status.UNKNOWN,
    }.get(code)
    if status is None:
        why = cm.validate()
        if "overflow" in why.lower():
            raise OutOfRange(f"cpsat: {why}")
        raise InternalError(f"cpsat: the model is invalid ({solver.status_name(code)}): {why}")
    st = sm.form.sets
    terms = st.n + 2 * len(st.edges) + 2  # rounded terms of one row (each below one step)
    ans = Answer(
        status,
        seconds=wall,
        exact_bound=True,
        resolution=terms * (st.inst.N + 1 if st.batch else 1) * sec_per_step,
    )
    if status in (Status.FEASIBLE, Status.UNKNOWN):
        ans.stopped = "time limit"
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        ans.values = {
            j: float(solver.value(cv[j]))
            for j, var in enumerate(m.vars)
            if var.kind != "continuous"
        }
        ans.objective = solver.objective_value * sec_per_step
    if status != Status.INFEASIBLE and math.isfinite(solver.best_objective_bound):
        ans.bound = (solver.best_objective_bound - _slack_steps(sm)) * sec_per_step
    progress.update(ans.objective, ans.bound, force=True)
    return ans
