"""What every solver takes and returns: the :class:`Restrictions` (the paper's ablations),
one :class:`Status` enum, one :class:`Solution`, and :func:`checked_solution`, through which
every method's plan passes the independent evaluator (cost model sec. 7).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any

from piper_ilp.cost import close
from piper_ilp.errors import InternalError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan, plan_to_dict

__all__ = ["Status", "Restrictions", "Solution", "checked_solution", "divisors", "divisors_upto"]

RECOMPUTE_OPTION = "activation recomp"


class Status(str, enum.Enum):
    """The one set of statuses that every method's outcome maps to (cost model sec. 7).

    Attributes
    ----------
    OPTIMAL
        A plan proven optimal: a plan the evaluator accepts plus a justified lower bound.
    FEASIBLE
        A plan, optimality not proven (a time limit, or a heuristic such as Piper's
        greedy option choice).
    INFEASIBLE
        Proven that no valid plan exists.
    UNKNOWN
        Stopped with no plan and no proof.
    OUT_OF_RANGE
        The method cannot represent this instance's numbers (e.g. a MILP backend's
        scaled integers would lose the optimum's digits); ``message`` says why. Never a
        proof.
    BACKEND_ERROR
        The backend claimed a result that failed certification (its plan rejected by
        the evaluator, or its bound and value disagree); ``message`` and ``info`` hold
        the details. Never a proof, and never evidence against another method.

    Examples
    --------
    >>> str(Status.OPTIMAL), Status("out-of-range") is Status.OUT_OF_RANGE
    ('optimal', True)
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"
    OUT_OF_RANGE = "out-of-range"
    BACKEND_ERROR = "backend-error"

    def __str__(self) -> str:
        return self.value


def divisors_upto(n: int, cap: int) -> list[int]:
    """The divisors of ``n`` that are at most ``cap``, ascending: the data-parallel
    degrees d that divide N and fit in K devices.

    Runs in O(min(cap, sqrt(n))) steps: a divisor k <= sqrt(n) is tried directly and
    pairs with n // k, and when ``cap`` < sqrt(n) no partner n // k can be <= cap. So
    N = 10**18 with a small K is instant.

    Parameters
    ----------
    n : int
    cap : int

    Returns
    -------
    list of int
        Empty when ``n`` or ``cap`` is below 1.

    Examples
    --------
    >>> divisors_upto(12, 5)
    [1, 2, 3, 4]
    >>> divisors_upto(10**18, 10)
    [1, 2, 4, 5, 8, 10]
    """
    if n < 1 or cap < 1:
        return []
    root = math.isqrt(n)
    small, large = [], []
    for k in range(1, min(cap, root) + 1):
        if n % k == 0:
            small.append(k)
            partner = n // k
            if partner != k and partner <= cap:
                large.append(partner)
    return small + large[::-1]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (:func:`divisors_upto` with no cap).

    Parameters
    ----------
    n : int

    Returns
    -------
    list of int
        Empty when ``n`` is below 1.

    Examples
    --------
    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    return divisors_upto(n, n)


@dataclass(frozen=True)
class Restrictions:
    """The paper's ablations and caps, shared by every solver (cost model secs. 4 and 12).

    Parameters
    ----------
    max_d : int, optional
        The largest data-parallel degree (1: no data parallelism); None: no cap.
    max_t : int, optional
        The largest tensor-parallel degree (1: no tensor parallelism); None: no cap.
    exclude_options : frozenset of str
        Option ids made unavailable (``"activation recomp"``: no recomputation).
    uniform : bool
        Every stage has the same (t, d), as Megatron-LM and torchtitan run a pipeline.
    degrees : (int, int), optional
        Every stage has exactly this (t, d): one of the pairs a uniform plan can take
        (:meth:`uniform_pairs`, :meth:`fixed`).

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict, option_dict
    >>> inst = instance_from_dict({
    ...     "maxDevices": 4, "maxMemoryPerDevice": 1e9, "bandwidth": 1.0, "mbsInBatch": 6,
    ...     "nodes": [{"id": 0, "TMPCs": {"1": [option_dict("vanilla", 1.0, 0, 0, 0)],
    ...                                   "2": [option_dict("vanilla", 0.6, 0, 0, 0)]}}],
    ...     "edges": []})
    >>> Restrictions().d_values(inst)  # the divisors of N = 6 up to K = 4
    [1, 2, 3]
    >>> Restrictions().uniform_pairs(inst)  # t d <= K
    [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]
    >>> Restrictions.from_flags(no_tensor_parallel=True).uniform_pairs(inst)
    [(1, 1), (1, 2), (1, 3)]
    """

    max_d: int | None = None
    max_t: int | None = None
    exclude_options: frozenset[str] = frozenset()
    uniform: bool = False
    degrees: tuple[int, int] | None = None

    @classmethod
    def from_flags(
        cls,
        no_data_parallel: bool = False,
        no_tensor_parallel: bool = False,
        no_recompute: bool = False,
        exclude_options: tuple[str, ...] | list[str] = (),
        max_d: int | None = None,
        max_t: int | None = None,
        uniform: bool = False,
    ) -> "Restrictions":
        """The restrictions the command line's flags ask for.

        Parameters
        ----------
        no_data_parallel : bool
            Sets ``max_d`` to 1 (overriding ``max_d``).
        no_tensor_parallel : bool
            Sets ``max_t`` to 1 (overriding ``max_t``).
        no_recompute : bool
            Adds ``"activation recomp"`` to the excluded options.
        exclude_options : sequence of str
            Option ids made unavailable.
        max_d, max_t : int, optional
            Caps on the degrees.
        uniform : bool
            Every stage has the same (t, d).

        Returns
        -------
        Restrictions

        Examples
        --------
        >>> r = Restrictions.from_flags(no_recompute=True, max_t=2)
        >>> r.max_t, sorted(r.exclude_options)
        (2, ['activation recomp'])
        """
        ex = set(exclude_options)
        if no_recompute:
            ex.add(RECOMPUTE_OPTION)
        if no_data_parallel:
            max_d = 1
        if no_tensor_parallel:
            max_t = 1
        return cls(max_d=max_d, max_t=max_t, exclude_options=frozenset(ex), uniform=uniform)

    def apply(self, instance: Instance) -> Instance:
        """``instance`` without the options these restrictions forbid.

        Removes the excluded options and every t above ``max_t`` (or other than the fixed
        ``degrees``' t); see :meth:`piper_ilp.instance.Instance.with_options`.

        Parameters
        ----------
        instance : Instance

        Returns
        -------
        Instance
            ``instance`` itself when nothing is removed. A node may be left with no
            option: then every plan is infeasible (not an error).
        """
        only_t = self.degrees[0] if self.degrees is not None else None
        if self.max_t is None and not self.exclude_options and only_t is None:
            return instance
        return instance.with_options(
            lambda node, t, opt: (
                (self.max_t is None or t <= self.max_t)
                and (only_t is None or t == only_t)
                and opt.id not in self.exclude_options
            )
        )

    def d_values(self, instance: Instance) -> list[int]:
        """The data-parallel degrees a stage may take: the divisors of N, at most K and
        ``max_d``.

        Parameters
        ----------
        instance : Instance

        Returns
        -------
        list of int
            Ascending; with ``degrees`` fixed, only its d (or none, when that d is not
            allowed).
        """
        cap = min(instance.N, instance.K, self.max_d or instance.N)
        ds = divisors_upto(instance.N, cap)
        if self.degrees is not None:
            return [d for d in ds if d == self.degrees[1]]
        return ds

    def uniform_pairs(self, instance: Instance) -> list[tuple[int, int]]:
        """Every (t, d) one stage may take: under ``uniform``, the pairs of which a plan
        uses exactly one for all its stages.

        Parameters
        ----------
        instance : Instance

        Returns
        -------
        list of (int, int)
            Ascending, t * d <= K, t among the instance's t after :meth:`apply`, d among
            :meth:`d_values`.
        """
        ts = self.apply(instance).t_values
        return [(t, d) for t in ts for d in self.d_values(instance) if t * d <= instance.K]

    def fixed(self, t: int, d: int) -> "Restrictions":
        """These restrictions with every stage at exactly (t, d).

        Parameters
        ----------
        t, d : int
            The pair (one of :meth:`uniform_pairs`).

        Returns
        -------
        Restrictions
            A copy with ``degrees = (t, d)`` and ``uniform`` dropped (it then holds by
            itself).
        """
        return dataclasses.replace(self, uniform=False, degrees=(t, d))

    def violation(self, instance: Instance, plan: Plan) -> str | None:
        """Why ``plan`` breaks these restrictions, or None when it keeps them.

        Only the restrictions are checked, not the plan's validity (the evaluator's
        question).

        Parameters
        ----------
        instance : Instance
            Gives N and K for the allowed d.
        plan : Plan

        Returns
        -------
        str or None
            One sentence naming the first stage at fault.
        """
        allowed_d = set(self.d_values(instance))
        for i, st in enumerate(plan.stages):
            if st.d not in allowed_d:
                return f"stage {i} has d = {st.d}, not an allowed data-parallel degree"
            if self.max_t is not None and st.t > self.max_t:
                return f"stage {i} has t = {st.t} above max_t = {self.max_t}"
            if self.degrees is not None and st.t != self.degrees[0]:
                return f"stage {i} has t = {st.t}, not the fixed t = {self.degrees[0]}"
            bad = [v for v in st.nodes if st.options.get(v) in self.exclude_options]
            if bad:
                return f"stage {i} gives node {bad[0]} the excluded option {st.options[bad[0]]!r}"
            if self.uniform and (st.t, st.d) != (plan.stages[0].t, plan.stages[0].d):
                return (
                    f"stage {i} has (t, d) = ({st.t}, {st.d}) but stage 0 has "
                    f"({plan.stages[0].t}, {plan.stages[0].d}): not uniform"
                )
        return None

    def to_dict(self) -> dict:
        """A JSON-ready dict: ``max_d``, ``max_t``, ``exclude_options`` (sorted), and
        ``uniform`` and ``degrees`` only when set.

        Examples
        --------
        >>> Restrictions(max_t=1).to_dict()
        {'max_d': None, 'max_t': 1, 'exclude_options': []}
        """
        out: dict = {
            "max_d": self.max_d,
            "max_t": self.max_t,
            "exclude_options": sorted(self.exclude_options),
        }
        if self.uniform:
            out["uniform"] = True
        if self.degrees is not None:
            out["degrees"] = list(self.degrees)
        return out


@dataclass
class Solution:
    """A solver's answer, as every method returns it.

    Parameters
    ----------
    method : str
        The method's name in the registry (``"dp"``, ``"cpsat"``, ...).
    status : Status
    plan : Plan, optional
        The plan found (with OPTIMAL and FEASIBLE).
    tps : float, optional
        The evaluator's TPS of ``plan`` (set by :func:`checked_solution`).
    objective : float, optional
        The solver's own value of the mode's objective (for a MILP, in its scaled
        arithmetic).
    bound : float, optional
        A proven lower bound on the optimal ``value``, where the method has one.
    seconds : float
        Wall time.
    message : str
        One line for people (why it stopped, why it is out of range).
    info : dict
        Method-specific facts (model size, scaling error, counts, why infeasible).
    mode : Mode
        What was optimized (:class:`~piper_ilp.mode.Mode`, cost model secs. 8-9).
    value : float, optional
        The evaluator's value of the mode's objective for ``plan`` (the TPS, or the batch
        time of sec. 9; set by :func:`checked_solution`).
    """

    method: str
    status: Status
    plan: Plan | None = None
    tps: float | None = None
    objective: float | None = None
    bound: float | None = None
    seconds: float = 0.0
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    mode: Mode = DEFAULT_MODE
    value: float | None = None

    @property
    def gap(self) -> float | None:
        """The relative gap (value - bound) / value, at least 0; None unless both are
        known (``value`` falls back on ``tps``); 0 when the value is 0."""
        value = self.value if self.value is not None else self.tps
        if value is None or self.bound is None:
            return None
        if value == 0:
            return 0.0
        return max(0.0, (value - self.bound) / value)

    def to_dict(self) -> dict:
        """A JSON-ready dict (the CLI's ``--json`` and the reports).

        Keys: ``method``, ``status``, ``mode``, ``objective`` (the evaluator's value of the
        mode's objective, else the solver's), ``tps``, ``solver_value`` (the solver's own
        number), ``bound``, ``gap``, ``devices`` and ``sum_d`` and ``stages`` (of the
        plan), ``seconds``, ``message``, ``plan`` (sec. 2's object form) and ``info``.
        Non-finite floats are left as they are (:func:`piper_ilp.files.json_safe`).
        """
        return {
            "method": self.method,
            "status": self.status.value,
            "mode": self.mode.to_dict(),
            "objective": self.value if self.value is not None else self.objective,
            "tps": self.tps,
            "solver_value": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "devices": self.plan.devices if self.plan else None,
            "sum_d": self.plan.sum_d if self.plan else None,
            "stages": len(self.plan.stages) if self.plan else None,
            "seconds": self.seconds,
            "message": self.message,
            "plan": plan_to_dict(self.plan) if self.plan else None,
            "info": self.info,
        }


def checked_solution(
    instance: Instance,
    solution: Solution,
    tolerance: float = 1e-9,
    absolute: float = 0.0,
    restrictions: Restrictions | None = None,
) -> Solution:
    """Pass a solver's plan through the independent evaluator (cost model sec. 7).

    The plan must be valid, obey ``restrictions``, and the evaluator's value of the mode's
    objective (under ``solution.mode``) must agree with the solver's ``objective``.

    Parameters
    ----------
    instance : Instance
        The instance the solver was given (restrictions not applied).
    solution : Solution
        The solver's answer; changed in place.
    tolerance : float
        Relative tolerance between the solver's ``objective`` and the evaluator's value.
    absolute : float
        Absolute tolerance, for a backend with a stated scaling error.
    restrictions : Restrictions, optional
        When given, the plan must keep them.

    Returns
    -------
    Solution
        ``solution`` itself, with ``tps`` and ``value`` set from the evaluator (unchanged
        when it has no plan).

    Raises
    ------
    InternalError
        The plan is invalid, breaks ``restrictions``, or its values disagree, or the
        status is OPTIMAL or FEASIBLE with no plan: a bug in the solver.
    """
    if solution.plan is None:
        if solution.status in (Status.OPTIMAL, Status.FEASIBLE):
            raise InternalError(f"{solution.method}: status {solution.status} but no plan")
        return solution
    ev = evaluate(instance, solution.plan, solution.mode)
    if not ev.valid:
        raise InternalError(
            f"{solution.method} returned a plan that the evaluator rejects: {ev.violations[0]}"
            + (f" (and {len(ev.violations) - 1} more)" if len(ev.violations) > 1 else "")
        )
    if restrictions is not None:
        why = restrictions.violation(instance, solution.plan)
        if why is not None:
            raise InternalError(
                f"{solution.method}: its plan breaks the restrictions "
                f"{restrictions.to_dict()}: {why}"
            )
    value = ev.value
    if solution.objective is not None:
        ok = (
            close(value, solution.objective, tolerance)
            or abs(value - solution.objective) <= absolute
        )
        if not ok:
            what = "batch time" if solution.mode.batch_time else "TPS"
            raise InternalError(
                f"{solution.method}: its value {solution.objective!r} and the evaluator's {what} "
                f"{value!r} for its plan differ by more than the stated tolerance (rel "
                f"{tolerance:g}, abs {absolute:g})"
            )
    solution.tps = ev.tps
    solution.value = value
    return solution
