"""Benchmark of the DP on the paper's configurations (``piper-ilp bench``).

For every configuration and knapsack mode, one fresh worker process (spawned by
:mod:`multiprocessing`, so that its peak RSS and CPU time are its own) loads the instance
and solves it; the row gives

* ``seconds``: wall time of the solve alone;
* ``cpu_solve``: ``time.process_time`` around the solve alone (user + system);
* ``cpu_process`` (the table's "proc CPU"): what a user's ``piper-ilp solve`` costs, start-up
  included: user + system of one fresh ``piper-ilp solve`` process (the command ``cli``
  that the CLI passes to :func:`run_bench`) on the same instance, written to a file, with
  the same knapsack mode: the interpreter's start-up, every import of the command (typer,
  rich, pydantic, numpy, the packages), argument parsing, loading, the solve and the
  printed table. Its TPS must equal the worker's (``==``), else the row is an error.
  Without ``cli``, and for a run killed at the timeout, it is the worker's own figure;
* ``cpu_worker``: user + system of the whole worker (``getrusage(RUSAGE_SELF)``: Python
  start-up, the imports of the DP and the core, loading, the solve; no CLI);
* ``cpu_kernel_load`` (greedy mode): the compiled rule's one-time load in the worker
  (:func:`dp.greedy_tables.load_rule_kernel`: numba's import and the kernels' load from
  numba's cache, or their compile the first time), measured before the solve and not
  in ``cpu_solve`` (it is in ``cpu_worker`` and ``cpu_process``);
* ``rss_mb``: the worker's peak RSS (``ru_maxrss``);
* the TPS, the status, and the DP's counts (successor-closed sets, stage candidates).

A run that takes longer than the timeout is killed (status ``timeout``); an instance
above the DP's size guard (``max_ideals`` successor-closed sets) is ``refused`` at once.
With a reference planner command (the original C++ planner, built by the user), the same
instance is given to it in the same run (once per configuration, shared by the modes) and
its whole-process CPU time is measured (``getrusage(RUSAGE_CHILDREN)`` delta). Its stdout
is read (the last 64 KiB) for two optional lines, the *reference output convention*::

    search-cpu-seconds: X   # the reference's own CPU clock around its search alone
    tps: Y                  # the TPS of the plan it found (inf, or no plan: none found)

A row then gives two ratios, ``ratio_search`` = our ``cpu_solve`` / the reference's
``search-cpu-seconds`` (when it printed one) and ``ratio`` = our ``cpu_process`` / the
reference's whole-process CPU, and ``tps_agree``: whether our TPS equals the reference's
within relative 1e-9 (None when either is unknown; both "no plan" agree). A disagreement
is flagged on the row: it is a finding. The original planner picks each stage's options
with Piper's greedy rule (cost model sec. 5), so the ``greedy`` mode should agree with it
exactly and the ``exact`` mode can only be lower or equal. A reference that prints neither
line still gets the whole-process ratio; one killed at the timeout gets none, and its row
gives the CPU seconds it had used by then.

The published profiles are found in ``profiles`` (``--profiles DIR``), else in the
folder named by the environment variable ``PIPER_PROFILES``, else in
``../shared/piper-inputs`` beside the current directory. The deeper BERTs (64 and 96
layers) are made as the paper made them: :func:`compare.builders.deepen.deepen` with
``chain_only=True``. The wide family (a source, ``w`` parallel branches, a sink) is
synthetic and needs no profile.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import resource
import shlex
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from compare.experiments.worker_guard import guard_worker, kill_group
from piper_ilp.errors import InputError

__all__ = [
    "Config",
    "CONFIGS",
    "PROFILES_ENV",
    "find_profiles",
    "wide_instance",
    "load_config",
    "run_config",
    "run_reference",
    "parse_reference_output",
    "compare_reference",
    "run_bench",
    "row_line",
    "HEADER",
]

GIB = 2**30
PROFILES_ENV = "PIPER_PROFILES"
PLACEHOLDERS = ("instance", "devices", "memory", "batch", "bandwidth")
OUTPUT_TAIL = 64 * 1024  # bytes of the reference's stdout (and stderr) read, from the end
TPS_RTOL = 1e-9  # relative tolerance of the TPS cross-check (cost model sec. 6)
REFERENCE_KEYS = {"search-cpu-seconds": "ref_search_cpu", "tps": "ref_tps"}


@dataclass(frozen=True)
class Config:
    """One benchmark case: a published profile (optionally deepened) or a wide synthetic
    DAG, and the settings K, M (GiB), N, B (GiB/s).

    ``cpp_seconds`` is the original planner's time quoted for this case (g++ -O3, 2-core
    machine), for information; a measured reference comes from ``--reference``."""

    name: str
    profile: str | None
    K: int
    M_gib: float
    N: int
    B_gib: float = 25.0
    layers: int | None = None
    chain_only: bool = False
    branches: int | None = None
    cpp_seconds: float | None = None
    quick: bool = False


CONFIGS = [
    Config("bert32-K64", "bert32a100", 64, 2, 512, quick=True),
    Config("bert32-K512", "bert32a100", 512, 8, 1920, cpp_seconds=4.4, quick=True),
    Config("bert32-K2048", "bert32a100", 2048, 8, 1920, cpp_seconds=77.6),
    Config(
        "bert64-K1024", "bert32a100", 1024, 8, 1920, layers=64, chain_only=True, cpp_seconds=58.6
    ),
    Config(
        "bert96-K2048", "bert32a100", 2048, 8, 2048, layers=96, chain_only=True, cpp_seconds=377
    ),
    Config("resnet-K8", "resnet", 8, 4, 7680, cpp_seconds=5.0, quick=True),
    Config("resnet-K64", "resnet", 64, 2, 7680, cpp_seconds=12.6),
    Config("gnmt-K8", "gnmt", 8, 1.2, 256),
    Config("gnmt-K64", "gnmt", 64, 1.2, 256),
    Config("gnmt-K256", "gnmt", 256, 1.2, 256),
    Config("wide8", None, 16, 1, 64, branches=8, quick=True),
    Config("wide12", None, 16, 1, 64, branches=12),
    Config("wide16", None, 16, 1, 64, branches=16),
]


def find_profiles(
    profiles: str | Path | None,
    needed: Sequence[str],
    environ: dict | None = None,
    cwd: Path | None = None,
) -> Path | None:
    """The folder holding the published profiles ``needed`` (file stems): ``profiles``
    when given, else ``$PIPER_PROFILES``, else ``../shared/piper-inputs`` beside ``cwd``.
    None when nothing is needed.

    Raises
    ------
    InputError
        The chosen folder lacks a needed profile (one line: where it looked, how to say
        where they are).
    """
    if not needed:
        return None
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    if profiles is not None:
        folder, how = Path(profiles), "--profiles"
    elif environ.get(PROFILES_ENV):
        folder, how = Path(environ[PROFILES_ENV]), f"${PROFILES_ENV}"
    else:
        folder, how = cwd.parent / "shared" / "piper-inputs", "the default ../shared/piper-inputs"
    missing = [f"{n}.json" for n in needed if not (folder / f"{n}.json").is_file()]
    if missing:
        raise InputError(
            f"the Piper profiles are not in {folder} ({how}; missing {', '.join(missing)}): "
            f"give --profiles DIR or set {PROFILES_ENV}"
        )
    return folder


def wide_instance(
    branches: int, K: int = 16, M: float = GIB, N: int = 64, B: float = 25.0 * GIB, seed: int = 0
):
    """A source, ``branches`` parallel one-layer branches, and a sink (networkx): the
    number of successor-closed sets is 2^branches + 2, which grows past the DP's size
    guard at 15 branches. Each layer has options for t in {1, 2}, each a "vanilla" and an
    "activation recomp" option (so Piper's greedy rule applies), with profile-like numbers
    drawn from ``seed``."""
    import networkx as nx
    import numpy as np

    g = nx.DiGraph()
    sink = branches + 1
    for v in range(1, branches + 1):
        g.add_edge(0, v)
        g.add_edge(v, sink)
    names = {v: "source" if v == 0 else "sink" if v == sink else "branch" for v in g}
    return profile_like_instance(
        g,
        np.random.default_rng([branches, seed]),
        dict(K=K, M=M, N=N, B=B),
        f"wide DAG ({branches} parallel branches)",
        names=names,
        sync=True,
    )


def profile_like_instance(g, rng, settings: dict, source: str, *, names=None, sync=False):
    """An instance on the DAG ``g`` (networkx, integer nodes) with profile-like numbers
    drawn from ``rng``: per edge a cost, per node a time, weights and activations, and
    options for t in {1, 2}, each a "vanilla" and an "activation recomp" option (an eighth
    of the activations for a third more time; t = 2 runs at 0.9 x 2 the speed). ``sync``
    draws the tensor-parallel sync times (0 for t = 1), else they are 0; ``names`` names
    the nodes; ``settings`` holds K, M, N, B.

    Returns
    -------
    Instance
    """
    import networkx as nx

    from piper_ilp.instance import instance_from_dict

    for u, v in g.edges:
        g[u][v]["c"] = float(rng.uniform(1e6, 8e6))
    nodes = []
    for v in nx.topological_sort(g):
        p, w = float(rng.uniform(0.5e-3, 2e-3)), float(rng.uniform(2e7, 1e8))
        a, b = float(rng.uniform(2e7, 8e7)), float(rng.uniform(1e6, 1e7))
        tmpcs = {}
        for t in (1, 2):

            def sync_time(t: int = t) -> float:
                return float(rng.uniform(0, 1e-5)) * (t - 1) if sync else 0.0

            base = {
                "parameterSize": w / t,
                "memoryUsageB": b / t,
                "syncTimeFw": {str(u): sync_time() for u in g.predecessors(v)},
                "syncTimeBw": {str(x): sync_time() for x in g.successors(v)},
            }
            speed = 0.9 * t if t > 1 else 1.0
            tmpcs[str(t)] = [
                {"id": "vanilla", "timePerSample": p / speed, "memoryUsageA": a / t, **base},
                {
                    "id": "activation recomp",
                    "timePerSample": 1.33 * p / speed,
                    "memoryUsageA": a / (8 * t),
                    **base,
                },
            ]
        named = {} if names is None else {"name": names[v]}
        nodes.append({"id": int(v), **named, "TMPCs": tmpcs})
    data = {
        "maxDevices": settings["K"],
        "maxMemoryPerDevice": settings["M"],
        "bandwidth": settings["B"],
        "mbsInBatch": settings["N"],
        "nodes": nodes,
        "edges": [
            {"sourceId": int(u), "destId": int(v), "communicationCost": g[u][v]["c"]}
            for u, v in g.edges
        ],
    }
    return instance_from_dict(data, source=source)


def load_config(cfg: Config, profiles: Path | None):
    """The instance of a configuration (deepened, or built, as it says) with its settings."""
    from compare.builders.deepen import deepen
    from piper_ilp.instance import load_instance

    settings = dict(K=cfg.K, M=cfg.M_gib * GIB, N=cfg.N, B=cfg.B_gib * GIB)
    if cfg.branches is not None:
        return wide_instance(cfg.branches, **settings)
    if profiles is None:
        raise InputError(
            f"{cfg.name}: needs the profile {cfg.profile}.json (no profiles folder given)"
        )
    inst = load_instance(profiles / f"{cfg.profile}.json")
    if cfg.layers:
        inst = deepen(inst, cfg.layers, chain_only=cfg.chain_only)
    return inst.with_settings(**settings)


def _solve_in_worker(
    conn, parent_pid: int, cfg: Config, mode: str, profiles: Path | None, max_ideals: int
) -> None:
    """The worker: load, solve once, measure, send the row back (never raises)."""
    guard_worker(parent_pid)  # SIGINT ignored (the parent decides); dies with the parent
    row: dict = {}
    try:
        from dp import solve_dp
        from piper_ilp.errors import SizeLimitError

        inst = load_config(cfg, profiles)
        row["nodes"] = len(inst.nodes)
        row["edges"] = len(inst.edges)
        if mode == "greedy":  # (the compiled rule's one-time load, measured apart)
            from dp.greedy_tables import load_rule_kernel

            c0 = time.process_time()
            load_rule_kernel()
            row["cpu_kernel_load"] = time.process_time() - c0
        t0 = time.perf_counter()
        c0 = time.process_time()
        try:
            sol = solve_dp(inst, knapsack=mode, max_ideals=max_ideals)
        except SizeLimitError as exc:
            row.update(status="refused", message=str(exc))
        else:
            row.update(
                status=sol.status.value,
                tps=sol.tps,
                ideals=sol.info.get("ideals"),
                stage_pairs=sol.info.get("stage_pairs"),
                stage_candidates=sol.info.get("stage_candidates"),
            )
        row["cpu_solve"] = time.process_time() - c0
        row["seconds"] = time.perf_counter() - t0
    except Exception as exc:  # reported as the row's status, the bench goes on
        row.update(status="error", message=f"{type(exc).__name__}: {exc}")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    row["cpu_process"] = ru.ru_utime + ru.ru_stime
    row["rss_mb"] = ru.ru_maxrss / 1024.0  # KiB on Linux
    conn.send(row)
    conn.close()


def _usage_so_far(pid: int | None) -> dict:
    """CPU seconds (user + system) and peak RSS of a live process, from /proc (Linux);
    {} elsewhere."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    out = {"cpu_process": (int(fields[11]) + int(fields[12])) / ticks}
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            out["rss_mb"] = int(line.split()[1]) / 1024.0
    return out


def run_config(
    cfg: Config, mode: str, profiles: Path | None, timeout: float, max_ideals: int
) -> dict:
    """Solve one configuration in a fresh spawned worker; the row (status ``timeout``
    when it ran past ``timeout`` seconds and was killed, with the CPU time and peak RSS
    it had used by then)."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_solve_in_worker,
        args=(send, os.getpid(), cfg, mode, profiles, max_ideals),
        daemon=True,
        name="piper-bench-worker",
    )
    proc.start()
    send.close()
    try:
        if recv.poll(timeout):
            try:
                row = recv.recv()
            except EOFError:
                row = None
        else:
            row = {
                "status": "timeout",
                "seconds": timeout,
                "message": f"killed after {timeout:g} s",
                **_usage_so_far(proc.pid),
            }
        proc.join(5.0)
        if row is None:
            row = {"status": "error", "message": f"the worker died (exit code {proc.exitcode})"}
    finally:
        if proc.is_alive():
            kill_group(proc.pid)
            proc.join()
        recv.close()
    return {"config": cfg.name, "mode": mode, **row}


def _run_timed(argv: list, out, err, timeout: float, watch=None) -> tuple[int, object, float]:
    """Run ``argv`` (stdin closed, stdout and stderr to ``out`` and ``err``), killed after
    ``timeout`` seconds: its exit status (negative: the signal), its own resource usage
    (``wait4``) and the wall seconds. ``watch(pid)``, when given, is called once the child
    runs and returns a function called once it has exited, before it is reaped (so a
    poller of /proc/pid never reads a reused pid), and again on the way out (so it must
    allow a second call). Raises OSError when it cannot start.

    The child leads a process group of its own, and the group is killed (SIGKILL) at the
    timeout, when the child has exited (what it left running in the background), and
    when this call is left early (an interrupt): a reference run through ``sh -c`` takes
    its own children with it. The group is killed only while the child is not reaped, so
    its id cannot belong to another process."""
    import threading

    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
    )

    def kill_group():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:  # the group is empty already
            pass

    # everything after the start inside the try: an interrupt while the watcher or the
    # timer starts (a loaded machine makes that window long) still kills the group
    done = timer = None
    reaped = False
    try:
        done = watch(proc.pid) if watch is not None else None
        timer = threading.Timer(timeout, kill_group)
        timer.start()
        if hasattr(os, "waitid"):  # exited, not yet reaped
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            timer.cancel()
            kill_group()
        if done is not None:
            done()
        _, status, usage = os.wait4(proc.pid, 0)
        reaped = True
    finally:
        if timer is not None:
            timer.cancel()
        if not reaped:
            kill_group()
            try:
                os.waitpid(proc.pid, 0)
            except OSError:
                pass
        if done is not None:
            done()  # (again: it may be called twice)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    return proc.returncode, usage, time.perf_counter() - t0


def run_cli(
    cli: Sequence[str], instance_path: Path, mode: str, max_ideals: int, timeout: float
) -> dict:
    """Our side as a user runs it: one fresh ``cli`` process (``piper-ilp solve``'s argv)
    on ``instance_path`` (its settings in the file) with ``--knapsack mode --max-ideals
    max_ideals --json``. Returns ``cpu_process`` (user + system of that process, from
    ``wait4``) and ``cli_tps``, or ``cli_error`` (with the exit status or the timeout)."""
    argv = [*cli, str(instance_path), "--knapsack", mode, "--max-ideals", str(max_ideals), "--json"]
    with tempfile.TemporaryFile() as out:
        returncode, usage, seconds = _run_timed(argv, out, subprocess.DEVNULL, timeout)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    if returncode < 0 and seconds >= timeout:
        return {"cli_error": f"piper-ilp solve killed after {timeout:g} s"}
    if returncode != 0:
        return {"cli_error": f"{' '.join(argv[:4])} ...: exit status {returncode}"}
    try:
        tps = json.loads(text.splitlines()[-1]).get("tps")
    except (ValueError, IndexError, AttributeError):
        return {"cli_error": "no JSON line from piper-ilp solve --json"}
    return {"cpu_process": usage.ru_utime + usage.ru_stime, "cli_tps": tps}


def _same_tps(printed, ours) -> bool:
    """The CLI's JSON TPS (null for none or a non-finite one) equals the worker's, exactly."""
    if ours is None or ours != ours or ours in (float("inf"), float("-inf")):
        return printed is None
    return printed == ours


def _tail(f, limit: int = OUTPUT_TAIL) -> str:
    """The last ``limit`` bytes of a binary temporary file, decoded (bad bytes replaced)."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode("utf-8", errors="replace")


def parse_reference_output(text: str) -> dict:
    """The reference output convention: lines ``search-cpu-seconds: X`` and ``tps: Y``
    (leading blanks allowed; the last such line wins) as ``ref_search_cpu`` and ``ref_tps``
    (floats; ``tps: inf`` or ``nan`` means the reference found no plan: ``inf``, and
    ``ref_no_plan`` True, since JSON writes inf as null). A line whose value is not a
    number is ignored; a negative CPU time too."""
    out: dict = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        name = REFERENCE_KEYS.get(key.strip().lower()) if sep else None
        if name is None:
            continue
        try:
            x = float(value.strip())
        except ValueError:
            continue
        if name == "ref_search_cpu":
            if x >= 0 and x != float("inf"):
                out[name] = x
        else:
            out[name] = float("inf") if math.isnan(x) else x
    if out.get("ref_tps") == float("inf"):
        out["ref_no_plan"] = True  # (the JSON writes inf as null)
    elif "ref_tps" in out:
        out.pop("ref_no_plan", None)
    return out


def _poll_peak_rss(pid: int, stop, peak: dict, interval: float = 0.02) -> None:
    """Until ``stop`` is set, keep in ``peak["mb"]`` the largest VmHWM (MiB) read from
    /proc for ``pid`` (Linux; nothing elsewhere)."""
    while True:
        mb = _usage_so_far(pid).get("rss_mb")
        if mb is not None:
            peak["mb"] = max(peak.get("mb", 0.0), mb)
        if stop.wait(interval):
            return


def run_reference(command: str, instance_path: Path, inst, timeout: float) -> dict:
    """Run the reference planner ``command`` (placeholders {instance} {devices} {memory}
    {batch} {bandwidth}) on one instance: its CPU time (user + system: the
    ``getrusage(RUSAGE_CHILDREN)`` delta around it), wall seconds, and peak RSS; killed
    after ``timeout`` seconds. Its stdout is parsed by :func:`parse_reference_output`
    (``ref_search_cpu``, ``ref_tps`` when printed).

    Peak RSS: Linux carries a forked child's high-water mark across ``exec``, so ``wait4``
    reports at least this (large) Python process's own peak however small the reference
    is. That figure is taken only when it clearly exceeds our own peak at the spawn (by
    10 % + 8 MiB: then it is the reference's); otherwise the peak is the largest VmHWM of the exec'd
    program read from /proc every 20 ms while it runs (``ref_rss_polled``; a lower bound, None when
    the
    run was too short to be read)."""
    import threading

    values = {
        "instance": shlex.quote(str(instance_path)),
        "devices": inst.K,
        "memory": repr(inst.M),
        "batch": inst.N,
        "bandwidth": repr(inst.B),
    }
    argv = shlex.split(command.format(**values))
    peak: dict = {}

    def watch(pid):
        # Popen has returned, so the exec succeeded: /proc now shows the reference's own memory
        stop = threading.Event()
        poller = threading.Thread(target=_poll_peak_rss, args=(pid, stop, peak), daemon=True)
        poller.start()

        def done():
            stop.set()
            poller.join()

        return done

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        own_peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            returncode, usage, seconds = _run_timed(argv, out, err, timeout, watch)
        except OSError as exc:
            return {
                "ref_status": "error",
                "ref_message": f"cannot run {argv[0]!r}: {exc.strerror or exc}",
            }
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        printed = _tail(out)
        tail = _tail(err).strip().splitlines()
    row = {
        "ref_status": "ok" if returncode == 0 else "error",
        "ref_seconds": seconds,
        "ref_cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
    }
    if seconds >= timeout and returncode < 0:
        # killed: the CPU it had used by then is a lower bound on what it needs (no ratio)
        row.update(
            ref_status="timeout",
            ref_message=f"killed after {timeout:g} s, {row['ref_cpu']:.1f} CPU s used by then",
        )
    if usage.ru_maxrss > 1.1 * own_peak_kib + 8192:  # clearly above what it inherited
        row["ref_rss_mb"] = usage.ru_maxrss / 1024.0
    else:
        row["ref_rss_mb"] = peak.get("mb")
        row["ref_rss_polled"] = True
    if row["ref_status"] == "error":
        row["ref_message"] = f"exit status {returncode}" + (f": {tail[-1]}" if tail else "")
    elif row["ref_status"] == "ok":
        row.update(parse_reference_output(printed))
    return row


def _our_tps(row: dict):
    """Our TPS in a row, inf for "no plan" (status infeasible), None when unknown."""
    ours = row.get("tps")
    return float("inf") if ours is None and row.get("status") == "infeasible" else ours


def compare_reference(row: dict, ref: dict) -> dict:
    """What a bench row gains from the reference's run ``ref``: its fields, ``ratio`` (our
    whole-process CPU / the reference's), ``ratio_search`` (our solve CPU / the reference's
    search CPU, when it printed one), and ``tps_agree`` with ``tps_rel_diff`` (ours minus
    the reference's, relative to the reference's) when both TPS are known. Our "no plan"
    (status infeasible) is TPS inf here."""
    extra = dict(ref)
    if ref.get("ref_status") != "ok":
        return extra
    if ref.get("ref_cpu") and row.get("cpu_process") is not None:
        extra["ratio"] = row["cpu_process"] / ref["ref_cpu"]
    if ref.get("ref_search_cpu") and row.get("cpu_solve") is not None:
        extra["ratio_search"] = row["cpu_solve"] / ref["ref_search_cpu"]
    ours = _our_tps(row)
    theirs = ref.get("ref_tps")
    if ours is None or theirs is None:
        extra["tps_agree"] = None
        return extra
    inf = float("inf")
    if ours == inf or theirs == inf:
        extra["tps_agree"] = ours == theirs
    else:
        extra["tps_agree"] = abs(ours - theirs) <= TPS_RTOL * max(abs(ours), abs(theirs))
        if theirs:
            extra["tps_rel_diff"] = (ours - theirs) / theirs
    return extra


def check_reference_command(command: str) -> None:
    """Refuse a reference command with an unknown placeholder or without {instance}."""
    probe = {k: "x" for k in PLACEHOLDERS}
    try:
        command.format(**probe)
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(
            f"--reference: bad placeholder in {command!r} ({exc}); use "
            f"{', '.join('{' + k + '}' for k in PLACEHOLDERS)}"
        ) from None
    if "{instance}" not in command:
        raise InputError(f"--reference: {command!r} has no {{instance}} placeholder")
    if not shlex.split(command.format(**probe)):
        raise InputError("--reference: empty command")


HEADER = (
    f"{'config':<13} {'mode':<6} {'status':<9} {'TPS':>17} {'seconds':>8} {'CPU s':>8} "
    f"{'proc CPU':>8} {'RSS MB':>7} {'sets':>6} {'cands':>9} {'ref srch':>8} {'ref CPU':>8} "
    f"{'ref MB':>6} {'r.search':>8} {'r.proc':>7} {'ref TPS':>7}"
)


def _fmt(x, spec: str, width: int) -> str:
    return "-".rjust(width) if x is None else format(x, spec)


def _agreement(row: dict) -> str:
    agree = row.get("tps_agree")
    return "-" if agree is None else "same" if agree else "DIFF"


def row_line(row: dict) -> str:
    """One table line for a row: ``ref srch`` / ``ref CPU`` the reference's search / whole
    CPU seconds, ``ref MB`` its peak RSS, ``r.search`` our solve CPU / its search CPU, ``r.proc``
    our whole-process CPU / its whole-process CPU, ``ref TPS`` whether the TPS agree (DIFF is
    spelled out
    after the line)."""
    line = (
        f"{row['config']:<13} {row['mode']:<6} {row['status']:<9} "
        f"{_fmt(row.get('tps'), '17.12g', 17)} "
        f"{_fmt(row.get('seconds'), '8.2f', 8)} {_fmt(row.get('cpu_solve'), '8.2f', 8)} "
        f"{_fmt(row.get('cpu_process'), '8.2f', 8)} "
        f"{_fmt(row.get('rss_mb'), '7.0f', 7)} {_fmt(row.get('ideals'), '6d', 6)} "
        f"{_fmt(row.get('stage_candidates'), '9d', 9)} "
        f"{_fmt(row.get('ref_search_cpu'), '8.2f', 8)} {_fmt(row.get('ref_cpu'), '8.2f', 8)} "
        f"{_fmt(row.get('ref_rss_mb'), '6.0f', 6)} "
        f"{_fmt(row.get('ratio_search'), '8.3f', 8)} {_fmt(row.get('ratio'), '7.3f', 7)} "
        f"{_agreement(row):>7}"
    )
    if row.get("status") in ("refused", "timeout", "error"):
        line += f"  [{row.get('message', '')}]"
    if row.get("cpu_kernel_load") is not None:
        line += (
            f"  [one-time load of the compiled rule {row['cpu_kernel_load']:.2f} s, not in CPU s]"
        )
    if row.get("ref_status") not in (None, "ok"):
        line += f"  [reference {row['ref_status']}: {row.get('ref_message', '')}]"
    if row.get("tps_agree") is False:
        ours = _our_tps(row)
        theirs = row.get("ref_tps")
        if (
            ours is not None
            and theirs is not None
            and ours != float("inf")
            and theirs != float("inf")
        ):
            side = "lower" if ours < theirs else "HIGHER"
            how = f"ours {side} by {abs(row.get('tps_rel_diff', 0.0)):.3g} relative"
        else:
            how = "one side found no plan"
        line += f"  [TPS DIFFERS from the reference: ours {ours!r}, reference {theirs!r}; {how}]"
    return line


def run_bench(
    configs: Sequence[Config],
    modes: Sequence[str],
    profiles: Path | None,
    *,
    repeat: int = 3,
    timeout: float = 900.0,
    max_ideals: int | None = None,
    reference: str | None = None,
    on_row: Callable[[dict], None] | None = None,
    cli: Sequence[str] | None = None,
) -> list[dict]:
    """Run every configuration in every mode; the rows (``seconds`` and CPU times are the
    median of up to ``repeat`` runs when a run takes under 20 s; RSS the largest). With
    ``cli`` (the argv of ``piper-ilp solve``, given by the CLI), each run is also solved by
    one fresh process of it, whose CPU is the row's ``cpu_process`` (see the module's
    docstring)."""
    from dp import DEFAULT_MAX_IDEALS

    max_ideals = DEFAULT_MAX_IDEALS if max_ideals is None else max_ideals
    rows = []
    with tempfile.TemporaryDirectory(prefix="piper-bench-") as tmp:
        for cfg in configs:
            ref: dict | None = None
            path: Path | None = None
            if reference is not None or cli is not None:
                from piper_ilp.instance import save_instance

                inst = load_config(cfg, profiles)
                path = Path(tmp) / f"{cfg.name}.json"
                save_instance(inst, path)
            if reference is not None:
                ref = run_reference(reference, path, inst, timeout)

            def one_run(mode: str, cfg: Config = cfg, path: Path | None = path) -> dict:
                run = run_config(cfg, mode, profiles, timeout, max_ideals)
                if cli is not None and run["status"] in ("optimal", "feasible", "infeasible"):
                    run["cpu_worker"] = run.pop("cpu_process", None)
                    run.update(run_cli(cli, path, mode, max_ideals, timeout))
                    if "cli_error" in run or not _same_tps(run.get("cli_tps"), run.get("tps")):
                        why = (
                            run.get("cli_error")
                            or f"piper-ilp solve gave TPS {run.get('cli_tps')!r}, the worker "
                            f"{run.get('tps')!r}"
                        )
                        run.update(status="error", message=why)
                return run

            for mode in modes:
                runs = [one_run(mode)]
                while (
                    len(runs) < repeat
                    and runs[-1]["status"] in ("optimal", "feasible", "infeasible")
                    and runs[-1]["seconds"] < 20
                ):
                    runs.append(one_run(mode))
                row = dict(runs[0])
                for key in ("seconds", "cpu_solve", "cpu_process", "cpu_worker", "cpu_kernel_load"):
                    vals = [r[key] for r in runs if r.get(key) is not None]
                    if vals:
                        row[key] = statistics.median(vals)
                if any("rss_mb" in r for r in runs):
                    row["rss_mb"] = max(r.get("rss_mb", 0.0) for r in runs)
                row["runs"] = len(runs)
                row["cpp_seconds_quoted"] = cfg.cpp_seconds
                if ref is not None:
                    row.update(compare_reference(row, ref))
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return rows


def bench_json(configs: Sequence[Config], rows: list[dict]) -> str:
    """The JSON document ``--json`` writes (non-finite numbers as null)."""
    from piper_ilp.files import json_safe

    return (
        json.dumps(
            json_safe({"configs": [asdict(c) for c in configs], "rows": rows}),
            indent=1,
            allow_nan=False,
        )
        + "\n"
    )
