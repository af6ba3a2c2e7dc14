"""PipeDream commands: ``piper-ilp import pipedream`` (a ``graph.txt`` profile to a Piper
instance), ``piper-ilp pipedream`` (PipeDream's planner in its own cost model) and
``piper-ilp pipedream-check`` (its DP against exhaustive search on tiny random graphs).
See ``docs/pipedream.md``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import (
    OUTPUT_PANEL,
    RUN_PANEL,
    SETTINGS_PANEL,
    cli_errors,
    note_bare_sizes,
    option,
    print_json_line,
    setting_option,
    stderr,
    stdout,
)
from piper_cli.format import raw_and_human


def _split(values: list[str] | None, what: str) -> list[str]:
    from piper_ilp.errors import InputError

    out: list[str] = []
    for v in values or []:
        out.extend(x for x in v.replace(",", " ").split() if x)
    if not out:
        raise InputError(f"{what}: give at least one value")
    return out


def register(app: typer.Typer) -> None:
    import_app = typer.Typer(
        name="import",
        help="Turn another tool's profile into a Piper instance.",
        no_args_is_help=True,
        add_completion=False,
    )
    app.add_typer(import_app, name="import")

    @import_app.command("pipedream")
    @cli_errors
    def import_pipedream(
        graph: Annotated[str, typer.Argument(help="PipeDream profile graph.txt.")],
        output: Annotated[
            Path,
            option(OUTPUT_PANEL, "--output", "-o", help="The instance JSON.", metavar="FILE"),
        ],
        devices: setting_option("--devices", "-K", "K", "K (1).") = "1",
        memory: setting_option(
            "--memory", "-M", "SIZE", "M: 16GB (PipeDream's -s default)."
        ) = "16e9",
        batch: setting_option("--batch", "-N", "N", "N (1).") = "1",
        bandwidth: setting_option(
            "--bandwidth", "-B", "RATE", "B: 1GB/s (PipeDream's -b default)."
        ) = "1e9",
    ) -> None:
        """Write a Piper instance for a PipeDream graph.txt: one option "vanilla" at t = 1 per
        layer, p = (F + G) / 1000 s, w = b = P, a = A, edges carry the source's A bytes;
        inputs are kept with zero numbers, __getitem__ sinks with their own (docs/pipedream.md)."""
        from piper_ilp.files import check_writable
        from piper_ilp.instance import parse_setting, save_instance
        from piper_ilp.pipedream import graph_to_instance, parse_graph, prepare

        check_writable(output, "instance", inputs={graph: "profile"})
        K, M, N, B = (
            parse_setting(name, text)
            for name, text in (("K", devices), ("M", memory), ("N", batch), ("B", bandwidth))
        )
        g = parse_graph(graph)
        inst = graph_to_instance(g, devices=K, memory=M, batch=N, bandwidth=B)
        save_instance(inst, output)
        prep = prepare(g)
        stdout.print(
            f"{output}: {len(inst.nodes)} nodes, {len(inst.edges)} edges from {graph} "
            f"({len(prep.inputs)} input(s) with zero numbers, {len(prep.dropped_sinks)} "
            f"__getitem__ sink(s)); {raw_and_human(inst)}",
            markup=False,
        )

    @app.command("pipedream")
    @cli_errors
    def pipedream_command(
        graph: Annotated[str, typer.Argument(help="PipeDream profile graph.txt.")],
        machines: Annotated[
            list[str],
            option(
                SETTINGS_PANEL,
                "--devices",
                "-K",
                "--machines",
                "-n",
                help="Workers per level: 4 or 4,2 (-n).",
                metavar="LIST",
            ),
        ],
        bandwidth: Annotated[
            list[str],
            option(
                SETTINGS_PANEL,
                "--bandwidth",
                "-B",
                "-b",
                help="Bytes/s per level: 1GB/s (-b).",
                metavar="RATES",
            ),
        ],
        memory: Annotated[
            str,
            option(
                SETTINGS_PANEL,
                "--memory",
                "-M",
                "-s",
                help="Per worker: 16GB (-s).",
                metavar="SIZE",
            ),
        ] = "16e9",
        memory_constraint: Annotated[
            bool,
            option(RUN_PANEL, "--memory-constraint", help="Enforce PipeDream's memory rule."),
        ] = False,
        straight: Annotated[
            bool,
            option(RUN_PANEL, "--straight", help="No replication (--straight_pipeline)."),
        ] = False,
        fewer_machines: Annotated[
            bool,
            option(RUN_PANEL, "--fewer-machines", help="Allow fewer workers."),
        ] = False,
        json_out: Annotated[
            bool,
            option(OUTPUT_PANEL, "--json", help="One JSON object on stdout."),
        ] = False,
    ) -> None:
        """PipeDream's planner (optimizer_graph_hierarchical.py) in PipeDream's own cost model:
        its objective "time per stage", the stages (layers, replication) and the CPU time.
        --devices and --bandwidth take one value per level of the hierarchy (comma-separated
        or repeated; PipeDream's -n and -b); sizes and rates take bytes or units (16GB,
        8Gbit/s)."""
        from dp.pipedream import plan_graph
        from piper_ilp.errors import InputError
        from piper_ilp.instance import check_setting, parse_count, parse_size
        from piper_ilp.pipedream import antichain_states, parse_graph, prepare

        ns = [parse_count(x, "--devices") for x in _split(machines, "--devices")]
        # the ranges of Piper's B and M (check_setting), as every other command's options
        bs = [
            check_setting("B", parse_size(x, "--bandwidth", rate=True), "--bandwidth")
            for x in _split(bandwidth, "--bandwidth")
        ]
        if len(ns) != len(bs):
            raise InputError(
                f"--devices gives {len(ns)} level(s) but --bandwidth gives {len(bs)}; give one "
                "bandwidth per level"
            )
        mem = check_setting("M", parse_size(memory, "--memory"), "--memory")
        note_bare_sizes(memory=[memory], bandwidth=_split(bandwidth, "--bandwidth"))
        t0 = time.process_time()
        prep = prepare(parse_graph(graph))
        antichain_states(prep)
        res = plan_graph(
            prep,
            ns,
            bs,
            memory=mem,
            memory_constraint=memory_constraint,
            straight=straight,
            fewer_machines=fewer_machines,
            what="--devices",
        )
        cpu = time.process_time() - t0
        if json_out:
            d = res.to_dict()
            d.update(
                graph=graph,
                memory=mem,
                memory_constraint=memory_constraint,
                straight=straight,
                fewer_machines=fewer_machines,
                cpu_seconds=cpu,
            )
            print_json_line(d)
            return
        if res.uncovered:
            stderr.print(
                f"warning: PipeDream's planner leaves {len(res.uncovered)} layer(s) in no stage "
                f"(not reached from the first source): {', '.join(res.uncovered[:5])}",
                markup=False,
            )
        levels = ", ".join(f"{n} x {b:.4g} B/s" for n, b in zip(ns, bs))
        stdout.print(
            f"{graph}: {len(prep.nodes)} layers planned, {res.n_states} states; levels {levels}",
            markup=False,
        )
        if res.time_per_stage is None:
            stdout.print("no plan fits PipeDream's memory rule", markup=False)
            raise typer.Exit(1)
        for i, s in enumerate(res.stages):
            reps = " x ".join(str(r) for r in s.replication_per_level)
            first, last = (s.nodes[0], s.nodes[-1]) if s.nodes else ("-", "-")
            stdout.print(
                f"  stage {i}: states {s.first}..{s.last}, {len(s.nodes)} layers {first}..{last}, "
                f"compute {s.compute_time:.6g} s, replication {s.replication} ({reps})",
                markup=False,
            )
        stdout.print(f"Time per stage in pipeline: {res.time_per_stage:.12g} s", markup=False)
        stdout.print(
            f"Time taken by single-stage pipeline: {res.single_stage_time:.12g} s", markup=False
        )
        stdout.print(f"Workers used: {res.machines_used}; CPU {cpu:.3f} s", markup=False)

    @app.command("pipedream-check")
    @cli_errors
    def pipedream_check(
        count: Annotated[
            int,
            option(RUN_PANEL, "--count", min=1, help="Random cases (300).", metavar="N"),
        ] = 300,
        seed: Annotated[
            int, option(RUN_PANEL, "--seed", help="Seed of the campaign (1).", metavar="N")
        ] = 1,
        max_nodes: Annotated[
            int,
            option(RUN_PANEL, "--max-nodes", min=1, max=9, help="Largest graph (7).", metavar="N"),
        ] = 7,
        max_machines: Annotated[
            int,
            option(
                RUN_PANEL,
                "--max-machines",
                min=1,
                max=8,
                help="Largest worker count (5).",
                metavar="N",
            ),
        ] = 5,
        summary: Annotated[
            Optional[Path],
            option(OUTPUT_PANEL, "--summary", help="Write the summary JSON here.", metavar="FILE"),
        ] = None,
        milp: Annotated[
            bool,
            option(RUN_PANEL, "--milp", help="Also the MILP (SCIP)."),
        ] = False,
        numbers: Annotated[
            str,
            option(RUN_PANEL, "--numbers", help="plain or hostile (below).", metavar="KIND"),
        ] = "plain",
    ) -> None:
        """Cross-check PipeDream's DP against exhaustive search in its single-level model on
        seeded tiny random graphs. --numbers hostile draws numbers over 1e-30..1e30 (and
        some above, which the parser must refuse), isolated nodes and settings at the ends of
        their ranges. Exit 1 when any case disagrees."""
        from compare.baselines.pipedream import cross_check
        from piper_ilp.files import atomic_write_text, check_writable

        if summary is not None:
            check_writable(summary, "summary")
        out = cross_check(
            count, seed, max_nodes=max_nodes, max_machines=max_machines, milp=milp, numbers=numbers
        )
        if summary is not None:
            atomic_write_text(summary, json.dumps(out, indent=1) + "\n")
        stdout.print(
            f"{out['cases']} cases (seed {seed}, {numbers} numbers): {out['matched']} match "
            f"({out['infeasible']} with no plan in both), {out['refused']} refused on a line, "
            f"{len(out['mismatches'])} mismatch; {out['plans_seen']} plans enumerated; "
            f"CPU DP {out['dp_cpu_s']:.2f} s, exhaustive {out['brute_cpu_s']:.2f} s",
            markup=False,
        )
        if milp:
            stdout.print(
                f"MILP (SCIP) on {out['milp_cases']} cases (not with --fewer-machines and the "
                "memory rule together): "
                f"{out['milp_matched']} match, {out['milp_skipped']} with no claim (time limit, "
                f"out of range, size); CPU {out['milp_cpu_s']:.2f} s",
                markup=False,
            )
        for m in out["mismatches"][:10]:
            stdout.print(f"  MISMATCH {m}", markup=False)
        if out["mismatches"]:
            raise typer.Exit(1)
