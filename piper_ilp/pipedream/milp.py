"""A MILP of PipeDream's single-level model (SCIP through OR-Tools' MPSolver).

The model is that of ``docs/pipedream.md`` (and :mod:`compare.baselines.pipedream`): a chain of
states with strictly growing downsets ending at the last state, a replication per stage, exactly n
workers (at most n with ``fewer_machines``), stage time ``(T + 4 (r - 1) P / (B r)) / r``,
the plan's time the max over stages, and PipeDream's memory rule.

Formulation (data: the pairs ``(k, j)`` with downset(k) strictly inside downset(j), plus
``k = -1`` for the first stage, which holds all of downset(j); ``T``, ``Act``, ``P`` of each
such stage by :func:`math.fsum` over its node set):

* ``x[k, j, r]`` binary: stage (k, j] is used with r replicas (r = 1 only when straight);
* flow: one stage leaves ``-1``; at every state ``j``, stages in = stages out, except the last
  state, which one stage enters;
* workers: ``sum r x[k, j, r] = n`` (``<= n`` with fewer machines, except on a one-state
  graph, where PipeDream's table cannot use fewer);
* ``after[j]`` integer in 0..n (only with the memory rule): workers in stages after state j
  (``after[S - 1] = 0``); ``x[k, j, r] = 1`` forces ``after[k] = after[j] + r`` (big-M 2n),
  and for the first stage ``after[j] = n - r``;
* memory (``memory_constraint``): ``x[k, j, r] = 1`` forces ``after[j] <= r * c`` with
  ``c`` the most stashed copies that fit, :func:`piper_ilp.pipedream.memory.max_stash_count`
  (the rule ``ceil(after / r) * (Act + P) <= memory`` exactly as the DP and exhaustive search
  evaluate it; ``floor(memory / (Act + P))`` rounds differently at the boundary);
* ``z >= time(k, j, r) x[k, j, r]``; minimize ``z``.

With ``fewer_machines`` and the memory rule together PipeDream's table has quirks (see
``docs/pipedream.md``) that this formulation does not model: that combination is refused.
SCIP runs in a child process (:func:`piper_ilp.processes.run_in_child`), so that an interrupt
stops it at once. The value is certified by timing the plan read from the solution exactly
(the caller compares it with other methods); SCIP's own bound is returned as ``bound``. With
``cutoff`` (the time of a valid plan, e.g. the DP's timed exactly) the stages that take
longer are left out, and the times are in units of the longest left: SCIP's tolerances are
absolute and it reads 1e20 as infinite, so stage times of 1e10 s and more, or times spanning
many orders of magnitude, gave wrong optima and false infeasibility without it. Every plan
no worse than the cutoff stays in the model, so "optimal" remains a proof; "infeasible" under
a cutoff means no plan within it (which contradicts the plan it came from). Without a cutoff,
stage times above 1e9 s (``MAX_UNSCALED_TIME``) give status "out-of-range", no claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.pipedream.graph import Prepared, check_model_settings
from piper_ilp.pipedream.memory import max_stash_count
from piper_ilp.pipedream.states import antichain_states
from piper_ilp.processes import run_in_child

__all__ = ["MilpResult", "solve_pipedream_milp", "MAX_MILP_VARIABLES", "MAX_UNSCALED_TIME"]

MAX_MILP_VARIABLES = 200_000

#: Without a cutoff the stage times go to SCIP in seconds; above this SCIP's absolute
#: tolerances and its infinity (1e20) make its answers unsound (stage times of 1e10 s and
#: more gave wrong optima and false infeasibility), so the MILP answers "out-of-range".
MAX_UNSCALED_TIME = 1e9


@dataclass
class MilpResult:
    """``status`` "optimal" / "infeasible" / "not-solved" (a time limit) / "out-of-range"
    (stage times beyond :data:`MAX_UNSCALED_TIME` without a cutoff: no claim); ``value`` the
    solver's objective, ``bound`` its lower bound, ``plan`` ``[(state, r), ...]`` read from
    the solution."""

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
    """Solve PipeDream's single-level model exactly as a MILP (formulation in the module
    docstring).

    Raises
    ------
    InputError
        For ``fewer_machines`` with ``memory_constraint`` (not modelled) or bad settings
        (:func:`~piper_ilp.pipedream.graph.check_model_settings`).
    SizeLimitError
        Beyond :data:`MAX_MILP_VARIABLES` variables.
    InternalError
        When the solver's process dies without an answer.
    """
    if fewer_machines and memory_constraint:
        raise InputError(
            "the PipeDream MILP does not model --fewer-machines with --memory-constraint"
        )
    if n < 1:
        raise InputError(f"need n >= 1 workers, got n={n!r}")
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
    model = (cands, S, n, memory_constraint, fewer_machines, time_limit, cutoff)
    return run_in_child(_solve_scip, model, name="pipedream milp")


def _solve_scip(cands, S, n, memory_constraint, fewer_machines, time_limit, cutoff, report):
    """Build and solve the MILP of the candidates (see the module docstring) with SCIP,
    in the child process of :func:`solve_pipedream_milp`."""
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        raise InputError("OR-Tools was built without SCIP")
    solver.SetSolverSpecificParametersAsString(
        "numerics/feastol = 1e-9\nlimits/gap = 0\nlimits/absgap = 0\nmisc/catchctrlc = FALSE\n"
    )
    solver.SetTimeLimit(int(time_limit * 1000))
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
    if status != pywraplp.Solver.OPTIMAL:
        return MilpResult("not-solved", None, None, None, len(cands))
    chosen = {cands[c][0]: (cands[c][1], cands[c][2]) for c in x if x[c].solution_value() > 0.5}
    plan = []
    k = -1
    while k in chosen and len(plan) <= S:
        j, r = chosen[k]
        plan.append((j, r))
        k = j
    return MilpResult(
        "optimal",
        z.solution_value() * unit,
        solver.Objective().BestBound() * unit,
        plan,
        len(cands),
    )
