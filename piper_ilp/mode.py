"""The mode: what a plan is judged by (contract secs. 8, 9 and 11): the pipelining, the
objective, the schedule and the in-flight rule. A plain value object, passed down like the
restrictions, never a global."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from piper_ilp.errors import InputError

__all__ = [
    "PIPELINES",
    "OBJECTIVES",
    "SCHEDULES",
    "IN_FLIGHT_RULES",
    "Mode",
    "DEFAULT_MODE",
    "ALL_MODES",
    "MODE_KEYS",
    "check_choice",
]

#: The pipelinings: a stage waits for the previous one (sec. 2) or for its stage-graph
#: predecessors (sec. 8).
PIPELINES = ("sequential", "graph")
#: The objectives: the slowest stage's time per sample (sec. 4) or the time per batch with a
#: flush (sec. 9).
OBJECTIVES = ("throughput", "batch-time")
#: The schedules, which fix the microbatches a replica holds (secs. 2, 8, 9).
SCHEDULES = ("1f1b", "1f1b-flush", "gpipe")
#: The in-flight budget (sec. 11): Piper's y = ceil(h / d), or the q / y that 1F1B keeps.
IN_FLIGHT_RULES = ("piper", "schedule")


def check_choice(choice: Any, allowed: Sequence[str], what: str) -> str:
    """Check that ``choice`` is one of ``allowed``: the one check of a pipelining, objective,
    schedule or in-flight rule, wherever it is given (a mode, an option, a file's field).

    Parameters
    ----------
    choice : str
        The value given.
    allowed : sequence of str
        E.g. :data:`PIPELINES`.
    what : str
        What gave it, named first in the message: ``"--schedule"``, ``"in_flight"``, or a
        file and its field (``"plan.json: metadata.pipeline"``).

    Returns
    -------
    str
        ``choice``.

    Raises
    ------
    InputError
        ``choice`` is not in ``allowed``: one line, ``WHAT: choose A, B or C, got 'X'``
        (an InputError is a ValueError).

    Examples
    --------
    >>> check_choice("gpipe", SCHEDULES, "schedule")
    'gpipe'
    >>> check_choice("zb", SCHEDULES, "--schedule")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --schedule: choose 1f1b, 1f1b-flush or gpipe, got 'zb'
    """
    if not isinstance(choice, str) or choice not in allowed:
        options = f"{', '.join(allowed[:-1])} or {allowed[-1]}" if len(allowed) > 1 else allowed[0]
        raise InputError(f"{what}: choose {options}, got {choice!r}")
    return choice


@dataclass(frozen=True)
class Mode:
    """What a plan is judged by: the pipelining (sec. 8), the objective (secs. 4 and 9),
    the schedule, which fixes the memory rule (secs. 2, 8, 9), and the in-flight rule
    (sec. 11: ``piper``, y = ceil(h / d), or ``schedule``, the budget 1F1B keeps).

    ``Mode()`` is the contract's original problem (sequential, throughput, 1f1b, piper).
    ``1f1b`` and ``1f1b-flush`` hold the same microbatches (they differ only in the flush,
    which the batch-time objective models); ``gpipe`` holds y = N / d. The label names
    the in-flight rule only when it is ``schedule``, so that every label (and campaign
    id) made under Piper's rule reads as before.

    Parameters
    ----------
    pipeline : str
        One of :data:`PIPELINES`.
    objective : str
        One of :data:`OBJECTIVES`.
    schedule : str
        One of :data:`SCHEDULES`.
    in_flight : str
        One of :data:`IN_FLIGHT_RULES`.

    Raises
    ------
    InputError
        A value not among its choices (:func:`check_choice`; an InputError is a
        ValueError).

    Examples
    --------
    >>> Mode().label, Mode("graph", "batch-time", "gpipe").label
    ('sequential/throughput/1f1b', 'graph/batch-time/gpipe')
    >>> Mode(in_flight="schedule").label
    'sequential/throughput/1f1b/schedule'
    >>> Mode("tree")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: pipeline: choose sequential or graph, got 'tree'
    """

    pipeline: str = "sequential"
    objective: str = "throughput"
    schedule: str = "1f1b"
    in_flight: str = "piper"

    def __post_init__(self) -> None:
        check_choice(self.pipeline, PIPELINES, "pipeline")
        check_choice(self.objective, OBJECTIVES, "objective")
        check_choice(self.schedule, SCHEDULES, "schedule")
        check_choice(self.in_flight, IN_FLIGHT_RULES, "in_flight")

    @property
    def is_default(self) -> bool:
        """True for the contract's original problem (secs. 2-4)."""
        return self == DEFAULT_MODE

    @property
    def label(self) -> str:
        """``PIPELINE/OBJECTIVE/SCHEDULE``, plus ``/schedule`` under that in-flight rule (what
        :meth:`parse` reads back)."""
        rule = "" if self.in_flight == "piper" else f"/{self.in_flight}"
        return f"{self.pipeline}/{self.objective}/{self.schedule}{rule}"

    def with_in_flight(self, rule: str) -> "Mode":
        """The same mode under the in-flight rule ``rule``.

        Parameters
        ----------
        rule : str
            ``piper`` or ``schedule`` (:data:`IN_FLIGHT_RULES`).

        Returns
        -------
        Mode
            A new mode; ``self`` is left as it is (modes are frozen).

        Raises
        ------
        ValueError
            ``rule`` is not one of :data:`IN_FLIGHT_RULES`.

        Examples
        --------
        >>> Mode("graph", in_flight="schedule").with_in_flight("piper").label
        'graph/throughput/1f1b'
        """
        return Mode(self.pipeline, self.objective, self.schedule, rule)

    @property
    def graph(self) -> bool:
        """Graph pipelining (sec. 8)."""
        return self.pipeline == "graph"

    @property
    def batch_time(self) -> bool:
        """The batch-time objective (sec. 9)."""
        return self.objective == "batch-time"

    def to_dict(self) -> dict[str, str]:
        """The mode under :data:`MODE_KEYS` (plan metadata, JSON output); :meth:`from_dict`
        reads it back.

        Examples
        --------
        >>> Mode("graph").to_dict()["pipeline"], Mode.from_dict(Mode("graph").to_dict()).graph
        ('graph', True)
        """
        return {
            "pipeline": self.pipeline,
            "objective": self.objective,
            "schedule": self.schedule,
            "in_flight": self.in_flight,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Mode":
        """The mode recorded in ``data``.

        Parameters
        ----------
        data : mapping or None
            Keys :data:`MODE_KEYS`; a missing key (or a None value) takes its default, so a
            plan written before the in-flight rule existed reads as ``piper``. Other keys
            are ignored. None gives :data:`DEFAULT_MODE`.

        Returns
        -------
        Mode

        Raises
        ------
        ValueError
            A value not among its choices.

        Examples
        --------
        >>> Mode.from_dict({"objective": "batch-time", "K": 8}).label
        'sequential/batch-time/1f1b'
        """
        data = data or {}
        return cls(**{k: data[k] for k in MODE_KEYS if data.get(k) is not None})

    @classmethod
    def parse(cls, label: str, in_flight: str = "piper") -> "Mode":
        """A mode from its label (:attr:`label`).

        Parameters
        ----------
        label : str
            ``PIPELINE/OBJECTIVE/SCHEDULE[/IN_FLIGHT]``; trailing parts may be left out
            (they take their defaults).
        in_flight : str
            The in-flight rule when the label does not name one.

        Returns
        -------
        Mode
            ``Mode.parse(m.label) == m`` for every mode ``m``.

        Raises
        ------
        InputError
            More than four parts, an empty part, or a value not among its choices (an
            InputError is a ValueError).

        Examples
        --------
        >>> Mode.parse("graph/batch-time").label
        'graph/batch-time/1f1b'
        >>> Mode.parse("graph", in_flight="schedule").label
        'graph/throughput/1f1b/schedule'
        """
        parts = label.strip().split("/")
        if len(parts) > 4 or not all(parts):
            raise InputError(f"a mode is PIPELINE/OBJECTIVE/SCHEDULE[/IN_FLIGHT], got {label!r}")
        mode = cls(*parts)
        return mode if len(parts) == 4 else mode.with_in_flight(in_flight)


#: The keys a mode is recorded under (plan metadata, JSON output).
MODE_KEYS = ("pipeline", "objective", "schedule", "in_flight")


#: The contract's original problem (secs. 2-4): sequential, throughput, 1f1b, Piper's rule.
DEFAULT_MODE = Mode()

#: The modes that differ in the model (``1f1b-flush`` holds what ``1f1b`` holds, so it is
#: left out): sequential/graph x throughput/batch-time x 1f1b/gpipe, under Piper's rule
#: (``Mode.with_in_flight`` gives them under the other).
ALL_MODES = tuple(Mode(p, o, s) for p in PIPELINES for o in OBJECTIVES for s in ("1f1b", "gpipe"))
