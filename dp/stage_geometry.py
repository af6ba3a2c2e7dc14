"""Sets of nodes as bitmasks, and the cut edges of a stage (cost model secs. 3-4).

A set of nodes is a Python int whose bit i is node position i (input order). A stage C
is the difference I \\ J of two nested successor-closed sets; :class:`StageGeometry`
finds the nodes it peels to grow a stage one node at a time (:meth:`~StageGeometry.low_sink`)
and the bytes E of its cut edges (:meth:`~StageGeometry.cut_bytes`).
"""

from __future__ import annotations

import math

import numpy as np

from dp.exact_sums import fsum_rows
from piper_ilp.cost import cut_edge_bytes
from piper_ilp.instance import Instance

__all__ = ["StageGeometry", "bits", "membership", "set_words", "lowest_sink", "sink_filters"]


def bits(mask: int):
    """The positions of the set bits of ``mask``, rising.

    Examples
    --------
    >>> list(bits(0b10110))
    [1, 2, 4]
    """
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def membership(masks: list[int], n: int) -> np.ndarray:
    """The 0/1 matrix (len(masks) x n, float) of bit i of each mask.

    Examples
    --------
    >>> membership([0b01, 0b11], 2).tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    words = (n + 63) // 64
    out = np.zeros((len(masks), words * 64), dtype=np.uint8)
    for w in range(words):
        col = np.array([(m >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for m in masks], dtype=np.uint64)
        got = np.unpackbits(col.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        out[:, 64 * w : 64 * w + 64] = got
    return out[:, :n].astype(float)


def set_words(masks: list[int], n: int) -> np.ndarray:
    """The masks as a (len(masks) x words) uint64 matrix, word w holding bits 64 w to
    64 w + 63 (at least one word).

    Examples
    --------
    >>> set_words([1, 2**64 + 3], 65).tolist()
    [[1, 0], [3, 1]]
    """
    out = np.zeros((len(masks), max(1, (n + 63) // 64)), dtype=np.uint64)
    for w in range(out.shape[1]):  # a column at a time (one pass over the masks per word)
        out[:, w] = [(m >> (64 * w)) & 0xFFFFFFFFFFFFFFFF for m in masks]
    return out


def lowest_sink(X: int, succ: list, filters: list) -> int:
    """The lowest node of ``X`` with no successor in ``X``.

    Parameters
    ----------
    X : int
        A non-empty set of nodes of an acyclic graph (so such a node exists).
    succ : list of int
        Each node's successors, as a bitmask.
    filters : list of (int, int)
        Pairs (offset c, mask of the nodes u with an edge u -> u + c), from
        :func:`sink_filters`: nodes with a successor at u + c in X are skipped first.

    Returns
    -------
    int

    Examples
    --------
    >>> succ = [0b010, 0b100, 0]  # the chain 0 -> 1 -> 2
    >>> lowest_sink(0b011, succ, sink_filters(succ))
    1
    """
    m = X
    for c, mask in filters:
        m &= ~((X >> c if c > 0 else X << -c) & mask)
    while True:
        low = m & -m
        u = low.bit_length() - 1
        if not succ[u] & X:
            return u
        m ^= low


def sink_filters(succ: list, most: int = 4) -> list[tuple[int, int]]:
    """Filters for :func:`lowest_sink`: up to ``most`` pairs (c, mask of the nodes u with
    an edge u -> u + c), chosen greedily to cover the most nodes not covered yet.

    ResNet's node order has edges to u - 1 and u + 3 as often as to u + 1, so the
    offsets are read from the graph.

    Parameters
    ----------
    succ : list of int
        Each node's successors, as a bitmask.
    most : int
        The largest number of pairs.

    Returns
    -------
    list of (int, int)

    Examples
    --------
    >>> sink_filters([0b010, 0b100, 0])
    [(1, 3)]
    """
    offsets: dict[int, int] = {}
    for u in range(len(succ)):
        for v in bits(succ[u]):
            offsets[v - u] = offsets.get(v - u, 0) | 1 << u
    out = []
    covered = 0
    for _ in range(most):
        c, mask = max(
            offsets.items(),
            key=lambda kv: ((kv[1] & ~covered).bit_count(), -abs(kv[0])),
            default=(0, 0),
        )
        if not mask & ~covered:
            break
        out.append((c, mask))
        covered |= mask
        del offsets[c]
    return out


class StageGeometry:
    """The graph of an instance as bitmasks: predecessors and successors per node, and the
    cut edges of a stage.

    Edge e = (u -> v) has a *head bit* 2e (cut at v: v in the stage, u not) and a *tail
    bit* 2e + 1 (cut at u: u in the stage, v not). With ``plus_bits[x]`` = head bits of
    x's in-edges | tail bits of its out-edges and ``minus_bits[x]`` = head bits of its
    out-edges | tail bits of its in-edges, the cut of a stage C is OR(plus over C) &
    ~OR(minus over C): two ORs per node added, exact, in any order.

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions.

    Attributes
    ----------
    ids : list
        Node ids by position.
    pred_mask, succ_mask : list of int
        Per node, its predecessors and successors as bitmasks.
    preds, succs : list of list of (int, float, int)
        Per node, (the other end, bytes c, edge index) of its in- and out-edges.
    edge_ends : list of (int, int, float)
        Per edge index, (u, v, c).
    plus_bits, minus_bits : list of int
        Per node, the cut bits it sets and clears (see above).
    sink_filters : list of (int, int)
        The filters of :meth:`low_sink` (:func:`sink_filters`).
    all_mask : int
        The set of every node.
    """

    def __init__(self, inst: Instance):
        self.inst = inst
        ids = inst.node_ids
        self.ids = ids
        self.pos = {v: i for i, v in enumerate(ids)}
        n = len(ids)
        self.pred_mask = [0] * n
        self.succ_mask = [0] * n
        self.preds: list[list[tuple[int, float, int]]] = [[] for _ in range(n)]
        self.succs: list[list[tuple[int, float, int]]] = [[] for _ in range(n)]
        self.edge_ends: list[tuple[int, int, float]] = []
        for e in inst.edges:
            u, v = self.pos[e.src], self.pos[e.dst]
            k = len(self.edge_ends)
            self.edge_ends.append((u, v, e.c))
            self.pred_mask[v] |= 1 << u
            self.succ_mask[u] |= 1 << v
            self.preds[v].append((u, e.c, k))
            self.succs[u].append((v, e.c, k))
        self.sink_filters = sink_filters(self.succ_mask)
        self.plus_bits = [0] * n
        self.minus_bits = [0] * n
        for k, (u, v, _) in enumerate(self.edge_ends):
            self.plus_bits[v] |= 1 << (2 * k)
            self.minus_bits[u] |= 1 << (2 * k)
            self.plus_bits[u] |= 1 << (2 * k + 1)
            self.minus_bits[v] |= 1 << (2 * k + 1)
        self.all_mask = (1 << n) - 1
        self._cut_terms: dict[int, list] = {}
        self._cut_bytes: dict[tuple[int, int], float] = {}

    def low_sink(self, X: int) -> int:
        """The lowest node of ``X`` (non-empty) with no successor in ``X``: the node the
        states peel off X (:func:`lowest_sink`)."""
        return lowest_sink(X, self.succ_mask, self.sink_filters)

    def sinks_outside(self, J: int) -> int:
        """The nodes outside ``J`` whose successors all lie in ``J``.

        For a successor-closed I holding J, the nodes of the stage I \\ J without
        successors in it are these nodes of I \\ J: a successor of a node of I is in I,
        so it is outside the stage iff it is in J.
        """
        outside = self.all_mask & ~J
        preds = 0
        for w in bits(outside):
            preds |= self.pred_mask[w]
        return outside & ~preds

    def cut_terms(self, t: int) -> list:
        """Per cut bit (head bit 2e, tail bit 2e + 1 of edge e), its term of E under t:
        ``cut_edge_bytes`` with the endpoint's first option for t (nan when the endpoint
        has no option for t). Remembered per t."""
        terms = self._cut_terms.get(t)
        if terms is None:
            terms = []
            ids = self.ids
            for u, v, c in self.edge_ends:
                ov = self.inst.nodes[v].options.get(t)
                ou = self.inst.nodes[u].options.get(t)
                terms.append(cut_edge_bytes(c, ov[0].sfw[ids[u]]) if ov else math.nan)
                terms.append(cut_edge_bytes(c, ou[0].sbw[ids[v]]) if ou else math.nan)
            self._cut_terms[t] = terms
        return terms

    def cut_bytes(self, t: int, cut: int) -> float:
        """E of a plain stage under t: the ``fsum`` over its cut bits ``cut`` of
        :meth:`cut_terms` (plain nodes: every option has the same sfw, sbw). Remembered
        per (t, cut)."""
        key = (t, cut)
        got = self._cut_bytes.get(key)
        if got is None:
            terms = self.cut_terms(t)
            vals = []
            m = cut
            while m:  # (bits(cut), inline: this runs once per stage and cut in greedy mode)
                low = m & -m
                vals.append(terms[low.bit_length() - 1])
                m ^= low
            got = math.fsum(vals)
            self._cut_bytes[key] = got
        return got

    def cut_bytes_many(self, t: int, cuts: list) -> np.ndarray:
        """:meth:`cut_bytes` of many cut bitmasks at once, the same floats: each mask's
        terms laid out in a row (:func:`dp.exact_sums.fsum_rows`)."""
        terms = np.array(self.cut_terms(t), dtype=float)
        m = len(cuts)
        if not m or not len(terms):
            return np.zeros(m)
        nb = (len(terms) + 7) // 8
        raw = np.frombuffer(
            b"".join(c.to_bytes(nb, "little") for c in cuts), dtype=np.uint8
        ).reshape(m, nb)
        # the set bits, row by row and rising: only the non-zero bytes are unpacked (a cut
        # has a few edges of many)
        r, byte = np.nonzero(raw)
        k, bit = np.nonzero(np.unpackbits(raw[r, byte][:, None], axis=1, bitorder="little"))
        r, col = r[k], byte[k] * 8 + bit
        cnt = np.bincount(r, minlength=m)
        vals = np.zeros((m, int(cnt.max()) if len(r) else 0))
        vals[r, np.arange(len(r)) - (np.cumsum(cnt) - cnt)[r]] = terms[col]
        return fsum_rows(vals)
