"""The entry point of the path formulation, :func:`solve_path` (``docs/milp.md``, "The
path formulation"): the catalog of stage arcs, the search over thresholds, the proof just
below the best plan's bottleneck, and the answer as a certified
:class:`~piper_ilp.solution.Solution`.
"""

from __future__ import annotations

import math
import time

from piper_ilp.errors import InputError
from piper_ilp.instance import Instance
from piper_ilp.milp.closed_sets import closed_sets, stage_pairs
from piper_ilp.milp.path_arcs import ArcCatalog, TimeUp
from piper_ilp.milp.path_proof import prove
from piper_ilp.milp.path_rule import covers, rule_for
from piper_ilp.milp.path_search import BRACKET_RTOL, Search, lower_bound
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["solve_path", "path_refusal", "finish_solution", "DEFAULT_MAX_SETS", "PROOF_RTOL"]

#: Above this many successor-closed sets the path formulation is refused (its stage
#: arcs grow with the square of the sets).
DEFAULT_MAX_SETS = 2_000

#: An optimum is proven when (value - bound) <= PROOF_RTOL * value (contract sec. 7).
PROOF_RTOL = 1e-6


def path_refusal(mode: Mode, restrictions: Restrictions = Restrictions()) -> str | None:
    """Why the path formulation does not solve ``mode`` under ``restrictions`` (None when
    it does): it covers :data:`~piper_ilp.milp.path_rule.COVERED_MODES` and every
    restriction but ``uniform`` (one (t, d) for all stages couples the stages, which a
    path of independent arcs cannot express).

    Examples
    --------
    >>> path_refusal(DEFAULT_MODE) is None
    True
    >>> path_refusal(Mode("graph"))
    'the path formulation does not solve the mode graph/throughput/1f1b'
    >>> path_refusal(DEFAULT_MODE, Restrictions(uniform=True))
    'the path formulation does not solve uniform degrees (--uniform)'
    """
    if not covers(mode):
        return f"the path formulation does not solve the mode {mode.label}"
    if restrictions.uniform:
        return "the path formulation does not solve uniform degrees (--uniform)"
    return None


class _Clock:
    """The time limit in CPU seconds of this process (``time.process_time``): the search
    runs in one thread, so on an idle core this is its wall time, and on a shared machine
    the same work is done whatever the load (the answer does not depend on it)."""

    def __init__(self, time_limit: float | None):
        self.start = time.process_time()
        self.wall = time.perf_counter()
        self.limit = time_limit

    def used(self) -> float:
        return time.process_time() - self.start

    def left(self) -> float | None:
        if self.limit is None:
            return None
        return self.limit - self.used()

    def deadline(self) -> float | None:
        """The ``time.process_time()`` at which the limit passes."""
        return None if self.limit is None else self.start + self.limit

    def out(self) -> bool:
        left = self.left()
        return left is not None and left <= 0


def solve_path(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    method: str = "path",
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    threads: int = 2,
    hint: Plan | None = None,
    cutoff: float | None = None,
    max_sets: int = DEFAULT_MAX_SETS,
    progress: bool = False,
) -> Solution:
    """Solve a sequential throughput mode exactly with the path formulation.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
    method : str
        The name the solution carries (the registry's ``path``). The path formulation
        runs no MILP backend: its decisions are OR-Tools' min-cost flow on the state
        network, its proof potentials checked in integers
        (:func:`~piper_ilp.milp.path_proof.prove`).
    mode : Mode
        One of :data:`~piper_ilp.milp.path_rule.COVERED_MODES`.
    time_limit : float, optional
        CPU seconds of this process for the whole call (``time.process_time``; the
        search is single-threaded, so this is its wall time on an idle core and the same
        amount of work under any load); stopped early, the answer is feasible or unknown.
        Building the catalog of stages is not interrupted.
    threads : int
        Recorded only (the search runs in one thread).
    hint : Plan, optional
        A plan whose value bounds the search from above (it is returned, feasible, when
        nothing better is found and no proof is reached).
    cutoff : float, optional
        Search only plans whose value is at most ``cutoff`` (1 + 1e-6).
    max_sets : int
        Refuse graphs with more successor-closed sets.
    progress : bool
        One line per decision on stderr.

    Returns
    -------
    Solution
        ``method`` as given; ``info["formulation"]`` = "path".

    Raises
    ------
    SizeLimitError
        More than ``max_sets`` successor-closed sets.
    InputError
        A mode or restriction the formulation does not solve (:func:`path_refusal`).
    """
    clock = _Clock(time_limit)
    refused = path_refusal(mode, restrictions)
    if refused is not None:
        raise InputError(refused)
    rule = rule_for(mode, instance.N)
    inst = restrictions.apply(instance)
    degrees = restrictions.d_values(instance)
    sets = closed_sets(inst, max_sets)
    pairs = stage_pairs(sets)
    catalog = ArcCatalog(inst, sets, pairs, degrees, rule)
    search = Search(instance, inst, catalog, rule, mode)
    info: dict = {
        "formulation": "path",
        "solver": "OR-Tools min-cost flow; the proof's potentials checked in integers",
        "mode": mode.label,
        "sets": len(sets),
        "pairs": len(pairs),
        "stage_degrees": catalog.size,
        "threads": threads,
        "time_limit": time_limit,
        "scaling_error": 0.0,
    }
    run = _Run(search, method, mode, threads, clock, info, progress)
    missing = [n.id for n in inst.nodes if not n.options]
    if missing:
        sol = run.answer(
            Status.INFEASIBLE,
            f"infeasible before solving: node {missing[0]} has no option left",
        )
    else:
        run.floor = lower_bound(inst, degrees)
        if hint is not None:
            value = _hint_value(instance, hint, mode, restrictions)
            if value is None:
                info["hint"] = "ignored: not a valid plan in this mode and restrictions"
            else:
                info["hint"] = "used"
                run.offer(value, hint)
        sol = run.solve(None if cutoff is None else cutoff * (1 + PROOF_RTOL))
    return finish_solution(instance, restrictions, sol, clock.start, clock.wall)


def finish_solution(
    instance: Instance, restrictions: Restrictions, sol: Solution, start: float, wall: float
) -> Solution:
    """The last step of an exact search (path here, the column method too): its wall
    seconds since ``wall`` (``time.perf_counter``), ``info["cpu_seconds"]`` since ``start``
    (``time.process_time``), its plan re-checked by the evaluator at tolerance 0, and
    ``info["gap"]``."""
    sol.seconds = time.perf_counter() - wall
    sol.info["cpu_seconds"] = time.process_time() - start
    if sol.plan is not None:
        sol = checked_solution(instance, sol, tolerance=0.0, restrictions=restrictions)
    sol.info["gap"] = sol.gap
    return sol


def _hint_value(instance, hint, mode, restrictions) -> float | None:
    """The hint's value, when it is a valid plan within the restrictions."""
    from piper_ilp.evaluate import evaluate

    ev = evaluate(instance, hint, mode)
    if not ev.valid:
        return None
    allowed = set(restrictions.d_values(instance))
    for st in hint.stages:
        if st.d not in allowed or (restrictions.max_t is not None and st.t > restrictions.max_t):
            return None
        if any(st.options[v] in restrictions.exclude_options for v in st.nodes):
            return None
    return ev.value


#: The search first looks for a plan at thresholds growing by this factor from the floor.
GROW = 1.25


class _Run:
    """The state of one search: the bracket [lo, hi], the best plan, the clock."""

    def __init__(self, search, backend, mode, threads, clock, info, progress):
        self.search = search
        self.backend = backend
        self.mode = mode
        self.threads = threads
        self.clock = clock
        self.info = info
        self.progress = progress
        self.floor = 0.0
        self.best: tuple[float, Plan] | None = None
        self.hi = math.inf  # a threshold at which a plan is known

    def offer(self, value: float, plan: Plan, bottleneck: float | None = None) -> None:
        if self.best is None or value < self.best[0]:
            self.best = (value, plan)
        self.hi = min(self.hi, value if bottleneck is None else bottleneck)

    def decide(self, T: float):
        dec = self.search.decide(T, self.clock.deadline())
        if self.progress:
            _line(dec)
        if dec.feasible:
            plan, bottleneck, costs = self.search.plan_of(dec.path)
            self.offer(self.search.evaluate(plan, costs), plan, min(T, bottleneck))
        return dec

    def solve(self, cutoff: float | None) -> Solution:
        try:
            return self._search(cutoff)
        except TimeUp:
            return self.stopped()

    def _search(self, cutoff: float | None) -> Solution:
        lo = self.floor
        if cutoff is not None:
            if cutoff < lo:
                return self.answer(Status.UNKNOWN, _below_cutoff(cutoff, "below a lower bound"))
            if not self.decide(cutoff).feasible:
                status = Status.UNKNOWN if self.best is None else Status.FEASIBLE
                return self.answer(status, _below_cutoff(cutoff, "none found"))
        T = lo * GROW if lo > 0 else 0.0
        top = _top(self.search)
        while self.hi == math.inf:  # look for a first plan, from below
            if self.clock.out():
                return self.stopped()
            if T > top:
                T = math.inf  # every arc, however dear
            dec = self.decide(T)
            if dec.feasible:
                break
            if T == math.inf:
                return self.prove_infeasible()
            lo = T
            T = T * GROW if T > 0 else top / 2**20
        # bisection in log scale; after a threshold not met (lo rose), first the question
        # "is the incumbent optimal?" (a plan lowers hi to its own bottleneck, often far
        # below the threshold that found it)
        tested = None  # the last incumbent whose optimality was tried
        raised = False
        while self.hi > lo * (1 + BRACKET_RTOL):
            if self.clock.out():
                return self.stopped()
            if raised and self.hi != tested:
                tested = self.hi
                T = self.hi / (1 + BRACKET_RTOL)  # is the incumbent optimal?
            else:
                T = math.sqrt(lo * self.hi) if lo > 0 else self.hi / 2
            raised = not self.decide(T).feasible
            if raised:
                lo = T
        return self.prove_optimal(lo)

    def prove_optimal(self, lo: float) -> Solution:
        bound = lo
        if lo > self.floor:
            proof = prove(self.search, lo, self.backend, self.threads, self.clock.left())
            self.info["proof"] = proof.to_dict()
            if not proof.proven:
                return self.answer(Status.FEASIBLE, f"not proven: {proof.note}", bound=self.floor)
        else:
            self.info["proof"] = {"how": "the lower bound of every plan", "threshold": lo}
        value = self.best[0]
        if value - bound > PROOF_RTOL * value:
            return self.answer(Status.FEASIBLE, "bound and plan too far apart", bound=bound)
        return self.answer(Status.OPTIMAL, "", bound=bound)

    def prove_infeasible(self) -> Solution:
        proof = prove(self.search, math.inf, self.backend, self.threads, self.clock.left())
        self.info["proof"] = proof.to_dict()
        if proof.proven:
            return self.answer(Status.INFEASIBLE, "no plan fits (proven)")
        return self.answer(Status.UNKNOWN, f"not proven: {proof.note}")

    def stopped(self) -> Solution:
        if self.best is None:
            return self.answer(Status.UNKNOWN, "time limit: no plan and no proof")
        return self.answer(Status.FEASIBLE, "time limit", bound=self.floor)

    def answer(self, status: Status, message: str, bound: float | None = None) -> Solution:
        self.info["decisions"] = [d.to_dict() for d in self.search.decisions]
        plan = value = None
        if status in (Status.OPTIMAL, Status.FEASIBLE) and self.best is not None:
            value, plan = self.best
            if bound is not None:
                bound = min(bound, value)
        return Solution(
            self.backend,
            status,
            plan=plan,
            objective=value,
            bound=bound if plan is not None else None,
            message=message,
            info=self.info,
            mode=self.mode,
        )


def _below_cutoff(cutoff: float, why: str) -> str:
    return f"no plan at or below the cutoff {cutoff!r} ({why}): not a proof of either"


def _top(search) -> float:
    """A threshold above every stage's least TPS at y = 1 (above it the search decides
    with every arc, however dear)."""
    top = 0.0
    for _, _, tabs in search.catalog.tables:
        for tab in tabs:
            top = max(top, float(tab.fast_cost.max()))
    return top * 2.0 + 1e-300


def _line(dec) -> None:
    import sys

    state = f"devices {dec.devices}" if dec.devices is not None else "no path"
    print(
        f"path: T {dec.threshold:.9g} s  arcs {dec.arcs} kept {dec.kept} "
        f"network {dec.network}  {state}",
        file=sys.stderr,
        flush=True,
    )
