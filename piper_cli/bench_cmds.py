"""``piper-ilp deepen`` (grow a profile's repeated block), ``piper-ilp towers`` (parallel
towers of it, a multi-branch model) and ``piper-ilp bench`` (the DP benchmark on the
paper's configurations, optionally against a reference planner), with its two other suites:
``piper-ilp bench milp`` (the MILP's backends) and ``piper-ilp bench modes`` (the DP in the
other modes), and ``piper-ilp greedy-fuzz`` (greedy mode against a reference planner on
random instances)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from piper_cli.common import (
    OUTPUT_PANEL,
    RUN_PANEL,
    SETTINGS,
    SETTINGS_PANEL,
    ThreadsOpt,
    cli_errors,
    load_with_overrides,
    option,
    print_json_line,
    stdout,
    with_groups,
)
from piper_cli.compare_cmds import DrawnBatchOpt, DrawnDevicesOpt, TValuesOpt

KnapsackModesOpt = Annotated[
    str, option(RUN_PANEL, "--modes", help="Knapsack modes: exact, greedy.", show_default=True)
]
JsonFileOpt = Annotated[
    Optional[Path], option(OUTPUT_PANEL, "--json", metavar="FILE", help="Also the results as JSON.")
]
ProfilesOpt = Annotated[
    Optional[Path],
    option(RUN_PANEL, "--profiles", metavar="DIR", help="Published profiles (default below)."),
]


def _check_run(
    modes: str,
    reference: str | None,
    json_out: Path | None,
    allowed: tuple[str, ...] = ("exact", "greedy"),
) -> list[str]:
    """The modes of --modes (among ``allowed``), after checking them, the --reference command
    and that --json can be written (bench and bench small); raise InputError in one line."""
    from compare.bench.dp import check_reference_command
    from piper_ilp.errors import InputError
    from piper_ilp.files import check_writable

    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    if not mode_list or any(m not in allowed for m in mode_list):
        raise InputError(
            f"--modes: expected a comma-separated list of {', '.join(allowed)}; got {modes!r}"
        )
    if reference is not None:
        check_reference_command(reference)
    if json_out is not None:
        check_writable(json_out, "benchmark JSON")
    return mode_list


def register(app: typer.Typer) -> None:
    @app.command("deepen")
    @cli_errors
    @with_groups
    def deepen_command(
        instance: Annotated[
            str,
            typer.Argument(help="Instance JSON file with a repeated block (e.g. bert32a100.json)."),
        ],
        layers: Annotated[
            int,
            option(
                RUN_PANEL, "--layers", "-L", help="Repeated layers wanted (>= now).", metavar="L"
            ),
        ],
        output: Annotated[
            Path,
            option(OUTPUT_PANEL, "--output", "-o", help="The deeper instance.", metavar="FILE"),
        ],
        chain_only: Annotated[
            bool,
            option(RUN_PANEL, "--chain-only", help="Only the chain edges (the paper's)."),
        ] = False,
        cluster: dict = SETTINGS,
    ) -> None:
        """Make a deeper model: copies of a repeated layer are inserted into the chain of such
        layers. By default each copy gets every edge the copied layer has (the chain edges
        and e.g. the attention mask) with matching sync entries: a faithful deeper model.
        With --chain-only each copy gets only the chain edges, as the original planner made
        the paper's 48/64/96-layer BERTs; use it to reproduce the paper's numbers (the
        bench's bert64 and bert96 do)."""
        from compare.builders.deepen import deepen, repeated_chain
        from piper_ilp.files import check_writable
        from piper_ilp.instance import save_instance

        check_writable(output, "instance", inputs={instance: "instance"})
        inst = load_with_overrides(instance, **cluster)
        before = len(repeated_chain(inst))
        deeper = deepen(inst, layers, chain_only=chain_only)
        save_instance(deeper, output)
        stdout.print(
            f"{output}: {len(deeper.nodes)} nodes, {len(deeper.edges)} edges "
            f"(repeated chain {before} -> {layers} layers, "
            f"{'chain edges only' if chain_only else 'all edges'})",
            markup=False,
        )

    @app.command("towers")
    @cli_errors
    @with_groups
    def towers_command(
        instance: Annotated[
            str,
            typer.Argument(help="Instance JSON file with a repeated block (e.g. bert32a100.json)."),
        ],
        output: Annotated[
            Path,
            option(
                OUTPUT_PANEL, "--output", "-o", help="The multi-branch instance.", metavar="FILE"
            ),
        ],
        layers: Annotated[
            Optional[str],
            option(RUN_PANEL, "--layers", "-L", help="Layers per tower: 4,4,4.", metavar="LIST"),
        ] = None,
        preset: Annotated[
            Optional[str],
            option(RUN_PANEL, "--preset", help="Or a model: mmt2, mmt4, dlrm8.", metavar="NAME"),
        ] = None,
        cluster: dict = SETTINGS,
    ) -> None:
        """Make a multi-branch model like GraphPipe's: parallel towers of the profile's repeated
        layer between its source and sink layers, every number taken from the profile.
        Graph pipelining (--pipeline graph) lets the towers' stages run side by side.

        --preset builds one of issue 35's GraphPipe-like models from the profile's
        input, embedding, layer and head instead (docs/benchmarks.md, "GraphPipe-like
        models"): mmt2 (2 branches of an embedding and 12 layers), mmt4 (4 of an
        embedding and 6 layers), both joined by 2 fusion layers and the head; dlrm8 (8
        embedding branches, an interaction node, a top MLP of 2 layers, the head)."""
        from compare.builders.graphpipe import graphpipe_model
        from compare.builders.towers import towers
        from piper_ilp.errors import InputError
        from piper_ilp.files import check_writable
        from piper_ilp.instance import save_instance

        if (layers is None) == (preset is None):
            raise InputError("towers: give exactly one of --layers and --preset")
        counts = []
        if layers is not None:
            try:
                counts = [int(x) for x in layers.split(",")]
            except ValueError:
                raise InputError(
                    f"--layers: a comma-separated list of whole numbers, got {layers!r}"
                ) from None
        check_writable(output, "instance", inputs={instance: "instance"})
        inst = load_with_overrides(instance, **cluster)
        model = graphpipe_model(inst, preset) if preset is not None else towers(inst, counts)
        save_instance(model, output)
        what = f"{preset}" if preset is not None else f"{len(counts)} towers of {layers} layers"
        stdout.print(
            f"{output}: {len(model.nodes)} nodes, {len(model.edges)} edges ({what})",
            markup=False,
        )

    bench = typer.Typer(
        help="Benchmarks: the DP (this command), the MILP (bench milp), the DP in the other "
        "modes (bench modes).",
    )
    app.add_typer(bench, name="bench")
    _register_suites(bench)
    _register_greedy_fuzz(app)

    @bench.callback(invoke_without_command=True)
    @cli_errors
    def bench_command(
        ctx: typer.Context,
        quick: Annotated[
            bool,
            option(RUN_PANEL, "--quick", help="Small configurations, one run each."),
        ] = False,
        json_out: JsonFileOpt = None,
        only: Annotated[
            Optional[list[str]],
            option(RUN_PANEL, "--only", help="A configuration (repeatable).", metavar="NAME"),
        ] = None,
        modes: KnapsackModesOpt = "exact,greedy",
        repeat: Annotated[
            int,
            option(
                RUN_PANEL,
                "--repeat",
                min=1,
                help="Runs per case under 20 s (median).",
                show_default=True,
                metavar="N",
            ),
        ] = 3,
        timeout: Annotated[
            float,
            option(
                RUN_PANEL,
                "--timeout",
                min=1.0,
                help="Kill a run after this long.",
                show_default=True,
                metavar="SECONDS",
            ),
        ] = 900.0,
        max_ideals: Annotated[
            Optional[int],
            option(
                RUN_PANEL,
                "--max-ideals",
                min=1,
                help="DP: refuse above this many sets.",
                metavar="COUNT",
            ),
        ] = None,
        profiles: ProfilesOpt = None,
        reference: Annotated[
            Optional[str],
            option(
                RUN_PANEL, "--reference", help="Reference planner command (below).", metavar="CMD"
            ),
        ] = None,
    ) -> None:
        """Benchmark the DP on the paper's configurations (BERT-32, the 64- and 96-layer BERTs
        deepened as the paper did, ResNet, GNMT) and a wide synthetic DAG family: per run,
        status, TPS, wall seconds of the solve, CPU seconds of the solve ("CPU s") and of a
        whole fresh 'piper-ilp solve' process on the same instance ("proc CPU": start-up,
        imports and printing included, as a user pays it), peak RSS, and the DP's counts. Each
        run is a fresh process; a run past --timeout is killed; an instance above the size
        guard is refused.

        The profiles are read from --profiles, else $PIPER_PROFILES, else
        ../shared/piper-inputs. With --reference CMD (placeholders {instance} {devices}
        {memory} {batch} {bandwidth}, e.g. './piper {instance}'), the reference planner
        runs once per configuration on the same instance; its whole-process CPU time is
        measured and "r.proc"
        is ours / its (whole process each, start-up included). Output
        convention: if CMD prints a line "search-cpu-seconds: X" (its own CPU
        clock around its search alone) on stdout, "r.search" is our solve's
        CPU / X; if it prints "tps: Y" (inf: no plan), "ref TPS" says whether
        our TPS equals Y within relative 1e-9, and a disagreement is spelled
        out on the row (the original planner uses Piper's greedy option rule,
        so the greedy mode should agree and the exact mode can only be lower).
        A reference that prints neither line gets the whole-process ratio
        only. --json carries ref_cpu, ref_search_cpu, ref_tps, ratio,
        ratio_search and tps_agree per row.

        Configurations: bert32-K64, bert32-K512, bert32-K2048, bert64-K1024, bert96-K2048,
        resnet-K8, resnet-K64, gnmt-K8, gnmt-K64, gnmt-K256, wide8, wide12, wide16.

        The other suites are subcommands: 'piper-ilp bench milp', 'piper-ilp bench modes'."""
        if ctx.invoked_subcommand is not None:
            _no_dp_options(ctx)
            return
        from compare.bench.dp import (
            CONFIGS,
            HEADER,
            bench_json,
            find_profiles,
            row_line,
            run_bench,
        )
        from piper_ilp.errors import InputError
        from piper_ilp.files import atomic_write_text

        names = [c.name for c in CONFIGS]
        unknown = [n for n in only or () if n not in names]
        if unknown:
            raise InputError(
                f"--only: unknown configuration {unknown[0]!r}; choose from {', '.join(names)}"
            )
        mode_list = _check_run(modes, reference, json_out)
        configs = [c for c in CONFIGS if (not quick or c.quick) and (not only or c.name in only)]
        folder = find_profiles(profiles, sorted({c.profile for c in configs if c.profile}))
        stdout.print(HEADER, markup=False)
        stdout.print("-" * len(HEADER), markup=False)
        rows = run_bench(
            configs,
            mode_list,
            folder,
            repeat=1 if quick else repeat,
            timeout=timeout,
            max_ideals=max_ideals,
            reference=reference,
            on_row=lambda row: stdout.print(row_line(row), markup=False),
            cli=[sys.executable, "-m", "piper_cli", "solve"],
        )
        differ = [f"{r['config']} {r['mode']}" for r in rows if r.get("tps_agree") is False]
        if differ:
            stdout.print(
                f"TPS differs from the reference on {len(differ)} row(s): {', '.join(differ)}",
                markup=False,
            )
        if json_out is not None:
            atomic_write_text(json_out, bench_json(configs, rows))
            stdout.print(f"rows written to {json_out}", markup=False)


def _no_dp_options(ctx: typer.Context) -> None:
    """Refuse the DP bench's options given before a suite's name (they would be ignored)."""
    from piper_ilp.errors import InputError

    given = [
        p.opts[0]
        for p in ctx.command.params
        if p.param_type_name == "option" and ctx.get_parameter_source(p.name).name != "DEFAULT"
    ]
    if given:
        raise InputError(
            f"{', '.join(given)}: an option of the DP bench, given before "
            f"'{ctx.invoked_subcommand}'; give the suite's options after its name"
        )


def _threads_text(backends, threads: int) -> str:
    """The threads each backend runs with (:func:`piper_ilp.milp.solve.backend_threads`)."""
    from piper_ilp.milp.solve import backend_threads

    runs = {b: backend_threads(b, threads) for b in backends}
    if len(set(runs.values())) == 1:
        n = next(iter(runs.values()))
        return f"{n} thread{'s' if n != 1 else ''}"
    return "threads " + ", ".join(f"{b} {n}" for b, n in runs.items())


def _memory(text: str) -> str | float:
    """``--memory`` of ``bench milp``: tight, loose, or a fraction in [0, 1]."""
    from piper_ilp.errors import InputError

    if text in ("tight", "loose"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise InputError(f"--memory: expected tight, loose or a fraction in [0, 1], got {text!r}")
    return value


def _register_suites(bench: typer.Typer) -> None:
    @bench.command("milp")
    @cli_errors
    def bench_milp_command(
        quick: Annotated[
            bool,
            option(RUN_PANEL, "--quick", help="2 seeds, sizes 4 and 8, 10 s, K=4."),
        ] = False,
        seeds: Annotated[
            Optional[int],
            option(
                RUN_PANEL,
                "--seeds",
                min=1,
                help="Seeds per size (5; quick 2).",
                show_default=False,
                metavar="N",
            ),
        ] = None,
        time_limit: Annotated[
            Optional[float],
            option(
                RUN_PANEL,
                "--time-limit",
                min=0.0,
                help="Per run (60; quick 10).",
                show_default=False,
                metavar="SECONDS",
            ),
        ] = None,
        threads: ThreadsOpt = None,
        sizes: Annotated[
            Optional[str],
            option(
                RUN_PANEL,
                "--sizes",
                help="Node counts (4,8,12,16; quick 4,8).",
                show_default=False,
                metavar="LIST",
            ),
        ] = None,
        bert_k: Annotated[
            Optional[str],
            option(
                RUN_PANEL,
                "--bert-k",
                help="K for BERT-32 (4,8,16; quick 4).",
                show_default=False,
                metavar="LIST",
            ),
        ] = None,
        memory: Annotated[
            str,
            option(
                SETTINGS_PANEL,
                "--memory",
                help="Random M: tight, loose or a fraction.",
                show_default=True,
                metavar="KIND",
            ),
        ] = "0.6",
        backends: Annotated[
            Optional[str],
            option(
                RUN_PANEL,
                "--backends",
                help="Backends (default all).",
                show_default=False,
                metavar="LIST",
            ),
        ] = None,
        hint_from_dp: Annotated[
            bool,
            option(RUN_PANEL, "--hint-from-dp", help="Warm start from the DP's plan."),
        ] = False,
        json_out: JsonFileOpt = None,
        profiles: ProfilesOpt = None,
    ) -> None:
        """Benchmark the exact MILP on its backends (CP-SAT, CBC, SCIP).

        Random DAGs of 4 to 16 nodes (several seeds per size, the generators' families) and
        the published bert32a100.json profile with K in {4, 8, 16}: each backend runs with a
        time limit, one run at a time (--threads each). Per (instances, backend) row: the
        model's size (variables, constraints), how many runs proved optimality or
        infeasibility, the median wall seconds to that proof (CPU seconds beside it), and
        for the runs stopped by the limit the gap reached ((tps - bound) / tps). The full
        run takes about 15-25 minutes."""
        import json
        import platform
        import time

        from compare.bench.dp import find_profiles
        from compare.bench.milp import BERT, CPU_COUNTED, run, table
        from piper_cli.compare_cmds import parse_ints
        from piper_ilp.errors import InputError
        from piper_ilp.files import atomic_write_text, check_writable
        from piper_ilp.milp import BACKENDS, DEFAULT_THREADS
        from piper_ilp.settings import Settings

        limit = time_limit if time_limit is not None else (10.0 if quick else 60.0)
        threads = DEFAULT_THREADS if threads is None else threads
        Settings(time_limit=limit, threads=threads)  # checked before any work
        seeds = seeds or (2 if quick else 5)
        size_list = parse_ints(sizes, "--sizes") if sizes else ((4, 8) if quick else (4, 8, 12, 16))
        if bert_k is not None:
            bert_ks = parse_ints(bert_k, "--bert-k") if bert_k.strip() else ()
        else:
            bert_ks = (4,) if quick else (4, 8, 16)
        fraction = _memory(memory)
        chosen = tuple(b.strip() for b in (backends or ",".join(BACKENDS)).split(",") if b.strip())
        unknown = [b for b in chosen if b not in BACKENDS]
        if unknown or not chosen:
            raise InputError(
                f"--backends: expected some of {', '.join(BACKENDS)}, got {backends!r}"
            )
        if json_out is not None:
            check_writable(json_out, "benchmark JSON")
        folder = find_profiles(profiles, [BERT] if bert_ks else [])
        machine = f"{platform.node()} ({platform.processor() or platform.machine()})"
        stdout.print(
            f"MILP benchmark: sizes {size_list}, {seeds} seeds, memory {memory}, bert K "
            f"{bert_ks}, limit {limit:g} s, {'DP hint, ' if hint_from_dp else ''}"
            f"{_threads_text(chosen, threads)}, {machine}; {CPU_COUNTED}",
            markup=False,
        )
        t0 = time.perf_counter()
        records = run(
            size_list,
            seeds,
            bert_ks,
            limit,
            threads,
            backends=chosen,
            memory=fraction,
            hint_from_dp=hint_from_dp,
            profiles=folder,
            log=lambda line: stdout.print(line, markup=False),
        )
        stdout.print("", markup=False)
        stdout.print(table(records, limit), markup=False)
        stdout.print(f"\ntotal {time.perf_counter() - t0:.0f} s", markup=False)
        if json_out is not None:
            meta = {
                "time_limit": limit,
                "threads": threads,
                "memory": memory,
                "seeds": seeds,
                "hint_from_dp": hint_from_dp,
            }
            atomic_write_text(json_out, json.dumps({**meta, "records": records}, indent=1) + "\n")

    @bench.command("modes")
    @cli_errors
    def bench_modes_command(
        towers: Annotated[
            str,
            option(
                RUN_PANEL,
                "--towers",
                help="Tower branch counts ('' none).",
                show_default=True,
                metavar="LIST",
            ),
        ] = "2,3",
        wide: Annotated[
            str,
            option(
                RUN_PANEL,
                "--wide",
                help="Wide DAG branch counts ('' none).",
                show_default=True,
                metavar="LIST",
            ),
        ] = "2,3,4",
        unpruned: Annotated[
            bool,
            option(RUN_PANEL, "--unpruned", help="Also without the upper bound."),
        ] = False,
        graphpipe: Annotated[
            Optional[str],
            option(
                RUN_PANEL,
                "--graphpipe",
                help="Instead: issue 35's models from this profile.",
                metavar="PROFILE",
            ),
        ] = None,
        time_limit: Annotated[
            float,
            option(
                RUN_PANEL,
                "--time-limit",
                min=1.0,
                help="With --graphpipe: CPU seconds per solve.",
                show_default=True,
            ),
        ] = 60.0,
    ) -> None:
        """Measure the DP in the other modes (graph pipelining, batch time) on multi-branch
        graphs.

        For every instance (the wide DAG: a source, b one-layer branches, a sink; the
        towers: a source, b chains of 4 layers, a sink, tight memory) and each of the modes
        graph/throughput/1f1b, graph/batch-time/1f1b and sequential/batch-time/1f1b, one
        JSON line: status, value, the labels kept (and the largest set of labels), the
        candidates generated, the exact knapsacks solved and the CPU seconds of the solve
        ("cpu"). The table of docs/architecture.md comes from it.

        --graphpipe PROFILE measures issue 35's models instead (towers 8x4 at K = 64 and
        4x8 at K = 32 of the profile's layer, mmt2, mmt4 and dlrm8 of towers --preset) in
        graph pipelining's two objectives, one JSON line each with the DP's default size
        guards: status (optimal, infeasible, refused, or limit past --time-limit CPU
        seconds), value, counts, and the solve process's CPU seconds and peak RSS
        (docs/benchmarks.md, "GraphPipe-like models")."""
        from compare.bench.dp import wide_instance
        from compare.bench.modes import MODES, measure, towers_instance
        from piper_cli.compare_cmds import parse_ints

        if graphpipe is not None:
            from compare.bench.modes import (
                GRAPH_MODES,
                GRAPHPIPE_ROWS,
                graphpipe_instance,
                measure_isolated,
            )

            for _, shape, K, M_gib in GRAPHPIPE_ROWS:  # bad input: one line, exit 2, up front
                graphpipe_instance(graphpipe, shape, K, M_gib)
            for name, shape, K, M_gib in GRAPHPIPE_ROWS:
                for mode in GRAPH_MODES:
                    row = measure_isolated(graphpipe, name, shape, K, M_gib, mode, time_limit)
                    print_json_line(row)
            return

        insts = [wide_instance(b) for b in (parse_ints(wide, "--wide") if wide.strip() else ())]
        insts += [
            towers_instance(b, 4)
            for b in (parse_ints(towers, "--towers") if towers.strip() else ())
        ]
        for inst in insts:
            for mode in MODES:
                for prune in (True, False) if unpruned else (True,):
                    print_json_line(measure(inst, mode, prune))

    @bench.command("small")
    @cli_errors
    def bench_small_command(
        seeds: Annotated[
            int,
            option(
                RUN_PANEL,
                "--seeds",
                min=1,
                help="Seeds per (family, nodes).",
                show_default=True,
                metavar="N",
            ),
        ] = 3,
        modes: Annotated[
            str,
            option(
                RUN_PANEL,
                "--modes",
                help="exact, greedy (the DP's knapsacks), compiled (the numba kernel).",
                show_default=True,
            ),
        ] = "exact",
        reference: Annotated[
            Optional[str],
            option(RUN_PANEL, "--reference", help="As for bench --reference.", metavar="CMD"),
        ] = None,
        json_out: JsonFileOpt = None,
    ) -> None:
        """Benchmark the DP on small random DAGs, the size campaigns solve by the thousand:
        the families chain, skip, layered, series-parallel, fork-join, towers, numerics at
        8-13 nodes, --seeds seeds each (126 instances with 3). Each is solved in this process
        (CPU s: the solve alone) and, with --reference, by the reference planner; the
        summary gives per mode the median and the worst ratio of our solve CPU to its search
        CPU, overall and per family. The mode compiled (the method compiled) pays its
        one-time load (numba's import and first call) before the solves and prints it
        apart."""
        import json

        from compare.bench.small import row_line, run_small, small_instances, summary
        from piper_ilp.files import atomic_write_text, json_safe

        mode_list = _check_run(modes, reference, json_out, ("exact", "greedy", "compiled"))
        header = (
            f"{'instance':<28} {'mode':<6} {'status':<10} {'TPS':>18} {'CPU s':>8} "
            f"{'ref srch':>8} {'r.search':>8} {'cands':>8}"
        )
        stdout.print(header, markup=False)
        stdout.print("-" * len(header), markup=False)
        rows = run_small(
            small_instances(seeds=range(seeds)),
            mode_list,
            reference=reference,
            on_row=lambda r: stdout.print(row_line(r), markup=False),
        )
        for line in summary(rows):
            stdout.print(line, markup=False)
        if json_out is not None:
            atomic_write_text(json_out, json.dumps(json_safe({"rows": rows}), indent=1) + "\n")


def _register_greedy_fuzz(app: typer.Typer) -> None:
    @app.command("greedy-fuzz")
    @cli_errors
    def greedy_fuzz_command(
        reference: Annotated[
            str,
            option(
                RUN_PANEL, "--reference", help="Reference planner command (below).", metavar="CMD"
            ),
        ],
        family: Annotated[
            str,
            option(
                RUN_PANEL, "--family", help="Instance family.", show_default=True, metavar="NAME"
            ),
        ] = "ties",
        count: Annotated[
            int,
            option(RUN_PANEL, "--count", min=1, help="Instances.", show_default=True, metavar="N"),
        ] = 2000,
        seed: Annotated[
            int,
            option(
                RUN_PANEL,
                "--seed",
                help="Seed of the first instance.",
                show_default=True,
                metavar="N",
            ),
        ] = 0,
        nodes: Annotated[
            str,
            option(
                RUN_PANEL, "--nodes", help="Node counts, in turn.", show_default=True, metavar="A-B"
            ),
        ] = "2-7",
        t_values: TValuesOpt = "1,2",
        integer: Annotated[
            bool, option(RUN_PANEL, "--integer", help="Whole numbers only.")
        ] = False,
        devices: DrawnDevicesOpt = None,
        batch: DrawnBatchOpt = None,
        timeout: Annotated[
            float,
            option(
                RUN_PANEL,
                "--timeout",
                min=0.1,
                help="Per reference run.",
                show_default=True,
                metavar="SECONDS",
            ),
        ] = 60.0,
        json_out: Annotated[
            Optional[Path],
            option(
                OUTPUT_PANEL,
                "--json",
                help="Write the records and counts here.",
                show_default=False,
                metavar="FILE",
            ),
        ] = None,
    ) -> None:
        """Greedy mode (--knapsack greedy) against a reference planner on random instances.

        The reference command (e.g. the original C++ planner) has the placeholders
        {instance} {plan} {devices} {memory} {batch} {bandwidth}; it prints 'tps: Y' (inf:
        no plan) and may write its plan JSON to {plan}. Each instance (by default of the
        family ties: the ties of Piper's rule) is solved by greedy mode and by the
        reference; their TPS must agree within relative 1e-9 (or neither finds a plan), and
        when the reference writes its plan, the evaluator's value of it must equal ours.
        One line per difference, then the counts per outcome: same, tps-differs, plan-value-differs,
        reference-plan-rejected (the evaluator rejects the reference's plan, e.g. memory
        summed in floats that rounds down to M: greedy mode cannot give it), reference-failed
        (nothing to compare), greedy-refused. Exit 1 when any instance differs."""
        from compare.bench.greedy_fuzz import DIFFERENCES, check_fuzz_command, fuzz_greedy
        from piper_cli.compare_cmds import parse_ints, parse_range
        from piper_ilp.files import atomic_write_text, check_writable

        check_fuzz_command(reference)
        if json_out is not None:
            check_writable(json_out, "fuzz JSON")
        records: list[dict] = []

        def show(rec: dict) -> None:
            records.append(rec)
            if rec["outcome"] in DIFFERENCES:
                stdout.print(
                    f"{rec['instance']}: {rec['outcome']}: ours {rec.get('tps')!r}, reference "
                    f"{rec.get('ref_tps')!r}, its plan {rec.get('ref_plan_value')!r}",
                    markup=False,
                )

        summary = fuzz_greedy(
            reference,
            family=family,
            count=count,
            seed=seed,
            nodes=parse_range(nodes, "--nodes"),
            t_values=parse_ints(t_values, "--t-values"),
            integer=integer,
            K=devices,
            N=batch,
            timeout=timeout,
            on_record=show,
        )
        counts = summary["counts"]
        stdout.print(
            f"{count} instances ({family}, seeds {seed}..{seed + count - 1}, nodes {nodes}): "
            + ", ".join(f"{k} {v}" for k, v in counts.items())
            + f"; plan values compared on {summary['plans_compared']}",
            markup=False,
        )
        if json_out is not None:
            import json

            atomic_write_text(
                json_out, json.dumps({**summary, "records": records}, indent=1) + "\n"
            )
            stdout.print(f"records written to {json_out}", markup=False)
        if any(counts[k] for k in DIFFERENCES):
            raise typer.Exit(1)
