"""An exact search over chains of successor-closed sets, answering the rounds of the column
method (``docs/milp.md``, "Stage columns under graph pipelining", "Chain search") without a
solver: is there a plan whose stages are given columns within K devices (and under the batch
time, what is its least longest latency path)?

A plan's stages in a reverse topological order of its stage graph are a chain
{} = J_0 ⊂ J_1 ⊂ ... ⊂ V of successor-closed sets (J_k the union of the last k stages), so
the search walks the sets by size and keeps, per set J, labels: the devices used, and the h
(microbatches held, h_S = d_S + max over S's successors' h) and the latency path of the
stage holding each *frontier* node of J (a node of J with a predecessor outside J: the only
nodes a later-added stage has edges into). Adding a column c = I \\ J takes its heads' h (all
frontier nodes of J), checks max h <= c's limit (the column's memory), and gives the frontier
of I. A label no better than another of the same set in every entry is dropped; a label whose
devices plus the fewest devices any chain from its set to V needs (memory aside) exceed K is
dropped.
"""

from __future__ import annotations

import time

from piper_ilp.bitmask import mask_bits
from piper_ilp.milp.graph_columns import Column, ColumnCatalog, moved
from piper_ilp.milp.graph_orbits import invert
from piper_ilp.milp.path_arcs import TimeUp

__all__ = ["ChainAnswer", "chain_search", "DEFAULT_MAX_LABELS"]

#: The search gives up (returns None, the caller asks CP-SAT instead) above this many labels.
DEFAULT_MAX_LABELS = 400_000


class ChainAnswer:
    """The outcome of :func:`chain_search`: the columns of a plan (None: no plan within
    K devices), its least longest latency path in the caller's units (0 for feasibility)
    and the labels kept."""

    def __init__(self, columns: list[Column] | None, latency: int, labels: int):
        self.columns = columns
        self.latency = latency
        self.labels = labels


def chain_search(
    catalog: ColumnCatalog,
    cols: list[Column],
    K: int,
    latency: list[int] | None = None,
    deadline: float | None = None,
    max_labels: int = DEFAULT_MAX_LABELS,
) -> ChainAnswer | None:
    """A plan over ``cols`` within ``K`` devices (the least longest latency path, when
    ``latency`` gives each column's integer latency), or a proof that there is none.

    Why the answer is exact: every plan over ``cols`` is a chain of successor-closed sets
    (see the module text) whose labels the search builds one column at a time; a label
    dropped for dominance has one kept at the same set with no more devices and no larger
    h or latency at any frontier node, and every column that extends the dropped one
    extends the kept one too (its heads' h only smaller: the limit still holds) with no
    worse outcome, because h_S, the latency path and the devices are monotone in those
    entries. A label dropped by the device bound has no completion within K: the rest of
    any plan from its set is a chain of columns from the set to V, at least the least
    such chain's devices (:func:`_rest_devices`). So "no plan" is a proof, and a plan
    found is one the caller checks with the evaluator.

    Parameters
    ----------
    catalog : ColumnCatalog
        Gives the node graph (``pred``, ``succ``) and the successor-closed sets.
    cols : list of Column
    K : int
        Devices.
    latency : list of int, optional
        One integer per column; then the answer minimizes the longest path's latency
        (the sum along a path of the stage graph), else any plan within K is the answer.
    deadline : float, optional
        ``time.process_time()`` value; past it :class:`TimeUp` is raised.
    max_labels : int
        Give up (return None) when the labels kept pass this.

    Returns
    -------
    ChainAnswer or None
        None when the search gave up (too many labels).

    Raises
    ------
    TimeUp
        Past ``deadline``.
    """
    sets = catalog.sets
    full = sets[-1]
    index = {c_id: k for k, c_id in enumerate(map(id, cols))}
    by_mask: dict[int, list[Column]] = {}
    for c in cols:
        by_mask.setdefault(c.mask, []).append(c)
    ups = {
        J: [(I, m) for I, m in catalog.supersets(J, deadline) if m in by_mask] for J in catalog.walk
    }
    rest = _rest_devices(catalog, by_mask, ups)
    if rest[0] > K:
        return ChainAnswer(None, 0, 0)
    # labels[J]: list of (devices, h tuple, L tuple, Lmax, back); back = (J, k, column, I):
    # the label came from label k of J by the column, at I (moved to I's canonical form)
    labels: dict[int, list[tuple]] = {0: [(0, (), (), 0, None)]}
    keys: dict[int, tuple[int, ...]] = {0: ()}
    targets: dict[int, tuple[int, tuple[int, ...]]] = {}
    count = 1
    for J in catalog.walk:
        here = labels.pop(J, None)
        if not here:
            continue
        if J == full:
            labels[J] = here
            return _finish(labels, catalog, latency is not None, count)
        if deadline is not None and time.process_time() > deadline:
            raise TimeUp()
        slot = {u: k for k, u in enumerate(keys[J])}
        for I, mask in ups[J]:
            if I not in targets:
                targets[I] = _target(catalog, I, keys)
            home, src = targets[I]
            room = K - rest[home]
            for c in by_mask[mask]:
                if c.devices > room:
                    continue
                heads = [slot[u] for u in mask_bits(c.heads)]
                own = 0 if latency is None else latency[index[id(c)]]
                for k, (dev, h, L, top, _) in enumerate(here):
                    devices = dev + c.devices
                    if devices > room:
                        continue
                    behind = max((h[s] for s in heads), default=0)
                    if behind > c.limit:
                        continue
                    hs = c.d + behind
                    ls = own + max((L[s] for s in heads), default=0)
                    # the frontier of I listed in the order of its canonical form's
                    nh = tuple(hs if mask >> u & 1 else h[slot[u]] for u in src)
                    nl = tuple(ls if mask >> u & 1 else L[slot[u]] for u in src)
                    label = (devices, nh, nl, max(top, ls), (J, k, c, I))
                    count += _insert(labels.setdefault(home, []), label, latency is not None)
                    if count > max_labels:
                        return None
        labels[J] = here  # kept for the way back
    return ChainAnswer(None, 0, count)


def _target(catalog: ColumnCatalog, I: int, keys: dict) -> tuple[int, tuple[int, ...]]:
    """Where a label reaching the set I is kept (I's canonical form) and the frontier
    nodes of I in the order of that form's frontier (the node each entry is moved to)."""
    home, rho = catalog.frame(I)
    if home not in keys:
        pred = catalog.pred
        keys[home] = tuple(u for u in mask_bits(home) if pred[u] & ~home)
    if rho is None:
        return home, keys[home]
    back = invert(rho)
    return home, tuple(back[u] for u in keys[home])


def _dominates(a: tuple, b: tuple, timed: bool) -> bool:
    """Label a is no worse than b in devices, every h and (timed) every latency path."""
    if a[0] > b[0] or any(x > y for x, y in zip(a[1], b[1])):
        return False
    return not timed or (a[3] <= b[3] and all(x <= y for x, y in zip(a[2], b[2])))


def _insert(kept: list[tuple], label: tuple, timed: bool) -> int:
    """Add ``label`` to the labels of one set unless one of them dominates it, dropping
    those it dominates; the change in their number."""
    for other in kept:
        if _dominates(other, label, timed):
            return 0
    before = len(kept)
    kept[:] = [o for o in kept if not _dominates(label, o, timed)]
    kept.append(label)
    return len(kept) - before


def _finish(labels: dict, catalog: ColumnCatalog, timed: bool, count: int) -> ChainAnswer:
    """The plan of the best label at the whole graph (least latency path, or any), its
    columns moved into one frame: each step back composes the move made at its set."""
    here = labels[catalog.sets[-1]]
    best = min(here, key=lambda lab: (lab[3], lab[0])) if timed else here[0]
    columns = []
    back = best[4]
    frame: tuple[int, ...] | None = None  # from the current label's frame to the last one's
    while back is not None:
        J, k, c, I = back
        rho = catalog.frame(I)[1]
        if rho is not None:
            frame = rho if frame is None else tuple(frame[q] for q in rho)
        columns.append(c if frame is None else moved(c, frame, catalog.ids))
        back = labels[J][k][4]
    return ChainAnswer(columns, best[3], count)


def _rest_devices(catalog: ColumnCatalog, by_mask: dict, ups: dict) -> dict[int, float]:
    """For each set J of the walk, the fewest devices of a chain of columns from J to the
    whole graph (memory aside; inf when there is none): a lower bound on the devices of
    any plan's stages outside J (an automorphism keeps it: a set counts as its canonical
    form, which comes later in the walk, by size)."""
    walk = catalog.walk
    rest = {J: float("inf") for J in walk}
    rest[catalog.sets[-1]] = 0
    walked = catalog.orbits is not None
    for J in reversed(walk):
        for I, mask in ups[J]:
            home = catalog.frame(I)[0] if walked else I
            least = min(c.devices for c in by_mask[mask]) + rest[home]
            if least < rest[J]:
                rest[J] = least
    return rest
