"""The stage arcs of the path formulation: every candidate stage C = I \\ J with degrees
(t, d), its least TPS as a step function of y, and the arcs that meet a threshold
(``docs/milp.md``, "The path formulation").

For a stage (C, t, d) the least TPS over the option choices that fit at y microbatches
is non-decreasing in y (a choice that fits at y fits at every smaller y). It is a step
function: the fastest options F (each node's cheapest) up to the last y where they fit,
then the exact knapsack of :mod:`~piper_ilp.milp.stage_choice` at the next y, whose
choice holds until it stops fitting, and so on. :class:`StageTable` computes those steps
lazily, only as far as a threshold asks.

At a threshold T the arc (C, t, d) is usable for y <= ymax(T), the last y whose least TPS
is at most T; the in-flight rule turns ymax into the largest state (microbatches behind
the stage) it accepts. An arc with fewer devices, d no larger and a limit no smaller
serves every path that another arc of the same C would (:func:`undominated`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from piper_ilp.bitmask import mask_bits
from piper_ilp.cost import memory_fits, node_edge_bytes, stage_memory
from piper_ilp.errors import InternalError
from piper_ilp.instance import Instance, Option
from piper_ilp.milp.stage_choice import ExactScale, cheapest_fitting, fractional_bound_arrays

__all__ = ["COST_MARGIN", "Step", "StageTable", "Arc", "ArcCatalog", "TimeUp", "undominated"]


class TimeUp(Exception):
    """The deadline passed while the arcs at a threshold were being computed."""


#: A float sum of a stage's per-node costs (and the knapsack's least cost) is within
#: this relative distance of the evaluator's TPS of the same choice (both are sums of
#: non-negative terms, each rounding a few times; 1e-10 is 10^5 times their error for a
#: stage of 1,000 nodes). A stage's least TPS is at least its float cost (1 - COST_MARGIN).
COST_MARGIN = 1e-10


@dataclass(frozen=True)
class Step:
    """Up to ``y_end`` microbatches (from the previous step's end + 1) the least float
    cost of the stage is ``cost``, reached by the option indices ``choice``."""

    y_end: int
    cost: float
    choice: tuple[int, ...]

    @property
    def low(self) -> float:
        """A lower bound on the least TPS over these y (the cost less its float margin)."""
        return self.cost * (1.0 - COST_MARGIN)


@dataclass(frozen=True)
class Arc:
    """A usable stage: sets[j] -> sets[i] (C = sets[i] \\ sets[j]) with degrees (t, d),
    accepting a state up to ``limit`` behind it, the step ``step`` it was built from."""

    j: int
    i: int
    t: int
    d: int
    limit: int
    table: "StageTable" = field(compare=False, repr=False)
    step: Step = field(compare=False, repr=False)

    @property
    def devices(self) -> int:
        return self.t * self.d


def undominated(arcs: list[Arc]) -> list[Arc]:
    """The arcs of one stage C that no other arc of C dominates: b is dominated by a
    when a needs no more devices, no larger d and accepts at least b's state (any path
    through b can take a instead: its own state is no larger, so every stage in front
    holds no more microbatches).

    Examples
    --------
    >>> a = Arc(0, 1, 1, 2, 5, None, None)
    >>> b = Arc(0, 1, 1, 4, 3, None, None)
    >>> c = Arc(0, 1, 2, 1, 4, None, None)
    >>> [(x.t, x.d) for x in undominated([b, a, c])]
    [(2, 1), (1, 2)]
    """
    kept: list[Arc] = []
    for a in sorted(arcs, key=lambda x: (x.devices, x.d, -x.limit)):
        if not any(k.devices <= a.devices and k.d <= a.d and k.limit >= a.limit for k in kept):
            kept.append(a)
    return kept


#: :meth:`StageTable.rough_ymax` computes at most this many fractional bounds per call.
ROUGH_STEPS = 32


class StageTable:
    """One stage C under one tensor-parallel degree t, for every data-parallel degree.

    Parameters
    ----------
    instance : Instance
        After the restrictions.
    nodes : list of int
        C's node ids in input order.
    t : int
    degrees : list of int
        The d allowed with t (t d <= K), ascending.
    y_tops : list of int
        Per degree, the most microbatches the stage can hold (the in-flight rule's).
    scale : ExactScale
        Exact integers for memory sums.
    boundary : set of int
        The nodes of C with an edge to a node outside C (the others cut no edge).
    """

    def __init__(
        self,
        instance: Instance,
        nodes: list[int],
        t: int,
        degrees: list[int],
        y_tops: list[int],
        scale: ExactScale,
        boundary: set[int],
    ):
        self.instance = instance
        self.nodes = nodes
        self.t = t
        self.degrees = degrees
        self.scale = scale
        self.options: list[tuple[Option, ...]] = [instance.node[v].options[t] for v in nodes]
        members = set(nodes)
        B, N = instance.B, instance.N
        width = max(len(o) for o in self.options)
        alpha = np.full((len(nodes), width), np.inf)
        beta = np.zeros((len(nodes), width))
        for k, (v, opts) in enumerate(zip(nodes, self.options)):
            for li, o in enumerate(opts):
                e = node_edge_bytes(instance, v, o, members) if v in boundary else 0.0
                alpha[k, li] = o.p + e / B
                beta[k, li] = 4.0 * o.w / (N * B)
        mem_a = np.full((len(nodes), width), np.inf)  # memory a y + b per option
        mem_b = np.full((len(nodes), width), np.inf)
        for k, opts in enumerate(self.options):
            mem_a[k, : len(opts)] = [o.a for o in opts]
            mem_b[k, : len(opts)] = [o.b for o in opts]
        self._mem = (mem_a, mem_b)
        dd = np.asarray(degrees, dtype=float)
        # cost[k, l, m]: node k's part of the stage's TPS with option l at degrees[m]
        self.cost = (alpha[:, :, None] + (dd - 1.0)[None, None, :] * beta[:, :, None]) / dd
        fast = np.argmin(self.cost, axis=1)  # F: each node's cheapest option, per d
        self.fast = fast
        self.fast_cost = np.take_along_axis(self.cost, fast[:, None, :], axis=1)[:, 0, :].sum(
            axis=0
        )
        self.y_caps = list(y_tops)
        self._steps: list[list[Step]] = [[] for _ in degrees]
        self._next_y = [1] * len(degrees)
        # a known lower bound on the least cost at _next_y (its knapsack ran under a limit)
        self._above = [-math.inf] * len(degrees)
        self._costs: dict[int, list[list[float]]] = {}  # per m, per node, per option
        take = np.take_along_axis
        self._fast_mem = (
            take(mem_a, fast, axis=1).sum(axis=0),
            take(mem_b, fast, axis=1).sum(axis=0),
        )
        self._bounds: dict[tuple[int, int], float] = {}  # (m, y) -> fractional bound

    # ---- memory ------------------------------------------------------------------
    def fits(self, choice, y: int) -> bool:
        """The choice's memory at y fits M (the evaluator's fsum, no slack)."""
        opts = {v: self.options[k][choice[k]] for k, v in enumerate(self.nodes)}
        return memory_fits(stage_memory(self.nodes, opts, y), self.instance.M)

    def _fits_upto(self, choice, y_hi: int) -> int:
        """The largest y in 0..y_hi at which the choice fits (0: not even at y = 1)."""
        a = math.fsum(self.options[k][li].a for k, li in enumerate(choice))
        b = math.fsum(self.options[k][li].b for k, li in enumerate(choice))
        M = self.instance.M
        if a <= 0:
            return y_hi if self.fits(choice, 1) else 0
        guess = int(min(max((M - b) / a, 0.0), y_hi))
        y = max(0, min(guess, y_hi))
        while y < y_hi and self.fits(choice, y + 1):
            y += 1
        while y > 0 and not self.fits(choice, y):
            y -= 1
        return y

    def _some_choice_fits(self, y: int) -> bool:
        """Each node's least exact memory a y + b, summed, fits."""
        mem_a, mem_b = self._mem
        rough = float((mem_a * y + mem_b).min(axis=1).sum())
        M = self.instance.M
        if rough <= M * (1.0 - 1e-11):
            return True
        if rough > M * (1.0 + 1e-11):
            return False
        sc = self.scale
        total = sum(min(sc.exact(o.a * y) + sc.exact(o.b) for o in opts) for opts in self.options)
        return total <= sc.capacity()

    # ---- the step function ---------------------------------------------------------
    def steps(self, m: int, upto: float) -> list[Step]:
        """The steps of degrees[m] computed so far, extended until one has a lower bound
        above ``upto`` or y reaches the top."""
        st = self._steps[m]
        top = self.y_caps[m]
        while self._next_y[m] <= top and (not st or st[-1].low <= upto):
            y = self._next_y[m]
            if self._above[m] * (1.0 - COST_MARGIN) > upto:
                break  # the least cost at y is known to be above upto
            got = None
            if not st:
                choice = tuple(int(x) for x in self.fast[:, m])
                if self.fits(choice, y):
                    got = (float(self.fast_cost[m]), choice)
            if got is None:
                limit = upto / (1.0 - COST_MARGIN)
                got, above = self._knapsack(m, y, limit)
                if got is None:
                    if self._some_choice_fits(y):
                        self._above[m] = above  # fits, but only at a cost >= above > limit
                    else:
                        self._next_y[m] = top + 1  # nothing fits here, nor at any larger y
                    break
            cost, choice = got
            end = self._fits_upto(choice, top)
            if end < y:  # the knapsack's choice must fit where it was asked
                raise InternalError(
                    f"path formulation: a stage's option choice does not fit at y = {y}"
                )
            st.append(Step(end, cost, choice))
            self._next_y[m] = end + 1
            self._above[m] = -math.inf
        return st

    def _knapsack(
        self, m: int, y: int, limit: float
    ) -> tuple[tuple[float, tuple[int, ...]] | None, float]:
        """The least-cost choice that fits at y (costing at most ``limit``): first in
        floats against M (1 + 1e-11), which admits every choice that fits exactly; its
        answer is the optimum when it fits exactly, else the exact knapsack decides.

        Returns the choice as (cost, option indices), or None with a lower bound on the
        least cost of a fitting choice (at least ``limit``: the fractional bound when it
        is above the limit, so that a later, larger threshold below it needs no knapsack).
        """
        room = self.instance.M * (1.0 + 1e-11)
        mem_a, mem_b = self._mem
        bound = fractional_bound_arrays(mem_a * y + mem_b, self.cost[:, :, m], room)
        if bound > limit * (1.0 + 1e-9):
            return None, max(limit, bound / (1.0 + 1e-9))
        costs = self._costs.get(m)
        if costs is None:
            rows = self.cost[:, :, m].tolist()
            costs = self._costs[m] = [r[: len(o)] for r, o in zip(rows, self.options)]
        items = [
            [(o.a * y + o.b, c) for o, c in zip(opts, cs)] for opts, cs in zip(self.options, costs)
        ]
        got = cheapest_fitting(items, room, limit)
        if got is None:
            return None, limit
        if self.fits(got[1], y):
            return (got[0], tuple(got[1])), limit
        sc = self.scale
        exact = [
            [(sc.exact(o.a * y) + sc.exact(o.b), c) for o, c in zip(opts, cs)]
            for opts, cs in zip(self.options, costs)
        ]
        got = cheapest_fitting(exact, sc.capacity(), limit)
        return (None, limit) if got is None else ((got[0], tuple(got[1])), limit)

    def rough_ymax(self, m: int, threshold: float) -> int:
        """A y at least :meth:`ymax`'s, found without the exact knapsack; 0 when none.

        The least cost does not decrease with y, so ymax < the first y at which a lower
        bound on the least cost exceeds ``threshold``. The bounds: each node's cheapest
        option (its cost, the least cost while their memory fits: up to y_fast), then the
        fractional bound of :func:`~piper_ilp.milp.stage_choice.fractional_bound_arrays`
        at y_fast + 1, y_fast + 2, ... (at most :data:`ROUGH_STEPS` of them; after that,
        the top).
        """
        low = 1.0 - COST_MARGIN
        if self.fast_cost[m] * low > threshold:
            return 0
        top = self.y_caps[m]
        a, b = float(self._fast_mem[0][m]), float(self._fast_mem[1][m])
        room = self.instance.M * (1.0 + 1e-11)
        # too large a y_fast only makes the answer larger (fast_cost bounds every y)
        y_fast = top if a <= 0 else int(min(max((room - b) / a + 1.0, 0.0), top))
        for y in range(y_fast + 1, min(top, y_fast + ROUGH_STEPS) + 1):
            if self._bound_at(m, y) * low > threshold:
                return y - 1
        return top

    def _bound_at(self, m: int, y: int) -> float:
        """The fractional bound on the least cost at y, less its float margin (cached)."""
        key = (m, y)
        got = self._bounds.get(key)
        if got is None:
            mem_a, mem_b = self._mem
            room = self.instance.M * (1.0 + 1e-11)
            got = fractional_bound_arrays(mem_a * y + mem_b, self.cost[:, :, m], room)
            got = self._bounds[key] = got / (1.0 + 1e-9)
        return got

    def ymax(self, m: int, threshold: float) -> tuple[int, Step | None]:
        """The largest y whose least TPS is at most ``threshold`` (by the steps' lower
        bounds), and the step it falls in; (0, None) when there is none."""
        best = (0, None)
        for step in self.steps(m, threshold):
            if step.low > threshold:
                break
            best = (step.y_end, step)
        return best

    def exhausted(self, m: int) -> bool:
        """True when the steps of degrees[m] computed so far reach the top y (or no
        choice fits beyond the last): :meth:`steps` has nothing more to add."""
        return self._next_y[m] > self.y_caps[m]

    def step_at(self, m: int, y: int) -> Step:
        """The step of degrees[m] that holds y (computed by an earlier :meth:`ymax`)."""
        for step in self._steps[m]:
            if y <= step.y_end:
                return step
        raise KeyError(f"no step computed for y = {y}")


class ArcCatalog:
    """Every candidate stage of an instance, and the arcs that meet a threshold.

    Parameters
    ----------
    instance : Instance
        After the restrictions (:meth:`Restrictions.apply`).
    sets : list of int
        The successor-closed sets (:func:`~piper_ilp.milp.closed_sets.closed_sets`).
    pairs : list of (int, int)
        The (j, i) with sets[j] strictly inside sets[i].
    degrees : list of int
        The allowed data-parallel degrees (divisors of N up to min(N, K, max_d)).
    rule : InFlightRule
        How a stage's y follows from the state behind it.
    """

    def __init__(self, instance: Instance, sets, pairs, degrees, rule):
        self.instance = instance
        self.sets = sets
        self.pairs = pairs
        self.rule = rule
        self.cap = min(instance.N, instance.K)
        self.scale = ExactScale.of_instance(instance)
        ids = instance.node_ids
        pos = {v: k for k, v in enumerate(ids)}
        near = [0] * len(ids)  # each node's neighbours (both directions) as a bitmask
        for e in instance.edges:
            near[pos[e.src]] |= 1 << pos[e.dst]
            near[pos[e.dst]] |= 1 << pos[e.src]
        self.tables: list[tuple[int, int, list[StageTable]]] = []
        for j, i in pairs:
            C = sets[i] & ~sets[j]
            nodes = [ids[k] for k in mask_bits(C)]
            boundary = {v for v in nodes if near[pos[v]] & ~C}
            tabs = []
            for t in instance.t_values:
                if any(t not in instance.node[v].options for v in nodes):
                    continue
                degs = [d for d in degrees if t * d <= instance.K]
                if degs:
                    tops = [rule.y_top(d, self.cap) for d in degs]
                    tabs.append(StageTable(instance, nodes, t, degs, tops, self.scale, boundary))
            if tabs:
                self.tables.append((j, i, tabs))

    @property
    def size(self) -> int:
        """Candidate stages with degrees: sum over pairs and t of the d allowed."""
        return sum(len(tab.degrees) for _, _, tabs in self.tables for tab in tabs)

    def rough_arcs_at(self, threshold: float, deadline: float | None = None) -> list[Arc]:
        """Every (C, t, d) that may be usable at ``threshold``, with a limit at least its
        exact one (:meth:`StageTable.rough_ymax`: no exact knapsack), not filtered by
        dominance, ``step`` None: a superset of the stages of every plan whose TPS is at
        most ``threshold``, for pruning (:func:`~piper_ilp.milp.path_bounds.prune`)
        before :meth:`arcs_at` computes the exact arcs of what is left.

        Raises
        ------
        TimeUp
            ``time.process_time()`` passed ``deadline`` (checked between stages).
        """
        out: list[Arc] = []
        for j, i, tabs in self.tables:
            if deadline is not None and time.process_time() > deadline:
                raise TimeUp()
            for tab in tabs:
                for m, d in enumerate(tab.degrees):
                    y = tab.rough_ymax(m, threshold)
                    limit = self.rule.limit(d, y, self.cap - d) if y else -1
                    if limit >= 0:
                        out.append(Arc(j, i, tab.t, d, limit, tab, None))
        return out

    def arcs_at(
        self, threshold: float, deadline: float | None = None, among: list[Arc] | None = None
    ) -> list[Arc]:
        """The undominated arcs whose least TPS at the y they hold is at most
        ``threshold`` (by the steps' lower bounds): a superset, up to dominance, of the
        stages of every plan whose TPS is at most ``threshold``.

        Parameters
        ----------
        threshold : float
        deadline : float, optional
            A ``time.process_time()``.
        among : list of Arc, optional
            Only these stages (the rough arcs of :meth:`rough_arcs_at` left by pruning,
            in its order); None: every stage.

        Raises
        ------
        TimeUp
            ``time.process_time()`` passed ``deadline`` (checked between stages).
        """
        out: list[Arc] = []
        for j, i, todo in self._candidates(among):
            if deadline is not None and time.process_time() > deadline:
                raise TimeUp()
            found: list[Arc] = []
            skip = set()  # tables whose larger d are dominated
            for tab, m in todo:
                if id(tab) in skip:
                    continue
                d = tab.degrees[m]
                if tab.fast_cost[m] * (1.0 - COST_MARGIN) > threshold:
                    continue
                y_fit, step = tab.ymax(m, threshold)
                if step is None:
                    continue
                top = self.cap - d
                limit = self.rule.limit(d, y_fit, top)
                if limit < 0:
                    continue
                found.append(Arc(j, i, tab.t, d, limit, tab, step))
                if limit == top:
                    skip.add(id(tab))  # a larger d with this t needs more devices, accepts less
            out.extend(undominated(found))
        return out

    def _candidates(self, among: list[Arc] | None):
        """(j, i, [(table, m), ...]) per stage pair, d ascending within each table."""
        if among is None:
            for j, i, tabs in self.tables:
                yield j, i, [(tab, m) for tab in tabs for m in range(len(tab.degrees))]
            return
        key, todo = None, []
        for a in among:
            if (a.j, a.i) != key:
                if todo:
                    yield key[0], key[1], todo
                key, todo = (a.j, a.i), []
            todo.append((a.table, a.table.degrees.index(a.d)))
        if todo:
            yield key[0], key[1], todo
