"""Certification of a MILP backend's answers against the exact contract (cost model sec. 7):
:func:`certify` runs one backend in rounds and says "optimal" only when a plan that the
evaluator accepts and a justified lower bound agree within :data:`PROOF_RTOL`, "infeasible"
only when the relaxed model is infeasible, and Status.BACKEND_ERROR for a claim that fails
the checks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.milp.backend import Answer, OutOfRange, Settings
from piper_ilp.milp.model import Formulation
from piper_ilp.milp.scaled import UNITS_PER_REFERENCE, Memory, ScaledModel, TimeScale, scale
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan
from piper_ilp.solution import Solution, Status

__all__ = ["PROOF_RTOL", "Round", "certify"]

#: An optimum is proven when (plan's TPS - lower bound) <= PROOF_RTOL * plan's TPS.
PROOF_RTOL = 1e-6

#: The most rounds (solves) one call makes.
MAX_ROUNDS = 5

#: A unit counts as too coarse when the reference it came from is above this many times
#: the best plan's TPS.
COARSE = 10.0

#: A plan's TPS sits at most this far above a cutoff set from it.
CUTOFF_MARGIN = 1e-6


@dataclass
class Round:
    """One round of :func:`certify` (one backend call), as ``info["rounds"]`` reports it.

    Attributes
    ----------
    unit : float
        Seconds per model unit.
    cutoff : float
        The round's cutoff on the objective, in seconds.
    memory : str
        ``"relax"`` or ``"restrict"`` (:class:`~piper_ilp.milp.scaled.Memory`).
    status : str
        The backend's claim.
    objective, bound : float or None
        The backend's value of its plan and its lower bound, in seconds.
    tps : float or None
        The evaluator's TPS of the backend's plan, when valid.
    seconds : float
        The backend's wall time.
    note : str
        What certification made of the round.
    value : float or None
        The evaluator's value of the mode's objective (the TPS by default).
    """

    unit: float
    cutoff: float
    memory: str
    status: str
    objective: float | None
    bound: float | None
    tps: float | None
    seconds: float
    note: str = ""
    value: float | None = None  # the evaluator's value of the mode's objective (= tps by default)

    def to_dict(self) -> dict:
        """The fields as a dict (JSON-ready)."""
        return dict(self.__dict__)


@dataclass
class _State:
    """The best plan so far; ``value`` is the evaluator's value of the mode's objective
    (the TPS, or the batch time of sec. 9)."""

    plan: Plan | None = None
    value: float | None = None
    objective: float | None = None
    resolution: float = 0.0
    from_hint: bool = False
    lower: float = 0.0
    rounds: list[Round] = field(default_factory=list)
    mode: Mode = DEFAULT_MODE

    @property
    def what(self) -> str:
        return "batch time" if self.mode.batch_time else "TPS"


def _error(backend: str, message: str, state: _State, info: dict) -> Solution:
    return _answer(
        backend,
        Status.BACKEND_ERROR,
        f"{backend}: claim failed certification: {message}",
        state,
        info,
    )


def _answer(backend: str, status: Status, message: str, state: _State, info: dict) -> Solution:
    """An answer without a plan, ``info["rounds"]`` the rounds so far."""
    info["rounds"] = [r.to_dict() for r in state.rounds]
    return Solution(backend, status, message=message, info=info, mode=state.mode)


def certify(
    form: Formulation,
    backend: str,
    solve: Callable[[ScaledModel, Settings], Answer],
    *,
    time_limit: float | None,
    threads: int,
    write_model,
    hint: Plan | None,
    hint_values: dict[int, float] | None,
    progress: bool,
    info: dict,
    cutoff: float | None = None,
) -> Solution:
    """Solve ``form`` with one backend in rounds and certify the answer (cost model sec. 7).

    A plan's value is the evaluator's value of the model's mode (its TPS, or its batch
    time: ``evaluate(instance, plan, mode).value``). The rounds:

    1. the memory rows relaxed (every plan with memory <= M is in the model, so the
       backend's bound is a lower bound on the true optimum), the time unit set from an
       upper bound on the optimum (the largest possible value, or a known plan's);
    2. when the backend's plan is accepted by the evaluator and its value is within
       :data:`PROOF_RTOL` of the bound: optimal;
    3. when the time unit was too coarse for that (the optimum more than :data:`COARSE`
       times below the reference the unit came from): again, with the unit set from the
       plan found and its value as a cutoff;
    4. when the plan overruns M exactly (it fits only the relaxed rows): again with memory
       restricted to M (1 - e), whose plans fit exactly; if the restricted optimum and the
       relaxed bound do not agree, the answer is "cannot certify at this memory boundary"
       (feasible with the plan and bound found, or unknown), never a proof.

    At most :data:`MAX_ROUNDS` rounds. "Infeasible" is claimed only when the relaxed model
    is infeasible (for a floating-point backend, confirmed with its presolve off). A claim
    that fails the checks (a plan the evaluator rejects for any reason but memory, a bound
    above a valid plan's value, an optimum whose bound and value disagree at a fine enough
    unit, an "infeasible" with a plan in hand) is Status.BACKEND_ERROR.

    Parameters
    ----------
    form : Formulation
        The model (:mod:`piper_ilp.milp.model`) of the instance and mode.
    backend : str
        The backend's name, for messages and the Solution's method.
    solve : callable
        The backend, ``solve(ScaledModel, Settings) -> Answer``.
    time_limit : float or None
        Seconds for all rounds together; None: none.
    threads : int
        Solver threads.
    write_model : str, Path or None
        Where the first round writes its model.
    hint : Plan or None
        A valid plan to start from: the first plan in hand, and its value the first
        reference (unless above ``cutoff``).
    hint_values : dict or None
        The hint as the model's variable values (``form.values_of``); the hint is used
        only when both are given.
    progress : bool
        Progress lines on stderr.
    info : dict
        Filled in: ``rounds`` (:meth:`Round.to_dict` each), and where they apply
        ``cutoff``, ``hint``, ``plan_from`` and ``scaling_error``.
    cutoff : float, optional
        Restricts the search to plans whose value is at most ``cutoff`` (1 +
        :data:`CUTOFF_MARGIN`): an optimum found under it is the optimum (a better plan
        would be under it too); a model infeasible under it proves nothing about the
        instance, and the answer is unknown (or feasible with a hint above it), never
        infeasible. A hint above the cutoff is not used as the first plan.

    Returns
    -------
    Solution
        OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN, OUT_OF_RANGE (the backend raised
        :class:`~piper_ilp.milp.backend.OutOfRange`, or the largest possible value
        overflows) or BACKEND_ERROR; with ``info``. Its plan has passed the evaluator but
        not yet :func:`~piper_ilp.solution.checked_solution` (``solve_milp`` does that).

    Raises
    ------
    InputError
        The model file cannot be written.
    InternalError
        The backend failed (a bug, or a broken solver binary).
    KeyboardInterrupt
        Ctrl-C, after the backend was stopped.
    """
    st = form.sets
    t_start = time.perf_counter()
    mode = st.mode
    state = _State(lower=max(0.0, st.obj_low), mode=mode)
    # spare: a hint above the cutoff, returned (feasible) if nothing else is found
    spare, values_hint = _take_hint(state, st.inst, hint, hint_values, cutoff, info)
    if not math.isfinite(st.obj_bound):
        what = "TPS" if not mode.batch_time else "batch time"
        return _out_of_range(backend, f"the largest possible {what} overflows a float", info, mode)
    # a hint of value 0 gives no scale: as a cutoff, 0 would cap every time coefficient
    # at 0 and every plan would look optimal (values are >= 0, so the solve must prove 0)
    ref = state.value if state.value else st.obj_bound
    if cutoff is not None:
        ref = min(ref, cutoff)
        info["cutoff"] = cutoff
        if cutoff * (1 + CUTOFF_MARGIN) < state.lower:
            _restore(state, spare)
            return _finish(
                backend,
                state,
                info,
                f"the cutoff {cutoff!r} is below {state.lower!r}, a lower bound every "
                "plan obeys: not solved, and not a proof of infeasibility",
            )
    ts = TimeScale.around(ref, ref * (1 + CUTOFF_MARGIN))
    memory = Memory.RELAX
    stop_reason = None
    for k in range(MAX_ROUNDS):
        remaining = None
        if time_limit is not None:
            remaining = time_limit - (time.perf_counter() - t_start)
            if remaining <= 0:
                stop_reason = "time limit"
                break
        sm = scale(form, ts, memory)
        settings = Settings(
            remaining, threads, write_model if k == 0 else None, values_hint, progress
        )
        try:
            ans = solve(sm, settings)
        except OutOfRange as exc:
            return _out_of_range(backend, str(exc), info, mode)
        rnd = _round(sm, ans)
        state.rounds.append(rnd)
        overrun = False
        if ans.values is not None:
            plan = form.plan_of(ans.values)
            ev = evaluate(st.inst, plan, mode)
            if ev.valid:
                rnd.tps, rnd.value = ev.tps, ev.value
                objective = ans.objective
                if (
                    objective is not None
                    and abs(objective - ev.value) > ans.resolution + PROOF_RTOL * ev.value
                ):
                    if objective > ev.value and ans.status != Status.OPTIMAL:
                        # an incumbent (not claimed optimal) need not be minimal in its
                        # continuous variables: a cut variable above its edge's cost (which
                        # the work row adds to K T) or, graph pipelining, a stage-graph arc
                        # without an edge (it only raises h and L). Its plan is better than
                        # its number, which is then not reported
                        rnd.note = (
                            f"its value {objective!r} is above its plan's {ev.value!r} "
                            "(an incumbent not minimal in its cut variables or arcs)"
                        )
                        objective = None
                    else:
                        return _error(
                            backend,
                            f"its value {objective!r} of its plan and the evaluator's "
                            f"{state.what} {ev.value!r} differ by more than its resolution "
                            f"{ans.resolution:.3g}",
                            state,
                            info,
                        )
                if state.value is None or ev.value <= state.value:
                    state.plan, state.value, state.from_hint = plan, ev.value, False
                    state.objective, state.resolution = objective, ans.resolution
            elif memory == Memory.RELAX and all(v.rule == 6 for v in ev.violations):
                overrun = True
                rnd.note = f"plan overruns M exactly: {ev.violations[0]}"
            else:
                return _error(
                    backend,
                    f"its plan is rejected by the evaluator: {ev.violations[0]}",
                    state,
                    info,
                )
        if ans.status == Status.INFEASIBLE:
            left = None if time_limit is None else time_limit - (time.perf_counter() - t_start)
            again = (form, solve, sm, None if left is None else max(0.0, left), threads)
            return _infeasible(backend, ans, memory, ts, cutoff, state, spare, info, again)
        _take_bound(state, ans, memory, ts, rnd)
        if state.value is not None and state.lower > state.value * (1 + PROOF_RTOL):
            return _error(
                backend,
                f"its lower bound {state.lower!r} is above the {state.what} {state.value!r} of a "
                "valid plan",
                state,
                info,
            )
        if ans.status != Status.OPTIMAL:
            stop_reason = ans.stopped or "stopped"
            break
        if overrun:
            memory = Memory.RESTRICT
            continue
        if state.value is not None and _proven(state):
            return _finish(backend, state, info, None, proven=True)
        # not proven: a finer unit, or an honest answer
        if state.value is not None and ts.unit * UNITS_PER_REFERENCE > COARSE * state.value:
            ts = TimeScale.around(state.value, state.value * (1 + CUTOFF_MARGIN))
            values_hint = form.values_of(state.plan)[0]
            memory = Memory.RELAX  # a bound needs the relaxed rows at the finer unit
            continue
        if memory == Memory.RESTRICT:
            return _finish(
                backend,
                state,
                info,
                "cannot certify at this memory boundary: the best plan that fits "
                "M exactly and the bound with memory relaxed differ",
            )
        return _error(
            backend,
            f"it claims the optimum, but the plan's {state.what} {state.value!r} and its lower "
            f"bound {state.lower!r} differ by more than {PROOF_RTOL:g} relative",
            state,
            info,
        )
    _restore(state, spare)
    return _finish(
        backend, state, info, f"{stop_reason or 'round limit'} reached; optimality not proven"
    )


def _infeasible(
    backend: str,
    ans: Answer,
    memory: Memory,
    ts: TimeScale,
    cutoff: float | None,
    state: _State,
    spare: tuple[Plan, float] | None,
    info: dict,
    again: tuple,
) -> Solution:
    """The answer when a round's model is infeasible: not a proof under a cutoff or with
    memory restricted, an error beside a plan in hand, proven infeasible when the backend's
    bound is exact, else after a second opinion (``again``: form, solve, the scaled model,
    the seconds left and threads for :func:`_second_opinion`)."""
    if cutoff is not None and state.plan is None and memory == Memory.RELAX:
        # no plan at or below the caller's cutoff: the cutoff may simply be too low
        _restore(state, spare)
        return _finish(
            backend,
            state,
            info,
            f"no plan with {state.what} at or below the cutoff {cutoff!r} "
            "(the cutoff is below the optimum, or the instance is infeasible): not a proof "
            "of either",
        )
    if memory == Memory.RESTRICT:
        return _finish(
            backend,
            state,
            info,
            "cannot certify at this memory boundary: plans fit M(1+e) "
            "but none was found that fits M(1-e)",
        )
    if state.plan is not None:
        return _error(
            backend,
            f"it calls the model infeasible, but a plan with {state.what} {state.value!r} "
            f"fits (below the cutoff {ts.t_ub!r})",
            state,
            info,
        )
    if not ans.exact_bound:
        form, solve, sm, left, threads = again
        return _second_opinion(form, backend, solve, sm, left, threads, state, info)
    message = "proven infeasible: even with memory relaxed to M(1+1e-9) no valid plan exists"
    return _answer(backend, Status.INFEASIBLE, message, state, info)


def _round(sm: ScaledModel, ans: Answer, note: str = "") -> Round:
    """The record of one backend call on ``sm`` (its unit, cutoff and memory rows)."""
    return Round(
        sm.scale.unit,
        sm.scale.t_ub,
        sm.memory.value,
        ans.status.value,
        ans.objective,
        ans.bound,
        None,
        ans.seconds,
        note=note,
    )


def _take_hint(
    state: _State,
    inst: Instance,
    hint: Plan | None,
    hint_values: dict[int, float] | None,
    cutoff: float | None,
    info: dict,
) -> tuple[tuple[Plan, float] | None, dict[int, float] | None]:
    """The hint (used only with its ``hint_values``) as the first plan in hand, or, when its
    value is above the ``cutoff`` (with its margin), set aside (``info["hint"]`` says so).
    Returns the hint set aside with its value (or None) and the values to give the first
    round as a warm start (``hint_values``, or None when the hint is set aside)."""
    if hint is None or hint_values is None:
        return None, hint_values
    hint_value = evaluate(inst, hint, state.mode).value
    if cutoff is not None and hint_value > cutoff * (1 + CUTOFF_MARGIN):
        info["hint"] = (
            f"not used as the first plan: its {state.what} {hint_value!r} is above the cutoff "
            f"{cutoff!r}"
        )
        return (hint, hint_value), None
    state.plan, state.value, state.from_hint = hint, hint_value, True
    return None, hint_values


def _take_bound(state: _State, ans: Answer, memory: Memory, ts: TimeScale, rnd: Round) -> None:
    """Raise ``state.lower`` to the round's bound where it bounds the optimum (memory
    relaxed, and a value not tiny in model units unless the bound is exact), else say in
    ``rnd.note`` why it was not used."""
    # A float backend's bound means something only when its own value is not tiny
    # in model units (its tolerances are absolute); CP-SAT's integer bound always does.
    fine = ans.objective is not None and ans.objective >= ts.unit * UNITS_PER_REFERENCE / COARSE
    if memory == Memory.RELAX and ans.bound is not None and (fine or ans.exact_bound):
        state.lower = max(state.lower, ans.bound)
    elif ans.bound is not None:
        rnd.note = (
            (rnd.note + "; " if rnd.note else "")
            + "bound not used ("
            + (
                "memory restricted"
                if memory == Memory.RESTRICT
                else "its value is below the unit's resolution"
            )
            + ")"
        )


def _restore(state: _State, spare: tuple[Plan, float] | None) -> None:
    """Without a plan of its own, the answer falls back on a hint set aside (above the cutoff)."""
    if state.plan is None and spare is not None:
        state.plan, state.value, state.from_hint = spare[0], spare[1], True


def _second_opinion(form, backend, solve, sm, time_left, threads, state, info) -> Solution:
    """A floating-point backend's "infeasible" counts only when the same relaxed model,
    solved again with its presolve off, is infeasible too."""
    if time_left is not None and time_left <= 0:
        message = "infeasibility claimed, no time left to confirm it"
        return _answer(backend, Status.UNKNOWN, message, state, info)
    again = solve(sm, Settings(time_left, threads, None, None, False, careful=True))
    rnd = _round(sm, again, note="second opinion, presolve off")
    state.rounds.append(rnd)
    if again.status == Status.INFEASIBLE:
        message = (
            "proven infeasible: even with memory relaxed to "
            "M(1+1e-9) no valid plan exists (confirmed with presolve off)"
        )
        return _answer(backend, Status.INFEASIBLE, message, state, info)
    if again.values is not None:
        ev = evaluate(form.sets.inst, form.plan_of(again.values), state.mode)
        if ev.valid:
            rnd.tps, rnd.value = ev.tps, ev.value
            return _error(
                backend,
                f"it calls the model infeasible, but with presolve off it finds a plan with "
                f"{state.what} {ev.value!r} that the evaluator accepts",
                state,
                info,
            )
    message = (
        "infeasibility claimed but not confirmed (with presolve off "
        f"the backend ends {again.status.value})"
    )
    return _answer(backend, Status.UNKNOWN, message, state, info)


def _proven(state: _State) -> bool:
    return state.value - state.lower <= PROOF_RTOL * state.value


def _out_of_range(backend: str, why: str, info: dict, mode: Mode = DEFAULT_MODE) -> Solution:
    return Solution(
        backend,
        Status.OUT_OF_RANGE,
        message=f"out of range for {backend}: {why}",
        info=info,
        mode=mode,
    )


def _finish(
    backend: str, state: _State, info: dict, why: str | None, proven: bool = False
) -> Solution:
    info["rounds"] = [r.to_dict() for r in state.rounds]
    if state.from_hint:
        info["plan_from"] = "hint"
    if state.plan is None:
        return Solution(
            backend,
            Status.UNKNOWN,
            bound=state.lower,
            message=why or "no plan and no proof",
            info=info,
            mode=state.mode,
        )
    if state.from_hint:
        state.objective = state.value  # the evaluator's value of the hint
    if proven:
        info["scaling_error"] = max(
            state.resolution,
            abs(state.objective - state.value) if state.objective is not None else 0.0,
        )
        status = Status.OPTIMAL
        message = f"optimal (proven by the backend, certified within {PROOF_RTOL:g} relative)"
    else:
        if state.objective is not None:
            info["scaling_error"] = max(state.resolution, abs(state.objective - state.value))
        status = Status.FEASIBLE
        message = why or "optimality not proven"
    return Solution(
        backend,
        status,
        plan=state.plan,
        objective=state.objective,
        bound=min(state.lower, state.value),
        message=message,
        info=info,
        mode=state.mode,
    )
