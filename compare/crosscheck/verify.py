"""Cross-check one instance: run every method, re-check every plan, give one verdict.

This is ``piper-ilp verify``. Each method of the registry (:mod:`compare.crosscheck.methods`: the
DP, the MILP on each backend, the exhaustive oracle where the graph is tiny) solves the
instance; every plan is re-evaluated here by the independent evaluator
(:func:`piper_ilp.evaluate.evaluate`), whatever the solver itself checked. A method's
answer is a **proof** when its status is optimal (a plan the evaluator accepts, its value
the plan's TPS within the method's accuracy) or infeasible, from a method whose kind
proves (not a heuristic). The verdicts (contract sec. 7):

``match``
    at least two independent methods (different lineages, :attr:`Method.lineage
    <compare.crosscheck.methods.Method>`: the DP with ``compiled``, ``path``, ``columns``,
    the compact MILP on any backend, the oracle) proved the same optimum (or
    infeasibility), and every method that ran proved it;
``consistent``
    the same, but some method that ran proved nothing (a MILP stopped at its time limit
    with bound <= optimum <= its plan, a backend out of range or in error);
``single-proof``
    one lineage alone proved the optimum; nothing contradicts it, but nothing
    independent confirms it either;
``inconclusive``
    nothing proven (in time);
``error``
    one of the project's own methods (the DP, path, columns, the oracle, the greedy
    rule) failed:
    an internal error or a crash;
``mismatch``
    answers contradict each other: a plan the evaluator rejects, a solver's value that
    is not its plan's TPS, a valid plan below a proven optimum, a bound above a valid
    plan, two proven optima that differ, "infeasible" next to a valid plan.

A third-party MILP backend's own failure (the compact model on CP-SAT, CBC or SCIP:
status ``backend-error``, an internal error of its certification, or an answer that fails
the checks here) is shown with its details but is neither a proof nor a mismatch: it says
nothing about the other methods. The project's own searches (dp, path, columns, brute,
greedy) have no such excuse: their internal error is an ``error``, their failing answer a
``mismatch``. Status
``out-of-range`` (a backend that cannot represent the instance's numbers) is never a
proof. Valid plans, whoever found them, are facts: each is an upper bound on the optimum.

Piper's original greedy option choice (cost model sec. 5, the ``greedy`` method) also
runs: its plan must be valid and no better than the optimum, and its gap to the proven
optimum is reported.

Every method solves in one :class:`~piper_ilp.pipeline.Mode` (``mode=``, default the
contract's secs. 2-4), and every value compared is the evaluator's value of that mode's
objective (:attr:`Evaluation.value <piper_ilp.evaluate.Evaluation.value>`: the TPS, or the
batch time of sec. 9); the plans are judged by that mode's rules (graph pipelining's
microbatches in flight, ``gpipe``'s memory). A method that solves only the default mode
(the heuristics, external planners) is refused in another (InputError) when it is asked
for, and the implicit greedy run is left out.

Tolerances: values agree within the larger relative accuracy of the two methods
(1e-9 for the DP, the oracle and the greedy rule; 1e-6 for a MILP, of the optimum), plus
the absolute error a method states (``info["scaling_error"]``). A valid plan, whoever found
it, refutes a proven optimum it beats beyond the prover's own accuracy: a MILP's plan 1e-7
below the DP's optimum is a mismatch, though the two optima agree within the MILP's 1e-6.
"""

from __future__ import annotations

import json
import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from compare.crosscheck.methods import (
    METHODS,
    Method,
    check_mode,
    default_methods,
    external_method,
    run_method,
    scope_refusal,
)
from piper_ilp.cost import close
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.evaluate import Evaluation, evaluate
from piper_ilp.instance import Instance
from piper_ilp.milp.backend import BACKENDS
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan, plan_to_dict
from piper_ilp.settings import Settings
from piper_ilp.solution import Restrictions, Solution, Status

__all__ = [
    "METHODS",
    "default_methods",
    "DEFAULT_TIME_LIMIT",
    "VERDICTS",
    "EXIT_CODES",
    "Solver",
    "MethodResult",
    "Verdict",
    "verify_instance",
    "uniformity_cost",
    "plan_difference",
    "parse_methods",
]

#: With ``path`` among the methods and covering the mode, the compact model's size guard in
#: verify (variables): where it runs beside ``path`` it must prove within the default limit,
#: or the verdict falls from match to consistent. bert32a100 at K = 8 (3,856) it proves in
#: seconds; resnet at K = 8 (7,260) ends at 60 s with no plan and the work bound, bert32a100
#: at K = 16 (7,972) needs about 69 s (docs/milp.md).
COMPACT_BESIDE_PATH = 4_000

#: Seconds per method that takes a time limit, unless told otherwise.
DEFAULT_TIME_LIMIT = 60.0

#: Verdicts, from best to worst.
VERDICTS = ("match", "consistent", "single-proof", "inconclusive", "error", "mismatch")

#: The exit status of each verdict (``piper-ilp verify``; 2 is bad input).
EXIT_CODES = {
    "match": 0,
    "consistent": 0,
    "single-proof": 4,
    "inconclusive": 3,
    "error": 1,
    "mismatch": 1,
}

#: An injected solver (tests): (instance, restrictions, time_limit, threads) -> Solution.
Solver = Callable[[Instance, Restrictions, "float | None", "int | None"], Solution]

GREEDY = "greedy"


def parse_methods(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"dp,cpsat"`` -> ("dp", "cpsat"); raises InputError on an unknown or repeated name.

    Examples
    --------
    >>> parse_methods("dp, brute")
    ('dp', 'brute')
    """
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


class _FromEntry:
    """A read-only attribute of :class:`MethodResult` read from its registry entry: one
    place for the properties that say what the method is (name, kind, lineage, rtol,
    third_party), never copied."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, result: "MethodResult | None", owner: type | None = None):
        if result is None:
            return self
        return getattr(result.entry, self.attribute)

    def __set__(self, result: "MethodResult", value: object) -> None:
        raise AttributeError(f"{self.attribute} is the registry entry's; it is not set here")


@dataclass
class MethodResult:
    """One method's outcome on one instance.

    ``entry`` is the method's :class:`~compare.crosscheck.methods.Method` (its registry
    entry, or an external planner's): its name, kind, lineage, stated relative accuracy
    ``rtol`` and ``third_party`` are read from there, not copied. ``solution`` is None when
    the method was ``skipped`` (size limit; the reason) or failed (``error`` for the
    project's own methods, ``backend_error`` for a third-party MILP backend,
    :attr:`Method.third_party <compare.crosscheck.methods.Method>`). ``evaluation`` is the
    evaluator's verdict on its plan. ``abs_tol`` is the absolute error it states (CP-SAT's
    scaling error). ``backend_error`` is also set when a backend's answer fails the checks
    here: its claims then count for nothing.
    """

    entry: Method
    solution: Solution | None = None
    evaluation: Evaluation | None = None
    skipped: str | None = None
    error: str | None = None
    backend_error: str | None = None
    seconds: float = 0.0
    abs_tol: float = 0.0
    hint: str | None = None  # MILP with milp_hint: which plan it was given as hint and cutoff

    # read from the registry entry (Method's attributes say what each means)
    method = _FromEntry("name")
    kind = _FromEntry("kind")
    lineage = _FromEntry("lineage")
    rtol = _FromEntry("rtol")
    third_party = _FromEntry("third_party")

    @property
    def status(self) -> str:
        if self.skipped is not None:
            return "skipped"
        if self.error is not None:
            return "error"
        if self.backend_error is not None:
            return Status.BACKEND_ERROR.value
        if self.evaluation is not None and not self.evaluation.valid:
            return "invalid"  # a plan the evaluator rejects is never "feasible"
        return self.solution.status.value

    @property
    def answered(self) -> bool:
        """The method returned a solution whose claims count (no error of any kind)."""
        return self.solution is not None and self.error is None and self.backend_error is None

    @property
    def proven(self) -> bool:
        """A proof: optimal with a plan the evaluator accepts, or infeasible, from a method
        that proves (not a heuristic), with no error."""
        if not self.answered or self.kind == "heuristic":
            return False
        if self.solution.status is Status.INFEASIBLE:
            return True
        return self.solution.status is Status.OPTIMAL and self.value is not None

    @property
    def tps(self) -> float | None:
        """The evaluator's TPS of the plan, when it is valid."""
        if self.evaluation is None or not self.evaluation.valid:
            return None
        return self.evaluation.tps

    @property
    def value(self) -> float | None:
        """The evaluator's value of the mode's objective for the plan (its TPS, or its
        batch time), when the plan is valid: what is compared."""
        if self.evaluation is None or not self.evaluation.valid:
            return None
        return self.evaluation.value

    def to_dict(self) -> dict:
        d: dict = {
            "method": self.method,
            "kind": self.kind,
            "status": self.status,
            "seconds": self.seconds,
        }
        for key in ("skipped", "error", "backend_error", "hint"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        s = self.solution
        if s is not None:
            d.update(
                solver_status=s.status.value,
                value=self.value,
                tps=self.tps,
                objective=s.objective,
                bound=s.bound,
                rtol=self.rtol,
                abs_tol=self.abs_tol,
                stages=len(s.plan.stages) if s.plan else None,
                devices=s.plan.devices if s.plan else None,
                sum_d=s.plan.sum_d if s.plan else None,
                message=s.message,
                info=dict(s.info) if isinstance(s.info, dict) else {},
                plan=plan_to_dict(s.plan) if s.plan else None,
            )
            if self.evaluation is not None and not self.evaluation.valid:
                d["violations"] = [str(v) for v in self.evaluation.violations]
        return d


@dataclass
class Verdict:
    """The cross-check of one instance.

    ``verdict`` one of :data:`VERDICTS`; ``mode`` what was solved; ``optimum`` the proven
    optimal value of the mode's objective (TPS, or batch time; None when infeasible or
    nothing is proven); ``infeasible`` True when proven infeasible;
    ``results`` per method (in the order run, ``greedy`` last); ``proofs`` the methods
    whose answer is a proof (:attr:`proofs_by_lineage` groups them; ``to_dict`` gives that
    grouping as ``lineages``); ``problems`` why it is a mismatch and ``involved`` the
    methods they name; ``errors`` the failures of the project's own methods;
    ``backend_errors`` the MILP backends' failures (details, not evidence);
    ``greedy_tps`` / ``greedy_gap`` Piper's rule's value and its relative gap
    (greedy - optimum) / optimum; ``gaps`` that relative gap for every heuristic with a
    valid plan (greedy, 2bw, external planners) when the optimum is proven.
    """

    instance: str
    verdict: str
    optimum: float | None
    infeasible: bool
    results: dict[str, MethodResult]
    proofs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    involved: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    backend_errors: list[str] = field(default_factory=list)
    greedy_tps: float | None = None
    greedy_gap: float | None = None
    gaps: dict[str, float] = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    restrictions: dict = field(default_factory=dict)
    mode: Mode = DEFAULT_MODE
    milp_hint: bool = False

    @property
    def exit_code(self) -> int:
        """0 match / consistent, 1 mismatch / error, 3 inconclusive, 4 single-proof."""
        return EXIT_CODES[self.verdict]

    @property
    def proofs_by_lineage(self) -> dict[str, list[str]]:
        """The proofs grouped by lineage (:attr:`Method.lineage
        <compare.crosscheck.methods.Method>`), in the order of ``proofs``: the verdict counts
        the keys, since proofs of one lineage are not independent of each other."""
        out: dict[str, list[str]] = {}
        for m in self.proofs:
            out.setdefault(self.results[m].lineage, []).append(m)
        return out

    @property
    def lineages(self) -> list[str]:
        """The independent lineages among the proofs."""
        return list(self.proofs_by_lineage)

    def to_dict(self) -> dict:
        return {
            "instance": self.instance,
            "verdict": self.verdict,
            "mode": self.mode.to_dict(),
            "optimum": self.optimum,
            "infeasible": self.infeasible,
            "proofs": list(self.proofs),
            "lineages": self.proofs_by_lineage,
            "problems": list(self.problems),
            "involved": list(self.involved),
            "errors": list(self.errors),
            "backend_errors": list(self.backend_errors),
            "greedy_tps": self.greedy_tps,
            "greedy_gap": self.greedy_gap,
            "gaps": dict(self.gaps),
            "settings": dict(self.settings),
            "restrictions": dict(self.restrictions),
            "milp_hint": self.milp_hint,
            "methods": {name: r.to_dict() for name, r in self.results.items()},
        }


#: Verdicts whose optimum (or infeasibility) is proven.
PROVEN_VERDICTS = ("match", "consistent", "single-proof")


def uniformity_cost(free: Verdict, uniform: Verdict) -> dict:
    """The cost of uniformity (contract sec. 12): the uniform optimum over the free one,
    from the verdicts of the two problems on one instance.

    Returns
    -------
    dict
        ``free`` and ``uniform`` (the optima, or None), ``ratio`` (uniform / free, or None),
        ``verdicts`` (the two verdicts) and ``why`` (why there is no ratio, else "").
        A ratio is given only when both optima are proven (match, consistent or
        single-proof); it is >= 1 (a uniform plan is a plan).
    """
    out = {
        "free": free.optimum,
        "uniform": uniform.optimum,
        "ratio": None,
        "verdicts": [free.verdict, uniform.verdict],
        "why": "",
    }
    unproven = [
        n for n, v in (("free", free), ("uniform", uniform)) if v.verdict not in PROVEN_VERDICTS
    ]
    if unproven:
        out["why"] = f"the {' and '.join(unproven)} optimum is not proven"
    elif free.infeasible:
        out["why"] = "the instance is infeasible"
    elif uniform.infeasible:
        out["why"] = "no uniform plan fits (the free problem has one)"
    elif not free.optimum:
        out["why"] = "the free optimum is 0"
    else:
        out["ratio"] = uniform.optimum / free.optimum
    return out


# --------------------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------------------


def _agree(x: float, y: float, rtol: float, abs_tol: float) -> bool:
    return close(x, y, rtol) or abs(x - y) <= abs_tol


def _below(x: float, y: float, rtol: float, abs_tol: float) -> bool:
    """x < y by more than the tolerance."""
    return x < y and not _agree(x, y, rtol, abs_tol)


def _pair_tol(r: MethodResult, q: MethodResult) -> tuple[float, float]:
    """The tolerance between two claims: the larger relative accuracy, both stated errors."""
    return max(r.rtol, q.rtol), r.abs_tol + q.abs_tol


def _own_tol(r: MethodResult) -> tuple[float, float]:
    """The tolerance of one method's claim against a fact (an evaluated plan's TPS)."""
    return r.rtol, r.abs_tol


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.12g}"


def _stage_text(plan: Plan, i: int) -> str:
    if i >= len(plan.stages):
        return "no such stage"
    st = plan.stages[i]
    opts = ",".join(f"{v}:{st.options.get(v, '?')}" for v in st.nodes)
    return f"nodes [{opts}] d={st.d} t={st.t}"


def plan_difference(
    instance: Instance,
    named_a: tuple[str, Plan],
    named_b: tuple[str, Plan],
    mode: Mode = DEFAULT_MODE,
) -> str:
    """The first stage where two plans differ, and each plan's bottleneck stage (and, for
    the batch-time objective, its batch time), judged in ``mode``.

    Examples
    --------
    >>> from piper_ilp.plan import Stage
    >>> from compare.builders.generators import random_instance
    >>> inst = random_instance("chain", 2, 0, memory="loose")
    >>> u, v = inst.node_ids
    >>> pa = Plan((Stage((u, v), 1, 1, {u: "vanilla", v: "vanilla"}),))
    >>> pb = Plan((Stage((u,), 1, 1, {u: "vanilla"}), Stage((v,), 1, 1, {v: "vanilla"})))
    >>> plan_difference(inst, ("a", pa), ("b", pb)).split(";")[0]  # doctest: +NORMALIZE_WHITESPACE
    'first difference at stage 0: a has nodes [34:vanilla,35:vanilla] d=1 t=1, b has nodes
    [34:vanilla] d=1 t=1'
    """
    (na, a), (nb, b) = named_a, named_b
    first = None
    for i in range(max(len(a.stages), len(b.stages))):
        if i >= len(a.stages) or i >= len(b.stages):
            first = i
            break
        sa, sb = a.stages[i], b.stages[i]
        if (sorted(sa.nodes), sa.d, sa.t, dict(sa.options)) != (
            sorted(sb.nodes),
            sb.d,
            sb.t,
            dict(sb.options),
        ):
            first = i
            break
    parts = []
    if first is None:
        parts.append("the plans are the same")
    else:
        parts.append(
            f"first difference at stage {first}: {na} has {_stage_text(a, first)}, {nb} has "
            f"{_stage_text(b, first)}"
        )
    for name, plan in ((na, a), (nb, b)):
        ev = evaluate(instance, plan, mode)
        if ev.valid:
            k = ev.bottleneck
            batch = f", batch time {_fmt(ev.batch_time)}" if mode.batch_time else ""
            parts.append(
                f"{name}'s bottleneck is stage {k} (TPS {_fmt(ev.stages[k].cost.tps)}{batch}, "
                f"{len(plan.stages)} stages)"
            )
        else:
            parts.append(f"{name}'s plan is invalid: {ev.violations[0]}")
    return "; ".join(parts)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    return f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""


def _run(m: Method, call: Callable[[], Solution]) -> MethodResult:
    """Run one method and classify what happened (never raises)."""
    res = MethodResult(m)
    start = time.perf_counter()
    try:
        sol = call()
    except SizeLimitError as exc:
        res.skipped = str(exc)
    except InputError as exc:
        if (
            m.kind == "heuristic"
        ):  # e.g. the greedy rule refusing more than two options per (node, t)
            res.skipped = str(exc)
        else:
            res.error = f"input error: {exc}"
    except InternalError as exc:
        if m.third_party:  # its certification failed: the backend's problem, not a proof
            res.backend_error = f"internal error: {exc}"
        else:
            res.error = f"internal error: {exc}"
    except Exception as exc:  # a crash is a finding, not a reason to stop the campaign
        res.error = f"crashed: {type(exc).__name__}: {exc}{_where(exc)}"
    else:
        res.solution = sol
        err = sol.info.get("scaling_error") if isinstance(sol.info, dict) else None
        if isinstance(err, (int, float)) and math.isfinite(err) and err > 0:
            res.abs_tol = float(err)
        if sol.status is Status.BACKEND_ERROR:
            res.backend_error = (
                sol.message or "its claim failed certification (details in its info)"
            )
    res.seconds = time.perf_counter() - start
    return res


def _check_one(
    r: MethodResult, instance: Instance, restrictions: Restrictions, mode: Mode = DEFAULT_MODE
) -> list[str]:
    """Problems with a single method's answer, on its own (its plan judged in ``mode``)."""
    out: list[str] = []
    s = r.solution
    if s is None or s.status is Status.BACKEND_ERROR:
        return out
    if s.mode != mode:
        out.append(f"{r.method}: it solved in mode {s.mode.label}, but {mode.label} was asked for")
    if s.status in (Status.OPTIMAL, Status.FEASIBLE) and s.plan is None:
        out.append(f"{r.method}: status {s.status} but no plan")
    if s.status in (Status.INFEASIBLE, Status.UNKNOWN) and s.plan is not None:
        out.append(f"{r.method}: status {s.status} but it returned a plan")
    if s.plan is None:
        return out
    ev = r.evaluation
    if not ev.valid:
        more = f" (and {len(ev.violations) - 1} more)" if len(ev.violations) > 1 else ""
        out.append(
            f"{r.method}: its plan is invalid: {ev.violations[0]}{more}; plan "
            f"{json.dumps(plan_to_dict(s.plan))}"
        )
        return out
    why = restrictions.violation(instance, s.plan)
    if why is not None:
        out.append(
            f"{r.method}: its plan breaks the restrictions {restrictions.to_dict()}: {why}; "
            f"plan {json.dumps(plan_to_dict(s.plan))}"
        )
    what_value = _what(mode)
    value = ev.value
    checks = [("objective", s.objective, value, what_value), ("tps", s.tps, ev.tps, "TPS")]
    if mode.batch_time:
        checks.append(("value", s.value, value, what_value))
    for what, claimed, fact, name in checks:
        if claimed is not None and not _agree(claimed, fact, r.rtol, r.abs_tol):
            out.append(
                f"{r.method}: its {what} {_fmt(claimed)} is not its plan's {name} {_fmt(fact)} "
                "(evaluator)"
            )
    if s.bound is not None and _below(value, s.bound, r.rtol, r.abs_tol):
        out.append(
            f"{r.method}: its bound {_fmt(s.bound)} is above its own plan's {what_value} "
            f"{_fmt(value)}"
        )
    if (
        s.status is Status.OPTIMAL
        and s.bound is not None
        and _below(s.bound, value, r.rtol, r.abs_tol)
    ):
        out.append(
            f"{r.method}: it claims optimal, but its bound {_fmt(s.bound)} is below its plan's "
            f"{what_value} {_fmt(value)}"
        )
    certified_by_bound = s.bound is not None and value - s.bound <= r.rtol * abs(value)
    if s.status is Status.OPTIMAL and r.abs_tol > r.rtol * abs(value) and not certified_by_bound:
        # contract sec. 7: an optimal claim must hold within the method's relative accuracy
        # (a bound within that accuracy of the plan's value proves it whatever error is stated)
        out.append(
            f"{r.method}: it claims optimal, but the error it states ({r.abs_tol:.3g}) is more "
            f"than {r.rtol:g} of its plan's {what_value} {_fmt(value)}: not a proof"
        )
    return out


def _what(mode: Mode) -> str:
    """The name of the value compared in ``mode``: ``TPS`` or ``batch time``."""
    return "batch time" if mode.batch_time else "TPS"


def _check_hint_takers(methods: Sequence[str], mode: Mode, restrictions: Restrictions) -> None:
    """Raise InputError (one line) unless ``methods`` hold ``dp`` and a method that takes
    the DP's plan as a hint and solves ``mode`` under ``restrictions`` (``--milp-hint``)."""
    # a taker that refuses the mode (path under graph pipelining or --uniform) would be
    # skipped and the hint given to nobody: why each taker refuses, None if it runs
    why = {
        n: scope_refusal(n, mode, restrictions) for n, m in METHODS.items() if "hint" in m.options
    }
    takers = [n for n, reason in why.items() if reason is None]
    lacks = None
    if not any(n in takers for n in methods):
        refused = "; ".join(f"{n}: {why[n]}" for n in methods if why.get(n))
        lacks = f"none of them ({', '.join(takers)}) that solves {mode.label}" + (
            f" ({refused})" if refused else ""
        )
    elif "dp" not in methods:
        lacks = "no dp"
    if lacks is not None:
        raise InputError(
            "--milp-hint gives the DP's plan to the MILP methods that take a hint, but "
            f"--methods ({','.join(methods)}) has {lacks}; add it or leave --milp-hint out"
        )


def _cross_check(
    instance: Instance,
    mode: Mode,
    results: Mapping[str, MethodResult],
    optimal: list[MethodResult],
    infeasible: list[MethodResult],
) -> tuple[list[str], set[str]]:
    """The problems between methods' answers, and the methods they name: "infeasible" next
    to a valid plan, two proven optima that differ, a valid plan below a proven optimum, a
    bound above a valid plan (``optimal`` and ``infeasible``: the proofs of each kind)."""
    problems: list[str] = []
    involved: set[str] = set()
    answered = [r for r in results.values() if r.answered]
    # valid plans are facts whoever found them (a backend in error included): upper bounds
    plans = [r for r in results.values() if r.solution is not None and r.value is not None]
    what = _what(mode)

    def conflict(said: str, first, second) -> None:
        """A problem between two methods: ``said`` and where their plans differ."""
        where = (first.method, first.solution.plan), (second.method, second.solution.plan)
        problems.append(said + plan_difference(instance, *where, mode))
        involved.update((first.method, second.method))

    # "infeasible" next to a valid plan
    for r in infeasible:
        for q in plans:
            problems.append(
                f"{r.method} proved infeasibility, but {q.method} found a valid plan ({what} "
                f"{_fmt(q.value)})"
            )
            involved.update((r.method, q.method))
    # two proven optima that differ
    for i, r in enumerate(optimal):
        for q in optimal[i + 1 :]:
            if not _agree(r.value, q.value, *_pair_tol(r, q)):
                said = f"proven optima differ: {r.method} {_fmt(r.value)}, {q.method} "
                conflict(said + f"{_fmt(q.value)}; ", r, q)
    # a valid plan below a proven optimum, or a bound above a valid plan. A plan is a fact
    # whoever found it, so another optimal method's plan counts too (at the claimant's own
    # accuracy: a MILP optimum agrees with the DP's within 1e-6, but its plan 1e-7 below the
    # DP's refutes the DP's 1e-9 claim); pairs already reported above are not repeated.
    for r in optimal:
        for q in plans:
            if q is r or (
                any(q is o for o in optimal) and not _agree(r.value, q.value, *_pair_tol(r, q))
            ):
                continue
            if _below(q.value, r.value, *_own_tol(r)):
                said = f"{q.method}'s plan ({what} {_fmt(q.value)}) beats {r.method}'s proven "
                conflict(said + f"optimum {_fmt(r.value)}; ", q, r)
    for r in answered:
        if r.solution.bound is None or r.kind == "heuristic":
            continue
        for q in plans:
            if q is not r and _below(q.value, r.solution.bound, *_own_tol(r)):
                problems.append(
                    f"{r.method}'s lower bound {_fmt(r.solution.bound)} is above {q.method}'s "
                    f"valid plan ({what} {_fmt(q.value)})"
                )
                involved.update((r.method, q.method))
    return problems, involved


def _verdict_name(
    results: Mapping[str, MethodResult],
    proofs: list[MethodResult],
    problems: list[str],
    errors: list[str],
) -> str:
    """The verdict (:data:`VERDICTS`, see the module docstring) from the problems found,
    the project's own methods' errors and the proofs: ``match`` needs two lineages among
    the proofs and every exact method that ran (not skipped) among them."""
    ran = [r for r in results.values() if r.skipped is None and r.kind != "heuristic"]
    lineages = {r.lineage for r in proofs}
    if problems:
        return "mismatch"
    if errors:
        return "error"
    if not proofs:
        return "inconclusive"
    if len(lineages) < 2:
        return "single-proof"
    if all(r.proven for r in ran):
        return "match"
    return "consistent"


def verify_instance(
    instance: Instance,
    methods: Sequence[str] | None = None,
    restrictions: Restrictions = Restrictions(),
    *,
    time_limit: float | None = DEFAULT_TIME_LIMIT,
    threads: int | None = None,
    force: bool = False,
    greedy: bool = True,
    solvers: Mapping[str, Solver] | None = None,
    progress: Callable[[str], None] | None = None,
    externals: Mapping[str, str] | None = None,
    external_timeout: float | None = None,
    mode: Mode = DEFAULT_MODE,
    milp_hint: bool = False,
    settings: Settings | None = None,
) -> Verdict:
    """Run ``methods`` on ``instance``, re-check every plan, and give the verdict.

    Parameters
    ----------
    instance : Instance
    methods : sequence of str, optional
        Names from :data:`compare.crosscheck.methods.METHODS`; default: the mode's
        (:func:`~compare.crosscheck.methods.default_methods`: dp, path, cpsat, cbc, brute
        in sequential pipelining, dp, columns, cpsat, cbc, brute in graph pipelining). A
        method that raises SizeLimitError (``brute`` on a graph too big for it) is skipped,
        not an error.
    restrictions : Restrictions
        Passed to every method; every plan must obey them.
    time_limit : float, optional
        Seconds per method that takes it (dp, greedy, brute, each MILP backend); one
        stopped early proves nothing.
    threads : int, optional
        MILP solver threads.
    force : bool
        Run the methods that have a size guard (MILP backends, brute, dp) past it.
    greedy : bool
        Also run Piper's greedy rule and report its gap to the optimum.
    solvers : mapping, optional
        Replace registered methods by name (tests inject deliberately wrong solvers);
        each is called as ``solver(instance, restrictions, time_limit, threads)`` and
        returns a Solution; the registry still says its kind and lineage.
    progress : callable, optional
        Called with each method's name just before it runs (the CLI shows it).
    externals : mapping, optional
        External planners, name -> command (:mod:`compare.crosscheck.external`): heuristics whose
        plans are checked like every other; an invalid plan is a mismatch naming them.
    external_timeout : float, optional
        Seconds before an external planner is killed (a backend error).
    mode : Mode
        What every method solves and every plan is judged by (contract secs. 8-9);
        the values compared are that mode's objective. Outside the default mode the
        greedy rule is not run, and a method (or external planner) that solves only the
        default mode is refused.
    milp_hint : bool
        Give the MILP backends the DP's plan (when ``dp`` is among ``methods`` and its
        plan is valid) as a warm start and cutoff (``solve_milp(hint=...)``: plans at
        most the plan's evaluated value). The DP then runs first. Off by default: the
        backends' proofs stay their own either way (a better plan is still below the
        cutoff, and their bound is not the DP's), but a backend that cannot represent
        the DP's plan would show as a certification failure rather than as a worse
        "optimum", so under a hint any MILP backend error is counted as a mismatch
        naming dp and that backend. ``results[name].hint`` and the Verdict's
        ``milp_hint`` record it.
    settings : Settings, optional
        The mode, time limit, threads, cluster overrides and ``force``, already checked
        (a campaign or the ladder builds them once); then ``time_limit``, ``threads``,
        ``force`` and ``mode`` are left at their defaults. Without it they are checked
        here, once, before any method runs.

    Returns
    -------
    Verdict

    Raises
    ------
    InputError
        For an unknown method name, one that does not solve in ``mode``, ``milp_hint``
        without both ``dp`` and a MILP backend among ``methods``, a ``time_limit`` /
        ``threads`` outside its range (:class:`piper_ilp.settings.Settings`), or
        ``settings`` together with one of the values it holds.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> inst = random_instance("chain", 3, 1, memory="loose")
    >>> verify_instance(inst, methods=("dp", "brute"), greedy=False).verdict
    'match'
    >>> verify_instance(inst, methods=("brute",), greedy=False).verdict  # one proof alone
    'single-proof'
    """
    if settings is None:  # checked before any method runs (they would each fail)
        settings = Settings(
            mode=mode, time_limit=time_limit, threads=threads, options={"force": force}
        )
    elif (time_limit, threads, force, mode) != (DEFAULT_TIME_LIMIT, None, False, DEFAULT_MODE):
        raise InputError(
            "verify_instance takes settings= or time_limit, threads, force and mode, not both"
        )
    mode, time_limit, threads = settings.mode, settings.time_limit, settings.threads
    if methods is None:
        methods = default_methods(mode)
    instance = settings.apply(instance)
    injected = dict(solvers or {})
    for m in list(methods) + list(injected):
        if m not in METHODS:
            raise InputError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if milp_hint:  # never accepted and then ignored
        _check_hint_takers(methods, mode, restrictions)
    table = dict(METHODS)
    for name, command in (externals or {}).items():
        if name in table:
            raise InputError(f"--external {name}: the name is already a method; choose another")
        table[name] = external_method(name, command, timeout=external_timeout)
        injected[name] = lambda inst, restr, tl, th, _m=table[name]: _m.solve(inst, restr)
    for name in list(methods) + list(externals or {}):
        check_mode(table[name], mode)
    if greedy and not METHODS[GREEDY].handles(mode):
        greedy = False  # Piper's rule solves only the default mode
    hinted: dict[str, str] = {}  # MILP backend -> what its hint was
    # beside the path formulation (the MILP package's second lineage where it applies), the
    # compact model runs only where it can prove in its time limit; --force and
    # --max-variables run it anyway
    compact_guarded = set()
    if "path" in methods and not settings.options.get("force"):
        if scope_refusal("path", mode, restrictions) is None:
            compact_guarded = {n for n in methods if n in BACKENDS}

    def run(name: str) -> MethodResult:
        m = table[name]
        if progress is not None:
            progress(name)
        if name in injected:

            def call() -> Solution:
                return injected[name](instance, restrictions, time_limit, threads)

        else:
            own = settings.restricted(m.options)  # the options that apply to this method
            if name in compact_guarded and "max_variables" not in own.options:
                own = own.replace(options={**own.options, "max_variables": COMPACT_BESIDE_PATH})
            dp = results.get("dp")
            if milp_hint and "hint" in m.options and dp is not None and dp.value is not None:
                own = own.replace(options={**own.options, "hint": dp.solution.plan})
                hinted[name] = (
                    f"dp's plan ({_what(mode)} {_fmt(dp.value)}) as warm start and cutoff"
                )

            def call(own: Settings = own) -> Solution:
                return run_method(instance, name, restrictions, settings=own)

        r = _run(m, call)
        r.hint = hinted.get(name)
        if r.solution is not None and r.solution.plan is not None:
            r.evaluation = evaluate(instance, r.solution.plan, mode)
        return r

    results: dict[str, MethodResult] = {}
    order = list(methods) + list(externals or {})
    if milp_hint and "dp" in order:  # the DP first, so that its plan can be the hint
        order.remove("dp")
        order.insert(0, "dp")
    for name in order:
        results[name] = run(name)
    if greedy and GREEDY not in results:
        results[GREEDY] = run(GREEDY)

    problems: list[str] = []
    involved: set[str] = set()  # the methods named in some problem
    for r in results.values():
        found = _check_one(r, instance, restrictions, mode)
        if not found:
            continue
        if r.third_party:  # a backend's answer that fails certification: its claims are void
            r.backend_error = "; ".join(found)
        else:
            problems += found
            involved.add(r.method)

    errors = [f"{r.method}: {r.error}" for r in results.values() if r.error is not None]
    backend_errors = [
        f"{r.method}: {r.backend_error}" for r in results.values() if r.backend_error is not None
    ]
    for r in results.values():
        # under the DP's hint, a backend error may be the only trace of a disagreement (a
        # model that cannot hold the DP's plan, a cutoff the backend calls infeasible):
        # it is never left as a mere detail
        if r.hint is not None and r.status == Status.BACKEND_ERROR.value:
            problems.append(
                f"{r.method}, given {r.hint}, failed certification: "
                f"{r.backend_error or (r.solution.message if r.solution else '')}"
            )
            involved.update(("dp", r.method))

    proofs = [r for r in results.values() if r.answered and r.proven]
    optimal = [r for r in proofs if r.solution.status is Status.OPTIMAL]
    infeasible = [r for r in proofs if r.solution.status is Status.INFEASIBLE]
    found, named = _cross_check(instance, mode, results, optimal, infeasible)
    problems += found
    involved |= named

    verdict = _verdict_name(results, proofs, problems, errors)
    optimum = None
    if optimal:
        first = next(
            (r for name in ("dp", "brute") for r in optimal if r.method == name), optimal[0]
        )
        optimum = first.value
    greedy_tps = greedy_gap = None
    g = results.get(GREEDY)
    if g is not None and g.value is not None:
        greedy_tps = g.tps
        if optimum is not None:
            greedy_gap = 0.0 if optimum == 0 else (g.value - optimum) / optimum
    gaps = {
        r.method: (0.0 if optimum == 0 else (r.value - optimum) / optimum)
        for r in results.values()
        if r.kind == "heuristic" and r.value is not None and optimum is not None
    }
    return Verdict(
        instance=instance.source,
        verdict=verdict,
        gaps=gaps,
        optimum=optimum,
        infeasible=bool(infeasible) and not optimal,
        results=results,
        proofs=[r.method for r in proofs],
        problems=problems,
        involved=[m for m in results if m in involved],
        errors=errors,
        backend_errors=backend_errors,
        greedy_tps=greedy_tps,
        greedy_gap=greedy_gap,
        settings={
            "K": instance.K,
            "M": instance.M,
            "N": instance.N,
            "B": instance.B,
            "nodes": len(instance.nodes),
            "edges": len(instance.edges),
        },
        restrictions=restrictions.to_dict(),
        mode=mode,
        milp_hint=bool(hinted),
    )
