"""The layering (docs/architecture.md): core <- dp <- compare <- piper_cli, checked by
import-linter with the contracts in .importlinter, and the import graph of the four
packages walked for cycles (grimp, which import-linter uses; imports inside functions count)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("piper_ilp", "dp", "compare", "piper_cli")

#: Every module the contracts name, for the throw-away packages of the planted tests.
SKELETON = (
    "compare.bench",
    "compare.experiments",
    "compare.crosscheck",
    "compare.baselines",
    "compare.export",
    "compare.builders",
    "compare.simulation",
    "dp.solver",
    "dp.modes",
    "dp.threshold_dp",
    "piper_ilp.pipeline",
    "piper_ilp.plan",
    "piper_ilp.mode",
    "piper_ilp.version",
    "piper_ilp.milp",
    "piper_cli.__main__",
    "piper_cli.entry",
    "piper_cli.commands",
)


def run_in(where: Path, *argv: str) -> subprocess.CompletedProcess:
    """Run ``argv`` in ``where`` with the packages there on the path (not an installed copy)."""
    env = dict(os.environ, PYTHONPATH=str(where))
    return subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=300)


def lint(where: Path) -> subprocess.CompletedProcess:
    return run_in(where, str(LINT), "--config", str(CONFIG), "--no-cache", "--no-logo")


@pytest.fixture(scope="module")
def have_linter():
    if not LINT.exists():
        pytest.skip(f"import-linter is not installed beside {sys.executable} (pip install .[test])")


def test_the_layers_are_kept(have_linter):
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = sum(
        1
        for line in (ROOT / ".importlinter").read_text().splitlines()
        if line.startswith("[importlinter:contract:")
    )
    assert contracts >= 2 and f"{contracts} kept, 0 broken" in result.stdout, result.stdout


def skeleton(where: Path, plant: dict[str, str]) -> None:
    """The four packages with every module the contracts name, empty but for ``plant``
    (module -> its source); a name with names under it is a package."""
    files = {name: "" for name in (*PACKAGES, *SKELETON)}
    files.update(plant)
    packages = {
        ".".join(name.split(".")[:i]) for name in files for i in range(1, name.count(".") + 1)
    }
    for name, text in files.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            folder = where.joinpath(*parts[:i])
            folder.mkdir(exist_ok=True)
            (folder / "__init__.py").touch()
        if name in packages or len(parts) == 1:
            where.joinpath(*parts).mkdir(exist_ok=True)
            path = where.joinpath(*parts, "__init__.py")
        else:
            path = where.joinpath(*parts[:-1], parts[-1] + ".py")
        if text or not path.exists():
            path.write_text(text)


@pytest.mark.parametrize(
    "low, high",
    [
        ("piper_ilp", "dp"),
        ("piper_ilp", "compare"),
        ("piper_ilp", "piper_cli"),
        ("dp", "compare"),
        ("dp", "piper_cli"),
        ("compare", "piper_cli"),
    ],
)
def test_an_import_upwards_is_caught(have_linter, tmp_path, low, high):
    # the same contract on four tiny packages, one of which imports a layer above it
    # (inside a function, where a lazy import hides)
    skeleton(tmp_path, {f"{low}.mod": f"def f():\n    import {high}\n    return {high}\n"})
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and f"{low}.mod -> {high}" in result.stdout


@pytest.mark.parametrize(
    "importer, imported",
    [
        ("dp.solver", "piper_ilp.milp"),  # the DP leaning on the MILP it is checked against
        ("dp.threshold_dp", "dp.solver"),  # the dispatcher's leaves importing it back
        ("dp.modes", "dp.solver"),
        ("dp.threshold_dp", "dp.modes"),
        ("piper_ilp.plan", "piper_ilp.pipeline"),  # the plan <-> pipeline circle
        ("piper_ilp.mode", "piper_ilp.plan"),
        ("piper_cli.commands", "piper_cli.entry"),
    ],
)
def test_a_circle_the_contracts_keep_closed_is_caught(have_linter, tmp_path, importer, imported):
    skeleton(tmp_path, {importer: f"def f():\n    import {imported}\n    return {imported}\n"})
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and f"{importer} -> {imported}" in result.stdout


#: Run in a fresh interpreter on the packages found on its path: the cycles of their
#: import graph (each as a list of "importer -> imported (line N)" steps), and the imports
#: of a package's own ``__init__`` by a module inside it.
_WALK = textwrap.dedent(
    """
    import json, sys
    import grimp, networkx as nx
    packages = sys.argv[1:]
    g = grimp.build_graph(*packages, include_external_packages=False, cache_dir=None)
    G = nx.DiGraph()
    for m in g.modules:
        G.add_node(m)
        G.add_edges_from((m, t) for t in g.find_modules_directly_imported_by(m))
    def step(a, b):
        lines = sorted(d["line_number"] for d in g.get_import_details(importer=a, imported=b))
        return f"{a} -> {b} (line {', '.join(map(str, lines))})"
    cycles = []
    for component in nx.strongly_connected_components(G):
        if len(component) > 1:
            loop = nx.find_cycle(G.subgraph(component))
            cycles.append([step(a, b) for a, b in loop])
    own = [step(m, t) for m, t in G.edges if m.startswith(t + ".")]
    print(json.dumps({"cycles": cycles, "own_init": own}))
    """
)


def walk(where: Path, packages=PACKAGES) -> dict:
    """The import graph of ``packages`` as found under ``where``: its cycles and its
    imports through a package's own ``__init__`` (see :data:`_WALK`)."""
    proc = run_in(where, sys.executable, "-c", _WALK, *packages)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_import_graph_has_no_cycle_and_no_import_through_an_own_init():
    # every strongly connected component of the whole graph is one module; a module
    # never imports the __init__ of a package it is in (where a cycle hides)
    found = walk(ROOT)
    assert not found["cycles"], "import cycles:\n" + "\n".join(
        "  " + "; ".join(c) for c in found["cycles"]
    )
    assert not found["own_init"], "imports through an own __init__: " + "; ".join(found["own_init"])


def test_a_planted_cycle_is_found_and_shown(tmp_path):
    skeleton(
        tmp_path,
        {
            "dp.a": "import dp.b\n",
            "dp.b": "def f():\n    from dp import c\n",  # inside a function: counts
            "dp.c": "import dp.a\n",
            "piper_cli.x": "from piper_cli import y\n",
            "piper_cli.y": "import piper_cli\n",
        },
    )
    found = walk(tmp_path)
    assert len(found["cycles"]) == 1
    (cycle,) = found["cycles"]
    assert len(cycle) == 3 and {s.split(" ->")[0] for s in cycle} == {"dp.a", "dp.b", "dp.c"}
    assert "dp.b -> dp.c (line 2)" in cycle
    assert found["own_init"] == ["piper_cli.y -> piper_cli (line 1)"]
