"""The registry method ``compiled``: the DP's default mode as one numba kernel
(:func:`dp.compiled.solve_compiled`), for small DAGs (at most 15 nodes).

It is a second implementation of the DP's recurrence, not an independent proof: its
lineage is ``dp`` (``verify --methods dp,compiled`` alone is a single proof). What it does
not solve it refuses in one line (:class:`~piper_ilp.errors.SizeLimitError`, skipped by
``verify``, as the path and columns formulations' refusals): another mode, uniform
degrees, more than 15 nodes or 16 options per (node, t), tables above the kernel's size
guard. The kernel cannot stop early, so a time
limit is honoured before it starts: the instance is refused when the kernel's work
estimate (:func:`dp.compiled.small_dp.work_estimate`) passes what it does in that many CPU
seconds at :data:`WORK_PER_SECOND`.
"""

from __future__ import annotations

from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.solution import Restrictions, Solution

__all__ = ["WORK_PER_SECOND", "compiled_refusal", "solve_compiled_method"]

#: Units of :func:`dp.compiled.small_dp.work_estimate` per CPU second that a time limit
#: assumes: about a third of the slowest rate measured (5.4e6, docs/architecture.md); an
#: instance above ``time_limit`` times this is refused. An estimate, not a bound.
WORK_PER_SECOND = 2e6


def compiled_refusal(mode: Mode, restrictions: Restrictions = Restrictions()) -> str | None:
    """Why the compiled DP does not solve ``mode`` under ``restrictions`` (None when it
    does).

    Examples
    --------
    >>> compiled_refusal(Mode("graph"))
    'the compiled DP solves only the default mode sequential/throughput/1f1b, not graph/throughput/1f1b'
    >>> compiled_refusal(DEFAULT_MODE, Restrictions(uniform=True))
    'the compiled DP does not solve uniform degrees (--uniform)'
    """  # noqa: E501
    if not mode.is_default:
        return (
            f"the compiled DP solves only the default mode {DEFAULT_MODE.label}, not {mode.label}"
        )
    if restrictions.uniform:
        return "the compiled DP does not solve uniform degrees (--uniform)"
    return None


def solve_compiled_method(
    instance: Instance,
    restrictions: Restrictions,
    *,
    mode: Mode = DEFAULT_MODE,
    time_limit: float | None = None,
    progress: bool = False,
) -> Solution:
    """Solve ``instance`` by the compiled kernel (the registry's ``compiled``).

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        Every one but ``uniform``.
    mode : Mode
        Only :data:`~piper_ilp.mode.DEFAULT_MODE`.
    time_limit : float, optional
        CPU seconds: the instance is refused before the kernel runs when its work estimate
        passes ``time_limit * WORK_PER_SECOND`` (the kernel itself cannot stop).
    progress : bool
        Ignored (the kernel shows none).

    Returns
    -------
    Solution
        Method ``"compiled"``: OPTIMAL with the evaluator-checked plan, or INFEASIBLE.

    Raises
    ------
    SizeLimitError
        One line: a mode, restriction or size it does not solve, or the
        time limit too short for its work estimate; it names ``dp`` to use instead.
    """
    src = instance.source
    refused = compiled_refusal(mode, restrictions)
    if refused is not None:
        raise SizeLimitError(f"{src}: {refused}; use dp")
    from dp.compiled import size_refusal, solve_compiled, work_estimate

    inst = restrictions.apply(instance)
    refused = size_refusal(inst)
    if refused is not None:
        raise SizeLimitError(f"{src}: {refused}; use dp")
    if time_limit is not None:
        work = work_estimate(inst)
        if work > time_limit * WORK_PER_SECOND:
            raise SizeLimitError(
                f"{src}: the compiled DP cannot stop early and its work estimate {work:.3g} "
                f"passes --time-limit {time_limit:g} s x {WORK_PER_SECOND:.3g} per s; "
                "use dp (it honours the limit) or a longer limit"
            )
    try:
        sol = solve_compiled(instance, restrictions)
    except SizeLimitError as exc:
        raise SizeLimitError(f"{exc}; use dp") from None
    sol.method = "compiled"
    return sol
