"""Which pairs (I, J) of successor-closed sets name a candidate stage C = I \\ J (cost model
sec. 4): J inside I, C's least memory can fit, C and the parts in front of it and behind it
fit in K devices and N stages, and, with an upper bound ub on the optimum, can each cost
<= ub on K devices in all.
"""

from __future__ import annotations

import math

import numpy as np

from dp.stage_context import StageContext
from dp.stage_geometry import membership
from dp.table_arrays import sorted_unique

__all__ = ["CandidatePairs", "fewest_devices"]


def fewest_devices(
    work: np.ndarray,
    nonempty: np.ndarray | bool,
    mem: np.ndarray | float,
    ub: float,
    M: float,
    K: int,
) -> np.ndarray:
    """The fewest devices each part needs when every stage costs <= ``ub``, elementwise.

    lb(X) = max(1, ceil(work(X) / ub), ceil(least memory(X) / M)) for a non-empty part,
    0 for an empty one: each stage of a plan of value <= ub needs t d >= work / ub
    devices, and each stage of it holds at least its nodes' least a + b on a device of
    its own. Both ratios are lowered by 1e-9 relative and capped at K + 1 (more than any
    plan has, so a huge ratio never overflows ``ceil``).

    Parameters
    ----------
    work : numpy.ndarray
        Least device-seconds per sample of each part.
    nonempty : numpy.ndarray of bool, or bool
        Whether each part is non-empty.
    mem : numpy.ndarray or float
        Least memory of each part.
    ub : float
        The bound on every stage's cost (> 0).
    M : float
        Memory per device.
    K : int
        Devices.

    Returns
    -------
    numpy.ndarray of int64

    Examples
    --------
    >>> fewest_devices(np.array([0.0, 2.5, 9.0]), np.array([False, True, True]), 0.0,
    ...                ub=1.0, M=1.0, K=4).tolist()
    [0, 3, 5]
    """
    cap = K + 1
    by_work = np.minimum(work / ub * (1.0 - 1e-9), cap)
    by_mem = np.minimum(mem / M * (1.0 - 1e-9), cap)
    lb = np.maximum(np.maximum(1.0, np.ceil(by_work)), np.ceil(by_mem)).astype(np.int64)
    return np.where(nonempty, lb, 0)


class CandidatePairs:
    """The candidate stages of a family of successor-closed sets, set by set.

    Parameters
    ----------
    ctx : StageContext
        The family (``ctx.ideals``), the bound ``ctx.ub``, K, M, the allowed (t, d) and
        the float memory limit ``ctx.mem_maybe``.
    all_mask : int
        The set of every node.
    block_elements : int
        Sets x sets of the family the subset test holds at once.
    device_bound : bool
        Without an upper bound too, skip the pairs whose stage, front and back part cannot
        fit in K devices and N stages (True), or keep them (False: the tables then also
        count the devices of plans above K, as :meth:`ThresholdDecision.least_devices
        <dp.threshold_search.ThresholdDecision.least_devices>` needs).

    Attributes
    ----------
    work_of, front_work_of : numpy.ndarray
        Per set of the family, the least device-seconds per sample inside it and outside
        it (per node: min over t and options of t p), each a sum of its own non-negative
        terms.
    mem_of, front_mem_of : numpy.ndarray
        The same for the least memory (per node: min over t and options of a + b).
    """

    def __init__(
        self, ctx: StageContext, all_mask: int, block_elements: int, device_bound: bool = True
    ):
        inst = ctx.inst
        self.ctx = ctx
        self.device_bound = device_bound or ctx.ub is not None
        self.all_mask = all_mask
        self.block_elements = block_elements
        ideals = ctx.ideals
        n = len(ctx.ids)
        # work_v = least device-seconds per sample of node v (min over t, options of t p):
        # a stage C needs t d >= work(C) / T devices to cost <= T
        work_node = [
            min((t * o.p for t, opts in nd.options.items() for o in opts), default=0.0)
            for nd in inst.nodes
        ]
        # least memory of node v (min over t, options of a + b; every stage has y >= 1): a
        # part X needs at least sum / M stages, each on a device of its own
        mem_node = [
            min((o.a + o.b for opts in nd.options.values() for o in opts), default=0.0)
            for nd in inst.nodes
        ]
        member = membership(ideals, n)
        work = np.array(work_node, dtype=float)
        mem = np.array(mem_node, dtype=float)
        self.work_of = member @ work if n else np.zeros(len(ideals))
        self.mem_of = member @ mem if n else np.zeros(len(ideals))
        self.front_work_of = (1.0 - member) @ work if n else np.zeros(len(ideals))
        self.front_mem_of = (1.0 - member) @ mem if n else np.zeros(len(ideals))

    def by_set(self, masks: np.ndarray):
        """The kept pairs of each set I of the family, in order.

        A pair is skipped when the least memory of C's nodes cannot fit (then no option
        choice of any t does), and (``device_bound``) when C, the part in front of it and
        the part behind it need more than K devices (lb(C) = 1, lb of a part by its least
        memory, :func:`fewest_devices`) or more than N stages (one per non-empty part) in
        all. With an upper bound ub on the optimum, a stage C between a
        front part (all \\ I) and a back part J is kept only when lb(C) + lb(front) +
        lb(J) <= K (:func:`fewest_devices`; for C the work alone) and some allowed t d
        lies in C's device range. Work and memory of C are differences of the sets' sums,
        lowered by a bound on their rounding error, so every bound is a true lower bound.
        Made for blocks of sets at once (a subset test of blocks x sets).

        Parameters
        ----------
        masks : numpy.ndarray
            The family as words (:func:`dp.stage_geometry.set_words`).

        Yields
        ------
        k : int
            The index of I (>= 1, rising); sets with no plan within the bound are skipped.
        js : numpy.ndarray
            The indices of the sets J kept (rising).
        dev_lo, dev_hi : numpy.ndarray or None
            With an upper bound, each pair's device range [dev_lo, dev_hi] for t d; else
            None.
        """
        ctx = self.ctx
        ideals, ub, K = ctx.ideals, ctx.ub, ctx.K
        nI = len(ideals)
        n = len(ctx.ids)
        # differences of float sums of non-negative terms: error at most about 2 n eps of
        # the larger sum (each sum is within n eps of the exact one)
        rel_err = (2 * n + 8) * 2.0**-52
        work_of, mem_of = self.work_of, self.mem_of
        # device lower bounds of the part behind each stage (J) and in front of it (by
        # memory alone without an upper bound: every non-empty part has a stage, every
        # stage a device and d >= 1, so at most min(K, N) stages in all)
        ub_work = math.inf if ub is None else ub
        M = ctx.M
        nonempty = np.array([I != 0 for I in ideals], dtype=bool)
        lb_back = fewest_devices(work_of, nonempty, mem_of, ub_work, M, K)
        front_nonempty = np.array([(self.all_mask & ~I) != 0 for I in ideals], dtype=bool)
        lb_front = fewest_devices(
            self.front_work_of, front_nonempty, self.front_mem_of, ub_work, M, K
        )
        # the stages of I need at least ceil(work(I) / ub) devices in all (one without ub),
        # and the parts at least one stage each out of N
        live = lb_front + fewest_devices(work_of, True, 0.0, ub_work, M, K) <= K
        live &= front_nonempty.astype(np.int64) + 1 <= ctx.N
        if not self.device_bound:
            live[:] = True
        if ub is not None:
            slack = 1.0 - 1e-9
            all_devices = sorted_unique(
                np.concatenate(
                    [t * ctx.ds[t] for t in ctx.t_values] + [np.zeros(1, dtype=np.int64)]
                )
            )
        block = max(1, self.block_elements // max(nI, 1))
        for k0 in range(1, nI, block):
            ks = np.arange(k0, min(nI, k0 + block))
            ks = ks[live[ks]]
            if not len(ks):
                continue
            k1 = int(ks[-1])
            # inside[r, j]: J = ideals[j] (j < ks[r]) is a subset of I = ideals[ks[r]]
            inside = np.arange(k1)[None, :] < ks[:, None]
            for w in range(masks.shape[1]):
                inside &= (masks[None, :k1, w] & ~masks[ks, w][:, None]) == 0
            r, js = np.nonzero(inside)
            del inside
            kk = ks[r]
            mem_c = (mem_of[kk] - mem_of[js]) - rel_err * mem_of[kk]
            fit = mem_c <= ctx.mem_maybe
            r, js, kk = r[fit], js[fit], kk[fit]
            dev_lo = dev_hi = None
            # the stage, its front and its back part fit in K devices and N stages
            ok = lb_front[kk] + lb_back[js] + 1 <= K
            ok &= front_nonempty[kk].astype(np.int64) + nonempty[js] + 1 <= ctx.N
            if self.device_bound and not ok.all():
                r, js, kk = r[ok], js[ok], kk[ok]
            if ub is not None:
                work_c = np.maximum((work_of[kk] - work_of[js]) - rel_err * work_of[kk], 0.0)
                dev_lo = np.minimum(work_c / ub * slack, K + 1)
                lbc = np.maximum(1, np.ceil(dev_lo)).astype(np.int64)
                room = K - lb_front[kk] - lb_back[js]
                ok = lbc <= room
                # and some allowed t d lies in [dev_lo, room]
                at = np.minimum(np.searchsorted(all_devices, dev_lo), len(all_devices) - 1)
                ok &= all_devices[at] >= dev_lo
                ok &= all_devices[at] <= room
                r, js, dev_lo, dev_hi = r[ok], js[ok], dev_lo[ok], room[ok]
            cuts = np.searchsorted(r, np.arange(len(ks) + 1)).tolist()
            for i, k in enumerate(ks.tolist()):
                a, b = cuts[i], cuts[i + 1]
                if ub is None:
                    yield k, js[a:b], None, None
                else:
                    yield k, js[a:b], dev_lo[a:b], dev_hi[a:b]
