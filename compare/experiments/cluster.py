"""Running campaign and sweep jobs on dask.distributed (``--scheduler``).

:func:`run_on_dask` sends every job to a dask cluster, one task per job, and hands each
result to ``write`` in this process as soon as it arrives, so results stream to
``results.jsonl`` and an interrupted run resumes from what was written. The cluster is
either an existing one (``scheduler="tcp://HOST:PORT"``) or a ``LocalCluster`` of worker
processes that this function starts and stops itself (``scheduler="local"``). A worker
that dies loses at most its running task: the scheduler reruns it on another worker (dask
gives up on a task that killed ``allowed_failures`` workers; that task is reported).

dask is optional (``pip install 'piper-ilp[distributed]'``); :func:`dask_available` says
whether it is installed.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from typing import Any, Callable, Iterable

from compare.experiments.worker_guard import end_processes, kill_trees, process_tree
from piper_ilp.errors import InputError, InternalError

__all__ = ["dask_available", "run_on_dask"]

_DONE = object()

#: How often a job whose worker died holding it (status "lost" or "cancelled") is run again.
MAX_RESUBMITS = 3


def dask_available() -> bool:
    """True when dask.distributed can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def _client(scheduler: str, workers: int):
    """A client of an existing cluster, or of a local cluster started here (returned too,
    with the private folder its workers take as TMPDIR; None for an existing cluster)."""
    from distributed import Client, LocalCluster

    if scheduler == "local":
        # a running job is a thread of its worker: when the workers are killed (an
        # interrupt) it cannot remove its temporary files (CBC's model folder), so they
        # go to a folder of this command's, removed once the workers have ended
        tmp = tempfile.mkdtemp(prefix="piper-dask-workers-")
        try:
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
                host="127.0.0.1",
                preload=["compare.experiments.dask_worker"],
                env={"TMPDIR": tmp},
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Client(cluster), cluster, tmp
    if not scheduler.startswith(("tcp://", "tls://", "inproc://", "ws://", "wss://")):
        raise InputError(
            f"--scheduler {scheduler!r}: expected 'local' or an address like tcp://HOST:PORT"
        )
    try:
        return Client(scheduler, timeout="10s"), None, None
    except (OSError, TimeoutError) as exc:
        raise InputError(
            f"--scheduler {scheduler}: cannot reach the dask scheduler ({exc})"
        ) from None


def run_on_dask(
    fn: Callable[[Any], dict],
    jobs: Iterable[Any],
    write: Callable[[dict], None],
    *,
    scheduler: str = "local",
    workers: int = 2,
    stop: Callable[[], bool] = lambda: False,
    poll: float = 0.2,
    name: Callable[[Any], str] = str,
) -> None:
    """Run ``fn(job)`` for every job on a dask cluster; ``write(result)`` here as each ends.

    Parameters
    ----------
    fn : callable
        A module-level function (it is pickled to the workers).
    scheduler : str
        ``"local"`` (start a LocalCluster of ``workers`` processes here) or a scheduler address.
    stop : callable
        Polled every ``poll`` seconds; when it returns True the remaining tasks are cancelled
        and the function returns (the caller decides what an interrupt means).
    name : callable
        A job's name, for the error when a task fails.

    Raises
    ------
    InputError
        The scheduler address is malformed or cannot be reached.
    InternalError
        A task failed (its exception, or a task that killed its workers), after the
        results that arrived before it were written.
    """
    from distributed import wait

    jobs = list(jobs)
    if not jobs:
        return
    client, cluster, tmp = _client(scheduler, workers)
    pending: set = set()
    job_of: dict = {}
    tries: dict[int, int] = {}
    finished = False
    try:
        # a few tasks per worker in flight: a long run does not submit everything at once
        window = 2 * max(
            workers if cluster is not None else len(client.scheduler_info().get("workers", {})), 1
        )
        todo = iter(jobs)

        def submit_more() -> None:
            while len(pending) < window:
                job = next(todo, _DONE)
                if job is _DONE:
                    return
                f = client.submit(fn, job, pure=False)
                job_of[f.key] = job
                pending.add(f)

        submit_more()
        while pending and not stop():
            try:
                done, pending_left = wait(pending, timeout=poll, return_when="FIRST_COMPLETED")
            except TimeoutError:  # nothing finished within poll
                continue
            pending.clear()
            pending.update(pending_left)
            for f in done:
                job = job_of.pop(f.key)
                if f.status == "finished":
                    write(f.result())
                    continue
                if f.status == "error":
                    exc = f.exception()
                    raise InternalError(
                        f"job {name(job)} failed on the dask cluster: {type(exc).__name__}: {exc}; "
                        "the finished results are saved, rerun with --resume to go on"
                    )
                # "lost" or "cancelled": its worker died holding it; run it again (a few times)
                tries[id(job)] = tries.get(id(job), 0) + 1
                if tries[id(job)] > MAX_RESUBMITS:
                    raise InternalError(
                        f"job {name(job)} was lost on the dask cluster {MAX_RESUBMITS} times "
                        f"(status {f.status}); the finished results are saved, rerun with --resume "
                        "to go on"
                    )
                again = client.submit(fn, job, pure=False)
                job_of[again.key] = job
                pending.add(again)
            submit_more()
        finished = not pending
    finally:
        trees = []
        if cluster is not None:
            trees = [p for pid in _worker_pids(cluster) for p in process_tree(pid)]
        if cluster is not None and not finished:
            # stopped (a signal, a failed task): a local cluster's workers are ended first,
            # with all they started (CBC, SCIP's solver process, in sessions of their own),
            # so that no job goes on while the cluster closes and nothing outlives the
            # command; their running jobs are threads, which could not clean up anyway
            kill_trees(_worker_pids(cluster))
        try:
            client.cancel(list(pending), force=True)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        client.close()
        if cluster is not None:
            cluster.close()
        end_processes(trees)  # what the close left running (normally nothing)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # the killed jobs' temporary files


def _worker_pids(cluster) -> list[int]:
    """The processes of a local cluster's workers (each Nanny's ``pid``)."""
    pids = [getattr(nanny, "pid", None) for nanny in list(cluster.workers.values())]
    return [pid for pid in pids if isinstance(pid, int)]
