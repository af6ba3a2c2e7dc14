"""Bounds that every plan meeting a threshold obeys, for pruning the path formulation's
arcs before any solver runs (``docs/milp.md``, "The path formulation").

Along a path from the empty set to the whole graph, the devices used behind a set J are
at least back(J) (the fewest devices of any chain of arcs from the empty set to J, memory
ignored) and those in front at least front(J); likewise sum d behind J is at least
sback(J) and in front at least sfront(J). An arc J -> I is left out when no plan within
K devices and N microbatches can use it:

    back(J) + t d + front(I) > K,   sback(J) + d + sfront(I) > N,   sback(J) > its limit

(the state behind J is at least sback(J)). Removing arcs can raise the bounds, so the
rules are applied until nothing changes. Each bound is a shortest path over the sets
(memory ignored), a relaxation of every plan: nothing a plan could use is removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from piper_ilp.milp.path_arcs import Arc

__all__ = ["Bounds", "prune", "usable_arcs"]

#: Larger than any device count or sum of d (K, N <= 2**40 by the loader's limits).
UNREACHABLE = 1 << 62


@dataclass
class Bounds:
    """The arcs kept and the four bounds per set index (UNREACHABLE where none)."""

    arcs: list[Arc]
    back: list[int]
    front: list[int]
    sback: list[int]
    sfront: list[int]


def _shortest(arcs: list[Arc], nsets: int, weight) -> tuple[list[int], list[int]]:
    """Fewest total weight from set 0 to each set, and from each set to the last."""
    back = [UNREACHABLE] * nsets
    front = [UNREACHABLE] * nsets
    back[0] = 0
    front[nsets - 1] = 0
    for a in sorted(arcs, key=lambda a: a.i):  # arcs go j -> i with j < i
        if back[a.j] + weight(a) < back[a.i]:
            back[a.i] = back[a.j] + weight(a)
    for a in sorted(arcs, key=lambda a: -a.j):
        if front[a.i] + weight(a) < front[a.j]:
            front[a.j] = front[a.i] + weight(a)
    return back, front


def prune(arcs: list[Arc], nsets: int, K: int, N: int) -> Bounds:
    """Remove the arcs no plan within K devices and N microbatches can use, until
    nothing changes (see the module docstring).

    Examples
    --------
    Two sets and a third: 0 -> 2 directly with 3 devices, or 0 -> 1 -> 2 with 1 + 1:

    >>> a = Arc(0, 2, 1, 3, 9, None, None)
    >>> b = Arc(0, 1, 1, 1, 9, None, None)
    >>> c = Arc(1, 2, 1, 1, 9, None, None)
    >>> sorted((x.j, x.i) for x in prune([a, b, c], 3, K=2, N=10).arcs)
    [(0, 1), (1, 2)]
    """
    while True:
        back, front = _shortest(arcs, nsets, lambda a: a.devices)
        sback, sfront = _shortest(arcs, nsets, lambda a: a.d)
        kept = [
            a
            for a in arcs
            if back[a.j] + a.devices + front[a.i] <= K
            and sback[a.j] + a.d + sfront[a.i] <= N
            and sback[a.j] <= a.limit
        ]
        if len(kept) == len(arcs):
            return Bounds(kept, back, front, sback, sfront)
        arcs = kept


def usable_arcs(catalog, threshold: float, K: int, N: int, deadline: float | None = None):
    """The pruned arcs at ``threshold`` and how many arcs there were before the last
    pruning: first the catalog's rough arcs (limits at least the exact ones, no exact
    knapsack) are pruned, then the exact arcs of the stages left are computed and pruned.
    Pruning a superset keeps a superset (its bounds are no larger), so every stage that
    the exact arcs' pruning keeps survives the rough one.

    Returns
    -------
    (int, Bounds)
        The exact arcs computed, and what pruning leaves of them.
    """
    nsets = len(catalog.sets)
    rough = prune(catalog.rough_arcs_at(threshold, deadline), nsets, K, N)
    arcs = catalog.arcs_at(threshold, deadline, among=rough.arcs)
    return len(arcs), prune(arcs, nsets, K, N)
