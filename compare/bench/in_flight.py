"""The price of keeping the promise (contract sec. 11): on the paper's configurations, the
optimum under Piper's in-flight rule and under the rule the schedule keeps, and what 1F1B
makes of each plan in the simulator.

``python -m compare.bench.in_flight [--profiles DIR] [--json OUT] [--plot FIG.png]`` prints
one markdown row per configuration:

* ``piper``: the exact DP's optimum under Piper's rule (``--in-flight piper``), the model's TPS;
* ``schedule``: the exact DP's optimum under ``--in-flight schedule`` (its simulated period is
  checked to be that TPS, within 1e-9, with every replica within its y);
* ``greedy``: Piper's own plan (the DP with Piper's greedy option rule, which reproduces the
  original planner's published plans), the model's TPS;
* the 1F1B period that the simulator measures for Piper's two plans, each replica keeping
  Piper's y (the number Piper's promise turns into), and for the schedule's optimum;
* the CPU seconds of the two exact solves.

The numbers in docs/in-flight.md come from it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

from compare.bench.dp import GIB, find_profiles
from compare.simulation.simulate import simulate
from dp.solver import solve_dp
from piper_ilp.instance import load_instance
from piper_ilp.mode import Mode

__all__ = ["CASES", "Case", "measure", "table_lines", "plot", "main"]


@dataclass(frozen=True)
class Case:
    """A published profile and its settings K, M (GiB), N, B (GiB/s)."""

    profile: str
    K: int
    M_gib: float
    N: int
    B_gib: float = 25.0

    @property
    def name(self) -> str:
        return f"{self.profile} K={self.K} M={self.M_gib:g}GiB N={self.N}"


#: BERT-32 over the sweep's K range (docs/sweeps.md), the two other reference settings, and
#: the benchmark's ResNet-50 and GNMT settings (compare/bench/dp.py).
CASES = (
    *(Case("bert32a100", K, 8, 1920) for K in (8, 16, 32, 64, 128, 256, 512, 1024, 2048)),
    Case("bert32a100", 64, 2, 512),
    Case("resnet", 8, 4, 7680),
    Case("resnet", 64, 2, 7680),
    Case("gnmt", 8, 1.2, 256),
    Case("gnmt", 64, 1.2, 256),
    Case("gnmt", 256, 1.2, 256),
)


def _period(inst, plan, rule: str) -> tuple[float, bool]:
    """The simulated 1F1B period of ``plan`` with the budgets of ``rule``, and whether
    every replica stayed within its y."""
    sim = simulate(inst, plan, in_flight=rule)
    return sim.period, all(s["peak_in_flight"] <= s["y_model"] for s in sim.stages)


def measure(case: Case, folder) -> dict:
    """One configuration's row (see the module docstring)."""
    inst = load_instance(folder / f"{case.profile}.json").with_settings(
        K=case.K, M=case.M_gib * GIB, N=case.N, B=case.B_gib * GIB
    )
    row: dict = {"case": case.name, **asdict(case)}
    for key, mode, knapsack in (
        ("piper", Mode(), "exact"),
        ("schedule", Mode(in_flight="schedule"), "exact"),
        ("greedy", Mode(), "greedy"),
    ):
        start = time.process_time()
        sol = solve_dp(inst, mode=mode, knapsack=knapsack)
        row[f"{key}_cpu"] = time.process_time() - start
        row[key] = sol.tps
        row[f"{key}_status"] = sol.status.value
        if sol.plan is None:
            continue
        row[f"{key}_stages"] = len(sol.plan.stages)
        row[f"{key}_d"] = [st.d for st in sol.plan.stages]
        period, within = _period(inst, sol.plan, mode.in_flight)
        row[f"{key}_sim"] = period
        row[f"{key}_within_y"] = within
    return row


def _ms(x) -> str:
    return "-" if x is None else f"{1e3 * x:.6g}"


def _ratio(a, b) -> str:
    return "-" if a is None or b is None else f"{a / b:.4f}"


def table_lines(rows) -> list[str]:
    """The markdown table of the rows (TPS and periods in ms)."""
    out = [
        "| configuration | piper optimum ms | schedule optimum ms | schedule / piper "
        "| Piper's plan (greedy) ms | its 1F1B period ms | period / its TPS "
        "| piper optimum's 1F1B period / its TPS | schedule optimum's period / its TPS "
        "| CPU s piper / schedule |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['case']} | {_ms(r.get('piper'))} | {_ms(r.get('schedule'))} "
            f"| {_ratio(r.get('schedule'), r.get('piper'))} | {_ms(r.get('greedy'))} "
            f"| {_ms(r.get('greedy_sim'))} | {_ratio(r.get('greedy_sim'), r.get('greedy'))} "
            f"| {_ratio(r.get('piper_sim'), r.get('piper'))} "
            f"| {_ratio(r.get('schedule_sim'), r.get('schedule'))} "
            f"| {r['piper_cpu']:.2f} / {r['schedule_cpu']:.2f} |"
        )
    return out


def plot(rows, path) -> None:
    """BERT-32's rows (M = 8 GiB, N = 1920) against K: the two optima and the periods that
    1F1B reaches with Piper's plans, relative to the schedule's optimum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from piper_ilp.files import atomic_write_bytes

    bert = [
        r for r in rows if r["profile"] == "bert32a100" and r["N"] == 1920 and r.get("schedule")
    ]
    K = [r["K"] for r in bert]
    fig, (top, low) = plt.subplots(2, 1, figsize=(7.5, 7), sharex=True)
    series = (
        ("piper", "optimum, Piper's rule (model)", "o-"),
        ("schedule", "optimum, the schedule's rule (model = 1F1B)", "s-"),
        ("piper_sim", "Piper's optimum run by 1F1B", "o:"),
        ("greedy_sim", "Piper's own plan (greedy) run by 1F1B", "^:"),
    )
    for key, label, style in series:
        top.plot(K, [1e3 * r[key] for r in bert], style, label=label)
        low.plot(K, [r[key] / r["schedule"] for r in bert], style, label=label)
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel("time per sample, ms")
    top.set_title("BERT-32 (M = 8 GiB, N = 1920): what the plan promises and what 1F1B runs")
    top.legend(fontsize=8)
    top.grid(True, which="both", alpha=0.3)
    low.set_ylabel("relative to the schedule's optimum")
    low.set_xlabel("devices K")
    low.grid(True, alpha=0.3)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--profiles", help="folder of the published profiles (default ../shared/piper-inputs)"
    )
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--plot", help="write the BERT-32 figure here (.png)")
    ap.add_argument("--only", help="comma-separated profile names to run (default: all)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.only or c.profile in args.only.split(",")]
    folder = find_profiles(args.profiles, sorted({c.profile for c in cases}))
    rows = []
    for case in cases:
        rows.append(measure(case, folder))
        print(f"{case.name}: done", file=sys.stderr, flush=True)
    for line in table_lines(rows):
        print(line)
    if args.json:
        from piper_ilp.files import atomic_write_text

        atomic_write_text(args.json, json.dumps(rows, indent=1) + "\n")
    if args.plot:
        plot(rows, args.plot)
    bad = [
        r["case"]
        for r in rows
        if r.get("schedule_sim") is not None and abs(r["schedule_sim"] / r["schedule"] - 1) > 1e-9
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
