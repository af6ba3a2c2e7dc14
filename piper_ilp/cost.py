"""The cost model's formulas (``docs/cost-model.md`` secs. 2.6, 3 and 7), each written once.

One function per term of the contract; the evaluator, the DP, the MILP, the exhaustive
oracle and the baselines all call these (the arithmetic ones work on floats and on numpy
arrays alike)::

    cut_edge_bytes(c, sync)   = 2 (c + sync)                      one cut edge, one direction
    node_edge_bytes(v, S)     = fsum of cut_edge_bytes over v's edges that leave S
    resync_bytes(w, d, N)     = 4 (d - 1) w / (d N)               one node's resync
    stage_tps(E, R, P, d, B)  = (E / d + R) / B + P / d           E, R, P: the stage's three sums
    node_memory(a, b, y)      = a y (+ b)                         summed by stage_memory with fsum
    memory_fits(used, M)      = used <= M                          no slack (sec. 7)
    microbatches_in_flight    = y = ceil(s / d)

where s is the suffix sum of data-parallel degrees from this stage to the last. Sums over a
stage's nodes are ``math.fsum`` (correctly rounded), as sec. 7 requires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping

from piper_ilp.instance import Instance, Option

__all__ = [
    "TPS_RTOL",
    "close",
    "cut_edge_bytes",
    "memory_fits",
    "microbatches_in_flight",
    "node_edge_bytes",
    "resync_bytes",
    "stage_tps",
    "StageCost",
    "stage_cost",
    "stage_memory",
]

#: Relative tolerance when two float computations of a TPS are compared.
TPS_RTOL = 1e-9


def memory_fits(used: float, M: float) -> bool:
    """Whether a stage's memory fits a device (cost model secs. 2.6 and 7).

    The contract's rule is ``used <= M`` exactly, with no slack: a plan whose memory is one
    ulp above M is invalid.

    Parameters
    ----------
    used : float
        The stage's memory per device in bytes, as :func:`stage_memory` sums it.
    M : float
        The memory per device (the instance's ``M``).

    Returns
    -------
    bool

    Examples
    --------
    >>> memory_fits(8e9, 8e9), memory_fits(8e9 + 1024, 8e9)
    (True, False)
    """
    return used <= M


def close(x: float, y: float, rtol: float = TPS_RTOL) -> bool:
    """Whether two computations of a TPS (or another value) agree.

    Parameters
    ----------
    x, y : float
        The two values.
    rtol : float
        Relative tolerance, :data:`TPS_RTOL` by default; relative to the larger magnitude
        (near zero, to 1e-300). Equal values (infinities included) always agree.

    Returns
    -------
    bool

    Examples
    --------
    >>> close(1.0, 1.0 + 1e-12), close(1.0, 1.001)
    (True, False)
    """
    return abs(x - y) <= rtol * max(abs(x), abs(y), 1e-300) or x == y


def microbatches_in_flight(s: int, d: int) -> int:
    """y = ceil(s / d), the microbatches a stage holds in flight (cost model sec. 2.6).

    Exact integer arithmetic (no float division), whatever the size of ``s``.

    Parameters
    ----------
    s : int
        The suffix sum of data-parallel degrees, d_i + d_{i+1} + ... + d_last.
    d : int
        The stage's data-parallel degree (>= 1).

    Returns
    -------
    int

    Raises
    ------
    ZeroDivisionError
        ``d`` is 0.

    Examples
    --------
    A stage with d = 2 followed by stages of degrees 2 and 1 holds ceil(5 / 2) = 3:

    >>> microbatches_in_flight(2 + 2 + 1, 2)
    3
    """
    return -(-s // d)


def cut_edge_bytes(c, sync):
    """The bytes one cut edge costs its endpoint in a stage: 2 (c + sync) (cost model sec. 3).

    The factor 2 counts the forward activations and the backward gradients.

    Parameters
    ----------
    c : float or numpy array
        The edge's ``communicationCost`` (bytes per sample).
    sync : float or numpy array
        The endpoint's option's ``sfw`` entry for an incoming edge, or its ``sbw`` entry
        for an outgoing one.

    Returns
    -------
    float or numpy array

    Examples
    --------
    >>> cut_edge_bytes(3.0, 1.0)
    8.0
    """
    return 2.0 * (c + sync)


def resync_bytes(w, d, N):
    """One node's data-parallel resync bytes per sample: 4 (d - 1) w / (d N) (cost model
    sec. 3).

    The factor 4 is the parameter-server model of all-reduce that PipeDream's planner uses.

    Parameters
    ----------
    w : float or numpy array
        The option's weight bytes per device (``parameterSize``).
    d : int or numpy array
        The stage's data-parallel degree (>= 1).
    N : int
        Microbatches per batch.

    Returns
    -------
    float or numpy array
        0 when ``d`` is 1.

    Examples
    --------
    >>> resync_bytes(100.0, 2, 4), resync_bytes(100.0, 1, 4)
    (50.0, 0.0)
    """
    return 4.0 * (d - 1) * w / (d * N)


def stage_tps(edge_bytes, resync, p_sum, d, B):
    """A stage's time per sample from its three sums (cost model sec. 3)::

        TPS = (edge_bytes / d + resync) / B + p_sum / d

    The operations run in this order in every method, so that the DP's arrays, the MILP's
    certification and the evaluator round alike.

    Parameters
    ----------
    edge_bytes : float or numpy array
        The ``fsum`` over the stage's nodes of :func:`node_edge_bytes`.
    resync : float or numpy array
        The ``fsum`` over the stage's nodes of :func:`resync_bytes`.
    p_sum : float or numpy array
        The ``fsum`` over the stage's nodes of their options' p.
    d : int or numpy array
        The stage's data-parallel degree.
    B : float
        The bandwidth (bytes/s).

    Returns
    -------
    float or numpy array
        Seconds per sample.

    Examples
    --------
    >>> stage_tps(8.0, 50.0, 2.0, 2, 10.0)  # (8 / 2 + 50) / 10 + 2 / 2
    6.4
    """
    return (edge_bytes / d + resync) / B + p_sum / d


def node_edge_bytes(instance: Instance, v: int, opt: Option, stage: Collection[int]) -> float:
    """Node ``v``'s share of its stage's edge_bytes (cost model sec. 3).

    2 (c + sfw[u]) for each incoming edge (u -> v) from outside the stage, plus
    2 (c + sbw[x]) for each outgoing edge (v -> x) to outside it (:func:`cut_edge_bytes`),
    summed with ``math.fsum`` (correctly rounded, sec. 7).

    Parameters
    ----------
    instance : Instance
    v : int
        A node id.
    opt : Option
        ``v``'s option in the stage.
    stage : collection of int
        The stage's node ids (a set for speed).

    Returns
    -------
    float
        Bytes per sample.

    Raises
    ------
    KeyError
        ``v`` is not a node of ``instance``, or ``opt`` lacks an sfw / sbw entry for one of
        ``v``'s edges (never for an option of a validated instance).

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> nodes = [(0, {"1": [option_dict("vanilla", 1.0, 0, 0, 0, sbw={"1": 1.0})]}),
    ...          (1, {"1": [option_dict("vanilla", 1.0, 0, 0, 0, sfw={"0": 0})]})]
    >>> inst = instance_from_dict(instance_dict(nodes, [(0, 1, 3.0)], K=2, M=1e9, N=2, B=10.0))
    >>> opt = inst.node[0].options[1][0]
    >>> node_edge_bytes(inst, 0, opt, {0}), node_edge_bytes(inst, 0, opt, {0, 1})
    (8.0, 0.0)
    """
    terms = [cut_edge_bytes(c, opt.sfw[u]) for u, c in instance.in_edges[v] if u not in stage]
    terms += [cut_edge_bytes(c, opt.sbw[x]) for x, c in instance.out_edges[v] if x not in stage]
    return math.fsum(terms)


@dataclass(frozen=True)
class StageCost:
    """A stage's three sums and its TPS (cost model sec. 3), as :func:`stage_cost` returns it.

    Attributes
    ----------
    edge_bytes : float
        The ``fsum`` of the nodes' :func:`node_edge_bytes`.
    resync_bytes : float
        The ``fsum`` of the nodes' :func:`resync_bytes`.
    p_sum : float
        The ``fsum`` of the nodes' p.
    d : int
        The stage's data-parallel degree.
    B : float
        The bandwidth.
    tps : float
        :func:`stage_tps` of the above (a property).
    compute, edge, resync : float
        The TPS's parts for display: p_sum / d, edge_bytes / (d B) and resync_bytes / B
        (properties; their sum may differ from ``tps`` in the last bit).
    """

    edge_bytes: float
    resync_bytes: float
    p_sum: float
    d: int
    B: float

    @property
    def tps(self) -> float:
        """:func:`stage_tps` of the three sums."""
        return stage_tps(self.edge_bytes, self.resync_bytes, self.p_sum, self.d, self.B)

    @property
    def compute(self) -> float:
        """The compute part of the TPS: p_sum / d."""
        return self.p_sum / self.d

    @property
    def edge(self) -> float:
        """The cut-edge part of the TPS: edge_bytes / d / B."""
        return self.edge_bytes / self.d / self.B

    @property
    def resync(self) -> float:
        """The resync part of the TPS: resync_bytes / B."""
        return self.resync_bytes / self.B


def stage_cost(
    instance: Instance, nodes: Collection[int], d: int, options: Mapping[int, Option]
) -> StageCost:
    """The TPS of one stage, with its three sums (cost model sec. 3).

    This is the evaluator's definition, which every method is judged against: each sum is
    the ``math.fsum`` of its per-node terms, then :func:`stage_tps`.

    Parameters
    ----------
    instance : Instance
        Gives the edges, N and B.
    nodes : collection of int
        The stage's node ids.
    d : int
        The stage's data-parallel degree.
    options : mapping
        The option of each node of ``nodes`` (already those of the stage's t; other keys
        are ignored).

    Returns
    -------
    StageCost

    Raises
    ------
    KeyError
        A node of ``nodes`` has no entry in ``options``.

    Examples
    --------
    Two nodes joined by an edge of 3 bytes, split into two stages at d = 1, or in one
    stage at d = 2 (N = 2, B = 10):

    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> first = option_dict("vanilla", 1.0, 4.0, 0, 0, sbw={"1": 1.0})
    >>> second = option_dict("vanilla", 2.0, 4.0, 0, 0, sfw={"0": 0})
    >>> nodes = [(0, {"1": [first]}), (1, {"1": [second]})]
    >>> inst = instance_from_dict(instance_dict(nodes, [(0, 1, 3.0)], K=2, M=1e9, N=2, B=10.0))
    >>> opts = {v: inst.node[v].options[1][0] for v in (0, 1)}
    >>> stage_cost(inst, [0], 1, opts).tps  # (8 / 1 + 0) / 10 + 1 / 1
    1.8
    >>> c = stage_cost(inst, [0, 1], 2, opts)  # resync 4 (2 - 1) 4 / (2 2) per node
    >>> c.edge_bytes, c.resync_bytes, c.p_sum, c.tps
    (0.0, 8.0, 3.0, 2.3)
    """
    members = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
    N = instance.N
    edge = math.fsum(node_edge_bytes(instance, v, options[v], members) for v in members)
    resync = math.fsum(resync_bytes(options[v].w, d, N) for v in members)
    p_sum = math.fsum(options[v].p for v in members)
    return StageCost(edge_bytes=edge, resync_bytes=resync, p_sum=p_sum, d=d, B=instance.B)


def stage_memory(nodes: Collection[int], options: Mapping[int, Option], y: int) -> float:
    """A stage's memory per device: the ``fsum`` of a * y and b over its nodes (cost model
    secs. 2.6 and 7).

    Parameters
    ----------
    nodes : collection of int
        The stage's node ids.
    options : mapping
        The option of each node of ``nodes``.
    y : int
        The microbatches in flight (:func:`microbatches_in_flight`).

    Returns
    -------
    float
        Bytes; compare with M by :func:`memory_fits`.

    Raises
    ------
    KeyError
        As :func:`stage_cost` does, for a node without an entry in ``options``.

    Examples
    --------
    >>> from piper_ilp.instance import Option
    >>> opt = Option("vanilla", p=1.0, w=0.0, a=2.0, b=3.0, sfw={}, sbw={})
    >>> stage_memory([0, 1], {0: opt, 1: opt}, y=2)  # 2 (2 * 2 + 3)
    14.0
    """
    terms = []
    for v in nodes:
        terms.append(options[v].a * y)
        terms.append(options[v].b)
    return math.fsum(terms)
