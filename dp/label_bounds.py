"""Bounds for the label DP of :mod:`dp.modes`: a lower bound on what the stages still to be
put in front of a set add (the work left over the devices left).

A stage with degrees (t, d) has TPS >= (sum over its nodes of p at t) / d (cost model
sec. 3: the other terms are non-negative), so TPS t d >= sum of the nodes' *work*
w_v = min over t of t min_o p_(v, t, o). The stages in front of a set I hold the nodes
outside I on the devices left, K - k, so their largest TPS is at least
W(outside I) / (K - k), and there is no such stage at all when no device is left.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dp.stage_geometry import bits
from piper_ilp.instance import Instance

__all__ = ["node_work", "rest_work", "front_tps", "MaskSums"]


def node_work(inst: Instance) -> list[float]:
    """Per node position, the least device-seconds per sample of its options:
    min over t of t times the least p at t (0 for a node without options)."""
    out = []
    for v in inst.node_ids:
        opts = inst.node[v].options
        out.append(min((t * min(o.p for o in ol) for t, ol in opts.items() if ol), default=0.0))
    return out


def rest_work(ideals: Sequence[int], work: Sequence[float]) -> np.ndarray:
    """For every set of ``ideals`` (bitmasks over node positions), the work of the nodes
    outside it (:func:`node_work`), and -1 for the whole graph (nothing left in front)."""
    full = (1 << len(work)) - 1
    out = np.empty(len(ideals))
    for i, I in enumerate(ideals):
        rest = full & ~I
        out[i] = math.fsum(work[v] for v in bits(rest)) if rest else -1.0
    return out


def front_tps(rest: float, K: int, k: np.ndarray) -> np.ndarray:
    """A lower bound on the largest TPS of the stages still to be put in front of a set
    whose outside work is ``rest`` (:func:`rest_work`), per label using ``k`` devices:
    ``rest / (K - k)``, inf when no device is left, 0 when nothing is left.

    Examples
    --------
    >>> front_tps(6.0, 8, np.array([2, 5, 8])).tolist()
    [1.0, 2.0, inf]
    >>> front_tps(-1.0, 8, np.array([8])).tolist()
    [0.0]
    """
    if rest < 0:
        return np.zeros(len(k))
    left = K - k
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(left > 0, rest / np.where(left > 0, left, 1), math.inf)
    return out


class MaskSums:
    """Sums of per-node values over node sets given as bitmasks, by tables of 8-bit chunks
    (a few look-ups per set, not one per node). Plain float sums: for bounds.

    Examples
    --------
    >>> MaskSums([1.0, 2.0, 4.0]).of(0b101)
    5.0
    """

    def __init__(self, values: Sequence[float]):
        self.tables = []
        for lo in range(0, len(values), 8):
            chunk = list(values[lo : lo + 8])
            table = [0.0] * 256
            for m in range(1, 256):
                low = (m & -m).bit_length() - 1
                table[m] = table[m & (m - 1)] + (chunk[low] if low < len(chunk) else 0.0)
            self.tables.append(table)

    def of(self, mask: int) -> float:
        """The sum over the set bits of ``mask``."""
        total = 0.0
        for table in self.tables:
            total += table[mask & 255]
            mask >>= 8
        return total
