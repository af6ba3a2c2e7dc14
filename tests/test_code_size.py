"""The project's rule on class size (no class over 500 lines), checked over the
four packages' source with the ast module."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGES = ("piper_ilp", "dp", "compare", "piper_cli")
MAX_CLASS_LINES = 500


def test_no_class_is_over_500_lines():
    long = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_CLASS_LINES:
                        long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} {lines}")
    assert not long, long
