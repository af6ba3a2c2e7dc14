"""Interchangeable branches of a layer graph, and the successor-closed sets up to them: what
lets the label DP of :mod:`dp.modes` solve each orbit of sets once.

A *branch* is a maximal chain v_1 -> ... -> v_L whose inner links are the only edge out of
v_k and the only edge into v_{k+1}. Two branches are interchangeable when swapping them node
by node (v_k <-> w_k, every other node fixed) maps the instance onto itself: the same
predecessors of the first node and successors of the last (the attachment), the same
options position by position (time, memory, weights, the sync bytes keyed by the mapped
neighbour), the same edge costs. Names are not read. A successor-closed set meets a branch in
a suffix, so its *state* on the branch is the suffix's length; permuting interchangeable
branches permutes the states, and the *canonical* set of an orbit has every class's states
non-increasing in branch order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from piper_ilp.instance import Instance

__all__ = ["Branches", "find_branches"]


def _chains(succ: Sequence[int], pred: Sequence[int]) -> list[list[int]]:
    """The maximal chains (node positions, in order) of the graph, one per node's chain."""
    n = len(succ)

    def linked(u: int) -> int | None:
        """u's only successor when u is its only predecessor, else None."""
        s = succ[u]
        if s and s & (s - 1) == 0:
            v = s.bit_length() - 1
            if pred[v] == 1 << u:
                return v
        return None

    heads = [v for v in range(n) if not any(linked(u) == v for u in _bits(pred[v]))]
    out = []
    for h in heads:
        chain = [h]
        nxt = linked(h)
        while nxt is not None:
            chain.append(nxt)
            nxt = linked(nxt)
        out.append(chain)
    return out


def _bits(m: int):
    while m:
        low = m & -m
        yield low.bit_length() - 1
        m ^= low


def _is_automorphism(inst: Instance, image: dict[int, int]) -> bool:
    """Whether the node-id map ``image`` (a permutation; absent ids fixed) maps the
    instance's options and edges onto themselves."""

    def f(v: int) -> int:
        return image.get(v, v)

    edges = {(e.src, e.dst): e.c for e in inst.edges}
    for (u, v), c in edges.items():
        if edges.get((f(u), f(v))) != c:
            return False
    for v in image:
        mine, theirs = inst.node[v].options, inst.node[f(v)].options
        if set(mine) != set(theirs):
            return False
        for t, opts in mine.items():
            other = theirs[t]
            if len(opts) != len(other):
                return False
            for o, q in zip(opts, other):
                if (o.id, o.p, o.w, o.a, o.b) != (q.id, q.p, q.w, q.a, q.b):
                    return False
                if {f(k): x for k, x in o.sfw.items()} != dict(q.sfw):
                    return False
                if {f(k): x for k, x in o.sbw.items()} != dict(q.sbw):
                    return False
    # the neighbours of a branch hold sync entries keyed by the branch's end nodes
    moved = set(image)
    touched = {e.src for e in inst.edges if e.dst in moved} | {
        e.dst for e in inst.edges if e.src in moved
    }
    for v in touched - moved:
        for opts in inst.node[v].options.values():
            for o in opts:
                if {f(k): x for k, x in o.sfw.items()} != dict(o.sfw):
                    return False
                if {f(k): x for k, x in o.sbw.items()} != dict(o.sbw):
                    return False
    return True


class Branches:
    """The classes of interchangeable branches of one instance (at least two per class).

    Attributes
    ----------
    nodes : list of list of int
        Branch b's node positions, first to last; branches of one class are consecutive.
    classes : list of list of int
        The branch indices of each class, ascending.
    n : int
        The number of node positions of the graph.
    """

    def __init__(self, n: int, nodes: list[list[int]], classes: list[list[int]]):
        self.n, self.nodes, self.classes = n, nodes, classes
        self.nb = len(nodes)
        self.length = [len(c) for c in nodes]
        self.mask = [sum(1 << v for v in c) for c in nodes]
        # suffix[b][m]: the last m nodes of branch b
        self.suffix = [
            [sum(1 << v for v in c[len(c) - m :]) for m in range(len(c) + 1)] for c in nodes
        ]
        self.core = ((1 << n) - 1) & ~sum(self.mask)
        self.branch_of = {v: (b, k) for b, c in enumerate(nodes) for k, v in enumerate(c)}
        self._canon: dict[int, int] = {}

    def states(self, I: int) -> list[int]:
        """The suffix length of ``I`` on every branch."""
        return [(I & m).bit_count() for m in self.mask]

    def with_states(self, I: int, states: Sequence[int]) -> int:
        """``I``'s nodes outside the branches, with the given state on every branch."""
        out = I & self.core
        for b, m in enumerate(states):
            out |= self.suffix[b][m]
        return out

    def canonical(self, I: int, runs: Sequence[Sequence[int]] | None = None) -> tuple[int, list]:
        """The canonical set of ``I``'s orbit, and the branch permutation p (branch b to p[b])
        that maps ``I`` onto it. With ``runs`` (lists of branches), only branches of one run
        are permuted (the orbit under the stabiliser of another set)."""
        st = self.states(I)
        p = list(range(self.nb))
        for run in runs if runs is not None else self.classes:
            order = sorted(run, key=lambda b: -st[b])  # stable: ties keep branch order
            for k, b in enumerate(order):
                p[b] = run[k]
        new = [0] * self.nb
        for b in range(self.nb):
            new[p[b]] = st[b]
        return self.with_states(I, new), p

    def canonical_states(self, st: Sequence[int]) -> tuple:
        """The branch states of the canonical set of the orbit of a set with states ``st``
        (each class's states in non-increasing branch order)."""
        new = list(st)
        for cls in self.classes:
            for b, m in zip(cls, sorted((st[b] for b in cls), reverse=True)):
                new[b] = m
        return tuple(new)

    def canonical_nodes(self, C: int) -> int:
        """One set per orbit of any node set ``C`` (not only successor-closed ones): each
        class's branches take ``C``'s patterns on them, sorted."""
        got = self._canon.get(C)
        if got is None:
            out = C & self.core
            for cls in self.classes:
                pats = sorted(
                    (sum(1 << k for k, v in enumerate(self.nodes[b]) if (C >> v) & 1) for b in cls),
                    reverse=True,
                )
                for b, pat in zip(cls, pats):
                    out |= sum(1 << v for k, v in enumerate(self.nodes[b]) if (pat >> k) & 1)
            got = self._canon[C] = out
        return got

    def runs(self, I: int) -> list[list[int]]:
        """The stabiliser of ``I``: lists of branches of one class with the same state."""
        st = self.states(I)
        out = []
        for cls in self.classes:
            by: dict[int, list[int]] = {}
            for b in cls:
                by.setdefault(st[b], []).append(b)
            out.extend(r for r in by.values() if len(r) > 1)
        return out

    def node_map(self, p: Sequence[int]) -> np.ndarray:
        """The node permutation of the branch permutation ``p``, as an array over positions."""
        out = np.arange(self.n)
        for b, c in enumerate(self.nodes):
            for k, v in enumerate(c):
                out[v] = self.nodes[p[b]][k]
        return out

    def apply(self, p: Sequence[int], I: int) -> int:
        """The image of the set ``I`` under the branch permutation ``p``."""
        st = self.states(I)
        new = [0] * self.nb
        for b in range(self.nb):
            new[p[b]] = st[b]
        return self.with_states(I, new)


def find_branches(inst: Instance, succ: Sequence[int], pred: Sequence[int]) -> Branches | None:
    """The classes of interchangeable branches of ``inst`` (see the module text), or None
    when there are none.

    Parameters
    ----------
    inst : Instance
    succ, pred : sequence of int
        Successor and predecessor bitmasks over node positions
        (:func:`dp.ideals.successor_masks`, :func:`dp.modes.predecessor_masks`).

    Returns
    -------
    Branches or None
    """
    ids = inst.node_ids
    groups: dict[tuple, list[list[int]]] = {}
    for c in _chains(succ, pred):
        groups.setdefault((len(c), pred[c[0]], succ[c[-1]]), []).append(c)
    nodes, classes = [], []
    for chains in groups.values():
        left = list(chains)
        while len(left) > 1:
            rep, same, rest = left[0], [left[0]], []
            for c in left[1:]:
                image = {}
                for x, y in zip(rep, c):
                    image[ids[x]], image[ids[y]] = ids[y], ids[x]
                (same if _is_automorphism(inst, image) else rest).append(c)
            if len(same) > 1:
                classes.append(list(range(len(nodes), len(nodes) + len(same))))
                nodes.extend(same)
            left = rest
    if not classes:
        return None
    return Branches(len(succ), nodes, classes)


def canonical_ideals(br: Branches, succ: Sequence[int], max_ideals: int) -> list[int] | None:
    """The canonical successor-closed sets (one per orbit), by size, the empty set first; None
    when there are more than ``max_ideals``. Every set of size s + 1 is a set of size s plus
    a node, so the orbits of size s + 1 are those of the canonical sets of size s plus a
    node."""
    n = len(succ)
    level = [0]
    out = [0]
    while level:
        nxt: dict[int, None] = {}
        for I in level:
            for v in range(n):
                if not (I >> v) & 1 and succ[v] & ~I == 0:
                    nxt.setdefault(br.canonical(I | (1 << v))[0])
        level = sorted(nxt)
        out.extend(level)
        if len(out) > max_ideals:
            return None
    return out


def sub_ideals(br: Branches, I: int, pred: Sequence[int]) -> list[int]:
    """The successor-closed sets strictly inside ``I``, one per orbit of the stabiliser of
    ``I`` (branches of one class in the same state in ``I`` are interchangeable): removing a
    node with no predecessor left keeps a set successor-closed, and every smaller set is
    reached that way."""
    runs = br.runs(I)
    level = [I]
    out: list[int] = []
    while level:
        nxt: dict[int, None] = {}
        for J in level:
            for v in _bits(J):
                if pred[v] & J == 0:
                    nxt.setdefault(br.canonical(J & ~(1 << v), runs)[0])
        level = sorted(nxt)
        out.extend(level)
    return out


def sub_ideal_states(br: Branches, I: int, pred: Sequence[int]) -> list[tuple[int, tuple]]:
    """:func:`sub_ideals` (the same sets, in the same order) with each set's branch states,
    found on the states directly: a set is its nodes outside the branches and one state per
    branch; removing a node takes a node outside the branches with no predecessor left,
    or a branch's first node (its whole branch only when the branch's predecessors are
    gone), and of the branches of one run (:meth:`Branches.runs` of ``I``) in one state,
    the last: within a run the states stay non-increasing, the stabiliser's canonical
    form."""
    runs = br.runs(I)
    nxt_in_run = [-1] * br.nb  # the branch after b in b's run, or -1
    in_run = [False] * br.nb
    for run in runs:
        for a, b in zip(run, run[1:]):
            nxt_in_run[a] = b
        for b in run:
            in_run[b] = True
    heads = [[c[len(c) - m] if m else -1 for m in range(len(c) + 1)] for c in br.nodes]
    level = [(I, I & br.core, tuple(br.states(I)))]
    out: list[tuple[int, tuple]] = []
    while level:
        nxt: dict[int, tuple[int, tuple]] = {}
        for J, core, st in level:
            for v in _bits(core):
                if pred[v] & J == 0:
                    K = J & ~(1 << v)
                    if K not in nxt:
                        nxt[K] = (core & ~(1 << v), st)
            for b in range(br.nb):
                m = st[b]
                if m == 0:
                    continue
                if in_run[b]:
                    a = nxt_in_run[b]
                    if a >= 0 and st[a] == m:
                        continue  # the last branch of the run in state m moves
                v = heads[b][m]
                if m == br.length[b] and pred[v] & J:
                    continue
                K = J & ~(1 << v)
                if K not in nxt:
                    new = list(st)
                    new[b] = m - 1
                    nxt[K] = (core, tuple(new))
        level = [(K, *nxt[K]) for K in sorted(nxt)]
        out.extend((K, st) for K, _, st in level)
    return out
