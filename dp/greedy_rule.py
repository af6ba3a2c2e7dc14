"""Piper's greedy option choice (cost model sec. 5) as the original planner computes it.

For a candidate stage C (nodes in input order), degrees (t, d) and y, every node has at
most two options. The rule: take F (the first option of least cost) when it fits; give up
when even L (the first option of least memory) does not; otherwise switch nodes from F to
their other option O in the order of r = (c_O - c_F) / (m_F - m_O) (only where m_F - m_O
> 1e-9), ascending, ties by node position, until the excess E falls below 1e-9.

Every decision of the rule is made on the very floats that the original planner
(msr-fiddle/piper ``algo.cpp``, ``getAllTPSsForIdealPair`` and ``solveKnapsack`` with
``KNAPSACK_FAST_HEURISTIC``) computes, in its order of operations, so that greedy mode
picks what it picks where options tie in exact arithmetic:

* a node's cut-edge bytes e: a running sum from 0.0 of 2 (c + sfw) over its incoming cut
  edges, then 2 (c + sbw) over its outgoing cut edges, each in the order of the input's
  ``edges`` (:func:`piper_edge_bytes`);
* an option's cost c = (e / d + 4 (d - 1) w / d / N) / B + p / d, operations left to right
  (:func:`piper_cost`); F is option 1 exactly when c_0 > c_1, and r's numerator is the float
  c_O - c_F;
* memory m = a y + b; "F fits" and "L fits" compare a running sum over the nodes (from the
  first) with M; E starts at that sum for F minus M and is lowered by each switch's
  m_F - m_O in turn.

The ranking and the walk have one implementation, compiled: :mod:`dp.greedy_kernel`
(``_rule_row``, imported on first use by :func:`kernel`). The plain stages' tables
(:func:`dp.greedy_tables.shared_rule_runs`, many stages and d at once), the general
stages' tables and the plan rebuild (:func:`greedy_rule_rows`, :func:`greedy_rule_grid`,
with node rows from :func:`greedy_node_rows`) all call it, so they decide alike.

One departure, so that greedy mode never returns a plan the evaluator rejects: memory
fits when the ``fsum`` of the a y and b terms is <= M (sec. 7). Where the rule's choice (F,
or the walk's H) does not fit exactly -- its float sum was within rounding of M, or the
walk stopped with up to 1e-9 bytes of excess -- the rule finds no choice at this y.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dp.knapsack import stage_options
from piper_ilp.cost import cut_edge_bytes
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, Option

__all__ = [
    "NodeRows",
    "piper_cost",
    "piper_edge_bytes",
    "greedy_node_rows",
    "running_sum",
    "kernel",
    "greedy_rule_rows",
    "greedy_rule_grid",
    "greedy_choice",
    "greedy_choice_over_y",
    "greedy_options",
]


class NodeRows:
    """Per node of a stage (columns, in input order): the two options F and O of sec. 5
    (O = F for a single-option node) and ``delta`` = c_O - c_F >= 0 (the original's floats,
    0 for a single-option node). Arrays of length n: ``F``, ``O`` (option indices),
    ``o_first`` (O comes before F in the option list), ``delta``, and per option F/O:
    ``p``, ``e`` (cut-edge bytes), ``w``, ``a``, ``b``."""

    __slots__ = (
        "F",
        "O",
        "o_first",
        "delta",
        "pF",
        "eF",
        "wF",
        "aF",
        "bF",
        "pO",
        "eO",
        "wO",
        "aO",
        "bO",
    )

    def __init__(self, **cols):
        for k, v in cols.items():
            setattr(self, k, v)


def piper_cost(p, e, w, d, N: int, B: float):
    """An option's cost as the original planner computes it (floats or numpy arrays).

    Parameters
    ----------
    p, e, w : float or array
        Compute time, the node's cut-edge bytes (:func:`piper_edge_bytes`), weights.
    d : int or array of int
        Data-parallel degree.
    N : int
    B : float

    Returns
    -------
    float or array
        (e / d + 4 (d - 1) w / d / N) / B + p / d, evaluated left to right with the
        integer 4 (d - 1) formed first: the value of sec. 3 for one node, rounded as
        ``algo.cpp`` rounds it (``piper_ilp.cost`` keeps the evaluator's own order).

    Examples
    --------
    >>> piper_cost(3.0, 0.0, 4.0, 2, 4, 10.0)  # 1.5 + 0.2, not 1.7
    1.7
    >>> piper_cost(6.0, 0.0, 4.0, 2, 4, 10.0) - piper_cost(3.0, 0.0, 4.0, 2, 4, 10.0)
    1.5000000000000002
    """
    return (e / d + 4 * (d - 1) * w / d / N) / B + p / d


def piper_edge_bytes(instance: Instance, v: int, opt: Option, stage) -> float:
    """Node ``v``'s cut-edge bytes, summed as the original planner sums them.

    Parameters
    ----------
    instance : Instance
    v : int
        A node id.
    opt : Option
        One of v's options (its sfw and sbw are used).
    stage : collection of int
        The node ids of the stage holding v.

    Returns
    -------
    float
        From 0.0, one addition at a time: 2 (c + sfw) for each incoming edge from outside
        the stage, then 2 (c + sbw) for each outgoing edge to outside it, each kind in the
        order of the input's edges. (The evaluator's value is the ``fsum`` of the same
        terms, :func:`piper_ilp.cost.node_edge_bytes`.)
    """
    total = 0.0
    for u, c in instance.in_edges.get(v, ()):
        if u not in stage:
            total += cut_edge_bytes(c, opt.sfw[u])
    for x, c in instance.out_edges.get(v, ()):
        if x not in stage:
            total += cut_edge_bytes(c, opt.sbw[x])
    return total


def greedy_node_rows(options: Sequence[Sequence[tuple]], d: int, N: int, B: float) -> NodeRows:
    """The rule's per-node data for a stage with data-parallel degree ``d``.

    Parameters
    ----------
    options : sequence (one entry per node, in input order) of sequences of tuples
        Each node's options (at most two) as (p, e, w, a, b), e the node's cut-edge bytes
        in this stage summed as :func:`piper_edge_bytes` sums them.
    d, N, B : the stage's data-parallel degree, the instance's N and B.

    Returns
    -------
    NodeRows
        F = the first option of least :func:`piper_cost`, O the other one, and delta =
        c_O - c_F in floats.
    """
    F, O, of, dl = [], [], [], []
    for opts in options:
        if len(opts) == 1:
            F.append(0), O.append(0), of.append(False), dl.append(0.0)
            continue
        c0, c1 = (piper_cost(o[0], o[1], o[2], d, N, B) for o in opts[:2])
        if c0 > c1:
            F.append(1), O.append(0), of.append(True), dl.append(c0 - c1)
        else:
            F.append(0), O.append(1), of.append(False), dl.append(c1 - c0)
    cols = {
        "F": np.array(F, dtype=np.int64),
        "O": np.array(O, dtype=np.int64),
        "o_first": np.array(of, dtype=bool),
    }
    cols["delta"] = np.array(dl, dtype=float)
    for tag, idx in (("F", F), ("O", O)):
        sel = [opts[i] for opts, i in zip(options, idx)]
        arr = np.array(sel, dtype=float).reshape(len(sel), 5)
        for j, name in enumerate("pewab"):
            cols[name + tag] = arr[:, j]
    return NodeRows(**cols)


def running_sum(x: np.ndarray) -> np.ndarray:
    """The sum of each row, added as a C loop adds: one float addition at a time.

    Parameters
    ----------
    x : (R, n) array of float

    Returns
    -------
    (R,) array
        0.0 + x[:, 0] + x[:, 1] + ... from the first column to the last (``np.sum`` adds
        pairwise and ``math.fsum`` rounds once; both can differ in the last bits). Trailing
        zero columns do not change it.

    Examples
    --------
    >>> running_sum(np.array([[1e16, 1.0, 1.0], [1.0, 1.0, 1e16]])).tolist()
    [1e+16, 1.0000000000000002e+16]
    """
    out = np.zeros(x.shape[0])
    for k in range(x.shape[1]):
        out += x[:, k]
    return out


def kernel():
    """The compiled rule, :mod:`dp.greedy_kernel`, imported on first use: numba's import
    and the load of the compiled code from its cache (or their first compile on a
    machine) are paid by the processes that run the rule, once each."""
    from dp import greedy_kernel

    return greedy_kernel


def greedy_rule_rows(
    delta: np.ndarray,
    aF: np.ndarray,
    bF: np.ndarray,
    aO: np.ndarray,
    bO: np.ndarray,
    o_first: np.ndarray,
    y: np.ndarray,
    M: float,
    l_fits: bool = False,
    stage_of: np.ndarray | None = None,
):
    """Piper's rule (sec. 5) for R stages, each at its own y
    (:func:`dp.greedy_kernel.rule_rows`).

    Parameters
    ----------
    delta, aF, bF, aO, bO, o_first : (R, n) arrays
        Per row (a stage) and node (columns in input order; trailing columns with delta =
        a = b = 0 are padding): c_O - c_F (:class:`NodeRows`), the memory slope and
        constant of F and O, and whether O precedes F in the option list. With
        ``stage_of``: (G, n) arrays, one row per stage.
    y : (R,) array of int
        Each row's microbatches in flight.
    M : float
    l_fits : bool
        The caller knows that L fits in every row, so the rule does not sum L again.
    stage_of : (R,) array of int, optional
        Row k is stage ``stage_of[k]`` (of the (G, n) columns) at ``y[k]``.

    Returns
    -------
    switched : (R, n) bool array
        Which nodes take O.
    feasible : (R,) bool array
        False where no choice fits (step 2), or the rule's choice does not fit exactly
        (sec. 7; see the module's note).
    """
    y = np.asarray(y, dtype=np.int64)
    stage_of = np.arange(len(y)) if stage_of is None else np.asarray(stage_of, dtype=np.int64)
    cols = [np.ascontiguousarray(x, dtype=np.float64) for x in (delta, aF, bF, aO, bO)]
    of = np.ascontiguousarray(o_first, dtype=np.bool_)
    return kernel().rule_rows(*cols, of, stage_of, y, float(M), bool(l_fits))


def greedy_rule_grid(cols: tuple, ys: np.ndarray, M: float) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule (sec. 5) for G stages at each of Y values of y
    (:func:`greedy_rule_rows` on every pair).

    Parameters
    ----------
    cols : tuple of (G, n) arrays
        (delta, aF, bF, aO, bO, o_first) per stage, as :func:`greedy_rule_rows` takes them.
    ys : (Y,) array of int
        The microbatches in flight to evaluate.
    M : float

    Returns
    -------
    switched : (G, Y, n) bool array
        Which nodes take O.
    feasible : (G, Y) bool array
        False where no choice fits (step 2), or the rule's choice does not fit exactly
        (sec. 7; see the module's note).

    Examples
    --------
    Two nodes whose ratios tie in exact arithmetic (1.5 / 6 and 1 / 4), the first one's
    cost difference rounded up in floats: the second node switches first, as in
    ``algo.cpp``.

    >>> c = lambda p: piper_cost(p, 0.0, 4.0, 2, 4, 10.0)
    >>> delta = np.array([[c(6.0) - c(3.0), 1.0]])
    >>> sw, ok = greedy_rule_grid((delta, np.array([[3.0, 2.0]]), np.array([[1.0, 2.0]]),
    ...     np.array([[0.0, 0.0]]), np.array([[1.0, 2.0]]), np.array([[True, False]])),
    ...     np.array([2]), 9.0)
    >>> sw[0, 0].tolist(), bool(ok[0, 0])
    ([False, True], True)
    """
    G, n = cols[1].shape
    Y = len(ys)
    stage_of = np.repeat(np.arange(G), Y)
    sw, feas = greedy_rule_rows(*cols, np.tile(np.asarray(ys), G), M, stage_of=stage_of)
    return sw.reshape(G, Y, n), feas.reshape(G, Y)


def greedy_choice(
    costs: Sequence[Sequence[float]], mems: Sequence[Sequence[float]], M: float
) -> list[int] | None:
    """Piper's rule (sec. 5) on plain lists: per node (in input order) and option (at
    most two), the cost c_il and the memory m_il (each one term).

    Returns the option index per node, or None when no choice fits.

    Examples
    --------
    >>> greedy_choice([[1, 2], [1, 3]], [[8, 1], [8, 1]], 10)
    [1, 0]
    """
    n = len(costs)
    opts = []
    for c, m in zip(costs, mems):
        if len(c) > 2:
            raise InputError(
                "Piper's greedy option choice is defined for at most two options per node, got "
                f"{len(c)}"
            )
        opts.append([(float(cl), 0.0, 0.0, float(ml), 0.0) for cl, ml in zip(c, m)])
    rows = greedy_node_rows(opts, 1, 1, 1.0)  # e = w = 0, d = B = 1: piper_cost is c itself
    sw, feas = _one_stage(rows, 1, M)
    if not feas:
        return None
    return [int(rows.O[i] if sw[i] else rows.F[i]) for i in range(n)]


def greedy_choice_over_y(
    dc: np.ndarray, mF: np.ndarray, mO: np.ndarray, M: float
) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule for two options per node (F first), for many y at once: ``dc`` (n,)
    is c_O - c_F >= 0, ``mF``, ``mO`` (Y, n) the memories per y (rows), each one term.
    Returns (switched (Y, n), feasible (Y,)) as :func:`greedy_rule_grid`."""
    mF = np.asarray(mF, dtype=float)
    mO = np.asarray(mO, dtype=float)
    Y, n = mF.shape
    zeros = np.zeros_like(mF)
    dk = np.broadcast_to(np.asarray(dc, dtype=float), mF.shape)
    sw, feas = greedy_rule_grid(
        (dk, mF, zeros, mO, zeros, np.zeros(mF.shape, dtype=bool)), np.ones(1), M
    )
    return sw[:, 0, :], feas[:, 0]


def _stage_option_rows(instance: Instance, nodes: Sequence[int], t: int) -> list[list[tuple]]:
    """Per node id of ``nodes`` (in the given order), its options under ``t`` as
    (p, e, w, a, b), e its cut-edge bytes in the stage made of ``nodes``
    (:func:`piper_edge_bytes`)."""
    members = set(nodes)
    return [
        [(o.p, piper_edge_bytes(instance, v, o, members), o.w, o.a, o.b) for o in opts]
        for v, opts in ((v, instance.node[v].options[t]) for v in nodes)
    ]


def greedy_options(
    instance: Instance, nodes: Sequence[int], t: int, d: int, y: int
) -> dict[int, Option] | None:
    """Piper's greedy option choice (sec. 5) for one stage.

    Parameters
    ----------
    instance : Instance
    nodes : node ids of the stage (any order; the rule walks them in input order)
    t, d : tensor- and data-parallel degrees of the stage
    y : microbatches in flight (ceil(s / d))

    Returns
    -------
    dict node id -> Option, or None when no choice fits in M.

    Raises
    ------
    InputError
        When some node has more than two options for ``t`` (the rule is defined for two)
        or none.

    Examples
    --------
    Node 0 saves more memory per unit of time by recomputation ("r"), so it switches
    first (:func:`dp.knapsack.exact_options` picks the same here).

    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p, a): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": a, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1, 8), o("r", 2, 1)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1, 8), o("r", 3, 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in greedy_options(inst, [0, 1], 1, 1, 1).items()}
    {0: 'r', 1: 'v'}
    """

    def choose(ordered: list[int]) -> list[int] | None:
        for v in ordered:
            k = len(instance.node[v].options[t])
            if k > 2:
                raise InputError(
                    "Piper's greedy option choice is defined for at most two options per "
                    f"(node, t); node {v} has {k} for t = {t}"
                )
        rows = greedy_node_rows(_stage_option_rows(instance, ordered, t), d, instance.N, instance.B)
        sw, feas = _one_stage(rows, y, instance.M)
        if not feas:
            return None
        return [int(rows.O[i] if sw[i] else rows.F[i]) for i in range(len(ordered))]

    return stage_options(instance, nodes, t, choose)


def _one_stage(rows: NodeRows, y: int, M: float) -> tuple[np.ndarray, bool]:
    """:func:`greedy_rule_grid` for one stage at one y: (switched per node, feasible)."""
    sw, feas = greedy_rule_grid(
        tuple(x[None, :] for x in (rows.delta, rows.aF, rows.bF, rows.aO, rows.bO, rows.o_first)),
        np.array([y]),
        M,
    )
    return sw[0, 0], bool(feas[0, 0])
