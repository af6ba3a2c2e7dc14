"""Cross-check one instance: run every method, re-check every plan, give one verdict.

This is ``piper-ilp verify`` (issue 5). Each method (the DP, the MILP on CP-SAT and on
CBC, the exhaustive oracle where the graph is tiny) solves the instance; every plan is
re-evaluated here by the independent evaluator (:func:`piper_ilp.evaluate.evaluate`),
whatever the solver itself checked, and the facts are compared:

``match``
    every method that finished proved the same optimum (or proved infeasibility);
``consistent``
    some MILP stopped early (time limit), but its bound <= the proven optimum <= its
    best plan, and every method that finished agrees;
``mismatch``
    anything else: a plan the evaluator rejects, a solver's value that is not its plan's
    TPS, a plan below a proven optimum, a bound above a valid plan, two proven optima
    that differ, "infeasible" next to a valid plan, a crash;
``inconclusive``
    nothing proven in time.

Piper's original greedy option choice (cost model sec. 5, ``dp --knapsack greedy``) also
runs: its plan must be valid and no better than the optimum, and its gap to the proven
optimum is reported.

Tolerances (``docs/cost-model.md`` sec. 6): 1e-9 relative between two float values;
a method that states an absolute error (CP-SAT's ``info["scaling_error"]``) gets that
much more.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from piper_ilp.cost import TPS_RTOL, close
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.evaluate import Evaluation, evaluate
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, plan_to_dict
from piper_ilp.solution import Restrictions, Solution, Status

__all__ = [
    "METHODS",
    "DEFAULT_METHODS",
    "VERDICTS",
    "Solver",
    "MethodResult",
    "Verdict",
    "default_solvers",
    "verify_instance",
    "plan_difference",
    "parse_methods",
]

def _known_methods() -> tuple[str, ...]:
    try:  # every MILP backend the project wires in (compare.methods), e.g. scip
        from compare.methods import METHODS as solver_methods
    except ImportError:  # pragma: no cover
        solver_methods = ()
    return tuple(dict.fromkeys(("dp", "cpsat", "cbc", *solver_methods, "brute")))


#: Methods ``verify`` knows (``greedy`` is Piper's rule, run alongside for its gap).
METHODS = _known_methods()
#: What ``verify`` and ``campaign`` run unless told otherwise.
DEFAULT_METHODS = ("dp", "cpsat", "cbc", "brute")

#: Verdicts, from best to worst.
VERDICTS = ("match", "consistent", "inconclusive", "mismatch")

#: A solving method: (instance, restrictions, time_limit, threads) -> Solution.
Solver = Callable[[Instance, Restrictions, "float | None", "int | None"], Solution]

GREEDY = "greedy"


# --------------------------------------------------------------------------------------
# The methods
# --------------------------------------------------------------------------------------


def _dp(instance: Instance, restrictions: Restrictions, time_limit: float | None, threads: int | None) -> Solution:
    from compare.methods import run_method

    return run_method(instance, "dp", restrictions)


def _greedy(instance: Instance, restrictions: Restrictions, time_limit: float | None, threads: int | None) -> Solution:
    from compare.methods import run_method

    return run_method(instance, "dp", restrictions, knapsack="greedy")


def _milp(backend: str):
    def solve(instance: Instance, restrictions: Restrictions, time_limit: float | None, threads: int | None) -> Solution:
        from compare.methods import run_method

        return run_method(instance, backend, restrictions, time_limit=time_limit, threads=threads)

    solve.__name__ = f"_milp_{backend}"
    return solve


def _brute(instance: Instance, restrictions: Restrictions, time_limit: float | None, threads: int | None) -> Solution:
    from compare.brute import solve_brute

    return solve_brute(instance, restrictions)


def default_solvers() -> dict[str, Callable]:
    """The real methods, by name: ``dp``, every MILP backend (``cpsat``, ``cbc``, ...),
    ``brute`` and ``greedy``.

    Each is called as ``solver(instance, restrictions, time_limit, threads)``.
    """
    table: dict[str, Callable] = {"dp": _dp}
    for m in METHODS:
        if m not in ("dp", "brute"):
            table[m] = _milp(m)
    table.update(brute=_brute, **{GREEDY: _greedy})
    return table


def parse_methods(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"dp,cpsat"`` -> ("dp", "cpsat"); raises InputError on an unknown or repeated name."""
    names = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    if not names:
        raise InputError(f"--methods: give at least one of {', '.join(METHODS)}")
    for m in names:
        if m not in METHODS:
            raise InputError(f"--methods: unknown method {m!r}; choose from {', '.join(METHODS)}")
    if len(set(names)) != len(names):
        raise InputError(f"--methods: {text!r} names a method twice")
    return tuple(names)


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------


@dataclass
class MethodResult:
    """One method's outcome on one instance.

    ``solution`` is None when the method was ``skipped`` (size limit; the reason) or
    crashed (``error``). ``evaluation`` is the evaluator's verdict on its plan.
    ``abs_tol`` is the absolute error the method states (CP-SAT's scaling error).
    """

    method: str
    solution: Solution | None = None
    evaluation: Evaluation | None = None
    skipped: str | None = None
    error: str | None = None
    seconds: float = 0.0
    abs_tol: float = 0.0

    @property
    def status(self) -> str:
        if self.skipped is not None:
            return "skipped"
        if self.error is not None:
            return "error"
        return self.solution.status.value

    @property
    def proven(self) -> bool:
        """Finished with a proof: optimal or infeasible (and no error)."""
        return self.solution is not None and self.error is None and self.solution.status in (Status.OPTIMAL, Status.INFEASIBLE)

    @property
    def tps(self) -> float | None:
        """The evaluator's TPS of the plan, when it is valid."""
        if self.evaluation is None or not self.evaluation.valid:
            return None
        return self.evaluation.tps

    def to_dict(self) -> dict:
        d: dict = {"method": self.method, "status": self.status, "seconds": self.seconds}
        if self.skipped is not None:
            d["skipped"] = self.skipped
        if self.error is not None:
            d["error"] = self.error
        s = self.solution
        if s is not None:
            d.update(
                tps=self.tps,
                objective=s.objective,
                bound=s.bound,
                abs_tol=self.abs_tol,
                stages=len(s.plan.stages) if s.plan else None,
                devices=s.plan.devices if s.plan else None,
                sum_d=s.plan.sum_d if s.plan else None,
                message=s.message,
                plan=plan_to_dict(s.plan) if s.plan else None,
            )
            if self.evaluation is not None and not self.evaluation.valid:
                d["violations"] = [str(v) for v in self.evaluation.violations]
        return d


@dataclass
class Verdict:
    """The cross-check of one instance.

    ``verdict`` one of :data:`VERDICTS`; ``optimum`` the proven optimal TPS (None when
    infeasible or nothing is proven); ``infeasible`` True when proven infeasible;
    ``results`` per method (in the order run, ``greedy`` last); ``problems`` why it is a
    mismatch and ``involved`` the methods they name; ``greedy_tps`` / ``greedy_gap`` Piper's rule's value and its relative gap
    (greedy - optimum) / optimum.
    """

    instance: str
    verdict: str
    optimum: float | None
    infeasible: bool
    results: dict[str, MethodResult]
    problems: list[str] = field(default_factory=list)
    involved: list[str] = field(default_factory=list)
    greedy_tps: float | None = None
    greedy_gap: float | None = None
    settings: dict = field(default_factory=dict)
    restrictions: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 match / consistent, 1 mismatch, 3 inconclusive."""
        return {"match": 0, "consistent": 0, "mismatch": 1, "inconclusive": 3}[self.verdict]

    def to_dict(self) -> dict:
        return {
            "instance": self.instance,
            "verdict": self.verdict,
            "optimum": self.optimum,
            "infeasible": self.infeasible,
            "problems": list(self.problems),
            "involved": list(self.involved),
            "greedy_tps": self.greedy_tps,
            "greedy_gap": self.greedy_gap,
            "settings": dict(self.settings),
            "restrictions": dict(self.restrictions),
            "methods": {name: r.to_dict() for name, r in self.results.items()},
        }


# --------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------


def _agree(x: float, y: float, abs_tol: float) -> bool:
    return close(x, y, TPS_RTOL) or abs(x - y) <= abs_tol


def _below(x: float, y: float, abs_tol: float) -> bool:
    """x < y by more than the tolerance."""
    return x < y and not _agree(x, y, abs_tol)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.12g}"


def _stage_text(plan: Plan, i: int) -> str:
    if i >= len(plan.stages):
        return "no such stage"
    st = plan.stages[i]
    opts = ",".join(f"{v}:{st.options.get(v, '?')}" for v in st.nodes)
    return f"nodes [{opts}] d={st.d} t={st.t}"


def plan_difference(instance: Instance, named_a: tuple[str, Plan], named_b: tuple[str, Plan]) -> str:
    """The first stage where two plans differ, and each plan's bottleneck stage.

    Examples
    --------
    >>> from piper_ilp.plan import Stage
    >>> from compare.generators import random_instance
    >>> inst = random_instance("chain", 2, 0, memory="loose")
    >>> u, v = inst.node_ids
    >>> pa = Plan((Stage((u, v), 1, 1, {u: "vanilla", v: "vanilla"}),))
    >>> pb = Plan((Stage((u,), 1, 1, {u: "vanilla"}), Stage((v,), 1, 1, {v: "vanilla"})))
    >>> plan_difference(inst, ("a", pa), ("b", pb)).startswith("first difference at stage 0")
    True
    """
    (na, a), (nb, b) = named_a, named_b
    first = None
    for i in range(max(len(a.stages), len(b.stages))):
        if i >= len(a.stages) or i >= len(b.stages):
            first = i
            break
        sa, sb = a.stages[i], b.stages[i]
        if (sorted(sa.nodes), sa.d, sa.t, dict(sa.options)) != (sorted(sb.nodes), sb.d, sb.t, dict(sb.options)):
            first = i
            break
    parts = []
    if first is None:
        parts.append("the plans are the same")
    else:
        parts.append(f"first difference at stage {first}: {na} has {_stage_text(a, first)}, {nb} has {_stage_text(b, first)}")
    for name, plan in ((na, a), (nb, b)):
        ev = evaluate(instance, plan)
        if ev.valid:
            k = ev.bottleneck
            parts.append(f"{name}'s bottleneck is stage {k} (TPS {_fmt(ev.stages[k].cost.tps)}, {len(plan.stages)} stages)")
        else:
            parts.append(f"{name}'s plan is invalid: {ev.violations[0]}")
    return "; ".join(parts)


def _run(name: str, solver: Callable, instance: Instance, restrictions: Restrictions, time_limit, threads) -> MethodResult:
    start = time.perf_counter()
    try:
        sol = solver(instance, restrictions, time_limit, threads)
    except SizeLimitError as exc:
        return MethodResult(name, skipped=str(exc), seconds=time.perf_counter() - start)
    except InputError as exc:
        # e.g. the greedy rule refusing more than two options per (node, t)
        if name == GREEDY:
            return MethodResult(name, skipped=str(exc), seconds=time.perf_counter() - start)
        return MethodResult(name, error=f"input error: {exc}", seconds=time.perf_counter() - start)
    except InternalError as exc:
        return MethodResult(name, error=f"internal error: {exc}", seconds=time.perf_counter() - start)
    except Exception as exc:  # a crash is a finding, not a reason to stop the campaign
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        return MethodResult(name, error=f"crashed: {type(exc).__name__}: {exc}{where}", seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    abs_tol = 0.0
    err = sol.info.get("scaling_error") if isinstance(sol.info, dict) else None
    if isinstance(err, (int, float)) and math.isfinite(err) and err > 0:
        abs_tol = float(err)
    ev = evaluate(instance, sol.plan) if sol.plan is not None else None
    return MethodResult(name, solution=sol, evaluation=ev, seconds=seconds, abs_tol=abs_tol)


def _check_one(r: MethodResult, instance: Instance, restrictions: Restrictions) -> list[str]:
    """Problems with a single method's answer, on its own."""
    out: list[str] = []
    if r.error is not None:
        return [f"{r.method}: {r.error}"]
    s = r.solution
    if s is None:
        return out
    if s.status in (Status.OPTIMAL, Status.FEASIBLE) and s.plan is None:
        out.append(f"{r.method}: status {s.status} but no plan")
    if s.status in (Status.INFEASIBLE, Status.UNKNOWN) and s.plan is not None:
        out.append(f"{r.method}: status {s.status} but it returned a plan")
    if s.plan is None:
        return out
    ev = r.evaluation
    if not ev.valid:
        more = f" (and {len(ev.violations) - 1} more)" if len(ev.violations) > 1 else ""
        out.append(f"{r.method}: its plan is invalid: {ev.violations[0]}{more}; plan {plan_to_dict(s.plan)}")
        return out
    allowed_d = set(restrictions.d_values(instance))
    for i, st in enumerate(s.plan.stages):
        if st.d not in allowed_d or (restrictions.max_t is not None and st.t > restrictions.max_t) or any(
            st.options.get(v) in restrictions.exclude_options for v in st.nodes
        ):
            out.append(f"{r.method}: stage {i} of its plan ({_stage_text(s.plan, i)}) breaks the restrictions {restrictions.to_dict()}")
    for what, value in (("objective", s.objective), ("tps", s.tps)):
        if value is not None and not _agree(value, ev.tps, r.abs_tol):
            out.append(f"{r.method}: its {what} {_fmt(value)} is not its plan's TPS {_fmt(ev.tps)} (evaluator)")
    if s.bound is not None and _below(ev.tps, s.bound, r.abs_tol):
        out.append(f"{r.method}: its bound {_fmt(s.bound)} is above its own plan's TPS {_fmt(ev.tps)}")
    return out


def verify_instance(
    instance: Instance,
    methods: Sequence[str] = DEFAULT_METHODS,
    restrictions: Restrictions = Restrictions(),
    *,
    time_limit: float | None = 60.0,
    threads: int | None = None,
    greedy: bool = True,
    solvers: Mapping[str, Callable] | None = None,
) -> Verdict:
    """Run ``methods`` on ``instance``, re-check every plan, and give the verdict.

    Parameters
    ----------
    instance : Instance
    methods : sequence of str
        Names from :data:`METHODS`. ``brute`` is skipped (not an error) on graphs too
        big for it, like any method that raises SizeLimitError.
    restrictions : Restrictions
        Passed to every method; every plan must obey them.
    time_limit : float, optional
        Seconds per MILP backend.
    threads : int, optional
        MILP solver threads.
    greedy : bool
        Also run Piper's greedy rule and report its gap to the optimum.
    solvers : mapping, optional
        Replace methods by name (tests inject deliberately wrong solvers); each is called
        as ``solver(instance, restrictions, time_limit, threads)`` and returns a Solution.

    Returns
    -------
    Verdict

    Examples
    --------
    >>> from compare.generators import random_instance
    >>> v = verify_instance(random_instance("chain", 3, 1), methods=("brute",), greedy=False)
    >>> v.verdict in ("match", "mismatch")
    True
    """
    table = default_solvers()
    if solvers:
        table.update(solvers)
    for m in methods:
        if m not in table:
            raise InputError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    results: dict[str, MethodResult] = {}
    for m in methods:
        results[m] = _run(m, table[m], instance, restrictions, time_limit, threads)
    if greedy and GREEDY not in results:
        results[GREEDY] = _run(GREEDY, table[GREEDY], instance, restrictions, time_limit, threads)

    problems: list[str] = []
    involved: set[str] = set()  # the methods named in some problem
    for r in results.values():
        found = _check_one(r, instance, restrictions)
        if found:
            problems += found
            involved.add(r.method)

    ok = [r for r in results.values() if r.error is None and r.solution is not None]
    plans = [r for r in ok if r.tps is not None]  # valid plans, every method (greedy too)
    optimal = [r for r in ok if r.solution.status is Status.OPTIMAL and r.tps is not None]
    infeasible = [r for r in ok if r.solution.status is Status.INFEASIBLE]

    # "infeasible" next to a valid plan
    for r in infeasible:
        for q in plans:
            problems.append(f"{r.method} proved infeasibility, but {q.method} found a valid plan (TPS {_fmt(q.tps)})")
            involved.update((r.method, q.method))
    # two proven optima that differ
    for i, r in enumerate(optimal):
        for q in optimal[i + 1 :]:
            if not _agree(r.tps, q.tps, r.abs_tol + q.abs_tol):
                problems.append(
                    f"proven optima differ: {r.method} {_fmt(r.tps)}, {q.method} {_fmt(q.tps)}; "
                    + plan_difference(instance, (r.method, r.solution.plan), (q.method, q.solution.plan))
                )
                involved.update((r.method, q.method))
    # a plan below a proven optimum, or a bound above a valid plan
    for r in optimal:
        for q in plans:
            if q.solution.status is not Status.OPTIMAL and _below(q.tps, r.tps, r.abs_tol + q.abs_tol):
                problems.append(
                    f"{q.method}'s plan (TPS {_fmt(q.tps)}) beats {r.method}'s proven optimum {_fmt(r.tps)}; "
                    + plan_difference(instance, (q.method, q.solution.plan), (r.method, r.solution.plan))
                )
                involved.update((r.method, q.method))
    for r in ok:
        if r.solution.bound is None:
            continue
        for q in plans:
            if q is not r and _below(q.tps, r.solution.bound, r.abs_tol + q.abs_tol):
                problems.append(f"{r.method}'s lower bound {_fmt(r.solution.bound)} is above {q.method}'s valid plan (TPS {_fmt(q.tps)})")
                involved.update((r.method, q.method))

    asked = [results[m] for m in methods]
    ran = [r for r in asked if r.skipped is None]
    proven = [r for r in ran if r.proven]
    optimum = None
    if optimal:
        first = next((r for r in optimal if r.method == "dp"), optimal[0])
        optimum = first.tps
    if problems:
        verdict = "mismatch"
    elif not proven:
        verdict = "inconclusive"
    elif len(proven) == len(ran):
        verdict = "match"
    else:
        verdict = "consistent"

    greedy_tps = greedy_gap = None
    g = results.get(GREEDY)
    if g is not None and g.tps is not None:
        greedy_tps = g.tps
        if optimum is not None:
            greedy_gap = 0.0 if optimum == 0 else (greedy_tps - optimum) / optimum
    return Verdict(
        instance=instance.source,
        verdict=verdict,
        optimum=optimum,
        infeasible=bool(infeasible) and not optimal,
        results=results,
        problems=problems,
        involved=[m for m in results if m in involved],
        greedy_tps=greedy_tps,
        greedy_gap=greedy_gap,
        settings={"K": instance.K, "M": instance.M, "N": instance.N, "B": instance.B, "nodes": len(instance.nodes), "edges": len(instance.edges)},
        restrictions=restrictions.to_dict(),
    )
