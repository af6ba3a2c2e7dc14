"""The layering (docs/architecture.md): core <- dp <- compare <- piper_cli, checked by
import-linter with the contract in .importlinter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT = Path(sys.executable).parent / "lint-imports"


def lint(where: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=str(where)
    )  # the packages in ``where``, not an installed copy
    return subprocess.run(
        [str(LINT), "--config", str(CONFIG), "--no-cache", "--no-logo"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


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
    for pkg in ("piper_ilp", "dp", "compare", "piper_cli"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for sub in (
        "bench",
        "experiments",
        "crosscheck",
        "baselines",
        "export",
        "builders",
        "simulation",
    ):
        (tmp_path / "compare" / sub).mkdir()
        (tmp_path / "compare" / sub / "__init__.py").write_text("")
    (tmp_path / low / "mod.py").write_text(f"def f():\n    import {high}\n    return {high}\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and f"{low}.mod -> {high}" in result.stdout
