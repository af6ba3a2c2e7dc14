"""Pipelining beyond sec. 2-3: the stage graph, microbatches in flight, batch time (contract
secs. 8, 9 and 11), each equation written once.

For a plan with stages 0..m-1 (pipeline order) and data-parallel degrees d_i:

* the *stage graph* has an arc i -> j (i != j) whenever some edge (u -> v) has u in stage i
  and v in stage j (:func:`stage_graph`); a stage's *successors* are its arcs' heads under
  graph pipelining and the next stage under sequential pipelining;
* microbatches in flight (:func:`in_flight`, one step :func:`front_in_flight`), with
  after_i = max over the successors j of h_j (0 without successors): Piper's rule,
  h_i = d_i + after_i (sequential: the suffix sum s_i of sec. 2; graph: sec. 8); the rule
  the schedule keeps (sec. 11), q_i = d_i ceil((d_i + after_i) / d_i), a multiple of d_i;
* microbatches each replica holds (:func:`microbatches_held`): y_i = ceil(h_i / d_i)
  (= q_i / d_i) under ``1f1b`` and ``1f1b-flush``; y_i = N / d_i under ``gpipe`` (all
  forwards first);
* the batch limit: max_i h_i <= N (sequential under Piper's rule: sum_i d_i <= N;
  sec. 11: max_i q_i <= N) (:func:`batch_limit_ok`);
* batch time with a flush per batch (:func:`batch_time`): tau_i = d_i TPS_i, and
  T_batch = (N - 1) max_i TPS_i + the longest stage-graph path of tau_i (sequential: the
  sum of all tau_i).
"""

from __future__ import annotations

import math
from typing import Sequence

from piper_ilp.cost import microbatches_in_flight
from piper_ilp.instance import Instance
from piper_ilp.mode import IN_FLIGHT_RULES, PIPELINES, SCHEDULES, check_choice
from piper_ilp.plan import Plan

__all__ = [
    "stage_graph",
    "front_in_flight",
    "in_flight",
    "microbatches_held",
    "batch_limit_ok",
    "batch_time",
]


def stage_graph(instance: Instance, plan: Plan) -> list[set[int]]:
    """The successors of each stage in the stage graph (sec. 8).

    Stage i has an arc to stage j != i whenever some edge (u -> v) of ``instance`` has u in
    stage i and v in stage j; edges inside a stage, or with an end in no stage, make none.

    Parameters
    ----------
    instance : Instance
    plan : Plan
        Need not be valid (the evaluator calls it on every plan).

    Returns
    -------
    list of set of int
        Per stage, in the plan's order, the indices of its successors.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> from piper_ilp.plan import Plan, Stage
    >>> succ, pred = {0: [1, 2], 1: [3], 2: [3], 3: []}, {0: [], 1: [0], 2: [0], 3: [1, 2]}
    >>> def sync(vs):
    ...     return {str(u): 0 for u in vs}
    >>> nodes = [(v, {"1": [option_dict("v", 1, 0, 0, 0, sync(pred[v]), sync(succ[v]))]})
    ...          for v in succ]
    >>> edges = [(u, v, 0) for u in succ for v in succ[u]]
    >>> inst = instance_from_dict(instance_dict(nodes, edges, K=4, M=1, N=4, B=1))
    >>> plan = Plan(tuple(Stage((v,), 1, 1, {v: "v"}) for v in range(4)))
    >>> stage_graph(inst, plan)
    [{1, 2}, {3}, {3}, set()]
    """
    where = {v: i for i, st in enumerate(plan.stages) for v in st.nodes}
    succ: list[set[int]] = [set() for _ in plan.stages]
    for e in instance.edges:
        i, j = where.get(e.src), where.get(e.dst)
        if i is not None and j is not None and i != j:
            succ[i].add(j)
    return succ


def front_in_flight(d, after, rule: str = "piper"):
    """The microbatches in flight of one stage, from those of its successors.

    Parameters
    ----------
    d : int or numpy integer array
        The stage's replicas (>= 1 under ``schedule``, which divides by it).
    after : int or numpy integer array
        The most its successors hold (0 without successors).
    rule : str
        ``piper``: h = d + after (secs. 2 and 8); ``schedule``: q = d ceil((d + after) / d)
        (sec. 11), a multiple of d.

    Returns
    -------
    int or numpy integer array
        Elementwise on arrays (the DPs use it on arrays).

    Raises
    ------
    ValueError
        An unknown rule.

    Examples
    --------
    >>> front_in_flight(2, 3), front_in_flight(2, 3, "schedule"), front_in_flight(2, 4, "schedule")
    (5, 6, 6)
    """
    if rule == "piper":
        return d + after
    check_choice(rule, IN_FLIGHT_RULES, "in_flight")
    return d * -(-(d + after) // d)


def in_flight(
    d: Sequence[int],
    successors: Sequence[set[int]],
    pipeline: str = "sequential",
    rule: str = "piper",
) -> list[int]:
    """The microbatches in flight of every stage: h_i (Piper's rule, secs. 2 and 8) or q_i
    (``rule="schedule"``, sec. 11), from the last stage back (:func:`front_in_flight`).

    Parameters
    ----------
    d : sequence of int
        Each stage's replicas.
    successors : sequence of set of int
        From :func:`stage_graph` (stages in a topological order of it, as every valid plan
        lists them); read under graph pipelining only, where a stage's successors hold
        ``after``. Under sequential pipelining the next stage does.
    pipeline : str
        ``sequential`` or ``graph``.
    rule : str
        ``piper`` or ``schedule``.

    Returns
    -------
    list of int
        Per stage, in the plan's order. Sequential under Piper's rule: the suffix sums of d.

    Raises
    ------
    ValueError
        An unknown pipeline or rule.

    Examples
    --------
    >>> in_flight([1, 1, 1, 1], [{1, 2}, {3}, {3}, set()], "sequential")
    [4, 3, 2, 1]
    >>> in_flight([1, 1, 1, 1], [{1, 2}, {3}, {3}, set()], "graph")
    [3, 2, 2, 1]
    >>> arcs = [{1}, {2}, set()]
    >>> in_flight([1, 2, 1], arcs), in_flight([1, 2, 1], arcs, rule="schedule")
    ([4, 3, 1], [5, 4, 1])
    """
    check_choice(pipeline, PIPELINES, "pipeline")
    check_choice(rule, IN_FLIGHT_RULES, "in_flight")
    m = len(d)
    h = [0] * m
    for i in range(m - 1, -1, -1):
        if pipeline == "sequential":
            after = h[i + 1] if i + 1 < m else 0
        else:
            after = max((h[j] for j in successors[i]), default=0)
        h[i] = front_in_flight(d[i], after, rule)
    return h


def microbatches_held(h: int, d: int, N: int, schedule: str = "1f1b") -> int:
    """y_i, the microbatches one replica of a stage holds (secs. 2, 8, 9).

    Parameters
    ----------
    h : int
        The stage's microbatches in flight (:func:`in_flight`; under sec. 11's rule q, a
        multiple of d).
    d : int
        Its replicas, >= 1.
    N : int
        Microbatches per batch.
    schedule : str
        One of :data:`piper_ilp.mode.SCHEDULES`.

    Returns
    -------
    int
        ceil(h / d) under ``1f1b`` and ``1f1b-flush`` (q / d under sec. 11's rule); N // d
        under ``gpipe`` (all forwards first; d divides N in a valid plan).

    Raises
    ------
    ValueError
        An unknown schedule.

    Examples
    --------
    >>> microbatches_held(5, 2, 8, "1f1b"), microbatches_held(5, 2, 8, "gpipe")
    (3, 4)
    """
    check_choice(schedule, SCHEDULES, "schedule")
    if schedule == "gpipe":
        return N // d
    return microbatches_in_flight(h, d)


def batch_limit_ok(h: Sequence[int], N: int) -> bool:
    """The batch limit: no stage has more microbatches in flight than the batch.

    Parameters
    ----------
    h : sequence of int
        The in-flight counts of :func:`in_flight` (under Piper's sequential rule h_0 =
        sum_i d_i is the largest: sum d <= N; sec. 11: max q <= N).
    N : int
        Microbatches per batch.

    Returns
    -------
    bool
        max_i h_i <= N (True for no stages).

    Examples
    --------
    >>> d = [1, 2, 1]
    >>> batch_limit_ok(in_flight(d, []), 4), batch_limit_ok(in_flight(d, [], rule="schedule"), 4)
    (True, False)
    """
    return max(h, default=0) <= N


def batch_time(
    tps: Sequence[float],
    d: Sequence[int],
    successors: Sequence[set[int]],
    N: int,
    pipeline: str = "sequential",
) -> float:
    """The time per batch with a flush (sec. 9).

    T_batch = (N - 1) max_i TPS_i + the longest stage-graph path of tau_i = d_i TPS_i
    (sequential pipelining: the sum of every tau_i, by :func:`math.fsum`).

    Parameters
    ----------
    tps : sequence of float
        Each stage's TPS (sec. 3).
    d : sequence of int
        Each stage's replicas.
    successors : sequence of set of int
        From :func:`stage_graph`, stages in a topological order of it; read under graph
        pipelining only.
    N : int
        Microbatches per batch.
    pipeline : str
        ``sequential`` or ``graph``.

    Returns
    -------
    float
        Seconds per batch (0.0 for no stages).

    Raises
    ------
    ValueError
        An unknown pipeline.

    Examples
    --------
    >>> batch_time([1.0, 2.0, 1.0], [1, 1, 1], [{1}, {2}, set()], 4)
    10.0
    >>> batch_time([1.0, 2.0, 1.0], [1, 1, 1], [{2}, {2}, set()], 4, "graph")
    9.0
    """
    check_choice(pipeline, PIPELINES, "pipeline")
    m = len(tps)
    tau = [d[i] * tps[i] for i in range(m)]
    if pipeline == "sequential":
        path = math.fsum(tau)
    else:
        longest = [0.0] * m
        for i in range(m - 1, -1, -1):
            longest[i] = tau[i] + max((longest[j] for j in successors[i]), default=0.0)
        path = max(longest, default=0.0)
    return (N - 1) * max(tps, default=0.0) + path
