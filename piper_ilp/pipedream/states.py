"""PipeDream's *states*: the antichain DAG of a prepared graph and its topological order.

PipeDream's planner (``optimizer_graph_hierarchical.py`` with ``graph.py``) does not plan
over all successor-closed sets. It walks from the first source an *antichain DAG*:

* a state is an antichain ``A`` (no member is an ancestor of another); its *downset* is
  ``A`` with all ancestors of its members;
* the *augmented* antichain adds, for each member ``a``, every ancestor ``p`` of ``a``
  with an out-edge to a node that is neither an ancestor of ``a`` nor ``a`` itself;
* the next states of ``A``: for each node ``x`` of the augmented antichain and each
  out-neighbour ``y`` of ``x`` not in ``A`` such that no descendant of ``y`` is in the
  augmented antichain, replace ``x`` by ``y`` and keep the members with no descendant
  in the list (in list order);
* states are found breadth first from ``[first source]`` (the first kept node, in file
  order, with no incoming edge) and numbered in discovery order; an arc goes from a state
  to each of its next states.

The states are put in one topological order: reverse DFS post-order, visiting the states in
discovery order and the arcs in the order they were added (PipeDream's
``Graph.topological_sort`` on antichain nodes, whose descriptions are all empty). For state
``s``: ``time`` = sum over its downset of (F + G) / 1000 s, ``activation`` / ``parameter`` =
sums of A / P over the downset, ``output_activation`` = sum of A over its augmented
antichain (all sums exact, :func:`math.fsum`).

A stage (k, j] holds downset(j) minus downset(k); its sums are *not* ``time[j] - time[k]``
(a difference of two rounded sums: (1e17 + 8) - 1e17 = 0 loses a stage's 8 bytes).
:meth:`States.between` gives them exactly: the correctly rounded value of
(sum over downset(j)) - (sum over downset(k)), which for nested downsets is the
:func:`math.fsum` over the stage's nodes (:class:`ExactSums`).

PipeDream lists the augmented antichain's extra members in the iteration order of a Python
``set`` of node-id strings, which is randomized per process in Python 3; this module uses
ascending file order instead. The order changes only which states are discovered first,
never the set of states, their arcs or downsets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from piper_ilp.bitmask import mask_bits
from piper_ilp.errors import SizeLimitError
from piper_ilp.pipedream.graph import Prepared

__all__ = ["States", "ExactSums", "antichain_states", "MAX_STATES"]

#: Refuse graphs with more states than this (the planner's tables grow as states^2).
MAX_STATES = 5000


#: Limb of :class:`ExactSums`' numpy path: an integer below 2**105 is hi * 2**52 + lo with
#: hi < 2**53 and lo < 2**52, both exact in float64.
_LIMB = 52


class ExactSums:
    """The sums of one quantity over the states' downsets, kept exactly.

    Every finite float x >= 0 is an integer multiple of 2**-shift for ``shift`` the largest
    exponent of 2 in the denominators of the nodes' values, so a state's sum is the integer
    ``ints[s]`` times 2**-shift, exactly. :meth:`between` rounds a difference of two such
    integers once (round to nearest, ties to even), as :func:`math.fsum` rounds a sum.

    Where the integers are below 2**105 and shift <= 1022 (every published profile), numpy
    does it: with d = dh * 2**52 + dl (dh, dl exact in float64), the one addition
    ``dh * 2**52 + dl`` is the correctly rounded d, and scaling by 2**-shift is exact (the
    result is 0 or at least 2**-1022, never subnormal). Otherwise Python's integer true
    division (correctly rounded) does it element by element.
    """

    def __init__(self, values: list[float], downsets: list[list[int]]):
        ratios = [float(x).as_integer_ratio() for x in values]
        self.shift = max([den.bit_length() - 1 for _, den in ratios] + [0])
        scaled = [num << (self.shift - (den.bit_length() - 1)) for num, den in ratios]
        # one more entry, 0: index -1 is the empty downset (a stage from the start)
        self.ints = [sum(scaled[v] for v in members) for members in downsets] + [0]
        big = max(abs(i) for i in self.ints)
        if big < 1 << (2 * _LIMB + 1) and self.shift <= 1022:
            arr = np.array(
                [[i >> _LIMB, i & ((1 << _LIMB) - 1)] for i in self.ints], dtype=np.int64
            )
            self._hi, self._lo = arr[:, 0].copy(), arr[:, 1].copy()
            self._obj = None
        else:
            self._hi = self._lo = None
            self._obj = np.empty(len(self.ints), dtype=object)
            self._obj[:] = self.ints
            self._den = 1 << self.shift

    def between(self, k, j) -> np.ndarray | float:
        """The correctly rounded sum over downset(j) minus that over downset(k), elementwise
        over the broadcast of ``k`` and ``j`` (state indices; k = -1 is the empty set). For
        downset(k) inside downset(j) it is the fsum over the stage (k, j]."""
        k = np.asarray(k, dtype=np.int64)
        j = np.asarray(j, dtype=np.int64)
        if self._obj is None:
            dh = (self._hi[j] - self._hi[k]).astype(np.float64)
            dl = (self._lo[j] - self._lo[k]).astype(np.float64)
            out = np.ldexp(np.ldexp(dh, _LIMB) + dl, -self.shift)
        else:
            d = np.asarray(self._obj[j] - self._obj[k], dtype=object)
            den = self._den
            out = np.fromiter((x / den for x in d.ravel()), dtype=np.float64, count=d.size).reshape(
                d.shape
            )
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class States:
    """The antichain DAG in topological order.

    ``antichain[s]`` / ``augmented[s]``: node indices (of the prepared graph);
    ``downset[s]``: bitmask (Python int) of node indices; ``time``, ``activation``,
    ``parameter``, ``output_activation``: float64 arrays (see the module docstring);
    ``ancestors[s]``: int array of the state indices that are ancestors of ``s`` in the
    antichain DAG, ascending; ``exact``: an :class:`ExactSums` per quantity ("time",
    "activation", "parameter"), for the sums of a stage (:meth:`between`).
    """

    antichain: tuple[tuple[int, ...], ...]
    augmented: tuple[tuple[int, ...], ...]
    downset: tuple[int, ...]
    time: np.ndarray
    activation: np.ndarray
    parameter: np.ndarray
    output_activation: np.ndarray
    ancestors: tuple[np.ndarray, ...]
    exact: dict[str, ExactSums]

    def __len__(self) -> int:
        return len(self.antichain)

    def between(self, what: str, k, j):
        """Sum of ``what`` ("time", "activation", "parameter") over the stage (k, j]: the
        fsum over downset(j) minus downset(k) when nested (k = -1: all of downset(j)),
        exactly, elementwise over numpy arrays of states (:meth:`ExactSums.between`)."""
        return self.exact[what].between(k, j)


def _reach_masks(order: Iterable[int], neighbours: Sequence[Iterable[int]], size: int) -> list[int]:
    """Per node, the bitmask of the nodes it reaches through ``neighbours`` transitively,
    filled in ``order`` (each node after all its neighbours)."""
    masks = [0] * size
    for v in order:
        m = 0
        for u in neighbours[v]:
            m |= masks[u] | (1 << u)
        masks[v] = m
    return masks


def antichain_states(prep: Prepared, max_states: int = MAX_STATES) -> States:
    """Build PipeDream's states for a prepared graph (see the module docstring).

    Parameters
    ----------
    prep : Prepared
        From :func:`piper_ilp.pipedream.graph.prepare`.
    max_states : int
        Refuse (:class:`SizeLimitError`) when the antichain DAG has more states.

    Returns
    -------
    States
    """
    if "states" in prep._cache:
        return prep._cache["states"]
    n = len(prep.nodes)
    outs, ins = prep.outs, prep.ins
    # Topological order of nodes, then strict ancestor / descendant bitmasks.
    indeg = [len(x) for x in ins]
    order, stack = [], [i for i in range(n) if indeg[i] == 0][::-1]
    while stack:
        u = stack.pop()
        order.append(u)
        for v in outs[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    anc = _reach_masks(order, ins, n)
    desc = _reach_masks(reversed(order), outs, n)
    outmask = [sum(1 << x for x in set(outs[v])) for v in range(n)]
    # extra(a): ancestors p of a with an out-edge leaving ancestors(a) + {a}.
    extra = [0] * n
    for a in range(n):
        keep = anc[a] | (1 << a)
        extra[a] = sum(1 << p for p in mask_bits(anc[a]) if outmask[p] & ~keep)

    def augment(ac: tuple[int, ...]) -> tuple[int, ...]:
        ex = 0
        for a in ac:
            ex |= extra[a]
        return tuple(mask_bits(ex)) + ac

    def deaugment(lst: list[int]) -> tuple[int, ...]:
        mask = 0
        for z in lst:
            mask |= 1 << z
        out: list[int] = []
        for z in lst:
            if not (desc[z] & mask) and z not in out:
                out.append(z)
        return tuple(out)

    first = next(i for i in range(n) if not ins[i])
    start = (first,)
    key0 = tuple(sorted(start))
    ids = {key0: 0}
    antichains = [start]
    arcs: list[list[int]] = [[]]
    processed: set[tuple[int, ...]] = set()
    queue = [start]
    head = 0
    while head < len(queue):
        ac = queue[head]
        head += 1
        key = tuple(sorted(ac))
        if key in processed:
            continue
        processed.add(key)
        aug = augment(ac)
        augmask = 0
        for z in aug:
            augmask |= 1 << z
        acset = set(ac)
        src = ids[key]
        for x in aug:
            for y in outs[x]:
                if y in acset or desc[y] & augmask:
                    continue
                nxt = deaugment([y if z == x else z for z in aug])
                nkey = tuple(sorted(nxt))
                if nkey not in ids:
                    ids[nkey] = len(antichains)
                    antichains.append(nxt)
                    arcs.append([])
                    if len(antichains) > max_states:
                        raise SizeLimitError(
                            f"{prep.source}: PipeDream's antichain DAG has more than {max_states} "
                            "states (its planner's tables grow as states^2 x workers); not planned"
                        )
                arcs[src].append(ids[nkey])
                queue.append(nxt)
    # Topological order: reverse post-order of an iterative DFS (states in discovery order,
    # arcs in insertion order), as a recursive DFS would give.
    S = len(antichains)
    marked = [False] * S
    post: list[int] = []
    for root in range(S):
        if marked[root]:
            continue
        marked[root] = True
        stack2 = [(root, 0)]
        while stack2:
            v, i = stack2[-1]
            if i < len(arcs[v]):
                stack2[-1] = (v, i + 1)
                w = arcs[v][i]
                if not marked[w]:
                    marked[w] = True
                    stack2.append((w, 0))
            else:
                stack2.pop()
                post.append(v)
    topo = post[::-1]
    pos = {s: i for i, s in enumerate(topo)}
    # Downsets and sums, in topological order.
    nodes = prep.nodes
    ac_t, aug_t, down_t = [], [], []
    time = np.empty(S)
    act = np.empty(S)
    par = np.empty(S)
    out_act = np.empty(S)
    members_t = []
    for i, s in enumerate(topo):
        ac = antichains[s]
        aug = augment(ac)
        down = 0
        for a in aug:
            down |= anc[a] | (1 << a)
        members = mask_bits(down)
        members_t.append(members)
        ac_t.append(ac)
        aug_t.append(aug)
        down_t.append(down)
        time[i] = math.fsum(nodes[v].time for v in members)
        act[i] = math.fsum(nodes[v].activation for v in members)
        par[i] = math.fsum(nodes[v].parameter for v in members)
        out_act[i] = math.fsum(nodes[a].activation for a in aug)
    # Ancestors in the antichain DAG (transitive), as bitmasks over topological positions.
    preds: list[list[int]] = [[] for _ in range(S)]
    for s in range(S):
        for t in arcs[s]:
            preds[pos[t]].append(pos[s])
    amask = _reach_masks(range(S), preds, S)
    ancestors = tuple(np.fromiter(mask_bits(amask[j]), dtype=np.int32) for j in range(S))
    exact = {
        "time": ExactSums([nd.time for nd in nodes], members_t),
        "activation": ExactSums([nd.activation for nd in nodes], members_t),
        "parameter": ExactSums([nd.parameter for nd in nodes], members_t),
    }
    states = States(
        tuple(ac_t), tuple(aug_t), tuple(down_t), time, act, par, out_act, ancestors, exact
    )
    prep._cache["states"] = states
    return states
