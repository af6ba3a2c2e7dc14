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
from piper_ilp.mode import (
    IN_FLIGHT_RULES,
    MODE_KEYS,
    OBJECTIVES,
    PIPELINES,
    SCHEDULES,
    check_choice,
)
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
    """One pipeline stage (cost model sec. 2).

    Parameters
    ----------
    nodes : tuple of int
        The stage's node ids (the instance's own ids).
    d : int
        The data-parallel degree.
    t : int
        The tensor-parallel degree.
    options : mapping
        The option id chosen for each node, ``{node id: option id}``.
    """

    nodes: tuple[int, ...]
    d: int
    t: int
    options: Mapping[int, str]


@dataclass(frozen=True)
class Plan:
    """A plan: its stages in pipeline order, stage 0 holding the model's inputs (cost model
    sec. 2).

    Only the shape is checked when a plan is read; :func:`piper_ilp.evaluate.evaluate`
    decides whether it is valid for an instance.

    Parameters
    ----------
    stages : tuple of Stage
    metadata : mapping
        What the plan was solved for (:func:`plan_metadata`); empty when unknown. Not
        compared by ``==``.

    Examples
    --------
    >>> plan = Plan((Stage((0, 1), 2, 1, {0: "vanilla", 1: "vanilla"}),
    ...              Stage((2,), 1, 4, {2: "vanilla"})))
    >>> plan.devices, plan.sum_d  # 2 * 1 + 1 * 4 devices; 2 + 1
    (6, 3)
    """

    stages: tuple[Stage, ...]
    #: What the plan was solved for (see :func:`plan_metadata`); empty when unknown.
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def devices(self) -> int:
        """The devices the plan uses: the sum over stages of t * d (at most K)."""
        return sum(s.t * s.d for s in self.stages)

    @property
    def sum_d(self) -> int:
        """The sum over stages of d (at most N)."""
        return sum(s.d for s in self.stages)


def plan_from_dict(data: Any, source: str = "<plan>") -> Plan:
    """Build a :class:`Plan` from parsed JSON, checking its shape only (cost model sec. 2).

    ``TMPCids`` may be an object ``{"node id": "option id"}`` or the original C++ tool's
    list of ``[node id, option id]`` pairs. An optional ``metadata`` object is kept whole
    (:attr:`Plan.metadata`), with the fields that match a plan to its instance (instance,
    K, N, M, B, pipeline, objective, schedule) checked for type.

    Parameters
    ----------
    data : any
        The parsed JSON.
    source : str
        The file, named in messages.

    Returns
    -------
    Plan

    Raises
    ------
    InputError
        One line naming ``source`` and the place, when the JSON does not have the plan
        format's shape: missing fields, wrong types, node ids or degrees outside the
        supported range, node-id keys not written canonically, two options for one node.

    Examples
    --------
    >>> plan = plan_from_dict({"stages": [{"nodes": [0, 1], "dataParallelDegree": 2,
    ...     "tensorParallelDegree": 1, "TMPCids": [[0, "vanilla"], [1, "activation recomp"]]}]})
    >>> plan.stages[0].options
    {0: 'vanilla', 1: 'activation recomp'}
    >>> plan_from_dict({"stages": [{"nodes": [0]}]}, source="p.json")
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: p.json: stages[0]: missing field 'dataParallelDegree'
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
        metadata = _check_metadata(data["metadata"], fail, display_path(source))
    return Plan(tuple(stages), metadata=metadata)


#: The metadata fields that are checked (when present) and their expected kinds.
_METADATA_KINDS = {
    "instance": "string",
    "K": "integer",
    "N": "integer",
    "M": "number",
    "B": "number",
}


def _check_metadata(meta: Any, fail, where: str) -> dict[str, Any]:
    """The plan's ``metadata`` object: kept whole (unknown keys too), with the fields
    used to match a plan to its instance checked for type (the mode's choices by
    :func:`~piper_ilp.mode.check_choice`, naming ``where`` and the field)."""
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
        if meta.get(key) is not None:
            check_choice(meta[key], allowed, f"{where}: metadata.{key}")
    return dict(meta)


def load_plan(path: str | Path) -> Plan:
    """Read a plan JSON file (:func:`plan_from_dict`; either ``TMPCids`` form).

    The file is read as strictly as an instance (:func:`piper_ilp.jsonfile.read_json`).

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Plan
        With the file's optional ``metadata`` object in :attr:`Plan.metadata`.

    Raises
    ------
    InputError
        One line naming the file: unreadable, not strict JSON, or not a plan's shape.
    """
    return plan_from_dict(read_json(path), source=str(path))


def plan_to_dict(plan: Plan) -> dict:
    """The plan in the object form of cost model sec. 2 (without its metadata).

    Parameters
    ----------
    plan : Plan

    Returns
    -------
    dict
        ``{"stages": [...]}``; each stage's ``TMPCids`` an object keyed by node id as a
        string, in the stage's node order (a node without an option is left out).

    Examples
    --------
    >>> plan_to_dict(Plan((Stage((3,), 1, 2, {3: "vanilla"}),)))["stages"][0]
    {'nodes': [3], 'dataParallelDegree': 1, 'tensorParallelDegree': 2, 'TMPCids': {'3': 'vanilla'}}
    """
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
    """The record a saved plan carries of what it was solved for.

    Parameters
    ----------
    instance : Instance
        The instance as loaded, with the command line's settings applied but before any
        restriction removes options (:meth:`Restrictions.apply` changes the fingerprint):
        ``evaluate`` compares the fingerprint with the file it is given.
    method : str
        The method that made the plan.
    restrictions : mapping, optional
        The restrictions solved under (``Restrictions.to_dict()``).
    mode : str, optional
        The method's own mode (the DP's knapsack: exact or greedy).
    problem : mapping, optional
        The problem solved, ``Mode.to_dict()``: keys ``pipeline``, ``objective``,
        ``schedule`` and ``in_flight`` (contract secs. 8, 9 and 11); a key left out takes
        the default mode's value. ``evaluate`` and ``simulate`` judge the plan in it unless
        told otherwise, and say so when told another in-flight rule.

    Returns
    -------
    dict
        The instance's fingerprint, K, M, N, B, the restrictions, the method, its mode,
        the problem's four keys and the version.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> node = (0, {"1": [option_dict("v", p=1.0, w=0, a=0, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=2, M=10, N=2, B=1))
    >>> meta = plan_metadata(inst, method="dp", problem={"in_flight": "schedule"})
    >>> meta["pipeline"], meta["in_flight"]
    ('sequential', 'schedule')
    """
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
    """Write a plan file (atomically), readable by :func:`load_plan`.

    Parameters
    ----------
    plan : Plan
    path : str or Path
    metadata : mapping, optional
        Written under the key ``"metadata"``; by default the plan's own. Left out when
        empty.

    Raises
    ------
    InputError
        The file cannot be written (:func:`piper_ilp.files.atomic_write_text`).
    """
    data = plan_to_dict(plan)
    meta = metadata if metadata is not None else plan.metadata
    if meta:
        data["metadata"] = dict(meta)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
