"""The DP's entry point for every mode: :func:`solve_dp` sends the default mode (sequential,
throughput, 1f1b: cost model secs. 2-5), under either in-flight rule (sec. 11), to the
threshold DP of :mod:`dp.threshold_dp` and every other mode (graph pipelining, batch time,
gpipe: secs. 8-9) to the label DP of :mod:`dp.modes`."""

from __future__ import annotations

from dp.deadline import Deadline
from dp.ideals import DEFAULT_MAX_IDEALS
from dp.modes import solve_modes
from dp.threshold_dp import solve_threshold_dp
from dp.uniform import solve_uniform
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Solution

__all__ = ["solve_dp"]


def solve_dp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    knapsack: str = "exact",
    max_ideals: int = DEFAULT_MAX_IDEALS,
    progress: bool = False,
    force: bool = False,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    **tuning,
) -> Solution:
    """Optimal pipeline plan by Piper's DP over successor-closed sets, in any mode.

    Parameters
    ----------
    instance : Instance
        The profiled graph with K, M, B, N.
    restrictions : Restrictions
        Ablations and caps (max_d, max_t, excluded option ids); with ``uniform``, one run
        per (t, d) pair (:func:`dp.uniform.solve_uniform`).
    knapsack : {"exact", "greedy"}
        The option choice per stage: exact (the DP is exact) or Piper's rule (sec. 5,
        default mode only).
    max_ideals : int
        Refuse graphs with more successor-closed sets than this.
    progress : bool
        Show progress on stderr when it is a terminal (default mode).
    force : bool
        Run past the size guards.
    mode : Mode
        Pipelining, objective, schedule and in-flight rule (secs. 8, 9, 11).
    time_limit : float, optional
        Wall-clock seconds before the DP stops; it then never claims "optimal".
    **tuning
        Options of the default mode's threshold DP (``max_table_bytes``, ``small_s``,
        ``chain_first``, ``plain_paths``); see :func:`dp.threshold_dp.solve_threshold_dp`.

    Returns
    -------
    Solution
        See :func:`dp.threshold_dp.solve_threshold_dp` and :func:`dp.modes.solve_modes`.

    Raises
    ------
    SizeLimitError, InputError, InternalError
        As the solver for the mode raises them.
    """
    if restrictions.uniform:
        return solve_uniform(
            instance,
            restrictions,
            solve_dp,
            mode=mode,
            time_limit=time_limit,
            knapsack=knapsack,
            max_ideals=max_ideals,
            progress=progress,
            force=force,
            **tuning,
        )
    if mode.with_in_flight("piper").is_default:
        return solve_threshold_dp(
            instance,
            restrictions,
            knapsack=knapsack,
            max_ideals=max_ideals,
            progress=progress,
            force=force,
            time_limit=time_limit,
            in_flight=mode.in_flight,
            **tuning,
        )
    return solve_modes(
        instance,
        restrictions,
        mode=mode,
        knapsack=knapsack,
        max_ideals=max_ideals,
        force=force,
        deadline=Deadline(time_limit),
    )
