"""Greedy mode against a reference planner on random instances (``piper-ilp greedy-fuzz``).

The original C++ planner (Piper's ``algo.cpp``, built by the user outside this project)
chooses each stage's options with Piper's greedy rule (cost model sec. 5), and greedy mode
(``solve_dp(..., knapsack="greedy")``) must give the same answer. This module runs both on
random instances (by default the ``ties`` family of :mod:`compare.builders.generators`,
full of the ties that decide the rule) and compares:

* the TPS: equal within relative 1e-9 (sec. 6), or both "no plan";
* the plans' values: when the reference also writes its plan (placeholder ``{plan}``: a
  path it may write the plan JSON of sec. 2 to), the evaluator's value of that plan must
  equal ours within relative 1e-9.

The reference command follows the bench's reference output convention
(:func:`compare.bench.dp.parse_reference_output`: a line ``tps: Y``, inf when it found no
plan), with the placeholders ``{instance}`` (the instance JSON, written with K, M, N, B in
it), ``{plan}``, ``{devices}``, ``{memory}``, ``{batch}``, ``{bandwidth}``. Each instance gets
one of these outcomes:

``same``
    the TPS agree (or neither found a plan) and so do the plans' values;
``tps-differs``, ``plan-value-differs``
    a difference (a finding: greedy mode does not reproduce the reference);
``reference-plan-rejected``
    the evaluator rejects the reference's plan (e.g. its memory, summed in floats, rounded
    down to M while the exact sum of sec. 7 is above it): greedy mode, whose plans the
    evaluator accepts, cannot give it (``tps_agree`` says whether the TPS agree anyway);
``reference-failed``
    the reference exited non-zero, timed out or printed no ``tps:`` line (nothing to
    compare; counted apart);
``greedy-refused``
    greedy mode refused the instance (more than two options per node and t).
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from compare.bench.dp import parse_reference_output
from compare.builders.generators import ALL_FAMILIES, random_instance
from dp.solver import solve_dp
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance, save_instance
from piper_ilp.plan import plan_from_dict

__all__ = [
    "OUTCOMES",
    "DIFFERENCES",
    "PLACEHOLDERS",
    "check_fuzz_command",
    "compare_one",
    "fuzz_greedy",
]

PLACEHOLDERS = ("instance", "plan", "devices", "memory", "batch", "bandwidth")
OUTCOMES = (
    "same",
    "tps-differs",
    "plan-value-differs",
    "reference-plan-rejected",
    "reference-failed",
    "greedy-refused",
)
#: The outcomes that are differences between greedy mode and the reference.
DIFFERENCES = ("tps-differs", "plan-value-differs")
RTOL = 1e-9


def check_fuzz_command(command: str) -> None:
    """Refuse a reference command with an unknown placeholder or without {instance}.

    Raises
    ------
    InputError
        One line naming the problem.
    """
    probe = {k: "x" for k in PLACEHOLDERS}
    try:
        argv = shlex.split(command.format(**probe))
    except (KeyError, IndexError, ValueError) as exc:
        known = ", ".join("{" + k + "}" for k in PLACEHOLDERS)
        raise InputError(
            f"--reference: bad placeholder in {command!r} ({exc}); use {known}"
        ) from None
    if "{instance}" not in command:
        raise InputError(f"--reference: {command!r} has no {{instance}} placeholder")
    if not argv:
        raise InputError("--reference: empty command")


def _close(x: float, y: float) -> bool:
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= RTOL * max(abs(x), abs(y))


def _run(command: str, instance: Instance, folder: Path, timeout: float) -> dict:
    """Run the reference on ``instance`` (written into ``folder``): its TPS (inf: no plan)
    and its plan as a dict when it wrote one, or the reason it failed."""
    path, plan_path = folder / "instance.json", folder / "plan.json"
    save_instance(instance, path)
    plan_path.unlink(missing_ok=True)
    values = {
        "instance": shlex.quote(str(path)),
        "plan": shlex.quote(str(plan_path)),
        "devices": instance.K,
        "memory": repr(instance.M),
        "batch": instance.N,
        "bandwidth": repr(instance.B),
    }
    argv = shlex.split(command.format(**values))
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"failed": f"killed after {timeout:g} s"}
    except OSError as exc:
        raise InputError(f"--reference: cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    out = done.stdout.decode("utf-8", errors="replace")
    if done.returncode != 0:
        lines = [ln for ln in (out + done.stderr.decode("utf-8", "replace")).splitlines() if ln]
        return {"failed": f"exit status {done.returncode}: {lines[-1][:200] if lines else ''}"}
    parsed = parse_reference_output(out)
    if "ref_tps" not in parsed:
        return {"failed": "no 'tps:' line on its standard output"}
    got: dict = {"tps": parsed["ref_tps"]}
    if plan_path.exists() and not math.isinf(parsed["ref_tps"]):
        got["plan"] = json.loads(plan_path.read_text())
    return got


def compare_one(instance: Instance, command: str, folder: Path, timeout: float = 60.0) -> dict:
    """Greedy mode and the reference planner on one instance.

    Parameters
    ----------
    instance : Instance
    command : str
        The reference command (see the module's placeholders).
    folder : Path
        A folder for the instance and plan files.
    timeout : float
        Seconds before the reference is killed.

    Returns
    -------
    dict
        ``outcome`` (one of :data:`OUTCOMES`), ``tps`` (ours; inf: no plan), ``ref_tps``,
        ``ref_plan_value`` (the evaluator's value of the reference's plan, when it wrote
        one), and ``message`` where there is something to say.
    """
    record: dict = {"instance": instance.source}
    try:
        sol = solve_dp(instance, knapsack="greedy")
    except InputError as exc:
        return {**record, "outcome": "greedy-refused", "message": str(exc)}
    ours = sol.tps if sol.plan is not None else math.inf
    record["tps"] = ours
    ref = _run(command, instance, folder, timeout)
    if "failed" in ref:
        return {**record, "outcome": "reference-failed", "message": ref["failed"]}
    theirs = ref["tps"]
    record["ref_tps"] = theirs
    if "plan" in ref:
        try:
            ev = evaluate(instance, plan_from_dict(ref["plan"], source="the reference's plan"))
            why = ev.violations[0].message if ev.violations else None
        except InputError as exc:
            why = str(exc)
        if why is not None:  # a plan outside the contract: nothing greedy mode must reproduce
            record["tps_agree"] = _close(ours, theirs)
            return {**record, "outcome": "reference-plan-rejected", "message": why}
        record["ref_plan_value"] = ev.value
    if not _close(ours, theirs):
        return {**record, "outcome": "tps-differs"}
    if "ref_plan_value" in record and not _close(ours, record["ref_plan_value"]):
        return {**record, "outcome": "plan-value-differs"}
    return {**record, "outcome": "same"}


def fuzz_greedy(
    command: str,
    *,
    family: str = "ties",
    count: int = 2000,
    seed: int = 0,
    nodes: tuple[int, int] = (2, 7),
    t_values: Sequence[int] = (1, 2),
    integer: bool = False,
    K: int | None = None,
    N: int | None = None,
    timeout: float = 60.0,
    on_record: Callable[[dict], None] | None = None,
) -> dict:
    """Greedy mode against the reference on ``count`` random instances.

    Parameters
    ----------
    command : str
        The reference command (see the module's placeholders).
    family : str
        A family of :mod:`compare.builders.generators` (default ``ties``).
    count, seed : int
        Instance i is ``random_instance(family, n_i, seed + i, ...)``.
    nodes : (low, high)
        Node counts, in turn from low to high.
    t_values : sequence of int
        Tensor-parallel degrees offered.
    integer : bool
        Whole numbers only (the generator's ``integer``).
    K, N : int, optional
        Devices and microbatches of every instance (default: the family draws them).
    timeout : float
        Seconds per reference run.
    on_record : callable, optional
        Called with each instance's record (:func:`compare_one`, plus ``seed`` and
        ``nodes``) as it is made.

    Returns
    -------
    dict
        ``counts`` per outcome, ``differences`` (the records of the outcomes in
        :data:`DIFFERENCES`), ``plans_compared`` (records where the reference's plan value
        was compared), and the run's parameters.

    Raises
    ------
    InputError
        A bad family, node range or command.
    """
    if family not in ALL_FAMILIES:
        raise InputError(f"unknown family {family!r}; choose one of {', '.join(ALL_FAMILIES)}")
    lo, hi = nodes
    if not 1 <= lo <= hi:
        raise InputError(f"--nodes: expected 1 <= low <= high, got {lo}-{hi}")
    check_fuzz_command(command)
    counts = {k: 0 for k in OUTCOMES}
    differences = []
    compared = 0
    with tempfile.TemporaryDirectory(prefix="piper-greedy-fuzz-") as tmp:
        for i in range(count):
            n = lo + i % (hi - lo + 1)
            inst = random_instance(
                family, n, seed + i, t_values=t_values, integer=integer, K=K, N=N
            )
            rec = {"seed": seed + i, "nodes": n, **compare_one(inst, command, Path(tmp), timeout)}
            counts[rec["outcome"]] += 1
            compared += "ref_plan_value" in rec
            if rec["outcome"] in DIFFERENCES:
                differences.append(rec)
            if on_record is not None:
                on_record(rec)
    return {
        "family": family,
        "count": count,
        "seed": seed,
        "nodes": [lo, hi],
        "t_values": list(t_values),
        "integer": integer,
        "K": K,
        "N": N,
        "counts": counts,
        "plans_compared": compared,
        "differences": differences,
    }
