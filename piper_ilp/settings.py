"""The settings of a solve, checked once where they enter: :class:`Settings` (the mode, the
time limit, the solver threads, the K, M, N, B overrides and the method's options) and the
range of each value, defined once (:func:`check_time_limit`, :func:`check_threads`; K, M, N,
B in :func:`piper_ilp.instance.check_setting`). Who builds it and who trusts it:
``docs/architecture.md``, "Settings: checked once".
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from piper_ilp.errors import InputError
from piper_ilp.instance import SETTING_OPTIONS, Instance, check_setting
from piper_ilp.mode import DEFAULT_MODE, IN_FLIGHT_RULES, Mode, check_choice

__all__ = [
    "MAX_THREADS",
    "Settings",
    "check_time_limit",
    "check_threads",
    "in_flight_mode",
]

#: Solver threads lie in [1, MAX_THREADS]: SCIP's own limit (above it SCIP prints errors and
#: runs single-threaded), and far below where CP-SAT calls its model invalid (100,000) and
#: CBC crashed (256 and 1,000 threads, measured).
MAX_THREADS = 64


def check_time_limit(value: Any, option: str = "--time-limit") -> float | None:
    """A time limit: a finite number of seconds >= 0, or None (no limit).

    Parameters
    ----------
    value : float or None
        Seconds.
    option : str
        The option that gave it, named in the message.

    Returns
    -------
    float or None
        ``value`` unchanged.

    Raises
    ------
    InputError
        One line naming ``option`` and the range.

    Examples
    --------
    >>> check_time_limit(float("inf"))  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --time-limit: the time limit must be a finite number of seconds >=
    0, got inf
    """
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value >= 0)
    ):
        raise InputError(
            f"{option}: the time limit must be a finite number of seconds >= 0, got {value!r}"
        )
    return value


def in_flight_mode(value: Any, option: str = "in_flight") -> Mode:
    """The default mode under the in-flight rule ``value`` (contract sec. 11), for the
    entry points that take the rule alone (a sweep, the ladder).

    Parameters
    ----------
    value : str
        ``piper`` or ``schedule`` (:data:`~piper_ilp.mode.IN_FLIGHT_RULES`).
    option : str
        The option or argument that gave it, named in the message.

    Returns
    -------
    Mode

    Raises
    ------
    InputError
        One line naming ``option`` and the rules.

    Examples
    --------
    >>> in_flight_mode("schedule").in_flight
    'schedule'
    >>> in_flight_mode("fifo")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: in_flight: choose piper or schedule, got 'fifo'
    """
    check_choice(value, IN_FLIGHT_RULES, option)
    return Mode(in_flight=value)


def check_threads(value: Any, option: str = "--threads") -> int | None:
    """Solver threads: a whole number within [1, :data:`MAX_THREADS`], or None (the
    backend's default).

    Parameters
    ----------
    value : int or None
        Threads.
    option : str
        As in :func:`check_time_limit`.

    Returns
    -------
    int or None
        ``value`` unchanged.

    Raises
    ------
    InputError
        Out of range: one line naming ``option`` and the range.

    Examples
    --------
    >>> check_threads(65)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --threads: the solver threads must be a whole number within [1,
    64], got 65
    """
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS
    ):
        raise InputError(
            f"{option}: the solver threads must be a whole number within "
            f"[1, {MAX_THREADS}], got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Settings:
    """What a solve is asked for besides the instance and the restrictions, checked once.

    Parameters
    ----------
    mode : Mode
        Pipelining, objective, schedule and in-flight rule (contract secs. 8, 9, 11).
    time_limit : float, optional
        Seconds before a solver stops (it then never claims "optimal"); None: no limit.
    threads : int, optional
        MILP solver threads, within [1, :data:`MAX_THREADS`]; None: the backend's default.
    overrides : mapping, optional
        Cluster settings that replace the instance's: ``K``, ``M``, ``N``, ``B`` (each
        within its supported range, :func:`piper_ilp.instance.check_setting`).
    options : mapping, optional
        The method's options, as ``compare.crosscheck.methods.run_method`` takes them
        (``knapsack``, ``max_ideals``, ``force``, ``write_model``, ``hint_from_dp``,
        ``hint``, ``max_variables``): which of them apply is the method registry's
        business, and each solver owns the range of its own options.
    time_option : str
        The option named when the time limit is out of range (``--full-time-limit``).

    Raises
    ------
    InputError
        A value outside its range, an override not named K, M, N or B, ``time_limit``
        or ``threads`` given as one of the ``options``, or a ``mode`` that is not a
        :class:`~piper_ilp.mode.Mode`: one line naming the option.

    Examples
    --------
    >>> s = Settings(time_limit=5.0, overrides={"K": 8}, options={"knapsack": "exact"})
    >>> sorted(s.given)
    ['knapsack', 'time_limit']
    >>> Settings(overrides={"K": 0})
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: --devices (K) must be an integer within [1, 1048576], got 0
    """

    mode: Mode = DEFAULT_MODE
    time_limit: float | None = None
    threads: int | None = None
    overrides: Mapping[str, int | float] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    time_option: str = "--time-limit"

    def __post_init__(self) -> None:
        self._check({f.name for f in dataclasses.fields(self)})

    def _check(self, names: Iterable[str]) -> None:
        """Check the fields ``names`` (all of them when built; the changed ones in
        :meth:`replace`)."""
        names = set(names)
        if "mode" in names and not isinstance(self.mode, Mode):
            raise InputError(f"mode must be a piper_ilp.mode.Mode, got {self.mode!r}")
        if names & {"time_limit", "time_option"}:
            check_time_limit(self.time_limit, self.time_option)
        if "threads" in names:
            check_threads(self.threads)
        if "overrides" in names:
            checked = {}
            for name, value in dict(self.overrides).items():
                if name not in SETTING_OPTIONS:
                    raise InputError(
                        f"unknown setting {name!r}; the settings are {', '.join(SETTING_OPTIONS)}"
                    )
                checked[name] = check_setting(name, value, f"{SETTING_OPTIONS[name]} ({name})")
            object.__setattr__(self, "overrides", checked)
        if "options" in names:
            options = dict(self.options)
            for key in ("time_limit", "threads"):
                if key in options:
                    raise InputError(f"{key} is a field of Settings, not one of its options")
            object.__setattr__(self, "options", options)

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes`` (fields by name), checking only what changed.

        Parameters
        ----------
        **changes
            New values of fields of :class:`Settings`.

        Returns
        -------
        Settings

        Raises
        ------
        InputError
            A changed value outside its range.
        TypeError
            A name that is not a field.

        Examples
        --------
        >>> Settings().replace(threads=4).threads
        4
        """
        new = copy.copy(self)
        for name, value in changes.items():
            if name not in {f.name for f in dataclasses.fields(self)}:
                raise TypeError(f"Settings has no field {name!r}")
            object.__setattr__(new, name, value)
        new._check(changes)
        return new

    @property
    def given(self) -> dict[str, Any]:
        """Every solver option given, by ``run_method``'s keyword (a dict): ``time_limit``
        and ``threads`` when set, and the options that are neither None nor False (an
        option left at None or False counts as not given)."""
        out = {k: v for k, v in (("time_limit", self.time_limit), ("threads", self.threads))}
        out.update(self.options)
        return {k: v for k, v in out.items() if v is not None and v is not False}

    def restricted(self, names: Iterable[str]) -> "Settings":
        """A copy that keeps only the solver options a method takes.

        Parameters
        ----------
        names : iterable of str
            The options the method takes, by ``run_method``'s keyword (``time_limit`` and
            ``threads`` among them when it takes those).

        Returns
        -------
        Settings
            The other options dropped (not refused), ``time_limit`` and ``threads`` set to
            None unless named; mode and overrides kept. Not checked again.

        Examples
        --------
        >>> s = Settings(time_limit=5.0, options={"knapsack": "exact", "hint": None})
        >>> r = s.restricted(["knapsack"])
        >>> r.time_limit, r.options
        (None, {'knapsack': 'exact'})
        """
        keep = set(names)
        new = copy.copy(self)
        object.__setattr__(new, "options", {k: v for k, v in self.options.items() if k in keep})
        if "time_limit" not in keep:
            object.__setattr__(new, "time_limit", None)
        if "threads" not in keep:
            object.__setattr__(new, "threads", None)
        return new

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None, source: str = "plan") -> "Settings":
        """The settings a plan's metadata records (``solve -o`` writes them): every cluster
        setting among :data:`~piper_ilp.instance.SETTING_OPTIONS` (K, M, N, B) that it names,
        and the mode (:meth:`Mode.from_dict`: every part of the mode it records, the
        default for the others).

        Parameters
        ----------
        metadata : mapping or None
            ``Plan.metadata`` (its types checked by the plan loader).
        source : str
            The plan file, named in the message of a value out of range.

        Returns
        -------
        Settings
            With ``overrides`` holding the recorded K, M, N, B and ``mode`` the recorded mode.

        Raises
        ------
        InputError
            A recorded value outside its supported range: one line naming the file and field.

        Examples
        --------
        >>> s = Settings.from_metadata({"K": 8, "M": 2e9, "schedule": "gpipe"})
        >>> s.overrides, s.mode.label
        ({'K': 8, 'M': 2000000000.0}, 'sequential/throughput/gpipe')
        """
        meta = dict(metadata or {})
        overrides = {
            name: check_setting(name, meta[name], f"{source}: metadata.{name}")
            for name in SETTING_OPTIONS
            if meta.get(name) is not None
        }
        return cls(mode=Mode.from_dict(meta), overrides=overrides)

    def recorded_keys(self) -> list[str]:
        """The names of every setting this object fixes, in a stable order: the cluster
        settings it overrides, then the parts of the mode (``Mode.to_dict()``'s keys).

        >>> Settings(overrides={"N": 4}).recorded_keys()
        ['N', 'pipeline', 'objective', 'schedule', 'in_flight']
        """
        return [k for k in SETTING_OPTIONS if k in self.overrides] + list(self.mode.to_dict())

    def apply(self, instance: Instance) -> Instance:
        """``instance`` with the K, M, N, B overrides (checked when this was built).

        Parameters
        ----------
        instance : Instance
            As loaded, or after :meth:`piper_ilp.solution.Restrictions.apply`.

        Returns
        -------
        Instance
            ``instance`` itself when it already has every overridden value.
        """
        changes = {k: v for k, v in self.overrides.items() if getattr(instance, k) != v}
        return dataclasses.replace(instance, **changes) if changes else instance
