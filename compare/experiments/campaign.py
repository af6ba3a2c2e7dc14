"""Random-DAG cross-check campaigns (``piper-ilp campaign``).

A campaign draws ``count`` random instances (:mod:`compare.builders.generators`) from a master
seed, cross-checks each with :func:`compare.crosscheck.verify.verify_instance` on local worker
processes, and

* appends one JSON line per finished instance to ``DIR/results.jsonl``, written at
  once in one call, so a killed run loses nothing and ``resume=True`` skips what is
  done (each id counted once);
* holds ``DIR/.lock`` (``flock``) while it runs, so that two campaigns never share a
  folder; SIGINT / SIGTERM kill the worker processes and raise
  :class:`CampaignInterrupted`, and the workers also die when the campaign process is
  killed outright;
* shrinks every mismatch (:mod:`compare.crosscheck.shrink`) to a small instance saved as
  ``DIR/counterexamples/<id>.json``, re-checking each candidate with the methods and external
  planners that disagreed and the campaign's options; ``piper-ilp verify`` replays it (the
  file is an instance; its extra ``counterexample`` field, ignored by the loader, says where
  it came from, what disagreed, and the ``replay`` command line: the campaign's methods,
  ``--external`` planners and options);
* ends with a summary (``DIR/summary.json``, written atomically): counts by verdict, by family
  and by mode, the greedy rule's gap to the optimum, and per-method solve-time percentiles.

Modes (``modes=``, ``--modes``, ``--in-flight``; :class:`~piper_ilp.mode.Mode`, contract
secs. 8, 9 and 11): every instance is checked under each mode given, one job and one record
per (instance, mode). A record's ``id`` is the instance's id, with
``@PIPELINE+OBJECTIVE+SCHEDULE`` (``+schedule`` under sec. 11's in-flight rule) appended
outside the default mode (so a default-mode campaign keeps its ids), plus ``instance_id``,
``mode`` (the label) and ``in_flight``; a counterexample records its mode, and is shrunk in
it.

The instances are a pure function of (master seed, index, parameters): the same
campaign run twice, or resumed, tries the same instances.
"""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from compare.builders.generators import ALL_FAMILIES, FAMILIES, random_instance
from compare.crosscheck.methods import check_mode, default_methods, external_method
from compare.crosscheck.shrink import shrink
from compare.crosscheck.verify import (
    DEFAULT_TIME_LIMIT,
    METHODS,
    VERDICTS,
    verify_instance,
)
from compare.experiments.jobs import (
    LOCK,
    MANIFESTS,
    Interrupted,
    extends_count,
    prepare_folder,
    run_in_folder,
)
from piper_ilp.errors import InputError
from piper_ilp.files import atomic_write_text, json_safe, read_jsonl
from piper_ilp.instance import instance_to_dict
from piper_ilp.mode import ALL_MODES, DEFAULT_MODE, Mode
from piper_ilp.settings import Settings
from piper_ilp.solution import Restrictions

__all__ = [
    "Spec",
    "make_specs",
    "mode_specs",
    "parse_modes",
    "spec_instance",
    "run_spec",
    "replay_command",
    "run_campaign",
    "read_results",
    "summarize",
    "summary_lines",
    "RESULTS",
    "SUMMARY",
    "COUNTEREXAMPLES",
    "HARNESS_ERROR",
    "CAMPAIGN_VERDICTS",
    "LOCK",
    "CampaignInterrupted",
]

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
PARAMETERS = MANIFESTS["campaign"]  # what wrote the folder, and its parameters
COUNTEREXAMPLES = "counterexamples"

#: A record's verdict when the campaign's own code failed on a job (making the instance, or
#: an exception out of the check itself): nothing was checked, so it is no evidence against
#: any method; ``harness_error`` holds the message. Counted apart in the summary
#: (``verdicts``, ``harness_errors``); the CLI exits 1 on it, as on a mismatch or an error.
HARNESS_ERROR = "harness-error"

#: Every verdict a campaign record can carry: :data:`compare.crosscheck.verify.VERDICTS` and
#: :data:`HARNESS_ERROR`.
CAMPAIGN_VERDICTS = VERDICTS + (HARNESS_ERROR,)


#: SIGINT or SIGTERM ended a campaign: the workers are killed, the finished results are in
#: ``results.jsonl`` and ``--resume`` goes on (``signum``, ``done``, ``results``).
CampaignInterrupted = Interrupted


@dataclass(frozen=True)
class Spec:
    """One campaign job: how to regenerate its instance with :func:`random_instance`, and
    the ``mode`` (a :attr:`Mode.label <piper_ilp.pipeline.Mode.label>`) it is checked in.
    ``id`` names the job (see :func:`mode_specs`), ``instance_id`` the instance."""

    id: str
    family: str
    n_nodes: int
    seed: int
    integer: bool
    t_values: tuple[int, ...]
    options_per_t: tuple[int, int]
    memory: str | float
    mode: str = DEFAULT_MODE.label

    @property
    def instance_id(self) -> str:
        return self.id.split("@", 1)[0]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["t_values"] = list(self.t_values)
        d["options_per_t"] = list(self.options_per_t)
        return d


def parse_modes(text: str | Sequence[str] | None, in_flight: str = "piper") -> tuple[Mode, ...]:
    """``--modes``: comma-separated labels ``PIPELINE/OBJECTIVE/SCHEDULE[/IN_FLIGHT]``
    (trailing parts may be left out: ``graph`` is ``graph/throughput/1f1b``; a label
    without its in-flight rule takes ``in_flight``, ``--in-flight``), or ``all`` for
    :data:`~piper_ilp.mode.ALL_MODES` under ``in_flight``; None is the default mode
    alone (under ``in_flight``). InputError (one line) on an empty or bad label, ``all``
    with others, or a repeat.

    Examples
    --------
    >>> [m.label for m in parse_modes("graph/batch-time/gpipe, sequential")]
    ['graph/batch-time/gpipe', 'sequential/throughput/1f1b']
    >>> len(parse_modes("all"))
    8
    >>> parse_modes("all", "schedule")[-1].label
    'graph/batch-time/gpipe/schedule'
    """
    if text is None:
        return (DEFAULT_MODE.with_in_flight(in_flight),)
    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text)]
    if not items or not all(items):
        raise InputError(
            f"--modes: {text!r} has an empty label; give PIPELINE/OBJECTIVE/SCHEDULE labels, "
            "comma-separated, or 'all'"
        )
    if [x.lower() for x in items] == ["all"]:
        return tuple(m.with_in_flight(in_flight) for m in ALL_MODES)
    if "all" in (x.lower() for x in items):
        raise InputError("--modes: 'all' stands alone (it already names every mode)")
    modes = []
    for item in items:
        try:
            modes.append(Mode.parse(item, in_flight))
        except ValueError as exc:
            raise InputError(f"--modes: {exc} (or give 'all')") from None
    if len(set(modes)) != len(modes):
        raise InputError(f"--modes: {text!r} names a mode twice")
    return tuple(modes)


def _mode_suffix(mode: Mode) -> str:
    """What a job id carries for its mode: nothing for the default, else
    ``@PIPELINE+OBJECTIVE+SCHEDULE`` (``+schedule`` added under sec. 11's in-flight rule;
    no '/', so that the id names a file)."""
    return "" if mode.is_default else "@" + mode.label.replace("/", "+")


def mode_specs(specs: Sequence[Spec], modes: Sequence[Mode]) -> list[Spec]:
    """One job per (instance, mode), instance by instance.

    Examples
    --------
    >>> specs = make_specs(1, 0, families=("chain",))
    >>> [s.id for s in mode_specs(specs, parse_modes("sequential,graph/batch-time/gpipe"))]
    ['00000-chain-n7', '00000-chain-n7@graph+batch-time+gpipe']
    """
    return [
        replace(spec, id=spec.instance_id + _mode_suffix(mode), mode=mode.label)
        for spec in specs
        for mode in modes
    ]


def make_specs(
    count: int,
    seed: int,
    families: Sequence[str] = FAMILIES,
    nodes: tuple[int, int] = (3, 7),
) -> list[Spec]:
    """The campaign's instances: families in turn, node counts uniform in ``nodes``, and
    a mix of settings (30 % integer data; t in {1, 2} mostly, sometimes {1, 2, 4} or
    {1}; 2 options per (node, t) mostly, sometimes 1-3; memory tight 80 %, loose 10 %,
    a random factor 10 %).

    Examples
    --------
    >>> [s.family for s in make_specs(3, 0, families=("chain", "skip"))]
    ['chain', 'skip', 'chain']
    >>> make_specs(5, 7) == make_specs(5, 7)
    True
    """
    if count < 0:
        raise InputError(f"--count must be >= 0, got {count}")
    lo, hi = nodes
    if lo < 1 or hi < lo:
        raise InputError(f"--nodes must be A-B with 1 <= A <= B, got {lo}-{hi}")
    for f in families:
        if f not in ALL_FAMILIES:
            raise InputError(f"unknown family {f!r}; choose from {', '.join(ALL_FAMILIES)}")
    if not families:
        raise InputError("give at least one family")
    specs = []
    for i in range(count):
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, i])
        family = families[i % len(families)]
        n = int(rng.integers(lo, hi + 1))
        inst_seed = int(rng.integers(0, 2**31))
        integer = bool(rng.random() < 0.3)
        r = rng.random()
        t_values = (1, 2) if r < 0.75 else (1, 2, 4) if r < 0.9 else (1,)
        options = (2, 2) if rng.random() < 0.8 else (1, 3)
        r = rng.random()
        memory: str | float = (
            "tight" if r < 0.8 else "loose" if r < 0.9 else round(float(rng.uniform(0.0, 0.6)), 3)
        )
        specs.append(
            Spec(f"{i:05d}-{family}-n{n}", family, n, inst_seed, integer, t_values, options, memory)
        )
    return specs


def spec_instance(spec: Spec):
    """The instance a spec describes."""
    return random_instance(
        spec.family,
        spec.n_nodes,
        spec.seed,
        t_values=spec.t_values,
        options_per_t=spec.options_per_t,
        memory=spec.memory,
        integer=spec.integer,
    )


def run_spec(
    spec: Spec,
    methods: Sequence[str] | None = None,
    settings: Settings = Settings(time_limit=DEFAULT_TIME_LIMIT),
    solvers: Mapping[str, Callable] | None = None,
    do_shrink: bool = True,
    shrink_checks: int = 200,
    shrink_seconds: float = 300.0,
    externals: Mapping[str, str] | None = None,
    external_timeout: float | None = None,
    uniform: bool = False,
    greedy_gap: bool = False,
) -> dict:
    """Cross-check one spec in its mode (with ``uniform``: the problem where every stage
    has the same t and d, contract sec. 12); the campaign's JSON record (with, for a mismatch,
    the shrunk counterexample as ``counterexample_instance``). Never raises: a crash of the
    harness itself (making the instance, or an exception out of the check) is recorded with
    the verdict :data:`HARNESS_ERROR` and the message in ``harness_error``; nothing was
    checked, so it is neither a mismatch nor a method's error. A crash while shrinking a
    mismatch keeps the verdict and records ``shrink_error``. ``methods`` default to the
    spec's mode's (:func:`~compare.crosscheck.methods.default_methods`). ``settings`` (time limit,
    threads; checked by the caller, :func:`run_campaign`) apply to every method that takes
    them, in the spec's mode. ``greedy_gap`` also runs Piper's greedy rule (a side check,
    not one of ``methods``) for the record's ``greedy_tps`` and ``greedy_gap``; off (the
    default), both are None and the record says ``"greedy_gap_run": false``."""
    start = time.perf_counter()
    rec: dict = {
        "id": spec.id,
        "instance_id": spec.instance_id,
        "mode": spec.mode,
        "spec": spec.to_dict(),
        "family": spec.family,
        "nodes": spec.n_nodes,
    }
    if uniform:
        rec["uniform"] = True
    if not greedy_gap:
        rec["greedy_gap_run"] = False
    externals = dict(externals or {})
    try:
        mode = Mode.parse(spec.mode)
        rec["in_flight"] = mode.in_flight
        names = tuple(methods) if methods is not None else default_methods(mode)
        check = dict(
            settings=settings.replace(mode=mode),
            solvers=solvers,
            external_timeout=external_timeout,
            restrictions=Restrictions(uniform=uniform),
        )
        inst = spec_instance(spec)
        rec["edges"] = len(inst.edges)
        rec["settings"] = {"K": inst.K, "N": inst.N, "M": inst.M, "B": inst.B}
        v = verify_instance(inst, names, externals=externals, greedy=greedy_gap, **check)
    except Exception as exc:  # the harness's own bug: keep going, but flag it loudly
        why = f"{type(exc).__name__}: {exc}"
        rec.update(
            verdict=HARNESS_ERROR,
            harness_error=why,
            problems=[f"harness error: {why}"],
            involved=[],
        )
        rec["wall_seconds"] = time.perf_counter() - start
        return rec
    rec.update(
        verdict=v.verdict,
        optimum=v.optimum,
        infeasible=v.infeasible,
        greedy_tps=v.greedy_tps,
        greedy_gap=v.greedy_gap,
        gaps=v.gaps,
        proofs=v.proofs,
        lineages=v.proofs_by_lineage,
        errors=v.errors,
        backend_errors=v.backend_errors,
        problems=v.problems,
        involved=v.involved,
        statuses={m: r.status for m, r in v.results.items()},
        seconds={m: r.seconds for m, r in v.results.items()},
    )
    if v.verdict == "mismatch" and do_shrink:
        try:
            rec.update(
                _shrunk(spec, inst, mode, v, names, externals, check, shrink_checks, shrink_seconds)
            )
        except Exception as exc:  # the mismatch stands; only its shrinking failed
            rec["shrink_error"] = f"{type(exc).__name__}: {exc}"
    rec["wall_seconds"] = time.perf_counter() - start
    return rec


def replay_command(
    methods: Sequence[str],
    externals: Mapping[str, str],
    mode: Mode,
    *,
    time_limit: float | None = 60.0,
    threads: int | None = None,
    external_timeout: float | None = None,
    uniform: bool = False,
    force: bool = False,
) -> str:
    """The ``piper-ilp verify FILE ...`` line that checks a counterexample with the methods
    and options of the campaign that found it (shell-quoted; ``--uniform`` for a uniform
    campaign, ``--force`` for one run past the size guards).

    Examples
    --------
    >>> cmd = replay_command(
    ...     ["dp", "brute"], {"x": "sh plan.sh {instance}"}, DEFAULT_MODE, time_limit=None
    ... )
    >>> cmd  # doctest: +NORMALIZE_WHITESPACE
    "piper-ilp verify FILE --methods dp,brute --external 'x=sh plan.sh {instance}' --pipeline
    sequential --objective throughput --schedule 1f1b"
    """
    words = ["piper-ilp", "verify", "FILE", "--methods", ",".join(methods)]
    for name, command in externals.items():
        words += ["--external", f"{name}={command}"]
    if external_timeout is not None:
        words += ["--external-timeout", repr(float(external_timeout))]
    if time_limit is not None:
        words += ["--time-limit", repr(float(time_limit))]
    if threads is not None:
        words += ["--threads", str(threads)]
    for k, value in mode.to_dict().items():
        if k != "in_flight" or value != "piper":  # (Piper's rule is the default)
            words += [f"--{k.replace('_', '-')}", str(value)]
    if uniform:
        words.append("--uniform")
    if force:
        words.append("--force")
    return " ".join(shlex.quote(w) for w in words)


def _shrunk(
    spec: Spec,
    inst,
    mode: Mode,
    v,
    methods: Sequence[str],
    externals: Mapping[str, str],
    check: dict,
    shrink_checks: int,
    shrink_seconds: float,
) -> dict:
    """Shrink a mismatch (in its mode: the mode is part of the disagreement), re-checking
    each candidate with the methods and external planners that disagreed (all of them when
    no method was named), with the same options; the record's counterexample fields."""
    again = [m for m in methods if m in v.involved]
    again_ext = {n: c for n, c in externals.items() if n in v.involved}
    if not again and not again_ext:
        again, again_ext = list(methods), dict(externals)
    use_greedy = "greedy" in v.involved

    def fails(candidate) -> bool:
        w = verify_instance(candidate, again, externals=again_ext, greedy=use_greedy, **check)
        return w.verdict == "mismatch"

    res = shrink(inst, fails, max_checks=shrink_checks, max_seconds=shrink_seconds)
    final = verify_instance(res.instance, methods, externals=externals, **check)
    data = instance_to_dict(res.instance)
    data["counterexample"] = {
        "campaign_id": spec.id,
        "mode": mode.to_dict(),
        "replay": replay_command(
            methods,
            externals,
            mode,
            time_limit=check["settings"].time_limit,
            threads=check["settings"].threads,
            external_timeout=check["external_timeout"],
            uniform=check["restrictions"].uniform,
            force=bool(check["settings"].options.get("force")),
        ),
        "spec": spec.to_dict(),
        "original": {"nodes": len(inst.nodes), "edges": len(inst.edges), "problems": v.problems},
        "shrink_steps": res.steps,
        "shrink_checks": res.checks,
        "shrink_finished": res.finished,
        "shrunk_with": again + list(again_ext),
        "verdict": final.verdict,
        "problems": final.problems,
        "methods": list(methods),
        "externals": dict(externals),
    }
    return {
        "counterexample_instance": data,
        "shrunk_nodes": len(res.instance.nodes),
        "shrunk_edges": len(res.instance.edges),
    }


def read_results(out: str | Path) -> list[dict]:
    """The records in ``out/results.jsonl``, one per instance id (the first; a torn last
    line, from a killed run, is skipped)."""
    seen: set = set()
    return [
        r
        for r in read_jsonl(Path(out) / RESULTS, lambda r: "id" in r and "verdict" in r)
        if not (r["id"] in seen or seen.add(r["id"]))
    ]


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"count": 0}
    a = np.asarray(values, dtype=float)
    return {
        "count": int(a.size),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "mean": float(a.mean()),
    }


def summarize(
    records: Iterable[dict],
    elapsed: float | None = None,
    workers: int | None = None,
    modes: Sequence[Mode] | None = None,
) -> dict:
    """Counts by verdict, by family and by mode (``by_mode``: label -> verdict counts;
    ``modes``: the labels, in the order of ``modes`` when given, else of
    :data:`~piper_ilp.pipeline.ALL_MODES`), greedy-gap statistics (over
    instances with a proven optimum and a greedy plan, so default-mode records only;
    ``not_run``: the records of a campaign run with ``greedy_gap`` off) and
    per-method solve-time percentiles and status counts."""
    records = list(records)
    verdicts = {v: 0 for v in CAMPAIGN_VERDICTS}
    by_family: dict[str, dict[str, int]] = {}
    by_mode: dict[str, dict[str, int]] = {}
    times: dict[str, list[float]] = {}
    statuses: dict[str, dict[str, int]] = {}
    gaps = []
    infeasible = not_run = 0
    for r in records:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        fam = by_family.setdefault(r.get("family", "?"), {})
        fam[r["verdict"]] = fam.get(r["verdict"], 0) + 1
        per_mode = by_mode.setdefault(r.get("mode") or DEFAULT_MODE.label, {})
        per_mode[r["verdict"]] = per_mode.get(r["verdict"], 0) + 1
        infeasible += bool(r.get("infeasible"))
        for m, s in (r.get("seconds") or {}).items():
            st = (r.get("statuses") or {}).get(m)
            statuses.setdefault(m, {})
            statuses[m][st] = statuses[m].get(st, 0) + 1
            if st != "skipped":
                times.setdefault(m, []).append(s)
        if r.get("greedy_gap") is not None:
            gaps.append(r["greedy_gap"])
        not_run += r.get("greedy_gap_run") is False
    order = [m.label for m in (modes or ALL_MODES)]
    by_mode = dict(
        sorted(
            by_mode.items(),
            key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]),
        )
    )
    g = np.asarray(gaps, dtype=float)
    greedy = {"count": int(g.size), "not_run": not_run}
    if g.size:
        greedy.update(
            worse=int((g > 1e-9).sum()),
            mean=float(g.mean()),
            median=float(np.median(g)),
            p90=float(np.percentile(g, 90)),
            max=float(g.max()),
        )
    out = {
        "instances": len(records),  # records: one per instance and mode
        "distinct_instances": len({r.get("instance_id") or r["id"] for r in records}),
        "verdicts": verdicts,
        "infeasible": infeasible,
        "by_family": by_family,
        "modes": list(by_mode),
        "by_mode": by_mode,
        "greedy_gap": greedy,
        "seconds": {m: _percentiles(ts) for m, ts in times.items()},
        "statuses": statuses,
        "mismatches": [r["id"] for r in records if r["verdict"] == "mismatch"],
        "errors": [r["id"] for r in records if r["verdict"] == "error"],
        "harness_errors": [r["id"] for r in records if r["verdict"] == HARNESS_ERROR],
    }
    if elapsed is not None:
        out["elapsed_seconds"] = elapsed
    if workers is not None:
        out["workers"] = workers
    return out


def summary_lines(summary: dict) -> list[str]:
    """The summary as plain text lines (the CLI prints them)."""
    v = summary["verdicts"]
    n_modes = len(summary.get("by_mode") or {})
    what = f"{summary['instances']} instances"
    if n_modes > 1:
        what = (
            f"{summary['instances']} checks ({summary.get('distinct_instances', '?')} "
            f"instances, {n_modes} modes)"
        )
    lines = [
        f"{what}: "
        + ", ".join(f"{k} {v.get(k, 0)}" for k in VERDICTS)
        + (f", harness error {v[HARNESS_ERROR]}" if v.get(HARNESS_ERROR) else "")
        + f" ({summary['infeasible']} proven infeasible)"
    ]
    if "elapsed_seconds" in summary:
        lines[0] += (
            f"; {summary['elapsed_seconds']:.1f} s with {summary.get('workers', 1)} worker(s)"
        )
    for fam, counts in sorted(summary["by_family"].items()):
        lines.append(f"  {fam:16s} " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    by_mode = summary.get("by_mode") or {}
    if len(by_mode) == 1:
        lines.append(f"mode {next(iter(by_mode))}")
    elif by_mode:
        lines.append(f"{len(by_mode)} modes:")
        for label, counts in by_mode.items():
            lines.append(
                f"  {label:28s} " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
            )
    g = summary["greedy_gap"]
    if g["count"]:
        lines.append(
            f"greedy rule vs optimum over {g['count']} instances: worse on {g['worse']} "
            f"({100 * g['worse'] / g['count']:.1f}%), gap mean {100 * g['mean']:.3g}%, median "
            f"{100 * g['median']:.3g}%, p90 {100 * g['p90']:.3g}%, max {100 * g['max']:.3g}%"
        )
    elif g.get("not_run"):
        lines.append(
            f"greedy rule's gap: not measured on {g['not_run']} instances (--greedy-gap "
            "measures it)"
        )
    else:
        lines.append("greedy rule: no instance with both a proven optimum and a greedy plan")
    for m, p in summary["seconds"].items():
        if p["count"]:
            st = ", ".join(f"{k} {n}" for k, n in sorted(summary["statuses"].get(m, {}).items()))
            lines.append(
                f"  {m:7s} seconds p50 {p['p50']:.3g}, p90 {p['p90']:.3g}, p99 {p['p99']:.3g}, max "
                f"{p['max']:.3g}  ({st})"
            )
    for key in ("mismatches", "errors", "harness_errors"):
        ids = summary.get(key) or []
        if ids:
            lines.append(
                f"{key.replace('_', ' ')}: "
                + ", ".join(ids[:20])
                + (" ..." if len(ids) > 20 else "")
            )
    return lines


def _save_counterexample(out: Path, rec: dict) -> None:
    data = rec.pop("counterexample_instance", None)
    if data is None:
        return
    folder = out / COUNTEREXAMPLES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rec['id']}.json"
    atomic_write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False) + "\n")
    rec["counterexample"] = str(path)


def run_campaign(
    out: str | Path,
    count: int,
    seed: int,
    *,
    families: Sequence[str] = FAMILIES,
    nodes: tuple[int, int] = (3, 7),
    methods: Sequence[str] | None = None,
    time_limit: float | None = 60.0,
    threads: int | None = None,
    workers: int = 1,
    resume: bool = False,
    solvers: Mapping[str, Callable] | None = None,
    do_shrink: bool = True,
    progress: bool | None = None,
    on_record: Callable[[dict], None] | None = None,
    scheduler: str | None = None,
    externals: Mapping[str, str] | None = None,
    external_timeout: float | None = None,
    modes: Sequence[Mode] = (DEFAULT_MODE,),
    note: Callable[[str], None] | None = None,
    uniform: bool = False,
    greedy_gap: bool = False,
    force: bool = False,
) -> dict:
    """Run a campaign into the folder ``out``; returns the summary (also written to
    ``out/summary.json``).

    The instances are checked by :func:`compare.experiments.jobs.run_jobs`: ``workers`` spawned
    processes (each in its own process group, killed with the campaign, and dying with it
    even when it is SIGKILLed), or a dask cluster (``scheduler``). Each finished record is
    one line of ``out/results.jsonl``, written by the parent in one ``write`` call.
    ``out/.lock`` is held (``flock``) for the whole run: a second campaign on the same
    folder is refused. SIGINT or SIGTERM kill the workers and raise
    :class:`CampaignInterrupted`; an instance that was running is not recorded and is
    checked again by ``resume``.

    Parameters
    ----------
    out : path
        Results folder (created). Without ``resume`` it must hold no earlier results.
    count, seed : int
        How many instances, and the master seed.
    families, nodes : which graph families, and the (low, high) node-count range.
    methods : sequence of str, optional
        The methods every instance is checked with; default: each mode's
        (:func:`~compare.crosscheck.methods.default_methods`), recorded per mode in the
        parameters when they differ between the modes. Resuming a folder made with one list
        for every mode (a campaign from before the defaults depended on the mode) without
        ``methods`` is refused when the defaults differ from it, in one line naming the
        ``--methods`` that resumes it as made.
    time_limit, threads
        As for :func:`verify_instance` (the time limit per method: dp, greedy, MILP).
    workers : int
        Worker processes (or dask workers of a LocalCluster).
    resume : bool
        Skip the ids already in ``out/results.jsonl``; the parameters must be the same.
    solvers : mapping, optional
        Replacement methods (tests inject wrong ones); must be picklable (module-level
        functions).
    do_shrink : bool
        Shrink mismatches into ``out/counterexamples/``.
    progress : bool, optional
        A rich progress bar on stderr (default: when stderr is a terminal).
    on_record : callable, optional
        Called with each record as it is written.
    scheduler : str, optional
        None: local worker processes; ``"local"``: a dask LocalCluster started here; or a
        dask scheduler's address (``tcp://HOST:PORT``).
    externals : mapping, optional
        External planners (name -> command) checked on every instance
        (:mod:`compare.crosscheck.external`).
    external_timeout : float, optional
        Seconds before an external planner is killed (a backend error).
    modes : sequence of Mode
        Check every instance under each of these modes (one job and one record per
        instance and mode; :func:`parse_modes`); default: the default mode alone.
    note : callable, optional
        Called with a line of text when resuming drops a torn last line of results.jsonl
        (default: printed on stderr).
    uniform : bool
        Check the uniform problem (every stage the same t and d, contract sec. 12) instead
        of the free one; recorded in the parameters (``uniform``) and in each record.
    greedy_gap : bool
        Also run Piper's greedy rule on every instance (in the default mode) for the
        summary's greedy-gap statistics. Off by default: it is not one of ``methods`` and,
        on small DAGs, costs several times the DP's CPU; the summary then says the gap was
        not measured. Recorded in the parameters.
    force : bool
        Run the methods that have a size guard (the DP, the MILP backends, path, columns,
        brute) past it, as ``verify --force`` does (:func:`verify_instance`); recorded in
        the parameters.

    Raises
    ------
    InputError
        Bad parameters, a method that does not solve in one of ``modes``, ``out`` not writable,
        another campaign running on ``out``, ``out`` written by a sweep, results already present
        without ``resume``, ``resume`` with different parameters, or a damaged results.jsonl (a line
        other than the last that is not a whole record: the file and line are named).
    CampaignInterrupted
        SIGINT or SIGTERM (the finished results are kept).
    InternalError
        A worker process died or a dask task failed (the finished results are kept).
    """
    for m in methods or ():
        if m not in METHODS:
            raise InputError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    # checked once, here
    settings = Settings(time_limit=time_limit, threads=threads, options={"force": force})
    modes = tuple(modes) or (DEFAULT_MODE,)
    if len(set(modes)) != len(modes):
        raise InputError("--modes: a mode is given twice")
    per_mode = {m.label: tuple(methods) if methods else default_methods(m) for m in modes}
    for mode in modes:
        for m in per_mode[mode.label]:
            check_mode(METHODS[m], mode)
        for name, command in (externals or {}).items():
            check_mode(external_method(name, command), mode)
    specs = mode_specs(make_specs(count, seed, families, nodes), modes)
    out = prepare_folder(out, (RESULTS, SUMMARY, PARAMETERS), folders=(COUNTEREXAMPLES,))
    one = set(per_mode.values())
    if resume and not methods:
        _check_default_methods(out, per_mode)
    params = {
        "count": count,
        "seed": seed,
        "families": list(families),
        "nodes": list(nodes),
        # one list (as before the defaults depended on the mode) when every mode has the same
        "methods": list(one.pop()) if len(one) == 1 else {k: list(v) for k, v in per_mode.items()},
        "time_limit": time_limit,
        "externals": dict(externals or {}),
        "modes": [m.label for m in modes],
        "uniform": uniform,
        "greedy_gap": greedy_gap,
        "force": force,
    }
    fn = functools.partial(
        run_spec,
        methods=tuple(methods) if methods else None,
        settings=settings,
        solvers=dict(solvers) if solvers else None,
        do_shrink=do_shrink,
        externals=dict(externals or {}),
        external_timeout=external_timeout,
        uniform=uniform,
        greedy_gap=greedy_gap,
    )
    show = sys.stderr.isatty() if progress is None else progress
    start = time.perf_counter()
    bar = _ProgressBar(len(specs)) if show else None
    counts = {"mismatch": 0, "error": 0, HARNESS_ERROR: 0}

    def after(rec: dict) -> None:
        if on_record is not None:
            on_record(rec)
        if rec["verdict"] in counts:
            counts[rec["verdict"]] += 1
        if bar is not None:
            bar.advance(
                f"mismatch {counts['mismatch']}, error {counts['error']}"
                + (f", harness error {counts[HARNESS_ERROR]}" if counts[HARNESS_ERROR] else "")
            )

    try:
        if bar is not None:
            bar.start()
        done, new = run_in_folder(
            out,
            what="campaign",
            results=RESULTS,
            parameters=PARAMETERS,
            params=params,
            jobs=specs,
            job_id=lambda s: s.id,
            fn=fn,
            keep=lambda r: "id" in r and "verdict" in r,
            resume=resume,
            workers=workers,
            scheduler=scheduler,
            prepare=lambda rec: _save_counterexample(out, rec),
            on_record=after,
            # a folder from before --modes ran the default mode, before --uniform the free problem
            # (and before --greedy-gap was opt-in, the greedy rule ran on every instance)
            # (and before --force, no method ran past its size guard)
            defaults={
                "modes": [DEFAULT_MODE.label],
                "uniform": False,
                "greedy_gap": True,
                "force": False,
            },
            note=note,
            # instance i is a function of (seed, i): a larger count keeps the first ones
            grows={"count": extends_count},
        )
    finally:
        if bar is not None:
            bar.stop()
    records = done + new
    summary = summarize(records, elapsed=time.perf_counter() - start, workers=workers, modes=modes)
    summary["parameters"] = params
    summary["resumed"] = len(done)
    atomic_write_text(
        out / SUMMARY, json.dumps(json_safe(summary), indent=1, allow_nan=False) + "\n"
    )
    return summary


def _check_default_methods(out: Path, per_mode: Mapping[str, tuple[str, ...]]) -> None:
    """Refuse (one line) to resume, with the default methods, a folder whose methods were one
    list for every mode that the defaults no longer are in some mode (a campaign made
    before the defaults depended on the pipelining): name the ``--methods`` that resumes it
    as it was made."""
    try:
        old = json.loads((out / PARAMETERS).read_text(encoding="utf-8")).get("methods")
    except (OSError, ValueError):
        return  # no folder to resume, or one that run_in_folder reports
    if not isinstance(old, list):
        return
    differ = [f"{label}: {','.join(v)}" for label, v in per_mode.items() if list(v) != old]
    if differ:
        raise InputError(
            f"--resume: {out} was checked with --methods {','.join(old)} in every mode, but the "
            f"default methods now differ ({'; '.join(differ)}): add --methods {','.join(old)} "
            "to resume it as it was made, or choose another folder"
        )


class _ProgressBar:
    """A rich progress bar on stderr: done of total, a status text, elapsed and remaining."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("campaign"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task("campaign", total=total, status="")

    def start(self) -> None:
        self.progress.start()

    def advance(self, status: str) -> None:
        self.progress.update(self.task, advance=1, status=status)

    def stop(self) -> None:
        self.progress.stop()
