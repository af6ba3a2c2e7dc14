"""The exact DP in every mode other than the default (graph pipelining, the batch-time
objective, the ``gpipe`` memory rule; cost model secs. 8 and 9), under either in-flight rule
(sec. 11): :func:`solve_modes`, a label DP over the successor-closed sets of
:mod:`dp.ideals`, called by :func:`dp.solver.solve_dp`.
"""

from __future__ import annotations

import bisect
import math
import time
from typing import Sequence

import numpy as np

from dp.deadline import Deadline
from dp.ideals import DEFAULT_MAX_IDEALS, enumerate_ideals, successor_masks
from dp.knapsack import exact_choice, monotone_runs, stage_items
from dp.label_bounds import MaskSums, front_tps, node_work, rest_work
from dp.label_front import front_devices
from dp.label_orbits import canonical_rows, column_runs, frame_columns
from dp.label_pairs import SubsetPairs
from dp.option_choice import OptionChoices
from dp.stage_geometry import bits
from dp.symmetry import Branches, canonical_ideals, find_branches
from dp.threshold_dp import solve_threshold_dp
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance, human_bytes, topological_order
from piper_ilp.mode import Mode
from piper_ilp.pipeline import front_in_flight
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = [
    "solve_modes",
    "frontier_width",
    "frontiers",
    "predecessor_masks",
    "DEFAULT_MAX_FRONTIER",
    "DEFAULT_MAX_LABELS",
]

#: Refuse (unless forced) graph pipelining when some ideal has more frontier nodes than this.
DEFAULT_MAX_FRONTIER = 8

#: Refuse (unless forced) as soon as the DP keeps more labels than this in total.
DEFAULT_MAX_LABELS = 3_000_000

#: A partial plan is pruned when its value exceeds the upper bound by more than this factor
#: (the DP's sums and the evaluator's differ by rounding only).
_PRUNE_MARGIN = 1 + 1e-12

#: Guessed upper bounds, as multiples of a lower bound on every plan's value
#: (:func:`_least_value` or the front bound's, :func:`_relaxed_least`), that the DP tries
#: before the plans of easier problems: pruned at a guess, the DP finds the optimum whenever
#: it is at most the guess (else no plan, and the next guess or the real bound follows).
#: The first is tried twice: without the front bound (quick where memory does not bind: the
#: bound's tables cost more than that run), then with it. The easier problems' plans can
#: cost far more than a run at a guess (towers 4x8 at M = 8 GiB: the threshold DP of 6,563
#: sets, past 60 CPU s, where the runs at 1.02-1.15 take 5-12 s each), so the guesses go on
#: to 1.4 times the lower bound.
_GUESSES = (1.02, 1.05, 1.1, 1.15, 1.25, 1.4)

#: Device counts and microbatch counts are compared as float64 in the dominance test.
_EXACT_INT = 2**53


def predecessor_masks(succ: Sequence[int]) -> list[int]:
    """For every node position, the bitmask of its direct predecessors, from ``succ``
    (:func:`dp.ideals.successor_masks`).

    Examples
    --------
    >>> predecessor_masks([0b110, 0b100, 0])
    [0, 1, 3]
    """
    pred = [0] * len(succ)
    for u, m in enumerate(succ):
        while m:
            low = m & -m
            pred[low.bit_length() - 1] |= 1 << u
            m ^= low
    return pred


def _descendants(succ: Sequence[int]) -> list[int]:
    """For every node position, the bitmask of the nodes it reaches (itself excluded)."""
    n = len(succ)
    # any topological order will do: each node after the nodes it reaches
    pos_order = topological_order({v: list(bits(succ[v])) for v in range(n)})
    reach = [0] * n
    for v in reversed(pos_order):
        m = succ[v]
        r = m
        for x in bits(m):
            r |= reach[x]
        reach[v] = r
    return reach


def frontiers(ideals: Sequence[int], succ: Sequence[int], pred: Sequence[int]) -> list[list[int]]:
    """For every ideal I, the frontier nodes whose stage's h (and L) the DP must remember,
    ascending.

    The frontier is the nodes of I with a predecessor outside I: a stage C put in front of
    I has as stage-graph successors the stages of I holding its nodes' successors, all
    frontier nodes. A frontier node w is left out when every predecessor u of w outside I
    also has a successor v != w in I that reaches w: whenever a stage in front holds u, it
    sees v too, and h[stage(v)] >= h[stage(w)] (and L likewise), because stage(v) is
    stage(w) or reaches it in the stage graph (h_i = d_i + max over successors, d_i >= 1;
    L_i = d_i TPS_i + max over successors, TPS_i >= 0). The v kept cover the w left out
    (follow the covers upwards; they end at a kept node). So for a chain with skip edges
    from one early node (BERT's attention mask feeds every layer) only the first node of
    the suffix is remembered."""
    reach = _descendants(succ)
    out = []
    for I in ideals:
        keep = []
        for w in bits(I):
            outside = pred[w] & ~I
            if not outside:
                continue
            covered = all(
                any(v != w and (reach[v] >> w) & 1 for v in bits(succ[u] & I))
                for u in bits(outside)
            )
            if not covered:
                keep.append(w)
        out.append(keep)
    return out


def frontier_width(instance: Instance, max_ideals: int = DEFAULT_MAX_IDEALS) -> int:
    """The largest frontier (nodes of a successor-closed set with a predecessor outside it)
    over all successor-closed sets: what graph pipelining's DP is exponential in."""
    ideals = enumerate_ideals(instance, max_ideals)
    pred = predecessor_masks(successor_masks(instance))
    return max((len(f) for f in frontiers(ideals, successor_masks(instance), pred)), default=0)


def _pareto(cols: np.ndarray) -> np.ndarray:
    """Indices of the rows of ``cols`` (n x c, all minimised) that no other row weakly
    dominates (exact duplicates keep one copy), ascending in lexicographic order."""
    n = len(cols)
    if n <= 1:
        return np.arange(n)
    order = np.lexsort(cols.T[::-1])
    s = cols[order]
    # drop exact duplicates, and rows equal to the previous one in every column but the
    # last (the previous one is no worse)
    same_head = np.all(s[1:, :-1] == s[:-1, :-1], axis=1)
    first = np.ones(n, dtype=bool)
    first[1:] = ~same_head
    order, s = order[first], s[first]
    n = len(s)
    if n <= 1:
        return order
    varying = (s != s[0]).any(axis=0)
    s = s[:, varying]
    if s.shape[1] == 0:
        return order[:1]
    if s.shape[1] == 1:
        return order[:1]  # sorted ascending: the first is the least
    if s.shape[1] == 2:
        prev_min = np.minimum.accumulate(s[:, 1])
        keep = np.ones(n, dtype=bool)
        keep[1:] = s[1:, 1] < prev_min[:-1]
        return order[keep]
    # k >= 3: a row is dominated iff some row before it (lexicographic order) is <= it in
    # every column; compare against the rows kept so far only (dominance is transitive)
    keep = np.zeros(n, dtype=bool)
    kept = np.empty((0, s.shape[1]))
    block = 256
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        chunk = s[lo:hi]
        if len(kept):
            dom = np.zeros(hi - lo, dtype=bool)
            step = max(1, 2_000_000 // (len(kept) * s.shape[1] + 1))
            for a in range(0, hi - lo, step):
                b = min(hi - lo, a + step)
                dom[a:b] = np.any(np.all(kept[None, :, :] <= chunk[a:b, None, :], axis=2), axis=1)
        else:
            dom = np.zeros(hi - lo, dtype=bool)
        # inside the chunk: row r against earlier rows of the chunk
        idx = np.flatnonzero(~dom)
        sub = chunk[idx]
        le = np.all(sub[None, :, :] <= sub[:, None, :], axis=2)  # le[r, q]: q <= r
        le &= np.arange(len(idx))[None, :] < np.arange(len(idx))[:, None]
        ok = ~np.any(le, axis=1)
        keep[lo + idx[ok]] = True
        kept = np.vstack([kept, sub[ok]])
    return order[keep]


class _Labels:
    """The labels of one ideal: ``cols`` (n x c float64, all minimised: k, the h columns,
    mx, then the path columns) and the back-pointers (previous ideal index, label index
    there, t, d, y; with interchangeable branches also ``g``, per label the branch
    permutation from the previous ideal's frame to this one's)."""

    __slots__ = ("cols", "prev", "prev_label", "t", "d", "y", "g")

    def __init__(self, cols, prev, prev_label, t, d, y, g=None):
        self.cols, self.prev, self.prev_label, self.t, self.d, self.y = (
            cols,
            prev,
            prev_label,
            t,
            d,
            y,
        )
        self.g = g

    def __len__(self) -> int:
        return len(self.cols)


def solve_modes(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    mode: Mode,
    knapsack: str = "exact",
    max_ideals: int = DEFAULT_MAX_IDEALS,
    max_frontier: int = DEFAULT_MAX_FRONTIER,
    max_labels: int = DEFAULT_MAX_LABELS,
    force: bool = False,
    prune: bool = True,
    symmetry: bool = True,
    deadline: Deadline | None = None,
) -> Solution:
    """Optimal plan under ``mode`` (any mode; :func:`dp.solver.solve_dp` uses it for the
    non-default ones) by a label DP over successor-closed sets (see Notes).

    Parameters
    ----------
    instance, restrictions
        As for :func:`dp.solver.solve_dp`.
    mode : Mode
        Pipelining, objective, schedule and in-flight rule.
    knapsack : {"exact"}
        Only the exact option choice: Piper's greedy rule (sec. 5) belongs to the default
        mode, so ``"greedy"`` is refused with :class:`InputError`.
    max_ideals : int
        Refuse graphs with more successor-closed sets than this.
    max_frontier, max_labels, force
        The size guards (see Notes; ``force`` lifts both).
    prune : bool
        Drop partial plans that cannot beat an upper bound (guessed, then from easier
        problems' plans: see Notes); exact either way (False: for measuring).
    symmetry : bool
        Solve each orbit of sets under interchangeable branches once (see Notes); exact
        either way (False: the DP without it, for measuring and comparing).
    deadline : Deadline, optional
        Checked per pair of sets: past it, the answer is the upper bound's plan (status
        FEASIBLE) or nothing (UNKNOWN), ``info["stopped"]`` set, ``bound`` the best lower
        bound proved so far (the work bound, the front bound's least cutoff, the largest
        guess a run ended with no plan at; see Notes); never OPTIMAL. The guesses and the
        last run share it.

    Returns
    -------
    Solution
        method ``"dp"``, ``mode`` set; status OPTIMAL with ``objective`` = ``bound`` = the
        evaluator's value of the plan under the mode, or INFEASIBLE when no plan exists.
        ``info``: ideals, frontier_width, labels (kept, all ideals), candidates (labels
        generated), largest_label_set, knapsack_solves (exact knapsacks solved), dp_value;
        upper_bound (the bound pruned with) and, when tried, guesses (the guessed bounds;
        the counts are the last run's, knapsack_solves all runs').

    Raises
    ------
    InputError
        ``knapsack`` other than ``"exact"``; ``restrictions.uniform`` (uniform degrees are
        :func:`dp.solver.solve_dp`'s, one run per (t, d) pair).
    SizeLimitError
        Too many successor-closed sets, too wide a frontier or too many labels (unless
        ``force``).

    Notes
    -----
    An ideal I holds the later stages of the pipeline; a transition peels a stage C = I \\ J
    off the front of I (J an ideal strictly inside I, placed after C) with degrees (t, d).
    For every ideal the DP keeps a set of *labels*, each a partial plan of I summarised by
    what the stages in front of it can still see, every coordinate minimised:

    * ``k``: devices used, sum t d (<= K);
    * the microbatches in flight that a stage put in front depends on:

      - sequential pipelining: ``s`` = sum of d (a stage C in front holds h_C = d_C + s);
      - graph pipelining: for every *frontier* node v of I (a node of I with a predecessor
        outside I), the h of the stage holding v. A stage C in front has as stage-graph
        successors exactly the stages of I holding successors of C's nodes, and these are
        frontier nodes, so h_C = d_C + max over v in succ(C) of h[v] (sec. 8);

      under the in-flight rule of sec. 11 the same coordinates hold q instead of h: a
      stage C in front holds q_C = d_C ceil((d_C + max q) / d_C)
      (:func:`piper_ilp.pipeline.front_in_flight`), y = q_C / d_C, and q <= N is the
      batch limit;

    * ``mx``: the largest stage TPS so far;
    * batch time only: sequential, ``tau`` = sum of d TPS (the only stage-graph path is all
      the stages); graph, ``Lmax`` = the longest path of d TPS from any stage of I, and for
      every frontier node v the longest path L[v] from the stage holding v (a stage in front
      gets L_C = d_C TPS_C + max over v in succ(C) of L[v]).

    The value of a complete plan is ``mx`` (throughput) or (N - 1) ``mx`` + ``tau`` /
    ``Lmax`` (sec. 9). Every coordinate can only help the stages in front when it is smaller
    (a smaller h gives a smaller y = ceil(h / d), so at least the same option choices fit;
    fewer devices leave more; a smaller max or path never gives a larger value), so a label
    that another label of the same ideal weakly dominates in every coordinate is dropped:
    the DP is exact. Per stage the options are the exact knapsack at y
    (:class:`dp.option_choice.OptionChoices`, exact memory): the fastest options that fit
    minimise both the stage's TPS and its latency d TPS, so one choice serves every
    objective. y = ceil(h / d) under ``1f1b`` / ``1f1b-flush``, y = N / d under ``gpipe``
    (the suffix then only matters for the batch limit sum d <= N, or max h <= N).

    **Size: graph pipelining is exponential in the frontier width.** A sequential label
    has two integer coordinates (k, s); a graph label has one h (and, for batch time, one
    L) per frontier node, so the number of labels of an ideal can grow like min(N, K) **
    width. Two guards, both lifted by ``force=True`` (``--force``):

    * before the work: the widest frontier over all ideals above ``max_frontier`` (default
      :data:`DEFAULT_MAX_FRONTIER`) is refused in one line;
    * while it runs: more than ``max_labels`` labels kept in total (default
      :data:`DEFAULT_MAX_LABELS`) is refused as soon as it happens.

    **Interchangeable branches** (``symmetry=True``, :mod:`dp.symmetry`): chains that swap
    onto the instance itself (same options, edges and attachment) make the problem
    symmetric, and the labels of a set are those of its image with the frontier columns
    moved along. The DP then keeps one canonical set per orbit (the branches of a class in
    non-increasing state), the subsets J of a set I one per orbit of I's stabiliser (branches
    in the same state in I: how many advance, not which), and each label canonical under
    that stabiliser (:mod:`dp.label_orbits`: the branches' (h, L) columns sorted within each
    run of equal state, then compared by dominance as before). J's
    labels are read from its canonical set's, dealt out to J's branches every way that
    I's stabiliser does not identify; each label keeps the branch map to its predecessor's
    frame, and the rebuild composes them. Exact: every label of every set is an image of a
    kept one or dominated by one. Without such branches the DP is the plain one.

    **Bounds** (``prune=True``, :mod:`dp.label_bounds`). A partial plan's value only grows
    as stages are put in front, and the stages in front of a set I do the work outside I
    (w_v = min over t of t times the least p: TPS t d >= the stage's work, sec. 3) on the
    K - k devices left, one at least, so their largest TPS is at least W(outside I) /
    (K - k). A label whose value with that bound (throughput: max(mx, bound); batch time:
    N - 1 times it plus the path) exceeds the upper bound (with a 1e-12 rounding margin) is
    dropped, and a pair (I, J) is skipped before its labels are read when no (t, d) passes
    the same test at J's fewest devices. The *front bound* (:mod:`dp.label_front`, proof
    there) adds, per set, the fewest devices D that the stages in front need when each of
    them is within the cutoff by a relaxed TPS (least edge bytes, a Lagrangian bound on the
    option choice at the least y the stage can hold): a label of I on k devices with
    k + D(I) > K is dropped, and a pair (I, J) only tries the (t, d) at which its stage's
    relaxed TPS is within the cutoff. The upper bound is first a guess, 1.02 times W / K
    (times N - 1 for batch time) without the front bound, then 1.02, 1.05, 1.1, 1.15, 1.25
    and 1.4 times a lower bound on every plan's value (the larger of W / K, times N - 1
    for batch time, and the least cutoff at which the whole graph's D is at most K; a guess
    at most one already run with no plan is skipped): every plan of value at most the guess
    survives the pruning, so a run that ends with a plan has the optimum, and one that ends
    with none proves the optimum above the guess; then :func:`_upper_bound`'s plans of
    easier problems. Exact either way. The runs share their knapsacks, the (set, subset)
    pairs (:class:`dp.label_pairs.SubsetPairs`) and the front bound's tables.

    Measured numbers (labels, CPU seconds on fork-join graphs) are in docs/architecture.md,
    the GraphPipe-like models in docs/benchmarks.md.

    **Floats (sec. 7).** Memory is decided exactly by the knapsack. The DP's own sums
    (tau, L) add in another order than the evaluator's ``fsum``; they differ from the
    evaluated numbers only by rounding (relative ~1e-15), far inside the contract's 1e-9,
    and dominance keeps exact ties. The value reported is the evaluator's value of the
    returned plan (``info["dp_value"]`` is the DP's own), and ``bound`` equals it.
    """
    if restrictions.uniform:  # its plans would break the restriction (review39 F5)
        raise InputError(
            "solve_modes does not keep uniform degrees; dp.solver.solve_dp solves them (one "
            "run per (t, d) pair)"
        )
    kwargs = dict(
        knapsack=knapsack,
        max_ideals=max_ideals,
        max_frontier=max_frontier,
        max_labels=max_labels,
        force=force,
        prune=prune,
        symmetry=symmetry,
        deadline=deadline,
    )
    tried = []
    inst = restrictions.apply(instance)
    costs = _StepCosts(inst)  # the runs share their knapsacks
    lower = _least_value(inst, mode)
    above = -math.inf  # the largest guess a run ended with no plan at: the optimum is above
    if prune and knapsack == "exact":
        # under a time limit the guesses get all of it (a stopped guess leaves the easier
        # problems what is left); with half, a limit equal to the unlimited solve's own use
        # stopped a first guess that proves the optimum (test_dp_time_limit)
        runs = [(_GUESSES[0], False)] + [(f, True) for f in _GUESSES]
        for factor, front in runs if lower > 0 else ():
            sol = _solve(
                instance,
                restrictions,
                mode,
                **kwargs,
                guess=factor,
                costs=costs,
                front_bound=front,
                above=above,
            )
            if sol.info.get("skipped"):
                continue
            tried.append(sol.info["upper_bound"])
            if sol.info.get("stopped"):
                break  # out of time: the easier problems' plan, if any, is the answer
            if sol.plan is not None or sol.status is not Status.INFEASIBLE:
                sol.info["guesses"] = tried
                return sol
            above = max(above, sol.info["upper_bound"])
    proved = _proved_least(lower, above, costs, mode)
    sol = _solve(instance, restrictions, mode, **kwargs, costs=costs, lower=proved)
    if tried:
        sol.info["guesses"] = tried
    return sol


def _proved_least(lower: float, above: float, steps: "_StepCosts", mode: Mode) -> float | None:
    """The best lower bound on every plan's value proved so far (None when not positive):
    the work bound ``lower`` (:func:`_least_value`) and, when a run found it, the front
    bound's least cutoff (:func:`_relaxed_least`), each less 1e-9 for rounding, and
    ``above``, the largest guess a run ended with no plan at (that run kept every plan of
    value at most the guess, within the pruning's margin)."""
    relaxed = steps.front.get(_least_key(mode), 0.0)
    best = max(max(lower, relaxed) * (1 - 1e-9), above)
    return best if best > 0 else None


def _least_value(inst: Instance, mode: Mode) -> float:
    """A lower bound on every plan's value under ``mode``: the work of all nodes over all
    K devices (:mod:`dp.label_bounds`) is at most the largest TPS; batch time is at least
    N - 1 times it."""
    least = math.fsum(node_work(inst)) / inst.K
    return (inst.N - 1) * least if mode.batch_time else least


def _solve(
    instance: Instance,
    restrictions: Restrictions,
    mode: Mode,
    *,
    knapsack: str,
    max_ideals: int,
    max_frontier: int,
    max_labels: int,
    force: bool,
    prune: bool,
    symmetry: bool,
    deadline: Deadline | None,
    bound: float | None = None,
    guess: float | None = None,
    costs: "_StepCosts | None" = None,
    front_bound: bool = True,
    above: float = -math.inf,
    lower: float | None = None,
) -> Solution:
    """:func:`solve_modes` (one run); with ``bound`` an upper bound to prune with instead
    of :func:`_upper_bound`'s (a guess: then no plan means none at most the guess), with
    ``guess`` the bound ``guess`` times :func:`_least_value` or the front bound's least
    value (:func:`_relaxed_least`), whichever is larger (only the former, and no front
    bound, when ``front_bound`` is False); with ``costs`` the stage costs known from other
    runs on the same instance. A guessed bound at most ``above`` (a guess that a run ended
    with no plan at) is not run: the result is INFEASIBLE with ``info["skipped"]``.
    ``lower``, a lower bound on every plan's value proved by earlier runs, is the ``bound``
    of the answer when the ``deadline`` stops this run."""
    t0 = time.perf_counter()
    if knapsack != "exact":
        raise InputError(
            f"knapsack {knapsack!r} applies only to sequential/throughput/1f1b (either "
            f"in-flight rule); mode {mode.label} needs knapsack 'exact'"
        )
    inst = restrictions.apply(instance)
    choices = OptionChoices(inst, False)
    steps = costs if costs is not None else _StepCosts(inst)
    info: dict = {"knapsack": knapsack}

    def done(sol: Solution) -> Solution:
        sol.seconds = time.perf_counter() - t0
        sol.mode = mode
        sol.info = {**info, "knapsack_solves": steps.solves + len(choices), **sol.info}
        return checked_solution(instance, sol, restrictions=restrictions)

    sets = _Sets(instance, inst, restrictions, mode, max_ideals, symmetry, info)
    sets.check_width(instance.source, max_frontier, force)
    deadline = deadline or Deadline(None)
    if guess is not None:
        ub, ub_plan = guess * _guess_base(sets, mode, steps, front_bound), None
        if ub <= above:
            # a run at a guess at least this large ended with no plan: so would this one
            info["skipped"] = True
            return done(Solution("dp", Status.INFEASIBLE, message="guess skipped", mode=mode))
    elif not prune or bound is not None:
        ub, ub_plan = bound, None
    else:
        # an upper bound from plans of easier problems (exact pruning, see _upper_bound)
        ub, ub_plan = _upper_bound(instance, restrictions, mode, max_ideals, deadline, symmetry)
    info["upper_bound"] = ub
    pruning = _Pruning(sets, ub, front_bound, mode, steps)
    info["front_bound"] = pruning.need is not None
    run = _LabelRun(sets, pruning, steps, _subset_pairs(sets.ideals, sets.br, sets.pred, steps))
    if not run.fill(deadline, max_labels, force, instance.source, mode.label):
        info["stopped"] = "in the label DP"
        return done(_stopped(deadline, ub, ub_plan, mode, lower))
    info.update(labels=run.total, candidates=run.candidates, largest_label_set=run.largest)
    return done(_result(instance, sets, run, choices, mode, info))


def _guess_base(sets: "_Sets", mode: Mode, steps: "_StepCosts", front_bound: bool) -> float:
    """The lower bound that a run's guess multiplies: :func:`_least_value`, and with the
    front bound the larger of it and :func:`_relaxed_least`."""
    least = _least_value(sets.inst, mode)
    if front_bound:
        relaxed = _relaxed_least(
            sets.inst, sets.ideals, sets.br, sets.succ, sets.pred, sets.d_values, mode, steps
        )
        least = max(least, relaxed)
    return least


class _Sets:
    """The state space of one run of the label DP: the instance under the restrictions
    (``inst``), its successor-closed sets (``ideals``; with interchangeable branches ``br``,
    the canonical set of each orbit), their frontiers (``front``, :func:`frontiers`) and the
    columns of their labels (:meth:`layout`). Refuses (:class:`SizeLimitError`) device
    counts past float64's exact integers and too many sets; records ``ideals``,
    ``frontier_width`` (and ``branch_classes``) in ``info``."""

    def __init__(
        self,
        instance: Instance,
        inst: Instance,
        restrictions: Restrictions,
        mode: Mode,
        max_ideals: int,
        symmetry: bool,
        info: dict,
    ):
        self.inst = inst
        self.K, self.N = K, N = inst.K, inst.N
        S = min(N, K)
        self.graph, self.flush = mode.graph, mode.batch_time
        self.gpipe, self.rule = mode.schedule == "gpipe", mode.in_flight
        self.ids = ids = inst.node_ids
        self.t_values = t_values = list(inst.t_values)
        self.d_values = [d for d in restrictions.d_values(instance) if d <= S]
        budget = min(K, max(t_values, default=1) * S)
        if budget >= _EXACT_INT:
            raise SizeLimitError(
                f"{instance.source}: K = {K} with t up to {max(t_values)} and min(N, K) = {S} "
                "allows device counts beyond the exact range of the mode DP (2**53); lower K, "
                "N or the largest t"
            )
        self.succ = succ = successor_masks(inst)
        self.pred = pred = predecessor_masks(succ)
        self.br = find_branches(inst, succ, pred) if symmetry else None
        self.ideals = ideals = self._sets(instance.source, max_ideals, info)
        self.front = frontiers(ideals, succ, pred) if self.graph else [[] for _ in ideals]
        self._front_memo = dict(zip(ideals, self.front))
        self.width = max((len(f) for f in self.front), default=0)
        info.update(ideals=len(ideals), frontier_width=self.width)
        # nodes that have options for t, as a bitmask
        self.tmask = {
            t: sum(1 << i for i, v in enumerate(ids) if inst.node[v].options.get(t))
            for t in t_values
        }
        self.index = {I: i for i, I in enumerate(ideals)}

    def _sets(self, source: str, max_ideals: int, info: dict) -> list[int]:
        """The DP's sets: all successor-closed sets, or with branches one per orbit."""
        br = self.br
        if br is None:
            return enumerate_ideals(self.inst, max_ideals)
        got = canonical_ideals(br, self.succ, max_ideals)
        if got is None:
            raise SizeLimitError(
                f"{source}: the graph has more than {max_ideals:,} successor-closed "
                "sets up to its interchangeable branches (the DP's states), above the limit; "
                "raise the limit (max_ideals / --max-ideals) if memory and time allow"
            )
        info["branch_classes"] = [[len(c), br.length[c[0]]] for c in br.classes]
        return got

    def check_width(self, source: str, max_frontier: int, force: bool) -> None:
        """Refuse graph pipelining over a frontier wider than ``max_frontier`` (unless
        ``force``)."""
        if self.graph and self.width > max_frontier and not force:
            raise SizeLimitError(
                f"{source}: graph pipelining's DP keeps one h per frontier node (nodes of a "
                "successor-closed set with a predecessor outside it) and grows like min(N, K) "
                f"** width; this graph's widest frontier has {self.width} nodes, above the "
                f"limit of {max_frontier}; pass --force (force=True) if time allows"
            )

    def front_of(self, J: int) -> list[int]:
        """The frontier of the set ``J`` (a bitmask; any set, not only a stored one)."""
        got = self._front_memo.get(J)
        if got is None:
            got = frontiers([J], self.succ, self.pred)[0] if self.graph else []
            self._front_memo[J] = got
        return got

    def layout(self, i: int) -> tuple[int, int]:
        """(column of mx, number of columns) for set i. The columns: k | the h columns
        (sequential: s; graph: one per frontier node) | mx | the path columns (sequential
        batch time: tau; graph batch time: Lmax, then one L per frontier node)."""
        h = len(self.front[i]) if self.graph else 1
        extra = (1 + len(self.front[i]) if self.graph else 1) if self.flush else 0
        return 1 + h, 2 + h + extra


class _Pruning:
    """What one run prunes with at the upper bound ``ub`` (None: nothing): the cutoff (``ub``
    with the rounding margin :data:`_PRUNE_MARGIN`), the work outside each set (``rest_w``,
    :mod:`dp.label_bounds`), per t the least p of each node (``least_p``) and, with the front
    bound (:mod:`dp.label_front`), the fewest devices the stages in front of each set need
    (``need``) and each (set, subset) pair's admissible (t, d) (``pair_ok``, ``pair_bit``,
    ``pair_start``)."""

    def __init__(
        self, sets: _Sets, ub: float | None, front_bound: bool, mode: Mode, steps: "_StepCosts"
    ):
        self.sets = sets
        inst = sets.inst
        self.cutoff = cutoff = math.inf if ub is None else ub * _PRUNE_MARGIN
        # the work outside each set: the stages in front of it need that over the devices left
        self.rest_w = rest_work(sets.ideals, node_work(inst))
        # the devices the stages in front of each set need at least (dp.label_front)
        self.need, self.pair_ok, self.pair_bit, self.pair_start = None, None, {}, None
        fd = (
            None
            if cutoff == math.inf or not front_bound
            else _front_devices(
                inst, sets.ideals, sets.br, sets.succ, sets.pred, sets.d_values, mode, steps
            )
        )
        if fd is not None:
            self.need = fd.needed(cutoff)
            self.pair_ok, self.pair_bit = fd.admissible(cutoff)
            self.pair_start = fd.start
        # per t, the least p of each node (a lower bound on a stage's compute, so plain sums)
        self.least_p = {
            t: MaskSums(
                [min((o.p for o in inst.node[v].options.get(t, ())), default=0.0) for v in sets.ids]
            )
            for t in sets.t_values
        }
        self.front_factor = inst.N - 1 if sets.flush else 1

    def degrees(
        self, C: int, rw: float, k0: float, need_i: int, ok: int = -1
    ) -> list[tuple[int, list[int]]]:
        """The (t, the d) that a stage C in front of labels using at least ``k0``
        devices may take, with ``rw`` the work outside the set: t d <= the devices left
        (one kept for the stages in front when any are left), the stages in front at
        most the cutoff (their largest TPS at least ``rw`` over the devices left, growing
        with d), and this stage's TPS >= (sum of the least p) / d, which adds TPS
        (throughput) or (N - 1 + d) TPS (batch time) at least; with the front bound, the
        set's stages in front need ``need_i`` devices, and only the (t, d) whose bit
        (``pair_bit``) is set in ``ok`` have a relaxed TPS within the cutoff."""
        sets, cutoff, front_factor = self.sets, self.cutoff, self.front_factor
        K, N, flush, d_values = sets.K, sets.N, sets.flush, sets.d_values
        left = (K - 1 if rw >= 0 else K) - k0
        if self.need is not None:
            left = min(left, K - need_i - k0)
        if rw > 0 and cutoff < math.inf:
            # front_factor rw / (K - k0 - t d) <= cutoff
            left = min(left, K - k0 - front_factor * rw / cutoff)
        out = []
        for t in sets.t_values:
            if C & ~sets.tmask[t]:
                continue
            hi = bisect.bisect_right(d_values, left / t + 1e-9)
            lo = 0
            p = self.least_p[t].of(C)
            if cutoff < math.inf and p > 0:
                # p / d <= cutoff, or (N - 1) p / d + p <= cutoff
                room = cutoff - p if flush else cutoff
                if room <= 0:
                    continue
                lo = bisect.bisect_left(d_values, front_factor * p / room * (1 - 1e-9))
            ds = [
                d
                for d in d_values[lo:hi]
                if k0 + t * d <= K - (rw >= 0)
                and front_factor * _front_least(rw, K, k0 + t * d) <= cutoff
                and (N - 1 + d if flush else 1) * (p / d) <= cutoff
            ]
            if ok != -1:
                pair_bit = self.pair_bit
                ds = [d for d in ds if (t, d) not in pair_bit or (ok >> pair_bit[(t, d)]) & 1]
            if ds:
                out.append((t, ds))
        return out

    def within(self, i: int, new: np.ndarray, mxc: int) -> np.ndarray:
        """Which of the new labels ``new`` of set i (mx in column ``mxc``) may still end
        within the cutoff: their value with the stages in front at least the work outside
        over the devices left, and (front bound) the devices those stages need left."""
        sets = self.sets
        K, N = sets.K, sets.N
        top = np.maximum(new[:, mxc], front_tps(self.rest_w[i], K, new[:, 0]))
        lower = (N - 1) * top + new[:, mxc + 1] if sets.flush else top
        below = lower <= self.cutoff
        if self.need is not None:
            below &= new[:, 0] + self.need[i] <= K
        return below


class _Candidates:
    """The new labels of one set, block by block, before the dominance test: their columns
    and back-pointers (as in :class:`_Labels`)."""

    __slots__ = ("cols", "prev", "lab", "t", "d", "y", "g")

    def __init__(self):
        self.cols, self.prev, self.lab, self.t, self.d, self.y, self.g = ([] for _ in range(7))

    def add(self, cols, j: int, lab, g, t: int, d: int, y) -> None:
        """A block of labels: columns ``cols``, each from label ``lab`` of set ``j`` (branch
        maps ``g`` or None) with the stage in front at degrees (t, d) holding ``y``."""
        m = len(lab)
        self.cols.append(cols)
        self.prev.append(np.full(m, j))
        self.lab.append(lab)
        if g is not None:
            self.g.append(g)
        self.t.append(np.full(m, t))
        self.d.append(np.full(m, d))
        self.y.append(y)


def _no_labels(nc: int) -> _Labels:
    """The labels of a set that has none, with ``nc`` columns."""
    return _Labels(np.empty((0, nc)), *(np.empty(0, dtype=np.int64) for _ in range(5)))


class _LabelRun:
    """The labels of one run of the DP at one upper bound (:class:`_Pruning`), filled set by
    set in order of size by :meth:`fill`: ``labels`` per set (index into ``sets.ideals``),
    with the counts ``total`` (kept), ``candidates`` (made) and ``largest`` (one set's)."""

    def __init__(self, sets: _Sets, pruning: _Pruning, steps: "_StepCosts", pairs: SubsetPairs):
        self.sets, self.pruning, self.steps, self.pairs = sets, pruning, steps, pairs
        n = len(sets.ideals)
        self.labels: list[_Labels | None] = [None] * n
        _, nc0 = sets.layout(0)
        self.labels[0] = _Labels(
            np.zeros((1, nc0)),
            np.array([-1]),
            np.array([-1]),
            np.array([0]),
            np.array([0]),
            np.array([0]),
        )
        self.total, self.candidates, self.largest = 1, 0, 1
        self.by_size = sorted(range(n), key=lambda i: sets.ideals[i].bit_count())
        self.k_least = [0.0] * n  # per set, the fewest devices of its labels

    def fill(
        self, deadline: Deadline, max_labels: int, force: bool, source: str, label: str
    ) -> bool:
        """Make every set's labels; False when the ``deadline`` passed first (checked once
        per pair of sets). Refuses (:class:`SizeLimitError`) more than ``max_labels`` labels
        kept in total unless ``force``."""
        K, need = self.sets.K, self.pruning.need
        for i in self.by_size[1:]:
            if need is not None and need[i] > K:
                # no front of this set has every stage admissible at the cutoff
                self.labels[i] = _no_labels(self.sets.layout(i)[1])
                continue
            new = _Candidates()
            for J, j, cols, lab, g0, td in self._sources(i):
                if deadline.passed:
                    return False
                self._extend(i, J, j, cols, lab, g0, td, new)
            self._keep(i, new)
            if self.total > max_labels and not force:
                raise SizeLimitError(
                    f"{source}: the {label} DP keeps more than {max_labels:,} labels "
                    "(devices, microbatches in flight per frontier node, max TPS, paths) after "
                    f"{self.by_size.index(i) + 1:,} of {len(self.sets.ideals):,} "
                    "successor-closed sets; pass --force (force=True) if memory and time allow"
                )
        return True

    def _sources(self, i: int):
        """(J, stored ideal, its labels in J's frame, their label indices there, the
        branch maps or None, the degrees a stage I minus J may take) for every ideal J
        strictly inside ideal i (up to symmetry) with some degrees left by the bounds."""
        sets, pr, labels = self.sets, self.pruning, self.labels
        br = sets.br
        I = sets.ideals[i]
        rw = pr.rest_w[i]
        need_i = 0 if pr.need is None else int(pr.need[i])
        # the pairs' admissible (t, d), by position among the subsets (dp.label_front's
        # pairs walk them in this order)
        pair_ok = pr.pair_ok
        at = None if pair_ok is None else int(pr.pair_start[i])
        for J, j in self.pairs.of(i):
            ok = -1 if at is None else int(pair_ok[at])
            at = None if at is None else at + 1
            LJ = labels[j]
            if LJ is None or not len(LJ):
                continue
            td = pr.degrees(I & ~J, rw, self.k_least[j], need_i, ok)
            if not td:
                continue
            if br is None:
                yield J, j, LJ.cols, None, None, td
                continue
            Js, sigma = br.canonical(J)
            mxj, ncj = sets.layout(j)
            idxs, maps = frame_columns(
                br,
                I,
                J,
                sigma,
                sets.front_of(J),
                sets.front[j],
                mxj,
                ncj,
                sets.graph and sets.flush,
            )
            n = len(LJ)
            cols = (
                LJ.cols[:, idxs[0]]
                if len(idxs) == 1
                else np.vstack([LJ.cols[:, ix] for ix in idxs])
            )
            lab = np.tile(np.arange(n), len(idxs))
            yield J, j, cols, lab, np.repeat(np.array(maps), n, axis=0), td

    def _extend(self, i: int, J: int, j: int, cols, lab, g0, td, new: _Candidates) -> None:
        """Add to ``new`` the labels of set i made by putting the stage I minus J, at each
        (t, d) of ``td``, in front of the labels ``cols`` of J (in J's frame; ``lab`` their
        indices among set j's labels or None: the same; ``g0`` their branch maps or None)."""
        sets, pr = self.sets, self.pruning
        K, N, flush, cutoff = sets.K, sets.N, sets.flush, pr.cutoff
        C = sets.ideals[i] & ~J
        # a stage's costs are those of its image under interchangeable branches
        C_cost = C if sets.br is None else sets.br.canonical_nodes(C)
        mxc, nc = sets.layout(i)
        mxj, _ = sets.layout(j)
        k = cols[:, 0]
        # the stages still to come need a device each and do the work outside I
        k_cap = K - 1 if pr.rest_w[i] >= 0 else K
        h_after, l_after, src = self._after(i, J, C, cols, mxj)
        h_int = h_after.astype(np.int64)
        for t, ds in td:
            for d in ds:
                h = front_in_flight(d, h_int, sets.rule)
                ok = (k + t * d <= k_cap) & (h <= N)
                if not ok.any():
                    continue
                rows = np.flatnonzero(ok)
                if sets.gpipe:
                    y = np.full(len(rows), N // d, dtype=np.int64)
                else:
                    y = (h[rows].astype(np.int64) + d - 1) // d
                uy, inv = np.unique(y, return_inverse=True)
                cap = cutoff / (N - 1 + d) if flush else cutoff
                tps = self.steps.costs(C_cost, t, d, uy.tolist(), cap)[inv]
                fit = np.isfinite(tps)
                if not fit.any():
                    continue
                rows, tps, y = rows[fit], tps[fit], y[fit]
                old = cols[rows]
                la = None if l_after is None else l_after[rows]
                made = self._columns(nc, mxc, mxj, old, h[rows], tps, la, src, k[rows] + t * d, d)
                if cutoff < math.inf:
                    below = pr.within(i, made, mxc)
                    if not below.all():
                        made, rows, y = made[below], rows[below], y[below]
                        if not len(rows):
                            continue
                g = None if g0 is None else g0[rows]
                new.add(made, j, rows if lab is None else lab[rows], g, t, d, y)

    def _after(self, i: int, J: int, C: int, cols, mxj: int):
        """For the labels ``cols`` of J (mx in column ``mxj``) with the stage C put in front:
        the largest h over the stages of J that C feeds (sequential: s), under graph batch
        time the largest L over them (else None), and under graph pipelining where each
        frontier column of set i comes from (-1: C; else J's column; sequential: None)."""
        sets = self.sets
        if not sets.graph:
            return cols[:, 1], None, None
        pos_J = {v: c for c, v in enumerate(sets.front_of(J))}
        out = 0
        for v in bits(C):
            out |= sets.succ[v]
        out &= J
        # succ(C) are frontier nodes of J; the ones left out are covered by kept ones
        sc = [pos_J[v] for v in bits(out) if v in pos_J]
        h_after = cols[:, [1 + c for c in sc]].max(axis=1) if sc else np.zeros(len(cols))
        l_after = None
        if sets.flush:
            l0 = mxj + 2  # first L column of J
            l_after = cols[:, [l0 + c for c in sc]].max(axis=1) if sc else np.zeros(len(cols))
        src = [-1 if (C >> v) & 1 else pos_J[v] for v in sets.front[i]]
        return h_after, l_after, src

    def _columns(self, nc, mxc, mxj, old, hC, tps, l_after, src, k, d) -> np.ndarray:
        """The columns (``nc`` of them, mx at ``mxc``) of the labels made from J's labels
        ``old`` (mx at ``mxj``) by a stage in front on ``k`` devices in all, holding ``hC``,
        of TPS ``tps`` and d ``d`` (``l_after``, ``src``: see :meth:`_after`)."""
        sets = self.sets
        new = np.empty((len(old), nc))
        new[:, 0] = k
        if sets.graph:
            for c, s_ in enumerate(src):
                new[:, 1 + c] = hC if s_ < 0 else old[:, 1 + s_]
        else:
            new[:, 1] = hC
        new[:, mxc] = np.maximum(old[:, mxj], tps)
        if sets.flush:
            tau = d * tps
            if sets.graph:
                LC = tau + l_after
                new[:, mxc + 1] = np.maximum(old[:, mxj + 1], LC)
                for c, s_ in enumerate(src):
                    new[:, mxc + 2 + c] = LC if s_ < 0 else old[:, mxj + 2 + s_]
            else:
                new[:, mxc + 1] = old[:, mxj + 1] + tau
        return new

    def _keep(self, i: int, new: _Candidates) -> None:
        """Set i's labels: the candidates ``new`` (made canonical under the set's branch
        runs) that no other weakly dominates."""
        sets = self.sets
        mxc, nc = sets.layout(i)
        if not new.cols:
            self.labels[i] = _no_labels(nc)
            return
        cols = np.vstack(new.cols)
        self.candidates += len(cols)
        g = None
        if sets.br is not None:
            I = sets.ideals[i]
            runs = column_runs(sets.br, I, sets.front[i], sets.br.runs(I))
            cols, g = canonical_rows(cols, np.vstack(new.g), runs, mxc, sets.graph and sets.flush)
        keep = _pareto(cols)
        self.labels[i] = _Labels(
            cols[keep],
            np.concatenate(new.prev)[keep],
            np.concatenate(new.lab)[keep],
            np.concatenate(new.t)[keep],
            np.concatenate(new.d)[keep],
            np.concatenate(new.y)[keep],
            None if g is None else g[keep],
        )
        self.k_least[i] = float(self.labels[i].cols[:, 0].min()) if len(keep) else 0.0
        self.total += len(keep)
        self.largest = max(self.largest, len(keep))


def _stopped(
    deadline: Deadline,
    ub: float | None,
    ub_plan: Plan | None,
    mode: Mode,
    lower: float | None,
) -> Solution:
    """The answer of a run stopped by ``deadline``: the easier problems' plan ``ub_plan``
    of value ``ub`` (FEASIBLE), or nothing (UNKNOWN); either with ``bound`` the lower bound
    ``lower`` proved before (None: none)."""
    where = f"time limit of {deadline.seconds:g} s reached in the label DP"
    proved = "" if lower is None else f"; a proven lower bound {lower:.10g}"
    if ub_plan is None:
        return Solution(
            "dp", Status.UNKNOWN, bound=lower, message=f"{where}: no plan yet{proved}", mode=mode
        )
    if lower is not None and lower > ub:
        raise InternalError(
            f"dp ({mode.label}): its lower bound {lower!r} is above its plan's value {ub!r}"
        )
    return Solution(
        "dp",
        Status.FEASIBLE,
        plan=ub_plan,
        objective=ub,
        bound=lower,
        mode=mode,
        message=f"{where}: the best plan of the easier problems (not proven optimal){proved}",
    )


def _result(
    instance: Instance,
    sets: _Sets,
    run: _LabelRun,
    choices: OptionChoices,
    mode: Mode,
    info: dict,
) -> Solution:
    """The answer of a run that made every set's labels: INFEASIBLE when the whole graph
    has none, else the plan of its best label (OPTIMAL at the bound the run pruned with),
    checked against the evaluator; ``info["dp_value"]`` the DP's own value."""
    K, N = sets.K, sets.N
    full = sets.index[sets.ideals[run.by_size[-1]]]
    L = run.labels[full]
    if L is None or not len(L):
        msg = (
            f"no plan fits under {mode.label}: every split into stages breaks memory M = "
            f"{human_bytes(instance.M, repr(instance.M))} per device, the batch limit N = {N} "
            f"or K = {K} devices"
        )
        return Solution("dp", Status.INFEASIBLE, message=msg, mode=mode)
    mxc, _ = sets.layout(full)
    if sets.flush:
        values = (N - 1) * L.cols[:, mxc] + L.cols[:, mxc + 1]
    else:
        values = L.cols[:, mxc]
    best = int(np.argmin(values))
    info["dp_value"] = float(values[best])
    if sets.br is None:
        plan = _rebuild(sets.inst, sets.ideals, run.labels, full, best, choices)
    else:
        plan = _rebuild_orbits(sets.inst, sets.br, sets.ideals, run.labels, full, best, choices)
    ev = evaluate(instance, plan, mode)
    if not ev.valid:
        raise InternalError(f"dp ({mode.label}): its plan fails the evaluator: {ev.violations[0]}")
    value = ev.value
    if not math.isclose(value, info["dp_value"], rel_tol=1e-9, abs_tol=0.0):
        raise InternalError(
            f"dp ({mode.label}): its value {info['dp_value']!r} and the evaluator's {value!r} "
            "differ"
        )
    return Solution("dp", Status.OPTIMAL, plan=plan, objective=value, bound=value, mode=mode)


def _subset_pairs(ideals, br, pred, steps) -> SubsetPairs:
    """The :class:`dp.label_pairs.SubsetPairs` of the DP's sets, made once per solve and
    kept on ``steps`` (every run walks the same subsets)."""
    key = ("pairs", len(ideals), br is not None)
    if key not in steps.front:
        key_of = None
        if br is not None:
            where = {(I & br.core, tuple(br.states(I))): i for i, I in enumerate(ideals)}

            def key_of(J, st):
                return where[(J & br.core, br.canonical_states(st))]

        steps.front[key] = SubsetPairs(ideals, br, pred, key_of)
    return steps.front[key]


def _front_devices(inst, ideals, br, succ, pred, d_values, mode, steps):
    """The :class:`dp.label_front.FrontDevices` of the DP's sets, built once per solve and
    kept on ``steps``, or None (too many nodes or pairs)."""
    key = (len(ideals), mode.batch_time, mode.schedule == "gpipe")
    if key not in steps.front:
        pairs = _subset_pairs(ideals, br, pred, steps)
        steps.front[key] = front_devices(inst, ideals, pairs, succ, d_values, key[2], key[1])
    return steps.front[key]


def _relaxed_least(inst, ideals, br, succ, pred, d_values, mode, steps) -> float:
    """A lower bound on every plan's value: (nearly) the least cutoff at which the whole
    graph has an admissible front on K devices (:mod:`dp.label_front`), found by doubling
    and bisection from :func:`_least_value` (the value returned is a cutoff at which D of
    the empty set is still above K, so below every plan's value); 0 without the bound."""
    fd = _front_devices(inst, ideals, br, succ, pred, d_values, mode, steps)
    if fd is None:
        return 0.0
    key = _least_key(mode)
    got = steps.front.get(key)
    if got is not None:
        return got
    empty = list(ideals).index(0)
    lo = _least_value(inst, mode) * 0.999
    if lo <= 0 or fd.needed(lo)[empty] <= inst.K:
        steps.front[key] = 0.0
        return 0.0
    hi = lo * 2
    for _ in range(30):
        if fd.needed(hi)[empty] <= inst.K:
            break
        lo, hi = hi, hi * 2
    else:
        steps.front[key] = lo
        return lo
    while hi - lo > 1e-3 * lo:
        mid = (lo + hi) / 2
        if fd.needed(mid)[empty] <= inst.K:
            hi = mid
        else:
            lo = mid
    steps.front[key] = lo
    return lo


def _least_key(mode: Mode) -> tuple:
    """Where :func:`_relaxed_least` keeps its value on the runs' :class:`_StepCosts`."""
    return ("least", mode.batch_time, mode.schedule)


def _front_least(rest: float, K: int, k: float) -> float:
    """:func:`dp.label_bounds.front_tps` for one label."""
    if rest < 0:
        return 0.0
    return rest / (K - k) if K > k else math.inf


def _plan_or_none(
    instance: Instance,
    restrictions: Restrictions,
    mode: Mode,
    max_ideals: int,
    deadline: Deadline,
    symmetry: bool,
) -> Plan | None:
    """The label DP's plan under ``mode``, or None when a guard refuses."""
    try:
        return solve_modes(
            instance,
            restrictions,
            mode=mode,
            max_ideals=max_ideals,
            deadline=deadline,
            symmetry=symmetry,
        ).plan
    except SizeLimitError:
        return None


def _upper_bound(
    instance: Instance,
    restrictions: Restrictions,
    mode: Mode,
    max_ideals: int,
    deadline: Deadline,
    symmetry: bool = True,
) -> tuple[float | None, Plan | None]:
    """The least value under ``mode`` of plans that are quick to find, and that plan, or
    (None, None). Each easier solve gets what is left of the ``deadline`` (a plan it
    returns when stopped is still valid, so still a bound).

    * The default DP's plan (sequential, throughput, 1f1b, the same in-flight rule): valid
      under every 1f1b mode of that rule (graph pipelining holds h <= s microbatches, and
      q of sec. 11 under graph pipelining is at most its sequential q, so the same options
      fit). When the threshold DP refuses the graph for its number of sets, the label DP
      of that default mode, whose sets are counted up to interchangeable branches.
    * For graph pipelining, the plan of the same mode with sequential pipelining: valid
      (h <= s, max h <= sum d <= N, likewise q; gpipe holds N / d either way) and never
      worse under graph pipelining (a path of the stage graph is a part of all the stages).

    Each plan is judged by the evaluator under ``mode``; a guard refusal or an
    infeasible easier problem just gives no bound. Pruning with it is exact: a partial
    plan is dropped only when its value, which only grows as stages are added, is above
    the bound by more than rounding (:data:`_PRUNE_MARGIN`)."""
    plans = []
    default = Mode("sequential", "throughput", "1f1b", mode.in_flight)
    if mode.schedule != "gpipe":
        try:
            plans.append(
                solve_threshold_dp(
                    instance,
                    restrictions,
                    max_ideals=max_ideals,
                    time_limit=deadline.remaining(),
                    in_flight=mode.in_flight,
                ).plan
            )
        except SizeLimitError:
            # too many sets for the threshold DP: the label DP of the same problem counts
            # them up to interchangeable branches (refused the same way when there are none)
            if symmetry and mode != default:
                plans.append(
                    _plan_or_none(instance, restrictions, default, max_ideals, deadline, symmetry)
                )
    if mode.graph:
        seq = Mode("sequential", mode.objective, mode.schedule, mode.in_flight)
        if seq != default:
            plans.append(_plan_or_none(instance, restrictions, seq, max_ideals, deadline, symmetry))
    judged = [
        (ev.value, p)
        for p in plans
        if p is not None
        for ev in [evaluate(instance, p, mode)]
        if ev.valid
    ]
    return min(judged, key=lambda vp: vp[0], default=(None, None))


class _StepCosts:
    """A stage's least TPS as a function of y, read with few knapsack solves.

    For a stage (C, t, d) the exact choice's cost is non-decreasing in y (memory a y + b
    with a >= 0: the choices that fit at y + 1 fit at y), so when it is the same at two
    values of y it is the same at every y between them; between known values only the
    middle is solved (:func:`dp.knapsack.monotone_runs`). A cost above ``cap`` (useless
    under the upper bound) or no choice that fits reads as inf, and then so does every
    larger y.

    The costs are :func:`dp.knapsack.exact_choice`'s, on the stage's items built once per
    (C, t); the rebuild asks :class:`dp.option_choice.OptionChoices` (the same function)
    at the plan's y for the options themselves."""

    def __init__(self, inst: Instance):
        self.inst = inst
        self.items: dict[tuple[int, int], list] = {}
        self.known: dict[tuple[int, int, int], dict[int, float]] = {}
        self.solves = 0
        #: the front bound's tables (dp.label_front), shared by the runs of one solve
        self.front: dict = {}

    def _at(self, memo: dict[int, float], C: int, t: int, d: int, y: int) -> float:
        got = memo.get(y)
        if got is None:
            items = self.items.get((C, t))
            inst = self.inst
            if items is None:
                items = self.items[(C, t)] = stage_items(
                    inst, [inst.node_ids[v] for v in bits(C)], t
                )
            res = exact_choice(items, y, inst.M, d, inst.N, inst.B)
            self.solves += 1
            got = memo[y] = math.inf if res is None else res[0]
        return got

    def costs(self, C: int, t: int, d: int, ys: list[int], cap: float = math.inf) -> np.ndarray:
        """The costs at ``ys`` (ascending, distinct), inf where above ``cap`` or nothing fits."""
        memo = self.known.setdefault((C, t, d), {})

        def at(q: int) -> float:
            c = self._at(memo, C, t, d, ys[q])
            return c if c <= cap else math.inf

        out = np.empty(len(ys))
        for i, j, c in monotone_runs(len(ys), at):  # (capped, still non-decreasing)
            out[i : j + 1] = c
        return out


def _rebuild(inst: Instance, ideals, labels, i: int, r: int, choices: OptionChoices) -> Plan:
    """The plan of label ``r`` of ideal ``i``: stages in pipeline order, as peeled."""
    ids = inst.node_ids
    stages = []
    while i != 0:
        L = labels[i]
        j, rj = int(L.prev[r]), int(L.prev_label[r])
        t, d, y = int(L.t[r]), int(L.d[r]), int(L.y[r])
        C = ideals[i] & ~ideals[j]
        stages.append(_placed_stage(ids, choices, C, t, d, y))
        i, r = j, rj
    return Plan(tuple(stages))


def _placed_stage(ids, choices: OptionChoices, C: int, t: int, d: int, y: int) -> Stage:
    """The plan's stage for the node set ``C`` (a bitmask) placed at (t, d, y), with the
    option choice the labels were built with."""
    got = choices.choose(C, t, d, y)
    if got is None:
        raise InternalError(
            f"dp: no option choice for a stage it placed (t = {t}, d = {d}, y = {y})"
        )
    opts = got[1]
    nodes = tuple(ids[v] for v in bits(C))
    return Stage(nodes, d, t, {v: opts[v].id for v in nodes})


def _rebuild_orbits(
    inst: Instance, br: Branches, ideals, labels, i: int, r: int, choices: OptionChoices
) -> Plan:
    """:func:`_rebuild` when the labels are stored per orbit: label r of canonical ideal i
    is the stage ideals[i] minus g(J*) plus g's image of the plan of its previous label
    (J* = the previous canonical ideal, g = its stored branch map); ``phi`` carries the
    maps from the whole graph down."""
    ids = inst.node_ids
    stages = []
    phi = list(range(br.nb))
    while i != 0:
        L = labels[i]
        j, rj = int(L.prev[r]), int(L.prev_label[r])
        t, d, y = int(L.t[r]), int(L.d[r]), int(L.y[r])
        g = [int(x) for x in L.g[r]]
        C_here = ideals[i] & ~br.apply(g, ideals[j])
        where = br.node_map(phi)
        C = 0
        for v in bits(C_here):
            C |= 1 << int(where[v])
        stages.append(_placed_stage(ids, choices, C, t, d, y))
        phi = [phi[x] for x in g]
        i, r = j, rj
    return Plan(tuple(stages))
