"""Start-up: what each command loads (no timing: the modules a real process imported).

Every ``piper-ilp`` run pays for its imports before it does anything; the original C++
planner starts in a few milliseconds, so the CLI loads only what the command needs
(issue 13). These tests run the command in a fresh interpreter with ``-X importtime`` and
read the list of modules it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import INPUTS, REPO

from compare.builders.generators import FAMILIES, random_instance

SOLVER_LIBRARIES = {
    "numpy",
    "networkx",
    "ortools",
    "pulp",
    "matplotlib",
    "dask",
    "distributed",
    "scipy",
    "pandas",
}
MILP_AND_EXTRAS = (SOLVER_LIBRARIES - {"numpy"}) | {
    "piper_ilp.milp.model",
    "piper_ilp.milp.solve",
    "numpy.ma",
    "compare.crosscheck.verify",
    "compare.builders.generators",
}


def imported(*args: str, code: str | None = None) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m piper_cli ARGS`` (or ``-c CODE``) in the repository;
    the process and the names of the modules it imported."""
    cmd = [
        sys.executable,
        "-X",
        "importtime",
        *(["-c", code] if code is not None else ["-m", "piper_cli", *args]),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "typer" in names or code is not None, proc.stderr[-2000:]
    return proc, names


def test_help_loads_neither_the_solvers_nor_the_core():
    proc, names = imported("--help")
    assert proc.returncode == 0 and "solve" in proc.stdout
    assert not names & SOLVER_LIBRARIES, sorted(names & SOLVER_LIBRARIES)
    # not even the core package: the CLI modules import it inside the commands
    assert not {n for n in names if n.split(".")[0] in ("piper_ilp", "dp", "compare")}


def test_console_script_entry_point_help_is_as_light():
    # the piper-ilp script runs piper_cli.entry:main, not piper_cli/__main__.py
    code = (
        "import sys; sys.argv = ['piper-ilp', 'solve', '--help']; "
        "from piper_cli.entry import main; main()"
    )
    proc, names = imported(code=code)
    assert proc.returncode == 0 and "--method" in proc.stdout
    assert "typer" in names
    assert not names & SOLVER_LIBRARIES, sorted(names & SOLVER_LIBRARIES)
    assert not {n for n in names if n.split(".")[0] in ("piper_ilp", "dp", "compare")}


def test_usage_error_loads_no_solver():
    proc, names = imported("solve", "--no-such-flag", str(INPUTS / "small.json"))
    assert proc.returncode == 2 and "no-such-flag" in proc.stderr
    assert not names & SOLVER_LIBRARIES


@pytest.mark.parametrize("knapsack", ["exact", "greedy"])
def test_solve_with_the_dp_loads_no_milp_nor_networkx(knapsack):
    proc, names = imported(
        "solve", str(INPUTS / "small.json"), "--method", "dp", "--knapsack", knapsack
    )
    assert (
        proc.returncode == 0 and ("optimal" if knapsack == "exact" else "feasible") in proc.stdout
    )
    assert {"numpy", "dp", "compare.crosscheck.methods"} <= names  # the DP did run
    forbidden = MILP_AND_EXTRAS
    if knapsack == "greedy":
        # the compiled rule (dp.greedy_kernel) loads numba, which imports scipy where it is
        # installed (to check its version) and numpy.ma (its typeof of arrays); exact mode
        # never loads numba
        assert {"numba", "dp.greedy_kernel"} <= names
        forbidden = MILP_AND_EXTRAS - {"scipy", "numpy.ma"}
    else:
        assert "numba" not in names and "dp.greedy_kernel" not in names
    assert not names & forbidden, sorted(names & forbidden)


def test_evaluate_loads_no_numpy():
    proc, names = imported("evaluate", str(INPUTS / "small.json"), str(INPUTS / "small.plan.json"))
    assert proc.returncode == 0 and "valid" in proc.stdout
    assert "piper_ilp.evaluate" in names
    assert not names & SOLVER_LIBRARIES, sorted(names & SOLVER_LIBRARIES)


def test_milp_backend_still_loads_what_it_needs():
    proc, names = imported("solve", str(INPUTS / "small.json"), "--method", "cpsat")
    assert proc.returncode == 0 and "optimal" in proc.stdout
    assert {"networkx", "ortools", "piper_ilp.milp.model"} <= names


def test_milp_package_names_load_on_first_use():
    import piper_ilp.milp as milp
    from piper_ilp.milp import backend, solve

    assert milp.BACKENDS == ("cpsat", "cbc", "scip") and solve.BACKENDS is backend.BACKENDS
    assert milp.solve_milp is solve.solve_milp and milp.DEFAULT_THREADS == solve.DEFAULT_THREADS
    assert set(milp.__all__) <= set(dir(milp))
    with pytest.raises(AttributeError):
        milp.no_such_name  # noqa: B018


# ---- the pure-Python replacements of networkx / numpy calls are the same functions ----


def _instances():
    for family in FAMILIES:
        for seed in range(6):
            yield random_instance(family, 3 + seed, seed=seed)


def test_instance_graph_is_built_on_first_use():
    from piper_ilp.instance import load_instance

    # networkx loads with the first use of Instance.graph, not with the instance
    code = (
        "import sys; from piper_ilp.instance import load_instance; "
        f"inst = load_instance({str(INPUTS / 'small.json')!r}); "
        "before = 'networkx' in sys.modules; g = inst.graph; "
        "print(before, 'networkx' in sys.modules, inst.graph is g)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stderr
    inst = load_instance(INPUTS / "small.json")
    g = inst.graph
    assert inst.graph is g and list(g.nodes) == inst.node_ids
    assert {(u, v): d["c"] for u, v, d in g.edges(data=True)} == {
        (e.src, e.dst): e.c for e in inst.edges
    }


def test_suffix_order_is_networkx_lexicographic_order():
    # the order of the DP's chain bound (its suffixes are the chain's sets)
    import networkx as nx

    from dp.ideals import suffix_ideals

    for inst in _instances():
        pos = {v: i for i, v in enumerate(inst.node_ids)}
        order = list(nx.lexicographical_topological_sort(inst.graph, key=pos.__getitem__))
        masks, mask = [0], 0
        for v in reversed(order):
            mask |= 1 << pos[v]
            masks.append(mask)
        assert suffix_ideals(inst) == masks


def test_acyclic_check_agrees_with_networkx():
    import networkx as nx

    from piper_ilp.instance import nodes_on_cycles

    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 8))
        edges = {
            (int(u), int(v))
            for u, v in rng.integers(0, n, size=(int(rng.integers(0, 12)), 2))
            if u != v
        }
        succs = {v: {w for u, w in edges if u == v} for v in range(n)}
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(edges)
        left = nodes_on_cycles(succs)
        assert (left == []) == nx.is_directed_acyclic_graph(g)
        # what is left: exactly the nodes on a cycle or reachable from one
        on_cycles = {v for c in nx.simple_cycles(g) for v in c}
        after = set().union(*(nx.descendants(g, v) for v in on_cycles)) if on_cycles else set()
        assert set(left) == on_cycles | after


def test_sorted_unique_is_numpy_unique():
    from dp.table_arrays import sorted_unique

    rng = np.random.default_rng(3)
    for size in (0, 1, 2, 7, 100):
        for pool in ([0.0, -0.0, 1.5, np.inf, 2.0**-1074, 1e300], [1, 2, 3, 5, 8]):
            a = rng.choice(np.array(pool), size=size)
            got, want = sorted_unique(a), np.unique(a)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_bench_proc_cpu_is_a_fresh_cli_process(tmp_path):
    """bench's "proc CPU" (cpu_process) is the CPU of a real `piper-ilp solve` process."""
    from compare.bench.dp import run_cli
    from dp import solve_dp
    from piper_ilp.instance import load_instance

    solve = [sys.executable, "-m", "piper_cli", "solve"]
    got = run_cli(solve, INPUTS / "small.json", "exact", 10**6, timeout=120)
    assert got["cli_tps"] == solve_dp(load_instance(INPUTS / "small.json")).tps
    assert got["cpu_process"] > 0
    bad = run_cli(solve, tmp_path / "missing.json", "exact", 10**6, timeout=120)
    assert "exit status 2" in bad["cli_error"] and "cpu_process" not in bad


def test_the_cli_asks_blas_for_one_thread_unless_the_user_chose():
    """OpenBLAS's extra threads spin after numpy's import and after each matrix product
    (about 0.13 s of CPU per solve on 2 cores): the CLI sets OPENBLAS_NUM_THREADS=1 before
    numpy loads, and keeps a number the user set."""
    import os

    from piper_cli.entry import single_threaded_blas

    env: dict[str, str] = {}
    single_threaded_blas(env)
    assert env == {"OPENBLAS_NUM_THREADS": "1"}
    env = {"OPENBLAS_NUM_THREADS": "4"}
    single_threaded_blas(env)
    assert env == {"OPENBLAS_NUM_THREADS": "4"}
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux's /proc to count the process's threads")
    # in a fresh process, numpy then runs on the main thread alone
    code = (
        "import os; os.environ.pop('OPENBLAS_NUM_THREADS', None); import piper_cli.entry; "
        "piper_cli.entry.single_threaded_blas(os.environ); import numpy; "
        "print(len(os.listdir('/proc/self/task')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    assert int(out) == 1


def test_from_config_and_export_load_no_solver(tmp_path):
    # both are arithmetic on a configuration and a plan: no numpy, no MILP, no DP
    inst, plan = tmp_path / "l8.json", tmp_path / "plan.json"
    proc, names = imported("from-config", "llama3-8b", "--hardware", "h100-80gb", "-o", str(inst))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not names & SOLVER_LIBRARIES, sorted(names & SOLVER_LIBRARIES)
    ids = {"0": "embedding", "33": "head", **{str(i): "vanilla" for i in range(1, 33)}}
    stage = {"nodes": list(range(34)), "dataParallelDegree": 1, "tensorParallelDegree": 8}
    plan.write_text(json.dumps({"stages": [{**stage, "TMPCids": ids}]}))
    proc, names = imported("export", str(inst), str(plan), "--to", "megatron")
    assert proc.returncode == 0 and "--tensor-model-parallel-size 8" in proc.stdout, proc.stderr[
        -2000:
    ]
    assert not names & SOLVER_LIBRARIES and "dp" not in names, sorted(names & SOLVER_LIBRARIES)
