"""Small numpy helpers of the stage tables: distinct values, step functions of y and runs.

A stage's table under (t, d) is a step function y -> least cost; these helpers pick its
corners from a frontier (:func:`staircase`, :func:`serves_more`), merge y ranges
(:func:`union_ranges`) and cut Piper's rule's choices into runs of equal choice
(:func:`choice_runs`, :func:`is_monotone_step`), and number distinct rows
(:func:`distinct_rows`).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "sorted_unique",
    "distinct_rows",
    "compact_index",
    "staircase",
    "serves_more",
    "union_ranges",
    "choice_runs",
    "is_monotone_step",
]


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of ``a``, ascending.

    ``np.unique(a)`` for arrays without NaN (each NaN is kept here), by the same sort.
    numpy's own ``unique`` loads ``numpy.ma`` on its first call, a cost every
    ``piper-ilp solve`` would pay at start-up.

    Parameters
    ----------
    a : numpy.ndarray
        Any shape; read flattened.

    Returns
    -------
    numpy.ndarray
        One dimension, ascending.

    Examples
    --------
    >>> sorted_unique(np.array([3.0, 1.0, 3.0, np.inf, 1.0])).tolist()
    [1.0, 3.0, inf]
    """
    s = np.sort(a, axis=None)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def distinct_rows(key: np.ndarray, mult: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an int64 matrix, numbered in the order of their first row.

    Parameters
    ----------
    key : (G, w) numpy.ndarray of int64
        Rows that are equal only when equal entry by entry.
    mult : (w,) numpy.ndarray of uint64, optional
        The odd multipliers of the rows' hash (default: fixed pseudo-random ones).

    Returns
    -------
    kind : (G,) numpy.ndarray of int
        The number of each row's kind.
    first : numpy.ndarray of int
        The first row of each kind.

    Notes
    -----
    Each row is hashed (sum of entry times multiplier, modulo 2^64) and the hashes
    numbered; every row is then compared with the first row of its number, and where two
    different rows share a hash, the rows themselves are numbered (``np.unique`` on their
    bytes, slower on long rows).

    Examples
    --------
    >>> kind, first = distinct_rows(np.array([[1, 2], [3, 4], [1, 2], [2, 1]]))
    >>> kind.tolist(), first.tolist()
    ([0, 1, 0, 2], [0, 1, 3])
    """
    G, w = key.shape
    if mult is None:
        mult = _odd_multipliers(w)
    h = (key.view(np.uint64) * mult).sum(axis=1, dtype=np.uint64)
    _, first, kind = np.unique(h, return_index=True, return_inverse=True)
    kind = kind.ravel()
    if not (key == key[first[kind]]).all():  # a hash shared by different rows
        raw = np.ascontiguousarray(key).view(np.dtype((np.void, 8 * w))).ravel()
        _, first, kind = np.unique(raw, return_index=True, return_inverse=True)
        kind = kind.ravel()
    order = np.argsort(first, kind="stable")  # kinds by their first row
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[kind], first[order]


def _odd_multipliers(w: int) -> np.ndarray:
    """``w`` fixed pseudo-random odd 64-bit multipliers (splitmix64 from a fixed seed; no
    ``numpy.random``, whose import costs a solve about 10 ms of CPU)."""
    with np.errstate(over="ignore"):
        z = np.uint64(0x5EED) + np.arange(1, w + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) | np.uint64(1)


def compact_index(a: np.ndarray) -> np.ndarray:
    """``a`` (int64, every value >= 0) as int32 when every value fits, else ``a`` itself.

    Examples
    --------
    >>> compact_index(np.array([0, 5], dtype=np.int64)).dtype.name
    'int32'
    >>> compact_index(np.array([2**31], dtype=np.int64)).dtype.name
    'int64'
    """
    return a.astype(np.int32) if len(a) and int(a.max()) < 2**31 else a


def staircase(key: np.ndarray, ycap: np.ndarray) -> np.ndarray:
    """The corners of the step function y -> least ``key`` among the points holding y.

    Parameters
    ----------
    key : numpy.ndarray
        Per point, its cost (or P).
    ycap : numpy.ndarray
        Per point, the largest y it holds (0: none).

    Returns
    -------
    numpy.ndarray
        Indices of the points whose y capacity rises above every earlier point's and is
        >= 1, by increasing ``key`` (ties: larger capacity first).

    Examples
    --------
    >>> staircase(np.array([3.0, 1.0, 2.0, 5.0]), np.array([4, 1, 1, 6])).tolist()
    [1, 0, 3]
    """
    order = np.lexsort((-ycap, key))
    yc = ycap[order]
    best = np.maximum.accumulate(yc)
    rise = np.ones(len(yc), dtype=bool)
    rise[1:] = yc[1:] > best[:-1]
    rise &= yc >= 1
    return order[rise]


def serves_more(yhi: np.ndarray, new_stage: np.ndarray | None = None) -> np.ndarray:
    """Which points of monotone rows serve a y that the point before them does not.

    Parameters
    ----------
    yhi : numpy.ndarray
        rows x points: each row a stage's points by rising cost under one d, each point's
        largest y.
    new_stage : numpy.ndarray of bool, optional
        When several stages lie side by side in a row, ``new_stage[j - 1]`` says that
        column j starts another stage.

    Returns
    -------
    numpy.ndarray of bool
        True where yhi rises or the point is the first of its stage. The others (the
        points after the first that reaches d's cap on y) cost more for the same y.

    Examples
    --------
    >>> serves_more(np.array([[1, 3, 3, 4]])).tolist()
    [[True, True, False, True]]
    """
    keep = np.ones(yhi.shape, dtype=bool)
    keep[:, 1:] = yhi[:, 1:] != yhi[:, :-1]
    if new_stage is not None:
        keep[:, 1:] |= new_stage[None, :]
    return keep


def union_ranges(spans) -> list[tuple[int, int]]:
    """Integer ranges (first, last) as disjoint sorted ranges, empty ones dropped.

    Examples
    --------
    >>> union_ranges([(5, 7), (1, 2), (3, 3), (9, 8), (6, 10)])
    [(1, 3), (5, 10)]
    """
    out: list[tuple[int, int]] = []
    for a, b in sorted(sp for sp in spans if sp[0] <= sp[1]):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def choice_runs(sw: np.ndarray, feas: np.ndarray):
    """Maximal runs of consecutive y where a rule finds a choice and the choice is the same.

    Parameters
    ----------
    sw : numpy.ndarray of bool
        (G, Y, n): per stage g, per y = index + 1, the choice (one flag per node).
    feas : numpy.ndarray of bool
        (G, Y): whether the rule finds a choice.

    Returns
    -------
    starts, ends : list of numpy.ndarray
        Per stage, the first and last y of its runs.
    contiguous : numpy.ndarray of bool
        Per stage, whether the feasible y are 1..k for some k (no gaps).

    Examples
    --------
    >>> sw = np.array([[[0], [0], [1], [1]]], dtype=bool)
    >>> feas = np.array([[True, True, True, False]])
    >>> starts, ends, contiguous = choice_runs(sw, feas)
    >>> starts[0].tolist(), ends[0].tolist(), contiguous.tolist()
    ([1, 3], [2, 3], [True])
    """
    G, Y = feas.shape
    same = np.ones((G, Y), dtype=bool)
    if Y > 1:
        same[:, 1:] = ~np.any(sw[:, 1:] != sw[:, :-1], axis=2)
    start = feas.copy()
    start[:, 1:] &= ~feas[:, :-1] | ~same[:, 1:]
    end = feas.copy()
    end[:, :-1] &= ~feas[:, 1:] | ~same[:, 1:]
    nfeas = feas.sum(axis=1)
    first_gap = np.where(feas.all(axis=1), Y, np.argmin(feas, axis=1))
    contiguous = first_gap == nfeas
    sg, sy = np.nonzero(start)
    eg, ey = np.nonzero(end)
    cut_s = np.searchsorted(sg, np.arange(G + 1))
    cut_e = np.searchsorted(eg, np.arange(G + 1))
    starts = [sy[cut_s[g] : cut_s[g + 1]] + 1 for g in range(G)]
    ends = [ey[cut_e[g] : cut_e[g + 1]] + 1 for g in range(G)]
    return starts, ends, contiguous


def is_monotone_step(lo: np.ndarray, hi: np.ndarray, cost: np.ndarray) -> bool:
    """Whether runs (first y ``lo``, last y ``hi``, ``cost``) read as a monotone step function.

    True when the runs cover y = 1..hi[-1] without gaps and their cost never falls (no
    runs: True).

    Examples
    --------
    >>> is_monotone_step(np.array([1, 3]), np.array([2, 5]), np.array([1.0, 2.0]))
    True
    >>> is_monotone_step(np.array([1, 4]), np.array([2, 5]), np.array([1.0, 2.0]))
    False
    """
    if not len(lo):
        return True
    return bool(lo[0] == 1 and np.all(lo[1:] == hi[:-1] + 1) and np.all(np.diff(cost) >= 0))
