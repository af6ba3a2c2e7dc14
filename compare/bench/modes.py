"""Measure the DP in other modes (:mod:`dp.modes`) on multi-branch graphs.

``piper-ilp bench modes [--unpruned] [--towers 2,3,4] [--wide 2,3,4]`` prints, for every
instance and mode, the status, the value, the labels kept (and the largest set of labels), the
candidates generated, the exact knapsacks solved and the CPU seconds of the solve. The numbers in
docs/architecture.md come from it.

Instances: :func:`compare.bench.dp.wide_instance` (a source, b one-layer branches, a sink) and
:func:`towers_instance` (a source, b chains of L layers, a sink, tight memory, so that graph
pipelining's shorter paths and fewer microbatches in flight matter).

``piper-ilp bench modes --graphpipe PROFILE`` measures the models of issue 35 instead
(:data:`GRAPHPIPE_ROWS`: towers 8x4 and 4x8 of the profile's layer and the GraphPipe-like
models of :mod:`compare.builders.graphpipe`) in graph pipelining's two objectives, each solve
in a fresh process (:func:`measure_isolated`: its CPU seconds and peak RSS), with the DP's
default size guards and a CPU time limit, so that a refusal or a stop is a row too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from compare.bench.dp import GIB, profile_like_instance
from dp.modes import solve_modes
from piper_ilp.mode import Mode

__all__ = [
    "MODES",
    "GRAPH_MODES",
    "GRAPHPIPE_ROWS",
    "towers_instance",
    "measure",
    "graphpipe_instance",
    "measure_isolated",
]

#: Graph pipelining's two objectives (issue 35's table).
GRAPH_MODES = (Mode("graph"), Mode("graph", "batch-time"))

#: Issue 35's instances: (name, shape, K, M in GiB); N is the profile's. A shape is a list of
#: layers per tower (:func:`compare.builders.towers.towers`) or a preset name of
#: :data:`compare.builders.graphpipe.PRESETS`. M = 8 GiB as README's BERT-32 example; the
#: DLRM-like model gets 2 GiB so that its tables (0.4 GB each at t = 1) do not all fit one
#: device with the MLP.
GRAPHPIPE_ROWS = (
    ("towers 8x4", [4] * 8, 64, 8.0),
    ("towers 4x8", [8] * 4, 32, 8.0),
    ("mmt2", "mmt2", 32, 8.0),
    ("mmt4", "mmt4", 32, 8.0),
    ("dlrm8", "dlrm8", 32, 2.0),
)

#: The modes measured: graph pipelining, and the batch-time objective both ways.
MODES = (Mode("graph"), Mode("graph", "batch-time"), Mode("sequential", "batch-time"))


def towers_instance(
    branches: int,
    length: int,
    K: int = 16,
    M: float = 0.12 * GIB,
    N: int = 64,
    B: float = 25.0 * GIB,
    seed: int = 0,
):
    """A source, ``branches`` chains of ``length`` layers, and a sink; options for t in {1, 2},
    each a "vanilla" and an "activation recomp" option, profile-like numbers from ``seed``.
    The number of successor-closed sets is (length + 1) ** branches + 2."""
    import networkx as nx
    import numpy as np

    g = nx.DiGraph()
    sink = branches * length + 1
    for i in range(branches):
        chain = [1 + i * length + j for j in range(length)]
        g.add_edge(0, chain[0])
        g.add_edge(chain[-1], sink)
        g.add_edges_from(zip(chain, chain[1:]))
    rng = np.random.default_rng([branches, length, seed])
    settings = dict(K=K, M=M, N=N, B=B)
    return profile_like_instance(g, rng, settings, f"towers {branches}x{length}")


def measure(instance, mode: Mode, prune: bool = True) -> dict:
    """One solve: status, value and the DP's counts, with its CPU seconds."""
    t0 = time.process_time()
    sol = solve_modes(instance, mode=mode, prune=prune, force=True)
    keys = (
        "ideals",
        "frontier_width",
        "labels",
        "largest_label_set",
        "candidates",
        "knapsack_solves",
    )
    return {
        "instance": instance.source,
        "mode": mode.label,
        "prune": prune,
        "status": sol.status.value,
        "value": sol.value,
        "cpu": time.process_time() - t0,
        **{k: sol.info.get(k) for k in keys},
    }


def graphpipe_instance(profile: str, shape, K: int, M_gib: float):
    """The instance of one :data:`GRAPHPIPE_ROWS` row built from the profile file ``profile``."""
    from compare.builders.graphpipe import graphpipe_model
    from compare.builders.towers import towers
    from piper_ilp.instance import load_instance

    base = load_instance(profile)
    model = graphpipe_model(base, shape) if isinstance(shape, str) else towers(base, shape)
    return model.with_settings(K=K, M=M_gib * GIB)


def _row_child(profile: str, shape, K: int, M_gib: float, mode: dict, limit: float) -> None:
    """Solve one row in this process and print its JSON line (run by :func:`measure_isolated`):
    past ``limit`` CPU seconds (RLIMIT_CPU's SIGXCPU) the row says ``limit``."""
    import resource
    import signal

    from piper_ilp.errors import SizeLimitError

    class _CpuLimit(Exception):
        pass

    def _stop(signum, frame):
        raise _CpuLimit

    inst = graphpipe_instance(profile, shape, K, M_gib)
    mode = Mode.from_dict(mode)
    out = {"nodes": len(inst.nodes), "K": inst.K, "M": inst.M, "N": inst.N}
    signal.signal(signal.SIGXCPU, _stop)
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + limit) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
    try:
        sol = solve_modes(inst, mode=mode)
    except SizeLimitError as exc:
        out.update(status="refused", value=None, reason=str(exc).splitlines()[0])
    except _CpuLimit:
        out.update(status=f"limit ({limit:g} CPU s)", value=None)
    else:
        keys = ("ideals", "frontier_width", "labels", "largest_label_set", "knapsack_solves")
        out.update(status=sol.status.value, value=sol.value, **{k: sol.info.get(k) for k in keys})
    print(json.dumps(out))


def measure_isolated(
    profile: str, name: str, shape, K: int, M_gib: float, mode: Mode, limit: float = 60.0
) -> dict:
    """One row of issue 35's table, solved by the label DP in a fresh Python process.

    Parameters
    ----------
    profile : str
        The profile file the models copy (``bert32a100.json``).
    name, shape, K, M_gib
        One :data:`GRAPHPIPE_ROWS` entry.
    mode : Mode
        The mode solved.
    limit : float
        CPU seconds for the solve (the process's RLIMIT_CPU); past it the row's status is
        ``limit (... CPU s)`` with no value, never optimal.

    Returns
    -------
    dict
        name, mode, status (optimal, infeasible, refused: the default size guards, or
        limit), value, the DP's counts, ``cpu`` (the child's user + system CPU seconds, the
        build and the solve) and ``peak_rss_mb`` (its peak resident set).
    """
    code = (
        "import json, sys; from compare.bench.modes import _row_child; "
        "_row_child(*json.loads(sys.argv[1]))"
    )
    args = json.dumps([profile, shape, K, M_gib, mode.to_dict(), limit])
    proc = subprocess.Popen([sys.executable, "-c", code, args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"name": name, "mode": mode.label}
    if proc.returncode != 0 or not out.strip():
        row.update(status=f"error (exit {proc.returncode})", value=None)
    else:
        row.update(json.loads(out.strip().splitlines()[-1]))
    row["cpu"] = round(usage.ru_utime + usage.ru_stime, 2)
    row["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    return row
