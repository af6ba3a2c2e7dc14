"""The exact option choice of one stage for the path formulation: the cheapest options
whose memory fits M exactly (``docs/milp.md``, "The path formulation").

A stage C with degrees (t, d) holding y microbatches picks one option l per node v; its
memory is ``fsum`` of a_l y and b_l over its nodes and fits iff that is <= M (contract
sec. 7); its TPS is the sum over its nodes of

    c_v = (p_l + e_l / B + (d - 1) 4 w_l / (N B)) / d

(e_l: the node's cut-edge bytes in C with option l; the three sums of sec. 3 regrouped by
node). Choosing the options is a multiple-choice knapsack: :func:`cheapest_fitting`
solves it exactly in memory (partial sums are exact integers, and "fits" is decided as
``fsum`` rounds) and to float accuracy in cost. Written for the MILP lineage; it shares
nothing with the DP's knapsack.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from operator import itemgetter
from typing import Sequence

import numpy as np

__all__ = ["ExactScale", "cheapest_fitting", "fractional_bound", "fractional_bound_arrays"]


def _fraction_bits(x: float) -> int:
    """k such that x * 2**k is an integer (0 for integers)."""
    return max(0, x.as_integer_ratio()[1].bit_length() - 1)


class ExactScale:
    """Exact integers for memory sums: every value in units of 2**-G bytes.

    ``G`` covers every b, every product a * y (a float product a * y with y >= 1 has no
    more fraction bits than a's last place) and half a last place of M, so that sums are
    exact and :meth:`capacity` decides "fsum(terms) <= M" exactly: fsum rounds the exact
    sum to the nearest float, ties to even.

    Parameters
    ----------
    values : iterable of float
        Every a and b of the instance (non-negative, finite).
    M : float
        The memory per device (finite, > 0).

    Examples
    --------
    >>> sc = ExactScale([0.5, 3.0], 8.0)
    >>> sc.exact(0.5) * 2 == sc.exact(1.0)
    True
    >>> sc.capacity() == sc.exact(8.0)  # sums a little above 8 still round to 8
    False
    >>> sc.exact(8.0) <= sc.capacity() < sc.exact(8.000000000000002)
    True
    """

    def __init__(self, values, M: float):
        bits = 0
        for x in values:
            if x > 0:
                bits = max(bits, -math.frexp(math.ulp(x))[1] + 1, _fraction_bits(x))
        half = math.ulp(M) / 2
        self.G = max(bits, _fraction_bits(M), _fraction_bits(half) if half > 0 else 0, 0)
        self.M = M
        self._cap = self._capacity(M)

    @classmethod
    def of_instance(cls, instance) -> "ExactScale":
        """The scale of every option's a and b of ``instance`` and its M."""
        values = [
            x
            for n in instance.nodes
            for opts in n.options.values()
            for o in opts
            for x in (o.a, o.b)
        ]
        return cls(values, instance.M)

    def exact(self, x: float) -> int:
        """x (a float >= 0 whose fraction fits in G bits) as an integer of units."""
        num, den = x.as_integer_ratio()
        shift = self.G - (den.bit_length() - 1)
        if shift < 0:
            raise ValueError(f"{x!r} has more fraction bits than the scale's {self.G}")
        return num << shift

    def _capacity(self, M: float) -> int:
        mid = self.exact(M) + self.exact(math.ulp(M) / 2)
        # M = m ulp(M); a sum exactly at mid rounds to M when m is even (ties to even)
        last = (self.exact(M) // self.exact(math.ulp(M))) % 2
        return mid - 1 if last else mid

    def capacity(self) -> int:
        """The largest exact sum (in units) whose ``fsum`` is <= M."""
        return self._cap


def cheapest_fitting(
    items: Sequence[Sequence[tuple[float | int, float]]],
    capacity: float | int,
    cost_limit: float = math.inf,
) -> tuple[float, list[int]] | None:
    """The least total cost of one option per node whose memory sum is <= ``capacity``.

    Memory values may be exact integers (then the answer is exact in memory) or floats.
    Nodes whose options are identical are taken together (k of g such nodes on one
    option and the rest on another give the same sums whichever k they are), which keeps
    the frontier of repeated layers small.

    Parameters
    ----------
    items : sequence of sequences of (memory, cost)
        Per node, its options.
    capacity : int or float
        The largest total memory that fits (exact units: :meth:`ExactScale.capacity`).
    cost_limit : float
        Choices costing more than this are of no interest: None is returned when every
        fitting choice does (the caller tells "too dear" from "does not fit").

    Returns
    -------
    (float, list of int) or None
        The least cost (a float sum, accurate to the rounding of adding the costs) and
        the option index per node; None when no choice fits within ``cost_limit``.

    Examples
    --------
    Two nodes, each fast and big (memory 5, cost 1) or slow and small (memory 2, cost 3);
    capacity 7 takes one of each:

    >>> cheapest_fitting([[(5, 1.0), (2, 3.0)], [(5, 1.0), (2, 3.0)]], 7)
    (4.0, [0, 1])
    >>> cheapest_fitting([[(5, 1.0), (2, 3.0)]] * 2, 3) is None
    True
    >>> cheapest_fitting([[(5, 1.0), (2, 3.0)]] * 2, 7, cost_limit=3.5) is None
    True
    """
    groups = _groups(items)
    # per group: its combinations as (memory, cost, counts per option)
    combos = [_combinations(list(opts), len(members)) for opts, members in groups]
    least_mem = [min(c[0] for c in cs) for cs in combos]
    least_cost = [min(c[1] for c in cs) for cs in combos]
    n = len(combos)
    rest_mem = [0] * (n + 1)
    rest_cost = [0.0] * (n + 1)
    for k in range(n - 1, -1, -1):
        rest_mem[k] = rest_mem[k + 1] + least_mem[k]
        rest_cost[k] = rest_cost[k + 1] + least_cost[k]
    if rest_mem[0] > capacity or rest_cost[0] > cost_limit * _SLACK:
        return None
    # the frontier: (memory, cost, picks as a linked list (combination, parent)), memory
    # ascending and cost strictly descending
    frontier: list[tuple] = [(0, 0.0, None)]
    for k, cs in enumerate(combos):
        room = capacity - rest_mem[k + 1]
        budget = cost_limit * _SLACK - rest_cost[k + 1]
        # memory ascends and cost descends along the frontier, so (float addition being
        # monotone) the points that stay within room and budget with a combination are
        # a slice: the first that fits the budget up to the last that fits the room
        grown = []
        for ci, (cm, cc, _) in enumerate(cs):
            hi = bisect_right(frontier, room, key=lambda p, cm=cm: p[0] + cm)
            lo = bisect_left(frontier, -budget, hi=hi, key=lambda p, cc=cc: -(p[1] + cc))
            grown += [(m + cm, c + cc, (ci, link)) for m, c, link in frontier[lo:hi]]
        if not grown:
            return None
        frontier = _pareto(grown)
    cost, link = frontier[-1][1], frontier[-1][2]
    picks = []
    while link is not None:
        picks.append(link[0])
        link = link[1]
    picks.reverse()
    choice = [0] * len(items)
    for (_, members), cs, ci in zip(groups, combos, picks):
        counts = cs[ci][2]
        k = 0
        for li, count in enumerate(counts):
            for _ in range(count):
                choice[members[k]] = li
                k += 1
    return cost, choice


#: Identical nodes are taken together while their combinations stay below this many.
MAX_COMBINATIONS = 2_000


def fractional_bound(items, capacity) -> float:
    """A lower bound on the least cost of a fitting choice (math.inf when even each
    node's least memory does not fit): start from each node's cheapest option and buy
    memory back at the best cost per byte, fractionally (the LP relaxation of the
    multiple-choice knapsack over each node's lower convex hull, relaxed further).

    Examples
    --------
    >>> fractional_bound([[(5, 1.0), (2, 3.0)], [(5, 1.0), (2, 3.0)]], 7)
    4.0
    """
    base_cost = 0.0
    excess = -capacity
    least = 0
    offers = []
    for opts in items:
        m0, c0 = min(opts, key=lambda o: (o[1], o[0]))
        base_cost += c0
        excess += m0
        least += min(o[0] for o in opts)
        for m, c in opts:
            if m < m0:
                offers.append(((c - c0) / (m0 - m), m0 - m))
    if least > capacity:
        return math.inf
    if excess <= 0:
        return base_cost
    offers.sort()
    extra = 0.0
    for rate, amount in offers:  # several offers of one node overlap: a relaxation
        take = min(amount, excess)
        extra += rate * take
        excess -= take
        if excess <= 0:
            break
    return base_cost + extra


def fractional_bound_arrays(mem: np.ndarray, cost: np.ndarray, capacity: float) -> float:
    """:func:`fractional_bound` on arrays: ``mem[k, l]`` and ``cost[k, l]`` of node k's
    option l (``inf`` in both where node k has fewer options). The same relaxation,
    summed by numpy, so it may differ from :func:`fractional_bound` by float rounding
    (callers compare it with a relative margin).

    Examples
    --------
    >>> mem = np.array([[5.0, 2.0], [5.0, 2.0]])
    >>> cost = np.array([[1.0, 3.0], [1.0, 3.0]])
    >>> float(fractional_bound_arrays(mem, cost, 7.0))
    4.0
    >>> fractional_bound_arrays(mem, cost, 3.0)
    inf
    """
    if float(mem.min(axis=1).sum()) > capacity:
        return math.inf
    c0 = cost.min(axis=1)
    cheapest = cost == c0[:, None]
    m0 = np.where(cheapest, mem, np.inf).min(axis=1)  # the cheapest option's least memory
    base = float(c0.sum())
    excess = float(m0.sum()) - capacity
    if excess <= 0:
        return base
    gain = m0[:, None] - mem
    offer = gain > 0
    amounts = gain[offer]
    rates = (cost - c0[:, None])[offer] / amounts
    order = np.argsort(rates, kind="stable")
    rates, amounts = rates[order], amounts[order]
    cum = np.cumsum(amounts)
    n = int(np.searchsorted(cum, excess))  # offers taken whole: the first n
    if n >= amounts.size:  # never: each node's least memory fits
        return base + float(np.dot(rates, amounts))
    whole = float(np.dot(rates[:n], amounts[:n]))
    part = excess - (float(cum[n - 1]) if n else 0.0)
    return base + whole + float(rates[n]) * part


def _groups(items) -> list[tuple[tuple, list[int]]]:
    """Nodes with identical options, as (options, node indices); a group is closed once
    its combinations would pass :data:`MAX_COMBINATIONS`."""
    groups: list[tuple[tuple, list[int]]] = []
    open_group: dict[tuple, int] = {}
    for k, opts in enumerate(items):
        key = tuple(opts)
        g = open_group.get(key)
        if (
            g is not None
            and math.comb(len(groups[g][1]) + len(key), len(key) - 1) > MAX_COMBINATIONS
        ):
            g = None
        if g is None:
            g = open_group[key] = len(groups)
            groups.append((key, []))
        groups[g][1].append(k)
    return groups


_MEMORY_COST = itemgetter(0, 1)


def _pareto(points: list[tuple]) -> list[tuple]:
    """The points (memory, cost, ...) that no other beats: sorted by memory (then cost),
    each kept when its cost is below every cost before it."""
    points.sort(key=_MEMORY_COST)
    kept, best = [], math.inf
    for p in points:
        if p[1] < best:
            kept.append(p)
            best = p[1]
    return kept


#: Partial costs may exceed the limit by float rounding before the sum is complete.
_SLACK = 1.0 + 1e-12


def _combinations(opts: list[tuple], g: int) -> list[tuple]:
    """The sums of g identical nodes over their options: every way to give counts
    c_l (summing to g) to the options, as (memory, cost, counts), Pareto-pruned."""
    if g == 1:
        out = [
            (m, c, tuple(1 if k == li else 0 for k in range(len(opts))))
            for li, (m, c) in enumerate(opts)
        ]
        return _pareto(out)
    out = []

    def rec(li: int, left: int, mem, cost, counts):
        if li == len(opts) - 1:
            m, c = opts[li]
            out.append((mem + m * left, cost + c * left, counts + (left,)))
            return
        m, c = opts[li]
        for take in range(left + 1):
            rec(li + 1, left - take, mem + m * take, cost + c * take, counts + (take,))

    rec(0, g, 0, 0.0, ())
    return _pareto(out)
