"""The (set, subset) pairs of the label DP of :mod:`dp.modes`, found once per solve: every run
of the DP (the guessed bounds, the last one) and the front bound of :mod:`dp.label_front`
walk the same subsets of each set in the same order.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dp.symmetry import Branches, sub_ideal_states

__all__ = ["SubsetPairs", "MAX_KEPT"]

#: Subsets kept in memory, over all sets (a few hundred bytes each); past it the subsets of
#: further sets are found again at each call.
MAX_KEPT = 1_000_000


class SubsetPairs:
    """Per set of the DP (an index into ``ideals``), its strict subsets that are sets of the
    DP: with interchangeable branches ``br`` one per orbit of the set's stabiliser
    (:func:`dp.symmetry.sub_ideal_states`, in its order), each with the index of its
    canonical set (``key_of(J, states)``); without, every set of ``ideals`` strictly inside
    it, ascending by index.

    Parameters
    ----------
    ideals : sequence of int
        The DP's sets (bitmasks over node positions).
    br : Branches or None
        The interchangeable branches, or None.
    pred : sequence of int
        Predecessor masks over node positions.
    key_of : callable, optional
        With ``br``: ``key_of(J, states)``, the index of the canonical set of J's orbit.
    max_kept : int
        Keep the subsets found while they number at most this, over all sets.

    Examples
    --------
    >>> pairs = SubsetPairs([0, 0b01, 0b11], None, [0, 1])
    >>> pairs.of(2)
    [(0, 0), (1, 1)]
    """

    def __init__(
        self,
        ideals: Sequence[int],
        br: Branches | None,
        pred: Sequence[int],
        key_of=None,
        max_kept: int = MAX_KEPT,
    ):
        self.ideals, self.br, self.pred, self.key_of = ideals, br, pred, key_of
        self.max_kept = max_kept
        self.kept: dict[int, list[tuple[int, int]]] = {}
        self.total = 0
        self._arr = None
        if br is None and max((I.bit_length() for I in ideals), default=0) <= 62:
            self._arr = np.array(ideals, dtype=np.int64)

    def of(self, i: int) -> list[tuple[int, int]]:
        """The subsets of set ``i``: a list of (bitmask, index of its set)."""
        got = self.kept.get(i)
        if got is not None:
            return got
        I = self.ideals[i]
        if self.br is not None:
            got = [(J, self.key_of(J, st)) for J, st in sub_ideal_states(self.br, I, self.pred)]
        elif self._arr is not None:
            sub = np.flatnonzero((self._arr & ~np.int64(I)) == 0)
            got = [(self.ideals[j], int(j)) for j in sub if j != i]
        else:
            got = [(J, j) for j, J in enumerate(self.ideals) if J != I and not J & ~I]
        if self.total + len(got) <= self.max_kept:
            self.kept[i] = got
            self.total += len(got)
        return got
