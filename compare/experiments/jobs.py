"""Running many independent jobs (campaign instances, sweep points) in parallel, safely.

:func:`run_jobs` calls ``fn(job)`` for every job and hands each result to ``write`` in
this process as soon as it arrives. Two backends:

* local worker processes (``scheduler=None``; the command line's default where dask is not
  installed):
  spawned processes guarded by :mod:`compare.experiments.worker_guard` (their own process group;
  SIGINT ignored, the parent decides; stopped with SIGTERM, which lets the running job clean up --
  a MILP backend kills its solver process and removes its temporary folder -- then SIGKILL
  after a grace period; killed by the kernel when the parent dies, even by SIGKILL);
* dask.distributed (``scheduler="local"`` for a LocalCluster started here, the command
  line's default where dask is installed, or an address ``tcp://HOST:PORT``;
  :mod:`compare.experiments.cluster`; its workers ignore SIGINT,
  :mod:`compare.experiments.dask_worker`).

Either way SIGINT and SIGTERM only set a flag (:class:`SignalFlag`); the loop stops, the
workers are stopped, and :class:`Interrupted` is raised with the signal's number, after the
finished results were written. The run returns only when every worker it started, and every
process a worker started (a CBC or SCIP solver in a session of its own included), has ended.
:func:`locked_folder` holds ``DIR/.lock`` so that two runs never share a results folder.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from compare.experiments.worker_guard import (
    end_processes,
    guard_worker,
    kill_group,
    process_tree,
    stop_workers,
)
from piper_ilp.errors import InputError, InternalError

__all__ = [
    "LOCK",
    "MANIFESTS",
    "Interrupted",
    "SignalFlag",
    "default_scheduler",
    "describe_changes",
    "extends_count",
    "extends_list",
    "folder_kinds",
    "locked_folder",
    "prepare_folder",
    "read_results_strictly",
    "run_in_folder",
    "run_jobs",
]

LOCK = ".lock"

#: Each kind of results folder (``what`` of :func:`run_in_folder`) and its manifest: the file
#: holding the run's parameters, which records what wrote the folder. A run refuses a folder
#: holding another kind's manifest (the two would share ``results.jsonl``).
MANIFESTS = {"campaign": "campaign.json", "sweep": "sweep.json"}


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM ended a run: the workers are killed and the finished results kept.
    ``signum`` is the signal's number (the CLI exits with 128 + signum); ``done`` the
    results written; ``results`` where."""

    def __init__(self, signum: int, done: int, results: Path | str):
        super().__init__(f"interrupted by signal {signum}; {done} results saved in {results}")
        self.signum = signum
        self.done = done
        self.results = results


class SignalFlag:
    """SIGINT / SIGTERM handlers that only record the signal (the run loop polls it);
    installed only in the main thread, restored on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self) -> "SignalFlag":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signum = signum

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def locked_folder(out: Path, what: str) -> Iterator[None]:
    """Hold ``out/.lock`` (``flock``) for the block; a second holder is refused with one line."""
    import fcntl

    try:
        fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create {LOCK} ({exc.strerror or exc})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InputError(
                f"--out {out}: another {what} is running on this folder ({out / LOCK} is locked)"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def default_scheduler() -> str | None:
    """ "local" (a dask LocalCluster started by the command) where dask.distributed is
    installed, else None (local worker processes)."""
    from compare.experiments.cluster import dask_available

    return "local" if dask_available() else None


def run_jobs(
    fn: Callable[[Any], dict],
    jobs: Sequence[Any],
    write: Callable[[dict], None],
    flag: SignalFlag,
    *,
    workers: int = 1,
    scheduler: str | None = None,
    name: Callable[[Any], str] = str,
    what: str = "job",
) -> None:
    """Run ``fn(job)`` for every job; ``write(result)`` here as each finishes.

    ``fn`` must be picklable (a module-level function or a functools.partial of one).
    Returns early, with the workers killed, when ``flag`` records a signal (the caller
    raises :class:`Interrupted`). ``scheduler``: None for local worker processes, or a dask
    scheduler (see the module docstring).

    Raises
    ------
    InternalError
        A worker died (local processes) or a task failed (dask); the results written
        before stay.
    """
    if not jobs:
        return
    if scheduler is not None:
        from compare.experiments.cluster import run_on_dask

        run_on_dask(
            fn,
            jobs,
            write,
            scheduler=scheduler,
            workers=workers,
            stop=lambda: flag.signum is not None,
            name=name,
        )
        return
    _run_pool(fn, list(jobs), workers, write, flag, name, what)


# ---- local worker processes -------------------------------------------------------------


def _worker_main(conn, parent_pid: int, fn: Callable[[Any], dict]) -> None:
    """A worker: receive a job, send back ``fn(job)``; None or a closed pipe ends it, and
    so does SIGTERM (KeyboardInterrupt here, after the running job's clean-up ran)."""
    guard_worker(parent_pid)
    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None:
                return
            conn.send(fn(job))
    except KeyboardInterrupt:  # the parent stops the run (stop_workers)
        return


class _Worker:
    def __init__(self, ctx, fn: Callable[[Any], dict], what: str):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main,
            args=(child, os.getpid(), fn),
            daemon=True,
            name=f"piper-{what}-worker",
        )
        self.proc.start()
        child.close()
        self.job: Any = None

    def kill(self) -> None:
        kill_group(self.proc.pid)  # the worker's group: itself and its solver subprocesses
        try:
            self.proc.kill()
        except (OSError, ValueError):
            pass


def _stop_workers(workers: list[_Worker], graceful: bool) -> None:
    """``graceful`` (every job done): tell each worker to end; else (a signal, a dead
    worker) SIGTERM them, so that each running job cleans up (a MILP backend's temporary
    folder and solver process; SIGKILL would skip that). Either way SIGKILL after 5 s.
    Returns only when every worker, and every process it started, has ended: a solver
    process in a session of its own (CBC) is no longer found once its worker is gone, so
    the workers' process trees are taken first, and whatever of them still runs at the
    end is SIGKILLed and waited for."""
    trees = [p for w in workers if w.proc.pid is not None for p in process_tree(w.proc.pid)]
    if graceful:
        for w in workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        for w in workers:
            w.proc.join(max(0.0, deadline - time.monotonic()))
    else:
        stop_workers([w.proc for w in workers], grace=5.0)
    for w in workers:
        if w.proc.is_alive():
            w.kill()
    end_processes(trees)
    for w in workers:
        w.proc.join()  # ended (SIGKILLed at worst): this only reaps it
        w.conn.close()


def _run_pool(
    fn, todo: list, n_workers: int, write, flag: SignalFlag, name, what: str, poll: float = 0.2
) -> None:
    """Run ``todo`` on ``n_workers`` spawned workers, calling ``write`` with each result in
    the parent as it arrives. Returns when ``flag`` is set; InternalError when a worker
    dies. Every worker is killed on the way out."""
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = deque(todo)
    workers: list[_Worker] = []
    graceful = False
    try:
        for _ in range(min(n_workers, len(pending))):
            if flag.signum is not None:
                return
            workers.append(_Worker(ctx, fn, what))

        def feed(w: _Worker) -> None:
            w.job = pending.popleft() if pending else None
            if w.job is not None:
                w.conn.send(w.job)

        for w in workers:
            feed(w)
        while flag.signum is None:
            busy = [w for w in workers if w.job is not None]
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
                        f"a {what} worker process died (exit code {w.proc.exitcode}) while running "
                        f"{name(w.job)}; the finished results are saved, rerun with --resume to go "
                        "on"
                    )
    finally:
        _stop_workers(workers, graceful)


# ---- a results folder: lock, parameters, resume, one JSON line per finished job ----------


def _note(text: str) -> None:
    import sys

    print(f"note: {text}", file=sys.stderr, flush=True)


def folder_kinds(out: str | Path) -> list[str]:
    """The kinds of run (:data:`MANIFESTS`) whose manifest is in the folder ``out``."""
    return [kind for kind, name in MANIFESTS.items() if (Path(out) / name).exists()]


def read_results_strictly(
    path: str | Path, keep: Callable[[dict], bool], what: str
) -> tuple[list[dict], tuple[int, int] | None]:
    """The records of a results file, every line checked: (records, torn), ``torn`` being
    (byte offset, line number) of a torn last line (not whole JSON and not ended by a
    newline: a run killed while writing it), else None. A missing file has no records.

    Raises
    ------
    InputError
        Naming the file and line: a line that is not whole JSON (other than a torn last
        line), or a JSON line that is not a ``what`` record (``keep`` false: e.g. a sweep's
        row in a campaign's file).
    """
    import json

    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    records: list[dict] = []
    offset = number = 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        raw = data[offset:] if end < 0 else data[offset : end + 1]
        number += 1
        try:
            rec = json.loads(raw.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError
            if end < 0:  # the last line, with no newline: torn
                return records, (offset, number)
            why = (
                "an empty line"
                if not raw.strip()
                else f"not whole JSON ({' '.join(str(exc).split())[:120]})"
            )
            raise InputError(
                f"{p}, line {number}: {why}; the file is damaged (repair or remove that line, "
                f"or choose another folder)"
            ) from None
        if not isinstance(rec, dict) or not keep(rec):
            raise InputError(
                f"{p}, line {number}: not a {what} result (written by another kind of run?); "
                "choose another folder"
            )
        records.append(rec)
        offset += len(raw)
    return records, None


def prepare_folder(out: str | Path, files: Sequence[str], folders: Sequence[str] = ()) -> Path:
    """Create ``out`` (a folder) and check that ``files`` (and the lock) can be written
    there, and that ``folders`` (made there later, when needed) are folders or can be
    made, before any work; one line naming the problem otherwise."""
    from piper_ilp.files import check_writable

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the folder ({exc.strerror or exc})") from None
    for name in (*files, LOCK):
        check_writable(out / name, "output")
    for name in folders:
        sub = out / name
        if sub.exists() and not sub.is_dir():
            raise InputError(
                f"--out {out}: {sub} exists and is not a folder (it will hold the {name})"
            )
        if sub.is_dir() and not os.access(sub, os.W_OK | os.X_OK):
            raise InputError(f"--out {out}: cannot write in {sub}")
    return out


def describe_changes(old: Mapping, new: Mapping, keys: Sequence[str], width: int = 40) -> str:
    """The parameters ``keys`` that differ between ``old`` and ``new``, each with its two
    values when both are short (at most ``width`` characters), else by name only, so that
    the line stays short whatever the parameters hold.

    >>> describe_changes({"seed": 1, "nodes": list(range(50))}, {"seed": 2, "nodes": [1]},
    ...                  ["seed", "nodes"])
    'seed 1 -> 2, nodes'
    """
    parts = []
    for k in keys:
        a, b = repr(old.get(k)), repr(new.get(k))
        parts.append(f"{k} {a} -> {b}" if len(a) <= width and len(b) <= width else k)
    return ", ".join(parts)


def extends_count(old: Any, new: Any) -> bool:
    """A count that grows (or stays): ``new >= old``."""
    return isinstance(old, int) and isinstance(new, int) and new >= old


def extends_list(old: Any, new: Any) -> bool:
    """A list that keeps every value of ``old`` (a grid with more values)."""
    return (
        isinstance(old, list)
        and isinstance(new, list)
        and set(map(repr, old)) <= set(map(repr, new))
    )


def run_in_folder(
    out: Path,
    *,
    what: str,
    results: str,
    parameters: str,
    params: dict,
    jobs: Sequence[Any],
    job_id: Callable[[Any], str],
    fn: Callable[[Any], dict],
    keep: Callable[[dict], bool],
    resume: bool,
    workers: int,
    scheduler: str | None,
    prepare: Callable[[dict], None] | None = None,
    on_record: Callable[[dict], None] | None = None,
    defaults: dict | None = None,
    note: Callable[[str], None] | None = None,
    grows: Mapping[str, Callable[[Any, Any], bool]] | None = None,
) -> tuple[list[dict], list[dict]]:
    """Run the ``jobs`` not yet recorded in ``out/results`` (one JSON line per result, each
    written in one ``write`` call, so a killed run leaves whole lines), holding
    ``out/.lock``. ``params`` are stored in ``out/parameters``; ``resume`` must find the same.
    Returns (the records found from earlier runs, the new ones), each restricted to ``jobs``.

    ``keep(record)`` says which lines of the results file are records; ``prepare(record)``
    runs just before a record is written (e.g. saving a side file); ``on_record`` just after.
    ``defaults`` gives the value a parameter had in a folder written before it existed
    (e.g. a campaign's ``modes``), for ``resume``. ``grows`` names the parameters that a
    resumed run may change to extend the run, each with ``extends(old, new)`` (a campaign's
    larger ``count``, a sweep's grid with more values): the finished results stay, the new
    jobs run, and the folder records the new parameters. Any other change is refused, in
    one short line naming the parameters (:func:`describe_changes`).

    The folder's kind is ``what``, its manifest ``parameters`` (:data:`MANIFESTS`). The
    results file is read with :func:`read_results_strictly`: a torn last line (a run killed
    mid-write) is cut off the file, with ``note(text)`` (default: a line on stderr) saying
    so, and its job runs again; any other line that is not one of this kind's records is an
    error.

    Raises
    ------
    InputError
        A folder holding another kind's manifest; a results line in the middle that is not
        whole JSON or not this kind's record (naming the file and line); results present
        without ``resume``, or without a manifest; other parameters with ``resume``; or
        another run holding the folder.
    Interrupted
        SIGINT / SIGTERM, after the finished results were written.
    """
    import json

    from piper_ilp.files import atomic_write_text, json_safe

    if MANIFESTS.get(what) != parameters:
        raise InternalError(
            f"run_in_folder: a {what} must record its parameters in {MANIFESTS.get(what)} "
            "(compare.experiments.jobs.MANIFESTS)"
        )
    with locked_folder(out, what):
        for kind in folder_kinds(out):
            if kind != what:
                raise InputError(
                    f"--out {out}: holds a {kind}'s results ({out / MANIFESTS[kind]}); "
                    f"a {what} cannot share it, choose another folder"
                )
        params_path = out / parameters
        seen: set = set()
        found, torn = read_results_strictly(out / results, keep, what)
        done = [r for r in found if not (r["id"] in seen or seen.add(r["id"]))]
        if done and not resume:
            raise InputError(
                f"--out {out}: already holds {len(done)} results; add --resume to continue it, or "
                "choose another folder"
            )
        if done and not params_path.exists():
            raise InputError(
                f"--resume: {out / results} holds {len(done)} results but {params_path} is "
                "missing, so what wrote them is unknown; choose another folder"
            )
        if resume and params_path.exists():
            try:
                old = json.loads(params_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InputError(f"--resume: cannot read {params_path} ({exc})") from None
            old = {k: old.get(k, (defaults or {}).get(k)) for k in params}
            fixed = [
                k
                for k in params
                if old[k] != params[k]
                and not (k in (grows or {}) and (grows or {})[k](old[k], params[k]))
            ]
            if fixed:
                may = f"; it may only grow ({', '.join(grows)})" if grows else ""
                raise InputError(
                    f"--resume: {out} holds a {what} with other parameters: "
                    f"{describe_changes(old, params, fixed)}{may}"
                )
        path = out / results
        if torn is not None:  # a run killed mid-line: that line goes
            offset, line_no = torn
            os.truncate(path, offset)
            (note or _note)(
                f"{path}: dropped the torn last line {line_no} (a run killed while writing it); "
                "its job runs again"
            )
        atomic_write_text(params_path, json.dumps(params, indent=1) + "\n")
        ids = {job_id(j) for j in jobs}
        done_ids = {r["id"] for r in done}
        todo = [j for j in jobs if job_id(j) not in done_ids]
        new: list[dict] = []
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size:
                with path.open("rb") as fh:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":  # a whole last record that lost only its newline
                        os.write(fd, b"\n")

            def write(rec: dict) -> None:
                if rec["id"] in done_ids:  # never twice
                    return
                if prepare is not None:
                    prepare(rec)
                data = (json.dumps(json_safe(rec), allow_nan=False) + "\n").encode("utf-8")
                while data:  # one write call for a line (O_APPEND)
                    data = data[os.write(fd, data) :]
                done_ids.add(rec["id"])
                new.append(rec)
                if on_record is not None:
                    on_record(rec)

            with SignalFlag() as flag:
                run_jobs(
                    fn,
                    todo,
                    write,
                    flag,
                    workers=workers,
                    scheduler=scheduler,
                    name=job_id,
                    what=what,
                )
                if flag.signum is not None:
                    raise Interrupted(flag.signum, len(done) + len(new), path)
        finally:
            os.close(fd)
    return [r for r in done if r["id"] in ids], new
