"""A MILP of PipeDream's single-level model (``docs/pipedream.md``), solved by SCIP through
OR-Tools' MPSolver in a child process: an exact referee for PipeDream's DP and exhaustive
search (:mod:`compare.baselines.pipedream`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.pipedream.graph import Prepared, check_model_settings
from piper_ilp.pipedream.memory import max_stash_count
from piper_ilp.pipedream.states import antichain_states
from piper_ilp.processes import run_in_child
from piper_ilp.settings import check_time_limit

__all__ = ["MilpResult", "solve_pipedream_milp", "MAX_MILP_VARIABLES", "MAX_UNSCALED_TIME"]

#: The most candidate stages (binary variables) :func:`solve_pipedream_milp` builds a model
#: for; above it, SizeLimitError.
MAX_MILP_VARIABLES = 200_000

#: Without a cutoff the stage times go to SCIP in seconds; above this SCIP's absolute
#: tolerances and its infinity (1e20) make its answers unsound (stage times of 1e10 s and
#: more gave wrong optima and false infeasibility), so the MILP answers "out-of-range".
MAX_UNSCALED_TIME = 1e9


@dataclass
class MilpResult:
    """What :func:`solve_pipedream_milp` found.

    Attributes
    ----------
    status : str
        ``"optimal"`` (a proof), ``"infeasible"`` (no plan; under a cutoff: no plan within
        it), ``"feasible"`` (stopped by the time limit with a plan: no proof),
        ``"not-solved"`` (stopped by the time limit without a plan; a time limit of 0 does
        not start SCIP), ``"solver-error"`` (SCIP's status abnormal, model invalid or
        unbounded: no claim) or ``"out-of-range"`` (stage times beyond
        :data:`MAX_UNSCALED_TIME` without a cutoff: no claim, SCIP not run).
    value : float or None
        The solver's objective, seconds per minibatch (optimal and feasible); not the plan
        timed exactly, which is the caller's to do.
    bound : float or None
        SCIP's lower bound, in seconds (optimal and feasible).
    plan : list of (int, int) or None
        ``[(state, r), ...]`` read from the solution (optimal and feasible): each stage ends at
        ``state`` (an index of :func:`~piper_ilp.pipedream.states.antichain_states`) and
        has ``r`` replicas, the first stage first.
    variables : int
        The number of candidate stages (binary variables) in the model.
    """

    status: str
    value: float | None
    bound: float | None
    plan: list[tuple[int, int]] | None
    variables: int


def solve_pipedream_milp(
    prep: Prepared,
    n: int,
    bandwidth: float,
    *,
    memory: float = 16e9,
    memory_constraint: bool = False,
    straight: bool = False,
    fewer_machines: bool = False,
    time_limit: float = 60.0,
    cutoff: float | None = None,
) -> MilpResult:
    """Solve PipeDream's single-level model exactly as a MILP.

    The model is that of ``docs/pipedream.md`` (and :mod:`compare.baselines.pipedream`): a
    chain of states with strictly growing downsets ending at the last state, a replication
    per stage, exactly n workers (at most n with ``fewer_machines``), stage time
    ``(T + 4 (r - 1) P / (B r)) / r``, the plan's time the max over stages, and
    PipeDream's memory rule. SCIP runs in a child process
    (:func:`piper_ilp.processes.run_in_child`), so that an interrupt stops it at once.

    Parameters
    ----------
    prep : Prepared
        The graph PipeDream's planner plans for (:func:`~piper_ilp.pipedream.graph.prepare`).
    n : int
        Workers, >= 1.
    bandwidth : float
        B, bytes/s (:func:`~piper_ilp.pipedream.graph.check_model_settings`).
    memory : float
        Bytes per worker, used (and checked) with ``memory_constraint`` only.
    memory_constraint : bool
        Apply PipeDream's memory rule.
    straight : bool
        Every stage has r = 1.
    fewer_machines : bool
        Allow fewer than n workers (not with ``memory_constraint``).
    time_limit : float
        SCIP's time limit, finite seconds >= 0, rounded up to whole milliseconds (OR-Tools
        reads 0 ms as no limit: a limit of 0 answers ``"not-solved"`` without SCIP).
    cutoff : float, optional
        The time of a valid plan (e.g. the DP's, timed exactly): stages that take longer
        are left out and the times are put in units of the longest stage left. Every plan
        no worse than the cutoff stays in the model, so "optimal" remains a proof;
        "infeasible" then means no plan within the cutoff (which contradicts the plan it
        came from). SCIP's tolerances are absolute and it reads 1e20 as infinite: without
        a cutoff, stage times of 1e10 s and more, or times spanning many orders of
        magnitude, gave wrong optima and false infeasibility, so stage times above
        :data:`MAX_UNSCALED_TIME` give "out-of-range".

    Returns
    -------
    MilpResult

    Raises
    ------
    InputError
        ``fewer_machines`` with ``memory_constraint`` (not modelled), ``n < 1``, bad
        settings (:func:`~piper_ilp.pipedream.graph.check_model_settings`), or an
        OR-Tools without SCIP.
    SizeLimitError
        Beyond :data:`MAX_MILP_VARIABLES` variables.
    InternalError
        The solver's process dies without an answer.
    KeyboardInterrupt
        Ctrl-C (or a signal handler raising it): the child process was killed first.

    Notes
    -----
    Data: the pairs ``(k, j)`` of states with downset(k) strictly inside downset(j), plus
    ``k = -1`` for the first stage, which holds all of downset(j); ``T``, ``Act``, ``P`` of
    each such stage by :func:`math.fsum` over its node set (:meth:`Prepared.sums`).

    * ``x[k, j, r]`` binary: stage (k, j] is used with r replicas (r = 1 only when
      straight);
    * flow: one stage leaves ``-1``; at every state ``j``, stages in = stages out, except
      the last state, which one stage enters;
    * workers: ``sum r x[k, j, r] = n`` (``<= n`` with fewer machines, except on a
      one-state graph, where PipeDream's table cannot use fewer);
    * ``after[j]`` integer in 0..n (only with the memory rule): workers in stages after
      state j (``after[S - 1] = 0``); ``x[k, j, r] = 1`` forces ``after[k] = after[j] + r``
      (big-M 2n), and for the first stage ``after[j] = n - r``;
    * memory (``memory_constraint``): ``x[k, j, r] = 1`` forces ``after[j] <= r * c`` with
      ``c`` the most stashed copies that fit,
      :func:`piper_ilp.pipedream.memory.max_stash_count` (the rule
      ``ceil(after / r) * (Act + P) <= memory`` exactly as the DP and exhaustive search
      evaluate it; ``floor(memory / (Act + P))`` rounds differently at the boundary);
    * ``z >= time(k, j, r) x[k, j, r]``; minimize ``z``.

    With ``fewer_machines`` and the memory rule together PipeDream's table has quirks
    (``docs/pipedream.md``) that this formulation does not model: that combination is
    refused.

    Examples
    --------
    Two layers of 2 s and 4 s per minibatch, no weights: with 3 workers the second gets
    2 replicas.

    >>> from piper_ilp.pipedream.graph import PDGraph, PDNode, prepare
    >>> g = PDGraph((PDNode("a", "Linear", 1000.0, 1000.0, 8.0, 0.0),
    ...              PDNode("b", "Linear", 3000.0, 1000.0, 8.0, 0.0)), (("a", "b"),))
    >>> r = solve_pipedream_milp(prepare(g), 3, 1e9)
    >>> r.status, r.value, r.plan
    ('optimal', 2.0, [(0, 1), (1, 2)])
    >>> solve_pipedream_milp(prepare(g), 3, 1e9, straight=True).status  # 2 stages, 3 workers
    'infeasible'
    """
    if fewer_machines and memory_constraint:
        raise InputError(
            "the PipeDream MILP does not model --fewer-machines with --memory-constraint"
        )
    if n < 1:
        raise InputError(f"need n >= 1 workers, got n={n!r}")
    check_time_limit(time_limit, "time_limit")
    (bandwidth,) = check_model_settings([bandwidth], memory if memory_constraint else None)
    st = antichain_states(prep)
    S = len(st)
    down = st.downset
    reps = [1] if straight else list(range(1, n + 1))
    cands = []  # (k, j, r, time)
    for j in range(S):
        ks = [-1] + [k for k in range(S) if down[k] & down[j] == down[k] and down[k] != down[j]]
        for k in ks:
            T, A, P = prep.sums(down[j] & ~(down[k] if k >= 0 else 0))
            for r in reps:
                cap = n
                if memory_constraint:
                    # after <= r * c  <=>  ceil(after / r) <= c, c the most copies that fit
                    cap = min(n, r * max_stash_count(A, P, memory, n))
                if k == -1 and cap < n - r:
                    continue
                cands.append((k, j, r, (T + 4 * (r - 1) * P / (bandwidth * r)) / r, cap))
    if cutoff is not None:
        # the time of a valid plan: no stage of a plan at least as good takes longer, and
        # in units of the longest stage left SCIP's absolute tolerances are relative ones
        cands = [c for c in cands if c[3] <= cutoff * (1 + 1e-9)]
    if len(cands) > MAX_MILP_VARIABLES:
        raise SizeLimitError(
            f"{prep.source}: {len(cands)} MILP variables (limit {MAX_MILP_VARIABLES})"
        )
    if cutoff is None and max((c[3] for c in cands), default=0.0) > MAX_UNSCALED_TIME:
        return MilpResult("out-of-range", None, None, None, len(cands))
    # SCIP in a child process: an interrupt SIGKILLs it at once (SCIP's own Ctrl-C handler,
    # in this process, swallowed the interrupt and answered "not solved")
    if time_limit == 0:  # no time to solve (SetTimeLimit(0) would mean no limit at all)
        return MilpResult("not-solved", None, None, None, len(cands))
    model = (cands, S, n, memory_constraint, fewer_machines, time_limit, cutoff)
    return run_in_child(_solve_scip, model, name="pipedream milp")


def _solve_scip(cands, S, n, memory_constraint, fewer_machines, time_limit, cutoff, report):
    """Build and solve the MILP of the candidates (formulation at
    :func:`solve_pipedream_milp`) with SCIP, in the child process of
    :func:`solve_pipedream_milp`.

    Returns
    -------
    MilpResult
    """
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        raise InputError("OR-Tools was built without SCIP")
    params = "numerics/feastol = 1e-9\nlimits/gap = 0\nlimits/absgap = 0\nmisc/catchctrlc = FALSE\n"
    if not solver.SetSolverSpecificParametersAsString(params):
        raise InternalError(f"pipedream milp: SCIP did not accept its parameters {params!r}")
    # rounded up, as the core MILP does; at least 1 ms (0 would mean no limit)
    solver.SetTimeLimit(max(1, int(math.ceil(time_limit * 1000))))
    solver.SetNumThreads(1)  # SCIP's concurrent mode proved wrong optima (milp/scip.py)
    x = {}
    for c, (k, j, r, _t, _cap) in enumerate(cands):
        x[c] = solver.BoolVar(f"x[{k},{j},{r}]")
    after = {j: solver.IntVar(0, n, f"after[{j}]") for j in range(S)}
    solver.Add(after[S - 1] == 0, "after_last")
    tmax = max((t for *_, t, _ in cands), default=0.0)
    unit = tmax if cutoff is not None and 0 < tmax < math.inf else 1.0
    z = solver.NumVar(0.0, max(tmax / unit, 0.0), "z")
    ins = {j: [] for j in range(S)}
    outs = {j: [] for j in range(-1, S)}
    for c, (k, j, r, t, cap) in enumerate(cands):
        ins[j].append(c)
        outs[k].append(c)
        solver.Add(z >= (t / unit) * x[c], f"time[{c}]")
        if not memory_constraint:
            continue
        if k >= 0:
            solver.Add(after[k] >= after[j] + r - 2 * n * (1 - x[c]), f"after_lo[{c}]")
            solver.Add(after[k] <= after[j] + r + 2 * n * (1 - x[c]), f"after_hi[{c}]")
        else:
            solver.Add(after[j] >= n - r - 2 * n * (1 - x[c]), f"first_lo[{c}]")
            solver.Add(after[j] <= n - r + 2 * n * (1 - x[c]), f"first_hi[{c}]")
        if cap < n:
            solver.Add(after[j] <= cap + n * (1 - x[c]), f"memory[{c}]")
    solver.Add(sum(x[c] for c in outs[-1]) == 1, "start")
    for j in range(S):
        if j == S - 1:
            solver.Add(sum(x[c] for c in ins[j]) == 1, "end")
            solver.Add(sum(x[c] for c in outs[j]) == 0, "end_out")
        else:
            solver.Add(sum(x[c] for c in ins[j]) == sum(x[c] for c in outs[j]), f"flow[{j}]")
    total = sum(cands[c][2] * x[c] for c in x)
    if fewer_machines and S > 1:  # PipeDream's table never lets state 0 alone use fewer workers
        solver.Add(total <= n, "workers")
    else:
        solver.Add(total == n, "workers")
    solver.Minimize(z)
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return MilpResult("infeasible", None, None, None, len(cands))
    if status == pywraplp.Solver.NOT_SOLVED:  # the time limit, before any plan
        return MilpResult("not-solved", None, None, None, len(cands))
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return MilpResult("solver-error", None, None, None, len(cands))
    chosen = {cands[c][0]: (cands[c][1], cands[c][2]) for c in x if x[c].solution_value() > 0.5}
    plan = []
    k = -1
    while k in chosen and len(plan) <= S:
        j, r = chosen[k]
        plan.append((j, r))
        k = j
    return MilpResult(
        "optimal" if status == pywraplp.Solver.OPTIMAL else "feasible",
        z.solution_value() * unit,
        solver.Objective().BestBound() * unit,
        plan,
        len(cands),
    )
