"""PipeDream-2BW's planner as Piper's paper uses it as a baseline (contract sec. 10).

A sequential pipeline of equal-size stages: the model's repeated blocks (for BERT, its
transformer layers; :func:`compare.builders.deepen.repeated_chain`) split evenly into m stages, the
same data-parallel degree d and tensor-parallel degree t in every stage, and the fastest
such configuration that fits. Nodes outside the repeated blocks (embeddings, heads, inputs)
go with the stage of the block they sit beside in one topological order (the input order
breaking ties), so every stage is a contiguous set (sec. 2, rule 2). A graph with no
repeated block is split by its nodes in that order instead.

For each (m, t, d) with m d <= N and m t d <= K, stage i (0-based, of m) holds
y = ceil(s / d) = m - i microbatches (its suffix sum is s = (m - i) d), and takes the exact
option choice of the DP for its nodes at that y (:func:`dp.exact_options`); the
configuration's TPS is its slowest stage's, from the evaluator. The answer is a heuristic:
status FEASIBLE (or UNKNOWN when no configuration fits), never a proof.
"""

from __future__ import annotations

import time

import networkx as nx

from compare.builders.deepen import repeated_chain
from dp import exact_options
from piper_ilp.cost import microbatches_in_flight
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["block_order", "solve_2bw"]


def block_order(instance: Instance) -> tuple[list[int], list[int]]:
    """One topological order of the nodes (input order breaking ties) and the positions in
    it where a block starts: the repeated chain's layers, or every node when there is no
    repeated chain.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> order, starts = block_order(random_instance("chain", 4, seed=0))
    >>> len(order), starts[0]
    (4, 0)
    """
    rank = {v: i for i, v in enumerate(instance.node_ids)}
    order = list(nx.lexicographical_topological_sort(instance.graph, key=rank.__getitem__))
    chain = repeated_chain(instance)
    if not chain:
        return order, list(range(len(order)))
    pos = {v: i for i, v in enumerate(order)}
    starts = sorted(pos[v] for v in chain)
    starts[0] = 0  # the nodes before the first block join the first stage
    return order, starts


def _split(order: list[int], starts: list[int], m: int) -> list[list[int]]:
    """The nodes of ``m`` stages with an equal number of blocks each."""
    per = len(starts) // m
    cuts = [starts[i * per] for i in range(m)] + [len(order)]
    return [order[cuts[i] : cuts[i + 1]] for i in range(m)]


def solve_2bw(instance: Instance, restrictions: Restrictions = Restrictions()) -> Solution:
    """The 2BW baseline's plan (see the module docstring).

    Returns
    -------
    Solution
        method ``"2bw"``; status FEASIBLE with the best equal-stage plan that fits, or
        UNKNOWN when none does (a heuristic proves nothing: ``message`` says that only
        equal-stage plans were tried). ``info``: ``blocks``, ``stages``, ``d``, ``t`` and
        ``configurations`` tried.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> sol = solve_2bw(random_instance("chain", 4, seed=0, memory="loose"))
    >>> sol.status.value, len({(s.d, s.t) for s in sol.plan.stages})
    ('feasible', 1)
    """
    start = time.perf_counter()
    inst = restrictions.apply(instance)
    order, starts = block_order(inst)
    blocks = len(starts)
    d_values = restrictions.d_values(inst)
    best: tuple[float, Plan, int, int, int] | None = None
    tried = 0
    for m in (k for k in range(1, blocks + 1) if blocks % k == 0):
        stages_nodes = _split(order, starts, m)
        for t in inst.t_values:
            if any(not inst.node[v].options.get(t) for v in order):
                continue
            for d in d_values:
                if m * d > inst.N or m * t * d > inst.K:
                    continue
                tried += 1
                stages = []
                for i, nodes in enumerate(stages_nodes):
                    y = microbatches_in_flight((m - i) * d, d)
                    try:
                        chosen = exact_options(inst, nodes, t, d, y)
                    except InputError:
                        chosen = None
                    if chosen is None:
                        break
                    stages.append(Stage(tuple(nodes), d, t, {v: o.id for v, o in chosen.items()}))
                else:
                    plan = Plan(tuple(stages))
                    ev = evaluate(inst, plan)
                    if ev.valid and (best is None or ev.tps < best[0]):
                        best = (ev.tps, plan, m, t, d)
    info = {"blocks": blocks, "configurations": tried}
    seconds = time.perf_counter() - start
    if best is None:
        return Solution(
            "2bw",
            Status.UNKNOWN,
            seconds=seconds,
            info=info,
            message="no equal-stage plan with one d and t fits (only such plans were tried: not a "
            "proof that no plan fits)",
        )
    tps, plan, m, t, d = best
    info.update(stages=m, t=t, d=d)
    sol = Solution(
        "2bw",
        Status.FEASIBLE,
        plan=plan,
        objective=tps,
        seconds=seconds,
        info=info,
        message="baseline: equal stages, one d and t (not a proof)",
    )
    return checked_solution(instance, sol, restrictions=restrictions)
