"""Benchmark of the exact MILP on its two backends (CP-SAT, CBC through PuLP).

For random DAGs of 4 to 16 nodes (several seeds per size, the families of
:mod:`compare.builders.generators`) and for the published ``bert32a100.json`` profile with
K in {4, 8, 16}, it runs each backend with a time limit and prints, per row: the model's
size (variables, constraints), how many runs proved optimality or infeasibility, the
median time to that proof, and for the runs stopped by the limit the gap reached
(``(tps - bound) / tps``).

Run it with ``piper-ilp bench milp``::

    piper-ilp bench milp            # 5 seeds per size, 60 s limit (about 15-25 min)
    piper-ilp bench milp --quick    # 2 seeds, sizes 4 and 8, 10 s limit, bert K=4 only
    piper-ilp bench milp --json out.json
    piper-ilp bench milp --hint-from-dp --backends cpsat   # the DP's plan as hint and cutoff

Runs are sequential (one solver at a time, ``--threads`` each for CP-SAT and CBC, default
2; SCIP always runs 1: :data:`piper_ilp.milp.scip.THREADS`), so the numbers are wall-clock
times (and CPU times) on the machine it runs on; each run and row shows the threads the
solver reported. CPU seconds count this process (CP-SAT's and SCIP's threads, the model,
the certification) and its child processes that ended (CBC runs as one; ``child_cpu_seconds``
holds their share): :func:`cpu_seconds`.
"""

from __future__ import annotations

import resource
import statistics
import time

from compare.bench.dp import find_profiles
from compare.builders.generators import FAMILIES, random_instance
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance, load_instance
from piper_ilp.milp import BACKENDS, model_size, solve_milp
from piper_ilp.solution import Status

__all__ = ["run", "table", "cpu_seconds", "CPU_COUNTED"]

#: What the CPU columns count (the header says it).
CPU_COUNTED = "CPU s: this process and its ended child processes (CBC's solver)"

#: The published profile measured with several K.
BERT = "bert32a100"


def _cases(sizes, seeds, bert_ks, memory, profiles):
    """(group label, instance) pairs: random DAGs per size, then bert per K."""
    for n in sizes:
        for seed in range(seeds):
            family = FAMILIES[seed % len(FAMILIES)]
            yield f"random n={n}", random_instance(family, n, seed, memory=memory)
    if bert_ks:
        bert = load_instance(find_profiles(profiles, [BERT]) / f"{BERT}.json")
        for K in bert_ks:
            yield f"bert32a100 K={K}", bert.with_settings(K=K)


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds of this process and of its ended, waited-for child processes, the
    children's share): user and system time, from ``time.process_time`` and
    ``getrusage(RUSAGE_CHILDREN)``. A backend that solves in a child process (CBC) is
    counted only through the second."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = children.ru_utime + children.ru_stime
    return time.process_time() + child, child


def _run_one(inst: Instance, backend: str, time_limit: float, threads: int, hint=None) -> dict:
    t0 = time.perf_counter()
    c0, child0 = cpu_seconds()
    try:
        sol = solve_milp(
            inst, backend=backend, time_limit=time_limit, threads=threads, force=True, hint=hint
        )
    except SizeLimitError as exc:  # not with force=True, but keep the run going
        return {"status": "refused", "message": str(exc)}
    c1, child1 = cpu_seconds()
    return {
        "instance": inst.source,
        "K": inst.K,
        "N": inst.N,
        "nodes": len(inst.nodes),
        "backend": backend,
        "status": sol.status.value,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": c1 - c0,
        "child_cpu_seconds": child1 - child0,
        "solver_seconds": sol.info.get("solver_seconds"),
        "hint": sol.info.get("hint"),
        "tps": sol.tps,
        "bound": sol.bound,
        "gap": sol.gap,
        "variables": sol.info["variables"],
        "constraints": sol.info["constraints"],
        "scaling_error": sol.info.get("scaling_error"),
        "threads": sol.info.get("threads"),  # what ran (SCIP: 1, whatever was asked)
    }


def run(
    sizes=(4, 8, 12, 16),
    seeds=5,
    bert_ks=(4, 8, 16),
    time_limit=60.0,
    threads=2,
    backends=BACKENDS,
    memory=0.6,
    log=print,
    hint_from_dp=False,
    profiles=None,
):
    """Run the benchmark; returns the list of per-run records (see :func:`_run_one`).
    ``profiles``: the folder holding ``bert32a100.json`` (needed when ``bert_ks``; default
    as :func:`compare.bench.dp.find_profiles`: ``$PIPER_PROFILES``, else ../shared).
    ``hint_from_dp``: every backend gets the DP's plan as warm start and cutoff
    (``solve_milp(hint=...)``; the DP's own time is not counted).
    ``memory`` is passed to :func:`compare.builders.generators.random_instance` (0.6: M at 60% of
    the way from the least to the most memory a node set can need, so that most random
    instances are feasible and memory still binds in some)."""
    records = []
    for group, inst in _cases(sizes, seeds, bert_ks, memory, profiles):
        size = model_size(inst)
        hint = None
        if hint_from_dp:
            from dp import solve_dp

            hint = solve_dp(inst).plan
        for backend in backends:
            rec = _run_one(inst, backend, time_limit, threads, hint)
            rec["group"] = group
            records.append(rec)
            log(
                f"  {group:<18} {inst.source:<32} {backend:<5} {rec['status']:<10} "
                f"{rec.get('seconds', 0):7.2f} s ({rec.get('cpu_seconds', 0):7.2f} CPU s)  "
                f"{_threads([rec])} thr  vars {size['variables']:>6}  "
                + (
                    f"gap {rec['gap']:.2%}"
                    if rec.get("gap") is not None and rec["status"] == "feasible"
                    else ""
                )
            )
    return records


def _threads(records) -> str:
    """The solver threads the runs used, as reported by each solve ("2", "1, 2"; "-" for
    refused runs)."""
    used = sorted({r["threads"] for r in records if r.get("threads") is not None})
    return ", ".join(str(t) for t in used) or "-"


def _median(xs):
    return statistics.median(xs) if xs else None


def table(records, time_limit) -> str:
    """The summary table in Markdown: one row per (group, backend)."""
    groups = []
    for r in records:
        key = (r["group"], r["backend"])
        if key not in groups:
            groups.append(key)
    lines = [
        "| instances | backend | threads | runs | variables (median) | constraints (median) "
        "| proved optimal | median s to optimality (CPU s, children too) | max s "
        "| proved infeasible "
        f"| not proved in {time_limit:g} s | gap at limit (median, max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for group, backend in groups:
        rs = [r for r in records if r["group"] == group and r["backend"] == backend]
        done = [r for r in rs if r["status"] in (Status.OPTIMAL.value, Status.INFEASIBLE.value)]
        opt = sum(1 for r in done if r["status"] == Status.OPTIMAL.value)
        times = [r["seconds"] for r in done if r["status"] == Status.OPTIMAL.value]
        cpus = [r.get("cpu_seconds", 0.0) for r in done if r["status"] == Status.OPTIMAL.value]
        open_ = [r for r in rs if r not in done]
        gaps = [r["gap"] for r in open_ if r.get("gap") is not None]
        no_plan = sum(1 for r in open_ if r["status"] == Status.UNKNOWN.value)
        gap_txt = "-"
        if open_:
            gap_txt = f"{_median(gaps):.2%}, {max(gaps):.2%}" if gaps else ""
            if no_plan:
                gap_txt += (", " if gaps else "") + f"{no_plan} without a plan"
        med = _median(times)
        lines.append(
            f"| {group} | {backend} | {_threads(rs)} | {len(rs)} "
            f"| {_median([r['variables'] for r in rs]):.0f} "
            f"| {_median([r['constraints'] for r in rs]):.0f} | {opt} "
            f"| {'-' if med is None else f'{med:.2f} ({_median(cpus):.2f})'} | "
            f"{'-' if not times else f'{max(times):.2f}'} "
            f"| {len(done) - opt} | {len(open_)} | {gap_txt} |"
        )
    return "\n".join(lines)
