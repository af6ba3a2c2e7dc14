"""What every part of the stage-table builder reads (cost model secs. 4 and 7): the allowed
(t, d) with each d's cap on y, the memory limits of the float decisions, each (node, t)'s
options summed up for the stage states (:class:`StageContext`), and how much work the
builder does per numpy pass (:class:`BuildBatches`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dp.knapsack import pareto_mask
from dp.memory import fits_certainly_limit, fits_possibly_limit, float_band, kept_row_limit
from piper_ilp.instance import Instance

__all__ = ["StageContext", "BuildBatches", "FILTER_LOW_BITS"]

#: The frontier filters compare memory with this many low mantissa bits cleared
#: (:func:`dp.memory.truncate_low_bits`): choices whose memory is exactly the same (the
#: same layer recomputed at another place) have float sums that differ in the last bits,
#: and kept both, a third more rows on ResNet-50. The decisions allow for it
#: (:func:`dp.memory.kept_row_limit`).
FILTER_LOW_BITS = 10


@dataclass(frozen=True)
class BuildBatches:
    """How many stages, sets, pairs and points the builder handles per numpy pass, and how
    much it remembers. The tables never depend on them (every state is made from one
    parent by the same float operations, whatever the batches); they trade memory for
    fewer Python-level steps.

    Attributes
    ----------
    stages, sets, pairs : int
        Exact mode queues the stages and makes their states and rows many per numpy pass,
        once this many stages, sets I or pairs (I, J) wait.
    points : int
        Exact mode makes the rows of plain stages in pieces of about this many frontier
        points (:func:`dp.knapsack.pieces`).
    extend_rows : int
        Exact mode extends the states in pieces of about this many new frontier rows
        (:class:`dp.exact_states.ExactStates`).
    memo_points : int
        The builder remembers the state of every stage C it has made (so a stage shared
        by many pairs (I, J) is made once) until its states and their frontier rows pass
        this many (exact mode: about 40 bytes per row; greedy mode counts the states);
        then it forgets them all and goes on.
    block_elements : int
        Sets x sets of the family the subset test of the candidate pairs holds at once
        (bytes of a bool matrix, plus the pairs it keeps).
    """

    stages: int = 16_384
    sets: int = 16_384
    pairs: int = 131_072
    points: int = 50_000
    extend_rows: int = 1 << 21
    memo_points: int = 1_000_000
    block_elements: int = 1 << 20


class StageContext:
    """The read-only facts the parts of the stage-table builder share.

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions.
    ideals : list of int
        The family of successor-closed sets (bitmasks, by size).
    d_values : list of int
        The allowed data-parallel degrees.
    S : int
        min(N, K), the largest suffix sum of d (and the largest y).
    ub : float, optional
        An upper bound on the optimum; kept as ``ub`` only when 0 < ub < inf (a bound of
        0 prunes nothing by work: every stage may then cost 0, and work / ub would divide
        by zero).
    plain_paths : bool
        Treat nodes whose options differ only in p, a, b as "plain" (the fast paths);
        False: every node is general.
    check : callable
        Raises :class:`dp.deadline.TimeUp` past the solve's time limit.

    Attributes
    ----------
    ds, cap : dict
        Per t, the allowed d (t d <= K, d <= S) and each one's cap on y, ceil(S / d).
    mem_sure, mem_maybe, mem_kept : float
        Float memory sums at most ``mem_sure`` fit for certain, above ``mem_maybe`` fit
        for certain not; a frontier row kept by the filters (:data:`FILTER_LOW_BITS`) may
        stand for a choice that needs a little less, so on such rows the exact sums
        decide up to ``mem_kept`` (:mod:`dp.memory`).
    plain : dict
        Per (node position, t): all options differ only in p, a, b.
    node_t : dict
        Per (node position, t): (plain, least a + b, w of the first option, the options
        as rows (p, a, b, a + b, S a + b) without those dominated in (p, memory at y = 1,
        memory at y = S)).
    """

    def __init__(
        self,
        inst: Instance,
        ideals: list[int],
        d_values: list[int],
        S: int,
        *,
        ub: float | None,
        plain_paths: bool,
        check: Callable[[], None],
    ):
        self.inst = inst
        self.ub = ub if ub is not None and 0.0 < ub < math.inf else None
        self.check = check
        self.ideals = ideals
        self.S = S
        self.N, self.B, self.M, self.K = inst.N, inst.B, inst.M, inst.K
        self.ids = inst.node_ids
        n = len(self.ids)
        # float memory sums decide only away from the boundary (dp.memory)
        band = float_band(2 * n + 2)
        self.mem_sure = fits_certainly_limit(self.M, band)
        self.mem_maybe = fits_possibly_limit(self.M, band)
        # decisions on frontier rows: a row kept by the filters (at most one drop per node
        # added, per option group and for the node's own options) may stand for a choice
        # that needs a little less; between mem_maybe and this, the exact sums decide
        self.mem_kept = kept_row_limit(self.M, band, 2 * n + 2, FILTER_LOW_BITS)
        self.t_values = inst.t_values
        self.ds = {
            t: np.array([d for d in d_values if t * d <= self.K and d <= S], dtype=np.int64)
            for t in self.t_values
        }
        self.cap = {t: -(-S // self.ds[t]) for t in self.t_values}
        self.plain: dict[tuple[int, int], bool] = {}
        self.node_t: dict[tuple[int, int], tuple] = {}
        for i, nd in enumerate(inst.nodes):
            for t, opts in nd.options.items():
                o0 = opts[0]
                plain = plain_paths and all(
                    o.w == o0.w and dict(o.sfw) == dict(o0.sfw) and dict(o.sbw) == dict(o0.sbw)
                    for o in opts
                )
                rows = np.array(
                    [(o.p, o.a, o.b, o.a + o.b, S * o.a + o.b) for o in opts], dtype=float
                )
                # options dominated in (p, memory at y = 1, memory at y = S) never help
                pab = rows[pareto_mask(rows[:, (0, 3, 4)])] if len(rows) > 1 else rows
                self.plain[(i, t)] = plain
                self.node_t[(i, t)] = (plain, min(o.a + o.b for o in opts), o0.w, pab)
