"""One entry point to every solving method, by name.

``run_method(instance, "dp" | "cpsat" | "cbc" | "scip" | "brute", restrictions, ...)`` returns a
:class:`~piper_ilp.solution.Solution` whose plan the evaluator has checked. The CLI
and the cross-check harness both go through here, so a method is wired in once.
"""

from __future__ import annotations

from pathlib import Path

from piper_ilp.instance import Instance
from piper_ilp.milp import BACKENDS as MILP_BACKENDS
from piper_ilp.solution import Restrictions, Solution

__all__ = ["METHODS", "MILP_BACKENDS", "run_method"]
METHODS = ("dp",) + MILP_BACKENDS + ("brute",)


def run_method(
    instance: Instance,
    method: str,
    restrictions: Restrictions = Restrictions(),
    *,
    knapsack: str = "exact",
    time_limit: float | None = None,
    threads: int | None = None,
    write_model: str | Path | None = None,
    hint_from_dp: bool = False,
    force: bool = False,
    max_ideals: int | None = None,
    max_variables: int | None = None,
    progress: bool = False,
) -> Solution:
    """Solve ``instance`` with ``method``.

    Parameters
    ----------
    method : {"dp", "cpsat", "cbc", "scip", "brute"}
        ``dp``: the optimized DP (``knapsack`` "exact" or Piper's "greedy");
        ``cpsat`` / ``cbc``: the exact MILP on that backend (``time_limit``, ``threads``,
        ``write_model``, ``hint_from_dp``, ``force``, ``max_variables``);
        ``brute``: the exhaustive oracle for graphs of a few nodes.

    Raises
    ------
    InputError
        Unknown method, or the instance is too large for it (SizeLimitError).
    InternalError
        A solver's plan failed the evaluator's check.
    """
    if method == "dp":
        from dp import solve_dp

        kwargs = {} if max_ideals is None else {"max_ideals": max_ideals}
        return solve_dp(instance, restrictions, knapsack=knapsack, progress=progress, **kwargs)
    if method in MILP_BACKENDS:
        from piper_ilp.milp import solve_milp  # ortools and pulp load only when a MILP runs

        hint = None
        if hint_from_dp:
            from dp import solve_dp

            hint = solve_dp(instance, restrictions).plan
        kwargs = {} if max_variables is None else {"max_variables": max_variables}
        return solve_milp(
            instance,
            restrictions,
            backend=method,
            time_limit=time_limit,
            threads=threads,
            write_model=write_model,
            hint=hint,
            force=force,
            **kwargs,
        )
    if method == "brute":
        from compare.brute import solve_brute

        return solve_brute(instance, restrictions)
    from piper_ilp.errors import InputError

    raise InputError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
