"""The DP's time limit: a :class:`Deadline` checked between units of work, which raises
:class:`TimeUp` once it has passed.
"""

from __future__ import annotations

import time
from typing import Callable

from piper_ilp.settings import check_time_limit

__all__ = ["Deadline", "TimeUp"]

#: The clock (seconds, monotonic; a module attribute so that tests can count checks).
clock = time.monotonic


class TimeUp(Exception):
    """The time limit passed."""


class Deadline:
    """``seconds`` from now (None: never), on ``clock``.

    The DP checks it once per set of the stage tables, once per stage made, and before
    each decision of the threshold search; past it, :meth:`check` raises :class:`TimeUp`
    (caught by :func:`dp.threshold_dp.solve_threshold_dp`, which then returns what it
    has: the best plan in hand and a proven lower bound, status feasible, or nothing,
    status unknown; never "optimal").

    Parameters
    ----------
    seconds : float, optional
        The time limit; None: no limit.
    clock : callable, optional
        Seconds (monotonic) now; default :data:`clock`, read at each call. A clock that
        steps once per reading stops the DP after a given number of checks (tests).

    Raises
    ------
    InputError
        ``seconds`` is not a finite number >= 0 (:func:`piper_ilp.settings.check_time_limit`):
        the DP's guard for a direct call; a time limit from the CLI or ``run_method`` was
        checked there, with the option's name.

    Examples
    --------
    >>> Deadline(None).passed, Deadline(3600).passed
    (False, False)
    """

    def __init__(self, seconds: float | None, clock: Callable[[], float] | None = None):
        self.seconds = check_time_limit(seconds, "time_limit")
        self.clock = _module_clock if clock is None else clock
        self.end = None if seconds is None else self.clock() + seconds
        if self.end is None:
            self.check = _never  # (the hot loops call it once per stage)

    def remaining(self) -> float | None:
        """Seconds left (0 once passed), or None without a limit."""
        return None if self.end is None else max(0.0, self.end - self.clock())

    @property
    def passed(self) -> bool:
        """Whether the deadline has passed."""
        return self.end is not None and self.clock() >= self.end

    def check(self) -> None:
        """Raise :class:`TimeUp` once the deadline has passed."""
        if self.passed:
            raise TimeUp()


def _never() -> None:
    pass


def _module_clock() -> float:
    """The module's :data:`clock`, as it is at the call."""
    return clock()
