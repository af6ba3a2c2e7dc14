"""The in-flight rules of the path formulation: what a stage holds and what it leaves for
the stages in front of it (``docs/milp.md``, "The path formulation").

Along a path the *state* is what the stages behind a set have used: Piper's rule (contract
sec. 2, rule 6) keeps s, the suffix sum of d; a stage with degree d in front of state s
holds y = ceil((s + d) / d) microbatches and leaves s + d. Under ``gpipe`` (sec. 9) a stage
holds y = N / d whatever is behind it, and the state only counts sum d <= N. A rule is
one object (held, after, limit, y_top), so that another budget (e.g. the schedule's,
sec. 11) is one more class: the arcs (:mod:`~piper_ilp.milp.path_arcs`) and the network
(:mod:`~piper_ilp.milp.path_network`) ask only these. The pruning by dominance assumes
that y held is non-decreasing in the state behind and that ``after`` adds d; a rule
without these properties must not be plugged in as is. A new rule is only used once its
mode is added to :data:`COVERED_MODES` (with a campaign against brute).
"""

from __future__ import annotations

from piper_ilp.cost import microbatches_in_flight
from piper_ilp.errors import InputError
from piper_ilp.mode import Mode

__all__ = ["COVERED_MODES", "InFlightRule", "PiperRule", "GpipeRule", "rule_for", "covers"]


class InFlightRule:
    """What a stage with degree d holds and leaves, given the state behind it."""

    def held(self, before: int, d: int, N: int) -> int:
        """y, the microbatches one replica holds with ``before`` behind it."""
        raise NotImplementedError

    def after(self, before, d: int):
        """The state the stage leaves (ints or numpy arrays)."""
        raise NotImplementedError

    def limit(self, d: int, y_fit: int, top: int) -> int:
        """The largest state behind the stage at which it holds at most ``y_fit``
        microbatches, capped at ``top`` (-1: none)."""
        raise NotImplementedError

    def y_top(self, d: int, cap: int) -> int:
        """The most microbatches a stage with degree d can hold under this rule when
        no state exceeds ``cap``."""
        raise NotImplementedError


class PiperRule(InFlightRule):
    """y = ceil(s / d), s = the state behind plus d (``1f1b`` and ``1f1b-flush``).

    Examples
    --------
    >>> r = PiperRule()
    >>> r.held(5, 2, 100), r.after(5, 2), r.limit(2, 4, 100)
    (4, 7, 6)
    """

    def held(self, before: int, d: int, N: int) -> int:
        return microbatches_in_flight(before + d, d)

    def after(self, before, d: int):
        return before + d

    def y_top(self, d: int, cap: int) -> int:
        return microbatches_in_flight(cap, d)

    def limit(self, d: int, y_fit: int, top: int) -> int:
        # ceil((s + d) / d) = 1 + ceil(s / d) <= y_fit  <=>  s <= d (y_fit - 1)
        return min(d * (y_fit - 1), top) if y_fit >= 1 else -1


class GpipeRule(InFlightRule):
    """y = N / d whatever is behind (``gpipe``); the state is the sum of d.

    Examples
    --------
    >>> r = GpipeRule(8)
    >>> r.held(5, 2, 8), r.limit(2, 4, 100), r.limit(2, 3, 100)
    (4, 100, -1)
    """

    def __init__(self, N: int):
        self.N = N

    def held(self, before: int, d: int, N: int) -> int:
        return N // d

    def after(self, before, d: int):
        return before + d

    def y_top(self, d: int, cap: int) -> int:
        return self.N // d

    def limit(self, d: int, y_fit: int, top: int) -> int:
        return top if y_fit >= self.N // d else -1


#: The modes the path formulation solves, listed whole: sequential pipelining, the
#: throughput objective, the three schedules (each checked against brute). A mode with
#: any other field (graph pipelining, the batch time, sec. 11's in-flight rule
#: ``schedule``) is not equal to one of these and is refused, never solved by a rule that
#: does not hold.
COVERED_MODES = (
    Mode("sequential", "throughput", "1f1b"),
    Mode("sequential", "throughput", "1f1b-flush"),
    Mode("sequential", "throughput", "gpipe"),
)


def covers(mode: Mode) -> bool:
    """True when the path formulation solves ``mode`` (one of :data:`COVERED_MODES`).

    Examples
    --------
    >>> covers(Mode()), covers(Mode(schedule="gpipe")), covers(Mode("graph"))
    (True, True, False)
    >>> covers(Mode(objective="batch-time"))
    False
    """
    return mode in COVERED_MODES


def rule_for(mode: Mode, N: int) -> InFlightRule:
    """The rule of ``mode`` (sequential throughput modes only).

    Raises
    ------
    InputError
        For a mode the path formulation does not solve.
    """
    if not covers(mode):
        raise InputError(
            f"the path formulation does not solve the mode {mode.label} (it solves "
            f"{', '.join(m.label for m in COVERED_MODES)})"
        )
    return GpipeRule(N) if mode.schedule == "gpipe" else PiperRule()
