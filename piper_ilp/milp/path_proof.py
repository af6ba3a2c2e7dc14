"""The proof that a threshold is not met: no plan has every stage's least TPS <= T within
K devices (``docs/milp.md``, "The path formulation", "Proof").

Tried in order, the first that succeeds is the proof:

1. the bounds of :mod:`~piper_ilp.milp.path_bounds` leave no arc (a relaxation);
2. the state network has no path within K devices: potentials checked exactly in
   integers (:func:`~piper_ilp.milp.path_network.certificate`), and OR-Tools' min-cost
   flow, an independent computation, must agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from piper_ilp.errors import InternalError
from piper_ilp.milp.path_arcs import TimeUp
from piper_ilp.milp.path_bounds import UNREACHABLE, usable_arcs
from piper_ilp.milp.path_network import build_network, certificate, least_devices, potentials

__all__ = ["Proof", "prove"]


@dataclass
class Proof:
    """How a threshold was proven not met (``how``), or why not (``note``)."""

    threshold: float
    proven: bool
    how: str = ""
    note: str = ""
    arcs: int = 0
    network: int = 0
    devices: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def prove(search, threshold: float, backend: str, threads: int, time_left: float | None) -> Proof:
    """Prove that no plan meets ``threshold`` (see the module docstring)."""
    start = time.process_time()
    inst = search.restricted
    nsets = search.nsets
    deadline = None if time_left is None else time.process_time() + time_left
    try:
        _, bounds = usable_arcs(search.catalog, threshold, inst.K, inst.N, deadline)
    except TimeUp:
        return Proof(threshold, False, note="time limit during the proof")
    proof = Proof(threshold, False, arcs=len(bounds.arcs))
    if not bounds.arcs or bounds.back[nsets - 1] >= UNREACHABLE:
        proof.proven, proof.how = True, "bounds: no arc is left"
        proof.seconds = time.process_time() - start
        return proof
    net = build_network(bounds.arcs, bounds, nsets, inst.K, inst.N, search.rule)
    proof.network = net.size
    dist, sink = potentials(net, search.rule)
    if not certificate(net, dist, sink):
        raise InternalError("path formulation: the network's potentials fail their own check")
    flow_devices, _ = least_devices(net)
    mine = None if sink >= UNREACHABLE else sink
    if mine != flow_devices:
        raise InternalError(
            f"path formulation: the potentials give {mine} devices, "
            f"the min-cost flow {flow_devices}"
        )
    proof.devices = mine
    if mine is None or mine > inst.K:
        proof.proven = True
        proof.how = (
            "network: no path"
            if mine is None
            else f"network: every path needs >= {mine} devices > K = {inst.K} (potentials checked)"
        )
    else:
        proof.note = f"a path with {mine} devices <= K meets the threshold"
    proof.seconds = time.process_time() - start
    return proof
