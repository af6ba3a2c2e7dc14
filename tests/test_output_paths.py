"""Where the CLI's outputs go: never over an input, devices and FIFOs written in place,
symlinks followed (the link kept), a folder refused; failed writes to standard output.

Every device, FIFO and symlink here is made under tmp_path (a symlink to /proc/self/fd/N
stands for /dev/stdout): a broken version of the code must not be able to replace a real
device node or a shared file.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from piper_cli import app
from conftest import INPUTS, REPO

runner = CliRunner()

GRAPH_TXT = "\n".join([
    "node1 -- Input -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=7.0, parameter_size=0.000",
    "node2 -- Linear(a) -- forward_compute_time=600.000, backward_compute_time=400.000, activation_size=10.0, parameter_size=0.000",
    "\tnode1 -- node2",
]) + "\n"


def cli(*args, **kwargs) -> subprocess.CompletedProcess:
    """``python -m piper_cli ARGS`` in a fresh process (the real entry point, main())."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "piper_cli", *map(str, args)], cwd=REPO, env=env, timeout=120, **kwargs)


def _fingerprint(path) -> tuple:
    st = os.lstat(path)
    return st.st_ino, st.st_mode, open(path, "rb").read()


@pytest.fixture
def inst(tmp_path):
    p = tmp_path / "inst.json"
    shutil.copy(INPUTS / "small.json", p)
    return p


@pytest.fixture
def plan(tmp_path):
    p = tmp_path / "plan.json"
    shutil.copy(INPUTS / "small.plan.json", p)
    return p


@pytest.fixture
def graph(tmp_path):
    p = tmp_path / "graph.txt"
    p.write_text(GRAPH_TXT)
    return p


# ---- an output path that is one of the command's inputs: one line, exit 2, input untouched ----

@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize("command", ["solve", "solve-model", "deepen", "towers", "import", "simulate"])
def test_an_output_over_an_input_is_refused(tmp_path, inst, plan, graph, command, alias):
    target = graph if command == "import" else plan if command == "simulate" else inst
    out = target
    if alias == "symlink":
        out = tmp_path / "alias"
        out.symlink_to(target.name)
    elif alias == "hardlink":
        out = tmp_path / "alias"
        os.link(target, out)
    args = {
        "solve": ["solve", inst, "-o", out],
        "solve-model": ["solve", inst, "--method", "cpsat", "--write-model", out],
        "deepen": ["deepen", inst, "-L", "9", "-o", out],
        "towers": ["towers", inst, "-L", "2,2", "-o", out],
        "import": ["import", "pipedream", graph, "-o", out],
        "simulate": ["simulate", inst, plan, "--gantt", out],
    }[command]
    before = _fingerprint(target)
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    assert "would overwrite" in r.output and r.output.count("\n") == 1, r.output
    assert str(target) in r.output or str(out) in r.output
    assert _fingerprint(target) == before


def test_a_plot_over_its_results_is_refused(tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    results = folder / "results.jsonl"
    results.write_text('{"id": "a", "variant": "all"}\n')
    before = _fingerprint(results)
    r = runner.invoke(app, ["plot", str(folder), "-o", str(results)])
    assert r.exit_code == 2 and "would overwrite" in r.output and r.output.count("\n") == 1, r.output
    assert _fingerprint(results) == before


def test_a_sweep_folder_holding_the_instance_is_refused(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    inst = out / "results.csv"
    shutil.copy(INPUTS / "small.json", inst)
    before = _fingerprint(inst)
    r = runner.invoke(app, ["sweep", str(inst), "--out", str(out), "--variants", "all"])
    assert r.exit_code == 2 and "would overwrite" in r.output and r.output.count("\n") == 1, r.output
    assert _fingerprint(inst) == before


# ---- a folder: one line, exit 2 ----

@pytest.mark.parametrize("command", ["solve", "random", "deepen"])
def test_a_folder_as_output_is_one_line(tmp_path, inst, command):
    folder = tmp_path / "folder"
    folder.mkdir()
    args = {"solve": ["solve", inst, "-o", folder], "random": ["random", "-o", folder], "deepen": ["deepen", inst, "-L", "9", "-o", folder]}[command]
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 2 and "is a folder" in r.output and r.output.count("\n") == 1, r.output
    assert folder.is_dir()


