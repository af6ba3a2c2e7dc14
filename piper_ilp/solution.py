"""What every solver takes and returns: restrictions, one status enum, one Solution.

Every method (the DP, each MILP backend, the exhaustive oracle) returns a
:class:`Solution` whose plan has been re-checked by the independent evaluator through
:func:`checked_solution`.
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
    """The one set of statuses that every backend's outcome maps to.

    OPTIMAL: a plan proven optimal (contract sec. 7: a plan the evaluator accepts plus a
    justified lower bound). FEASIBLE: a plan, optimality not proven (time limit, or a
    heuristic such as Piper's greedy option choice). INFEASIBLE: proven that no valid plan
    exists. UNKNOWN: stopped with no plan and no proof. OUT_OF_RANGE: the method cannot
    represent this instance's numbers (e.g. a MILP backend's scaled integers would lose
    the optimum's digits); ``message`` says why; never a proof. BACKEND_ERROR: the backend
    claimed a result that failed certification (its plan rejected by the evaluator, or its
    bound and value disagree); ``message`` and ``info`` hold the details; never a proof,
    and never evidence against another method.
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
    """The divisors of ``n`` that are at most ``cap``, ascending.

    Runs in O(min(cap, sqrt(n))) steps: a divisor k <= sqrt(n) is tried directly and
    pairs with n // k, and when ``cap`` < sqrt(n) no partner n // k can be <= cap. So
    N = 10**18 with a small K is instant.

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
    """The divisors of n, ascending."""
    return divisors_upto(n, n)


@dataclass(frozen=True)
class Restrictions:
    """The paper's ablations and caps, shared by every solver.

    ``max_d`` (1 = no data parallelism), ``max_t`` (1 = no tensor parallelism),
    ``exclude_options`` (option ids made unavailable; ``"activation recomp"`` = no
    recomputation), ``uniform`` (every stage has the same t and d, as Megatron-LM and
    torchtitan run a pipeline; contract sec. 12), ``degrees`` (every stage has exactly this
    (t, d): one of the pairs a uniform plan can take, see :meth:`uniform_pairs`).
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
        ex = set(exclude_options)
        if no_recompute:
            ex.add(RECOMPUTE_OPTION)
        if no_data_parallel:
            max_d = 1
        if no_tensor_parallel:
            max_t = 1
        return cls(max_d=max_d, max_t=max_t, exclude_options=frozenset(ex), uniform=uniform)

    def apply(self, instance: Instance) -> Instance:
        """The instance with excluded options and t above ``max_t`` (or other than the
        fixed ``degrees``' t) removed."""
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
        """Allowed data-parallel degrees: divisors of N, at most K and ``max_d`` (only the
        fixed ``degrees``' d, when it is one of them)."""
        cap = min(instance.N, instance.K, self.max_d or instance.N)
        ds = divisors_upto(instance.N, cap)
        if self.degrees is not None:
            return [d for d in ds if d == self.degrees[1]]
        return ds

    def uniform_pairs(self, instance: Instance) -> list[tuple[int, int]]:
        """Every (t, d) one stage may take, t * d <= K, ascending: under ``uniform``, the
        pairs of which a plan uses exactly one for all its stages."""
        ts = self.apply(instance).t_values
        return [(t, d) for t in ts for d in self.d_values(instance) if t * d <= instance.K]

    def fixed(self, t: int, d: int) -> "Restrictions":
        """These restrictions with every stage at exactly (t, d) (``uniform`` then holds by
        itself and is dropped)."""
        return dataclasses.replace(self, uniform=False, degrees=(t, d))

    def violation(self, instance: Instance, plan: Plan) -> str | None:
        """Why ``plan`` breaks these restrictions (naming the first stage at fault), or None."""
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
        """max_d, max_t, exclude_options; ``uniform`` and ``degrees`` only when set."""
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
    """A solver's answer.

    ``mode`` is what was optimized (:class:`~piper_ilp.pipeline.Mode`); ``tps`` is the
    evaluator's TPS of ``plan`` and ``value`` the evaluator's value of the mode's
    objective (the TPS, or the batch time of sec. 9); ``objective`` the solver's own value
    of it (for a MILP, in its scaled arithmetic); ``bound`` a proven lower bound on the
    optimal ``value`` where the method has one; ``seconds`` the wall time; ``info`` holds
    method-specific facts (model size, scaling error, counts, why infeasible).
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
        """Relative gap (value - bound) / value, when both are known."""
        value = self.value if self.value is not None else self.tps
        if value is None or self.bound is None:
            return None
        if value == 0:
            return 0.0
        return max(0.0, (value - self.bound) / value)

    def to_dict(self) -> dict:
        """A JSON-ready dict: method, status, mode, objective (the evaluator's value of the
        mode's objective), tps, solver_value (the solver's own number), bound, gap, plan,
        devices, sum_d, seconds, message and info."""
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
    """Pass a solver's plan through the evaluator (under ``solution.mode``) and fill in
    ``solution.tps`` and ``solution.value``.

    The plan must be valid, obey ``restrictions``, and the evaluator's value of the
    mode's objective must agree with the solver's ``objective`` to relative ``tolerance``
    (or within ``absolute``, for a backend with a stated scaling error).

    Raises
    ------
    InternalError
        When the plan is invalid or the values disagree: a bug in the solver.
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
