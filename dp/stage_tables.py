"""The candidate stages of the DP and their cost tables (step 2 of the DP, cost model sec. 4).

Entry point: :func:`build_stage_tables`. The parts: :mod:`dp.stage_candidates` (which pairs
(I, J) name a stage), :mod:`dp.exact_tables` or :mod:`dp.greedy_tables` (each stage's least
cost as a step function of y), :mod:`dp.table_store` (the flat arrays they fill), with
:mod:`dp.stage_context` and :mod:`dp.stage_geometry` shared by all.
"""

from __future__ import annotations

from dp.deadline import Deadline
from dp.exact_tables import ExactTables
from dp.greedy_tables import GreedyTables
from dp.option_choice import OptionChoices
from dp.stage_candidates import CandidatePairs
from dp.stage_context import BuildBatches, StageContext
from dp.stage_geometry import StageGeometry, set_words
from dp.table_store import StageTables
from piper_ilp.instance import Instance

__all__ = ["build_stage_tables"]


def build_stage_tables(
    inst: Instance,
    ideals: list[int],
    d_values: list[int],
    S: int,
    greedy: bool,
    choices: OptionChoices,
    *,
    ub: float | None = None,
    progress=None,
    plain_paths: bool = True,
    max_bytes: float | None = None,
    group_bytes: int = 0,
    deadline: Deadline | None = None,
    batches: BuildBatches = BuildBatches(),
    device_bound: bool = True,
) -> StageTables:
    """The stage tables of every candidate stage I \\\\ J of the family ``ideals``.

    For every set I, a vectorised subset test over the family finds the sets J inside it;
    each pair kept (after the memory and upper-bound tests,
    :class:`dp.stage_candidates.CandidatePairs`) names a stage C = I \\\\ J. A stage's
    *state* -- its cut edges (a bitmask; the cut bytes E are the ``fsum`` of their terms,
    never a running total), its weights W and (exact mode) the Pareto frontier of its
    option choices (sums of p, a, b) -- is made from the state of C minus one node without
    successors in C, and remembered per C. For every (t, d) the stage's least cost is a
    step function of y with few corners (exact mode: made once per (C, t) and shared by
    every pair with that C, :class:`dp.exact_tables.ExactTables`), or Piper's rule for
    each y (greedy mode, :class:`dp.greedy_tables.GreedyTables`, on the original planner's
    floats, per stage and d). Memory decisions are exact (sec. 7): float sums decide away
    from the boundary, :class:`dp.option_choice.OptionChoices` (exact integer sums) near it
    (greedy mode: the rule's own running sums, and the choice it takes must fit exactly
    too); the frontier
    filters compare memory with a few low bits cleared
    (:data:`dp.stage_context.FILTER_LOW_BITS`), so every decision on a frontier row treats
    values up to :func:`dp.memory.kept_row_limit` as near the boundary. Each state comes
    from one parent by the same float operations, whatever the batches, so the tables do
    not depend on ``batches``.

    Parameters
    ----------
    inst : Instance
        The instance after the restrictions.
    ideals : list of int
        Successor-closed sets as bitmasks, by size (the empty set first, the whole graph
        last); every I \\\\ J with I, J in the family and J inside I is a candidate.
    d_values : list of int
        The allowed data-parallel degrees (divisors of N, at most S).
    S : int
        min(N, K), the largest suffix sum of d.
    greedy : bool
        Piper's rule (sec. 5) instead of the exact choice.
    choices : OptionChoices
        The memo of exact choices, used near the memory boundary.
    ub : float, optional
        An upper bound on the optimum: stages that cannot be in a plan of value <= ub
        (device lower bounds from work / ub and least memory / M) are skipped.
    progress : callable, optional
        Called with the number of sets done.
    plain_paths : bool
        Use the fast paths for nodes whose options differ only in p, a, b (False: treat
        every node as general; the same tables, slower; for tests).
    max_bytes : float, optional
        Refuse (SizeLimitError, one line saying what to change) as soon as the tables pass
        this many bytes while being built; None: no limit.
    group_bytes : int
        Bytes per candidate stage that the caller will add (the decision's own arrays),
        counted against ``max_bytes`` too.
    deadline : Deadline, optional
        Checked per set and per stage made.
    batches : BuildBatches
        How much the builder does per numpy pass and remembers (the tables are the same
        for any).
    device_bound : bool
        Skip the stages that cannot be part of a plan within K devices and N stages (by
        the least memory of the parts around them), even without ``ub``; False keeps them
        (for the fewest devices of any plan, above K too).

    Returns
    -------
    StageTables
        Finalized, with ``pairs`` (the pairs (I, J) kept with some row), ``work_of`` and
        ``front_work_of`` (per set: least device-seconds per sample inside it and outside
        it).

    Raises
    ------
    SizeLimitError
        The tables passed ``max_bytes``.
    TimeUp
        The deadline passed (:class:`dp.deadline.TimeUp`).

    Notes
    -----
    Symbols: I, J successor-closed sets (bitmasks over node positions), C = I \\\\ J the
    stage, t, d the degrees, y microbatches in flight, S = min(N, K) the largest suffix
    sum of d, E cut-edge bytes, W sum of w, P sum of p, a and b memory per microbatch and
    constant.
    """
    check = deadline.check if deadline is not None else Deadline(None).check
    ctx = StageContext(inst, ideals, d_values, S, ub=ub, plain_paths=plain_paths, check=check)
    geo = StageGeometry(inst)
    tables = StageTables(max_bytes, inst.source, group_bytes, max_y=S)
    candidates = CandidatePairs(ctx, geo.all_mask, batches.block_elements, device_bound)
    masks = set_words(ideals, len(ctx.ids))
    if greedy:
        part = GreedyTables(ctx, geo, tables, masks, batches)
    else:
        part = ExactTables(ctx, geo, tables, choices, masks, ub, batches)
    progress = progress or (lambda k: None)
    for k, js, dev_lo, dev_hi in candidates.by_set(masks):
        progress(k)
        check()
        part.add_set(k, ideals[k], js, dev_lo, dev_hi)
    progress(len(ideals) - 1)  # (sets that no plan within the bound reaches are skipped)
    part.finish()
    tables.finalize()
    tables.pairs = part.pairs
    tables.work_of = candidates.work_of
    tables.front_work_of = candidates.front_work_of
    return tables
