"""Shrink a counterexample: the smallest instance on which a disagreement persists.

In the spirit of Hypothesis' shrinking (see ``docs`` style notes): given an instance
and a predicate ``fails(instance) -> bool`` (e.g. "``verify`` says mismatch"), try
smaller variants one at a time, keep the first that still fails, and start again,
until no variant fails (a local minimum) or the budget is spent. The variants, largest
simplification first:

1. drop a node (with its edges and the sfw / sbw entries that name it);
2. drop an edge (and its sfw / sbw entries);
3. drop a tensor-parallel degree t of a node (when it has another);
4. drop an option of a (node, t) (when it has another);
5. lower K (devices) and N (microbatches);
6. zero every c, every sfw / sbw, every w (weights), every b (static memory).

Every variant is built as JSON and validated by ``instance_from_dict``, so the result
is a valid instance that ``piper-ilp verify`` replays.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from piper_ilp.errors import InputError
from piper_ilp.instance import Instance, instance_from_dict, instance_to_dict

__all__ = ["ShrinkResult", "shrink", "variants"]


@dataclass
class ShrinkResult:
    """The smallest failing ``instance`` found, how many predicate ``checks`` were run,
    the simplification ``steps`` taken (one line each) and whether the search
    ``finished`` (reached a local minimum) or ran out of budget."""

    instance: Instance
    checks: int
    steps: list[str]
    finished: bool
    seconds: float


def _drop_node(d: dict, nid: int) -> dict:
    d = copy.deepcopy(d)
    key = str(nid)
    d["nodes"] = [n for n in d["nodes"] if n["id"] != nid]
    d["edges"] = [e for e in d["edges"] if nid not in (e["sourceId"], e["destId"])]
    for n in d["nodes"]:
        for opts in n["TMPCs"].values():
            for o in opts:
                o["syncTimeFw"].pop(key, None)
                o["syncTimeBw"].pop(key, None)
    return d


def _drop_edge(d: dict, u: int, v: int) -> dict:
    d = copy.deepcopy(d)
    d["edges"] = [e for e in d["edges"] if (e["sourceId"], e["destId"]) != (u, v)]
    for n in d["nodes"]:
        for opts in n["TMPCs"].values():
            for o in opts:
                if n["id"] == v:
                    o["syncTimeFw"].pop(str(u), None)
                if n["id"] == u:
                    o["syncTimeBw"].pop(str(v), None)
    return d


def _zero(d: dict, what: str) -> dict | None:
    d = copy.deepcopy(d)
    changed = False

    def set0(obj: dict, key: str):
        nonlocal changed
        if obj[key] != 0:
            obj[key] = 0
            changed = True

    if what == "c":
        for e in d["edges"]:
            set0(e, "communicationCost")
    for n in d["nodes"]:
        for opts in n["TMPCs"].values():
            for o in opts:
                if what == "sync":
                    for side in ("syncTimeFw", "syncTimeBw"):
                        for k in o[side]:
                            set0(o[side], k)
                elif what == "w":
                    set0(o, "parameterSize")
                elif what == "b":
                    set0(o, "memoryUsageB")
    return d if changed else None


def variants(instance: Instance) -> Iterator[tuple[str, dict]]:
    """Smaller variants of ``instance`` as (description, JSON dict), largest step first."""
    d = instance_to_dict(instance)
    if len(d["nodes"]) > 1:
        for n in d["nodes"]:
            yield f"drop node {n['id']}", _drop_node(d, n["id"])
    for e in d["edges"]:
        yield f"drop edge {e['sourceId']}->{e['destId']}", _drop_edge(d, e["sourceId"], e["destId"])
    for i, n in enumerate(d["nodes"]):
        tm = n["TMPCs"]
        if len(tm) > 1:
            for t in sorted(tm, key=int, reverse=True):
                v = copy.deepcopy(d)
                del v["nodes"][i]["TMPCs"][t]
                yield f"drop t = {t} of node {n['id']}", v
    for i, n in enumerate(d["nodes"]):
        for t, opts in n["TMPCs"].items():
            if len(opts) > 1:
                for k in range(len(opts) - 1, -1, -1):
                    v = copy.deepcopy(d)
                    del v["nodes"][i]["TMPCs"][t][k]
                    yield f"drop option {opts[k]['id']!r} (t = {t}) of node {n['id']}", v
    for key, name in (("maxDevices", "K"), ("mbsInBatch", "N")):
        cur = d[key]
        for smaller in sorted({1, cur // 2, cur - 1}):
            if 1 <= smaller < cur:
                v = copy.deepcopy(d)
                v[key] = smaller
                yield f"{name} = {smaller}", v
    for what, text in (
        ("c", "every edge's c = 0"),
        ("sync", "every sfw / sbw = 0"),
        ("w", "every w = 0"),
        ("b", "every b = 0"),
    ):
        v = _zero(d, what)
        if v is not None:
            yield text, v


def shrink(
    instance: Instance,
    fails: Callable[[Instance], bool],
    *,
    max_checks: int = 300,
    max_seconds: float = 300.0,
) -> ShrinkResult:
    """Shrink ``instance`` while ``fails`` stays true.

    Parameters
    ----------
    instance : Instance
        A failing instance (``fails(instance)`` is assumed true, not re-checked).
    fails : callable
        The property that must keep failing, e.g.
        ``lambda i: verify_instance(i, ...).verdict == "mismatch"``.
    max_checks, max_seconds : budget
        Stop (``finished`` = False) after this many predicate calls or seconds.

    Returns
    -------
    ShrinkResult
        The result's ``instance`` keeps the original ``source`` with ``" (shrunk)"``.

    Examples
    --------
    >>> from compare.builders.generators import random_instance
    >>> big = random_instance("chain", 6, 0)
    >>> res = shrink(big, lambda inst: len(inst.nodes) >= 2)
    >>> len(res.instance.nodes), res.finished
    (2, True)
    """
    start = time.perf_counter()
    source = (
        instance.source if instance.source.endswith("(shrunk)") else f"{instance.source} (shrunk)"
    )
    current = instance
    checks = 0
    steps: list[str] = []
    while True:
        progressed = False
        for text, data in variants(current):
            if checks >= max_checks or time.perf_counter() - start > max_seconds:
                return ShrinkResult(current, checks, steps, False, time.perf_counter() - start)
            try:
                candidate = instance_from_dict(data, source=source)
            except InputError:
                continue
            checks += 1
            if fails(candidate):
                current = candidate
                steps.append(text)
                progressed = True
                break
        if not progressed:
            if current is instance:
                current = instance_from_dict(instance_to_dict(instance), source=source)
            return ShrinkResult(current, checks, steps, True, time.perf_counter() - start)
