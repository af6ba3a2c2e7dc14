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
    "SETTINGS_PANEL",
    "RESTRICT_PANEL",
    "MODE_PANEL",
    "METHOD_PANEL",
    "OUTPUT_PANEL",
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
    "note_bare_sizes",
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

# ---- the panels of --help (typer's rich panels; the long explanations are in docs/usage.md) ----
SETTINGS_PANEL = "Settings (K, M, N, B)"
RESTRICT_PANEL = "Restrictions"
MODE_PANEL = "Mode (secs. 8, 9, 11)"
METHOD_PANEL = "Method"
OUTPUT_PANEL = "Output"

# ---- settings overrides (every command that reads an instance) ----
DevicesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--devices",
        "-K",
        metavar="K",
        help="Devices (overrides maxDevices).",
        show_default=False,
        rich_help_panel=SETTINGS_PANEL,
    ),
]
MemoryOpt = Annotated[
    Optional[str],
    typer.Option(
        "--memory",
        "-M",
        metavar="SIZE",
        help="Memory per device: bytes, 8GiB, 80GB.",
        show_default=False,
        rich_help_panel=SETTINGS_PANEL,
    ),
]
BatchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--batch",
        "-N",
        metavar="N",
        help="Microbatches per batch.",
        show_default=False,
        rich_help_panel=SETTINGS_PANEL,
    ),
]
BandwidthOpt = Annotated[
    Optional[str],
    typer.Option(
        "--bandwidth",
        "-B",
        metavar="RATE",
        help="Bytes/s per device: 25GiB/s, 25Gbit/s.",
        show_default=False,
        rich_help_panel=SETTINGS_PANEL,
    ),
]

# ---- restrictions (every solver command) ----
NoDataParallelOpt = Annotated[
    bool,
    typer.Option(
        "--no-data-parallel", help="d = 1 in every stage.", rich_help_panel=RESTRICT_PANEL
    ),
]
NoTensorParallelOpt = Annotated[
    bool,
    typer.Option(
        "--no-tensor-parallel", help="t = 1 in every stage.", rich_help_panel=RESTRICT_PANEL
    ),
]
NoRecomputeOpt = Annotated[
    bool,
    typer.Option(
        "--no-recompute",
        help="No 'activation recomp' option.",
        rich_help_panel=RESTRICT_PANEL,
    ),
]
ExcludeOptionOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--exclude-option",
        metavar="ID",
        help="Leave out an option id (repeatable).",
        show_default=False,
        rich_help_panel=RESTRICT_PANEL,
    ),
]
MaxDOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-d",
        min=1,
        metavar="D",
        help="Cap on every stage's d.",
        show_default=False,
        rich_help_panel=RESTRICT_PANEL,
    ),
]
MaxTOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-t",
        min=1,
        metavar="T",
        help="Cap on every stage's t.",
        show_default=False,
        rich_help_panel=RESTRICT_PANEL,
    ),
]

UniformOpt = Annotated[
    bool,
    typer.Option(
        "--uniform",
        help="One t and d for every stage.",
        rich_help_panel=RESTRICT_PANEL,
    ),
]

JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json", help="One JSON object per line on stdout.", rich_help_panel=OUTPUT_PANEL
    ),
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
        help="Default: sequential.",
        show_default=False,
        rich_help_panel=MODE_PANEL,
    ),
]
ObjectiveOpt = Annotated[
    Optional[Objective],
    typer.Option(
        "--objective",
        help="Default: throughput.",
        show_default=False,
        rich_help_panel=MODE_PANEL,
    ),
]
ScheduleOpt = Annotated[
    Optional[Schedule],
    typer.Option(
        "--schedule",
        help="Default: 1f1b.",
        show_default=False,
        rich_help_panel=MODE_PANEL,
    ),
]
InFlightOpt = Annotated[
    Optional[InFlight],
    typer.Option(
        "--in-flight",
        help="Default: piper.",
        show_default=False,
        rich_help_panel=MODE_PANEL,
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

    note_bare_sizes(memory=[memory], bandwidth=[bandwidth])
    return {
        name: read_setting(name, text)
        for name, text in (("K", devices), ("M", memory), ("N", batch), ("B", bandwidth))
        if text is not None
    }


def note_bare_sizes(memory=(), bandwidth=()) -> None:
    """One note on stderr per option whose texts hold an implausibly small bare number
    (:func:`piper_ilp.instance.bare_size_note`: bytes, as documented, but likely meant with a
    unit). ``memory`` and ``bandwidth`` are the texts given (None entries skipped)."""
    if not any(x is not None for x in (*memory, *bandwidth)):
        return
    from piper_ilp.instance import bare_size_note

    for option, texts, rate in (("--memory", memory, False), ("--bandwidth", bandwidth, True)):
        note = bare_size_note(option, [t for t in texts if t is not None], rate=rate)
        if note:
            stderr.print(f"note: {note}", markup=False)


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
