"""Plans: the pipeline stages with their degrees and option choices (cost model sec. 2).

A plan is read in either ``TMPCids`` form (an object ``{"node": "option"}`` or the
original C++ tool's list of ``[node, option]`` pairs) and written in the object form.
Reading checks only the shape; whether a plan is *valid* for an instance is the
evaluator's question (:func:`piper_ilp.evaluate.evaluate`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from piper_ilp.errors import InputError
from piper_ilp.files import atomic_write_text
from piper_ilp.instance import ID_MAX, ID_MIN
from piper_ilp.jsonfile import (
    CANONICAL_INT,
    describe_value,
    display_path,
    is_int,
    is_number,
    is_text,
    read_json,
    short_repr,
)
from piper_ilp.mode import IN_FLIGHT_RULES, MODE_KEYS, OBJECTIVES, PIPELINES, SCHEDULES
from piper_ilp.version import __version__

__all__ = [
    "Stage",
    "Plan",
    "load_plan",
    "plan_from_dict",
    "plan_metadata",
    "plan_to_dict",
    "save_plan",
]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its node ids, data-parallel degree ``d``, tensor-parallel
    degree ``t`` and the option id chosen for each of its nodes."""

    nodes: tuple[int, ...]
    d: int
    t: int
    options: Mapping[int, str]


@dataclass(frozen=True)
class Plan:
    """Stages in pipeline order (stage 0 holds the model's inputs)."""

    stages: tuple[Stage, ...]
    #: What the plan was solved for (see :func:`plan_metadata`); empty when unknown.
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def devices(self) -> int:
        """sum over stages of t * d."""
        return sum(s.t * s.d for s in self.stages)

    @property
    def sum_d(self) -> int:
        """sum over stages of d."""
        return sum(s.d for s in self.stages)


def plan_from_dict(data: Any, source: str = "<plan>") -> Plan:
    """Build a :class:`Plan` from parsed JSON, checking its shape only.

    Raises
    ------
    InputError
        When the JSON does not have the plan format's shape (missing fields, wrong types).
    """

    def fail(where: str, msg: str):
        raise InputError(f"{display_path(source)}: {where}: {msg}")

    def node_id(x, where: str) -> int:
        if not is_int(x):
            fail(where, f"expected an integer node id, got {describe_value(x)}")
        if not ID_MIN <= x <= ID_MAX:
            fail(
                where,
                f"node id {short_repr(x)} is outside the supported range [{ID_MIN}, {ID_MAX}]",
            )
        return x

    if not isinstance(data, dict) or "stages" not in data:
        fail("top level", "expected an object with a 'stages' array")
    raw = data["stages"]
    if not isinstance(raw, list):
        fail("stages", f"expected an array, got {describe_value(raw)}")
    stages = []
    for i, rs in enumerate(raw):
        where = f"stages[{i}]"
        if not isinstance(rs, dict):
            fail(where, f"expected an object, got {describe_value(rs)}")
        for key in ("nodes", "dataParallelDegree", "tensorParallelDegree", "TMPCids"):
            if key not in rs:
                fail(where, f"missing field '{key}'")
        nodes = rs["nodes"]
        if not isinstance(nodes, list):
            fail(
                f"{where}.nodes",
                f"expected an array of integer node ids, got {describe_value(nodes)}",
            )
        for j, x in enumerate(nodes):
            node_id(x, f"{where}.nodes[{j}]")
        for key in ("dataParallelDegree", "tensorParallelDegree"):
            if not is_int(rs[key]):
                fail(f"{where}.{key}", f"expected an integer, got {describe_value(rs[key])}")
            if not ID_MIN <= rs[key] <= ID_MAX:
                fail(
                    f"{where}.{key}",
                    f"{short_repr(rs[key])} is outside the supported range [{ID_MIN}, {ID_MAX}]",
                )
        tm = rs["TMPCids"]
        options: dict[int, str] = {}
        items: list[tuple[int, Any]] = []
        if isinstance(tm, dict):
            for k, v in tm.items():
                if is_int(k):  # a dict built in Python
                    items.append((node_id(k, f"{where}.TMPCids[{k}]"), v))
                    continue
                if not (isinstance(k, str) and CANONICAL_INT.fullmatch(k) and len(k) <= 20):
                    fail(
                        f"{where}.TMPCids",
                        f"key {short_repr(k)} is not a node id (an integer without '+', spaces or "
                        "leading zeros)",
                    )
                items.append((node_id(int(k), f"{where}.TMPCids[{k!r}]"), v))
        elif isinstance(tm, list):
            for j, pair in enumerate(tm):
                if not (isinstance(pair, list) and len(pair) == 2):
                    fail(f"{where}.TMPCids[{j}]", "list form needs [nodeId, optionId] pairs")
                items.append((node_id(pair[0], f"{where}.TMPCids[{j}][0]"), pair[1]))
        else:
            fail(
                f"{where}.TMPCids",
                f"expected an object or a list of pairs, got {describe_value(tm)}",
            )
        for nid, v in items:
            if not is_text(v):
                fail(
                    f"{where}.TMPCids",
                    f"option for node {nid} must be a string, got {describe_value(v)}",
                )
            if nid in options:
                fail(f"{where}.TMPCids", f"two entries for node {nid}")
            options[nid] = v
        stages.append(
            Stage(tuple(nodes), rs["dataParallelDegree"], rs["tensorParallelDegree"], options)
        )
    metadata: dict[str, Any] = {}
    if "metadata" in data:
        metadata = _check_metadata(data["metadata"], fail)
    return Plan(tuple(stages), metadata=metadata)


#: The metadata fields that are checked (when present) and their expected kinds.
_METADATA_KINDS = {
    "instance": "string",
    "K": "integer",
    "N": "integer",
    "M": "number",
    "B": "number",
}


def _check_metadata(meta: Any, fail) -> dict[str, Any]:
    """The plan's ``metadata`` object: kept whole (unknown keys too), with the fields
    used to match a plan to its instance checked for type."""
    if not isinstance(meta, dict):
        fail("metadata", f"expected an object, got {describe_value(meta)}")
    for key, kind in _METADATA_KINDS.items():
        if key not in meta or meta[key] is None:
            continue
        x = meta[key]
        ok = is_text(x) if kind == "string" else is_int(x) if kind == "integer" else is_number(x)
        if not ok:
            fail(
                f"metadata.{key}",
                f"expected {'an' if kind == 'integer' else 'a'} {kind}, got {describe_value(x)}",
            )
    for key, allowed in (
        ("pipeline", PIPELINES),
        ("objective", OBJECTIVES),
        ("schedule", SCHEDULES),
        ("in_flight", IN_FLIGHT_RULES),
    ):
        if meta.get(key) is not None and meta[key] not in allowed:
            fail(
                f"metadata.{key}",
                f"expected one of {', '.join(allowed)}, got {describe_value(meta[key])}",
            )
    return dict(meta)


def load_plan(path: str | Path) -> Plan:
    """Read a plan JSON file (either ``TMPCids`` form), with its optional ``metadata``
    object in :attr:`Plan.metadata`. Raises InputError on a bad shape (the file is
    read as strictly as an instance: see :func:`piper_ilp.instance.load_instance`)."""
    return plan_from_dict(read_json(path), source=str(path))


def plan_to_dict(plan: Plan) -> dict:
    """The plan in the object form of sec. 2."""
    return {
        "stages": [
            {
                "nodes": list(s.nodes),
                "dataParallelDegree": s.d,
                "tensorParallelDegree": s.t,
                "TMPCids": {str(v): s.options[v] for v in s.nodes if v in s.options},
            }
            for s in plan.stages
        ]
    }


def plan_metadata(
    instance,
    *,
    method: str,
    restrictions: Mapping[str, Any] | None = None,
    mode: str | None = None,
    problem: Mapping[str, str] | None = None,
) -> dict:
    """The record a saved plan carries of what it was solved for: the instance's
    fingerprint, K, M, N, B, the restrictions, the method and its ``mode`` (the DP's
    knapsack: exact or greedy), the ``problem`` solved (``Mode.to_dict()``: keys
    ``pipeline``, ``objective``, ``schedule``, ``in_flight``, contract secs. 8, 9 and 11;
    by default the default mode; ``evaluate`` judges the plan in it unless told otherwise)
    and the version.

    ``instance`` is the instance as loaded, with the command line's settings applied but
    before any restriction removes options (:meth:`Restrictions.apply` changes the
    fingerprint): ``evaluate`` compares the fingerprint with the file it is given."""
    return {
        "instance": instance.fingerprint(),
        "K": instance.K,
        "M": instance.M,
        "N": instance.N,
        "B": instance.B,
        "restrictions": dict(restrictions or {}),
        "method": method,
        "mode": mode,
        "pipeline": "sequential",
        "objective": "throughput",
        "schedule": "1f1b",
        "in_flight": "piper",
        **{k: problem[k] for k in MODE_KEYS if k in (problem or {})},
        "version": __version__,
    }


def save_plan(plan: Plan, path: str | Path, metadata: Mapping[str, Any] | None = None) -> None:
    """Write the plan in the object form, with ``metadata`` (or the plan's own) under
    the key ``"metadata"`` when there is any."""
    data = plan_to_dict(plan)
    meta = metadata if metadata is not None else plan.metadata
    if meta:
        data["metadata"] = dict(meta)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
