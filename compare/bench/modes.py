"""Measure the DP in other modes (:mod:`dp.modes`) on multi-branch graphs.

``piper-ilp bench modes [--unpruned] [--towers 2,3,4] [--wide 2,3,4]`` prints, for every
instance and mode, the status, the value, the labels kept (and the largest set of labels), the
candidates generated, the exact knapsacks solved and the CPU seconds of the solve. The numbers in
docs/architecture.md come from it.

Instances: :func:`compare.bench.dp.wide_instance` (a source, b one-layer branches, a sink) and
:func:`towers_instance` (a source, b chains of L layers, a sink, tight memory, so that graph
pipelining's shorter paths and fewer microbatches in flight matter).
"""

from __future__ import annotations

import time

from compare.bench.dp import GIB, profile_like_instance
from dp.modes import solve_modes
from piper_ilp.mode import Mode

__all__ = ["MODES", "towers_instance", "measure"]

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
