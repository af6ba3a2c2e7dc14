"""Sweeps over the settings K, M, N, B and the paper's variants (``piper-ilp sweep``).

A sweep solves one instance for every point of a grid of settings and every *variant*:

========================  ================================================================
variant                   what runs
========================  ================================================================
``all``                   the exact DP with every parallelism and option (Piper)
``no-dp``                 the exact DP with d = 1 everywhere (no data parallelism)
``no-tp``                 the exact DP with t = 1 everywhere (no tensor parallelism)
``no-recompute``          the exact DP without the ``"activation recomp"`` options
``uniform``               the exact DP with one (t, d) for every stage (contract sec. 12)
``greedy``                the DP with Piper's greedy option rule (contract sec. 5)
``2bw``                   the PipeDream-2BW baseline (:mod:`compare.baselines.twobw`, sec. 10)
``pipedream``             PipeDream's own planner, its plan judged under Piper's contract
NAME                      an external planner given as NAME=COMMAND
(:mod:`compare.crosscheck.external`)
========================  ================================================================

A sweep solves under one in-flight rule (contract sec. 11, ``in_flight=``, ``--in-flight``:
``piper``, the paper's, by default; under ``schedule`` the heuristic variants, which plan under
Piper's rule, are refused and their rows say so); every row and the folder's parameters name it.

Each finished run is one JSON line in ``DIR/results.jsonl`` (flushed as it finishes, so an
interrupted sweep keeps what it finished and ``resume`` skips it); ``DIR/results.csv`` holds
the same rows as a table at the end. A row: the settings (K, M, N, B), the variant, the
status, the TPS (seconds per sample) and throughput (samples per second, 1 / TPS), the
number of stages, the devices used, sum of d, and the solve's CPU seconds; the JSON line
also holds the plan.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from compare.experiments.jobs import MANIFESTS, extends_list, prepare_folder, run_in_folder
from piper_ilp.errors import InputError, InternalError
from piper_ilp.files import atomic_write_text, read_jsonl
from piper_ilp.instance import SETTING_OPTIONS, Instance, check_setting
from piper_ilp.plan import plan_to_dict
from piper_ilp.solution import RECOMPUTE_OPTION, Restrictions, Solution

__all__ = [
    "VARIANTS",
    "VARIANT_HELP",
    "variants_text",
    "SweepPoint",
    "sweep_points",
    "run_point",
    "run_sweep",
    "dp_guards",
    "read_rows",
    "CSV_FIELDS",
]

#: Each variant and what it runs, in a few words (the registry ``sweep --help`` lists).
VARIANT_HELP = {
    "all": "Piper: every parallelism and option",
    "no-dp": "d = 1",
    "no-tp": "t = 1",
    "no-recompute": "no recomputation",
    "uniform": "one t and d for every stage, as Megatron-LM and torchtitan run",
    "greedy": "Piper's greedy option rule",
    "2bw": "PipeDream-2BW",
    "pipedream": "PipeDream's planner",
}
VARIANTS = tuple(VARIANT_HELP)

RESULTS = "results.jsonl"
TABLE = "results.csv"
PARAMETERS = MANIFESTS["sweep"]  # what wrote the folder, and its parameters

CSV_FIELDS = (
    "K",
    "M",
    "N",
    "B",
    "variant",
    "status",
    "tps",
    "throughput",
    "stages",
    "devices",
    "sum_d",
    "seconds",
    "message",
)


def variants_text() -> str:
    """The variants as ``sweep --help`` lists them, from :data:`VARIANT_HELP`.

    Examples
    --------
    >>> variants_text().split("; ")[1]
    'no-dp (d = 1)'
    """
    return "; ".join(f"{name} ({what})" for name, what in VARIANT_HELP.items())


@dataclass(frozen=True)
class SweepPoint:
    """One run of a sweep: settings and variant; ``id`` names it in results.jsonl.

    The settings are checked when the point is made, by the check ``solve`` gives its
    options (:func:`piper_ilp.instance.check_setting`), naming the sweep's option: a value
    out of range is refused in one line before any work, never in a worker.

    Raises
    ------
    InputError
        K, M, N or B outside its supported range.
    """

    K: int
    M: float
    N: int
    B: float
    variant: str

    def __post_init__(self) -> None:
        for name in ("K", "M", "N", "B"):
            value = check_setting(name, getattr(self, name), f"{SETTING_OPTIONS[name]} ({name})")
            object.__setattr__(self, name, value)

    @property
    def id(self) -> str:
        return f"K={self.K} M={self.M!r} N={self.N} B={self.B!r} {self.variant}"


def sweep_points(
    devices: Sequence[int],
    memory: Sequence[float],
    batch: Sequence[int],
    bandwidth: Sequence[float],
    variants: Sequence[str],
    externals: Sequence[str] = (),
) -> list[SweepPoint]:
    """The grid, in a fixed order (variants innermost), without repeats; the names of
    ``externals`` (external planners) are variants too.

    Examples
    --------
    >>> [p.id for p in sweep_points([4, 8], [1e9], [4], [1e10], ["all", "no-dp"])][:2]
    ['K=4 M=1000000000.0 N=4 B=10000000000.0 all', 'K=4 M=1000000000.0 N=4 B=10000000000.0 no-dp']
    """
    for v in variants:
        if v not in VARIANTS:
            raise InputError(f"unknown variant {v!r}; choose from {', '.join(VARIANTS)}")
    variants = list(variants) + [e for e in externals if e not in variants]
    for name, values in (
        ("--devices", devices),
        ("--memory", memory),
        ("--batch", batch),
        ("--bandwidth", bandwidth),
        ("--variants", variants),
    ):
        if not values:
            raise InputError(f"{name}: give at least one value")
    seen: dict[str, SweepPoint] = {}
    for K, M, N, B, v in itertools.product(devices, memory, batch, bandwidth, variants):
        p = SweepPoint(K, M, N, B, v)  # (checks its settings)
        seen.setdefault(p.id, p)
    return list(seen.values())


def _solve_variant(
    instance: Instance,
    variant: str,
    externals: Mapping[str, str],
    in_flight: str = "piper",
    time_limit: float | None = None,
    guards: Mapping[str, object] | None = None,
) -> Solution:
    from compare.crosscheck.methods import METHODS, check_mode, external_method, run_method
    from piper_ilp.settings import Settings, in_flight_mode

    mode = in_flight_mode(in_flight)
    if variant in externals:
        from compare.crosscheck.external import solve_external

        check_mode(external_method(variant, externals[variant]), mode)
        return solve_external(instance, externals[variant], name=variant, timeout=time_limit)
    name = variant if variant in ("2bw", "greedy", "pipedream") else "dp"
    # the time limit goes to the methods that take one (dp, greedy); 2bw and pipedream are
    # heuristics without a clock
    # and the DP's size guards (force, max_ideals) to the DP variants and greedy
    settings = Settings(mode=mode, time_limit=time_limit, options=dict(guards or {}))
    settings = settings.restricted(METHODS[name].options)
    if name != "dp":  # the registry's heuristics (they refuse a mode they do not solve)
        return run_method(instance, variant, settings=settings)
    restrictions = {
        "all": Restrictions(),
        "no-dp": Restrictions.from_flags(no_data_parallel=True),
        "no-tp": Restrictions.from_flags(no_tensor_parallel=True),
        "no-recompute": Restrictions.from_flags(exclude_options=(RECOMPUTE_OPTION,)),
        "uniform": Restrictions(uniform=True),
    }[variant]
    return run_method(instance, "dp", restrictions, settings=settings)


def dp_guards(force: bool = False, max_ideals: int | None = None) -> dict[str, object]:
    """The DP's size-guard options of a sweep or a ladder, as ``solve`` passes them: ``force``
    lifts every guard (the successor-closed sets, the tables' memory, the labels);
    ``max_ideals`` raises or lowers the set count's limit.

    Parameters
    ----------
    force : bool
    max_ideals : int, optional
        At least 1.

    Returns
    -------
    dict
        The options given (for ``run_method``'s ``settings``), none when neither is.

    Raises
    ------
    InputError
        ``max_ideals`` is not a whole number >= 1.

    Examples
    --------
    >>> dp_guards(), dp_guards(True, 50_000)
    ({}, {'force': True, 'max_ideals': 50000})
    """
    if max_ideals is not None and (
        isinstance(max_ideals, bool) or not isinstance(max_ideals, int) or max_ideals < 1
    ):
        raise InputError(f"--max-ideals must be a whole number >= 1, got {max_ideals!r}")
    given = {"force": bool(force), "max_ideals": max_ideals}
    return {k: v for k, v in given.items() if v is not None and v is not False}


def run_point(
    instance: Instance,
    point: SweepPoint,
    externals: Mapping[str, str] | None = None,
    in_flight: str = "piper",
    time_limit: float | None = None,
    guards: Mapping[str, object] | None = None,
) -> dict:
    """Solve one point of the grid under the in-flight rule ``in_flight`` (sec. 11);
    returns its row (a JSON-ready dict, ``in_flight`` in it). Status "refused" when a
    method refuses the instance (size, options, a heuristic under ``schedule``),
    "invalid" when an external planner's plan fails the evaluator. ``time_limit``
    (seconds, checked by the caller) stops the DP variants (status feasible or unknown,
    never optimal) and an external planner (killed: backend-error); 2bw and pipedream run
    without one. ``guards`` (see :func:`dp_guards`) go to the DP variants and greedy."""
    inst = instance.with_settings(K=point.K, M=point.M, N=point.N, B=point.B)
    start = time.process_time()
    try:
        sol = _solve_variant(inst, point.variant, externals or {}, in_flight, time_limit, guards)
        status, message = sol.status.value, sol.message
    except InputError as exc:  # too large for a method, an option no node has, ...
        sol, status, message = None, "refused", str(exc)
    except InternalError as exc:  # an external planner's plan that the evaluator rejects
        sol, status, message = None, "invalid", str(exc)
    row = {
        "id": point.id,
        **asdict(point),
        "in_flight": in_flight,
        "status": status,
        "message": message,
    }
    plan = sol.plan if sol is not None else None
    row.update(
        tps=sol.tps if sol is not None else None,
        throughput=(1.0 / sol.tps) if sol is not None and sol.tps else None,
        stages=len(plan.stages) if plan else None,
        devices=plan.devices if plan else None,
        sum_d=plan.sum_d if plan else None,
        seconds=time.process_time() - start,
        plan=plan_to_dict(plan) if plan else None,
    )
    return row


def read_rows(out: str | Path) -> list[dict]:
    """The rows in ``out/results.jsonl`` (a torn last line, from a killed run, is skipped)."""
    return read_jsonl(Path(out) / RESULTS, keep=lambda rec: "id" in rec and "variant" in rec)


def write_table(out: str | Path, rows: Iterable[dict]) -> Path:
    """Write ``out/results.csv`` (atomically) from the rows."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    path = Path(out) / TABLE
    atomic_write_text(path, buf.getvalue())
    return path


def run_sweep(
    instance: Instance,
    points: Sequence[SweepPoint],
    out: str | Path,
    *,
    workers: int = 1,
    resume: bool = False,
    on_row: Callable[[dict], None] | None = None,
    externals: Mapping[str, str] | None = None,
    scheduler: str | None = None,
    note: Callable[[str], None] | None = None,
    in_flight: str = "piper",
    time_limit: float | None = None,
    force: bool = False,
    max_ideals: int | None = None,
) -> list[dict]:
    """Run every point not already in ``out/results.jsonl`` (with
    :func:`compare.experiments.jobs.run_in_folder`: the folder locked, one whole JSON line per
    finished run, interrupts keep what finished); returns all rows of the grid in grid order
    and writes ``out/results.csv``. Every point is solved under the in-flight rule
    ``in_flight`` (sec. 11), which the folder's parameters record (a folder from before the
    rule existed resumes as ``piper``).

    Raises
    ------
    InputError
        ``in_flight`` is not a rule (before ``out`` is made), ``out`` holds results and
        ``resume`` is off, holds a sweep of another instance or
        grid or a campaign, its results.jsonl is damaged (a line other than a torn last one
        that is not a whole row; a torn last line is dropped, ``note`` says so), or another
        sweep is running on it.
    compare.experiments.jobs.Interrupted
        SIGINT or SIGTERM (the finished rows are kept).

    ``time_limit`` is each point's, in seconds (see :func:`run_point`); a resumed sweep
    keeps the one it was started with. ``force`` and ``max_ideals`` are the DP's size guards,
    as ``solve --force`` and ``--max-ideals`` pass them (:func:`dp_guards`); they change
    which points are refused, not any answer, so a resumed sweep may change them (the rows
    it finished stay).
    """
    from piper_ilp.settings import check_time_limit, in_flight_mode

    check_time_limit(time_limit)
    mode = in_flight_mode(in_flight)  # (checked before the folder is made)
    guards = dp_guards(force, max_ideals)
    out = prepare_folder(out, (RESULTS, TABLE, PARAMETERS))
    externals = dict(externals or {})
    params = {
        "instance": instance.fingerprint(),
        "points": [p.id for p in points],
        "externals": externals,
        "in_flight": mode.in_flight,
        "time_limit": time_limit,
    }
    done, new = run_in_folder(
        out,
        what="sweep",
        results=RESULTS,
        parameters=PARAMETERS,
        params=params,
        jobs=list(points),
        job_id=lambda p: p.id,
        fn=functools.partial(
            run_point,
            instance,
            externals=externals,
            in_flight=in_flight,
            time_limit=time_limit,
            guards=guards,
        ),
        keep=lambda r: "id" in r and "variant" in r,
        resume=resume,
        workers=workers,
        scheduler=scheduler,
        on_record=on_row,
        note=note,
        grows={"points": extends_list},  # more grid values: the finished points stay
        # a folder from before --in-flight or --time-limit
        defaults={"in_flight": "piper", "time_limit": None},
    )
    by_id = {r["id"]: r for r in done + new}
    rows = [by_id[p.id] for p in points if p.id in by_id]
    write_table(out, rows)
    return rows
