"""The exhaustive oracle: try every plan of a tiny instance (cost model secs. 2-4 and 7-9).

The referee of every other method, deliberately simple and independent of the DP and the
MILP. It enumerates

1. every ordered partition of the nodes into stages whose order respects the edges
   (each stage C is taken off the *back* of the nodes still unplaced, so it must hold
   every unplaced successor of its nodes; the placed nodes form a successor-closed set);
2. every (t, d) per stage with d in ``restrictions.d_values`` (divisors of N), within the
   budgets sum t * d <= K and sum d <= N (sequential) or h <= N (graph pipelining, sec. 8);
   with uniform degrees (sec. 12) every stage takes the (t, d) of the first one placed;
3. every option per node, under the stage's t;

and keeps the plan with the least TPS (or, under ``--objective batch-time``, the least
batch time of sec. 9; under ``--pipeline graph`` the microbatches in flight are those of
sec. 8, under ``--in-flight schedule`` the q of sec. 11, by
:func:`piper_ilp.pipeline.front_in_flight`). Every number it compares is the evaluator's own
(contract sec. 7): a stage's TPS is :func:`piper_ilp.cost.stage_cost` (three ``fsum`` sums),
its memory :func:`piper_ilp.cost.stage_memory` (``fsum`` of a * y and b) and it fits iff
:func:`piper_ilp.cost.memory_fits` (``<= M``, no slack); the batch time is
:func:`piper_ilp.pipeline.batch_time`'s arithmetic. The value it reports is therefore exactly
the evaluated value of its plan, and the optimum is exact, whatever the magnitudes.

The only shortcuts are obviously safe ones:

* a stage or degree choice that already breaks a budget is not extended;
* the options of one stage affect only that stage's time and memory, so for a stage
  (C, t, d) holding y microbatches the oracle takes the fastest option tuple that fits in
  M (the first in ascending TPS). A tuple's memory does not decrease as y grows, so each
  tuple is stored with the largest y at which it fits, found once per (C, t);
* branch and bound, ties included: a partial plan is cut as soon as a lower bound on
  every completion's value is ``>=`` the best complete plan's value, with no tolerance.
  The bound is computed with the evaluator's own operations on the stages placed so far
  (the largest TPS; for batch time (N - 1) times it plus the ``fsum`` of their d TPS,
  or, under graph pipelining, the longest path among them, each stage's path its d TPS
  plus the longest of its successors', exactly as :func:`~piper_ilp.pipeline.batch_time`
  adds them). Adding stages only adds non-negative terms to these sums and maxima, and
  float rounding is monotone, so every completion's evaluated value is ``>=`` the bound:
  a cut plan never beats the best one, and the best plan found is optimal.

**Size.** Before any long work (:func:`brute_work`) the oracle counts the steps its search
would take without branch and bound: the (stage, t, d) choices tried under the budgets and
the memory rule of the mode (the microbatches in flight of every placed stage are known, so
the count is exact), plus the option tuples it evaluates (per stage C and t: a memory search
over y and one TPS per d). Above :data:`MAX_WORK` steps it refuses (SizeLimitError, one
line); ``force`` lifts the guard. ``time_limit`` stops a long search: it then returns the
best plan found, status feasible (never a proof), or status unknown.

Symbols: p, w, a, b, sfw, sbw per option; K devices, M memory, N microbatches,
B bandwidth; d, t degrees; h, y microbatches in flight (secs. 2 and 8).
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from functools import lru_cache

from piper_ilp.cost import memory_fits, stage_cost, stage_memory
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.pipeline import batch_time, front_in_flight, microbatches_held
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = [
    "MAX_NODES",
    "MAX_WORK",
    "brute_applies",
    "brute_work",
    "count_partitions",
    "solve_brute",
]

#: The oracle refuses instances with more nodes than this.
MAX_NODES = 8

#: ... or whose search would take more steps than this (:func:`brute_work`): a few seconds
#: of CPU time at the limit.
MAX_WORK = 1_000_000

#: The search looks at the clock once per this many steps.
_CLOCK_EVERY = 1024


class _TooBig(Exception):
    """The count passed its limit."""


class _TimeUp(Exception):
    """The time limit passed."""


def _masks(instance: Instance) -> tuple[list[int], list[int]]:
    """(ids, succ_mask): node ids in input order and, for each index i, the bit set of
    the successors of node ids[i]."""
    ids = instance.node_ids
    index = {v: i for i, v in enumerate(ids)}
    succ_mask = [0] * len(ids)
    for e in instance.edges:
        succ_mask[index[e.src]] |= 1 << index[e.dst]
    return ids, succ_mask


def _back_stages(unplaced: int, succ_mask: list[int]):
    """Every non-empty C inside ``unplaced`` (a predecessor-closed set) that holds all
    the unplaced successors of its nodes: the candidates for the last stage."""
    n = len(succ_mask)
    sub = unplaced
    while sub:
        rest = unplaced & ~sub
        if all(not (sub >> i & 1) or not (succ_mask[i] & rest) for i in range(n)):
            yield sub, rest
        sub = (sub - 1) & unplaced


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def count_partitions(instance: Instance, max_stages: int | None = None) -> int:
    """The number of ordered partitions of the nodes into at most ``max_stages`` stages
    (default: one per node) whose order respects the edges.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> count_partitions(random_instance("chain", 4, seed=0, K=8, N=8))  # 2 ** 3 ways to cut a path
    8
    """
    ids, succ_mask = _masks(instance)
    if max_stages is None:
        max_stages = len(ids)

    @lru_cache(maxsize=None)
    def count(unplaced: int, k: int) -> int:
        if unplaced == 0:
            return 1
        if k == 0:
            return 0
        return sum(count(rest, k - 1) for _, rest in _back_stages(unplaced, succ_mask))

    return count((1 << len(ids)) - 1, max_stages)


def _ymax(nodes: list[int], opts: dict, M: float, top: int) -> int:
    """The largest y in 1..``top`` at which the tuple ``opts`` fits in M, 0 if none: its
    memory (an fsum of a * y and b, a >= 0) does not decrease as y grows."""

    def fits(y: int) -> bool:
        return memory_fits(stage_memory(nodes, opts, y), M)

    if not fits(1):
        return 0
    if fits(top):
        return top
    lo, hi = 1, top  # fits at lo, not at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


class _Oracle:
    """The search for one instance (restrictions applied) and mode; the tables it fills
    as it goes (option tuples per (C, t), their TPS order per (C, t, d))."""

    def __init__(
        self, inst: Instance, restrictions: Restrictions, mode: Mode, end: float | None = None
    ):
        self.inst, self.mode, self.end = inst, mode, end
        self.K, self.N, self.M = inst.K, inst.N, inst.M
        self.ids, self.succ_mask = _masks(inst)
        self.n = len(self.ids)
        self.d_values = list(restrictions.d_values(inst))
        self.t_values = [t for t in inst.t_values if t <= self.K]
        self.seq = not mode.graph
        self.uniform = restrictions.uniform  # one (t, d) for every stage (sec. 12)
        self.choice_lists = [(t, self.d_values) for t in self.t_values]
        # one memory search over y in 1..N per option tuple (every y the modes hold is <= N)
        self.y_steps = 2 + max(0, self.N - 1).bit_length()
        self.options = lru_cache(maxsize=None)(self._options)
        self.by_tps = lru_cache(maxsize=None)(self._by_tps)
        self.back = lru_cache(maxsize=None)(self._back)
        self.steps = 0  # (stage, t, d) tried
        self.step_limit = math.inf  # the count stops above it (_TooBig)
        self.ticks = 0  # units of work, for the clock
        self.next_check = _CLOCK_EVERY

    def tick(self) -> None:
        """One unit of work; past the deadline (looked at every :data:`_CLOCK_EVERY`
        units), raise _TimeUp."""
        self.ticks += 1
        if self.ticks >= self.next_check:
            self.next_check = self.ticks + _CLOCK_EVERY
            if self.end is not None and time.monotonic() >= self.end:
                raise _TimeUp

    # ---- sizes ------------------------------------------------------------------------

    def choice_count(self) -> int:
        """The (t, d) pairs of one stage, before the device budget."""
        return len(self.t_values) * len(self.d_values)

    def option_work(self, limit: float) -> int:
        """The option tuples' share of the work, summed over every stage C that can occur
        (stops counting above ``limit``): per (C, t), its tuples times one memory search
        over y and one TPS per d with t d <= K; plus, per set of unplaced nodes, the subsets
        tried for its last stage (2 ** its size: this also bounds the count on a graph with
        many nodes before any long work)."""
        full = (1 << self.n) - 1
        total, stages, placed, todo = 0, set(), {full}, [full]
        per_t = {t: sum(1 for d in self.d_values if t * d <= self.K) for t in self.t_values}
        while todo:
            unplaced = todo.pop()
            total += 1 << unplaced.bit_count()
            if total > limit:
                return total
            for sub, rest, _ in self.back(unplaced):
                if sub not in stages:
                    stages.add(sub)
                    for t in self.t_values:
                        total += self.tuple_count(sub, t) * (self.y_steps + per_t[t])
                        if total > limit:
                            return total
                if rest and rest not in placed:
                    placed.add(rest)
                    todo.append(rest)
        return total

    def tuple_count(self, sub: int, t: int) -> int:
        return math.prod(len(self.inst.node[self.ids[i]].options.get(t, ())) for i in _bits(sub))

    # ---- tables -----------------------------------------------------------------------

    def _back(self, unplaced: int) -> tuple:
        """(C, rest, out) for every candidate last stage C of ``unplaced``, with ``out`` the
        placed nodes that hold a successor of C (their stages are C's stage-graph successors)."""
        out = []
        for sub, rest in _back_stages(unplaced, self.succ_mask):
            succ = 0
            for i in _bits(sub):
                succ |= self.succ_mask[i]
            out.append((sub, rest, succ & ~sub))
        return tuple(out)

    def _options(self, sub: int, t: int) -> tuple[list, list[int], int]:
        """(tuples, ymax, best ymax) of stage C = ``sub`` under t: every option tuple (a dict
        node -> Option), the largest y at which each fits in M, and their maximum."""
        nodes = [self.ids[i] for i in _bits(sub)]
        per_node = [self.inst.node[v].options.get(t, ()) for v in nodes]
        tuples, ymax = [], []
        for combo in itertools.product(*per_node):
            self.tick()
            tuples.append(dict(zip(nodes, combo)))
            ymax.append(_ymax(nodes, tuples[-1], self.M, self.N))
        return tuples, ymax, max(ymax, default=0)

    def _by_tps(self, sub: int, t: int, d: int) -> tuple[list[int], list]:
        """The fastest tuple of stage (C, t, d) for every y, as two lists: the increasing
        ``ys`` where the answer changes and, for each, (TPS, tuple). The answer at y is the
        first tuple in ascending (TPS, index) that fits at y."""
        tuples, ymax, _ = self.options(sub, t)
        order = []
        for k, opts in enumerate(tuples):
            self.tick()
            order.append((stage_cost(self.inst, opts, d, opts).tps, k))
        order.sort()
        ys, best = [], []
        for tps, k in order:
            if ymax[k] > (ys[-1] if ys else 0):
                ys.append(ymax[k])
                best.append((tps, tuples[k]))
        return ys, best

    def fits_any(self, sub: int, t: int, y: int) -> bool:
        return self.options(sub, t)[2] >= y

    def best_stage(self, sub: int, t: int, d: int, y: int):
        """(TPS, options) of the fastest option tuple of stage (C, t, d) that fits with y
        microbatches in flight, or None."""
        ys, best = self.by_tps(sub, t, d)
        i = bisect.bisect_left(ys, y)
        return best[i] if i < len(best) else None

    # ---- the moves both the count and the search make ----------------------------------

    def moves(self, unplaced: int, devices: int, h_next: int, h_of: tuple, pair=None):
        """Every (C, rest, out, t, d, h, y) that can be the stage in front of the placed
        ones: within the device budget (choices in ascending t d), h <= N, some option
        tuple fitting at y. C's successors hold ``after`` microbatches, h = d + after
        (Piper's rule) or q = d ceil((d + after) / d) (``--in-flight schedule``, sec. 11):
        sequentially the next stage's h (``h_next``; the suffix sum under Piper's rule), under graph
        pipelining the largest h of the stages holding a successor of C (``h_of[i]``: h of
        the stage of placed node i). ``pair``: the (t, d) every stage must take (uniform
        degrees, once a stage is placed), else None. Counts every (C, t, d) tried in
        ``self.steps``."""
        K, N = self.K, self.N
        choices = [(pair[0], [pair[1]])] if pair is not None else self.choice_lists
        for sub, rest, out in self.back(unplaced):
            after = h_next if self.seq else max((h_of[i] for i in _bits(out)), default=0)
            for t, ds in choices:
                for d in ds:
                    if devices + t * d > K:
                        break  # d_values ascend
                    self.steps += 1
                    if self.steps > self.step_limit:
                        raise _TooBig
                    self.tick()
                    h = front_in_flight(d, after, self.mode.in_flight)
                    if h > N:  # then d + after > N (d divides N), so for every larger d too
                        break
                    y = microbatches_held(h, d, N, self.mode.schedule)
                    if self.fits_any(sub, t, y):
                        yield sub, rest, out, t, d, h, y

    def count(self, limit: int) -> int:
        """The steps of the search without branch and bound (memoized: the moves below a
        partial plan depend only on the unplaced set, the devices used, the h of the stages
        they follow (sequentially the next stage's, under graph pipelining those that hold a
        successor of an unplaced node) and, for uniform degrees, the (t, d) taken). Raises
        _TooBig as soon as
        the running total, which never exceeds the final one, passes ``limit``: the count
        itself does at most ``limit`` steps."""
        memo: dict = {}
        full = (1 << self.n) - 1
        frontier = {}

        def below(unplaced: int, devices: int, h_next: int, h_of: tuple, pair) -> int:
            if unplaced not in frontier:
                succ = 0
                for i in _bits(unplaced):
                    succ |= self.succ_mask[i]
                frontier[unplaced] = _bits(succ & ~unplaced)
            seen = h_next if self.seq else tuple(h_of[i] for i in frontier[unplaced])
            key = (unplaced, devices, seen, pair)
            if key in memo:
                return memo[key]
            start = self.steps
            for sub, rest, _, t, d, h, _ in self.moves(unplaced, devices, h_next, h_of, pair):
                if rest:
                    h2 = (
                        h_of
                        if self.seq
                        else tuple(h if sub >> i & 1 else x for i, x in enumerate(h_of))
                    )
                    before = self.steps
                    nxt = (t, d) if self.uniform else None
                    self.steps = before + below(rest, devices + t * d, h, h2, nxt)  # memo hits
                    if self.steps > limit:
                        raise _TooBig
            memo[key] = self.steps - start
            return memo[key]

        self.steps, self.step_limit = 0, limit
        try:
            return below(full, 0, 0, (0,) * self.n, None)
        finally:
            self.step_limit = math.inf


def brute_work(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    mode: Mode = DEFAULT_MODE,
    limit: int = MAX_WORK,
) -> int:
    """How many steps :func:`solve_brute` takes at most on ``instance`` in ``mode``: the
    (stage, t, d) choices its search tries without branch and bound, plus the option
    tuples it evaluates. Stops counting once past ``limit`` (the result is then some
    number above it); the count itself does at most about ``limit`` steps.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> brute_work(random_instance("chain", 3, seed=0, memory="loose")) > 0
    True
    """
    oracle = _Oracle(restrictions.apply(instance), restrictions, mode)
    return sum(_guard(oracle, limit))


def _guard(oracle: _Oracle, limit: int) -> tuple[int, int]:
    """The two parts of :func:`brute_work`: (option work, search steps), their sum above
    ``limit`` when the count stopped."""
    choices = oracle.choice_count()
    if choices > limit:
        return choices, 0
    options = oracle.option_work(limit)
    if options > limit:
        return options, 0
    try:
        return options, oracle.count(limit - options)
    except _TooBig:
        return options, limit - options + 1


def brute_applies(
    instance: Instance,
    max_nodes: int = MAX_NODES,
    restrictions: Restrictions = Restrictions(),
    *,
    mode: Mode = DEFAULT_MODE,
) -> bool:
    """True when :func:`solve_brute` accepts the instance in ``mode`` (at most ``max_nodes``
    nodes and :data:`MAX_WORK` steps)."""
    return (
        len(instance.nodes) <= max_nodes
        and brute_work(instance, restrictions, mode=mode) <= MAX_WORK
    )


def solve_brute(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    max_nodes: int = MAX_NODES,
    force: bool = False,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
) -> Solution:
    """Solve a tiny instance by trying every plan, in any mode (secs. 8 and 9).

    Parameters
    ----------
    instance : Instance
        At most ``max_nodes`` nodes and :data:`MAX_WORK` steps (unless ``force``).
    restrictions : Restrictions
        Caps on d and t, excluded options, uniform degrees (as for every solver).
    max_nodes : int
        The size limit (default :data:`MAX_NODES`).
    force : bool
        Skip the size limits (the search may then take very long).
    mode : Mode
        Pipelining, objective and schedule (default: secs. 2-4).
    time_limit : float, optional
        Seconds (wall clock) before the search stops; checked by the caller
        (:func:`piper_ilp.milp.check_solver_settings`). None: no limit.

    Returns
    -------
    Solution
        method ``"brute"``; status OPTIMAL with the best plan (``objective`` = ``bound``
        = its TPS or batch time, exactly the evaluator's value) or INFEASIBLE when no plan
        is valid; stopped by ``time_limit``: FEASIBLE with the best plan found (no bound)
        or UNKNOWN, never a proof. ``info`` counts the complete plans reached (``plans``)
        and the stage choices tried (``stage_choices``); without ``force`` also the guard's
        estimate (``work``, :func:`brute_work`) and its share of stage choices
        (``work_search``, what the search tries when nothing is pruned).

    Raises
    ------
    SizeLimitError
        Above ``max_nodes`` nodes or :data:`MAX_WORK` steps (:func:`brute_work`), unless
        ``force``; refused before the search.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> sol = solve_brute(random_instance("chain", 3, seed=0, memory="loose"))
    >>> sol.status.value, sol.tps == sol.objective
    ('optimal', True)
    """
    start = time.perf_counter()
    end = None if time_limit is None else time.monotonic() + time_limit
    if not force and len(instance.nodes) > max_nodes:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {max_nodes} nodes, "
            f"this instance has {len(instance.nodes)}"
        )
    oracle = _Oracle(restrictions.apply(instance), restrictions, mode, end)
    work = None
    try:
        if not force:
            work = _guard(oracle, MAX_WORK)
            if sum(work) > MAX_WORK:
                raise SizeLimitError(
                    f"{instance.source}: the exhaustive solver takes at most {MAX_WORK:,} steps "
                    "(ordered partitions x (t, d) choices x option tuples), this instance needs "
                    f"more in mode {mode.label}"
                )
        best, stopped = _search(oracle)
    except _TimeUp:  # in the guard's option tables
        best, stopped = {"value": math.inf, "stages": None, "plans": 0}, True
    info = {"plans": best["plans"], "stage_choices": oracle.steps, "nodes": oracle.n}
    if work is not None:  # the guard's estimate: at least stage_choices
        info["work"], info["work_search"] = sum(work), work[1]
    return _answer(instance, restrictions, oracle, best, stopped, time_limit, info, start)


def _search(oracle: _Oracle) -> tuple[dict, bool]:
    """Branch and bound over the moves of ``oracle``; (best, stopped) with ``best`` holding
    ``value``, ``stages`` (the best plan's stages, last first) and ``plans``."""
    N, mode, n = oracle.N, oracle.mode, oracle.n
    flush = mode.batch_time
    best = {"value": math.inf, "stages": None, "plans": 0}
    oracle.steps = 0

    def search(unplaced, devices, h_next, h_of, L_of, worst, taus, path, chosen, pair):
        """``chosen``: the stages placed (last first) as (C, t, d, options, TPS); ``h_next``
        the h of the one placed last; ``h_of`` / ``L_of``: per placed node, h and the
        longest path from its stage (graph); ``worst`` the largest TPS, ``taus`` every d
        TPS, ``path`` the longest L so far; ``pair`` the (t, d) of every stage under uniform
        degrees (None before the first)."""
        for sub, rest, out, t, d, h, y in oracle.moves(unplaced, devices, h_next, h_of, pair):
            tps, options = oracle.best_stage(sub, t, d, y)
            w, tau, L = max(worst, tps), d * tps, 0.0
            if not flush:
                lower = w
            elif oracle.seq:
                lower = (N - 1) * w + math.fsum(taus + [tau])
            else:
                L = tau + max((L_of[i] for i in _bits(out)), default=0.0)
                lower = (N - 1) * w + max(path, L)
            if lower >= best["value"]:
                continue  # no completion beats the best plan (see the module docstring)
            chosen.append((sub, t, d, options, tps))
            if rest == 0:
                best["plans"] += 1
                value = _value(oracle, chosen) if flush else w
                if value < best["value"]:
                    best["value"], best["stages"] = value, list(chosen)
            else:
                h2, L2 = list(h_of), list(L_of)
                for i in _bits(sub):
                    h2[i], L2[i] = h, L
                nxt = (t, d) if oracle.uniform else None
                search(rest, devices + t * d, h, h2, L2, w, taus + [tau], max(path, L), chosen, nxt)
            chosen.pop()

    try:
        search((1 << n) - 1, 0, 0, [0] * n, [0.0] * n, -math.inf, [], 0.0, [], None)
    except _TimeUp:
        return best, True
    return best, False


def _value(oracle: _Oracle, chosen: list) -> float:
    """The batch time of the complete plan ``chosen`` (last stage first), by
    :func:`piper_ilp.pipeline.batch_time` on the stages in pipeline order."""
    order = chosen[::-1]
    succ_of = [0] * len(order)
    for k, (sub, *_rest) in enumerate(order):
        for i in _bits(sub):
            succ_of[k] |= oracle.succ_mask[i]
    succ = [
        {j for j, o in enumerate(order) if j != k and o[0] & succ_of[k]} for k in range(len(order))
    ]
    return batch_time(
        [st[4] for st in order], [st[2] for st in order], succ, oracle.N, oracle.mode.pipeline
    )


def _answer(instance, restrictions, oracle, best, stopped, time_limit, info, start) -> Solution:
    """The Solution of a search: optimal, infeasible, or (stopped) feasible / unknown."""
    seconds = time.perf_counter() - start
    mode = oracle.mode
    if best["stages"] is None:
        if stopped:
            return Solution(
                method="brute",
                status=Status.UNKNOWN,
                seconds=seconds,
                message=f"time limit of {time_limit:g} s reached: no plan yet, nothing proven",
                info=dict(info, stopped="in the search"),
                mode=mode,
            )
        return Solution(
            method="brute",
            status=Status.INFEASIBLE,
            seconds=seconds,
            message="no valid plan: every partition, degree and option choice breaks a budget or "
            "the memory limit",
            info=info,
            mode=mode,
        )
    ids = oracle.ids
    stages = tuple(
        Stage(tuple(v for v in ids if v in opts), d, t, {v: o.id for v, o in opts.items()})
        for _, t, d, opts, _ in reversed(best["stages"])
    )
    solution = Solution(
        method="brute",
        status=Status.FEASIBLE if stopped else Status.OPTIMAL,
        plan=Plan(stages),
        objective=best["value"],
        bound=None if stopped else best["value"],
        seconds=seconds,
        info=dict(info, stopped="in the search") if stopped else info,
        message=(
            f"time limit of {time_limit:g} s reached: the best plan found, not proven optimal"
            if stopped
            else None
        ),
        mode=mode,
    )
    # the evaluator computes the same fsum sums: its value must equal ours exactly
    return checked_solution(instance, solution, tolerance=0.0, restrictions=restrictions)
