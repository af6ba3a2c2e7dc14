"""A lower bound for the label DP of :mod:`dp.modes`: the fewest devices that the stages in
front of a successor-closed set need when no stage may be slower than a cutoff.

The stages in front of a set I (the earlier stages of a plan whose later stages hold I) hold
the nodes outside I; the last of them, C, makes J = I + C successor-closed, and the ones
before it are the stages in front of J. A plan of value at most the cutoff has every stage
*admissible*: TPS at most the cutoff (throughput), or (N - 1 + d) TPS at most it (batch time:
the value is at least (N - 1) max TPS plus the stage's own latency d TPS on its path). So with
``least(C)`` at most the fewest devices t d of an admissible placement of stage C, and
D(whole graph) = 0,

    D(I) = min over successor-closed J strictly containing I of  least(J - I) + D(J)

is at most the devices of the stages in front of I in every such plan (induction on the
number of stages in front), and a partial plan of I on k devices with k + D(I) > K has no
completion of value at most the cutoff. D(I) > K when no admissible front exists.

``least`` costs stage C by a relaxation of sec. 3's TPS = (edge_bytes / d + resync) / B +
p_sum / d that never exceeds it: edge bytes and resync with each node's least sync bytes and
weights over its options at t that fit memory alone at the stage's least y, and p_sum by the
Lagrangian bound max over lambda >= 0 of sum over nodes of min over options of (p + lambda
mem) - lambda M (any choice that fits has sum mem <= M, so sum p >= sum (p + lambda mem) -
lambda M), with lambda = 0 among the values tried (the plain least p). A stage whose nodes'
least memories add up to more than M at that y has no placement. The least y: y = ceil(h /
d) >= 1 always; a stage with an edge to a node outside it has a successor stage (graph
pipelining: h >= d + 1; sequential: s >= d + 1; sec. 11's rule: q >= 2 d), so y >= 2; under
``gpipe`` y = N / d. Memory a y + b with a, b >= 0 only grows with y, so what fits at the true
y fits at the least one. All the per-node values are non-negative, so each relaxed sum is at
most the true one. Float sums: memory is compared with M (1 + 1e-9) (the knapsack's exact
sums may equal M where float sums round above it), the relaxed TPS scaled by 1 - 1e-12.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from dp.label_pairs import SubsetPairs
from piper_ilp.instance import Instance

__all__ = ["FrontDevices", "front_devices", "MAX_PAIRS", "MAX_NODES"]

#: Sets are int64 bitmasks here: graphs with more nodes run without the bound.
MAX_NODES = 62

#: The bound is computed only when the (set, subset) pairs number at most this (their
#: arrays are a few dozen bytes each); above it the DP runs without it.
MAX_PAIRS = 4_000_000

#: Memory M is relaxed by this factor (a larger M only weakens the bound): float sums of
#: a y + b can round above M where the exact sums of the knapsack fit.
_MEMORY_SLACK = 1 + 1e-9

#: A relaxed TPS is scaled by this factor, far below the DP's rounding margin, so that its
#: float sums (in another order than the evaluator's) never exceed a true TPS.
_SAFETY = 1 - 1e-12


class _Sums:
    """Sums of per-node values over many node sets at once (int64 bitmasks, < 63 nodes), by
    tables of 8-bit chunks."""

    def __init__(self, masks: np.ndarray, n: int):
        self.chunks = [((masks >> lo) & 255).astype(np.intp) for lo in range(0, n, 8)]

    def of(self, values: Sequence[float]) -> np.ndarray:
        total = np.zeros(len(self.chunks[0]) if self.chunks else 0)
        for c, idx in enumerate(self.chunks):
            chunk = list(values[8 * c : 8 * c + 8]) + [0.0] * (8 - len(values[8 * c : 8 * c + 8]))
            table = np.zeros(256)
            for m in range(1, 256):
                low = (m & -m).bit_length() - 1
                table[m] = table[m & (m - 1)] + chunk[low]
            total += table[idx]
        return total


class FrontDevices:
    """D(I) of the module text for every set of a label DP, at any cutoff.

    Parameters
    ----------
    inst : Instance
        The instance (restrictions applied).
    n_sets : int
        The number of sets (the DP's indices 0 .. n_sets - 1).
    pairs : iterable of (int, int, int, int)
        (J, j, I, i): every set J with every set I strictly inside it, up to symmetry (each
        pair (I, J) of the graph has an image under an automorphism among them), as bitmasks
        and table indices; ``full`` is the index of the whole graph.
    full : int
        The index of the whole graph's set.
    succ : sequence of int
        Successor masks over node positions.
    d_values : sequence of int
        The allowed data-parallel degrees.
    gpipe, flush : bool
        The ``gpipe`` schedule (y = N / d); the batch-time objective (a stage is admissible
        when (N - 1 + d) TPS is at most the cutoff).
    """

    def __init__(
        self,
        inst: Instance,
        n_sets: int,
        pairs: Iterable[tuple[int, int, int, int]],
        full: int,
        succ: Sequence[int],
        d_values: Sequence[int],
        gpipe: bool,
        flush: bool,
    ):
        self.K, self.N, self.B = inst.K, inst.N, inst.B
        # memory is decided exactly elsewhere (integers); these float sums of a y + b may
        # round above M where the exact sum equals it, so the relaxation allows a margin
        self.M = inst.M * _MEMORY_SLACK
        self.flush, self.n_sets, self.full = flush, n_sets, full
        n = len(inst.nodes)
        rows = list(pairs)
        pj = np.array([r[1] for r in rows], dtype=np.int64)
        pi = np.array([r[3] for r in rows], dtype=np.int64)
        C = np.array([r[0] & ~r[2] for r in rows], dtype=np.int64)
        size_j = np.array([r[0].bit_count() for r in rows], dtype=np.int64)
        # where each set's pairs start, in the order given (a DP that walks the subsets of
        # its sets in that order reads :meth:`admissible` by position)
        self.start = np.zeros(n_sets + 1, dtype=np.int64)
        np.add.at(self.start, pj + 1, 1)
        self.start = np.cumsum(self.start)
        order = np.argsort(-size_j, kind="stable")
        self.order = order
        self.pj, self.pi, C, size_j = pj[order], pi[order], C[order], size_j[order]
        # level boundaries: pairs whose J has the same size
        cut = np.flatnonzero(np.diff(size_j)) + 1
        self.levels = np.split(np.arange(len(C)), cut) if len(C) else []
        sums = _Sums(C, n)
        ids = inst.node_ids
        pos = {v: k for k, v in enumerate(ids)}
        bit = [(C >> k) & 1 for k in range(n)]
        # cut edges' least bytes (over every option of the node, any t)
        E = np.zeros(len(C))
        for k, v in enumerate(ids):
            opts = [o for ol in inst.node[v].options.values() for o in ol]
            for u, c in inst.in_edges[v]:
                s = min((o.sfw.get(u, 0.0) for o in opts), default=0.0)
                E += 2.0 * (c + s) * (bit[k] & (1 - bit[pos[u]]))
            for x, c in inst.out_edges[v]:
                s = min((o.sbw.get(x, 0.0) for o in opts), default=0.0)
                E += 2.0 * (c + s) * (bit[k] & (1 - bit[pos[x]]))
        out_edge = np.zeros(len(C), dtype=bool)
        for k in range(n):
            out_edge |= (bit[k] == 1) & ((np.int64(succ[k]) & ~C) != 0)
        self.E = E
        self.d_values = list(d_values)
        # per t: the (t d, d, y) placements and the relaxed sums at each y used
        self.place: list[tuple[int, list[int]]] = []
        for t in inst.t_values:
            ds = [d for d in d_values if t * d <= self.K]
            if ds:
                self.place.append((t, ds))
        self._relaxed: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        for t, ds in self.place:
            ys = {self.N // d for d in ds} if gpipe else {1, 2}
            for y in ys:
                self._relaxed[(t, y)] = self._relax(inst, sums, t, y)
        self.gpipe = gpipe
        self.y0 = np.where(out_edge, 2, 1)

    def _relax(self, inst: Instance, sums: _Sums, t: int, y: int) -> tuple[np.ndarray, np.ndarray]:
        """(relaxed p_sum, least weights sum) of every pair's stage at (t, y); inf where
        the stage cannot fit."""
        M = self.M
        fits = [
            [o for o in inst.node[v].options.get(t, ()) if o.a * y + o.b <= M]
            for v in inst.node_ids
        ]
        least_mem = [min((o.a * y + o.b for o in ok), default=math.inf) for ok in fits]
        least_w = [min((o.w for o in ok), default=math.inf) for ok in fits]
        # lambda values: 0 and the exchange rates between options of one node
        rates = {0.0}
        for ok in fits:
            for o in ok:
                for q in ok:
                    dm = (o.a * y + o.b) - (q.a * y + q.b)
                    if dm > 0 and q.p > o.p:
                        rates.add((q.p - o.p) / dm)
        rates = sorted(rates)
        if len(rates) > 12:
            rates = [rates[round(k * (len(rates) - 1) / 11)] for k in range(12)]
        P = np.full(len(self.E), -math.inf)
        for lam in rates:
            g = [min((o.p + lam * (o.a * y + o.b) for o in ok), default=math.inf) for ok in fits]
            total = sums.of(g)
            with np.errstate(invalid="ignore"):
                # the difference of two large sums: less their rounding (relative 2**-53 per
                # addition, far below 1e-12 of their size), so never above the true bound
                P = np.maximum(P, (total - lam * M) - 1e-12 * (total + lam * M))
        mem = sums.of(least_mem)
        P[~(mem <= M)] = math.inf
        return P, sums.of(least_w)

    def admissible(self, cutoff: float) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
        """Per pair (in the order given, see ``start``), a bitmask of the (t, d) at which its
        stage is admissible at ``cutoff`` by the relaxed TPS, and the bit of each (t, d)
        (a (t, d) without a bit, beyond 62 of them, is not decided here)."""
        self.needed(cutoff)
        ok = np.empty_like(self._bits)
        ok[self.order] = self._bits
        return ok, self.bit

    def needed(self, cutoff: float) -> np.ndarray:
        """D of every set (an int array over the set indices; K + 1 for no admissible
        front) for stages admissible at ``cutoff``."""
        K, N, B = self.K, self.N, self.B
        big = K + 1
        best = np.full(len(self.E), big, dtype=np.int64)
        self._bits = np.zeros(len(self.E), dtype=np.int64)
        self.bit = {}
        for t, ds in self.place:
            for d in ds:
                if self.gpipe:
                    P, W = self._relaxed[(t, N // d)]
                else:
                    P1, W1 = self._relaxed[(t, 1)]
                    P2, W2 = self._relaxed[(t, 2)]
                    P = np.where(self.y0 == 2, P2, P1)
                    W = np.where(self.y0 == 2, W2, W1)
                with np.errstate(invalid="ignore"):
                    tps = ((self.E / d + 4.0 * (d - 1) * W / (d * N)) / B + P / d) * _SAFETY
                if self.flush:
                    tps = tps * (N - 1 + d)
                ok = tps <= cutoff
                np.minimum(best, np.where(ok, t * d, big), out=best)
                if len(self.bit) < 62 or (t, d) in self.bit:  # (others: not filtered)
                    b = self.bit.setdefault((t, d), len(self.bit))
                    self._bits |= ok.astype(np.int64) << b
        D = np.full(self.n_sets, big, dtype=np.int64)
        D[self.full] = 0
        for lev in self.levels:
            cand = np.minimum(best[lev] + D[self.pj[lev]], big)
            np.minimum.at(D, self.pi[lev], cand)
        return D


def front_devices(
    inst: Instance,
    ideals: Sequence[int],
    pairs: SubsetPairs,
    succ: Sequence[int],
    d_values: Sequence[int],
    gpipe: bool,
    flush: bool,
) -> FrontDevices | None:
    """:class:`FrontDevices` over the DP's sets ``ideals``, or None
    when the graph has more than :data:`MAX_NODES` nodes or the pairs of sets number more
    than :data:`MAX_PAIRS`.

    ``pairs`` lists each set's subsets (:class:`dp.label_pairs.SubsetPairs`, which the DP
    walks too). With interchangeable branches, ``ideals`` are the canonical sets and a
    set's subsets one per orbit of its stabiliser, each with the index of its canonical
    set: an image of every pair of sets is among them, and D is the same on a set's whole
    orbit (the instance is the same after swapping branches)."""
    n = len(inst.nodes)
    if n > MAX_NODES or not ideals:
        return None
    try:
        full = list(ideals).index((1 << n) - 1)
    except ValueError:
        return None
    rows = []
    for j, J in enumerate(ideals):
        rows.extend((J, j, I, i) for I, i in pairs.of(j))
        if len(rows) > MAX_PAIRS:
            return None
    return FrontDevices(inst, len(ideals), rows, full, succ, d_values, gpipe, flush)
