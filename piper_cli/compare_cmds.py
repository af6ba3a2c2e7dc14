"""``piper-ilp verify``, ``random`` and ``campaign``: the cross-check commands (issue 5).

The work is done in :mod:`compare.verify`, :mod:`compare.generators` and
:mod:`compare.campaign`; this module only reads options and prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from piper_cli.common import (
    BandwidthOpt,
    BatchOpt,
    DevicesOpt,
    ExcludeOptionOpt,
    JsonOpt,
    MaxDOpt,
    MaxTOpt,
    MemoryOpt,
    NoDataParallelOpt,
    NoRecomputeOpt,
    NoTensorParallelOpt,
    cli_errors,
    load_with_overrides,
    print_json_line,
    restrictions_from_flags,
    stderr,
    stdout,
)
from piper_cli.format import stage_table
from piper_ilp.errors import InputError

__all__ = ["register", "verdict_table", "parse_range", "parse_ints"]

MethodsOpt = Annotated[
    str,
    typer.Option("--methods", help="Comma-separated methods among dp, cpsat, cbc, scip (MILP backends), brute (only where the graph is tiny)."),
]
TimeLimitOpt = Annotated[
    Optional[float],
    typer.Option("--time-limit", min=0.0, help="Seconds per MILP backend (a MILP stopped early is checked against its bound)."),
]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", min=1, help="MILP solver threads.", show_default=False)]


def parse_range(text: str, what: str) -> tuple[int, int]:
    """``"3-7"`` -> (3, 7); ``"5"`` -> (5, 5)."""
    parts = text.split("-")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise InputError(f"{what}: expected A-B or a single number, got {text!r}") from None
    if lo < 1 or hi < lo:
        raise InputError(f"{what}: expected 1 <= A <= B, got {text!r}")
    return lo, hi


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4), each >= 1."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{what}: expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{what}: expected whole numbers >= 1, got {text!r}")
    return values


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.10g}"


def verdict_table(verdict) -> Table:
    """One row per method: status, TPS (evaluator), bound, stages, devices, sum d, seconds, note."""
    table = Table(title_justify="left")
    for col, just in (
        ("method", "left"),
        ("status", "left"),
        ("TPS s", "right"),
        ("bound s", "right"),
        ("stages", "right"),
        ("devices", "right"),
        ("sum d", "right"),
        ("seconds", "right"),
        ("note", "left"),
    ):
        table.add_column(col, justify=just)
    for name, r in verdict.results.items():
        s = r.solution
        note = ""
        if r.skipped:
            note = r.skipped.split(": ", 1)[-1]
        elif r.error:
            note = r.error
        elif r.evaluation is not None and not r.evaluation.valid:
            note = f"INVALID PLAN: {r.evaluation.violations[0]}"
        elif r.abs_tol:
            note = f"scaling error {r.abs_tol:.3g}"
        if name == "greedy":
            label = "greedy (Piper's rule)"
            if verdict.greedy_gap is not None:
                note = (note + "; " if note else "") + f"{100 * verdict.greedy_gap:+.4g}% vs optimum"
        else:
            label = name
        plan = s.plan if s is not None else None
        table.add_row(
            label,
            r.status,
            _fmt(r.tps) if plan is not None else "-",
            _fmt(s.bound) if s is not None else "-",
            str(len(plan.stages)) if plan else "-",
            str(plan.devices) if plan else "-",
            str(plan.sum_d) if plan else "-",
            f"{r.seconds:.3g}",
            note,
        )
    return table


def _print_verdict(instance, verdict) -> None:
    """The human form of one instance's verdict (the table, the verdict line, problems and plans)."""
    st = verdict.settings
    stdout.print(
        f"{instance.source}: {st['nodes']} nodes, {st['edges']} edges; K={instance.K} M={instance.M:.6g} "
        f"B={instance.B:.6g} N={instance.N}",
        markup=False,
    )
    stdout.print(verdict_table(verdict))
    asked = [m for m in verdict.results if m != "greedy"]
    done = [m for m in asked if verdict.results[m].skipped is None]
    if verdict.verdict == "match":
        what = "proven infeasible" if verdict.infeasible else f"optimum TPS {verdict.optimum:.12g} s per sample"
        stdout.print(f"match: {what} ({', '.join(done)} agree)", markup=False)
    elif verdict.verdict == "consistent":
        open_ = [m for m in done if not verdict.results[m].proven]
        what = "proven infeasible" if verdict.infeasible else f"optimum TPS {verdict.optimum:.12g} s per sample"
        stdout.print(
            f"consistent: {what}; {', '.join(open_)} stopped early with bound <= optimum <= best plan",
            markup=False,
        )
    elif verdict.verdict == "inconclusive":
        stdout.print("inconclusive: no method proved an optimum or infeasibility in time", markup=False)
    else:
        stdout.print(f"mismatch: {len(verdict.problems)} problem(s)", markup=False)
        for p in verdict.problems:
            stdout.print(f"  - {p}", markup=False)
        # the plans that disagree, stage by stage, as the evaluator sees them
        for name in verdict.involved:
            r = verdict.results[name]
            if r.evaluation is not None:
                stdout.print(stage_table(r.evaluation, title=f"{name}'s plan (status {r.status})"))
    if verdict.greedy_tps is not None and verdict.greedy_gap is not None and verdict.verdict != "mismatch":
        stdout.print(
            f"greedy rule (Piper's option choice): TPS {verdict.greedy_tps:.12g}, "
            f"{100 * verdict.greedy_gap:.4g}% above the optimum",
            markup=False,
        )
    stdout.print("")


def register(app: typer.Typer) -> None:
    """Add ``verify``, ``random`` and ``campaign`` to the typer app."""

    @app.command("verify")
    @cli_errors
    def verify_command(
        instances: Annotated[list[str], typer.Argument(help="Instance JSON file(s), e.g. a campaign's counterexamples.")],
        methods: MethodsOpt = "dp,cpsat,cbc,brute",
        time_limit: TimeLimitOpt = 60.0,
        threads: ThreadsOpt = None,
        greedy: Annotated[bool, typer.Option("--greedy/--no-greedy", help="Also run Piper's greedy rule and report its gap.")] = True,
        devices: DevicesOpt = None,
        memory: MemoryOpt = None,
        batch: BatchOpt = None,
        bandwidth: BandwidthOpt = None,
        no_data_parallel: NoDataParallelOpt = False,
        no_tensor_parallel: NoTensorParallelOpt = False,
        no_recompute: NoRecomputeOpt = False,
        exclude_option: ExcludeOptionOpt = None,
        max_d: MaxDOpt = None,
        max_t: MaxTOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Solve each INSTANCE with every method, re-check every plan with the evaluator,
        and give one verdict: match (all proved the same optimum), consistent (a MILP
        stopped early, bound <= optimum <= its plan), mismatch (with the values, plans and
        first difference), inconclusive (nothing proven in time).

        Exit 0 match or consistent, 1 mismatch, 2 bad input or usage, 3 inconclusive.
        """
        from compare.verify import parse_methods, verify_instance

        names = parse_methods(methods)
        restrictions = restrictions_from_flags(no_data_parallel, no_tensor_parallel, no_recompute, exclude_option, max_d, max_t)
        codes = []
        for path in instances:
            try:
                inst = load_with_overrides(path, devices, memory, batch, bandwidth)
            except InputError as exc:
                stderr.print(f"piper-ilp: error: {exc}", markup=False)
                if json_out:
                    print_json_line({"instance": path, "verdict": None, "error": str(exc)})
                codes.append(2)
                continue
            v = verify_instance(inst, names, restrictions, time_limit=time_limit, threads=threads, greedy=greedy)
            if json_out:
                print_json_line(v.to_dict())
            else:
                _print_verdict(inst, v)
            codes.append(v.exit_code)
        for code in (1, 2, 3):
            if code in codes:
                raise typer.Exit(code)

    @app.command("random")
    @cli_errors
    def random_command(
        family: Annotated[str, typer.Option("--family", help="chain, skip, layered, series-parallel or fork-join.")] = "layered",
        nodes: Annotated[int, typer.Option("--nodes", min=1, help="Number of nodes (layers).")] = 6,
        seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same instance).")] = 0,
        t_values: Annotated[str, typer.Option("--t-values", help="Tensor-parallel degrees offered, e.g. 1,2,4.")] = "1,2",
        options: Annotated[str, typer.Option("--options", help="Options per (node, t): a number or a range A-B.")] = "2",
        memory: Annotated[str, typer.Option("--memory-kind", help="tight, loose, or a number f: M = lo + f (hi - lo).")] = "tight",
        integer: Annotated[bool, typer.Option("--integer", help="Small integer data and B = 1 (every backend exact).")] = False,
        devices: Annotated[Optional[int], typer.Option("--devices", "-K", min=1, help="K (default: drawn in 1..8).", show_default=False)] = None,
        batch: Annotated[Optional[int], typer.Option("--batch", "-N", min=1, help="N (default: drawn from 1,2,4,6,8).", show_default=False)] = None,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the instance here (default: stdout).", show_default=False)] = None,
    ) -> None:
        """Write a random instance of a graph family (networkx): a chain, a chain with skip
        connections (transformer / ResNet), a layered random DAG, a series-parallel graph, or
        fork-join blocks. Deterministic per seed."""
        from compare.generators import random_instance
        from piper_ilp.instance import instance_to_dict

        mem: str | float = memory
        if memory not in ("tight", "loose"):
            try:
                mem = float(memory)
            except ValueError:
                raise InputError(f"--memory-kind: expected tight, loose or a number, got {memory!r}") from None
        inst = random_instance(
            family,
            nodes,
            seed,
            t_values=parse_ints(t_values, "--t-values"),
            options_per_t=parse_range(options, "--options"),
            memory=mem,
            integer=integer,
            K=devices,
            N=batch,
        )
        text = json.dumps(instance_to_dict(inst), indent=1) + "\n"
        if output is None:
            sys.stdout.write(text)
        else:
            try:
                output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise InputError(f"--output {output}: cannot write ({exc.strerror})") from None
            stderr.print(f"wrote {output}: {inst.source}, {len(inst.nodes)} nodes, {len(inst.edges)} edges, K={inst.K} N={inst.N}", markup=False)

    @app.command("campaign")
    @cli_errors
    def campaign_command(
        out: Annotated[Path, typer.Option("--out", help="Results folder: results.jsonl, summary.json, counterexamples/.")],
        count: Annotated[int, typer.Option("--count", min=0, help="Number of random instances.")] = 100,
        seed: Annotated[int, typer.Option("--seed", help="Master seed.")] = 0,
        families: Annotated[str, typer.Option("--families", help="Comma-separated families (default: all five).")] = "chain,skip,layered,series-parallel,fork-join",
        nodes: Annotated[str, typer.Option("--nodes", help="Node-count range A-B.")] = "3-7",
        methods: MethodsOpt = "dp,cpsat,cbc,brute",
        time_limit: TimeLimitOpt = 60.0,
        threads: ThreadsOpt = None,
        workers: Annotated[int, typer.Option("--workers", min=1, help="Local worker processes.")] = 2,
        resume: Annotated[bool, typer.Option("--resume", help="Continue the campaign in --out, skipping finished instances.")] = False,
        shrink: Annotated[bool, typer.Option("--shrink/--no-shrink", help="Shrink mismatches into counterexamples/.")] = True,
        progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress", help="Progress bar (default: on a terminal).", show_default=False)] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Cross-check COUNT random DAGs in parallel: one JSON line per finished instance in
        OUT/results.jsonl (a killed run loses nothing; --resume skips what is done), every
        mismatch shrunk to a small instance in OUT/counterexamples/ that `piper-ilp verify`
        replays, and a summary: verdicts by family, greedy-gap statistics, solve times.
        Ctrl-C (SIGINT) or SIGTERM stop the workers at once and keep the finished results;
        OUT is locked while a campaign runs on it.

        Exit 0 when no mismatch was found, 1 otherwise, 2 on bad usage (or OUT in use or
        not writable), 130 on SIGINT, 143 on SIGTERM.
        """
        from compare.campaign import CampaignInterrupted, run_campaign, summary_lines
        from compare.verify import parse_methods

        fams = tuple(f.strip() for f in families.split(",") if f.strip())
        try:
            summary = run_campaign(
                out,
                count,
                seed,
                families=fams,
                nodes=parse_range(nodes, "--nodes"),
                methods=parse_methods(methods),
                time_limit=time_limit,
                threads=threads,
                workers=workers,
                resume=resume,
                do_shrink=shrink,
                progress=progress,
            )
        except CampaignInterrupted as exc:
            stderr.print(f"piper-ilp: interrupted ({exc.done} results saved in {exc.results}; --resume goes on)", markup=False)
            raise typer.Exit(128 + exc.signum) from None
        if json_out:
            print_json_line(summary)
        else:
            for line in summary_lines(summary):
                stdout.print(line, markup=False)
            stdout.print(f"results in {out}/results.jsonl, summary in {out}/summary.json", markup=False)
            if summary["mismatches"]:
                stdout.print(f"counterexamples (replay with piper-ilp verify): {out}/counterexamples/", markup=False)
        if summary["verdicts"].get("mismatch"):
            raise typer.Exit(1)

