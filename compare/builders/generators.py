"""Random Piper instances for the cross-check campaigns.

Five graph families, built with networkx, each a plausible shape of a DNN's layer
graph:

``chain``
    a path (a plain sequential model);
``skip``
    a chain with skip connections i -> i + k (transformer / ResNet residuals);
``layered``
    a random layered DAG: nodes split into layers, edges between nearby layers;
``series-parallel``
    a two-terminal series-parallel graph grown by random series and parallel steps;
``fork-join``
    blocks of several parallel branches between a fork and a join node.

and three families that stress the numbers rather than the shape (contract sec. 7):

``numerics``
    one of the shapes above with magnitudes spread over 1e-6..1e18 in one instance
    (p, w, a, b, c, sfw, sbw, M, B), exact ties of Piper's greedy ratios (sec. 5: a
    "twin" node with the same options and no traffic), M exactly at the memory of some
    plan or 1 ulp around it (``math.nextafter``), "dummy" options with p = 1e12 beside
    ordinary ones, and a few edges of 1e15..1e19 bytes;
``hostile``
    the same over the whole supported range 1e-30..1e30 (values drawn a little beyond it
    and clamped, so that the ends occur), on one of those shapes, ``towers`` or isolated
    nodes (no edge); N = 1 in a third of the instances, K up to 2^20, t up to 8, up to
    four options per (node, t), and options that tie exactly (copies under another id).
    What the newer modes' solvers and their guards must survive (issue 31).
``ties``
    one of the shapes above with the ties that decide Piper's greedy rule (sec. 5): times
    and bytes in tenths (0.1 is no binary fraction, so a tie in exact arithmetic is a
    matter of rounding), ratios that tie across nodes and stages, options of equal cost
    or equal memory, recomputation listed first, M exactly at the memory of some choice
    (memory in quarters: every memory sum is exact), small K so that stages hold several
    nodes, and d > 1 with weights (see :func:`_ties_instance`).

Every number is drawn so that the cost model's trade-offs are live (symbols of
Tarnawski et al., NeurIPS 2021): per node and tensor-parallel degree t, options with
compute time p, weights w, memory a * y + b and extra bytes sfw / sbw. A
recomputation-like option ("activation recomp") has a smaller a and a larger p, so a
tight memory limit M forces a choice; t > 1 options have a smaller p per device and
extra sync bytes. K (devices) and N (microbatches) are small so that the exhaustive
oracle (:mod:`compare.crosscheck.brute`) stays tiny.

Node ids are deliberately not always 0..n-1 (offset, spread, negative, listed in a
shuffled order) so that id-mapping bugs in a solver show.

Everything is deterministic per (family, n_nodes, seed, parameters): the draws come
from one :class:`numpy.random.Generator` seeded from those values.

This module is longer than 600 lines because the ``numerics`` family reuses the shape
builders and the option draws of the others (in one seeded stream); split apart, the
family would pass the generator's internals between modules.
"""

from __future__ import annotations

import math
import zlib
from typing import Sequence

import networkx as nx
import numpy as np

from piper_ilp.errors import InputError
from piper_ilp.instance import VALUE_MAX, VALUE_MIN, Instance, instance_from_dict, option_dict

__all__ = [
    "FAMILIES",
    "NUMERIC_FAMILIES",
    "ALL_FAMILIES",
    "random_graph",
    "random_instance",
    "instance_name",
]

#: The graph families (shapes) :func:`random_instance` knows. ``towers``: parallel chains
#: between one source and one sink (GraphPipe's multi-branch models, sec. 8).
FAMILIES = ("chain", "skip", "layered", "series-parallel", "fork-join", "towers")

#: The shapes the ``numerics`` family draws from (fixed, so its seeds stay reproducible).
_NUMERIC_SHAPES = ("chain", "skip", "layered", "series-parallel", "fork-join")

#: ... and the ``hostile`` family (``isolated``: nodes without edges).
_HOSTILE_SHAPES = _NUMERIC_SHAPES + ("towers", "isolated")

#: Families that stress the numbers (one of the shapes above, numbers chosen to break
#: inexact arithmetic, or to tie where Piper's greedy rule decides).
NUMERIC_FAMILIES = ("numerics", "hostile", "ties")

#: Every family :func:`random_instance` and the campaigns accept.
ALL_FAMILIES = FAMILIES + NUMERIC_FAMILIES

#: N values drawn when N is not given (small, with non-trivial divisors).
N_CHOICES = (1, 2, 4, 6, 8)

VANILLA = "vanilla"
RECOMPUTE = "activation recomp"


def instance_name(family: str, n_nodes: int, seed: int) -> str:
    """The ``source`` string of a generated instance, e.g. ``random:skip:n6:s42``."""
    return f"random:{family}:n{n_nodes}:s{seed}"


def _rng(family: str, n_nodes: int, seed: int) -> np.random.Generator:
    # zlib.crc32, not hash(): stable across processes and Python runs.
    return np.random.default_rng(
        [int(seed) & 0xFFFFFFFF, zlib.crc32(family.encode()), int(n_nodes)]
    )


# --------------------------------------------------------------------------------------
# Graphs (on 0..n-1, always in a topological order: every edge goes i -> j with i < j)
# --------------------------------------------------------------------------------------


def _chain(n: int, rng: np.random.Generator) -> nx.DiGraph:
    return nx.path_graph(n, create_using=nx.DiGraph)


def _skip(n: int, rng: np.random.Generator) -> nx.DiGraph:
    # a residual chain: every block start i sends a skip edge to i + span (the "add" node)
    g = nx.path_graph(n, create_using=nx.DiGraph)
    span = int(rng.integers(2, 4))  # 2: ResNet basic blocks, 3: transformer sub-blocks
    for i in range(0, n - span):
        if rng.random() < 0.6:
            g.add_edge(i, i + span)
    if n >= 3 and g.number_of_edges() == n - 1:
        g.add_edge(0, min(n - 1, span))  # at least one skip connection
    return g


def _layered(n: int, rng: np.random.Generator) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    n_layers = int(rng.integers(max(1, n // 3), max(2, (2 * n) // 3) + 1))
    n_layers = max(1, min(n, n_layers))
    # layer sizes: every layer non-empty, the rest spread at random
    sizes = [1] * n_layers
    for _ in range(n - n_layers):
        sizes[int(rng.integers(0, n_layers))] += 1
    layers, start = [], 0
    for size in sizes:
        layers.append(list(range(start, start + size)))
        start += size
    for li in range(1, n_layers):
        for v in layers[li]:
            # usually one or two predecessors in the previous layer; sometimes a longer edge;
            # sometimes none (a second input of the model)
            if rng.random() < 0.9:
                prev = layers[li - 1]
                k = int(rng.integers(1, min(2, len(prev)) + 1))
                for u in rng.choice(prev, size=k, replace=False):
                    g.add_edge(int(u), v)
            if li >= 2 and rng.random() < 0.25:
                u = int(rng.choice(layers[int(rng.integers(0, li - 1))]))
                g.add_edge(u, v)
    return g


def _series_parallel(n: int, rng: np.random.Generator) -> nx.DiGraph:
    # grow from a single edge s -> t; a series step subdivides an edge with a new node,
    # a parallel step adds a new path u -> new -> v beside an edge (no multi-edges)
    if n == 1:
        g = nx.DiGraph()
        g.add_node(0)
        return g
    g = nx.DiGraph([(0, 1)])
    nxt = 2
    while nxt < n:
        u, v = list(g.edges)[int(rng.integers(0, g.number_of_edges()))]
        w = nxt
        nxt += 1
        if rng.random() < 0.5:
            g.remove_edge(u, v)
        g.add_edge(u, w)
        g.add_edge(w, v)
    return _relabel_topological(g)


def _fork_join(n: int, rng: np.random.Generator) -> nx.DiGraph:
    # fork node, 2-3 branches (chains), join node; blocks chained one after another
    g = nx.DiGraph()
    g.add_node(0)
    last, nxt = 0, 1
    while nxt < n:
        room = n - nxt
        if room < 3:  # too few nodes for another block: extend the chain
            g.add_edge(last, nxt)
            last, nxt = nxt, nxt + 1
            continue
        n_branches = int(rng.integers(2, 4))
        body = int(rng.integers(n_branches, max(n_branches, min(room - 1, 3 * n_branches)) + 1))
        body = min(body, room - 1)
        n_branches = min(n_branches, body)
        lengths = [1] * n_branches
        for _ in range(body - n_branches):
            lengths[int(rng.integers(0, n_branches))] += 1
        join = nxt + body
        for length in lengths:
            prev = last
            for _ in range(length):
                g.add_edge(prev, nxt)
                prev, nxt = nxt, nxt + 1
            g.add_edge(prev, join)
        last, nxt = join, join + 1
    return g


def _towers(n: int, rng: np.random.Generator) -> nx.DiGraph:
    # a source, 2-4 parallel chains (towers) of random lengths, a sink joining them; a chain
    # when there are too few nodes for two towers
    if n < 4:
        return _chain(n, rng)
    body = n - 2
    k = int(rng.integers(2, min(4, body) + 1))
    lengths = [1] * k
    for _ in range(body - k):
        lengths[int(rng.integers(0, k))] += 1
    g = nx.DiGraph()
    sink, nxt = n - 1, 1
    for length in lengths:
        prev = 0
        for _ in range(length):
            g.add_edge(prev, nxt)
            prev, nxt = nxt, nxt + 1
        g.add_edge(prev, sink)
    return g


def _relabel_topological(g: nx.DiGraph) -> nx.DiGraph:
    order = list(nx.lexicographical_topological_sort(g))
    return nx.relabel_nodes(g, {v: i for i, v in enumerate(order)})


def _isolated(n: int, rng: np.random.Generator) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    return g


_BUILDERS = {
    "isolated": _isolated,
    "chain": _chain,
    "skip": _skip,
    "layered": _layered,
    "series-parallel": _series_parallel,
    "fork-join": _fork_join,
    "towers": _towers,
}


def random_graph(family: str, n_nodes: int, seed: int) -> nx.DiGraph:
    """A random DAG of the given family on nodes 0..n_nodes-1 (edges go i -> j, i < j).

    Parameters
    ----------
    family : str
        One of :data:`ALL_FAMILIES` (``numerics`` draws one of the shapes).
    n_nodes : int
        Number of nodes, >= 1.
    seed : int
        The same (family, n_nodes, seed) always gives the same graph.

    Raises
    ------
    InputError
        For an unknown family or n_nodes < 1.

    Examples
    --------
    >>> g = random_graph("chain", 4, 0)
    >>> sorted(g.edges)
    [(0, 1), (1, 2), (2, 3)]
    >>> nx.is_directed_acyclic_graph(random_graph("layered", 7, 3))
    True
    """
    _check_family(family, n_nodes)
    rng = _rng(family, n_nodes, seed)
    shapes = _HOSTILE_SHAPES if family == "hostile" else _NUMERIC_SHAPES
    shape = family if family in _BUILDERS else shapes[int(rng.integers(0, len(shapes)))]
    g = _BUILDERS[shape](n_nodes, rng)
    assert g.number_of_nodes() == n_nodes and all(u < v for u, v in g.edges)
    return g


def _check_family(family: str, n_nodes: int) -> None:
    if family not in ALL_FAMILIES:
        raise InputError(f"unknown family {family!r}; choose one of {', '.join(ALL_FAMILIES)}")
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise InputError(f"number of nodes must be a whole number >= 1, got {n_nodes!r}")


# --------------------------------------------------------------------------------------
# Node ids
# --------------------------------------------------------------------------------------


def _node_ids(n: int, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(ids, listing order): ids[i] is the user id of graph node i; the JSON lists the
    nodes in ``listing`` order (a permutation of 0..n-1)."""
    kind = int(rng.integers(0, 5))
    if kind == 0:  # plain 0..n-1
        ids = list(range(n))
    elif kind == 1:  # offset
        off = int(rng.integers(1, 1000))
        ids = [off + i for i in range(n)]
    elif kind == 2:  # a random permutation of 0..n-1 (ids no longer topological)
        ids = [int(x) for x in rng.permutation(n)]
    elif kind == 3:  # spread out, possibly negative: n distinct values of -50..199, or of a
        # range 4 n wide when n > 250 (-50..199 holds only 250; n <= 250 keeps the draws as they
        # were)
        population = np.arange(-50, 200) if n <= 250 else np.arange(-50, 4 * n - 50)
        ids = sorted(int(x) for x in rng.choice(population, size=n, replace=False))
        ids = [ids[i] for i in rng.permutation(n)]
    else:  # descending
        ids = list(range(10 * n, 0, -10))
    listing = list(range(n)) if rng.random() < 0.5 else [int(x) for x in rng.permutation(n)]
    return ids, listing


# --------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------


def _count_range(options_per_t: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(options_per_t, (int, np.integer)) and not isinstance(options_per_t, bool):
        lo = hi = int(options_per_t)
    else:
        try:
            lo, hi = (int(x) for x in options_per_t)
        except (TypeError, ValueError):
            raise InputError(
                f"options_per_t must be an int or a (low, high) pair, got {options_per_t!r}"
            ) from None
    if lo < 1 or hi < lo:
        raise InputError(f"options_per_t must be >= 1 (and low <= high), got {options_per_t!r}")
    return lo, hi


def random_instance(
    family: str,
    n_nodes: int,
    seed: int,
    *,
    t_values: Sequence[int] = (1, 2),
    options_per_t: int | Sequence[int] = 2,
    memory: str | float = "tight",
    integer: bool = False,
    K: int | None = None,
    N: int | None = None,
    B: float | None = None,
) -> Instance:
    """A random, valid Piper instance.

    Parameters
    ----------
    family : str
        The graph shape, one of :data:`FAMILIES`, or ``"numerics"`` (see
        :func:`_numerics_instance`; ``integer`` then rounds every number to a whole one
        but keeps the magnitudes) or ``"ties"`` (see :func:`_ties_instance`; ``integer``
        then makes every number whole).
    n_nodes : int
        Number of nodes (layers), >= 1.
    seed : int
        The same arguments always give the same instance.
    t_values : sequence of int
        Tensor-parallel degrees t offered (keys of ``TMPCs``). Every node has t = 1 when
        1 is listed; a node sometimes lacks a t > 1 (then it cannot sit in such a stage).
    options_per_t : int or (low, high)
        Options per (node, t), or a range drawn from per (node, t). The first two are
        named ``"vanilla"`` and ``"activation recomp"`` (less memory a, more time p),
        further ones ``"opt2"``, ``"opt3"``, ... with random trade-offs.
    memory : "tight", "loose" or float
        How M is chosen. Let lo = max over nodes of the least a + b (no plan fits below
        it) and hi = sum over nodes of the largest a + b (every plan with y = 1 fits).
        ``"tight"``: M drawn between 0.9 lo and hi (some instances infeasible, many
        with memory binding); ``"loose"``: M = N * (hi + 1) (memory never binds); a float
        f: M = lo + f * (hi - lo).
    integer : bool
        All data are small integers and B = 1, so that every backend computes exactly.
    K, N, B : optional
        Devices, microbatches, bandwidth; drawn when None (K in 1..8, N in
        :data:`N_CHOICES`; 1 only now and then, since it forces a single stage).

    Returns
    -------
    Instance
        Validated by :func:`piper_ilp.instance.instance_from_dict`; its ``source`` is
        :func:`instance_name`.

    Raises
    ------
    InputError
        For an unknown family or bad parameters.

    Examples
    --------
    >>> inst = random_instance("skip", 6, seed=1)
    >>> len(inst.nodes), inst.t_values
    (6, [1, 2])
    >>> random_instance("skip", 6, seed=1) == inst
    True
    """
    _check_family(family, n_nodes)
    t_list = sorted({int(t) for t in t_values})
    if not t_list or t_list[0] < 1:
        raise InputError(f"t_values must be positive integers, got {t_values!r}")
    lo_opts, hi_opts = _count_range(options_per_t)
    if not (
        memory in ("tight", "loose")
        or (isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory >= 0)
    ):
        raise InputError(f"memory must be 'tight', 'loose' or a number >= 0, got {memory!r}")
    for name, value in (("K", K), ("N", N)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InputError(f"{name} must be a whole number >= 1, got {value!r}")
    if B is not None and not (isinstance(B, (int, float)) and B > 0):
        raise InputError(f"B must be a number > 0, got {B!r}")

    # the parameters are part of the seed, so that e.g. integer and float variants differ
    params = repr((family, n_nodes, t_list, lo_opts, hi_opts, memory, integer)).encode()
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(params)])
    g = random_graph(family, n_nodes, seed)
    if family == "ties":
        return _ties_instance(g, seed, rng, t_list, (lo_opts, hi_opts), memory, integer, K, N, B)
    if family == "hostile":
        return _hostile_instance(
            g, family, seed, rng, t_list, (lo_opts, hi_opts), memory, integer, K, N, B
        )
    if family in NUMERIC_FAMILIES:
        return _numerics_instance(
            g, family, seed, rng, t_list, (lo_opts, hi_opts), memory, integer, K, N, B
        )
    n = n_nodes

    if K is None:  # K = 1 (a single stage) now and then, else 2..8
        K = 1 if rng.random() < 0.08 else int(rng.integers(2, 9))
    if N is None:  # N = 1 (a single stage) now and then
        N = 1 if rng.random() < 0.08 else int(rng.choice(N_CHOICES[1:]))
    if B is None:
        B = 1 if integer else float(rng.choice([1e3, 2e3, 5e3]))

    def draw(low: float, high: float, int_low: int, int_high: int) -> float | int:
        if integer:
            return int(rng.integers(int_low, int_high + 1))
        return float(rng.uniform(low, high))

    # edge traffic c(u, v) in bytes; on the float scale c / B is about 0..2 seconds
    c = {e: draw(0.0, 2.0 * B, 0, 3) for e in sorted(g.edges)}

    # base profile of each node under t = 1
    base = []
    for _ in range(n):
        base.append(
            {
                "p": draw(0.5, 6.0, 1, 12),
                "w": draw(0.0, 4.0 * B, 0, 8),
                "a": draw(1.0, 10.0, 1, 6),
                "b": draw(0.0, 6.0, 0, 5),
            }
        )

    def per_device(i: int, t: int) -> dict:
        """Node i's profile on a t-device group: a 1/t share of p, w, a, b, with an overhead."""
        bp = base[i]
        if t == 1:
            return bp
        if integer:
            return {
                # a share of p with an overhead, rounded up, yet below p when p > 1
                "p": max(
                    1, min(bp["p"] - 1, -(-bp["p"] * (1 + int(rng.integers(0, 2))) // (t + 1)))
                ),
                "w": -(-bp["w"] // t),
                "a": -(-bp["a"] // t),
                "b": -(-bp["b"] // t),
            }
        return {
            "p": bp["p"] / t * float(rng.uniform(1.05, 1.6)),
            "w": bp["w"] / t,
            "a": bp["a"] / t * float(rng.uniform(1.0, 1.3)),
            "b": bp["b"] / t,
        }

    def option(i: int, t: int, k: int, bp: dict) -> dict:
        """Option k of node i under t, from the node's profile ``bp`` on t devices."""
        p, w, a, b = bp["p"], bp["w"], bp["a"], bp["b"]
        if integer:
            if k == 1:  # recompute: much less activation memory, more time
                p, b, a = p + int(rng.integers(1, max(2, p))), b + (a + 1) // 2, max(0, a // 3)
            elif k >= 2:
                p = max(0, p + int(rng.integers(-1, 4)))
                a = max(0, a + int(rng.integers(-2, 2)))
                b = max(0, b + int(rng.integers(-1, 3)))
            sync = (lambda: int(rng.integers(0, 3))) if t > 1 else (lambda: int(rng.random() < 0.1))
        else:
            if k == 1:
                p, b, a = (
                    p * float(rng.uniform(1.1, 1.6)),
                    b + a * float(rng.uniform(0.1, 0.4)),
                    a * float(rng.uniform(0.05, 0.35)),
                )
            elif k >= 2:
                f = float(rng.uniform(0.4, 1.3))  # memory factor
                p = p * (
                    1.0 + (1.0 - f) * float(rng.uniform(0.2, 1.0)) + float(rng.uniform(-0.05, 0.1))
                )
                a, b = a * f, b * float(rng.uniform(0.8, 1.3))
            sync = (
                (lambda: float(rng.uniform(0.0, 0.5 * B)))
                if t > 1
                else (lambda: float(rng.uniform(0.0, 0.1 * B)) if rng.random() < 0.1 else 0.0)
            )
        oid = VANILLA if k == 0 else RECOMPUTE if k == 1 else f"opt{k}"
        return _option_with_syncs(g, i, oid, (p, w, a, b), sync)

    def options(i: int, t: int, count: int) -> list[dict]:
        bp = per_device(i, t)
        return [option(i, t, k, bp) for k in range(count)]

    tmpcs = _options_per_node(n, t_list, (lo_opts, hi_opts), rng, options)
    M = max(_memory_limit(memory, *_memory_range(tmpcs, sum), N, rng), 1e-9)
    if integer:
        M = max(1, int(round(M)))

    return _assemble(g, tmpcs, c, rng, K, M, B, N, instance_name(family, n_nodes, seed))


# --------------------------------------------------------------------------------------
# The numerics family
# --------------------------------------------------------------------------------------

#: The range of magnitudes the numerics family spreads its numbers over.
NUMERIC_RANGE = (-6, 18)

#: p of a "dummy" option (a placeholder no good plan uses, as in some profiles).
DUMMY_P = 1e12


def _numerics_instance(
    g: nx.DiGraph,
    family: str,
    seed: int,
    rng: np.random.Generator,
    t_list: list[int],
    counts: tuple[int, int],
    memory: str | float,
    integer: bool,
    K: int | None,
    N: int | None,
    B: float | None,
    *,
    exponents: tuple[int, int] = NUMERIC_RANGE,
    equal_options: float = 0.0,
) -> Instance:
    """An instance on graph ``g`` whose numbers break inexact arithmetic (contract sec. 7).

    * Magnitudes: each field (p; a and b; w, c, sfw, sbw and B) has a scale drawn from
      10^-6..10^18 (times up to 10^6); most values are that scale times 0.5..2 (so that
      the trade-offs between options stay live), one in five is anywhere in 10^-6..10^18
      and one in ten is 0.
    * Greedy ties (sec. 5): with probability 1/2 (n >= 2) node j is a twin of node i:
      the same options, and every edge of either carries c = sfw = sbw = 0, so the
      ratios (c_jl - c_jF) / (m_jF - m_jl) equal node i's exactly, for every stage.
    * Dummy options: with probability 1/2 some (node, t) with two or more options get a
      last option ``"dummy"`` with p = :data:`DUMMY_P` and no memory.
    * Huge edges: with probability 1/2 one or two edges carry 10^15..10^19 bytes.
    * M: chosen as ``memory`` says (as in :func:`random_instance`); then, unless
      ``memory == "loose"``, with probability 3/4 moved to exactly the memory (``fsum``,
      sec. 7) of some stage of some plan, or 1 ulp above or below it: the whole graph in
      one stage (y = 1), a single node (y = 1, the last stage) or a single node with
      y = 2 (the first of two stages with d = 1), mostly with each node's fastest option.
    * ``integer``: every number rounded to a whole number (the magnitudes stay).
    * ``exponents``: the range of magnitudes (default :data:`NUMERIC_RANGE`); every
      number is then clamped to the supported range (0 or [1e-30, 1e30]), a no-op for
      the default range. ``equal_options``: the probability that the options of a
      (node, t) are exact copies of its first one (ties under other ids).
    """
    from piper_ilp.cost import stage_memory  # the exact memory of a stage, sec. 7

    n = g.number_of_nodes()
    lo_e, hi_e = exponents

    def mag(lo: float = lo_e, hi: float = hi_e) -> float:
        return float(10.0 ** rng.uniform(lo, hi))

    def whole(x: float) -> float:
        return _supported(float(math.floor(x + 0.5)) if integer else x)

    scale_p = mag(lo_e, 6)
    scale_mem = mag()
    scale_bytes = mag()

    def value(scale: float) -> float:
        r = rng.random()
        if r < 0.1:
            return 0.0
        if r < 0.3:
            return whole(mag())
        return whole(scale * float(rng.uniform(0.5, 2.0)))

    if K is None:
        K = 1 if rng.random() < 0.08 else int(rng.integers(2, 9))
    if N is None:
        N = 1 if rng.random() < 0.08 else int(rng.choice(N_CHOICES[1:]))
    if B is None:
        B = (
            max(1.0, whole(scale_bytes * mag(-3, 3)))
            if integer
            else whole(scale_bytes * mag(-3, 3))
        )

    c = {e: value(scale_bytes) for e in sorted(g.edges)}
    if c and rng.random() < 0.5:
        edges = sorted(c)
        for k in rng.choice(
            len(edges), size=min(len(edges), int(rng.integers(1, 3))), replace=False
        ):
            c[edges[int(k)]] = whole(mag(15, 19))

    twin: tuple[int, int] | None = None
    if n >= 2 and rng.random() < 0.5:
        i, j = (int(x) for x in rng.choice(n, size=2, replace=False))
        twin = (i, j)
        for e in c:
            if i in e or j in e:
                c[e] = 0.0
    quiet = set(twin) if twin else set()  # nodes whose sync bytes are all 0
    dummies = rng.random() < 0.5

    def option(i: int, t: int, k: int, count: int) -> dict:
        if dummies and count >= 2 and k == count - 1 and rng.random() < 0.5:
            p, w, a, b = DUMMY_P, value(scale_bytes), 0.0, 0.0
            oid = "dummy"
        else:
            p, w = value(scale_p), value(scale_bytes)
            a, b = value(scale_mem), value(scale_mem)
            if t > 1:  # a share of the work on each of t devices, with an overhead
                p, w, a, b = (whole(x / t * float(rng.uniform(1.0, 1.6))) for x in (p, w, a, b))
            if k == 1:  # recompute: less activation memory, more time
                p, a, b = (
                    whole(p * float(rng.uniform(1.1, 1.6))),
                    whole(a * float(rng.uniform(0.05, 0.35))),
                    whole(b + 0.2 * a),
                )
            oid = VANILLA if k == 0 else RECOMPUTE if k == 1 else f"opt{k}"
        sync = (
            (lambda: 0.0)
            if i in quiet
            else (lambda: value(scale_bytes) if rng.random() < 0.5 else 0.0)
        )
        return _option_with_syncs(g, i, oid, (p, w, a, b), sync)

    def options(i: int, t: int, count: int) -> list[dict]:
        opts = [option(i, t, k, count) for k in range(count)]
        if equal_options and count > 1 and rng.random() < equal_options:
            opts = [dict(opts[0], id=o["id"]) for o in opts]
        return opts

    tmpcs = _options_per_node(n, t_list, counts, rng, options)
    if twin is not None:
        i, j = twin
        tmpcs[j] = {
            t: [
                {
                    **o,
                    "syncTimeFw": {u: 0.0 for u in sorted(g.predecessors(j))},
                    "syncTimeBw": {x: 0.0 for x in sorted(g.successors(j))},
                }
                for o in opts
            ]
            for t, opts in tmpcs[i].items()
        }

    # M as in random_instance, then perhaps at a plan's memory boundary
    M = _memory_limit(memory, *_memory_range(tmpcs, math.fsum), N, rng)
    if memory != "loose" and rng.random() < 0.75:
        M = _memory_boundary(tmpcs, rng, stage_memory, integer) or M
    M = whole(M)
    if not M > 0:
        M = 1.0
    return _assemble(g, tmpcs, c, rng, K, M, B, N, instance_name(family, n, seed))


def _ties_instance(
    g: nx.DiGraph,
    seed: int,
    rng: np.random.Generator,
    t_list: list[int],
    counts: tuple[int, int],
    memory: str | float,
    integer: bool,
    K: int | None,
    N: int | None,
    B: float | None,
) -> Instance:
    """An instance on graph ``g`` full of the ties that decide Piper's greedy rule (sec. 5).

    * Numbers: p, w, c, sync bytes and B in tenths (p in twentieths where a change is
      scaled by 1/2 or 3/2), memory a and b in quarters or in tenths (one unit per
      instance; quarters make every memory sum exact, tenths make the float sums of the
      original planner differ from the exact ones near M); whole numbers with ``integer``.
      A cost tie in exact arithmetic is then one of rounding.
    * Per (node, t) a "vanilla" option and an "activation recomp" one (less a, more p;
      ``counts`` as in :func:`random_instance`, further options get random trade-offs);
      the recomputation is listed first half of the time.
    * The change from vanilla to recomp (dp, da, db): with probability 0.7 the change of an
      earlier node times 1, 2, 3, 1/2 or 3/2 (the ratio dp / (da y + db) ties across nodes
      and stages for every y and d), else drawn, with dp = 0 (equal cost), da = 0 or
      da = db = 0 (equal memory) now and then.
    * t > 1 options have sync bytes, the same for both options half of the time.
    * K in 1, 2, 3, 4, 6 (stages of several nodes), N in 1, 2, 3, 4, 6, 8, 12 (d > 1),
      weights w on most nodes and traffic on most edges (the cost's float terms).
    * M (unless ``memory`` is ``"loose"`` or a number): see :func:`_ties_memory`.
    * At least one edge when there are two nodes or more (the original planner refuses an
      instance without edges).
    """
    n = g.number_of_nodes()
    if n >= 2 and g.number_of_edges() == 0:
        g.add_edge(0, n - 1)
    tenth = (
        (lambda lo, hi: float(rng.integers(lo, hi + 1)))
        if integer
        else (lambda lo, hi: float(rng.integers(10 * lo, 10 * hi + 1)) / 10.0)
    )
    unit = 1 if integer else int(rng.choice([4, 10]))  # memory in quarters or tenths
    quarter = lambda lo, hi: float(rng.integers(unit * lo, unit * hi + 1)) / unit  # noqa: E731
    if K is None:
        K = int(rng.choice([1, 2, 2, 3, 4, 4, 6]))
    if N is None:
        N = int(rng.choice([1, 2, 3, 4, 4, 6, 8, 12]))
    if B is None:
        B = 1.0 if integer else float(rng.choice([1.0, 3.0, 7.0, 10.0, 0.1, 0.3]))
    c = {e: (tenth(1, 3) if rng.random() < 0.7 else 0.0) for e in sorted(g.edges)}
    changes: list[tuple[float, float, float]] = []

    def change(a: float) -> tuple[float, float, float]:
        if changes and rng.random() < 0.7:
            k = float(rng.choice([1.0, 2.0, 3.0] if integer else [1.0, 2.0, 3.0, 0.5, 1.5]))
            dp, da, db = (k * x for x in changes[int(rng.integers(0, len(changes)))])
        else:
            r = rng.random()
            dp = 0.0 if r < 0.15 else tenth(1, 3)
            da = 0.0 if 0.15 <= r < 0.3 else quarter(1, 4)
            db = 0.0 if r < 0.45 else quarter(0, 2)
            if 0.3 <= r < 0.4:
                da = db = 0.0
            changes.append((dp, da, db))
        return dp, min(da, a), db

    tmpcs: list[dict[int, list[dict]]] = []
    for i in range(n):
        per_t: dict[int, list[dict]] = {}
        w = tenth(1, 4) if rng.random() < 0.8 else 0.0
        for t in t_list:
            if t > 1 and t_list[0] == 1 and rng.random() < 0.2:
                continue
            p, a, b = tenth(1, 6), quarter(1, 6), quarter(0, 4)
            dp, da, db = change(a)
            same_sync = t == 1 or rng.random() < 0.5
            sync_fw = {u: tenth(0, 2) if t > 1 else 0.0 for u in sorted(g.predecessors(i))}
            sync_bw = {x: tenth(0, 2) if t > 1 else 0.0 for x in sorted(g.successors(i))}

            def sync(table: dict, same: bool = same_sync) -> dict:
                return dict(table) if same else {k: tenth(0, 2) for k in table}

            opts = [
                option_dict(VANILLA, p, w, a, b, sync(sync_fw), sync(sync_bw)),
                option_dict(RECOMPUTE, p + dp, w, a - da, b + db, sync(sync_fw), sync(sync_bw)),
            ]
            count = int(rng.integers(counts[0], counts[1] + 1))
            for k in range(2, count):
                opts.append(
                    option_dict(
                        f"opt{k}",
                        p + tenth(0, 2),
                        w,
                        quarter(0, 6),
                        quarter(0, 4),
                        sync(sync_fw),
                        sync(sync_bw),
                    )
                )
            opts = opts[:count]
            if len(opts) >= 2 and rng.random() < 0.5:
                opts[0], opts[1] = opts[1], opts[0]
            per_t[t] = opts
        tmpcs.append(per_t)

    least, most = _memory_range(tmpcs, math.fsum)
    if memory == "loose":
        M = N * (most + 1.0)
    elif memory == "tight":
        M = _ties_memory(tmpcs, rng, K, N, quarter)
    else:
        M = least + float(memory) * (most - least)
    if not M > 0:
        M = 1.0
    return _assemble(g, tmpcs, c, rng, K, M, B, N, instance_name("ties", n, seed))


def _ties_memory(
    tmpcs: list[dict[int, list[dict]]], rng: np.random.Generator, K: int, N: int, quarter
) -> float:
    """M for the ties family, from a plan it makes fit: the nodes (in topological order)
    cut into k <= min(K, N) runs, the stages of a plan with d = 1 and the least t (stage i
    holds y = k - i microbatches). M is the largest over the stages of: the memory of the
    fastest options ("F fits" with equality), of the least-memory options ("L fits" with
    equality), or of the fastest options less one node's saving m_F - m_O (the walk's
    excess reaches exactly 0 after one switch: which of two tied nodes switches decides;
    the least saving half of the time, as a tied partner saves a multiple of it); one time
    in five a few units more. Each stage's sums are ``fsum`` (exact in quarters; in tenths
    the original's running sums may land a last bit away)."""
    n = len(tmpcs)
    k = int(rng.integers(1, min(K, N, n) + 1))
    cuts = (
        sorted(int(x) for x in rng.choice(np.arange(1, n), size=k - 1, replace=False))
        if k > 1
        else []
    )
    bounds = [0, *cuts, n]
    kind = rng.random()
    M = 0.0
    for i in range(k):
        y = k - i

        def mem(o, y=y):
            return math.fsum([o["memoryUsageA"] * y, o["memoryUsageB"]])

        F, L, savings = [], [], []
        for v in range(bounds[i], bounds[i + 1]):
            opts = tmpcs[v][min(tmpcs[v])]
            fast = min(opts, key=lambda o: o["timePerSample"])  # the first of least p
            F.append(mem(fast))
            L.append(min(mem(o) for o in opts))
            savings += [mem(fast) - mem(o) for o in opts if mem(o) < mem(fast)]
        if kind < 0.2:
            target = math.fsum(F)
        elif kind < 0.3:
            target = math.fsum(L)
        elif savings:  # the least saving half of the time (a tied partner saves k times it)
            pick = rng.integers(0, len(savings)) if rng.random() < 0.5 else np.argmin(savings)
            target = math.fsum(F) - savings[int(pick)]
        else:
            target = math.fsum(F)
        M = max(M, target)
    if rng.random() < 0.2:
        M += quarter(1, 2)
    return M


def _supported(x: float) -> float:
    """``x`` clamped to the supported range of a number: 0, or within [1e-30, 1e30]."""
    return 0.0 if x == 0 else min(max(x, VALUE_MIN), VALUE_MAX)


#: The hostile family: magnitudes a little beyond the supported range (clamped to its ends,
#: which therefore occur often), K and N to choose from.
HOSTILE_RANGE = (-33, 33)
_HOSTILE_K = (1, 2, 3, 8, 32, 64, 256, 1024, 2**20)
_HOSTILE_N = (2, 3, 4, 8, 12, 16, 64, 2**20)


def _hostile_instance(g, family, seed, rng, t_list, counts, memory, integer, K, N, B):
    """The ``hostile`` family (see the module docstring): :func:`_numerics_instance` over
    :data:`HOSTILE_RANGE`, with ties of whole options, and its own K, N, t and counts."""
    if rng.random() < 0.3:
        t_list = [1, 2, 4, 8]
    if rng.random() < 0.3:
        counts = (counts[0], max(counts[1], 4))
    if K is None:
        K = int(rng.choice(_HOSTILE_K))
    if N is None:
        N = 1 if rng.random() < 0.35 else int(rng.choice(_HOSTILE_N))
    return _numerics_instance(
        g,
        family,
        seed,
        rng,
        t_list,
        counts,
        memory,
        integer,
        K,
        N,
        B,
        exponents=HOSTILE_RANGE,
        equal_options=0.3,
    )


def _memory_boundary(
    tmpcs: list[dict[int, list[dict]]], rng: np.random.Generator, stage_memory, integer: bool
) -> float | None:
    """The exact memory of one stage of some plan, or 1 ulp (1 for whole numbers below
    2^53) above or below it; None when that memory is 0."""
    from piper_ilp.instance import Option

    n = len(tmpcs)
    common_t = [
        t for t in (1, *sorted({t for tm in tmpcs for t in tm})) if all(t in tm for tm in tmpcs)
    ]
    kind = rng.random()
    if kind < 0.5 and common_t:
        t, nodes, y = common_t[0], list(range(n)), 1
    else:
        v = int(rng.integers(0, n))
        t, nodes, y = sorted(tmpcs[v])[0], [v], (1 if kind < 0.75 else 2)
    fastest = rng.random() < 0.7  # the options a fast plan wants; else any
    opts = {}
    for v in nodes:
        cand = tmpcs[v][t]
        choice = (
            min(cand, key=lambda o: o["timePerSample"])
            if fastest
            else cand[int(rng.integers(0, len(cand)))]
        )
        opts[v] = Option(
            id=choice["id"],
            p=0.0,
            w=0.0,
            a=choice["memoryUsageA"],
            b=choice["memoryUsageB"],
            sfw={},
            sbw={},
        )
    m = stage_memory(nodes, opts, y)
    if not m > 0:
        return None
    step = int(rng.integers(-1, 2))
    if step == 0:
        return m
    if integer and m < 2.0**53:
        return max(1.0, m + step)
    return math.nextafter(m, math.inf if step > 0 else 0.0)


def _option_with_syncs(g: nx.DiGraph, i: int, oid: str, pwab: tuple, sync) -> dict:
    """Option ``oid`` of node ``i`` with (p, w, a, b) = ``pwab`` and a sync entry drawn by
    ``sync()`` for each predecessor, then each successor (in this order, sorted)."""
    sfw = {u: sync() for u in sorted(g.predecessors(i))}
    sbw = {x: sync() for x in sorted(g.successors(i))}
    return option_dict(oid, *pwab, sfw, sbw)


def _options_per_node(n, t_list, counts, rng, options) -> list[dict[int, list[dict]]]:
    """Each node's options by t: ``options(i, t, count)`` with ``count`` drawn from
    ``counts`` (inclusive); with t = 1 listed first, a node has no option for a larger t
    with probability 0.1."""
    tmpcs: list[dict[int, list[dict]]] = []
    for i in range(n):
        per_t: dict[int, list[dict]] = {}
        for t in t_list:
            if t > 1 and t_list[0] == 1 and rng.random() < 0.1:
                continue  # this node has no option for this t
            count = int(rng.integers(counts[0], counts[1] + 1))
            per_t[t] = options(i, t, count)
        tmpcs.append(per_t)
    return tmpcs


def _memory_range(tmpcs, total) -> tuple[float, float]:
    """The largest over nodes of a node's least a + b, and ``total`` (sum or fsum) over
    nodes of each node's largest a + b."""
    least = max(
        min(o["memoryUsageA"] + o["memoryUsageB"] for opts in tm.values() for o in opts)
        for tm in tmpcs
    )
    most = total(
        max(o["memoryUsageA"] + o["memoryUsageB"] for opts in tm.values() for o in opts)
        for tm in tmpcs
    )
    return least, most


def _memory_limit(memory: str | float, lo: float, hi: float, N: int, rng) -> float:
    """M between ``lo`` and ``hi`` (:func:`_memory_range`) as ``memory`` says: "tight"
    drawn in [0.9 lo, hi], "loose" N (hi + 1), a fraction the point that far from lo."""
    if memory == "tight":
        return 0.9 * lo + float(rng.uniform(0.0, 1.0)) * (hi - 0.9 * lo)
    if memory == "loose":
        return N * (hi + 1.0)
    return lo + float(memory) * (hi - lo)


def _assemble(g, tmpcs, c, rng, K, M, B, N, source) -> Instance:
    """The instance JSON from per-node options on graph nodes 0..n-1, with the ids and
    listing order of :func:`_node_ids`."""
    n = g.number_of_nodes()
    ids, listing = _node_ids(n, rng)
    nodes = []
    for i in listing:
        nodes.append(
            {
                "id": ids[i],
                "name": f"L{i}",
                "TMPCs": {
                    str(t): [
                        {
                            **o,
                            "syncTimeFw": {str(ids[u]): x for u, x in o["syncTimeFw"].items()},
                            "syncTimeBw": {str(ids[v]): x for v, x in o["syncTimeBw"].items()},
                        }
                        for o in opts
                    ]
                    for t, opts in sorted(tmpcs[i].items())
                },
            }
        )
    edges = [
        {"sourceId": ids[u], "destId": ids[v], "communicationCost": cost}
        for (u, v), cost in c.items()
    ]
    if rng.random() < 0.5 and edges:
        edges = [edges[j] for j in rng.permutation(len(edges))]
    data = {
        "maxDevices": K,
        "maxMemoryPerDevice": M,
        "bandwidth": B,
        "mbsInBatch": N,
        "nodes": nodes,
        "edges": edges,
    }
    return instance_from_dict(data, source=source)
