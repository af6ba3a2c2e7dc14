"""The exhaustive oracle: try every plan of a tiny instance (cost model secs. 2-4 and 7).

The referee of every other method, deliberately simple and independent of the DP and the
MILP. It enumerates

1. every ordered partition of the nodes into stages whose order respects the edges
   (each stage C is taken off the *back* of the nodes still unplaced, so it must hold
   every unplaced successor of its nodes; the placed nodes form a successor-closed set);
2. every (t, d) per stage with d in ``restrictions.d_values`` (divisors of N), within the
   budgets sum d <= N and sum t * d <= K;
3. every option per node, under the stage's t;

and keeps the plan with the least TPS (or, under ``--objective batch-time``, the least
batch time of sec. 9; under ``--pipeline graph`` the microbatches in flight are those of
sec. 8, under ``--in-flight schedule`` the q of sec. 11, by
:func:`piper_ilp.pipeline.front_in_flight`). Every number it compares is the evaluator's own
(contract sec. 7): a stage's TPS is :func:`piper_ilp.cost.stage_cost` (three ``fsum``
sums), its memory :func:`piper_ilp.cost.stage_memory` (``fsum`` of a * y and b) and it
fits iff :func:`piper_ilp.cost.memory_fits` (``<= M``, no slack). The value it reports
is therefore exactly the evaluated TPS of its plan, and the optimum is exact, whatever
the magnitudes.

The only shortcuts are obviously safe ones:

* a stage or degree choice that already breaks a budget is not extended;
* branch and bound: a partial plan whose slowest stage is already no faster than the
  best complete plan is not extended (the plan's TPS is a max over its stages; the batch
  time is (N - 1) max TPS plus a longest path, and both only grow as stages are added);
* the options of one stage affect only that stage's time and memory, so for a stage
  (C, t, d) with y = ceil(s / d) (s the suffix sum of d) the oracle takes the fastest
  option tuple that fits in M, trying the tuples in ascending TPS (cached per (C, t, d)).

Symbols: p, w, a, b, sfw, sbw per option; K devices, M memory, N microbatches,
B bandwidth; d, t degrees; y microbatches in flight.
"""

from __future__ import annotations

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
    "MAX_OPTION_TUPLES",
    "MAX_PARTITIONS",
    "solve_brute",
    "brute_applies",
    "count_partitions",
]

#: The oracle refuses instances with more nodes than this.
MAX_NODES = 8

#: ... or whose option tuples for the whole graph exceed this (product over nodes of
#: the number of options under the largest t).
MAX_OPTION_TUPLES = 6**8

#: ... or whose ordered partitions into at most min(N, K) stages exceed this (wide
#: graphs: 8 independent nodes have 545,835 ordered partitions).
MAX_PARTITIONS = 20_000

#: Batch-time pruning keeps a partial plan unless its lower bound exceeds the best value
#: by more than float rounding could explain (the bound adds in another order than the
#: evaluator's formula).
_PRUNE_MARGIN = 1 + 1e-12


def brute_applies(instance: Instance, max_nodes: int = MAX_NODES) -> bool:
    """True when :func:`solve_brute` accepts the instance (it is tiny enough)."""
    try:
        _check_size(instance, max_nodes)
    except SizeLimitError:
        return False
    return True


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


def count_partitions(instance: Instance, max_stages: int | None = None) -> int:
    """The number of ordered partitions of the nodes into at most ``max_stages`` stages
    (default min(N, K)) whose order respects the edges: how many the oracle tries.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> count_partitions(random_instance("chain", 4, seed=0, K=8, N=8))  # 2 ** 3 ways to cut a path
    8
    """
    ids, succ_mask = _masks(instance)
    if max_stages is None:
        max_stages = min(instance.N, instance.K)

    @lru_cache(maxsize=None)
    def count(unplaced: int, k: int) -> int:
        if unplaced == 0:
            return 1
        if k == 0:
            return 0
        return sum(count(rest, k - 1) for _, rest in _back_stages(unplaced, succ_mask))

    return count((1 << len(ids)) - 1, max_stages)


def _check_size(instance: Instance, max_nodes: int) -> None:
    n = len(instance.nodes)
    if n > max_nodes:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {max_nodes} nodes, this "
            f"instance has {n}; use --methods dp,cpsat,cbc"
        )
    tuples = 1
    for node in instance.nodes:
        tuples *= max((len(opts) for opts in node.options.values()), default=1)
    if tuples > MAX_OPTION_TUPLES:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {MAX_OPTION_TUPLES} option "
            f"tuples, this instance has {tuples}; use --methods dp,cpsat,cbc"
        )
    parts = count_partitions(instance)
    if parts > MAX_PARTITIONS:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {MAX_PARTITIONS} ordered "
            f"partitions into stages, this instance has {parts}; use --methods dp,cpsat,cbc"
        )


def solve_brute(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    max_nodes: int = MAX_NODES,
    force: bool = False,
    mode: Mode = DEFAULT_MODE,
) -> Solution:
    """Solve a tiny instance by trying every plan, in any mode (secs. 8 and 9).

    Parameters
    ----------
    instance : Instance
        At most ``max_nodes`` nodes (unless ``force``).
    restrictions : Restrictions
        Caps on d and t, excluded options, uniform degrees (as for every solver).
    max_nodes : int
        The size limit (default :data:`MAX_NODES`).
    force : bool
        Skip the size limits (the search may then take very long).
    mode : Mode
        Pipelining, objective and schedule (default: secs. 2-4).

    Returns
    -------
    Solution
        method ``"brute"``; status OPTIMAL with the best plan (``objective`` = ``bound``
        = its TPS or batch time, exactly the evaluator's value) or INFEASIBLE when no plan is valid.
        ``info`` counts the complete plans reached (``plans``) and the stage choices
        tried (``stage_choices``).

    Raises
    ------
    SizeLimitError
        Above ``max_nodes`` nodes, :data:`MAX_OPTION_TUPLES` option tuples or
        :data:`MAX_PARTITIONS` ordered partitions (unless ``force``).

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> sol = solve_brute(random_instance("chain", 3, seed=0, memory="loose"))
    >>> sol.status.value, sol.tps == sol.objective
    ('optimal', True)
    """
    if not force:
        _check_size(instance, max_nodes)
    start = time.perf_counter()
    inst = restrictions.apply(instance)
    K, N, M = inst.K, inst.N, inst.M
    ids, succ_mask = _masks(inst)  # succ_mask[i]: bit set of the successors of node ids[i]
    n = len(ids)
    choices = [(t, d) for t in inst.t_values for d in restrictions.d_values(inst) if t * d <= K]

    @lru_cache(maxsize=None)
    def option_tuples(mask: int, t: int) -> tuple:
        """Every option tuple of stage C = mask under t, as dicts node -> Option (empty
        when some node of C has no option for t)."""
        nodes = [ids[i] for i in range(n) if mask >> i & 1]
        per_node = [inst.node[v].options.get(t, ()) for v in nodes]
        return tuple(dict(zip(nodes, combo)) for combo in itertools.product(*per_node))

    @lru_cache(maxsize=None)
    def by_tps(mask: int, t: int, d: int) -> tuple:
        """(TPS, index) of every option tuple of stage (C, t, d), fastest first."""
        tuples = option_tuples(mask, t)
        return tuple(
            sorted((stage_cost(inst, opts, d, opts).tps, k) for k, opts in enumerate(tuples))
        )

    @lru_cache(maxsize=None)
    def fits(mask: int, t: int, y: int, k: int) -> bool:
        opts = option_tuples(mask, t)[k]
        return memory_fits(stage_memory(opts, opts, y), M)

    @lru_cache(maxsize=None)
    def best_stage(mask: int, t: int, d: int, y: int):
        """(TPS, options) of the fastest option tuple of stage (C, t, d) that fits in M
        with y microbatches in flight, or None."""
        for tps, k in by_tps(mask, t, d):
            if fits(mask, t, y, k):
                return tps, option_tuples(mask, t)[k]
        return None

    best_value = math.inf
    best_stages: list | None = None
    counts = {"plans": 0, "stage_choices": 0}
    graph, flush = mode.graph, mode.batch_time
    uniform = restrictions.uniform

    def search(
        unplaced: int, s: int, devices: int, worst: float, path: float, chosen: list
    ) -> None:
        """Place the nodes of ``unplaced`` (a predecessor-closed set) in stages before the
        ``chosen`` ones (listed from the last stage backwards, each as (mask, t, d,
        options, h, TPS, L) with h its microbatches in flight and L the longest sum of
        d TPS along stage-graph paths from it). ``s`` is the suffix sum of d, ``worst``
        the largest TPS and ``path`` the largest L so far."""
        nonlocal best_value, best_stages
        if unplaced == 0:
            counts["plans"] += 1
            value = worst
            if flush:  # the evaluator's own formula, on the plan in pipeline order
                order = chosen[::-1]
                where = {st[0]: i for i, st in enumerate(order)}
                succ = [{where[o[0]] for o in order if o[0] & _succ_of(st[0])} for st in order]
                value = batch_time(
                    [st[5] for st in order], [st[2] for st in order], succ, N, mode.pipeline
                )
            if best_stages is None or value < best_value:
                best_value, best_stages = value, list(chosen)
            return
        for sub, rest in _back_stages(unplaced, succ_mask):
            out = _succ_of(sub)
            later = [st for st in chosen if st[0] & out] if graph else chosen[-1:]
            # uniform (sec. 12): every stage takes the pair of the last one placed
            for t, d in [chosen[-1][1:3]] if uniform and chosen else choices:
                if devices + t * d > K:
                    continue
                h = front_in_flight(d, max((st[4] for st in later), default=0), mode.in_flight)
                if h > N:  # (sequential, Piper's rule: h = s + d)
                    continue
                counts["stage_choices"] += 1
                stage = best_stage(sub, t, d, microbatches_held(h, d, N, mode.schedule))
                if stage is None:
                    continue
                w = max(worst, stage[0])
                L = d * stage[0] + (max((st[6] for st in later), default=0.0) if graph else path)
                p = max(path, L)
                if best_stages is not None:
                    # the value only grows as stages are added (sec. 9: a max and a longest path)
                    lower = (N - 1) * w + p if flush else w
                    if lower > best_value * _PRUNE_MARGIN if flush else w >= best_value:
                        continue  # cannot beat the best plan found so far
                chosen.append((sub, t, d, stage[1], h, stage[0], L))
                search(rest, s + d, devices + t * d, w, p, chosen)
                chosen.pop()

    @lru_cache(maxsize=None)
    def _succ_of(mask: int) -> int:
        out = 0
        for i in range(n):
            if mask >> i & 1:
                out |= succ_mask[i]
        return out & ~mask

    search((1 << n) - 1, 0, 0, -math.inf, 0.0, [])

    seconds = time.perf_counter() - start
    info = dict(counts, nodes=n)
    if best_stages is None:
        return Solution(
            method="brute",
            status=Status.INFEASIBLE,
            seconds=seconds,
            message="no valid plan: every partition, degree and option choice breaks a budget or "
            "the memory limit",
            info=info,
            mode=mode,
        )
    stages = tuple(
        Stage(tuple(v for v in ids if v in opts), d, t, {v: o.id for v, o in opts.items()})
        for _, t, d, opts, *_ in reversed(best_stages)
    )
    solution = Solution(
        method="brute",
        status=Status.OPTIMAL,
        plan=Plan(stages),
        objective=best_value,
        bound=best_value,
        seconds=seconds,
        info=info,
        mode=mode,
    )
    # the evaluator computes the same fsum sums: its TPS must equal ours exactly
    return checked_solution(instance, solution, tolerance=0.0, restrictions=restrictions)
