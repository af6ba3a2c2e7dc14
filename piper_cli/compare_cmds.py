"""``piper-ilp verify``, ``random`` and ``campaign``: the cross-check commands.

The work is done in :mod:`compare.crosscheck.verify`, :mod:`compare.builders.generators` and
:mod:`compare.experiments.campaign`; this module only reads options and prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from typer.core import TyperCommand

from piper_cli.common import (
    INPUT_PANEL,
    METHOD_PANEL,
    MODE,
    MODE_PANEL,
    OUTPUT_PANEL,
    RESTRICT_PANEL,
    RESTRICTIONS,
    SETTINGS,
    SETTINGS_PANEL,
    ForceOpt,
    JsonOpt,
    ThreadsOpt,
    UniformOpt,
    cli_errors,
    load_with_settings,
    mode_from_flags,
    note_bare_sizes,
    option,
    output_option,
    print_json_line,
    read_overrides,
    restrictions_from_flags,
    stderr,
    stdout,
    time_limit_option,
    with_groups,
)
from piper_cli.format import settings_line, stage_table

__all__ = [
    "register",
    "verdict_table",
    "print_verdict",
    "human_seconds",
    "parse_range",
    "parse_ints",
]

EXTERNAL_PANEL = "External planners"
TValuesOpt = Annotated[
    str,
    option(INPUT_PANEL, "--t-values", metavar="LIST", help="Degrees t offered.", show_default=True),
]
DrawnDevicesOpt = Annotated[
    Optional[int],
    option(
        SETTINGS_PANEL, "--devices", "-K", min=1, metavar="K", help="Every instance's K (drawn)."
    ),
]
DrawnBatchOpt = Annotated[
    Optional[int],
    option(SETTINGS_PANEL, "--batch", "-N", min=1, metavar="N", help="Every instance's N (drawn)."),
]
InstanceOutputOpt = output_option("Write the instance here (default: stdout).")
RESULTS_PANEL = "Results folder and workers"

MethodsOpt = Annotated[
    Optional[str],
    option(
        METHOD_PANEL,
        "--methods",
        metavar="LIST",
        help="{methods}",
        show_default=False,
    ),
]
TimeLimitOpt = time_limit_option("Per method: wall s; CPU s for path, columns (60 s).")
ExternalOpt = Annotated[
    Optional[list[str]],
    option(
        EXTERNAL_PANEL,
        "--external",
        metavar="NAME=CMD",
        help="See docs/external-planners.md.",
    ),
]
ExternalTimeoutOpt = Annotated[
    Optional[float],
    option(
        EXTERNAL_PANEL,
        "--external-timeout",
        min=0.0,
        metavar="SECONDS",
        help="Kill a planner after this long.",
    ),
]
SchedulerOpt = Annotated[
    Optional[str],
    option(
        RESULTS_PANEL,
        "--scheduler",
        metavar="WHERE",
        help="local, processes, tcp://HOST:PORT.",
    ),
]
OutFolderOpt = Annotated[
    Path, option(RESULTS_PANEL, "--out", metavar="DIR", help="The results folder.")
]
WorkersOpt = Annotated[
    int, option(RESULTS_PANEL, "--workers", min=1, metavar="N", help="Worker processes.")
]


class _MethodsHelp(TyperCommand):
    """verify's and campaign's command: the help of --methods names the default methods of
    each pipelining and the registry's others (:data:`compare.crosscheck.methods.METHODS`,
    the one list, and :func:`~compare.crosscheck.methods.default_methods`), loaded only when
    the help is shown (``piper-ilp --help`` loads no project module)."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if isinstance(param.help, str) and "{methods}" in param.help:
                param.help = param.help.replace("{methods}", methods_help())
        super().format_help(ctx, formatter)


def methods_help() -> str:
    """The help of ``--methods``: the default methods (a method that is a default in some
    pipelinings only names them), and the others.

    >>> methods_help()  # doctest: +NORMALIZE_WHITESPACE
    'Default: dp, path (sequential), columns (graph), cpsat, cbc, brute; also: scip, compiled,
    greedy, 2bw, pipedream.'
    """
    from compare.crosscheck.methods import METHODS
    from piper_ilp.mode import PIPELINES

    names, others = [], []
    for name, m in METHODS.items():
        if not m.default_for:
            others.append(name)
        elif m.default_for == set(PIPELINES):
            names.append(name)
        else:
            names.append(f"{name} ({'/'.join(p for p in PIPELINES if p in m.default_for)})")
    return f"Default: {', '.join(names)}; also: {', '.join(others)}."


def resolve_scheduler(text: str | None) -> str | None:
    """The --scheduler value for :func:`compare.experiments.jobs.run_jobs`: None for local
    processes."""
    from compare.experiments.cluster import dask_available
    from compare.experiments.jobs import default_scheduler
    from piper_ilp.errors import InputError

    if text is None:
        return default_scheduler()
    if text == "processes":
        return None
    if not dask_available():
        raise InputError(
            f"--scheduler {text}: dask.distributed is not installed (pip install "
            "'piper-ilp[distributed]')"
        )
    return text


def parse_externals(items: list[str] | None) -> dict[str, str]:
    """``["name=command", ...]`` -> {name: command}, each checked
    (:func:`compare.crosscheck.external.parse_external`)."""
    from compare.crosscheck.external import parse_external
    from compare.crosscheck.methods import METHODS

    out: dict[str, str] = {}
    for text in items or ():
        name, command = parse_external(text, taken=tuple(METHODS) + tuple(out))
        out[name] = command
    return out


def _verify_pipedream(graphs: list[str], cluster: dict, straight: bool, json_out: bool) -> None:
    """``verify --model pipedream``: PipeDream's DP, its MILP and exhaustive search on each
    graph; ``cluster`` holds the texts of --devices, --memory, --bandwidth (--batch
    unused)."""
    from compare.baselines.pipedream import check_pipedream
    from piper_ilp.errors import InputError
    from piper_ilp.instance import check_setting, human_bytes, parse_count, parse_size
    from piper_ilp.pipedream import antichain_states, parse_graph, prepare

    devices, memory, bandwidth = cluster["devices"], cluster["memory"], cluster["bandwidth"]
    if devices is None or bandwidth is None:
        raise InputError("--model pipedream needs --devices (workers) and --bandwidth")
    n = parse_count(devices, "--devices")
    B = check_setting("B", parse_size(bandwidth, "--bandwidth", rate=True), "--bandwidth")
    mem = (
        check_setting("M", parse_size(memory, "--memory"), "--memory")
        if memory is not None
        else None
    )
    note_bare_sizes(memory=[memory], bandwidth=[bandwidth])
    codes = []
    for graph in graphs:
        prep = prepare(parse_graph(graph))
        states = antichain_states(prep)
        v = check_pipedream(
            prep,
            states,
            n,
            B,
            straight=straight,
            memory=mem,
            memory_constraint=mem is not None,
            what="--devices",
        )
        if json_out:
            print_json_line(
                dict(
                    v,
                    instance=graph,
                    model="pipedream",
                    workers=n,
                    bandwidth=B,
                    memory=mem,
                    straight=straight,
                )
            )
        else:
            stdout.print(
                f"{graph}: PipeDream's model, {len(prep.nodes)} layers, {n} workers, B={B:.6g}"
                + (f", memory rule at {human_bytes(mem)}" if mem is not None else "")
                + (", straight" if straight else ""),
                markup=False,
            )
            for m in ("dp", "milp", "brute"):
                if m in v["values"]:
                    val = v["values"][m]
                    stdout.print(
                        f"  {m:6s} {'no plan' if val is None else f'{val:.12g} s'}  "
                        f"({v['cpu_s'].get(m, 0.0):.3f} s CPU)",
                        markup=False,
                    )
                elif m in v["skipped"]:
                    stdout.print(f"  {m:6s} skipped: {v['skipped'][m]}", markup=False)
            stdout.print(
                f"{v['verdict']}" + (f" (referee: {v['referee']})" if v["referee"] else ""),
                markup=False,
            )
            for problem in v["problems"]:
                stdout.print(f"  - {problem}", markup=False)
        codes.append({"match": 0, "mismatch": 1, "inconclusive": 3}[v["verdict"]])
    for code in (1, 3):
        if code in codes:
            raise typer.Exit(code)


def parse_range(text: str, what: str) -> tuple[int, int]:
    """``"3-7"`` -> (3, 7); ``"5"`` -> (5, 5)."""
    from piper_ilp.errors import InputError

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
    from piper_ilp.errors import InputError

    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{what}: expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{what}: expected whole numbers >= 1, got {text!r}")
    return values


def _fmt(x, digits: int = 10) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def human_seconds(seconds: float) -> str:
    """A duration in a human unit: '0.4 ms', '12 ms', '3.2 s', '4 min 5 s'.

    Examples
    --------
    >>> [human_seconds(x) for x in (0.00042, 0.0123, 3.21, 245.0)]
    ['0.42 ms', '12 ms', '3.21 s', '4 min 5 s']
    """
    if seconds < 0.001:
        return f"{seconds * 1000:.2g} ms"
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60.0:
        return f"{seconds:.3g} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s"


def _note(verdict, name: str, r, detail: bool = False) -> str:
    """What the table has no room for: why a method was skipped, its error, an invalid plan."""
    if r.skipped:
        return f"skipped: {r.skipped.split(': ', 1)[-1]}"
    if r.error:
        return r.error
    if r.backend_error:
        info = (
            r.solution.info if r.solution is not None and isinstance(r.solution.info, dict) else {}
        )
        extra = f"; info {info}" if detail and info else ""
        return (
            "backend error (not a proof, not evidence against the others): "
            f"{r.backend_error}{extra}"
        )
    s = r.solution
    if r.evaluation is not None and not r.evaluation.valid:
        return f"INVALID PLAN: {r.evaluation.violations[0]}"
    parts = []
    if s is not None and s.status.value == "out-of-range":
        parts.append(f"out of range: {s.message}" if s.message else "out of range for this backend")
    if r.abs_tol:
        parts.append(f"scaling error {r.abs_tol:.3g}")
    if detail and name in verdict.gaps:
        parts.append(f"{100 * verdict.gaps[name]:+.4g}% vs the optimum")
    return "; ".join(parts)


def verdict_table(verdict, detail: bool = False) -> Table:
    """One row per method: status, TPS (evaluator), bound, stages, time; under the
    batch-time objective the value column is the batch time (the evaluator's, which the
    bound bounds).

    The default table fits 80 columns; ``detail`` adds devices, sum d, more digits and
    the notes column.
    """
    from rich import box

    digits = 12 if detail else 9
    batch = verdict.mode.batch_time
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    columns = [
        ("method", "left"),
        ("status", "left"),
        ("batch time s" if batch else "TPS s", "right"),
        ("bound s", "right"),
        ("stages", "right"),
    ]
    if detail:
        columns += [("devices", "right"), ("sum d", "right")]
    columns += [("time", "right")]
    if detail:
        columns += [("note", "left")]
    for col, just in columns:
        table.add_column(col, justify=just, no_wrap=not (detail and col == "note"))
    for name, r in verdict.results.items():
        s = r.solution
        plan = s.plan if s is not None else None
        row = [
            name,
            r.status,
            _fmt(r.value if batch else r.tps, digits) if plan is not None else "-",
            _fmt(s.bound, digits) if s is not None else "-",
            str(len(plan.stages)) if plan else "-",
        ]
        if detail:
            row += [str(plan.devices) if plan else "-", str(plan.sum_d) if plan else "-"]
        # a skip solved nothing: its seconds are the guard's and the imports' (wall, noise)
        row.append("-" if r.skipped is not None else human_seconds(r.seconds))
        if detail:
            row.append(_note(verdict, name, r, detail=True))
        table.add_row(*row)
    return table


def _lineages_text(verdict) -> str:
    """The proofs by lineage, e.g. ``2 independent lineages: dp, milp (cpsat, cbc)``: a
    lineage alone where its one proof is the method of its name."""
    groups = verdict.proofs_by_lineage
    named = [
        lineage if methods == [lineage] else f"{lineage} ({', '.join(methods)})"
        for lineage, methods in groups.items()
    ]
    return f"{len(groups)} independent lineages: {', '.join(named)}"


def _verdict_line(verdict) -> str:
    unit = "batch time {:.12g} s" if verdict.mode.batch_time else "TPS {:.12g} s per sample"
    what = (
        "proven infeasible"
        if verdict.infeasible
        else ("optimum " + unit.format(verdict.optimum) if verdict.optimum is not None else "")
    )
    if verdict.verdict == "match":
        return f"match: {what}, proved by {_lineages_text(verdict)}"
    if verdict.verdict == "consistent":
        open_ = [
            m
            for m, r in verdict.results.items()
            if m != "greedy" and r.skipped is None and not r.proven
        ]
        return (
            f"consistent: {what}, proved by {_lineages_text(verdict)}; {', '.join(open_)} "
            "proved nothing, and nothing contradicts it"
        )
    if verdict.verdict == "single-proof":
        return (
            f"single-proof: {what}, proved by {', '.join(verdict.proofs)} only (lineage "
            f"{', '.join(verdict.lineages)}); "
            "no independent method confirmed it"
        )
    if verdict.verdict == "inconclusive":
        return "inconclusive: no method proved an optimum or infeasibility (in time)"
    if verdict.verdict == "error":
        return f"error: {len(verdict.errors)} method(s) of this project failed"
    return f"mismatch: {len(verdict.problems)} problem(s)"


def print_verdict(instance, verdict, detail: bool = False) -> None:
    """Print the human form of one instance's verdict, as ``piper-ilp verify`` does: the
    table, notes, the verdict line, problems, and the plans involved.

    Parameters
    ----------
    instance : Instance
        The instance verified.
    verdict : Verdict
        What :func:`compare.crosscheck.verify.verify_instance` returned for it.
    detail : bool
        More digits, devices and sum d, notes in the table, and every plan.
    """
    st = verdict.settings
    mode_note = "" if verdict.mode.is_default else f"; mode {verdict.mode.label}"
    if verdict.restrictions.get("uniform"):
        mode_note += "; uniform (one t and d for every stage)"
    stdout.print(
        f"{instance.source}: {st['nodes']} nodes, {st['edges']} edges; "
        f"{settings_line(instance)}{mode_note}",
        markup=False,
    )
    stdout.print(verdict_table(verdict, detail=detail))
    if not detail:
        for name, r in verdict.results.items():
            note = "" if r.error else _note(verdict, name, r)  # errors are listed below the verdict
            if note:
                stdout.print(f"  {name}: {note}", markup=False)
    stdout.print(_verdict_line(verdict), markup=False)
    for p in verdict.problems:
        stdout.print(f"  - {p}", markup=False)
    for e in verdict.errors:
        stdout.print(f"  - {e}", markup=False)
    shown = list(verdict.involved) if verdict.verdict == "mismatch" else []
    if detail:
        shown = [m for m, r in verdict.results.items() if r.evaluation is not None]
    for name in shown:
        r = verdict.results[name]
        if r.evaluation is not None:
            stdout.print(stage_table(r.evaluation, title=f"{name}'s plan (status {r.status})"))
    if verdict.verdict != "mismatch":
        for name, gap in verdict.gaps.items():
            what = (
                "greedy rule (Piper's option choice)" if name == "greedy" else f"{name} (heuristic)"
            )
            r = verdict.results[name]
            value = (
                f"batch time {r.value:.12g} s" if verdict.mode.batch_time else f"TPS {r.tps:.12g} s"
            )
            stdout.print(f"{what}: {value}, {100 * gap:.4g}% above the optimum", markup=False)
    stdout.print("")


def _verify_one(inst, path: str, names, restrictions, kwargs: dict):
    """verify_instance on one instance and restrictions, showing which method runs on a
    terminal."""
    from compare.crosscheck.verify import verify_instance

    if not sys.stderr.isatty():
        return verify_instance(inst, names, restrictions, **kwargs)
    what = f"{path} (uniform)" if restrictions.uniform else path
    with stderr.status(f"{what}: starting") as status:
        return verify_instance(
            inst,
            names,
            restrictions,
            progress=lambda m, what=what: status.update(f"{what}: running {m}"),
            **kwargs,
        )


def _uniformity_line(u: dict) -> str:
    """The human line of :func:`compare.crosscheck.verify.uniformity_cost`."""
    if u["ratio"] is None:
        return f"cost of uniformity: not known ({u['why']})"
    return (
        f"cost of uniformity: uniform optimum {u['uniform']:.12g} / free optimum {u['free']:.12g} "
        f"= {u['ratio']:.6g} (verdicts: free {u['verdicts'][0]}, uniform {u['verdicts'][1]})"
    )


def register(app: typer.Typer) -> None:
    """Add ``verify``, ``random`` and ``campaign`` to the typer app."""

    @app.command("verify", cls=_MethodsHelp)
    @cli_errors
    @with_groups
    def verify_command(
        instances: Annotated[
            list[str],
            typer.Argument(help="Instance JSON file(s), e.g. a campaign's counterexamples."),
        ],
        methods: MethodsOpt = None,
        time_limit: TimeLimitOpt = 60.0,
        threads: ThreadsOpt = None,
        force: ForceOpt = False,
        greedy: Annotated[
            bool,
            option(METHOD_PANEL, "--greedy/--no-greedy", help="Piper's greedy rule (on)."),
        ] = True,
        milp_hint: Annotated[
            bool, option(METHOD_PANEL, "--milp-hint", help="MILP: start from DP's plan.")
        ] = False,
        model: Annotated[
            str,
            option(METHOD_PANEL, "--model", help="piper or pipedream."),
        ] = "piper",
        cluster: dict = SETTINGS,
        restrict: dict = RESTRICTIONS,
        uniform_cost: Annotated[
            bool,
            option(RESTRICT_PANEL, "--uniform-cost", help="Free and uniform; ratio."),
        ] = False,
        mode_flags: dict = MODE,
        external: ExternalOpt = None,
        external_timeout: ExternalTimeoutOpt = None,
        detail: Annotated[
            bool, option(OUTPUT_PANEL, "--detail", help="More digits, notes, every plan.")
        ] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Cross-check the methods on each INSTANCE and give one verdict.

        Every method solves the instance and the evaluator re-checks every plan; the
        verdict is match, consistent, single-proof, inconclusive, error or mismatch
        (docs/usage.md, "Verify and its verdicts"). The mode flags choose the problem
        (and the default methods); --uniform-cost prints uniform / free optimum; --model
        pipedream checks PipeDream's own model (docs/pipedream.md).

        Exit 0 match or consistent, 1 mismatch or error, 2 bad input or usage,
        3 inconclusive, 4 single-proof (with several instances: the first of 1, 2, 3, 4 that
        occurs).
        """
        from dataclasses import replace

        from compare.crosscheck.verify import parse_methods, uniformity_cost
        from piper_ilp.errors import InputError

        uniform = restrict["uniform"]
        if uniform and uniform_cost:
            raise InputError("--uniform-cost checks both problems; give it without --uniform")
        mode = mode_from_flags(**mode_flags)
        if model == "pipedream":
            if not mode.is_default:
                raise InputError(
                    "--model pipedream checks PipeDream's own model; --pipeline, --objective, "
                    f"--schedule, --in-flight do not apply (got {mode.label})"
                )
            _verify_pipedream(instances, cluster, restrict["no_data_parallel"], json_out)
            return
        if model != "piper":
            raise InputError(f"--model {model!r}: choose piper or pipedream")
        from compare.crosscheck.methods import METHODS, check_mode, default_methods, external_method

        names = parse_methods(methods) if methods is not None else default_methods(mode)
        externals = parse_externals(external)
        from piper_ilp.settings import Settings

        settings = Settings(  # checked once, before any instance is read
            mode=mode,
            time_limit=time_limit,
            threads=threads,
            overrides=read_overrides(**cluster),
            options={"force": force},
        )
        for name in names:
            check_mode(METHODS[name], mode)
        for name, command in externals.items():
            check_mode(external_method(name, command), mode)
        restrictions = restrictions_from_flags(**restrict)
        variants = [restrictions]
        if uniform_cost:  # the free problem first, then the uniform one
            variants = [replace(restrictions, uniform=False), replace(restrictions, uniform=True)]
        codes = []
        for path in instances:
            try:
                inst = load_with_settings(path, settings)
            except InputError as exc:
                stderr.print(f"piper-ilp: error: {exc}", markup=False)
                if json_out:
                    print_json_line({"instance": path, "verdict": None, "error": str(exc)})
                codes.append(2)
                continue
            kwargs = dict(
                settings=settings,
                greedy=greedy,
                milp_hint=milp_hint,
                externals=externals,
                external_timeout=external_timeout,
            )
            verdicts = []
            for variant in variants:
                v = _verify_one(inst, path, names, variant, kwargs)
                verdicts.append(v)
                extra = {}
                if uniform_cost and variant.uniform:
                    extra["uniformity"] = uniformity_cost(verdicts[0], v)
                if json_out:
                    print_json_line({**v.to_dict(), **extra})
                else:
                    print_verdict(inst, v, detail=detail)
                    if extra:
                        stdout.print(_uniformity_line(extra["uniformity"]), markup=False)
                        stdout.print("")
                codes.append(v.exit_code)
        for code in (1, 2, 3, 4):
            if code in codes:
                raise typer.Exit(code)

    @app.command("random")
    @cli_errors
    def random_command(
        family: Annotated[
            str, option(INPUT_PANEL, "--family", help="Graph family (below).", show_default=True)
        ] = "layered",
        nodes: Annotated[
            int, option(INPUT_PANEL, "--nodes", min=1, help="Nodes (layers).", show_default=True)
        ] = 6,
        seed: Annotated[int, option(INPUT_PANEL, "--seed", help="Same seed, same instance.")] = 0,
        t_values: TValuesOpt = "1,2",
        options: Annotated[
            str,
            option(
                INPUT_PANEL, "--options", help="Options per (node, t): N or A-B.", show_default=True
            ),
        ] = "2",
        memory: Annotated[
            str,
            option(INPUT_PANEL, "--memory-kind", help="tight, loose, or f: M = lo + f (hi - lo)."),
        ] = "tight",
        integer: Annotated[
            bool, option(INPUT_PANEL, "--integer", help="Small integers, B = 1 (exact backends).")
        ] = False,
        devices: DrawnDevicesOpt = None,
        batch: DrawnBatchOpt = None,
        output: InstanceOutputOpt = None,
    ) -> None:
        """Write a random instance of a graph family.

        Families: chain, skip (skip connections), layered (a random DAG), series-parallel,
        fork-join, towers; numerics (those shapes with numbers over 1e-6..1e18, exact ties,
        memory at M), hostile (1e-30..1e30, isolated nodes, N = 1, K up to 2^20) and ties
        (the ties that decide Piper's greedy rule). K is drawn in 1..8 and N from 1, 2, 4, 6,
        8 unless given. Deterministic per seed; the instance goes to stdout unless -o."""
        from compare.builders.generators import random_instance
        from piper_ilp.errors import InputError
        from piper_ilp.files import atomic_write_text, check_writable
        from piper_ilp.instance import check_setting, instance_to_dict

        if output is not None:
            check_writable(output, "instance")
        for name, flag, value in (("K", "--devices", devices), ("N", "--batch", batch)):
            if value is not None:  # the option named, not the generated instance's field
                check_setting(name, value, f"{flag} ({name})")
        mem: str | float = memory
        if memory not in ("tight", "loose"):
            try:
                mem = float(memory)
            except ValueError:
                raise InputError(
                    f"--memory-kind: expected tight, loose or a number, got {memory!r}"
                ) from None
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
            atomic_write_text(output, text)
            stderr.print(
                f"wrote {output}: {inst.source}, {len(inst.nodes)} nodes, {len(inst.edges)} edges, "
                f"K={inst.K} N={inst.N}",
                markup=False,
            )

    @app.command("campaign", cls=_MethodsHelp)
    @cli_errors
    @with_groups
    def campaign_command(
        out: OutFolderOpt,
        count: Annotated[
            int,
            option(
                INPUT_PANEL,
                "--count",
                min=0,
                metavar="N",
                help="Random instances.",
                show_default=True,
            ),
        ] = 100,
        seed: Annotated[
            int, option(INPUT_PANEL, "--seed", help="Master seed.", show_default=True)
        ] = 0,
        families: Annotated[
            str,
            option(
                INPUT_PANEL,
                "--families",
                metavar="LIST",
                help="Default: the six shapes (see random).",
            ),
        ] = "chain,skip,layered,series-parallel,fork-join,towers",
        nodes: Annotated[
            str,
            option(INPUT_PANEL, "--nodes", metavar="A-B", help="Node counts.", show_default=True),
        ] = "3-7",
        methods: MethodsOpt = None,
        time_limit: TimeLimitOpt = 60.0,
        threads: ThreadsOpt = None,
        force: ForceOpt = False,
        shrink: Annotated[
            bool,
            option(METHOD_PANEL, "--shrink/--no-shrink", help="Shrink mismatches (on)."),
        ] = True,
        workers: WorkersOpt = 2,
        resume: Annotated[
            bool, option(RESULTS_PANEL, "--resume", help="Continue (may grow --count).")
        ] = False,
        scheduler: SchedulerOpt = None,
        external: ExternalOpt = None,
        external_timeout: ExternalTimeoutOpt = None,
        modes: Annotated[
            Optional[str],
            option(MODE_PANEL, "--modes", metavar="LIST", help="e.g. graph/batch-time, or all."),
        ] = None,
        mode_flags: dict = MODE,
        uniform: UniformOpt = False,
        progress: Annotated[
            Optional[bool],
            option(OUTPUT_PANEL, "--progress/--no-progress", help="Bar (default: on a terminal)."),
        ] = None,
        greedy_gap: Annotated[
            bool,
            option(
                METHOD_PANEL,
                "--greedy-gap/--no-greedy-gap",
                help="Piper's greedy rule too, for the summary's gap (off).",
            ),
        ] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Cross-check many random DAGs in parallel, resumably.

        COUNT random DAGs are checked by verify's methods (each mode's): one JSON line per
        finished instance and mode in OUT/results.jsonl (a killed run loses nothing;
        --resume goes on), mismatches shrunk into OUT/counterexamples/ (replay with verify),
        a summary by family and mode. --modes checks each instance in several modes
        (PIPELINE/OBJECTIVE/SCHEDULE, optionally /RULE, or all: the 8 that differ) instead of
        the mode flags (docs/usage.md).

        Exit 0 when no mismatch, no error and no harness error (the campaign's own failure
        on an instance) was found, 1 otherwise, 2 on bad usage (or OUT in use), 130 on
        SIGINT, 143 on SIGTERM.
        """
        pipeline, objective, schedule = (
            mode_flags[k] for k in ("pipeline", "objective", "schedule")
        )
        in_flight = mode_flags["in_flight"]
        from compare.crosscheck.verify import parse_methods
        from compare.experiments.campaign import (
            HARNESS_ERROR,
            CampaignInterrupted,
            parse_modes,
            run_campaign,
            summary_lines,
        )
        from piper_ilp.errors import InputError

        if modes is not None and any(x is not None for x in (pipeline, objective, schedule)):
            raise InputError(
                "--modes replaces --pipeline, --objective and --schedule; give one or the other"
            )
        rule = in_flight.value if in_flight is not None else "piper"
        mode_list = (
            parse_modes(modes, rule) if modes is not None else (mode_from_flags(**mode_flags),)
        )

        fams = tuple(f.strip() for f in families.split(",") if f.strip())
        try:
            summary = run_campaign(
                out,
                count,
                seed,
                families=fams,
                nodes=parse_range(nodes, "--nodes"),
                methods=parse_methods(methods) if methods is not None else None,
                time_limit=time_limit,
                threads=threads,
                workers=workers,
                resume=resume,
                do_shrink=shrink,
                progress=progress,
                scheduler=resolve_scheduler(scheduler),
                externals=parse_externals(external),
                external_timeout=external_timeout,
                modes=mode_list,
                uniform=uniform,
                greedy_gap=greedy_gap,
                force=force,
                note=lambda text: stderr.print(f"piper-ilp: note: {text}", markup=False),
            )
        except CampaignInterrupted as exc:
            stderr.print(
                f"piper-ilp: interrupted ({exc.done} results saved in {exc.results}; --resume goes "
                "on)",
                markup=False,
            )
            raise typer.Exit(128 + exc.signum) from None
        if json_out:
            print_json_line(summary)
        else:
            for line in summary_lines(summary):
                stdout.print(line, markup=False)
            stdout.print(
                f"results in {out}/results.jsonl, summary in {out}/summary.json", markup=False
            )
            if summary["mismatches"]:
                stdout.print(
                    f"counterexamples (replay with piper-ilp verify): {out}/counterexamples/",
                    markup=False,
                )
        if any(summary["verdicts"].get(v) for v in ("mismatch", "error", HARNESS_ERROR)):
            raise typer.Exit(1)
