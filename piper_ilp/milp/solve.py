"""The entry point :func:`solve_milp`: checks, the formulation once, one backend, the
certification of its answer, and a last pass through the independent evaluator."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.files import check_writable
from piper_ilp.instance import Instance
from piper_ilp.milp.backend import BACKENDS
from piper_ilp.milp.certify import certify
from piper_ilp.milp.model import formulate, index_sets, size_of_sets
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan
from piper_ilp.settings import check_threads, check_time_limit
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["BACKENDS", "DEFAULT_MAX_VARIABLES", "DEFAULT_THREADS", "backend_threads", "solve_milp"]

#: Above this many variables :func:`solve_milp` refuses (unless ``force``).
DEFAULT_MAX_VARIABLES = 25_000

#: Solver threads when the caller does not say (CI machines have 2 cores).
DEFAULT_THREADS = 2


def backend_threads(backend: str, threads: int) -> int:
    """The threads ``backend`` runs with when ``threads`` are asked: SCIP always
    :data:`piper_ilp.milp.scip.THREADS` (its concurrent mode proved wrong optima), CP-SAT and
    CBC ``threads``.

    Examples
    --------
    >>> backend_threads("cpsat", 2), backend_threads("scip", 2)
    (2, 1)
    """
    if backend == "scip":
        from piper_ilp.milp.scip import THREADS

        return THREADS
    return threads


def _backend(name: str):
    if name == "cpsat":
        from piper_ilp.milp import cpsat as mod
    elif name == "cbc":
        from piper_ilp.milp import cbc as mod
    else:
        from piper_ilp.milp import scip as mod
    return mod.solve


def _check_cutoff(cutoff) -> None:
    if cutoff is None:
        return
    # 0 is refused: under a cutoff of 0 every time coefficient would be capped at 0
    if (
        isinstance(cutoff, bool)
        or not isinstance(cutoff, (int, float))
        or not (math.isfinite(cutoff) and cutoff > 0)
    ):
        raise InputError(f"cutoff must be a finite number > 0, got {cutoff!r}")


def _floor_of(first: Solution) -> tuple[float, dict]:
    """The floor on T that the throughput solve ``first`` proves (0.0 when it proves
    none: no bound, or a claim that failed certification), and what to record of it."""
    ok = first.status in (Status.OPTIMAL, Status.FEASIBLE)
    bound = first.bound if ok and first.bound is not None and math.isfinite(first.bound) else 0.0
    return max(0.0, bound), {
        "status": first.status.value,
        "bound": first.bound,
        "seconds": first.seconds,
    }


def _check_settings(backend, time_limit, threads) -> int:
    """The guard of a direct call (run_method passes values its Settings checked)."""
    if backend not in BACKENDS:
        raise InputError(f"unknown MILP backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    check_time_limit(time_limit, "time_limit")
    check_threads(threads, "threads")
    return DEFAULT_THREADS if threads is None else threads


def solve_milp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    backend: str = "cpsat",
    time_limit: float | None = None,
    threads: int | None = None,
    write_model: str | Path | None = None,
    hint: Plan | None = None,
    cutoff: float | None = None,
    force: bool = False,
    max_variables: int = DEFAULT_MAX_VARIABLES,
    progress: bool = False,
    mode: Mode = DEFAULT_MODE,
    strong: bool | None = None,
    throughput_floor: bool | None = None,
    symmetry: bool | None = None,
) -> Solution:
    """Solve the Piper problem exactly with the MILP on one backend.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        The ablations (no data / tensor parallelism, excluded options).
    backend : {"cpsat", "cbc", "scip"}
        OR-Tools CP-SAT, CBC (PuLP's bundled binary, as a child process), or SCIP through
        OR-Tools' MPSolver.
    time_limit : float, optional
        Seconds for the whole call (the throughput floor's solve and building the models
        included); without it the backend runs until it proves.
    threads : int, optional
        CP-SAT's and CBC's threads (default :data:`DEFAULT_THREADS`); SCIP runs 1
        (:data:`piper_ilp.milp.scip.THREADS`: its concurrent mode proved wrong optima).
    write_model : path, optional
        Write the model as first solved: the CP-SAT model proto in text, or an LP file.
    hint : Plan, optional
        A warm start (e.g. the DP's plan). Without it the MILP runs independently. A
        valid hint also sets the cutoff: only plans at most its value (the evaluator's,
        1 + 1e-6) are searched, so a better plan is still found, and the hint is returned
        (feasible) when the search stops with nothing better.
    cutoff : float, optional
        Search only plans whose value (TPS, or batch time) is at most ``cutoff`` (> 0)
        (1 + 1e-6), e.g. a value the caller believes is achievable. An optimum found
        under it is the optimum. When no plan is at or below it, the answer is unknown
        (or feasible with a hint above it), never infeasible: a cutoff below the optimum
        proves nothing. ``info["cutoff"]`` records it.
    strong : bool, optional
        Add the valid strengthening rows boundary[i] and work (docs/milp.md,
        "Strengthening"); default (None): on for CP-SAT (they prove bert32a100 K = 8 and 16),
        off for CBC (not tried) and SCIP (right with them at its one thread, but slower with
        no gain measured; with 2 threads its presolve gave a wrong proof: docs/benchmarks.md).
        ``info["strong_rows"]`` records it.
    throughput_floor : bool, optional
        Under the batch time: solve the throughput objective of the same mode first, on
        the same backend, and use its certified lower bound as a floor on T (every plan's
        batch time holds (N - 1) x its largest TPS, which is at least the throughput
        optimum). The two solves share ``time_limit`` (the first takes at most half).
        Default (None): on for CP-SAT under the batch time (ignored under throughput),
        off for CBC and SCIP (SCIP, then with 2 threads, proved a wrong optimum with it and
        the symmetry rows).
        ``info["throughput_floor"]`` records the first solve's status, bound and seconds.
    symmetry : bool, optional
        Under graph pipelining, add the symmetry rows (docs/milp.md, "Symmetry rows"):
        consecutive slots without an edge between them in increasing least node rank, and
        interchangeable chains (found from the data) in order. Default (None): on for
        CP-SAT and SCIP under graph pipelining (ignored sequentially), off for CBC.
        ``info["symmetry"]`` records the classes' sizes.
    force : bool
        Solve even above ``max_variables``.
    max_variables : int
        The size guard.
    progress : bool
        Print the incumbent and bound on stderr, at most once a second.
    mode : Mode
        Pipelining (sequential, or graph: sec. 8), objective (throughput, or the batch
        time of sec. 9) and schedule (``gpipe`` holds y = N / d); the default is the
        contract's original problem, whose model is unchanged.

    Returns
    -------
    Solution
        ``method`` = backend; ``status``: optimal (a plan the evaluator accepts and a
        justified lower bound within 1e-6 of its value under ``mode``,
        ``docs/cost-model.md`` sec. 7),
        feasible (a plan, not proven: a limit, or "cannot certify at this memory
        boundary"), infeasible (the relaxed model is infeasible), unknown (no plan, no
        proof), out-of-range (the backend cannot represent the numbers; ``message``
        says why) or backend-error (the backend's claim failed certification; details
        in ``message`` and ``info["rounds"]``). ``tps`` and ``value`` (the mode's
        objective: TPS or batch time) are the evaluator's, ``objective`` the backend's
        value of the plan, ``bound`` a lower bound on the optimal value.
        ``info`` holds the model's size, ``rounds`` (one per solve), ``solver_seconds``
        (their sum), ``scaling_error``
        (how far ``objective`` may sit from ``tps``), ``gap`` and ``hint``.

    Raises
    ------
    SizeLimitError
        Above ``max_variables`` variables, unless ``force``.
    InputError
        An unknown backend, a bad setting, or a model file that cannot be written.
    KeyboardInterrupt
        Ctrl-C (or a signal handler raising it): the solver is stopped, its child
        process killed and its temporary files removed first.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> node = (0, {"1": [option_dict("v", p=2.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=2, M=10, N=2, B=1))
    >>> sol = solve_milp(inst, backend="cbc")
    >>> sol.status.value, sol.tps, sol.plan.stages[0].d
    ('optimal', 1.0, 2)

    References
    ----------
    J. Tarnawski, D. Narayanan, A. Phanishayee. Piper: Multidimensional Planner for DNN
    Parallelization. NeurIPS 2021.
    """
    threads = _check_settings(backend, time_limit, threads)
    _check_cutoff(cutoff)
    if write_model is not None:
        try:
            check_writable(write_model, "model")
        except InputError as exc:
            raise InputError(f"cannot write the model to {write_model}: {exc}") from None
    t0 = time.perf_counter()
    if not isinstance(mode, Mode):
        raise InputError(f"mode must be a piper_ilp.pipeline.Mode, got {mode!r}")
    if strong is None:
        strong = backend == "cpsat"
    if symmetry is None:  # CBC: not tried; SCIP: wrong with 2 threads, right with 1 (docs)
        symmetry = mode.graph and backend in ("cpsat", "scip")
    if throughput_floor is None:
        throughput_floor = backend == "cpsat"
    st = index_sets(instance, restrictions, mode, symmetry=symmetry)
    # the guard counts the model without the symmetry rows, as before they existed (they
    # add (S - 1)(|E_red| + 2) variables): nothing solved before is refused now
    size = size_of_sets(replace(st, sym=None), strong)
    if size["variables"] > max_variables and not force:
        raise SizeLimitError(
            f"{instance.source}: the MILP would have {size['variables']} variables "
            f"({size['constraints']} constraints), above the limit of {max_variables}; "
            "use the DP (--method dp), or pass --force with a --time-limit to get a plan and a "
            "bound"
        )
    floor = 0.0
    floor_info = None
    if mode.batch_time and throughput_floor and time_limit != 0:
        first = solve_milp(
            instance,
            restrictions,
            backend=backend,
            time_limit=None if time_limit is None else time_limit / 2,
            threads=threads,
            hint=hint,
            force=True,
            mode=replace(mode, objective="throughput"),
            strong=strong,
            progress=progress,
            symmetry=symmetry,
        )
        floor, floor_info = _floor_of(first)
        if floor > 0:  # the proven floor raises the sets' lower bounds (t_low, obj_low)
            st = index_sets(instance, restrictions, mode, t_floor=floor, symmetry=symmetry)
    form = formulate(st, strong)
    m = form.model
    info = {
        "variables": len(m.vars),
        "binaries": sum(1 for v in m.vars if v.kind == "binary"),
        "constraints": len(m.rows),
        "slots": st.S,
        "configurations": len(st.configs),
        "threads": backend_threads(backend, threads),
        "time_limit": time_limit,
        "scaling_error": 0.0,
        "mode": mode.label,
        "strong_rows": bool(strong),
    }
    if floor_info is not None:
        info["throughput_floor"] = floor_info
    if st.sym is not None:
        info["symmetry"] = [len(cls) for cls in st.sym.classes]
    if m.trivially_infeasible:
        sol = Solution(
            backend,
            Status.INFEASIBLE,
            message=f"infeasible before solving: {m.trivially_infeasible}",
            info=info,
            mode=mode,
        )
    elif time_limit == 0:
        sol = Solution(
            backend, Status.UNKNOWN, message="time limit 0: not solved", info=info, mode=mode
        )
    else:
        hint_values = None
        if hint is not None:
            hint_values, why = form.values_of(hint)
            info["hint"] = "used" if hint_values is not None else f"ignored: {why}"
        sol = certify(
            form,
            backend,
            _backend(backend),
            # what is left of the whole call's limit (the floor and the model used some): at
            # or below 0, certify solves nothing and returns the hint if there is one
            time_limit=None if time_limit is None else time_limit - (time.perf_counter() - t0),
            threads=threads,
            write_model=write_model,
            hint=hint if hint_values is not None else None,
            hint_values=hint_values,
            progress=progress,
            info=info,
            cutoff=None if cutoff is None else float(cutoff),
        )
    sol.seconds = time.perf_counter() - t0
    if floor_info is not None and sol.message.startswith("time limit reached"):
        sol.message += (
            f" (time limit {time_limit:g} s, of which the throughput floor's solve used "
            f"{floor_info['seconds']:.3g} s)"
        )
    info["solver_seconds"] = sum(r["seconds"] for r in info.get("rounds", []))
    if sol.plan is not None:
        # the last, independent check; certify() already evaluated this plan
        sol = checked_solution(
            instance,
            sol,
            tolerance=1e-6,
            absolute=info.get("scaling_error", 0.0),
            restrictions=restrictions,
        )
    info["gap"] = sol.gap
    return sol
