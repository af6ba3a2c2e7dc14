"""Benchmark of the DP on the paper's configurations, against the original C++ planner.

    python -m compare.bench_dp [--quick] [--json OUT] [--only NAME] [--modes exact,greedy]
                               [--repeat R] [--timeout SECONDS]

For every configuration of issue 6 and each knapsack mode it prints: seconds (median of
``--repeat`` runs when a run is short), peak RSS, the TPS, the ratio of our seconds to the
C++ planner's, and the counts (successor-closed sets, stage candidates). Each run is a
fresh subprocess, so that its peak RSS is its own. ``--json`` writes the same rows.

The C++ numbers (g++ -O3, 2-core machine) are those quoted in the issue; the profiles are
read from ``../shared/piper-inputs`` (the repository's sibling folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Config", "CONFIGS", "run_one", "main"]

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "piper-inputs"
GIB = 2**30


@dataclass(frozen=True)
class Config:
    """One benchmark case: profile, optional deepening, settings, and the C++ reference."""

    name: str
    profile: str
    K: int
    M_gib: float
    N: int
    layers: int | None = None
    cpp_seconds: float | None = None
    cpp_rss: str = ""
    cpp_tps: float | None = None
    quick: bool = False


CONFIGS = [
    Config("bert-K512", "bert32a100", 512, 8, 1920, cpp_seconds=4.4, cpp_rss="small", cpp_tps=0.00256112784601, quick=True),
    Config("bert-K2048", "bert32a100", 2048, 8, 1920, cpp_seconds=77.6, cpp_rss="1.5 GB", cpp_tps=0.000703591184443),
    Config("bert64-K1024", "bert32a100", 1024, 8, 1920, layers=64, cpp_seconds=58.6, cpp_rss="0.7 GB"),
    Config("bert96-K2048", "bert32a100", 2048, 8, 2048, layers=96, cpp_seconds=377, cpp_rss="3.7 GB"),
    Config("resnet-K8", "resnet", 8, 4, 7680, cpp_seconds=5.0, cpp_rss="small", cpp_tps=73.4932860001, quick=True),
    Config("resnet-K64", "resnet", 64, 2, 7680, cpp_seconds=12.6, cpp_rss="small", cpp_tps=11.3337902938),
    Config("gnmt-K8", "gnmt", 8, 1.2, 256, cpp_seconds=None, cpp_rss="did not finish in 600 s"),
]


def load_config(cfg: Config):
    """The instance of a configuration (deepened when asked)."""
    from compare.deepen import deepen
    from piper_ilp.instance import load_instance

    inst = load_instance(SHARED / f"{cfg.profile}.json")
    if cfg.layers:
        inst = deepen(inst, cfg.layers)
    return inst.with_settings(K=cfg.K, M=cfg.M_gib * GIB, N=cfg.N, B=25.0 * GIB)


def run_one(name: str, mode: str) -> dict:
    """Solve one configuration in this process; seconds exclude loading."""
    import resource

    from dp import solve_dp

    cfg = next(c for c in CONFIGS if c.name == name)
    inst = load_config(cfg)
    t0 = time.perf_counter()
    sol = solve_dp(inst, knapsack=mode)
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "config": name,
        "mode": mode,
        "status": sol.status.value,
        "tps": sol.tps,
        "seconds": seconds,
        "rss_mb": rss_mb,
        "ideals": sol.info.get("ideals"),
        "stage_pairs": sol.info.get("stage_pairs"),
        "stage_candidates": sol.info.get("stage_candidates"),
        "search_steps": sol.info.get("search_steps"),
    }


def _subprocess_run(name: str, mode: str, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "compare.bench_dp", "--worker", name, mode]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[1])
    except subprocess.TimeoutExpired:
        return {"config": name, "mode": mode, "status": "timeout", "seconds": timeout}
    if out.returncode != 0:
        return {"config": name, "mode": mode, "status": "error", "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m compare.bench_dp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the small configurations, one run each")
    ap.add_argument("--json", metavar="OUT", help="write the rows as JSON")
    ap.add_argument("--only", action="append", help="configuration name (repeatable)")
    ap.add_argument("--modes", default="exact,greedy", help="comma-separated knapsack modes")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case when a run takes under 20 s")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--worker", nargs=2, metavar=("CONFIG", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print(json.dumps(run_one(*args.worker)))
        return 0
    if not SHARED.is_dir():
        print(f"needs the Piper profiles in {SHARED} (not present)", file=sys.stderr)
        return 2
    names = [c.name for c in CONFIGS]
    unknown = [n for n in args.only or () if n not in names]
    if unknown:
        print(f"--only: unknown configuration {unknown[0]!r}; choose from {', '.join(names)}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("exact", "greedy") for m in modes):
        print(f"--modes: expected a comma-separated list of exact, greedy; got {args.modes!r}", file=sys.stderr)
        return 2
    configs = [c for c in CONFIGS if (not args.quick or c.quick) and (not args.only or c.name in args.only)]
    repeat = 1 if args.quick else max(1, args.repeat)
    rows = []
    head = f"{'config':<14} {'mode':<7} {'seconds':>8} {'RSS MB':>7} {'TPS':>20} {'C++ s':>6} {'ratio':>6} {'C++ TPS':>18} {'sets':>5} {'stages':>7} {'cands':>8}"
    print(head)
    print("-" * len(head))
    for cfg in configs:
        for mode in modes:
            runs = [_subprocess_run(cfg.name, mode, args.timeout)]
            while len(runs) < repeat and runs[-1].get("status") in ("optimal", "feasible", "infeasible") and runs[-1]["seconds"] < 20:
                runs.append(_subprocess_run(cfg.name, mode, args.timeout))
            row = dict(runs[0])
            if "seconds" in row:
                row["seconds"] = statistics.median(r["seconds"] for r in runs if "seconds" in r)
                row["runs"] = len(runs)
            if "rss_mb" in row:
                row["rss_mb"] = max(r.get("rss_mb", 0) for r in runs)
            row["cpp_seconds"] = cfg.cpp_seconds
            row["cpp_rss"] = cfg.cpp_rss
            row["cpp_tps"] = cfg.cpp_tps
            row["ratio"] = row["seconds"] / cfg.cpp_seconds if cfg.cpp_seconds and "seconds" in row else None
            if cfg.cpp_tps is not None and row.get("tps") is not None:
                row["tps_vs_cpp"] = row["tps"] / cfg.cpp_tps - 1
            rows.append(row)
            print(
                f"{cfg.name:<14} {mode:<7} {_fmt(row.get('seconds'), '8.2f')} {_fmt(row.get('rss_mb'), '7.0f')} "
                f"{_fmt(row.get('tps'), '20.15g')} {_fmt(cfg.cpp_seconds, '6.1f')} {_fmt(row.get('ratio'), '6.3f')} "
                f"{_fmt(cfg.cpp_tps, '18.15g')} {_fmt(row.get('ideals'), '5d')} {_fmt(row.get('stage_pairs'), '7d')} "
                f"{_fmt(row.get('stage_candidates'), '8d')}" + ("" if row.get("status") in ("optimal", "feasible") else f"  [{row.get('status')}]"),
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"configs": [asdict(c) for c in configs], "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
