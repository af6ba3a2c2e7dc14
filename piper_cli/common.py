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
import typing
from pathlib import Path
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
    "INPUT_PANEL",
    "RUN_PANEL",
    "SETTINGS",
    "RESTRICTIONS",
    "MODE",
    "OptionGroup",
    "with_groups",
    "option",
    "setting_option",
    "time_limit_option",
    "output_option",
    "ForceOpt",
    "ThreadsOpt",
    "MaxIdealsOpt",
    "ProgressOpt",
    "IgnoreMetadataOpt",
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
INPUT_PANEL = "Input"
RUN_PANEL = "Run"


def option(panel: str, *decls: str, help: str, **kwargs: Any) -> Any:
    """A ``typer.Option`` in the --help panel ``panel`` with a one-line ``help``; no default
    shown unless ``show_default`` is given (the help says it where it matters).

    >>> option(OUTPUT_PANEL, "--json", help="One JSON object per line.").rich_help_panel
    'Output'
    """
    kwargs.setdefault("show_default", False)
    return typer.Option(*decls, help=help, rich_help_panel=panel, **kwargs)


def setting_option(flag: str, short: str, metavar: str, help: str) -> Any:
    """A text option in the Settings panel (a K, M, N or B as the user wrote it)."""
    return Annotated[Optional[str], option(SETTINGS_PANEL, flag, short, metavar=metavar, help=help)]


# ---- settings overrides (every command that reads an instance) ----
DevicesOpt = setting_option("--devices", "-K", "K", "Devices (overrides maxDevices).")
MemoryOpt = setting_option("--memory", "-M", "SIZE", "Memory per device: bytes, 8GiB, 80GB.")
BatchOpt = setting_option("--batch", "-N", "N", "Microbatches per batch.")
BandwidthOpt = setting_option("--bandwidth", "-B", "RATE", "Bytes/s per device: 25GiB/s, 25Gbit/s.")


def _flag(panel: str, name: str, help: str) -> Any:
    return Annotated[bool, option(panel, name, help=help)]


# ---- restrictions (every solver command) ----
NoDataParallelOpt = _flag(RESTRICT_PANEL, "--no-data-parallel", "d = 1 in every stage.")
NoTensorParallelOpt = _flag(RESTRICT_PANEL, "--no-tensor-parallel", "t = 1 in every stage.")
NoRecomputeOpt = _flag(RESTRICT_PANEL, "--no-recompute", "No 'activation recomp' option.")
ExcludeOptionOpt = Annotated[
    Optional[list[str]],
    option(
        RESTRICT_PANEL,
        "--exclude-option",
        metavar="ID",
        help="Leave out an option id (repeatable).",
    ),
]
MaxDOpt = Annotated[
    Optional[int],
    option(RESTRICT_PANEL, "--max-d", min=1, metavar="D", help="Cap on every stage's d."),
]
MaxTOpt = Annotated[
    Optional[int],
    option(RESTRICT_PANEL, "--max-t", min=1, metavar="T", help="Cap on every stage's t."),
]
UniformOpt = _flag(RESTRICT_PANEL, "--uniform", "One t and d for every stage.")

# ---- method options and outputs that several commands share ----
JsonOpt = _flag(OUTPUT_PANEL, "--json", "One JSON object per line on stdout.")
ForceOpt = _flag(METHOD_PANEL, "--force", "Run past the size guards (docs/usage.md#limits).")
ThreadsOpt = Annotated[
    Optional[int],
    option(
        METHOD_PANEL,
        "--threads",
        min=1,
        metavar="1-64",
        help="CP-SAT's, CBC's threads (SCIP: 1).",
    ),
]
MaxIdealsOpt = Annotated[
    Optional[int],
    option(
        METHOD_PANEL,
        "--max-ideals",
        min=1,
        metavar="COUNT",
        help="DP: refuse above this many sets.",
    ),
]
ProgressOpt = Annotated[
    Optional[bool],
    option(OUTPUT_PANEL, "--progress/--no-progress", help="On stderr (default: on a terminal)."),
]
IgnoreMetadataOpt = _flag(
    SETTINGS_PANEL, "--ignore-metadata", "Use neither the plan's settings nor its check."
)


def time_limit_option(help: str = "Stop each method after this long (never optimal).") -> Any:
    """The ``--time-limit SECONDS`` option (>= 0) of a solving command, in the Method panel."""
    return Annotated[
        Optional[float], option(METHOD_PANEL, "--time-limit", min=0.0, metavar="SECONDS", help=help)
    ]


def output_option(help: str, metavar: str = "FILE", kind: type = Path) -> Any:
    """The ``--output/-o`` option of a command that writes a file, in the Output panel."""
    return Annotated[
        Optional[kind], option(OUTPUT_PANEL, "--output", "-o", metavar=metavar, help=help)
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
    Optional[Pipeline], option(MODE_PANEL, "--pipeline", help="Default: sequential.")
]
ObjectiveOpt = Annotated[
    Optional[Objective], option(MODE_PANEL, "--objective", help="Default: throughput.")
]
ScheduleOpt = Annotated[Optional[Schedule], option(MODE_PANEL, "--schedule", help="Default: 1f1b.")]
InFlightOpt = Annotated[
    Optional[InFlight], option(MODE_PANEL, "--in-flight", help="Default: piper.")
]


class OptionGroup:
    """Options that several commands take together, declared once: a command parameter
    whose default is a group (``cluster: dict = SETTINGS``) stands, under
    :func:`with_groups`, for the group's options (in --help, in that place) and receives
    their values as one dict by parameter name.

    Parameters
    ----------
    *kinds : type
        The options' ``Annotated`` types; each one's parameter name is its first flag's
        (``--max-d``: ``max_d``), its default False for a flag (bool), else None.

    Examples
    --------
    >>> list(MODE.without("objective").params)
    ['pipeline', 'schedule', 'in_flight']
    >>> SETTINGS.defaults()["devices"][1], RESTRICTIONS.defaults()["uniform"][1]
    (None, False)
    """

    def __init__(self, *kinds: Any) -> None:
        self.params = {_param_name(kind): kind for kind in kinds}

    def without(self, *names: str) -> OptionGroup:
        """The group less the options ``names``."""
        return OptionGroup(*(kind for name, kind in self.params.items() if name not in names))

    def defaults(self) -> dict[str, tuple[Any, Any]]:
        """Each option's parameter name -> (its type, its default)."""
        return {
            name: (kind, False if typing.get_args(kind)[0] is bool else None)
            for name, kind in self.params.items()
        }


def _param_name(kind: Any) -> str:
    """The parameter name of an ``Annotated[..., typer.Option("--flag", ...)]``: its first
    long flag without the dashes (typer keeps the first flag given in ``Annotated`` as
    ``default``, the others as ``param_decls``)."""
    info = typing.get_args(kind)[1]
    flags = [d for d in (info.default, *info.param_decls) if str(d).startswith("--")]
    return flags[0].split("/")[0][2:].replace("-", "_")


#: --devices, --memory, --batch, --bandwidth (keywords of :func:`read_overrides`).
SETTINGS = OptionGroup(DevicesOpt, MemoryOpt, BatchOpt, BandwidthOpt)
#: The restriction flags (keywords of :func:`restrictions_from_flags`).
_ABLATIONS = (NoDataParallelOpt, NoTensorParallelOpt, NoRecomputeOpt, ExcludeOptionOpt)
RESTRICTIONS = OptionGroup(*_ABLATIONS, MaxDOpt, MaxTOpt, UniformOpt)
#: --pipeline, --objective, --schedule, --in-flight (keywords of :func:`mode_from_flags`).
MODE = OptionGroup(PipelineOpt, ObjectiveOpt, ScheduleOpt, InFlightOpt)


def with_groups(func: Callable) -> Callable:
    """Expand the :class:`OptionGroup` parameters of a typer command ``func`` into their
    options (its signature as typer reads it) and pack their values back into one dict per
    group when typer calls it. Apply it below ``@cli_errors``."""
    import inspect

    sig = inspect.signature(func, eval_str=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, OptionGroup] = {}
    for p in sig.parameters.values():
        if isinstance(p.default, OptionGroup):
            groups[p.name] = p.default
            params += [
                inspect.Parameter(name, p.kind, default=default, annotation=kind)
                for name, (kind, default) in p.default.defaults().items()
            ]
        else:
            params.append(p)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any):
        for name, group in groups.items():
            kwargs[name] = {key: kwargs.pop(key) for key in group.params}
        return func(*args, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


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
