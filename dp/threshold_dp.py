"""The Piper DP in the default mode (sequential pipelining, throughput, 1f1b; cost model
secs. 2-5), under either in-flight rule (sec. 11), exact or with Piper's greedy option
choice: :func:`solve_threshold_dp` runs its steps, each a module of its own.
:func:`dp.solver.solve_dp` is the entry point for every mode.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable

from dp.deadline import Deadline, TimeUp
from dp.ideals import DEFAULT_MAX_IDEALS, enumerate_ideals, suffix_ideals
from dp.label_bounds import node_work
from dp.option_choice import OptionChoices
from dp.progress import Progress
from dp.rebuild import rebuild_plan
from dp.stage_tables import build_stage_tables
from dp.threshold_search import (
    DECISION_GROUP_BYTES,
    DEFAULT_SMALL_S,
    DEVICES_INF,
    ThresholdDecision,
    decision_table_bytes,
    search_threshold,
)
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.instance import Instance, human_bytes
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = [
    "solve_threshold_dp",
    "DEFAULT_MAX_IDEALS",
    "DEFAULT_CHAIN_FIRST",
    "DEFAULT_MAX_TABLE_BYTES",
]

#: Above this many successor-closed sets, a chain-restricted DP first gives an upper bound
#: that prunes the full DP's stage candidates.
DEFAULT_CHAIN_FIRST = 1000

#: Refuse (unless forced) when one decision's tables, sets x (min(N, K) + 1) int64 device
#: counts and back-pointers, would need more than this many bytes.
DEFAULT_MAX_TABLE_BYTES = 2 * 2**30


def solve_threshold_dp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    knapsack: str = "exact",
    max_ideals: int = DEFAULT_MAX_IDEALS,
    progress: bool = False,
    force: bool = False,
    max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
    small_s: int = DEFAULT_SMALL_S,
    chain_first: int = DEFAULT_CHAIN_FIRST,
    plain_paths: bool = True,
    time_limit: float | None = None,
    in_flight: str = "piper",
    memory_bytes: float | None = None,
) -> Solution:
    """Optimal pipeline plan by Piper's DP over successor-closed sets (cost model sec. 4).

    Parameters
    ----------
    instance : Instance
        The profiled graph with K, M, B, N.
    restrictions : Restrictions
        Ablations and caps (max_d, max_t, excluded option ids).
    knapsack : {"exact", "greedy"}
        How each stage's options are chosen: ``"exact"`` solves the knapsack exactly (the
        DP is then exact: status OPTIMAL); ``"greedy"`` follows Piper's rule (sec. 5) to
        reproduce the original planner's numbers (status FEASIBLE: it proves nothing).
    max_ideals : int
        Refuse graphs with more successor-closed sets than this.
    progress : bool
        Show progress (sets done of the total, elapsed time) on stderr when it is a terminal.
    force : bool
        Skip the table-size guard (``max_table_bytes``); the tables are then held to
        ``memory_bytes`` instead.
    max_table_bytes : int
        Refuse when the decision tables, sets x (min(N, K) + 1) x 24 bytes (under
        ``in_flight="schedule"``: sets x (min(N, 2K - 1) + 1) x 24), exceed this, or
        when the stage tables and the decision's per-stage arrays pass what is left of it
        while they are built.
    small_s : int
        Up to this many columns min(N, K) + 1, a plan is read from the tables breaking
        ties between equal stages by their index; above it, by (d, J, index). Every
        choice gives an optimal plan.
    chain_first : int
        Above this many sets, first bound the optimum by the DP on the suffixes of one
        topological order and prune with it. When nothing below that bound fits, the
        answer is the chain DP's own plan: the value never depends on this setting, but
        among plans of equal value the one returned can.
    plain_paths : bool
        Use the fast paths for nodes whose options differ only in p, a, b (False treats
        every node as general: same answer, slower).
    time_limit : float, optional
        Seconds (wall clock) before the DP stops (:mod:`dp.deadline`). Stopped in the
        search, it returns the best plan in hand with a proven lower bound (status
        FEASIBLE, ``bound``); in the tables, the chain bound's plan if it has one (status
        FEASIBLE), else status UNKNOWN. Never OPTIMAL, and ``info["stopped"]`` says where.
    in_flight : {"piper", "schedule"}
        The in-flight budget (sec. 11): Piper's y = ceil(s / d) or the q / y that 1F1B
        keeps. The solution's ``mode`` records it.
    memory_bytes : float, optional
        With ``force``: refuse (one line naming the bytes and the limit) when the decision
        tables, or the stage tables and decision arrays while they are built, pass this
        many bytes, instead of letting the system kill the process. None: the machine's
        physical memory (:func:`machine_memory_bytes`; no limit where it is unknown).

    Returns
    -------
    Solution
        method ``"dp"`` or ``"dp-greedy"``; ``objective`` is the DP's value (the largest
        stage TPS), ``tps`` the evaluator's value for the plan. ``info`` holds the counts
        (ideals, stage_pairs, stage_candidates, thresholds, search_steps: the full
        search's decisions, none at the chain bound when it starts from the chain plan,
        option_choices: the (stage, t, d, y) option choices computed). When no plan fits,
        status INFEASIBLE with ``message`` naming the bound that is tight.

    Raises
    ------
    SizeLimitError
        More than ``max_ideals`` successor-closed sets, or tables above ``max_table_bytes``
        (unless ``force``).
    InputError
        Unknown ``knapsack``; greedy mode with more than two options for some (node, t).
    InternalError
        The plan failed the evaluator's check (a bug).

    Notes
    -----
    The problem: split the layer graph into pipeline stages C_1, ..., C_m (each a
    difference of two nested successor-closed sets), give each stage degrees (t, d) and
    each node an option, minimizing the largest stage TPS subject to sum d <= N, sum t d
    <= K and memory fsum (a y, b) <= M per stage (sec. 7), y = ceil(s / d), s the suffix
    sum of d; or, under the in-flight rule that the schedule keeps (sec. 11,
    ``in_flight="schedule"``), y = q / d with q = d ceil((d + q_next) / d) and q <= N (the
    same tables, another transition: see :mod:`dp.threshold_search`). It is solved in a
    parametric form of Piper's DP:

    1. :func:`dp.ideals.enumerate_ideals` -- the successor-closed sets (the states).
    2. :func:`dp.stage_tables.build_stage_tables` -- for every candidate stage I \\ J and
       every (t, d), the least cost as a step function of y (exact knapsack or Piper's
       rule).
    3. :func:`dp.threshold_search.search_threshold` -- the least threshold T at which a
       min-devices table over the sets fits in the device budget min(K, t_max min(N, K))
       (a plan never uses more than t_max min(N, K) devices). It first decides at the
       least bottleneck of any plan with the devices unbounded (a lower bound); where
       memory decides the optimum, that one decision is the answer.
    4. :func:`dp.rebuild.rebuild_plan` -- the plan read from the last feasible table, each
       stage's options from :class:`dp.option_choice.OptionChoices` (memoized per (stage,
       t, d, y)); the plan passes the independent evaluator.

    Above ``chain_first`` sets, the same steps on the suffixes of one topological order
    (:func:`dp.ideals.suffix_ideals`) first give a plan of value ub; the full tables then
    keep only stages that can be part of a plan of value <= ub (device lower bounds from
    work / ub and least memory / M), and the search starts from that chain plan: it
    decides only below ub (when ub is one of the full tables' candidates; else its first
    decision is at ub), and the chain plan is the answer when nothing below fits. Exact:
    every plan of value <= ub survives.

    Limits, refused with one line before the long work: more than ``max_ideals``
    successor-closed sets (a 21,000-node chain or a 3,000-branch fan is refused in about a
    second); decision tables (counted as two pairs f, bp, an upper bound on what the
    search holds: sets x (min(N, K) + 1) x 24 bytes) above ``max_table_bytes``, and stage
    tables plus the decision's per-stage arrays that pass what the decision tables leave
    of the same limit while they are built (refused as soon as they do, so the DP's arrays
    together stay within the limit); a device budget of 2**59 or more (64-bit device
    counts). ``force`` lifts ``max_table_bytes`` but holds the same two tests to
    ``memory_bytes`` (the machine's physical memory by default): past it the DP refuses in
    one line instead of being killed by the system.

    References
    ----------
    Tarnawski, Narayanan, Phanishayee. Piper: Multidimensional Planner for DNN
    Parallelization. NeurIPS 2021, sec. 4 (the DP) and sec. 5 (option choice).
    """
    deadline = Deadline(time_limit)  # (refuses a time limit out of range)
    t0 = time.perf_counter()
    if knapsack not in ("exact", "greedy"):
        raise InputError(f"knapsack must be 'exact' or 'greedy', got {knapsack!r}")
    greedy = knapsack == "greedy"
    method = "dp-greedy" if greedy else "dp"
    mode = Mode(in_flight=in_flight)
    inst = restrictions.apply(instance)
    if greedy:
        _refuse_beyond_the_rule(instance.source, inst)
    K, N = instance.K, instance.N
    S = min(N, K)  # the largest sum of d
    # the columns of the tables: the suffix sum s <= S, or sec. 11's q <= 2 sum d - 1
    cols = min(N, 2 * K - 1) if mode.in_flight == "schedule" else S
    limit = f"q <= N = {N} (sec. 11)" if in_flight == "schedule" else None
    info: dict = {"knapsack": knapsack}
    choices = OptionChoices(inst, greedy)

    def done(sol: Solution) -> Solution:
        sol.mode = mode
        sol.seconds = time.perf_counter() - t0
        sol.info = {**info, "option_choices": len(choices), **sol.info}
        return checked_solution(instance, sol, restrictions=restrictions)

    why_none = _no_plan_at_all(inst, restrictions)
    if why_none is not None:
        return done(Solution(method, Status.INFEASIBLE, message=why_none))

    ideals = enumerate_ideals(inst, max_ideals)
    info["ideals"] = len(ideals)
    table_bytes = decision_table_bytes(len(ideals), cols)
    if force:
        memory_bytes = machine_memory_bytes() if memory_bytes is None else memory_bytes
    limit_bytes = memory_bytes if force else max_table_bytes
    _check_table_bytes(instance, len(ideals), cols, cols == S, table_bytes, limit_bytes, force)
    # the stage tables and the decision's per-stage arrays get what the decision tables leave
    stage_budget = None if limit_bytes is None else limit_bytes - table_bytes
    d_values = [d for d in restrictions.d_values(instance) if d <= S]
    budget = _device_budget(instance.source, inst)

    def tables(sets, **kw):
        """The stage tables of ``sets`` (the chain bound's, the full ones, or the full ones
        without the device bound) with this solve's degrees, options and limits."""
        return build_stage_tables(
            inst,
            sets,
            d_values,
            cols,
            greedy,
            choices,
            plain_paths=plain_paths,
            group_bytes=DECISION_GROUP_BYTES,
            deadline=deadline,
            **kw,
        )

    def decide(tb, sets):
        return ThresholdDecision(tb, len(sets), cols, budget, small_s=small_s, in_flight=in_flight)

    stopped = None  # where the time limit stopped the solve
    with Progress(progress) as bar, _cyclic_gc_paused():
        ub = chain_plan = chain_devices = None
        lower = math.fsum(node_work(inst)) / budget  # the work bound (the tables' once built)
        try:
            if len(ideals) > chain_first:
                # an upper bound from the same DP restricted to the suffixes of one topological
                # order (each is successor-closed): it lets the full DP skip every stage that
                # cannot be part of a plan at least as good
                stopped = "in the chain bound's stage tables"
                chain = suffix_ideals(inst)
                ctb = tables(
                    chain,
                    progress=bar.task("chain bound: sets", len(chain)),
                    max_bytes=None
                    if limit_bytes is None
                    else limit_bytes - decision_table_bytes(len(chain), cols),
                )
                lower = float(ctb.work_of[-1]) / budget
                chain_decision = decide(ctb, chain)
                stopped = "in the chain bound's search"
                got = search_threshold(chain_decision, budget, None, lower, deadline=deadline)
                if got is not None:
                    ub = got.T
                    info["chain_bound"] = ub
                    # the chain plan itself: the answer when nothing below ub fits (the full
                    # search then makes no decision at ub, see search_threshold)
                    chain_plan = rebuild_plan(instance, chain, ctb, got.path, choices, in_flight)
                    chain_devices = chain_plan[0].devices
                del ctb, chain_decision, got
            stopped = "in the stage tables"
            tb = tables(
                ideals,
                ub=ub,
                progress=bar.task("stage tables: sets", len(ideals)),
                max_bytes=stage_budget,
            )
            lower = float(tb.work_of[-1]) / budget
            decision = decide(tb, ideals)
            info["stage_pairs"] = tb.pairs
            info["stage_candidates"] = int(len(tb.group_set))
            stopped = "in the search"
            got = search_threshold(
                decision,
                budget,
                bar.task("search: decisions", 12),
                lower,
                math.inf if ub is None else ub,
                chain_devices,
                deadline=deadline,
            )
        except TimeUp:
            return done(_stopped(method, greedy, time_limit, stopped, chain_plan, ub, lower, info))
        except SizeLimitError as e:
            if not force or limit_bytes is None:  # (the guard without --force says it all)
                raise
            raise _memory_passed(instance.source, limit_bytes, stopped) from e
        if got is None or got.T > (ub if ub is not None else math.inf):
            if ub is not None:
                raise InternalError(f"{method}: the pruned DP lost the chain plan of value {ub!r}")
            if greedy:  # Piper's rule can miss a choice that fits: no plan from it is no proof
                msg = _no_plan_message(instance, limit, None, "greedy")
                return done(Solution(method, Status.UNKNOWN, message=msg, info={"search_steps": 1}))
            # the tables left out the stages of plans above K devices: count those on all
            del decision, tb
            least, why = _fewest_devices(
                lambda: decide(tables(ideals, max_bytes=stage_budget, device_bound=False), ideals)
            )
            msg = _no_plan_message(instance, limit, least, why)
            return done(Solution(method, Status.INFEASIBLE, message=msg, info={"search_steps": 1}))
        T, path, steps = got.T, got.path, got.steps
        info["thresholds"] = got.candidates
    info["search_steps"] = steps
    plan, stage_costs = (
        chain_plan
        if path is None
        else rebuild_plan(instance, ideals, decision.tb, path, choices, in_flight)
    )
    _check_rebuilt(method, stage_costs, T)
    if got.stopped:
        info["stopped"] = stopped
        return done(
            Solution(
                method,
                Status.FEASIBLE,
                plan=plan,
                objective=T,
                bound=None if greedy else got.lower,
                message=_stopped_message(time_limit, stopped, greedy),
            )
        )
    status = Status.FEASIBLE if greedy else Status.OPTIMAL
    return done(Solution(method, status, plan=plan, objective=T))


def _check_rebuilt(method: str, stage_costs: list[float], T: float) -> None:
    """Raise InternalError when a stage of the rebuilt plan costs more than the DP's value
    ``T`` (beyond rounding): the tables and the rebuild disagree."""
    if max(stage_costs) > T * (1 + 1e-12) + 1e-300:
        raise InternalError(
            f"{method}: rebuilt plan has a stage of cost {max(stage_costs)!r} above the DP's value "
            f"{T!r}"
        )


def _device_budget(source: str, inst: Instance) -> int:
    """The devices a plan can use: K, or t_max min(N, K) when fewer (a plan has at most
    min(N, K) stages, sum d <= min(N, K), each with t d <= t_max d); SizeLimitError when
    counts of that size pass the DP's 64-bit tables."""
    K, S = inst.K, min(inst.N, inst.K)
    budget = min(K, max(inst.t_values) * S)
    if budget >= DEVICES_INF // 4:
        raise SizeLimitError(
            f"{source}: K = {K} with t up to {max(inst.t_values)} and min(N, K) = {S} "
            "allows device counts beyond the DP's 64-bit tables; lower K, N or the largest t"
        )
    return budget


def _memory_passed(source: str, limit_bytes: float, stopped: str) -> SizeLimitError:
    """The refusal of a forced DP whose tables passed the machine's memory ``limit_bytes``
    while being built (``stopped``: where, "in the ...")."""
    return SizeLimitError(
        f"{source}: the DP's stage tables and decision arrays passed the "
        f"{limit_bytes / 2**30:.1f} GiB of memory that --force allows while being built "
        f"({stopped[3:]}); lower K or N, or restrict t or d (--max-t, --max-d)"
    )


def _refuse_beyond_the_rule(source: str, inst: Instance) -> None:
    """Raise InputError when a node has more than two options for some t: Piper's greedy
    rule (``knapsack="greedy"``) is defined for at most two."""
    for nd in inst.nodes:
        for t, opts in nd.options.items():
            if len(opts) > 2:
                raise InputError(
                    f"{source}: --knapsack greedy follows Piper's rule, defined for "
                    f"at most two options per (node, t); node {nd.id} has {len(opts)} options "
                    f"for t = {t} (use --knapsack exact, or --exclude-option)"
                )


def _no_plan_at_all(inst: Instance, restrictions: Restrictions) -> str | None:
    """Why no plan exists, seen before any table (a node with no option left after the
    restrictions, or with options only for t > K), or None."""
    bare = [nd.id for nd in inst.nodes if not nd.options]
    if bare:
        return f"node {bare[0]} has no option left after the restrictions {restrictions.to_dict()}"
    too_wide = [nd.id for nd in inst.nodes if min(nd.options) > inst.K]
    if too_wide:
        v = too_wide[0]
        return (
            f"K = {inst.K} devices is too few: node {v} has options only for t >= "
            f"{min(inst.node[v].options)}"
        )
    return None


def _check_table_bytes(
    instance: Instance,
    sets: int,
    cols: int,
    by_sum: bool,
    table_bytes: int,
    limit_bytes: float | None,
    force: bool,
) -> None:
    """Raise SizeLimitError (one line) when the decision tables of ``sets`` sets x (``cols``
    + 1) columns (``by_sum``: the columns count sum d, else sec. 11's q), ``table_bytes`` in
    all, pass ``limit_bytes``: the table limit, or under ``force`` the machine's memory
    (None: unknown, no limit)."""
    if not force and table_bytes > limit_bytes:
        width = "min(N, K) + 1" if by_sum else "min(N, 2K - 1) + 1"
        raise SizeLimitError(
            f"{instance.source}: the DP's tables need about {table_bytes / 2**30:.1f} GiB "
            f"({sets:,} sets x ({width} = {cols + 1:,}) x "
            f"{table_bytes // (sets * (cols + 1))} bytes), above the limit of "
            f"{limit_bytes / 2**30:.1f} GiB; lower N or K, or pass --force (force=True) if "
            "memory allows"
        )
    if force and limit_bytes is not None and table_bytes > limit_bytes:
        raise SizeLimitError(
            f"{instance.source}: the DP's tables need about {table_bytes / 2**30:.1f} GiB "
            f"({sets:,} sets x {cols + 1:,} columns), above the "
            f"{limit_bytes / 2**30:.1f} GiB of memory that --force allows; lower N or K"
        )


def _fewest_devices(decision: Callable[[], ThresholdDecision]) -> tuple[int | None, str]:
    """The fewest devices a plan that fits in memory needs, by the decision ``decision()``
    builds (its tables without the device bound), and "", or None and the limit that
    stopped the count: "time" or "size"."""
    try:
        return decision().least_devices(), ""
    except TimeUp:
        return None, "time"
    except SizeLimitError:
        return None, "size"


def _no_plan_message(instance: Instance, limit: str | None, least: int | None, why: str) -> str:
    """Why the search found no plan: ``why`` "greedy" (Piper's rule found none: no proof),
    else the fewest devices a plan that fits in memory needs (``least``; DEVICES_INF: no
    split fits; None: the ``why`` limit, "time" or "size", stopped that count)."""
    K, S = instance.K, min(instance.N, instance.K)
    M = human_bytes(instance.M, repr(instance.M))
    if why == "greedy":
        return (
            f"Piper's greedy option rule finds no plan within M = {M} per "
            f"device, {limit or f'sum of d <= {S}'} and sum of t*d <= K = {K}; not a "
            "proof that none exists (--knapsack exact decides)"
        )
    within = f"within {limit or f'sum of d <= min(N, K) = {S}'} and sum of t*d <= K = {K}"
    if least is None:
        return (
            f"no plan fits in memory M = {M} per device {within} (the {why} limit stopped the "
            "count of the devices one needs)"
        )
    if least >= DEVICES_INF:
        return (
            f"no split into stages fits in memory M = {M} per device {within}, even with the "
            "least-memory options"
        )
    return (
        f"K = {K} devices is too few: the plan with the fewest devices that fits in memory "
        f"needs {least}"
    )


def machine_memory_bytes() -> float | None:
    """The machine's physical memory in bytes, or None where the system does not say.

    Returns
    -------
    float or None

    Examples
    --------
    >>> m = machine_memory_bytes()
    >>> m is None or m > 0
    True
    """
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return float(pages) * size if pages > 0 and size > 0 else None


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Pause Python's cyclic garbage collector while the tables are built and searched (on
    again after, if it was on). Their containers (the stage ids and runs, greedy mode's
    states) hold no reference cycle and are freed by reference counting; the collector's
    passes over them and over everything else alive would find nothing and cost time."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _stopped_message(time_limit: float, where: str, greedy: bool) -> str:
    what = "Piper's greedy option rule" if greedy else "not proven optimal"
    return f"time limit of {time_limit:g} s reached {where}: the best plan found ({what})"


def _stopped(method, greedy, time_limit, where, chain_plan, ub, lower, info) -> Solution:
    """The answer of a DP stopped by its time limit in the tables: the chain bound's plan
    (feasible) or nothing (unknown), either with ``lower``, the work bound (the least
    device-seconds of all nodes over the devices a plan can use), as its proven ``bound``
    (none for Piper's greedy rule, whose answers are no proofs)."""
    info["stopped"] = where
    # (the work bound with the search's own slack for its rounding, see search_threshold)
    bound = None if greedy or lower is None or lower <= 0 else lower * (1.0 - 1e-9)
    if chain_plan is None:
        proved = "" if bound is None else f"; a proven lower bound {bound:.10g}"
        return Solution(
            method,
            Status.UNKNOWN,
            bound=bound,
            message=f"time limit of {time_limit:g} s reached {where}: no plan yet{proved}",
        )
    return Solution(
        method,
        Status.FEASIBLE,
        plan=chain_plan[0],
        objective=ub,
        bound=bound,
        message=_stopped_message(time_limit, where, greedy),
    )
