"""Stage columns for graph pipelining (``docs/milp.md``, "Stage columns under graph
pipelining"): every candidate stage C (a difference of two successor-closed sets) with
degrees (t, d) and one step of its least TPS as a function of the microbatches it holds.

A column carries its exact float cost (the least TPS over the option choices that fit at
every y up to the step's end, :class:`~piper_ilp.milp.path_arcs.StageTable`), the choice
that reaches it, and ``limit``: the largest r (the most microbatches held by the stages
behind it, max over its successors' h) at which it still holds no more than that. A
stage of any plan whose least TPS is at most a bound U is dominated by a column built
under U (same C, no more devices, d no larger, cost no larger, limit no smaller).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from piper_ilp.bitmask import mask_bits
from piper_ilp.instance import Instance
from piper_ilp.milp.graph_orbits import Orbits, invert, move_mask
from piper_ilp.milp.path_arcs import COST_MARGIN, StageTable, TimeUp
from piper_ilp.milp.path_rule import InFlightRule
from piper_ilp.milp.stage_choice import ExactScale

__all__ = ["Column", "ColumnCatalog", "convex_sets", "moved", "orbit_stages"]


def convex_sets(
    sets: list[int], most: int | None = None, deadline: float | None = None
) -> list[int]:
    """The distinct differences I \\ J of two successor-closed sets J strictly inside I
    (every stage a plan can have), as bitmasks in increasing order.

    Parameters
    ----------
    sets : list of int
    most : int, optional
        Stop as soon as more than this many are found (the list returned is then longer
        than ``most`` and not complete): a size guard need not wait for all of them
        (towers 8x4's 390,627 sets are 7.6e10 pairs).
    deadline : float, optional
        ``time.process_time()`` value, checked once per set.

    Raises
    ------
    TimeUp
        Past ``deadline``.

    Examples
    --------
    >>> convex_sets([0, 4, 6, 7])  # the chain 0 -> 1 -> 2
    [1, 2, 3, 4, 6, 7]
    >>> len(convex_sets([0, 4, 6, 7], most=2)) > 2
    True
    """
    out = set()
    for i, big in enumerate(sets):
        if deadline is not None and time.process_time() > deadline:
            raise TimeUp()
        for small in sets[:i]:
            if small & ~big == 0 and small != big:
                out.add(big & ~small)
        if most is not None and len(out) > most:
            break
    return sorted(out)


def orbit_stages(
    walk: list[int], sets: list[int], most: int | None = None, deadline: float | None = None
) -> list[int]:
    """The distinct differences I \\ J of a set J of ``walk`` (the canonical sets) and a
    set I of ``sets`` strictly holding it: the stages the chain search reaches when it
    walks the canonical sets only. Every stage is the image of one of them under an
    automorphism (map its J to J's canonical form). ``most`` and ``deadline`` as in
    :func:`convex_sets`.

    Examples
    --------
    >>> orbit_stages([0, 4], [0, 4, 6, 7])  # the chain 0 -> 1 -> 2, from {} and {2}
    [2, 3, 4, 6, 7]
    """
    out = set()
    for small in walk:
        if deadline is not None and time.process_time() > deadline:
            raise TimeUp()
        for big in sets:
            if small & ~big == 0 and small != big:
                out.add(big & ~small)
        if most is not None and len(out) > most:
            break
    return sorted(out)


@dataclass(frozen=True)
class Column:
    """One stage C (bitmask ``mask``, node ids ``nodes``) with degrees (t, d): its least
    float ``cost`` reached by option indices ``choice``, usable when the stages behind it
    hold at most ``limit`` microbatches; ``heads`` the bitmask of the nodes outside C with
    an edge from C (its stage-graph successors hold them)."""

    mask: int
    nodes: tuple[int, ...]
    t: int
    d: int
    limit: int
    cost: float
    choice: tuple[int, ...]
    heads: int
    rest: float
    table: StageTable

    @property
    def devices(self) -> int:
        return self.t * self.d

    def option_ids(self, instance: Instance) -> dict[int, str]:
        """Each node's option id (``choice`` follows ``nodes``: option positions at t)."""
        return {
            v: instance.node[v].options[self.t][i].id
            for v, i in zip(self.nodes, self.choice, strict=True)
        }

    def usable(self, threshold: float, K: int) -> bool:
        """The column can be a stage of a plan whose every stage has TPS <= threshold:
        its cost is, and the other stages' least work over ``threshold`` (devices they
        need at least) leaves room for its own."""
        return self.low <= threshold and self.devices + others(self.rest, threshold) <= K

    @property
    def low(self) -> float:
        """A lower bound on the stage's TPS (its float cost less the float margin)."""
        return self.cost * (1.0 - COST_MARGIN)


def moved(c: Column, rho: tuple[int, ...], ids: list[int]) -> Column:
    """The column of the stage ``rho`` maps ``c``'s stage to, under an automorphism
    ``rho`` of node positions (:mod:`~piper_ilp.milp.graph_orbits`; ``ids`` the node ids
    by position): the same degrees, cost, limit and option positions, node by node."""
    bits = [p for p in range(len(ids)) if c.mask >> p & 1]
    pairs = sorted((rho[p], i) for p, i in zip(bits, c.choice, strict=True))
    return Column(
        move_mask(c.mask, rho),
        tuple(ids[q] for q, _ in pairs),
        c.t,
        c.d,
        c.limit,
        c.cost,
        tuple(i for _, i in pairs),
        move_mask(c.heads, rho),
        c.rest,
        c.table,
    )


def others(rest: float, bound: float) -> float:
    """The fewest devices the other stages need when each has TPS <= ``bound`` and their
    least work (sum of t p) is ``rest``: at least ``rest / bound``, and at least one (a
    positive rest is work of nodes outside the stage, so some other stage exists, and
    every stage has t d >= 1 devices).

    Examples
    --------
    >>> others(4.0, 2.0), others(1.0, 4.0), others(0.0, 0.0), others(1.0, 0.0)
    (2.0, 1.0, 0.0, inf)
    """
    if rest <= 0:
        return 0.0
    return math.inf if bound <= 0 else max(1.0, rest / bound)


def _undominated(cols: list[Column]) -> list[Column]:
    """The columns of one C that no other column of C dominates (no more devices, d no
    larger, cost no larger, limit no smaller: any plan using b can use a instead, and
    neither its memory, its value nor the stages in front of it get worse)."""
    kept: list[Column] = []
    for c in sorted(cols, key=lambda x: (x.devices, x.d, x.cost, -x.limit)):
        if not any(
            k.devices <= c.devices and k.d <= c.d and k.cost <= c.cost and k.limit >= c.limit
            for k in kept
        ):
            kept.append(c)
    return kept


class ColumnCatalog:
    """The stages of an instance under graph pipelining, and their columns under a bound.

    Parameters
    ----------
    instance : Instance
        After the restrictions.
    sets : list of int
        The successor-closed sets (:func:`~piper_ilp.milp.closed_sets.closed_sets`).
    degrees : list of int
        The allowed data-parallel degrees.
    rule : InFlightRule
        y as a function of the microbatches held behind (Piper's or gpipe's).
    most, deadline
        Passed to :func:`convex_sets` (``masks`` longer than ``most``: not complete).
    orbits : Orbits, optional
        Walk the successor-closed sets up to interchangeable chains: ``walk`` holds the
        canonical sets only, ``masks`` the stages from them (:func:`orbit_stages`), and
        each stage's columns are its canonical form's, moved. Only the chain search reads
        such a catalog (CP-SAT's model needs every stage).
    """

    def __init__(
        self,
        instance: Instance,
        sets: list[int],
        degrees: list[int],
        rule,
        *,
        most: int | None = None,
        deadline: float | None = None,
        orbits: Orbits | None = None,
    ):
        self.instance = instance
        self.rule: InFlightRule = rule
        self.degrees = degrees
        self.sets = sets
        # under graph pipelining every h is a sum of d along a path: at most min(N, K)
        self.cap = min(instance.N, instance.K)
        self.orbits = None if orbits is None or orbits.trivial else orbits
        self._frames: dict[int, tuple[int, tuple[int, ...] | None]] = {}
        if self.orbits is None:
            self.walk = sets
            self.masks = convex_sets(sets, most, deadline)
        else:
            canonical = {self.orbits.canon(s)[0] for s in sets}
            self.walk = sorted(canonical, key=lambda m: (m.bit_count(), sets.index(m)))
            self.masks = orbit_stages(self.walk, sets, most, deadline)
        self.scale = ExactScale.of_instance(instance)
        ids = instance.node_ids
        self.ids = ids
        pos = {v: k for k, v in enumerate(ids)}
        self.succ = [0] * len(ids)
        self.near = [0] * len(ids)
        self.pred = [0] * len(ids)
        for e in instance.edges:
            self.succ[pos[e.src]] |= 1 << pos[e.dst]
            self.pred[pos[e.dst]] |= 1 << pos[e.src]
            self.near[pos[e.src]] |= 1 << pos[e.dst]
            self.near[pos[e.dst]] |= 1 << pos[e.src]
        # each node's least t p (a stage of least TPS <= U with these nodes needs
        # t d >= their sum / U devices: the work bound)
        self.least_work = [
            min((t * o.p for t, opts in instance.node[v].options.items() for o in opts), default=0)
            for v in ids
        ]
        self.total_work = math.fsum(self.least_work)
        # per t, each node's least p (a stage's TPS is at least their sum over d)
        self.least_p = {
            t: [
                min((o.p for o in instance.node[v].options.get(t, ())), default=math.inf)
                for v in ids
            ]
            for t in instance.t_values
        }
        self._tables: dict[tuple[int, int], StageTable] = {}
        self._homes: dict[int, tuple[int, tuple[int, ...] | None]] = {}
        self._ups: dict[int, list[tuple[int, int]]] = {}
        # per t, the nodes with options at t
        self.has_t = {
            t: sum(1 << k for k, v in enumerate(ids) if t in instance.node[v].options)
            for t in instance.t_values
        }

    def _home(self, mask: int) -> tuple[int, tuple[int, ...] | None]:
        """The canonical form of the stage ``mask`` and the move from it back to
        ``mask`` (None: ``mask`` is canonical)."""
        got = self._homes.get(mask)
        if got is None:
            cm, rho = self.orbits.canon(mask)
            got = self._homes[mask] = (cm, None if cm == mask else invert(rho))
        return got

    def supersets(self, J: int, deadline: float | None = None) -> list[tuple[int, int]]:
        """The pairs (I, I \\ J) of successor-closed sets I strictly holding the set J
        (computed once per J).

        Raises
        ------
        TimeUp
            Past ``deadline`` (checked before a J not seen yet).
        """
        got = self._ups.get(J)
        if got is None:
            if deadline is not None and time.process_time() > deadline:
                raise TimeUp()
            got = self._ups[J] = [(I, I & ~J) for I in self.sets if J & ~I == 0 and I != J]
        return got

    def frame(self, mask: int) -> tuple[int, tuple[int, ...] | None]:
        """The canonical form of the set ``mask`` and a permutation taking it there (None:
        the set is canonical, no move needed)."""
        got = self._frames.get(mask)
        if got is None:
            if self.orbits is None:
                got = (mask, None)
            else:
                cm, rho = self.orbits.canon(mask)
                got = (cm, None if cm == mask else rho)
            self._frames[mask] = got
        return got

    def paths(self, most: int = 256) -> list[list[int]]:
        """Up to ``most`` maximal paths of the node graph (positions, from a node with no
        predecessor to one with no successor), in depth-first order."""
        n = len(self.ids)
        out: list[list[int]] = []
        stack = [[v] for v in reversed(range(n)) if not self.pred[v]]
        while stack and len(out) < most:
            path = stack.pop()
            nxt = mask_bits(self.succ[path[-1]])
            if not nxt:
                out.append(path)
            stack.extend(path + [u] for u in reversed(nxt))
        return out

    def positive_floor(self) -> float:
        """A bound to start from when the least value is 0: the least positive part of
        a stage's TPS a node can have (1.0 when every time is 0)."""
        inst = self.instance
        dmax = max(self.degrees)
        parts = [o.p / dmax for n in inst.nodes for opts in n.options.values() for o in opts]
        parts += [e.c / inst.B for e in inst.edges]
        positive = [x for x in parts if x > 0]
        return min(positive) if positive else 1.0

    def keys(self, mask: int) -> list[int]:
        """The positions of C's entries (nodes with a predecessor outside C) and of its
        first node: the nodes whose G the model ties to the stage's h."""
        bits = mask_bits(mask)
        out = [k for k in bits if self.pred[k] & ~mask]
        if bits[0] not in out:
            out.append(bits[0])
        return out

    def _table(self, mask: int, t: int, degs: list[int]) -> StageTable:
        got = self._tables.get((mask, t))
        if got is None:
            bits = mask_bits(mask)
            nodes = [self.ids[k] for k in bits]
            boundary = {self.ids[k] for k in bits if self.near[k] & ~mask}
            tops = [self.rule.y_top(d, self.cap) for d in degs]
            got = StageTable(self.instance, nodes, t, degs, tops, self.scale, boundary)
            self._tables[(mask, t)] = got
        return got

    def columns(self, bound: float, deadline: float | None = None) -> tuple[list[Column], bool]:
        """The undominated columns whose cost (less the float margin) is at most
        ``bound``, and whether every step of every stage was taken (True: the bound left
        nothing out, so a larger one gives the same columns).

        Raises
        ------
        TimeUp
            ``time.process_time()`` passed ``deadline`` (checked between stages).
        """
        out: list[Column] = []
        complete = True
        done: dict[int, tuple[list[Column], bool]] = {}
        for mask in self.masks:
            if deadline is not None and time.process_time() > deadline:
                raise TimeUp()
            if self.orbits is None:
                found, whole = self.mask_columns(mask, bound)
            else:
                # an automorphism maps the stage's columns onto those of its canonical form
                cm, back = self._home(mask)
                if cm not in done:
                    done[cm] = self.mask_columns(cm, bound)
                found, whole = done[cm]
                if back is not None:
                    found = [moved(c, back, self.ids) for c in found]
            complete = complete and whole
            out.extend(found)
        return out, complete

    def mask_columns(self, mask: int, bound: float) -> tuple[list[Column], bool]:
        """The undominated columns of the stage ``mask`` under ``bound`` and whether every
        step of its tables was taken (see :meth:`columns`)."""
        inst = self.instance
        K = inst.K
        complete = True
        bits = mask_bits(mask)
        nodes = tuple(self.ids[k] for k in bits)
        heads = 0
        for k in bits:
            heads |= self.succ[k]
        heads &= ~mask
        rest = (self.total_work - math.fsum(self.least_work[k] for k in bits)) * (1 - 1e-9)
        found: list[Column] = []
        for t in inst.t_values:
            if mask & ~self.has_t[t]:
                continue  # a node without options at t
            # (t, d) leaving no device to the other stages is no column at any bound
            degs = [d for d in self.degrees if t * d + (rest > 0) <= K]
            if not degs:
                continue
            work = math.fsum(self.least_p[t][k] for k in bits) * (1.0 - 1e-9)
            wanted = [
                m
                for m, d in enumerate(degs)
                if work <= bound * d and t * d + others(rest, bound) <= K
            ]
            if len(wanted) < len(degs):
                complete = False
            if not wanted:
                continue
            tab = self._table(mask, t, degs)
            for m in wanted:
                d = degs[m]
                for step in tab.steps(m, bound):
                    if step.low > bound:
                        complete = False
                        break
                    limit = self.rule.limit(d, step.y_end, self.cap - d)
                    if limit < 0:
                        continue
                    found.append(
                        Column(mask, nodes, t, d, limit, step.cost, step.choice, heads, rest, tab)
                    )
                else:
                    if not tab.exhausted(m):
                        complete = False
        return _undominated(found), complete
