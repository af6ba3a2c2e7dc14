"""Uniform degrees (``--uniform``, contract sec. 12): every stage has the same t and d.

A uniform plan takes one pair (t, d) for all its stages, so the uniform optimum is the
least, over the allowed pairs, of the optimum with every stage at exactly that pair.
:func:`solve_uniform` runs the DP once per pair with ``Restrictions.fixed(t, d)`` (one t,
one d: each run is small) and keeps the best: exact, in every mode, without changing the
DP itself. A pair is skipped when a lower bound on any plan with it, the least compute
sum_v min_l p_v / (d * most stages) (every stage's TPS is at least its compute p / d, the
largest at least their mean; a plan has at most K / (t d) stages, and at most N / d when
sequential, where sum d <= N), exceeds the best value found: it cannot win. The bound is on
the TPS, so it holds for the batch time too (which is at least the largest TPS). More than
:data:`MAX_PAIRS` pairs are refused unless forced.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Callable

from dp.deadline import Deadline
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["solve_uniform", "pair_lower_bound", "MAX_PAIRS"]

#: A pair is skipped only when its bound exceeds the best value by more than this (relative):
#: the bound and the DP's values are rounded differently.
_SKIP_MARGIN = 1e-9

#: Refuse (unless forced) more (t, d) pairs than this: each may be a DP run. Four t values
#: and every divisor d of N = 720,720 (240 of them) make at most 960.
MAX_PAIRS = 2_000


def pair_lower_bound(
    instance: Instance,
    restrictions: Restrictions,
    t: int,
    d: int,
    mode: Mode = DEFAULT_MODE,
) -> float:
    """A lower bound on the largest stage TPS of every plan whose stages all have (t, d):
    the nodes' least compute at t, sum_v min_l p_v, over d times the most stages,
    K // (t d), and N // d too when sequential (sum d <= N; under graph pipelining only
    h <= N holds, so more stages may run side by side). Infinite when some node has no
    option for t.

    >>> from compare.builders.generators import random_instance
    >>> inst = random_instance("chain", 4, seed=1)
    >>> pair_lower_bound(inst, Restrictions(), 1, 1) > 0
    True
    """
    inst = restrictions.apply(instance)
    least = []
    for nd in inst.nodes:
        opts = nd.options.get(t, ())
        if not opts:
            return math.inf
        least.append(min(o.p for o in opts))
    most_stages = min(inst.K // (t * d), len(inst.nodes))
    if not mode.graph:
        most_stages = min(most_stages, inst.N // d)
    if most_stages < 1:
        return math.inf
    return math.fsum(least) / (d * most_stages)


class _PairProgress:
    """Lines on stderr as the pairs are tried: the first and the last always, the others at
    most once per ``interval`` seconds (nothing unless ``enabled``)."""

    def __init__(self, enabled: bool, total: int, mode: Mode, interval: float = 2.0):
        self.enabled, self.total, self.interval = enabled, total, interval
        self.what = "batch time" if mode.batch_time else "TPS"
        self.start = self.last = time.perf_counter()
        self._say(f"{total:,} (t, d) pairs to try, by their lower bound")

    def _say(self, text: str) -> None:
        if self.enabled:
            print(f"uniform: {text}", file=sys.stderr, flush=True)

    def update(
        self, done: int, skipped: int, best: Solution | None, end: str | None = None
    ) -> None:
        """A line when due; ``end`` (the last line's ending) prints it now."""
        now = time.perf_counter()
        if end is None and now - self.last < self.interval:
            return
        self.last = now
        if best is None:
            found = "no plan yet"
        else:
            st = best.plan.stages[0]
            found = f"best {self.what} {best.value:.7g} s at (t, d) = ({st.t}, {st.d})"
        self._say(
            f"{done:,} of {self.total:,} pairs done ({skipped:,} skipped by the bound), {found}; "
            f"{now - self.start:.0f} s{end or ''}"
        )


def solve_uniform(
    instance: Instance,
    restrictions: Restrictions,
    solve: Callable[..., Solution],
    *,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    max_pairs: int = MAX_PAIRS,
    **options,
) -> Solution:
    """The best plan whose stages all have one (t, d), by one ``solve`` per pair.

    Parameters
    ----------
    instance : Instance
        The profiled graph with K, M, B, N.
    restrictions : Restrictions
        With ``uniform`` set; every other restriction holds in each run.
    solve : callable
        ``solve(instance, restrictions, mode=, time_limit=, **options) -> Solution``, the
        DP's entry point :func:`dp.solver.solve_dp`.
    mode : Mode
        Pipelining, objective and schedule.
    time_limit : float, optional
        Seconds for all the runs together; stopped early, the answer is never OPTIMAL and
        its message names this limit (not the share the last run had left).
    max_pairs : int
        Refuse more (t, d) pairs than this, unless ``options["force"]``.
    **options
        Passed to every run (``knapsack``, ``max_ideals``, ``force``, ``progress``, ...).

    Returns
    -------
    Solution
        The best run's plan. OPTIMAL when every pair's run proved its optimum or
        infeasibility (and one found a plan); INFEASIBLE when every pair is infeasible;
        FEASIBLE (or UNKNOWN without a plan) when a run stopped early or proves nothing
        (greedy), with ``bound`` the least lower bound over the pairs (a run's bound or
        optimum, else the pair's :func:`pair_lower_bound`; none for greedy).
        ``info["uniform"]`` holds the pairs tried, skipped and infeasible and the winner's
        (t, d).

    Raises
    ------
    SizeLimitError
        More than ``max_pairs`` pairs and not forced: one line with the count and what
        lowers it.
    """
    start = time.perf_counter()
    deadline = Deadline(time_limit)
    pairs = restrictions.uniform_pairs(instance)
    if len(pairs) > max_pairs and not options.get("force"):
        raise SizeLimitError(
            f"{instance.source}: --uniform tries {len(pairs):,} (t, d) pairs (t * d <= K = "
            f"{instance.K:,}, d a divisor of N = {instance.N:,}), above the limit of "
            f"{max_pairs:,}, each a DP run unless its bound rules it out; lower K or N, restrict t "
            "or d (--max-t, --max-d), or pass --force (force=True) if time allows"
        )
    bounds = {pair: pair_lower_bound(instance, restrictions, *pair, mode) for pair in pairs}
    order = sorted(pairs, key=lambda pair: (bounds[pair], pair))
    best: Solution | None = None
    proven, stopped, runs, skipped, infeasible = True, False, 0, 0, 0
    # the least lower bound over the pairs not proven infeasible: a run's own bound, else
    # its pair's (less its margin); None for Piper's greedy rule, whose answers prove nothing
    greedy = options.get("knapsack") == "greedy"
    lower: float | None = None if greedy else math.inf
    method = "dp"
    shown = _PairProgress(bool(options.get("progress")), len(order), mode)
    for t, d in order:
        shown.update(runs + skipped, skipped, best)
        if best is not None and bounds[t, d] > best.value * (1 + _SKIP_MARGIN):
            skipped += 1
            continue
        remaining = deadline.remaining()
        if remaining is not None and remaining <= 0:
            proven, stopped = False, True
            if lower is not None:  # the pairs left: the least of their bounds is this one's
                lower = min(lower, bounds[t, d] * (1 - _SKIP_MARGIN))
            break
        sol = solve(instance, restrictions.fixed(t, d), mode=mode, time_limit=remaining, **options)
        runs += 1
        method = sol.method
        # a run that proves nothing once the limit has passed was stopped by it
        stopped = stopped or (sol.status is not Status.OPTIMAL and deadline.passed)
        if sol.status is Status.INFEASIBLE:
            infeasible += 1
            continue
        if sol.status is not Status.OPTIMAL:
            proven = False
        if lower is not None:
            own = bounds[t, d] * (1 - _SKIP_MARGIN)  # both bound the pair's optimum
            own = own if sol.bound is None else max(own, sol.bound)
            lower = min(lower, sol.value if sol.status is Status.OPTIMAL else own)
        if sol.plan is not None and (best is None or sol.value < best.value):
            best = sol
    shown.update(
        runs + skipped, skipped, best, end=" (stopped by the time limit)" if stopped else ""
    )
    if stopped:  # the limit the caller gave, not the share the last run had left
        where = (
            f"time limit of {time_limit:g} s reached with {runs + skipped:,} of {len(pairs):,} "
            "(t, d) pairs tried"
        )
        found = "no plan yet"
        if best is not None:
            found = (
                f"the best plan found, at (t, d) = {best.plan.stages[0].t, best.plan.stages[0].d}"
            )
        message = f"{where}: {found}"
    else:
        message = best.message if best else "stopped before any pair gave a plan"
    info = {
        "uniform": {
            "pairs": len(pairs),
            "runs": runs,
            "skipped": skipped,
            "infeasible": infeasible,
            "best": [best.plan.stages[0].t, best.plan.stages[0].d] if best else None,
        }
    }
    seconds = time.perf_counter() - start
    if best is None:
        if proven:
            why = (
                "no (t, d) pair with t * d <= K" if not pairs else "no pair (t, d) has a valid plan"
            )
            return Solution(
                method, Status.INFEASIBLE, message=f"no uniform plan: {why}", seconds=seconds,
                info=info, mode=mode,
            )  # fmt: skip
        bound = lower if lower is not None and 0 < lower < math.inf else None
        return Solution(
            method,
            Status.UNKNOWN,
            bound=bound,
            message=message,
            seconds=seconds,
            info=info,
            mode=mode,
        )
    if proven:
        status, bound = Status.OPTIMAL, best.value
    else:
        status, bound = Status.FEASIBLE, None if lower is None else min(lower, best.value)
    solution = Solution(
        method,
        status,
        plan=best.plan,
        objective=best.objective,
        bound=bound,
        seconds=seconds,
        message=message,
        info={**best.info, **info},
        mode=mode,
    )
    return checked_solution(instance, solution, restrictions=restrictions)
