"""Module-level job functions for the dask tests (they are pickled to worker processes)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def square(job):
    time.sleep(0.05)
    return {"id": job, "square": job * job, "pid": os.getpid()}


def die_once(job):
    """Job 3 kills its worker process the first time it runs (a marker file remembers)."""
    n, marker = job
    if n == 3 and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    time.sleep(0.05)
    return {"id": n, "pid": os.getpid()}


def fail(job):
    if job == 2:
        raise ValueError("job 2 is broken")
    return {"id": job}


def temp_then_wait(job):
    """Make a temporary folder (as CBC's backend does), say where in ``job`` (a file), then
    work far longer than the test waits: a job stopped mid-run, whose clean-up cannot run
    (dask runs it in a thread)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="piper-test-job-")
    Path(job).write_text(folder)
    time.sleep(120)
    return {"id": job}
