"""The mode: what a plan is judged by (contract secs. 8-9): the pipelining, the objective and
the schedule. A plain value object, passed down like the restrictions, never a global."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = [
    "PIPELINES",
    "OBJECTIVES",
    "SCHEDULES",
    "Mode",
    "DEFAULT_MODE",
    "ALL_MODES",
    "check_choice",
]

PIPELINES = ("sequential", "graph")
OBJECTIVES = ("throughput", "batch-time")
SCHEDULES = ("1f1b", "1f1b-flush", "gpipe")


def check_choice(choice: str, allowed: Sequence[str], what: str) -> None:
    if choice not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, got {choice!r}")


@dataclass(frozen=True)
class Mode:
    """What a plan is judged by: the pipelining (sec. 8), the objective (secs. 4 and 9)
    and the schedule, which fixes the memory rule (secs. 2, 8, 9).

    ``Mode()`` is the contract's original problem (sequential, throughput, 1f1b).
    ``1f1b`` and ``1f1b-flush`` hold the same microbatches (they differ only in the flush,
    which the batch-time objective models); ``gpipe`` holds y = N / d.

    Examples
    --------
    >>> Mode().label, Mode("graph", "batch-time", "gpipe").label
    ('sequential/throughput/1f1b', 'graph/batch-time/gpipe')
    >>> Mode("tree")
    Traceback (most recent call last):
    ...
    ValueError: pipeline must be one of sequential, graph, got 'tree'
    """

    pipeline: str = "sequential"
    objective: str = "throughput"
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        check_choice(self.pipeline, PIPELINES, "pipeline")
        check_choice(self.objective, OBJECTIVES, "objective")
        check_choice(self.schedule, SCHEDULES, "schedule")

    @property
    def is_default(self) -> bool:
        """True for the contract's original problem (secs. 2-4)."""
        return self == DEFAULT_MODE

    @property
    def label(self) -> str:
        return f"{self.pipeline}/{self.objective}/{self.schedule}"

    @property
    def graph(self) -> bool:
        return self.pipeline == "graph"

    @property
    def batch_time(self) -> bool:
        return self.objective == "batch-time"

    def to_dict(self) -> dict[str, str]:
        return {"pipeline": self.pipeline, "objective": self.objective, "schedule": self.schedule}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Mode":
        """The mode recorded in ``data`` (keys ``pipeline``, ``objective``, ``schedule``;
        a missing key takes its default)."""
        data = data or {}
        return cls(
            **{k: data[k] for k in ("pipeline", "objective", "schedule") if data.get(k) is not None}
        )

    @classmethod
    def parse(cls, label: str) -> "Mode":
        """A mode from its label ``PIPELINE/OBJECTIVE/SCHEDULE`` (trailing parts may be left out).

        >>> Mode.parse("graph/batch-time")
        Mode(pipeline='graph', objective='batch-time', schedule='1f1b')
        """
        parts = label.strip().split("/")
        if len(parts) > 3 or not all(parts):
            raise ValueError(f"a mode is PIPELINE/OBJECTIVE/SCHEDULE, got {label!r}")
        return cls(*parts)


DEFAULT_MODE = Mode()

#: The modes that differ in the model (``1f1b-flush`` holds what ``1f1b`` holds, so it is
#: left out): sequential/graph x throughput/batch-time x 1f1b/gpipe.
ALL_MODES = tuple(Mode(p, o, s) for p in PIPELINES for o in OBJECTIVES for s in ("1f1b", "gpipe"))
