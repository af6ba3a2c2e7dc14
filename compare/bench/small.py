"""The small-DAG suite of the DP benchmark (``piper-ilp bench small``): random DAGs of
8-13 nodes of the shape families and ``numerics``, the size campaigns solve by the
thousand, each solved in this process and, with a reference planner, beside it.

Per instance and knapsack mode a row gives the DP's solve CPU (``time.process_time``
around :func:`dp.solve_dp` alone: the instance is made and the modules are loaded before),
its status, TPS and counts; with ``--reference`` the reference's fields of
:func:`compare.bench.dp.run_reference` (its own search CPU, its TPS) and ``ratio_search``
= our solve CPU / its search CPU. :func:`summary` gives per mode the median and the worst
ratio, overall and per family. Mode ``"compiled"`` solves with
the compiled prototype :func:`dp.compiled.solve_compiled` (exact knapsack): its rows add the
CPU of its Python set-up and of its kernel, and the kernel's one-time load (import, first
call) is measured before the solves and given apart (``cpu_kernel_load``); so is the
compiled greedy rule's (mode ``"greedy"``, :mod:`dp.greedy_kernel`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from compare.bench.dp import compare_reference, run_reference
from compare.builders.generators import FAMILIES, random_instance

__all__ = [
    "SMALL_FAMILIES",
    "SMALL_NODES",
    "SMALL_SEEDS",
    "small_instances",
    "run_small",
    "summary",
    "row_line",
]

#: The suite's families: the shapes and the numerics family (not the hostile family, whose
#: numbers at the ends of the supported range test robustness, not speed), fixed so that the
#: suite stays the same when a generator family is added.
SMALL_FAMILIES = (*FAMILIES, "numerics")
#: Node counts of the suite.
SMALL_NODES = tuple(range(8, 14))
#: Seeds per (family, node count): 7 families x 6 sizes x 3 seeds = 126 instances.
SMALL_SEEDS = (0, 1, 2)


def small_instances(
    families: Sequence[str] = SMALL_FAMILIES,
    nodes: Sequence[int] = SMALL_NODES,
    seeds: Sequence[int] = SMALL_SEEDS,
) -> list:
    """The suite's instances, each :func:`compare.builders.generators.random_instance`
    with its defaults (K, N drawn, tight memory, two options per (node, t)).

    Returns
    -------
    list of (family, Instance)

    Examples
    --------
    >>> len(small_instances())
    126
    """
    return [(f, random_instance(f, n, s)) for f in families for n in nodes for s in seeds]


def run_small(
    instances: Sequence,
    modes: Sequence[str] = ("exact",),
    *,
    reference: str | None = None,
    timeout: float = 60.0,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Solve every instance in every knapsack mode; with ``reference``, run it once per
    instance on the instance written to a file.

    Parameters
    ----------
    instances : sequence of (family, Instance)
    modes : sequence of {"exact", "greedy", "compiled"}
        Knapsack modes of :func:`dp.solve_dp`, or ``"compiled"``: the compiled prototype
        (:func:`dp.compiled.solve_compiled`).
    reference : str, optional
        The reference planner command (placeholders as ``piper-ilp bench --reference``).
    timeout : float
        Seconds before the reference is killed.
    on_row : callable, optional
        Called with each row as it is made.

    Returns
    -------
    list of dict
        One row per (instance, mode): name, family, nodes, mode, status, tps, cpu_solve,
        ideals, stage_candidates, thresholds, and the reference's fields; compiled rows
        also cpu_setup, cpu_kernel and cpu_kernel_load; greedy rows cpu_kernel_load (the
        compiled rule's one-time load, paid before the solves).
    """
    from dp import solve_dp
    from piper_ilp.instance import save_instance

    load = _load_compiled() if "compiled" in modes else None
    greedy_load = _load_greedy() if "greedy" in modes else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="piper-bench-small-") as tmp:
        for family, inst in instances:
            ref = None
            if reference is not None:
                path = Path(tmp) / "instance.json"
                save_instance(inst, path)
                ref = run_reference(reference, path, inst, timeout)
            for mode in modes:
                parts: dict = {}
                c0 = time.process_time()
                if mode == "compiled":
                    sol = load(inst, timings=parts)
                else:
                    sol = solve_dp(inst, knapsack=mode)
                cpu = time.process_time() - c0
                row = {
                    "name": inst.source,
                    "family": family,
                    "nodes": len(inst.nodes),
                    "mode": mode,
                    "status": sol.status.value,
                    "tps": sol.tps,
                    "cpu_solve": cpu,
                    "ideals": sol.info.get("ideals"),
                    "stage_candidates": sol.info.get("stage_candidates"),
                    "thresholds": sol.info.get("thresholds"),
                }
                if mode == "compiled":
                    row["cpu_setup"] = parts["setup"]
                    row["cpu_kernel"] = parts["kernel"]
                    row["cpu_kernel_load"] = load.cpu
                if mode == "greedy":
                    row["cpu_kernel_load"] = greedy_load
                if ref is not None:
                    row.update(compare_reference(row, ref))
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


def _load_compiled():
    """:func:`dp.compiled.solve_compiled` with its one-time cost paid and measured (the
    kernel's import and a first call on a 2-node chain: from numba's cache, or compiled)
    as the attribute ``cpu``."""
    c0 = time.process_time()
    from dp.compiled import solve_compiled

    solve_compiled(random_instance("chain", 2, 0))
    cpu = time.process_time() - c0

    def solve(inst, timings=None):
        return solve_compiled(inst, timings=timings)

    solve.cpu = cpu
    return solve


def _load_greedy() -> float:
    """The compiled greedy rule's one-time load (:func:`dp.greedy_tables.load_rule_kernel`:
    numba's import and the kernels from numba's cache, or their compile), paid and measured
    (CPU s) before the solves."""
    from dp.greedy_tables import load_rule_kernel

    c0 = time.process_time()
    load_rule_kernel()
    return time.process_time() - c0


def _stats(vals: list[float]) -> str:
    if not vals:
        return "-"
    return f"median {statistics.median(vals):.3g}, worst {max(vals):.3g} (n = {len(vals)})"


def summary(rows: Sequence[dict]) -> list[str]:
    """Lines: per mode, the solve CPU (total, median) and the ratio to the reference's
    search CPU (median and worst), overall and per family, and how many TPS agree.

    Examples
    --------
    >>> rows = [{"mode": "exact", "family": "chain", "cpu_solve": 0.02, "ratio_search": 2.0,
    ...          "tps_agree": True}]
    >>> summary(rows)[0]
    'exact: 1 instances, solve CPU 0.02 s in all, median 0.02 s'
    """
    out = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        cpu = [r["cpu_solve"] for r in mine]
        out.append(
            f"{mode}: {len(mine)} instances, solve CPU {sum(cpu):.3g} s in all, "
            f"median {statistics.median(cpu):.3g} s"
        )
        ratios = [r["ratio_search"] for r in mine if r.get("ratio_search") is not None]
        if ratios:
            out.append(f"  solve CPU / reference search CPU: {_stats(ratios)}")
            for fam in dict.fromkeys(r["family"] for r in mine):
                fr = [
                    r["ratio_search"]
                    for r in mine
                    if r["family"] == fam and r.get("ratio_search") is not None
                ]
                out.append(f"    {fam:<16} {_stats(fr)}")
        setup = [r["cpu_setup"] for r in mine if r.get("cpu_setup") is not None]
        if setup:
            kernel = [r["cpu_kernel"] for r in mine]
            out.append(
                f"  Python set-up {sum(setup):.3g} s in all (median {statistics.median(setup):.3g}"
                f" s), kernel {sum(kernel):.3g} s (median {statistics.median(kernel):.3g} s); "
                f"one-time load {mine[0]['cpu_kernel_load']:.3g} s"
            )
        if not setup and mine[0].get("cpu_kernel_load") is not None:
            out.append(
                f"  one-time load of the compiled rule {mine[0]['cpu_kernel_load']:.3g} s "
                "(not in solve CPU)"
            )
        agree = [r.get("tps_agree") for r in mine]
        if any(a is not None for a in agree):
            out.append(
                f"  TPS equal to the reference's: {agree.count(True)}, different: "
                f"{agree.count(False)}, unknown: {agree.count(None)}"
            )
    return out


def row_line(row: dict) -> str:
    """One table line for a row."""

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    return (
        f"{row['name']:<28} {row['mode']:<6} {row['status']:<10} {f(row.get('tps'), '.12g'):>18} "
        f"{row['cpu_solve']:8.4f} {f(row.get('ref_search_cpu'), '8.4f'):>8} "
        f"{f(row.get('ratio_search'), '8.2f'):>8} {f(row.get('stage_candidates'), 'd'):>8}"
    )
