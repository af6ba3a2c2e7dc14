"""Piper's greedy option choice (cost model sec. 5), written once.

For a candidate stage C (nodes in ascending input order), degrees (t, d) and y, every node
i has at most two options; F_i is the first option of least cost c_il, O_i the other
one. The rule (sec. 5): take F if it fits; give up if even the least-memory choice does
not fit; otherwise switch nodes from F to O in order of the ratio
r_i = (c_iO - c_iF) / (m_iF - m_iO) (only nodes with m_iF - m_iO > 1e-9), ascending, ties
by node position in the stage, until the excess E = sum m_F - M falls below 1e-9.

:func:`greedy_rule_grid` is the only implementation of that ranking and walk; the DP's
stage tables (many stages and y at once) and the plan rebuild (one stage at one y) both
call it, with node rows from :func:`greedy_node_rows`, so they rank exactly alike.

Float details, fixed here so that every caller gets bit-identical decisions:

* the ranking uses d (c_iO - c_iF), the same order as c_iO - c_iF (d > 0), computed as
  ((e_O - e_F) + d (R_O - R_F)) / B + (p_O - p_F) with R the resync bytes: for options
  that differ only in p, a, b this is exactly p_O - p_F, whatever d is;
* F is option 1 exactly when that quantity for (option 1 - option 0) is < 0;
* m_il = a_il y + b_il; E starts at y fsum(a_iF) + fsum(b_iF) - M (a float within a
  few ulps of sum_i m_iF, the same for every caller) and is lowered sequentially;
* memory decisions (F fits; the least-memory choice fits) are exact (fsum of the a y and
  b terms <= M, sec. 7). When the walk stops with a choice that does not fit exactly
  (the rule's 1e-9 byte tolerance), the rule is taken as finding no choice at this y:
  greedy mode never returns a plan the evaluator rejects.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dp.memory import fits_by_estimate
from piper_ilp.cost import node_edge_bytes, resync_bytes
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, Option

__all__ = [
    "GREEDY_EPS",
    "NodeRows",
    "greedy_node_rows",
    "greedy_rule_grid",
    "greedy_choice",
    "greedy_choice_over_y",
    "greedy_options",
]

#: The absolute tolerance (bytes) of Piper's greedy rule (sec. 5, step 3).
GREEDY_EPS = 1e-9


class NodeRows:
    """Per node of a stage (columns, ascending input order): the two options F and O of
    sec. 5 (O = F for a single-option node) and the ranking numerator ``dkey`` =
    d (c_O - c_F) >= 0. Arrays of length n: ``F``, ``O`` (option indices), ``o_first``
    (O comes before F in the option list), ``dkey``, and per option F/O: ``p``, ``e``
    (cut-edge bytes), ``w``, ``a``, ``b``."""

    __slots__ = (
        "F",
        "O",
        "o_first",
        "dkey",
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


def _pair_key(o0, o1, d: int, N: int, B: float) -> float:
    """d (c_1 - c_0) for two options given as (p, e, w, ...), as the module doc fixes it."""
    return ((o1[1] - o0[1]) + d * (resync_bytes(o1[2], d, N) - resync_bytes(o0[2], d, N))) / B + (
        o1[0] - o0[0]
    )


def greedy_node_rows(options: Sequence[Sequence[tuple]], d: int, N: int, B: float) -> NodeRows:
    """The rule's per-node data from each node's options as (p, e, w, a, b) tuples (at
    most two per node; ``e`` the node's cut-edge bytes in this stage)."""
    F, O, of, dk = [], [], [], []
    for opts in options:
        if len(opts) == 1:
            F.append(0), O.append(0), of.append(False), dk.append(0.0)
            continue
        x = _pair_key(opts[0], opts[1], d, N, B)
        if x < 0:
            F.append(1), O.append(0), of.append(True), dk.append(-x)
        else:
            F.append(0), O.append(1), of.append(False), dk.append(x)
    cols = {
        "F": np.array(F, dtype=np.int64),
        "O": np.array(O, dtype=np.int64),
        "o_first": np.array(of, dtype=bool),
    }
    cols["dkey"] = np.array(dk, dtype=float)
    for tag, idx in (("F", F), ("O", O)):
        sel = [opts[i] for opts, i in zip(options, idx)]
        arr = np.array(sel, dtype=float).reshape(len(sel), 5)
        for j, name in enumerate("pewab"):
            cols[name + tag] = arr[:, j]
    return NodeRows(**cols)


def greedy_rule_grid(
    dkey: np.ndarray,
    aF: np.ndarray,
    bF: np.ndarray,
    aO: np.ndarray,
    bO: np.ndarray,
    o_first: np.ndarray,
    ys: np.ndarray,
    M: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule (sec. 5) for G stages at each of Y values of y.

    Parameters
    ----------
    dkey, aF, bF, aO, bO, o_first : (G, n) arrays
        Per stage and node (columns in ascending input order, trailing all-zero columns
        are padding): d (c_O - c_F), the memory slope and constant of F and O, and whether
        O precedes F in the option list.
    ys : (Y,) array of int
        The microbatches in flight to evaluate.
    M : float

    Returns
    -------
    switched : (G, Y, n) bool array
        Which nodes take O.
    feasible : (G, Y) bool array
        False where no choice fits (step 2), or the walk's choice does not fit exactly.
    """
    G, n = aF.shape
    Y = len(ys)
    R = G * Y
    yv = np.asarray(ys, dtype=float)[None, :, None]
    ayF3 = aF[:, None, :] * yv
    ayO3 = aO[:, None, :] * yv
    mF = (ayF3 + bF[:, None, :]).reshape(R, n)
    mO = (ayO3 + bO[:, None, :]).reshape(R, n)
    ayF, ayO = ayF3.reshape(R, n), ayO3.reshape(R, n)
    switched = np.zeros((R, n), dtype=bool)
    if n == 0:
        return switched.reshape(G, Y, n), np.ones((G, Y), dtype=bool)

    def terms(r, take_O):
        g = r // Y
        return np.where(take_O, ayO[r], ayF[r]).tolist() + np.where(take_O, bO[g], bF[g]).tolist()

    no_switch = np.zeros(n, dtype=bool)
    # sum m_F per (stage, y) as y fsum(a_F) + fsum(b_F): the same value whatever the
    # padding or the caller (the rule's E starts from it); within the float band of fsum
    yf = np.asarray(ys, dtype=float)[None, :]
    sum_aF = np.array([math.fsum(row) for row in aF.tolist()])
    sum_bF = np.array([math.fsum(row) for row in bF.tolist()])
    sumF = (yf * sum_aF[:, None] + sum_bF[:, None]).reshape(R)
    fitsF = fits_by_estimate(sumF, 2 * n + 2, M, lambda r: terms(r, no_switch))
    # L = the first option of least memory
    feasible = fits_by_estimate(
        np.minimum(mF, mO).sum(axis=1),
        2 * n,
        M,
        lambda r: terms(r, (mO[r] < mF[r]) | ((mO[r] == mF[r]) & o_first[r // Y])),
    )
    need = ~fitsF & feasible
    if need.any():
        rows = np.nonzero(need)[0]
        mFr, mOr = mF[rows], mO[rows]
        sav = mFr - mOr
        valid = sav > GREEDY_EPS
        dk = dkey[rows // Y]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(valid, dk / np.where(valid, sav, 1.0), np.inf)
        order = np.argsort(r, axis=1, kind="stable")  # ties by node position (one O per node)
        sav_sorted = np.take_along_axis(np.where(valid, sav, 0.0), order, axis=1)
        valid_sorted = np.take_along_axis(valid, order, axis=1)
        # E = sum m_F - M, then lowered one switch at a time, sequentially (cumsum)
        E0 = sumF[rows] - M
        E = np.cumsum(np.concatenate([E0[:, None], -sav_sorted], axis=1), axis=1)[:, 1:]
        stop = (E < GREEDY_EPS) & valid_sorted
        any_stop = stop.any(axis=1)
        count = np.where(any_stop, np.argmax(stop, axis=1) + 1, valid_sorted.sum(axis=1))
        take_sorted = (np.arange(n)[None, :] < count[:, None]) & valid_sorted
        sw = np.zeros((len(rows), n), dtype=bool)
        np.put_along_axis(sw, order, take_sorted, axis=1)
        switched[rows] = sw
        estH = np.where(sw, mOr, mFr).sum(axis=1)
        feasible[rows] = fits_by_estimate(estH, 2 * n, M, lambda k: terms(int(rows[k]), sw[k]))
    return switched.reshape(G, Y, n), feasible.reshape(G, Y)


def greedy_choice(
    costs: Sequence[Sequence[float]], mems: Sequence[Sequence[float]], M: float
) -> list[int] | None:
    """Piper's rule (sec. 5) on plain lists: per node (ascending input order) and option
    (at most two), the cost c_il and the memory m_il (each one term).

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
    rows = greedy_node_rows(opts, 1, 1, 1.0)
    # with e = w = 0 and d = B = 1, dkey is exactly c_O - c_F
    sw, feas = _one_stage(rows, 1, M)
    if not feas:
        return None
    return [int(rows.O[i] if sw[i] else rows.F[i]) for i in range(n)]


def greedy_choice_over_y(
    dc: np.ndarray, mF: np.ndarray, mO: np.ndarray, M: float
) -> tuple[np.ndarray, np.ndarray]:
    """Piper's rule for two options per node (F first), for many y at once: ``dc`` (n,)
    is c_O - c_F >= 0, ``mF``, ``mO`` (Y, n) the memories per y (rows). Returns
    (switched (Y, n), feasible (Y,)) as :func:`greedy_rule_grid`."""
    mF = np.asarray(mF, dtype=float)
    mO = np.asarray(mO, dtype=float)
    Y, n = mF.shape
    zeros = np.zeros_like(mF)
    dk = np.broadcast_to(np.asarray(dc, dtype=float), mF.shape)
    sw, feas = greedy_rule_grid(
        dk, mF, zeros, mO, zeros, np.zeros(mF.shape, dtype=bool), np.ones(1), M
    )
    return sw[:, 0, :], feas[:, 0]


def stage_option_rows(instance: Instance, nodes: Sequence[int], t: int) -> list[list[tuple]]:
    """Per node id of ``nodes`` (in the given order), its options under ``t`` as
    (p, e, w, a, b), e its cut-edge bytes in the stage made of ``nodes``."""
    members = set(nodes)
    out = []
    for v in nodes:
        opts = instance.node[v].options.get(t)
        if not opts:
            raise InputError(f"node {v} has no option for t = {t}")
        out.append([(o.p, node_edge_bytes(instance, v, o, members), o.w, o.a, o.b) for o in opts])
    return out


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
    >>> from piper_ilp.instance import instance_from_dict
    >>> def o(i, p, a): return {"id": i, "timePerSample": p, "parameterSize": 0,
    ...     "memoryUsageA": a, "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [o("v", 1, 8), o("r", 2, 1)]}},
    ...     {"id": 1, "TMPCs": {"1": [o("v", 1, 8), o("r", 3, 1)]}}], "edges": []})
    >>> {v: opt.id for v, opt in greedy_options(inst, [0, 1], 1, 1, 1).items()}
    {0: 'r', 1: 'v'}
    """
    order = {v: i for i, v in enumerate(instance.node_ids)}
    nodes = sorted(nodes, key=order.__getitem__)
    for v in nodes:
        k = len(instance.node[v].options.get(t, ()))
        if k > 2:
            raise InputError(
                f"Piper's greedy option choice is defined for at most two options per (node, t); "
                f"node {v} has {k} for t = {t}"
            )
    rows = greedy_node_rows(stage_option_rows(instance, nodes, t), d, instance.N, instance.B)
    sw, feas = _one_stage(rows, y, instance.M)
    if not feas:
        return None
    return {
        v: instance.node[v].options[t][int(rows.O[i] if sw[i] else rows.F[i])]
        for i, v in enumerate(nodes)
    }


def _one_stage(rows: NodeRows, y: int, M: float) -> tuple[np.ndarray, bool]:
    """:func:`greedy_rule_grid` for one stage at one y: (switched per node, feasible)."""
    sw, feas = greedy_rule_grid(
        rows.dkey[None, :],
        rows.aF[None, :],
        rows.bF[None, :],
        rows.aO[None, :],
        rows.bO[None, :],
        rows.o_first[None, :],
        np.array([y]),
        M,
    )
    return sw[0, 0], bool(feas[0, 0])
