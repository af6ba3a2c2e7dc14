"""PipeDream's memory rule (``docs/pipedream.md`` point 6), in one place for its DP
(:mod:`dp.pipedream`), its MILP (:mod:`piper_ilp.pipedream.milp`) and exhaustive search
(:mod:`compare.baselines.pipedream`).

A stage on ``r`` replicas with ``after`` workers after it stashes ``ceil(after / r)``
copies of its activations and weights: ``ceil(after / r) * (Act + P)`` bytes, computed in
float64 as written (``Act + P`` rounded, then the product rounded), and fits when that is
``<= memory``. The functions work on Python numbers and, elementwise, on numpy arrays.
"""

from __future__ import annotations

import math

__all__ = ["stash_count", "stash_fits", "max_stash_count"]


def stash_count(after, r):
    """``ceil(after / r)``: the copies a stage on ``r`` replicas stashes with ``after``
    workers after it (exact integer arithmetic).

    Parameters
    ----------
    after : int or numpy integer array
        The workers after the stage, its own replicas not included (PipeDream's
        ``n - (m + 1)``, ``docs/pipedream.md`` point 6).
    r : int or numpy integer array
        The stage's replicas (>= 1).

    Returns
    -------
    int or numpy integer array

    Examples
    --------
    >>> stash_count(5, 2), stash_count(4, 4)
    (3, 1)
    """
    return -(-after // r)


def stash_fits(count, act, par, memory):
    """Whether ``count`` copies of a stage's activations and weights fit in ``memory``:
    ``count * (act + par) <= memory`` in float64, rounded as written.

    Parameters
    ----------
    count : int or numpy array
        Copies stashed (:func:`stash_count`).
    act, par : float or numpy array
        The stage's activation and parameter bytes.
    memory : float
        Bytes per worker.

    Returns
    -------
    bool or numpy bool array

    Examples
    --------
    >>> stash_fits(3, 1.0, 2.0, 9.0), stash_fits(4, 1.0, 2.0, 9.0)
    (True, False)
    """
    return count * (act + par) <= memory


def max_stash_count(act: float, par: float, memory: float, limit: int) -> int:
    """The most copies that fit: the largest ``c`` in 0..``limit`` with
    :func:`stash_fits` ``(c, act, par, memory)``.

    ``c * size`` rounds monotonically in ``c``, so ``stash_count(after, r) <= c`` -- that
    is ``after <= r * c`` -- is exactly the rule (the MILP's form); ``floor(memory /
    (act + par))`` is not: it rounds differently at the boundary (and overflows for tiny
    sizes).

    Parameters
    ----------
    act, par : float
        The stage's activation and parameter bytes.
    memory : float
        Bytes per worker.
    limit : int
        The most copies of interest (>= 0).

    Returns
    -------
    int
        -1 when not even 0 copies fit (``memory`` < 0).

    Examples
    --------
    >>> max_stash_count(1.0, 2.0, 10.0, 8), max_stash_count(1.0, 2.0, 100.0, 8)
    (3, 8)
    """
    if stash_fits(limit, act, par, memory):
        return limit
    size = act + par
    q = memory / size if size > 0 else math.nan
    c = (
        min(limit - 1, math.floor(q)) if q >= 0 else 0
    )  # limit * size > memory: q < about limit, finite
    while c >= 0 and not stash_fits(c, act, par, memory):
        c -= 1
    while c + 1 < limit and stash_fits(c + 1, act, par, memory):
        c += 1
    return c
