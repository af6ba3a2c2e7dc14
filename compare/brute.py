"""The exhaustive oracle: try every plan of a tiny instance (cost model secs. 2-4).

Deliberately simple and independent of the DP and the MILP: it enumerates

1. every ordered partition of the nodes into stages whose order respects the edges
   (each stage C is taken off the *back* of the nodes still unplaced, so it must hold
   every unplaced successor of its nodes; the placed nodes form a successor-closed set);
2. every (t, d) per stage with d in ``restrictions.d_values`` (divisors of N), within the
   budgets sum d <= N and sum t * d <= K;
3. every option per node, under the stage's t;

and keeps the plan with the least TPS. The only shortcuts are obviously safe ones:

* a partition or degree choice that already breaks a budget is not extended;
* the options of one stage affect only that stage's time and memory, so for a stage
  (C, t, d) and its y = ceil(s / d) (s the suffix sum of d) the oracle picks the
  fastest option tuple that fits in M by trying every tuple (cached per (C, t, d)).

Symbols: p, w, a, b, sfw, sbw per option; K devices, M memory, N microbatches,
B bandwidth; d, t degrees; y microbatches in flight.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import lru_cache

import numpy as np

from piper_ilp.cost import MEMORY_RTOL, microbatches_in_flight, node_edge_bytes
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["MAX_NODES", "MAX_OPTION_TUPLES", "MAX_PARTITIONS", "solve_brute", "brute_applies", "count_partitions"]

#: The oracle refuses instances with more nodes than this.
MAX_NODES = 8

#: ... or whose option tuples for the whole graph exceed this (product over nodes of
#: the number of options under the largest t).
MAX_OPTION_TUPLES = 6**8

#: ... or whose ordered partitions into at most min(N, K) stages exceed this (wide
#: graphs: 8 independent nodes have 545,835 ordered partitions).
MAX_PARTITIONS = 20_000


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
    >>> from compare.generators import random_instance
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
            f"{instance.source}: the exhaustive solver handles at most {max_nodes} nodes, this instance has {n}; "
            "use --methods dp,cpsat,cbc"
        )
    tuples = 1
    for node in instance.nodes:
        tuples *= max((len(opts) for opts in node.options.values()), default=1)
    if tuples > MAX_OPTION_TUPLES:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {MAX_OPTION_TUPLES} option tuples, "
            f"this instance has {tuples}; use --methods dp,cpsat,cbc"
        )
    parts = count_partitions(instance)
    if parts > MAX_PARTITIONS:
        raise SizeLimitError(
            f"{instance.source}: the exhaustive solver handles at most {MAX_PARTITIONS} ordered partitions "
            f"into stages, this instance has {parts}; use --methods dp,cpsat,cbc"
        )


def solve_brute(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    max_nodes: int = MAX_NODES,
) -> Solution:
    """Solve a tiny instance by trying every plan.

    Parameters
    ----------
    instance : Instance
        At most ``max_nodes`` nodes.
    restrictions : Restrictions
        Caps on d and t and excluded options (as for every solver).
    max_nodes : int
        The size limit (default :data:`MAX_NODES`).

    Returns
    -------
    Solution
        method ``"brute"``; status OPTIMAL with the best plan (``objective`` = ``bound``
        = its TPS, re-checked by the evaluator) or INFEASIBLE when no plan is valid.
        ``info`` counts the ordered partitions (``partitions``) and the (partition,
        degrees) combinations (``degree_choices``) tried.

    Raises
    ------
    SizeLimitError
        Above ``max_nodes`` nodes, :data:`MAX_OPTION_TUPLES` option tuples or
        :data:`MAX_PARTITIONS` ordered partitions.

    Examples
    --------
    >>> from compare.generators import random_instance
    >>> sol = solve_brute(random_instance("chain", 3, seed=0, memory="loose"))
    >>> sol.status.value, sol.tps == sol.objective
    ('optimal', True)
    """
    _check_size(instance, max_nodes)
    start = time.perf_counter()
    inst = restrictions.apply(instance)
    K, N, M = inst.K, inst.N, inst.M
    d_values = restrictions.d_values(inst)
    t_values = inst.t_values
    ids, succ_mask = _masks(inst)  # succ_mask[i]: bit set of the successors of node ids[i]
    n = len(ids)

    def members(mask: int) -> list[int]:
        return [ids[i] for i in range(n) if mask >> i & 1]

    @lru_cache(maxsize=None)
    def option_table(mask: int, t: int, d: int):
        """For stage C = mask with degrees (t, d): every option tuple as arrays of its TPS,
        its sum of a and its sum of b, plus the tuples themselves. None if some node of C
        has no option for t."""
        nodes = members(mask)
        cset = frozenset(nodes)
        per_node = []
        for v in nodes:
            opts = inst.node[v].options.get(t)
            if not opts:
                return None
            per_node.append(
                [
                    (
                        # this node's share of the stage's TPS (cost model sec. 3)
                        (node_edge_bytes(inst, v, o, cset) / d + 4.0 * (d - 1) * o.w / (d * N)) / inst.B + o.p / d,
                        o.a,
                        o.b,
                        o,
                    )
                    for o in opts
                ]
            )
        combos = list(itertools.product(*per_node))
        tps = np.array([sum(x[0] for x in combo) for combo in combos])
        a = np.array([sum(x[1] for x in combo) for combo in combos])
        b = np.array([sum(x[2] for x in combo) for combo in combos])
        return tps, a, b, [tuple(x[3] for x in combo) for combo in combos], nodes

    @lru_cache(maxsize=None)
    def best_stage(mask: int, t: int, d: int, y: int):
        """(TPS, options) of the fastest option tuple of stage (C, t, d) that fits in M
        with y microbatches in flight, or None."""
        table = option_table(mask, t, d)
        if table is None:
            return None
        tps, a, b, combos, nodes = table
        fits = a * y + b <= M * (1.0 + MEMORY_RTOL)
        if not fits.any():
            return None
        k = int(np.argmin(np.where(fits, tps, np.inf)))
        return float(tps[k]), dict(zip(nodes, combos[k]))

    best_value = math.inf
    best_stages: list | None = None
    counts = {"partitions": 0, "degree_choices": 0}
    full = (1 << n) - 1

    def back_stages(unplaced: int):
        """Every way to cut ``unplaced`` (a predecessor-closed set) into stages, listed
        from the last stage backwards."""
        if unplaced == 0:
            yield []
            return
        for sub, rest in _back_stages(unplaced, succ_mask):
            for tail in back_stages(rest):
                yield [sub] + tail

    max_stages = min(N, K)
    for back in back_stages(full):
        if len(back) > max_stages:  # every stage needs d >= 1 and t * d >= 1: budgets
            continue
        counts["partitions"] += 1
        # degrees, last stage first; s = suffix sum of d
        choices = [(t, d) for t in t_values for d in d_values if t * d <= K]

        def assign(i: int, s: int, devices: int, worst: float, chosen: list):
            nonlocal best_value, best_stages
            if i == len(back):
                counts["degree_choices"] += 1
                if worst < best_value:
                    best_value, best_stages = worst, list(chosen)
                return
            for t, d in choices:
                if s + d > N or devices + t * d > K:
                    continue
                y = microbatches_in_flight(s + d, d)
                stage = best_stage(back[i], t, d, y)
                if stage is None:
                    continue
                chosen.append((back[i], t, d, stage[1]))
                assign(i + 1, s + d, devices + t * d, max(worst, stage[0]), chosen)
                chosen.pop()

        assign(0, 0, 0, -math.inf, [])

    seconds = time.perf_counter() - start
    info = dict(counts, nodes=n)
    if best_stages is None:
        return Solution(
            method="brute",
            status=Status.INFEASIBLE,
            seconds=seconds,
            message="no valid plan: every partition, degree and option choice breaks a budget or the memory limit",
            info=info,
        )
    stages = tuple(
        Stage(tuple(v for v in ids if v in opts), d, t, {v: o.id for v, o in opts.items()})
        for _, t, d, opts in reversed(best_stages)
    )
    plan = Plan(stages)
    solution = Solution(
        method="brute",
        status=Status.OPTIMAL,
        plan=plan,
        objective=best_value,
        bound=best_value,
        seconds=seconds,
        info=info,
    )
    return checked_solution(instance, solution, restrictions=restrictions)

