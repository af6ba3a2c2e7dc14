"""Set-up of the dask worker processes that :mod:`compare.experiments.cluster` starts (its
``preload``).

A LocalCluster's worker processes share the terminal's process group with the command, so a
Ctrl-C reaches them too. They ignore SIGINT, like the local worker processes of
:mod:`compare.experiments.worker_guard`: the command decides what an interrupt does (it stops the
run, keeps the finished results and closes the cluster, which ends the workers).
"""

from __future__ import annotations

import signal
import threading


def dask_setup(worker) -> None:  # noqa: ARG001 - the signature dask's preload calls
    """Called by dask in each worker process as it starts."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
