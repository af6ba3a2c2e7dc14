"""The DP's entry point for every mode: :func:`solve_dp` sends the default mode (sequential,
throughput, 1f1b: cost model secs. 2-5), under either in-flight rule (sec. 11), to the
threshold DP of :mod:`dp.threshold_dp` and every other mode (graph pipelining, batch time,
gpipe: secs. 8-9) to the label DP of :mod:`dp.modes`."""

from __future__ import annotations

from dp.deadline import Deadline
from dp.modes import solve_modes
from dp.threshold_dp import solve_threshold_dp
from dp.uniform import solve_uniform
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Solution

__all__ = ["solve_dp"]

#: The options of :func:`dp.threshold_dp.solve_threshold_dp` that the label DP of the other
#: modes takes too (the others, e.g. ``progress`` and the tuning, apply to the default mode).
_LABEL_DP_OPTIONS = ("knapsack", "max_ideals", "force")


def solve_dp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    **options,
) -> Solution:
    """Optimal pipeline plan by Piper's DP over successor-closed sets, in any mode.

    Parameters
    ----------
    instance : Instance
        The profiled graph with K, M, B, N.
    restrictions : Restrictions
        Ablations and caps (max_d, max_t, excluded option ids); with ``uniform``, one run
        per (t, d) pair (:func:`dp.uniform.solve_uniform`).
    mode : Mode
        Pipelining, objective, schedule and in-flight rule (secs. 8, 9, 11).
    time_limit : float, optional
        Wall-clock seconds before the DP stops; it then never claims "optimal".
    **options
        The options of :func:`dp.threshold_dp.solve_threshold_dp` except ``in_flight``
        (``mode`` gives it): ``knapsack`` ("exact" or "greedy", Piper's rule: default mode
        only), ``max_ideals``, ``force``, ``progress`` and its tuning (``max_table_bytes``,
        ``small_s``, ``chain_first``, ``plain_paths``). Outside the default mode,
        :func:`dp.modes.solve_modes` takes ``knapsack``, ``max_ideals`` and ``force``; the
        others do not apply there.

    Returns
    -------
    Solution
        See :func:`dp.threshold_dp.solve_threshold_dp` and :func:`dp.modes.solve_modes`.

    Raises
    ------
    SizeLimitError, InputError, InternalError
        As the solver for the mode raises them.
    TypeError
        An option that :func:`dp.threshold_dp.solve_threshold_dp` does not take.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> solve_dp(random_instance("chain", 4, 1, memory="loose")).status.value
    'optimal'
    """
    if restrictions.uniform:
        return solve_uniform(
            instance, restrictions, solve_dp, mode=mode, time_limit=time_limit, **options
        )
    if mode.with_in_flight("piper").is_default:
        return solve_threshold_dp(
            instance, restrictions, time_limit=time_limit, in_flight=mode.in_flight, **options
        )
    return solve_modes(
        instance,
        restrictions,
        mode=mode,
        deadline=Deadline(time_limit),
        **{k: v for k, v in options.items() if k in _LABEL_DP_OPTIONS},
    )
