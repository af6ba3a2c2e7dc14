"""Random-DAG cross-check campaigns (``piper-ilp campaign``).

A campaign draws ``count`` random instances (:mod:`compare.generators`) from a master
seed, cross-checks each with :func:`compare.verify.verify_instance` on local worker
processes, and

* appends one JSON line per finished instance to ``DIR/results.jsonl``, written at
  once in one call, so a killed run loses nothing and ``resume=True`` skips what is
  done (each id counted once);
* holds ``DIR/.lock`` (``flock``) while it runs, so that two campaigns never share a
  folder; SIGINT / SIGTERM kill the worker processes and raise
  :class:`CampaignInterrupted`, and the workers also die when the campaign process is
  killed outright;
* shrinks every mismatch (:mod:`compare.shrink`) to a small instance saved as
  ``DIR/counterexamples/<id>.json``, which ``piper-ilp verify`` replays (the file is an
  instance; its extra ``counterexample`` field, ignored by the loader, says where it
  came from and what disagreed);
* ends with a summary (``DIR/summary.json``, written atomically): counts by verdict and by family, the
  greedy rule's gap to the optimum, and per-method solve-time percentiles.

The instances are a pure function of (master seed, index, parameters): the same
campaign run twice, or resumed, tries the same instances.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from compare.generators import ALL_FAMILIES, FAMILIES, random_instance
from compare.shrink import shrink
from compare.verify import DEFAULT_METHODS, METHODS, verify_instance
from compare.worker_guard import guard_worker, kill_group
from piper_ilp.errors import InputError, InternalError
from piper_ilp.files import atomic_write_text, check_writable
from piper_ilp.instance import instance_to_dict

__all__ = [
    "Spec",
    "make_specs",
    "spec_instance",
    "run_spec",
    "run_campaign",
    "read_results",
    "summarize",
    "summary_lines",
    "RESULTS",
    "SUMMARY",
    "COUNTEREXAMPLES",
    "LOCK",
    "CampaignInterrupted",
]

RESULTS = "results.jsonl"
SUMMARY = "summary.json"
PARAMETERS = "campaign.json"
COUNTEREXAMPLES = "counterexamples"
LOCK = ".lock"


class CampaignInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM ended a campaign: the workers are killed, the finished results are
    in ``results.jsonl`` and ``--resume`` goes on. ``signum`` is the signal's number (the
    CLI exits with 128 + signum)."""

    def __init__(self, signum: int, done: int, results: Path):
        super().__init__(f"interrupted by signal {signum}; {done} results saved in {results}")
        self.signum = signum
        self.done = done
        self.results = results


@dataclass(frozen=True)
class Spec:
    """One campaign instance: how to regenerate it with :func:`random_instance`."""

    id: str
    family: str
    n_nodes: int
    seed: int
    integer: bool
    t_values: tuple[int, ...]
    options_per_t: tuple[int, int]
    memory: str | float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["t_values"] = list(self.t_values)
        d["options_per_t"] = list(self.options_per_t)
        return d


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
        memory: str | float = "tight" if r < 0.8 else "loose" if r < 0.9 else round(float(rng.uniform(0.0, 0.6)), 3)
        specs.append(Spec(f"{i:05d}-{family}-n{n}", family, n, inst_seed, integer, t_values, options, memory))
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
    methods: Sequence[str] = DEFAULT_METHODS,
    time_limit: float | None = 60.0,
    threads: int | None = None,
    solvers: Mapping[str, Callable] | None = None,
    do_shrink: bool = True,
    shrink_checks: int = 200,
    shrink_seconds: float = 300.0,
) -> dict:
    """Cross-check one spec; the campaign's JSON record (with, for a mismatch, the
    shrunk counterexample as ``counterexample_instance``). Never raises: a crash of the
    harness itself is recorded as a mismatch, since it needs a look all the same."""
    start = time.perf_counter()
    rec: dict = {"id": spec.id, "spec": spec.to_dict(), "family": spec.family, "nodes": spec.n_nodes}
    try:
        inst = spec_instance(spec)
        rec["edges"] = len(inst.edges)
        rec["settings"] = {"K": inst.K, "N": inst.N, "M": inst.M, "B": inst.B}
        v = verify_instance(inst, methods, time_limit=time_limit, threads=threads, solvers=solvers)
        rec.update(
            verdict=v.verdict,
            optimum=v.optimum,
            infeasible=v.infeasible,
            greedy_tps=v.greedy_tps,
            greedy_gap=v.greedy_gap,
            problems=v.problems,
            involved=v.involved,
            statuses={m: r.status for m, r in v.results.items()},
            seconds={m: r.seconds for m, r in v.results.items()},
        )
        if v.verdict == "mismatch" and do_shrink:
            # replay only the methods that disagreed (faster), with the same solvers
            again = [m for m in methods if m in v.involved] or list(methods)
            use_greedy = "greedy" in v.involved

            def fails(candidate) -> bool:
                w = verify_instance(candidate, again, time_limit=time_limit, threads=threads, solvers=solvers, greedy=use_greedy)
                return w.verdict == "mismatch"

            res = shrink(inst, fails, max_checks=shrink_checks, max_seconds=shrink_seconds)
            final = verify_instance(res.instance, methods, time_limit=time_limit, threads=threads, solvers=solvers)
            data = instance_to_dict(res.instance)
            data["counterexample"] = {
                "campaign_id": spec.id,
                "spec": spec.to_dict(),
                "original": {"nodes": len(inst.nodes), "edges": len(inst.edges), "problems": v.problems},
                "shrink_steps": res.steps,
                "shrink_checks": res.checks,
                "shrink_finished": res.finished,
                "verdict": final.verdict,
                "problems": final.problems,
                "methods": list(methods),
            }
            rec["counterexample_instance"] = data
            rec["shrunk_nodes"] = len(res.instance.nodes)
            rec["shrunk_edges"] = len(res.instance.edges)
    except Exception as exc:  # the harness's own bug: keep going, but flag it loudly
        rec.update(verdict="mismatch", problems=[f"harness error: {type(exc).__name__}: {exc}"], involved=[])
    rec["wall_seconds"] = time.perf_counter() - start
    return rec


# ---- worker processes -------------------------------------------------------------------
#
# Each worker is a spawned process guarded by compare.worker_guard: its own process group
# (so that a MILP backend's subprocess, e.g. CBC, dies with it), SIGINT ignored (the parent
# decides), and killed by the kernel when the parent dies, even by SIGKILL.


def _worker_main(conn, parent_pid: int, kwargs: dict) -> None:
    """A campaign worker: receive a Spec, send back its record; None or a closed pipe ends it."""
    guard_worker(parent_pid)
    while True:
        try:
            spec = conn.recv()
        except (EOFError, OSError):
            return
        if spec is None:
            return
        conn.send(run_spec(spec, **kwargs))


class _Worker:
    def __init__(self, ctx, kwargs: dict):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, os.getpid(), kwargs), daemon=True, name="piper-campaign-worker")
        self.proc.start()
        child.close()
        self.spec: Spec | None = None

    def kill(self) -> None:
        kill_group(self.proc.pid)  # the worker's group: itself and its solver subprocesses
        try:
            self.proc.kill()
        except (OSError, ValueError):
            pass


def _stop_workers(workers: list[_Worker], graceful: bool) -> None:
    if graceful:
        for w in workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.proc.is_alive() or not graceful:
            w.kill()
    for w in workers:
        w.proc.join(2.0)
        w.conn.close()


class _SignalFlag:
    """SIGINT / SIGTERM handlers that only record the signal (the campaign loop polls it);
    installed only in the main thread, restored on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self) -> "_SignalFlag":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _run_pool(todo: list[Spec], n_workers: int, kwargs: dict, write: Callable[[dict], None], flag: _SignalFlag, poll: float = 0.2) -> None:
    """Run ``todo`` on ``n_workers`` spawned workers, calling ``write`` with each record in
    the parent as it arrives. Raises CampaignInterrupted (via the caller) when ``flag`` is
    set; InternalError when a worker dies. Every worker is killed on the way out."""
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = deque(todo)
    workers: list[_Worker] = []
    graceful = False
    try:
        for _ in range(min(n_workers, len(pending))):
            if flag.signum is not None:
                return
            workers.append(_Worker(ctx, kwargs))

        def feed(w: _Worker) -> None:
            w.spec = pending.popleft() if pending else None
            if w.spec is not None:
                w.conn.send(w.spec)

        for w in workers:
            feed(w)
        while flag.signum is None:
            busy = [w for w in workers if w.spec is not None]
            if not busy:
                graceful = True
                return
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=poll)
            for w in busy:
                if flag.signum is not None:
                    return
                if w.conn in ready or w.conn.poll():
                    try:
                        rec = w.conn.recv()
                    except (EOFError, OSError):
                        rec = None
                    if rec is not None:
                        write(rec)
                        feed(w)
                        continue
                if w.proc.sentinel in ready or not w.proc.is_alive():
                    raise InternalError(
                        f"a campaign worker process died (exit code {w.proc.exitcode}) while checking {w.spec.id}; "
                        "the finished results are saved, rerun with --resume to go on"
                    )
    finally:
        _stop_workers(workers, graceful)


def read_results(out: str | Path) -> list[dict]:
    """The records in ``out/results.jsonl``, one per instance id (the first; a torn last
    line, from a killed run, is skipped)."""
    path = Path(out) / RESULTS
    records = []
    seen: set = set()
    if not path.exists():
        return records
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "id" in rec and "verdict" in rec and rec["id"] not in seen:
                seen.add(rec["id"])
                records.append(rec)
    return records


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


def summarize(records: Iterable[dict], elapsed: float | None = None, workers: int | None = None) -> dict:
    """Counts by verdict and by family, greedy-gap statistics (over instances with a
    proven optimum and a greedy plan) and per-method solve-time percentiles and
    status counts."""
    records = list(records)
    verdicts = {v: 0 for v in ("match", "consistent", "inconclusive", "mismatch")}
    by_family: dict[str, dict[str, int]] = {}
    times: dict[str, list[float]] = {}
    statuses: dict[str, dict[str, int]] = {}
    gaps = []
    infeasible = 0
    for r in records:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        fam = by_family.setdefault(r.get("family", "?"), {})
        fam[r["verdict"]] = fam.get(r["verdict"], 0) + 1
        infeasible += bool(r.get("infeasible"))
        for m, s in (r.get("seconds") or {}).items():
            st = (r.get("statuses") or {}).get(m)
            statuses.setdefault(m, {})
            statuses[m][st] = statuses[m].get(st, 0) + 1
            if st != "skipped":
                times.setdefault(m, []).append(s)
        if r.get("greedy_gap") is not None:
            gaps.append(r["greedy_gap"])
    g = np.asarray(gaps, dtype=float)
    greedy = {"count": int(g.size)}
    if g.size:
        greedy.update(
            worse=int((g > 1e-9).sum()),
            mean=float(g.mean()),
            median=float(np.median(g)),
            p90=float(np.percentile(g, 90)),
            max=float(g.max()),
        )
    out = {
        "instances": len(records),
        "verdicts": verdicts,
        "infeasible": infeasible,
        "by_family": by_family,
        "greedy_gap": greedy,
        "seconds": {m: _percentiles(ts) for m, ts in times.items()},
        "statuses": statuses,
        "mismatches": [r["id"] for r in records if r["verdict"] == "mismatch"],
    }
    if elapsed is not None:
        out["elapsed_seconds"] = elapsed
    if workers is not None:
        out["workers"] = workers
    return out


def summary_lines(summary: dict) -> list[str]:
    """The summary as plain text lines (the CLI prints them)."""
    v = summary["verdicts"]
    lines = [
        f"{summary['instances']} instances: "
        + ", ".join(f"{k} {v.get(k, 0)}" for k in ("match", "consistent", "inconclusive", "mismatch"))
        + f" ({summary['infeasible']} proven infeasible)"
    ]
    if "elapsed_seconds" in summary:
        lines[0] += f"; {summary['elapsed_seconds']:.1f} s with {summary.get('workers', 1)} worker(s)"
    for fam, counts in sorted(summary["by_family"].items()):
        lines.append(f"  {fam:16s} " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))
    g = summary["greedy_gap"]
    if g["count"]:
        lines.append(
            f"greedy rule vs optimum over {g['count']} instances: worse on {g['worse']} "
            f"({100 * g['worse'] / g['count']:.1f}%), gap mean {100 * g['mean']:.3g}%, median {100 * g['median']:.3g}%, "
            f"p90 {100 * g['p90']:.3g}%, max {100 * g['max']:.3g}%"
        )
    else:
        lines.append("greedy rule: no instance with both a proven optimum and a greedy plan")
    for m, p in summary["seconds"].items():
        if p["count"]:
            st = ", ".join(f"{k} {n}" for k, n in sorted(summary["statuses"].get(m, {}).items()))
            lines.append(
                f"  {m:7s} seconds p50 {p['p50']:.3g}, p90 {p['p90']:.3g}, p99 {p['p99']:.3g}, max {p['max']:.3g}  ({st})"
            )
    if summary["mismatches"]:
        lines.append("mismatches: " + ", ".join(summary["mismatches"][:20]) + (" ..." if len(summary["mismatches"]) > 20 else ""))
    return lines


def _save_counterexample(out: Path, rec: dict) -> None:
    data = rec.pop("counterexample_instance", None)
    if data is None:
        return
    folder = out / COUNTEREXAMPLES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{rec['id']}.json"
    atomic_write_text(path, json.dumps(data, indent=1, default=_json_default) + "\n")
    rec["counterexample"] = str(path)


def run_campaign(
    out: str | Path,
    count: int,
    seed: int,
    *,
    families: Sequence[str] = FAMILIES,
    nodes: tuple[int, int] = (3, 7),
    methods: Sequence[str] = DEFAULT_METHODS,
    time_limit: float | None = 60.0,
    threads: int | None = None,
    workers: int = 1,
    resume: bool = False,
    solvers: Mapping[str, Callable] | None = None,
    do_shrink: bool = True,
    progress: bool | None = None,
    on_record: Callable[[dict], None] | None = None,
) -> dict:
    """Run a campaign into the folder ``out``; returns the summary (also written to
    ``out/summary.json``).

    The instances are checked in ``workers`` spawned processes (each in its own process
    group, killed with the campaign, and dying with it even when it is SIGKILLed). Each
    finished record is one line of ``out/results.jsonl``, written by the parent in one
    ``write`` call. ``out/.lock`` is held (``flock``) for the whole run: a second campaign
    on the same folder is refused. SIGINT or SIGTERM kill the workers and raise
    :class:`CampaignInterrupted`; an instance that was running is not recorded and is
    checked again by ``resume``.

    Parameters
    ----------
    out : path
        Results folder (created). Without ``resume`` it must hold no earlier results.
    count, seed : int
        How many instances, and the master seed.
    families, nodes : which graph families, and the (low, high) node-count range.
    methods, time_limit, threads : as for :func:`verify_instance` (time limit per MILP).
    workers : int
        Worker processes.
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

    Raises
    ------
    InputError
        Bad parameters, ``out`` not writable, another campaign running on ``out``,
        results already present without ``resume``, or ``resume`` with different
        parameters.
    CampaignInterrupted
        SIGINT or SIGTERM (the finished results are kept).
    InternalError
        A worker process died (the finished results are kept).
    """
    for m in methods:
        if m not in METHODS:
            raise InputError(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
    if workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    specs = make_specs(count, seed, families, nodes)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the folder ({exc.strerror or exc})") from None
    for name in (RESULTS, SUMMARY, PARAMETERS, LOCK):
        check_writable(out / name, "campaign output")
    import fcntl

    try:
        lock_fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create {LOCK} ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(f"--out {out}: another campaign is running on this folder ({out / LOCK} is locked)") from None
        return _run_locked(out, specs, count, seed, families, nodes, methods, time_limit, threads, workers, resume, solvers, do_shrink, progress, on_record)
    finally:
        os.close(lock_fd)  # releases the lock


def _run_locked(out, specs, count, seed, families, nodes, methods, time_limit, threads, workers, resume, solvers, do_shrink, progress, on_record) -> dict:
    params = {
        "count": count,
        "seed": seed,
        "families": list(families),
        "nodes": list(nodes),
        "methods": list(methods),
        "time_limit": time_limit,
    }
    params_path = out / PARAMETERS
    done = read_results(out)
    if done and not resume:
        raise InputError(f"--out {out}: already holds {len(done)} results; add --resume to continue it, or choose another folder")
    if resume and params_path.exists():
        try:
            old = json.loads(params_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"--resume: cannot read {params_path} ({exc})") from None
        if {k: old.get(k) for k in params} != params:
            diff = ", ".join(f"{k}: {old.get(k)!r} -> {params[k]!r}" for k in params if old.get(k) != params[k])
            raise InputError(f"--resume: {out} holds a campaign with other parameters ({diff})")
    atomic_write_text(params_path, json.dumps(params, indent=1) + "\n")
    done_ids = {r["id"] for r in done}
    todo = [s for s in specs if s.id not in done_ids]

    kwargs = {"methods": tuple(methods), "time_limit": time_limit, "threads": threads, "solvers": dict(solvers) if solvers else None, "do_shrink": do_shrink}
    show = sys.stderr.isatty() if progress is None else progress
    start = time.perf_counter()
    spec_ids = {s.id for s in specs}
    records = [r for r in done if r["id"] in spec_ids]
    results_path = out / RESULTS

    fd = os.open(results_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size:
            with results_path.open("rb") as fh:
                fh.seek(-1, 2)
                torn = fh.read(1) != b"\n"
            if torn:  # a run killed mid-line: end that line, so the next record starts clean
                os.write(fd, b"\n")

        def write(rec: dict) -> None:
            if rec["id"] in done_ids:  # never twice
                return
            _save_counterexample(out, rec)
            data = (json.dumps(_finite(rec), allow_nan=False, default=_json_default) + "\n").encode("utf-8")
            while data:  # one write call for a line (O_APPEND): a kill leaves whole lines
                data = data[os.write(fd, data):]
            done_ids.add(rec["id"])
            records.append(rec)
            if on_record is not None:
                on_record(rec)
            if progress_bar is not None:
                n_mis = sum(r["verdict"] == "mismatch" for r in records)
                progress_bar.update(task, advance=1, status=f"mismatch {n_mis}")

        progress_bar = None
        task = None
        if show and todo:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            progress_bar = Progress(
                TextColumn("campaign"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            task = progress_bar.add_task("campaign", total=len(todo), status="")

        with _SignalFlag() as flag:
            if progress_bar is not None:
                progress_bar.start()
            try:
                if todo:
                    _run_pool(todo, workers, kwargs, write, flag)
            finally:
                if progress_bar is not None:
                    progress_bar.stop()
            if flag.signum is not None:
                raise CampaignInterrupted(flag.signum, len(records), results_path)
    finally:
        os.close(fd)

    summary = summarize(records, elapsed=time.perf_counter() - start, workers=workers)
    summary["parameters"] = params
    summary["resumed"] = len({r["id"] for r in done})
    atomic_write_text(out / SUMMARY, json.dumps(_finite(summary), indent=1, default=_json_default) + "\n")
    return summary


def _finite(obj):
    """Non-finite floats -> None, so that every line is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
