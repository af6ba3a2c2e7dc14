"""Pieces every CLI command shares: the settings overrides, the restriction flags,
error handling (exit 2 for bad input or usage, 1 for internal errors, 130 / 143 when
interrupted) and output.

Only typer, rich and the standard library load with this module; the core package
(even ``piper_ilp.errors``, which loads ``piper_ilp``) is imported where it is used, so
that ``--help`` and usage errors stay quick (tests/test_startup.py).
"""

from __future__ import annotations

import enum
import functools
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer
from rich.console import Console

import piper_cli.interrupts as interrupts

if TYPE_CHECKING:
    from piper_ilp.instance import Instance
    from piper_ilp.mode import Mode
    from piper_ilp.settings import Settings
    from piper_ilp.solution import Restrictions

__all__ = [
    "DevicesOpt",
    "MemoryOpt",
    "BatchOpt",
    "BandwidthOpt",
    "NoDataParallelOpt",
    "NoTensorParallelOpt",
    "NoRecomputeOpt",
    "ExcludeOptionOpt",
    "MaxDOpt",
    "MaxTOpt",
    "UniformOpt",
    "JsonOpt",
    "PipelineOpt",
    "ObjectiveOpt",
    "ScheduleOpt",
    "InFlightOpt",
    "mode_from_flags",
    "load_with_overrides",
    "load_with_settings",
    "read_overrides",
    "restrictions_from_flags",
    "cli_errors",
    "fail",
    "print_json_line",
    "json_ready",
    "stdout",
    "stderr",
]

# Off a terminal (pipes, CI logs) rich would assume 80 columns and cut the tables.
# No emoji codes: ":name:" in a layer's name or a path is printed as it is.
stdout = Console(
    highlight=False, soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 200
)
stderr = Console(
    stderr=True,
    highlight=False,
    soft_wrap=True,
    emoji=False,
    width=None if sys.stderr.isatty() else 200,
)

# ---- settings overrides (every command that reads an instance) ----
DevicesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--devices", "-K", help="K, number of devices (overrides maxDevices).", show_default=False
    ),
]
MemoryOpt = Annotated[
    Optional[str],
    typer.Option(
        "--memory",
        "-M",
        help="M, memory per device: bytes or a unit (8GiB, 80GB; B = bytes, bit = bits, a "
        "lower-case b is refused).",
        show_default=False,
    ),
]
BatchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--batch",
        "-N",
        help="N, microbatches per batch (overrides mbsInBatch).",
        show_default=False,
    ),
]
BandwidthOpt = Annotated[
    Optional[str],
    typer.Option(
        "--bandwidth",
        "-B",
        help="B, bytes/s per device: bytes/s or a unit (25GiB/s, 25Gbit/s; B = bytes, bit = bits, "
        "a lower-case b is refused).",
        show_default=False,
    ),
]

# ---- restrictions (every solver command) ----
NoDataParallelOpt = Annotated[
    bool, typer.Option("--no-data-parallel", help="d = 1 in every stage.")
]
NoTensorParallelOpt = Annotated[
    bool, typer.Option("--no-tensor-parallel", help="t = 1 in every stage.")
]
NoRecomputeOpt = Annotated[
    bool,
    typer.Option("--no-recompute", help="Options with id 'activation recomp' are unavailable."),
]
ExcludeOptionOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--exclude-option", help="Make an option id unavailable (repeatable).", show_default=False
    ),
]
MaxDOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-d", min=1, help="Cap on every stage's data-parallel degree d.", show_default=False
    ),
]
MaxTOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-t", min=1, help="Cap on every stage's tensor-parallel degree t.", show_default=False
    ),
]

UniformOpt = Annotated[
    bool,
    typer.Option(
        "--uniform",
        help="Every stage has the same t and d (what Megatron-LM and torchtitan run; an exact "
        "restriction in every method).",
    ),
]

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Machine-readable output: one JSON object per line.")
]


# ---- the mode (cost model secs. 8, 9, 11): what is optimized and how plans are judged ----
# The choices are piper_ilp.mode's PIPELINES, OBJECTIVES, SCHEDULES, IN_FLIGHT_RULES (tests
# check that they agree); written out here so that --help does not load the core.
class Pipeline(str, enum.Enum):
    sequential = "sequential"
    graph = "graph"


class Objective(str, enum.Enum):
    throughput = "throughput"
    batch_time = "batch-time"


class Schedule(str, enum.Enum):
    one_f_one_b = "1f1b"
    one_f_one_b_flush = "1f1b-flush"
    gpipe = "gpipe"


class InFlight(str, enum.Enum):
    piper = "piper"
    schedule = "schedule"


PipelineOpt = Annotated[
    Optional[Pipeline],
    typer.Option(
        "--pipeline",
        help="sequential (a chain of stages, sec. 2; the default, or for evaluate and simulate the "
        "plan's recorded mode) or graph (stages form a DAG, sec. 8).",
        show_default=False,
    ),
]
ObjectiveOpt = Annotated[
    Optional[Objective],
    typer.Option(
        "--objective",
        help="throughput (least time per sample, sec. 4; the default, or the plan's recorded mode) "
        "or batch-time (least time per batch with a flush, sec. 9).",
        show_default=False,
    ),
]
ScheduleOpt = Annotated[
    Optional[Schedule],
    typer.Option(
        "--schedule",
        help="1f1b (the default, or the plan's recorded mode), 1f1b-flush, or gpipe (every replica "
        "holds N/d microbatches; sec. 9).",
        show_default=False,
    ),
]


InFlightOpt = Annotated[
    Optional[InFlight],
    typer.Option(
        "--in-flight",
        help="The in-flight budget (sec. 11): piper (y = ceil(h/d), the paper's; the default, "
        "or the plan's recorded rule) or schedule (the q/y that 1F1B keeps at max TPS).",
        show_default=False,
    ),
]


def mode_from_flags(
    pipeline: Pipeline | str | None = None,
    objective: Objective | str | None = None,
    schedule: Schedule | str | None = None,
    base: Mode | None = None,
    in_flight: InFlight | str | None = None,
) -> Mode:
    """The :class:`~piper_ilp.mode.Mode` of ``--pipeline``, ``--objective``,
    ``--schedule`` and ``--in-flight``; a flag not given keeps ``base``'s choice (default:
    the default mode).

    >>> mode_from_flags("graph", None, "gpipe").label
    'graph/throughput/gpipe'
    >>> mode_from_flags(in_flight="schedule").label
    'sequential/throughput/1f1b/schedule'
    """
    from piper_ilp.mode import DEFAULT_MODE

    base = base or DEFAULT_MODE
    given = {
        k: getattr(v, "value", v)
        for k, v in (
            ("pipeline", pipeline),
            ("objective", objective),
            ("schedule", schedule),
            ("in_flight", in_flight),
        )
        if v is not None
    }
    return type(base)(**{**base.to_dict(), **given})


def read_overrides(
    devices: str | None = None,
    memory: str | None = None,
    batch: str | None = None,
    bandwidth: str | None = None,
) -> dict[str, int | float]:
    """The cluster settings given by --devices, --memory, --batch, --bandwidth, by name
    (K, M, N, B), read but not range-checked: the :class:`~piper_ilp.settings.Settings`
    built from them checks that, naming the option."""
    from piper_ilp.instance import read_setting

    return {
        name: read_setting(name, text)
        for name, text in (("K", devices), ("M", memory), ("N", batch), ("B", bandwidth))
        if text is not None
    }


def load_with_settings(path: str, settings: Settings, *, warn: bool = True) -> Instance:
    """Load an instance and apply the settings' overrides (checked when ``settings`` was
    built). Warnings go to stderr."""
    from piper_ilp.instance import load_instance

    inst = settings.apply(load_instance(path))
    if warn:
        for w in inst.warnings:
            stderr.print(f"warning: {w}", markup=False)
    return inst


def load_with_overrides(
    path: str,
    devices: str | None = None,
    memory: str | None = None,
    batch: str | None = None,
    bandwidth: str | None = None,
    *,
    warn: bool = True,
) -> Instance:
    """Load an instance and apply the command-line settings (each checked, naming its
    option, before the file is read). Warnings go to stderr."""
    from piper_ilp.settings import Settings

    settings = Settings(overrides=read_overrides(devices, memory, batch, bandwidth))
    return load_with_settings(path, settings, warn=warn)


def restrictions_from_flags(
    no_data_parallel: bool = False,
    no_tensor_parallel: bool = False,
    no_recompute: bool = False,
    exclude_option: list[str] | None = None,
    max_d: int | None = None,
    max_t: int | None = None,
    uniform: bool = False,
) -> Restrictions:
    from piper_ilp.solution import Restrictions

    return Restrictions.from_flags(
        no_data_parallel=no_data_parallel,
        no_tensor_parallel=no_tensor_parallel,
        no_recompute=no_recompute,
        exclude_options=tuple(exclude_option or ()),
        max_d=max_d,
        max_t=max_t,
        uniform=uniform,
    )


def fail(message: str, code: int = 2) -> None:
    """Print one line on stderr and exit with ``code``."""
    stderr.print(f"piper-ilp: {message}", markup=False)
    raise typer.Exit(code)


def cli_errors(func: Callable) -> Callable:
    """Map the project's exceptions to one line on stderr and an exit status:
    InputError (bad input, usage, size limits) -> 2; InternalError -> 1;
    KeyboardInterrupt (Ctrl-C, or SIGTERM through :mod:`piper_cli.interrupts`) ->
    ``piper-ilp: interrupted`` and 130 (SIGINT) / 143 (SIGTERM)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any):
        from piper_ilp.errors import InputError, InternalError

        try:
            return func(*args, **kwargs)
        except InputError as exc:
            fail(f"error: {exc}", 2)
        except InternalError as exc:
            fail(f"internal error: {exc}", 1)
        except KeyboardInterrupt:
            raise typer.Exit(interrupts.report()) from None

    return wrapper


def json_ready(obj: Any) -> Any:
    """Replace non-finite floats by None so that the output is strict JSON
    (:func:`piper_ilp.files.json_safe`)."""
    from piper_ilp.files import json_safe

    return json_safe(obj)


def print_json_line(obj: Any) -> None:
    """Write one JSON object on one line to stdout and flush."""
    sys.stdout.write(json.dumps(json_ready(obj), allow_nan=False) + "\n")
    sys.stdout.flush()
