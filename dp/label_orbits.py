"""Labels of the label DP (:mod:`dp.modes`) up to interchangeable branches
(:mod:`dp.symmetry`): the DP keeps the labels of one canonical set per orbit, each label
canonical under the set's stabiliser, and reads them in the frame of any other set of the
orbit.

A branch permutation p (branch b to p[b]) maps a partial plan of a set A to one of p(A) whose
label is the same with the frontier columns moved along (a frontier node v's column goes to
p(v)'s); so a canonical set's labels serve its whole orbit. Within one set, branches of one
class in the same state are interchangeable: a label is canonical when, in each such run, the
branches' (h, L) columns are sorted (lexicographically, ascending in branch order).
"""

from __future__ import annotations

from itertools import combinations
from typing import Sequence

import numpy as np

from dp.symmetry import Branches

__all__ = ["frame_columns", "canonical_rows", "column_runs"]


def _inverse(p: Sequence[int]) -> list[int]:
    inv = [0] * len(p)
    for b, q in enumerate(p):
        inv[q] = b
    return inv


def column_runs(
    br: Branches, I: int, F_I: Sequence[int], runs: Sequence[Sequence[int]]
) -> list[tuple[list[int], list[int]]]:
    """For each run (branches of one class in the same state in ``I``) whose branches hold
    a frontier node of ``I``: (the run's branches, their frontier nodes' positions in
    ``F_I``). A branch holds at most one frontier node (its first node in ``I``), and the
    branches of a run all do or all do not."""
    pos = {v: c for c, v in enumerate(F_I)}
    out = []
    st = br.states(I)
    for run in runs:
        m = st[run[0]]
        if m == 0:
            continue
        heads = [br.nodes[b][br.length[b] - m] for b in run]
        if heads[0] in pos:
            out.append((list(run), [pos[v] for v in heads]))
    return out


def frame_columns(
    br: Branches,
    I: int,
    J: int,
    sigma: Sequence[int],
    F_J: Sequence[int],
    F_Js: Sequence[int],
    mxj: int,
    nc: int,
    paths: bool,
) -> tuple[list[np.ndarray], list[list[int]]]:
    """How to read the labels of J* = sigma(J) (stored canonical) as labels of ``J`` in the
    frame of ``I`` (J inside I), up to the stabiliser of ``I``.

    Every g with g(J*) = J gives labels of J (g's image of each label); two g that differ
    by a permutation fixing both ``I`` and ``J`` give labels that the stabiliser of ``I``
    maps onto each other, so one g per such class is enough: in each run of ``J``'s
    branches in the same state, the canonical label's sorted columns are dealt out to the
    branches grouped by their state in ``I``, every way once.

    Returns
    -------
    (columns, maps)
        For each g: the column of J*'s labels that each column of J's labels reads, and g
        itself (J* frame to ``I``'s, branch b to g[b]).
    """
    st_I = br.states(I)
    base = _inverse(sigma)  # J* -> J
    pos_s = {v: c for c, v in enumerate(F_Js)}
    choices: list[list[list[tuple[list[int], list[int]]]]] = []
    for run, _ in column_runs(br, J, F_J, br.runs(J)):
        by_l: dict[int, list[int]] = {}
        for b in run:
            by_l.setdefault(st_I[b], []).append(b)
        if len(by_l) == 1:
            continue
        sources = sorted(sigma[b] for b in run)  # J*'s branches of this run
        groups = list(by_l.values())
        deals: list[list[tuple[list[int], list[int]]]] = [[]]
        for grp in groups[:-1]:
            nxt = []
            for deal in deals:
                used = {x for src, _ in deal for x in src}
                free = [x for x in sources if x not in used]
                for pick in combinations(free, len(grp)):
                    nxt.append(deal + [(list(pick), grp)])
            deals = nxt
        last = groups[-1]
        full = []
        for deal in deals:
            used = {x for src, _ in deal for x in src}
            full.append(deal + [([x for x in sources if x not in used], last)])
        choices.append(full)
    maps = [base]
    for options in choices:
        maps = [
            _dealt(g, deal) for g in maps for deal in options
        ]  # product over the runs that split
    cols_out = []
    where = [br.branch_of.get(v) for v in F_J]
    for g in maps:
        inv = _inverse(g)  # J frame -> J* frame, on branches
        idx = list(range(nc))
        for c, v in enumerate(F_J):
            bk = where[c]
            src = pos_s[v if bk is None else br.nodes[inv[bk[0]]][bk[1]]]
            idx[1 + c] = 1 + src
            if paths:
                idx[mxj + 2 + c] = mxj + 2 + src
        cols_out.append(np.array(idx))
    return cols_out, maps


def _dealt(g: Sequence[int], deal: Sequence[tuple[list[int], list[int]]]) -> list[int]:
    """``g`` with J*'s branches ``src`` sent to J's branches ``dst`` in order, per pair."""
    out = list(g)
    for src, dst in deal:
        for a, b in zip(src, dst):
            out[a] = b
    return out


def canonical_rows(
    cols: np.ndarray,
    maps: np.ndarray,
    runs: Sequence[tuple[list[int], list[int]]],
    mxc: int,
    paths: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row's columns within every run (:func:`column_runs` of the set), by (h, L)
    lexicographically, and compose each row's map with the permutation that did it.

    Parameters
    ----------
    cols : ndarray
        Labels (rows) of the set, in its own frame.
    maps : ndarray
        One branch permutation per row (the stored set's frame to this set's), int.
    runs : list of (branches, frontier positions)
    mxc : int
        The column of mx (the L columns follow Lmax at ``mxc + 2``).
    paths : bool
        Whether the labels have L columns (batch time under graph pipelining).

    Returns
    -------
    (cols, maps)
        New arrays: the canonical labels and, per row, rho o map.
    """
    if not runs or not len(cols):
        return cols, maps
    cols = cols.copy()
    rho = np.tile(np.arange(maps.shape[1]), (len(cols), 1))
    rows = np.arange(len(cols))[:, None]
    for branches, fpos in runs:
        hc = np.array([1 + c for c in fpos])
        keys = [cols[:, hc]]
        if paths:
            lc = np.array([mxc + 2 + c for c in fpos])
            keys.insert(0, cols[:, lc])
        order = np.lexsort(keys, axis=-1)  # the last key (h) first
        cols[:, hc] = cols[:, hc][rows, order]
        if paths:
            cols[:, lc] = cols[:, lc][rows, order]
        br_arr = np.array(branches)
        rho[rows, br_arr[order]] = br_arr[None, :]
    return cols, np.take_along_axis(rho, maps, axis=1)
