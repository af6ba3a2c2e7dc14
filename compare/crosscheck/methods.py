"""The one registry of solving methods: every planner, MILP backend, heuristic and oracle, by name.

``run_method(instance, name, restrictions, **options)`` returns a
:class:`~piper_ilp.solution.Solution` whose plan the evaluator has checked. The CLI
(``solve``, ``verify``), the cross-check harness and the campaigns all go through
:data:`METHODS`, so a method is wired in once.

Each :class:`Method` states

* its ``kind``: ``"exact"`` (the DP: an "optimal" is a proof within 1e-9 relative),
  ``"milp"`` (a MILP backend: a proof within 1e-6 relative of the optimum, contract
  sec. 7), ``"heuristic"`` (a plan, never a proof: Piper's greedy option choice, sec. 5)
  or ``"oracle"`` (exhaustive search on tiny graphs, the referee);
* its ``lineage``: methods of one lineage share their formulation (every MILP backend
  solves the same model; ``greedy`` is the DP with another knapsack), so ``verify``
  counts two proofs as independent only when their lineages differ. ``path`` (the path
  formulation, :mod:`piper_ilp.milp.path_solve`: bisection on the bottleneck over a
  network of successor-closed sets) is a lineage of its own, and shares no code with
  ``dp/`` nor with the compact model of the MILP backends (``docs/milp.md``);
* the solver ``options`` that apply to it. Giving another one is an
  :class:`~piper_ilp.errors.InputError` (e.g. ``threads`` for ``dp``);
* whether it handles ``all_modes`` (:class:`~piper_ilp.mode.Mode`: graph pipelining,
  the batch-time objective, the schedules, the in-flight rule; contract secs. 8, 9, 11):
  the DP, the MILP backends and brute do; the heuristics and external planners solve only
  the default mode (they plan under Piper's in-flight rule), and asking them for another is
  an InputError naming the method and the mode.

The mode is an argument like the restrictions: ``run_method(instance, name,
restrictions, mode=Mode(...))``; the solution's ``value`` is then the evaluator's value of
that mode's objective.

Adding a method (a planner, a MILP backend, a baseline) is one module with a
``solve(instance, restrictions, **options) -> Solution`` function and one line in
:func:`_registry`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from compare.crosscheck.compiled import compiled_refusal, solve_compiled_method
from piper_ilp.cost import TPS_RTOL
from piper_ilp.errors import InputError
from piper_ilp.instance import Instance
from piper_ilp.milp import BACKENDS as MILP_BACKENDS
from piper_ilp.mode import DEFAULT_MODE, PIPELINES, Mode
from piper_ilp.plan import Plan
from piper_ilp.settings import Settings
from piper_ilp.solution import Restrictions, Solution

__all__ = [
    "KINDS",
    "METHODS",
    "MILP_BACKENDS",
    "MILP_RTOL",
    "Method",
    "check_method",
    "check_mode",
    "default_methods",
    "external_method",
    "method",
    "run_method",
    "settings_of",
]

#: The kinds of method, and what an "optimal" from each is worth.
KINDS = ("exact", "milp", "heuristic", "oracle")

#: A MILP backend's "optimal" must be within this relative distance of the optimum
#: (contract sec. 7).
MILP_RTOL = 1e-6


@dataclass(frozen=True)
class Method:
    """One solving method.

    Attributes
    ----------
    name : str
        What ``--method`` / ``--methods`` take.
    kind : {"exact", "milp", "heuristic", "oracle"}
        See the module docstring.
    solve : callable
        ``solve(instance, restrictions, **options) -> Solution``; it receives only the
        options in ``options`` (and ``progress`` when listed there), plus ``mode`` when
        ``all_modes``.
    options : frozenset of str
        The solver options that apply to this method.
    lineage : str
        Methods with the same lineage are not independent proofs of each other.
    rtol : float
        The relative accuracy of its "optimal" claims: 1e-9 (``TPS_RTOL``) for exact
        methods and the oracle, :data:`MILP_RTOL` for MILP backends.
    summary : str
        One line for help texts.
    all_modes : bool
        True when it solves every :class:`~piper_ilp.pipeline.Mode` (its ``solve`` then
        takes a keyword ``mode``); False when it solves only :data:`DEFAULT_MODE`.
    third_party : bool
        True when its failures (an internal error of its certification, an answer that
        fails verify's checks) are a third-party solver's (the compact model on CP-SAT,
        CBC or SCIP, whose tolerances the contract allows for): verify shows them as a
        backend error, no proof and no finding. False for the project's own searches
        (the DP, path, columns, brute, greedy): their failure is an error (exit 1).
    default_for : frozenset of str
        The pipelinings (:data:`~piper_ilp.mode.PIPELINES`) in which ``verify`` and
        ``campaign`` run it when no methods are named (:func:`default_methods`).
    """

    name: str
    kind: str
    solve: Callable[..., Solution]
    options: frozenset[str]
    lineage: str
    rtol: float
    summary: str
    all_modes: bool = False
    third_party: bool = False
    default_for: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if not self.default_for <= set(PIPELINES):
            raise ValueError(
                f"method {self.name}: default_for {sorted(self.default_for)} is not among "
                f"{PIPELINES}"
            )

    @property
    def proves(self) -> bool:
        """True when an "optimal" or "infeasible" from this method is a proof (not a heuristic)."""
        return self.kind != "heuristic"

    def handles(self, mode: Mode) -> bool:
        """True when this method can solve in ``mode``."""
        return self.all_modes or mode.is_default


# --------------------------------------------------------------------------------------
# The solve functions (imports inside: ortools and pulp load only when a MILP runs)
# --------------------------------------------------------------------------------------


def _dp_guards(max_ideals: int | None, force: bool) -> dict:
    """The DP's size guards: ``force`` lifts every one of them (the successor-closed sets,
    the tables' memory, and in the other modes the frontier width and the labels)."""
    if force:
        return {"max_ideals": sys.maxsize, "force": True}
    return {} if max_ideals is None else {"max_ideals": max_ideals}


def _solve_dp(
    instance: Instance,
    restrictions: Restrictions,
    *,
    mode: Mode = DEFAULT_MODE,
    knapsack: str = "exact",
    max_ideals: int | None = None,
    force: bool = False,
    progress: bool = False,
    time_limit: float | None = None,
) -> Solution:
    from dp import solve_dp

    return solve_dp(
        instance,
        restrictions,
        knapsack=knapsack,
        progress=progress,
        mode=mode,
        time_limit=time_limit,
        **_dp_guards(max_ideals, force),
    )


def _solve_greedy(
    instance: Instance,
    restrictions: Restrictions,
    *,
    max_ideals: int | None = None,
    force: bool = False,
    progress: bool = False,
    time_limit: float | None = None,
) -> Solution:
    """Piper's greedy knapsack: :func:`_solve_dp` with ``knapsack="greedy"`` (its one mode)."""
    return _solve_dp(
        instance,
        restrictions,
        knapsack="greedy",
        max_ideals=max_ideals,
        force=force,
        progress=progress,
        time_limit=time_limit,
    )


def scope_refusal(name: str, mode: Mode, restrictions: Restrictions) -> str | None:
    """Why method ``name`` refuses ``mode`` under ``restrictions`` before it reads the
    instance (None when it solves them): the scope rules of ``path``, ``columns`` and
    ``compiled``, the methods whose scope depends on restrictions as well as on the mode;
    every other method's scope is its :meth:`Method.handles`.

    Examples
    --------
    >>> scope_refusal("path", Mode("graph"), Restrictions()) is not None
    True
    >>> scope_refusal("dp", Mode("graph"), Restrictions()) is None
    True
    >>> scope_refusal("compiled", Mode("graph"), Restrictions()) is not None
    True
    """
    from piper_ilp.milp.graph_solve import columns_refusal
    from piper_ilp.milp.path_solve import path_refusal

    refusal = {
        "path": path_refusal,
        "columns": columns_refusal,
        "compiled": compiled_refusal,
    }.get(name)
    if refusal is not None:
        return refusal(mode, restrictions)
    if not METHODS[name].handles(mode):
        return f"method {name} does not solve {mode.label}"
    return None


def _others(name: str, mode: Mode, restrictions: Restrictions) -> str:
    """The registry's other exact methods that solve ``mode`` under ``restrictions`` (what
    a refusal of ``name`` names), e.g. ``"dp, cpsat, cbc, scip, columns or brute"``; never
    ``compiled`` (the DP again, for at most 15 nodes: ``dp`` is named)."""
    names = [
        other
        for other, m in METHODS.items()
        if m.all_modes
        and other not in (name, "compiled")
        and scope_refusal(other, mode, restrictions) is None
    ]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _solve_path(
    instance: Instance,
    restrictions: Restrictions,
    *,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    hint_from_dp: bool = False,
    hint: Plan | None = None,
    force: bool = False,
    progress: bool = False,
) -> Solution:
    """The path formulation (docs/milp.md); a mode, restriction or graph size it does not
    cover is a :class:`~piper_ilp.errors.SizeLimitError` (verify: skipped)."""
    from piper_ilp.errors import SizeLimitError
    from piper_ilp.milp.path_solve import DEFAULT_MAX_SETS, path_refusal, solve_path

    refused = path_refusal(mode, restrictions)
    if refused is not None:
        raise SizeLimitError(
            f"{instance.source}: {refused}; use {_others('path', mode, restrictions)}"
        )
    if hint is None and hint_from_dp:
        from dp import solve_dp

        hint = solve_dp(instance, restrictions, mode=mode, **_dp_guards(None, force)).plan
    return solve_path(
        instance,
        restrictions,
        mode=mode,
        time_limit=time_limit,
        hint=hint,
        progress=progress,
        max_sets=(1 << 62) if force else DEFAULT_MAX_SETS,
    )


def _solve_columns(
    instance: Instance,
    restrictions: Restrictions,
    *,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    threads: int | None = None,
    force: bool = False,
    progress: bool = False,
) -> Solution:
    """Stage columns under graph pipelining (docs/milp.md); a mode, restriction or graph
    size it does not cover is a :class:`~piper_ilp.errors.SizeLimitError` (verify:
    skipped)."""
    from piper_ilp.errors import SizeLimitError
    from piper_ilp.milp.graph_solve import DEFAULT_MAX_STAGES, columns_refusal, solve_columns

    refused = columns_refusal(mode, restrictions)
    if refused is not None:
        raise SizeLimitError(
            f"{instance.source}: {refused}; use {_others('columns', mode, restrictions)}"
        )
    return solve_columns(
        instance,
        restrictions,
        mode=mode,
        time_limit=time_limit,
        threads=threads or 1,
        progress=progress,
        max_stages=(1 << 62) if force else DEFAULT_MAX_STAGES,
    )


def _milp_solver(backend: str) -> Callable[..., Solution]:
    def solve(
        instance: Instance,
        restrictions: Restrictions,
        *,
        mode: Mode = DEFAULT_MODE,
        time_limit: float | None = None,
        threads: int | None = None,
        write_model: str | Path | None = None,
        hint_from_dp: bool = False,
        hint: Plan | None = None,
        force: bool = False,
        max_variables: int | None = None,
        progress: bool = False,
    ) -> Solution:
        from piper_ilp.milp import solve_milp

        if hint is None and hint_from_dp:
            from dp import solve_dp

            # a hint valid in the same mode, past the DP's guards when forced
            hint = solve_dp(instance, restrictions, mode=mode, **_dp_guards(None, force)).plan
        kwargs = {} if max_variables is None else {"max_variables": max_variables}
        return solve_milp(
            instance,
            restrictions,
            backend=backend,
            time_limit=time_limit,
            threads=threads,
            write_model=write_model,
            hint=hint,
            force=force,
            progress=progress,
            **kwargs,
            mode=mode,
        )

    solve.__name__ = f"solve_{backend}"
    return solve


def _solve_brute(
    instance: Instance,
    restrictions: Restrictions,
    *,
    mode: Mode = DEFAULT_MODE,
    force: bool = False,
    time_limit: float | None = None,
) -> Solution:
    """Exhaustive search (:func:`compare.crosscheck.brute.solve_brute`); its size refusal
    names the registry's other exact methods for the mode (:func:`_others`)."""
    from compare.crosscheck.brute import solve_brute
    from piper_ilp.errors import SizeLimitError

    try:
        return solve_brute(instance, restrictions, force=force, mode=mode, time_limit=time_limit)
    except SizeLimitError as exc:
        raise SizeLimitError(f"{exc}; use {_others('brute', mode, restrictions)}") from None


def _solve_2bw(instance: Instance, restrictions: Restrictions) -> Solution:
    from compare.baselines.twobw import solve_2bw

    return solve_2bw(instance, restrictions)


def _solve_pipedream(instance: Instance, restrictions: Restrictions) -> Solution:
    """PipeDream's planner in its own cost model; its plan (d = replication, t = 1,
    "vanilla") judged under Piper's contract. Without data parallelism it plans a straight
    pipeline. A plan that is not valid under Piper's contract is no answer (UNKNOWN, with
    the rules it breaks), never evidence of infeasibility."""
    import time

    from dp.pipedream import pipedream_plan_for
    from piper_ilp.solution import Status, checked_solution

    start = time.perf_counter()
    mapped = pipedream_plan_for(instance, straight=restrictions.max_d == 1)
    seconds = time.perf_counter() - start
    info = {"pipedream_objective": getattr(mapped.result, "time_per_stage", None)}
    broken = restrictions.violation(instance, mapped.plan) if mapped.valid else None
    if broken is not None:  # PipeDream plans without them (e.g. --uniform): no answer
        return Solution(
            "pipedream",
            Status.UNKNOWN,
            seconds=seconds,
            info=info,
            message=f"PipeDream's plan breaks the restrictions: {broken}",
        )
    if not mapped.valid:
        why = "; ".join(mapped.reasons) or "PipeDream found no plan"
        return Solution(
            "pipedream",
            Status.UNKNOWN,
            seconds=seconds,
            info=info,
            message=f"PipeDream's plan is not valid under Piper's contract: {why}",
        )
    sol = Solution(
        "pipedream",
        Status.FEASIBLE,
        plan=mapped.plan,
        objective=mapped.tps,
        seconds=seconds,
        info=info,
        message="baseline: PipeDream's planner (not a proof)",
    )
    return checked_solution(instance, sol, restrictions=restrictions)


_DP_OPTIONS = frozenset({"knapsack", "max_ideals", "force", "progress", "time_limit"})
_MILP_OPTIONS = frozenset(
    {
        "time_limit",
        "threads",
        "write_model",
        "hint_from_dp",
        "hint",
        "force",
        "max_variables",
        "progress",
    }
)

#: The MILP backends verify and campaign run unless told otherwise (SCIP only when named).
_DEFAULT_BACKENDS = ("cpsat", "cbc")

_MILP_SUMMARY = {
    "cpsat": "the exact MILP on OR-Tools CP-SAT",
    "cbc": "the exact MILP on CBC (PuLP)",
    "scip": "the exact MILP on SCIP (OR-Tools MPSolver)",
}


def _registry() -> dict[str, Method]:
    """Every method, in the order verify runs and lists them: the DP, the formulations of
    a lineage of their own, the MILP backends, the oracle, the heuristics. ``default_for``
    says which run in verify and campaign unless ``--methods`` names others: in sequential
    pipelining dp, path, cpsat, cbc, brute; in graph pipelining ``columns`` in path's place
    (``path`` solves only sequential modes, and ``columns`` proves graph models the compact
    MILP does not prove within verify's time limit, docs/milp.md)."""
    every = frozenset(PIPELINES)
    table = [
        Method(
            "dp",
            "exact",
            _solve_dp,
            _DP_OPTIONS,
            "dp",
            TPS_RTOL,
            "Piper's DP over successor-closed sets (sec. 4)",
            all_modes=True,
            default_for=every,
        ),
        Method(
            "path",
            "milp",
            _solve_path,
            frozenset({"time_limit", "hint_from_dp", "hint", "force", "progress"}),
            "path",
            MILP_RTOL,
            "the path formulation: bisection on the bottleneck over a network of "
            "successor-closed sets (sequential throughput modes; a lineage of its own)",
            all_modes=True,
            default_for=frozenset({"sequential"}),
        ),
        Method(
            "columns",
            "milp",
            _solve_columns,
            frozenset({"time_limit", "threads", "force", "progress"}),
            "columns",
            MILP_RTOL,
            "stage columns under graph pipelining: CP-SAT over the differences of "
            "successor-closed sets, bisection on the bottleneck (a lineage of its own)",
            all_modes=True,
            default_for=frozenset({"graph"}),
        ),
        *(
            Method(
                b,
                "milp",
                _milp_solver(b),
                _MILP_OPTIONS,
                "milp",
                MILP_RTOL,
                _MILP_SUMMARY.get(b, f"the exact MILP on {b}"),
                all_modes=True,
                third_party=True,
                default_for=every if b in _DEFAULT_BACKENDS else frozenset(),
            )
            for b in MILP_BACKENDS
        ),
        Method(
            "compiled",
            "exact",
            solve_compiled_method,
            frozenset({"time_limit", "progress"}),
            "dp",
            TPS_RTOL,
            "the DP's default mode as one numba kernel, up to 15 nodes (the DP's lineage)",
            all_modes=True,
        ),
        Method(
            "brute",
            "oracle",
            _solve_brute,
            frozenset({"force", "time_limit"}),
            "brute",
            TPS_RTOL,
            "exhaustive search (tiny graphs)",
            all_modes=True,
            default_for=every,
        ),
        Method(
            "greedy",
            "heuristic",
            _solve_greedy,
            frozenset({"max_ideals", "force", "progress", "time_limit"}),
            "dp",
            TPS_RTOL,
            "the DP with Piper's greedy option choice (sec. 5); never a proof",
        ),
        Method(
            "2bw",
            "heuristic",
            _solve_2bw,
            frozenset(),
            "2bw",
            TPS_RTOL,
            "PipeDream-2BW's planner as Piper's baseline (sec. 10); never a proof",
        ),
        Method(
            "pipedream",
            "heuristic",
            _solve_pipedream,
            frozenset(),
            "pipedream",
            TPS_RTOL,
            "PipeDream's own planner, its plan judged under Piper's contract; never a proof",
        ),
    ]
    return {m.name: m for m in table}


def external_method(name: str, command: str, *, timeout: float | None = None) -> Method:
    """A registry entry for an external planner (``--external NAME=COMMAND``, see
    :mod:`compare.crosscheck.external`): a heuristic of its own lineage; its plan is returned
    unchecked, for the caller's evaluator to judge."""

    def solve(instance: Instance, restrictions: Restrictions) -> Solution:
        from compare.crosscheck.external import solve_external

        return solve_external(
            instance, command, restrictions, name=name, timeout=timeout, check=False
        )

    return Method(
        name,
        "heuristic",
        solve,
        frozenset(),
        f"external:{name}",
        TPS_RTOL,
        f"external planner: {command}",
    )


#: Every method, by name: ``dp``, ``path``, ``columns``, the MILP backends, ``brute``,
#: ``greedy``, ``2bw``, ``pipedream``.
METHODS: dict[str, Method] = _registry()


def default_methods(mode: Mode = DEFAULT_MODE) -> tuple[str, ...]:
    """The methods ``verify`` and ``campaign`` run in ``mode`` when none are named: those
    whose :attr:`Method.default_for` holds the mode's pipelining, in registry order.

    Examples
    --------
    >>> default_methods()
    ('dp', 'path', 'cpsat', 'cbc', 'brute')
    >>> default_methods(Mode("graph", "batch-time"))
    ('dp', 'columns', 'cpsat', 'cbc', 'brute')
    """
    return tuple(name for name, m in METHODS.items() if mode.pipeline in m.default_for)


def method(name: str) -> Method:
    """The registered method called ``name``.

    Raises
    ------
    InputError
        For an unknown name (the message lists the known ones).
    """
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def check_mode(m: Method, mode: Mode) -> None:
    """Raise InputError (one line naming the method and the mode) when ``m`` cannot solve
    in ``mode``.

    Examples
    --------
    >>> check_mode(METHODS["greedy"], Mode("graph"))  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: method greedy solves only the default mode
    sequential/throughput/1f1b, not graph/throughput/1f1b
    """
    if not m.handles(mode):
        raise InputError(
            f"method {m.name} solves only the default mode {DEFAULT_MODE.label}, not {mode.label}"
        )


def check_method(m: Method, settings: Settings) -> None:
    """Raise InputError (one line) when ``m`` cannot solve with ``settings``: a mode it does
    not handle (:func:`check_mode`), or a solver option given that does not apply to it.

    Examples
    --------
    >>> check_method(METHODS["dp"], Settings(threads=2))  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: option threads does not apply to method dp (it takes: force,
    knapsack, max_ideals, time_limit)
    """
    check_mode(m, settings.mode)
    for key in settings.given:
        if key not in m.options:
            takes = ", ".join(sorted(m.options - {"progress"})) or "no options"
            raise InputError(f"option {key} does not apply to method {m.name} (it takes: {takes})")


def run_method(
    instance: Instance,
    name: str,
    restrictions: Restrictions = Restrictions(),
    *,
    settings: Settings | None = None,
    mode: Mode = DEFAULT_MODE,
    progress: bool = False,
    **options: Any,
) -> Solution:
    """Solve ``instance`` with the method called ``name``.

    The API's entry point: the mode and the options are checked here once, as a
    :class:`~piper_ilp.settings.Settings`, unless the caller passes one it built (the CLI,
    :func:`compare.crosscheck.verify.verify_instance`); the solver receives the checked
    values.

    Parameters
    ----------
    instance : Instance
    name : str
        A key of :data:`METHODS`.
    restrictions : Restrictions
        The paper's ablations; every method obeys them.
    settings : Settings, optional
        The mode, time limit, threads, cluster overrides and options, already checked;
        then ``mode`` and ``options`` are not given.
    mode : Mode
        Pipelining, objective, schedule and in-flight rule (contract secs. 8, 9, 11); a
        method that handles only the default mode refuses another (InputError).
    progress : bool
        Show a progress bar on stderr where the method has one (dp, greedy); a display
        hint that other methods ignore.
    **options
        Solver options: ``knapsack``, ``max_ideals`` (dp, greedy); ``time_limit`` (dp,
        greedy, brute and the MILP backends: seconds before stopping, status feasible or
        unknown); ``threads``, ``write_model``, ``hint_from_dp``, ``hint`` (a Plan: warm
        start and cutoff), ``max_variables`` (MILP backends; ``hint`` and ``hint_from_dp`` also
        ``path``); ``force`` (every method but
        greedy's knapsack: run past the size guard). An option whose value is None or
        False counts as not given.

    Returns
    -------
    Solution

    Raises
    ------
    InputError
        Unknown method, an option that does not apply to it (one line naming both), a
        mode it does not handle, a time limit or threads out of range, ``settings``
        together with ``mode`` or options, or an instance too large for it
        (SizeLimitError).
    InternalError
        A solver's plan failed the evaluator's check.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> inst = random_instance("chain", 3, seed=0, memory="loose")
    >>> run_method(inst, "dp").status.value
    'optimal'
    >>> run_method(inst, "dp", threads=2)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: option threads does not apply to method dp (it takes: force,
    knapsack, max_ideals, time_limit)
    """
    m = method(name)
    if settings is None:
        settings = settings_of(mode, options)
    elif options or mode != DEFAULT_MODE:
        raise InputError("run_method takes settings= or the mode and options, not both")
    check_method(m, settings)
    given = settings.given
    if progress and "progress" in m.options:
        given["progress"] = True
    if m.all_modes:
        given["mode"] = settings.mode
    return m.solve(settings.apply(instance), restrictions, **given)


def settings_of(mode: Mode, options: dict[str, Any]) -> Settings:
    """The :class:`~piper_ilp.settings.Settings` of ``run_method``'s keywords, checked:
    ``time_limit`` and ``threads`` are its fields, the other options its ``options``.

    >>> settings_of(DEFAULT_MODE, {"time_limit": 1.0, "knapsack": "greedy"}).given
    {'time_limit': 1.0, 'knapsack': 'greedy'}
    """
    rest = dict(options)
    return Settings(
        mode=mode,
        time_limit=rest.pop("time_limit", None),
        threads=rest.pop("threads", None),
        options=rest,
    )
