"""Benchmark of the exact MILP on its two backends (CP-SAT, CBC through PuLP).

For random DAGs of 4 to 16 nodes (several seeds per size, the families of
:mod:`compare.builders.generators`) and for the published ``bert32a100.json`` profile with
K in {4, 8, 16}, it runs each backend with a time limit and prints, per row: the model's
size (variables, constraints), how many runs proved optimality or infeasibility, the
median time to that proof, and for the runs stopped by the limit the gap reached
(``(tps - bound) / tps``).

Usage::

    python -m compare.bench.milp            # 5 seeds per size, 60 s limit (about 15-25 min)
    python -m compare.bench.milp --quick    # 2 seeds, sizes 4 and 8, 10 s limit, bert K=4 only
    python -m compare.bench.milp --json out.json
    python -m compare.bench.milp --hint-from-dp --backends cpsat  # the DP's plan: hint, cutoff

Runs are sequential (one solver at a time, ``--threads`` each, default 2), so the
numbers are wall-clock times on the machine the script runs on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from compare.builders.generators import FAMILIES, random_instance
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import Instance, load_instance
from piper_ilp.milp import BACKENDS, model_size, solve_milp
from piper_ilp.solution import Status

__all__ = ["run", "main"]

#: ``../shared`` beside the checkout (compare/bench/milp.py -> the repository root -> its parent)
SHARED = Path(__file__).resolve().parents[2].parent / "shared"
BERT = SHARED / "piper-inputs" / "bert32a100.json"


def _cases(sizes, seeds, bert_ks, memory):
    """(group label, instance) pairs: random DAGs per size, then bert per K."""
    for n in sizes:
        for seed in range(seeds):
            family = FAMILIES[seed % len(FAMILIES)]
            yield f"random n={n}", random_instance(family, n, seed, memory=memory)
    if bert_ks:
        if not BERT.is_file():
            print(f"(skipping bert32a100: {BERT} not found)", file=sys.stderr)
            return
        bert = load_instance(BERT)
        for K in bert_ks:
            yield f"bert32a100 K={K}", bert.with_settings(K=K)


def _run_one(inst: Instance, backend: str, time_limit: float, threads: int, hint=None) -> dict:
    t0 = time.perf_counter()
    c0 = time.process_time()
    try:
        sol = solve_milp(
            inst, backend=backend, time_limit=time_limit, threads=threads, force=True, hint=hint
        )
    except SizeLimitError as exc:  # not with force=True, but keep the run going
        return {"status": "refused", "message": str(exc)}
    return {
        "instance": inst.source,
        "K": inst.K,
        "N": inst.N,
        "nodes": len(inst.nodes),
        "backend": backend,
        "status": sol.status.value,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "solver_seconds": sol.info.get("solver_seconds"),
        "hint": sol.info.get("hint"),
        "tps": sol.tps,
        "bound": sol.bound,
        "gap": sol.gap,
        "variables": sol.info["variables"],
        "constraints": sol.info["constraints"],
        "scaling_error": sol.info.get("scaling_error"),
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
):
    """Run the benchmark; returns the list of per-run records (see :func:`_run_one`).
    ``hint_from_dp``: every backend gets the DP's plan as warm start and cutoff
    (``solve_milp(hint=...)``; the DP's own time is not counted).
    ``memory`` is passed to :func:`compare.builders.generators.random_instance` (0.6: M at 60% of
    the way from the least to the most memory a node set can need, so that most random
    instances are feasible and memory still binds in some)."""
    records = []
    for group, inst in _cases(sizes, seeds, bert_ks, memory):
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
                f"vars {size['variables']:>6}  "
                + (
                    f"gap {rec['gap']:.2%}"
                    if rec.get("gap") is not None and rec["status"] == "feasible"
                    else ""
                )
            )
    return records


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
        "| instances | backend | runs | variables (median) | constraints (median) "
        "| proved optimal | median s to optimality (CPU s) | max s | proved infeasible "
        f"| not proved in {time_limit:g} s | gap at limit (median, max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
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
        med_txt = "-" if med is None else f"{med:.2f} ({_median(cpus):.2f})"
        max_txt = "-" if not times else f"{max(times):.2f}"
        lines.append(
            f"| {group} | {backend} | {len(rs)} | {_median([r['variables'] for r in rs]):.0f} "
            f"| {_median([r['constraints'] for r in rs]):.0f} | {opt} "
            f"| {med_txt} | {max_txt} "
            f"| {len(done) - opt} | {len(open_)} | {gap_txt} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="2 seeds, sizes 4 and 8, 10 s limit, bert K=4 only"
    )
    ap.add_argument("--seeds", type=int, default=None, help="seeds per size (default 5, quick 2)")
    ap.add_argument(
        "--time-limit", type=float, default=None, help="seconds per run (default 60, quick 10)"
    )
    ap.add_argument("--threads", type=int, default=2, help="solver threads (default 2)")
    ap.add_argument(
        "--sizes", type=str, default=None, help="comma-separated node counts (default 4,8,12,16)"
    )
    ap.add_argument(
        "--bert-k",
        type=str,
        default=None,
        help="comma-separated K for bert32a100 (default 4,8,16; '' for none)",
    )
    ap.add_argument(
        "--memory",
        type=str,
        default="0.6",
        help="random instances' memory: tight, loose or a fraction (default 0.6)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write every run's record here")
    ap.add_argument(
        "--backends",
        type=str,
        default=",".join(BACKENDS),
        help="comma-separated backends (default all)",
    )
    ap.add_argument(
        "--hint-from-dp",
        action="store_true",
        help="give every backend the DP's plan as warm start and cutoff (the DP's time not "
        "counted)",
    )
    args = ap.parse_args(argv)

    seeds = args.seeds or (2 if args.quick else 5)
    time_limit = args.time_limit or (10.0 if args.quick else 60.0)
    sizes = (
        tuple(int(x) for x in args.sizes.split(","))
        if args.sizes
        else ((4, 8) if args.quick else (4, 8, 12, 16))
    )
    if args.bert_k is not None:
        bert_ks = tuple(int(x) for x in args.bert_k.split(",") if x.strip())
    else:
        bert_ks = (4,) if args.quick else (4, 8, 16)

    hint = "DP hint, " if args.hint_from_dp else ""
    machine = f"{platform.node()} ({platform.processor() or platform.machine()})"
    print(
        f"MILP benchmark: sizes {sizes}, {seeds} seeds, memory {args.memory}, bert K {bert_ks}, "
        f"limit {time_limit:g} s, {hint}{args.threads} threads, {machine}"
    )
    t0 = time.perf_counter()
    memory = args.memory if args.memory in ("tight", "loose") else float(args.memory)
    backends = tuple(b for b in args.backends.split(",") if b.strip())
    records = run(
        sizes,
        seeds,
        bert_ks,
        time_limit,
        args.threads,
        backends=backends,
        memory=memory,
        hint_from_dp=args.hint_from_dp,
    )
    print()
    print(table(records, time_limit))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.json:
        meta = {
            "time_limit": time_limit,
            "threads": args.threads,
            "memory": args.memory,
            "seeds": seeds,
            "hint_from_dp": args.hint_from_dp,
        }
        args.json.write_text(json.dumps({**meta, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
