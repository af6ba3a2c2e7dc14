"""Issue 30 point 6: --help at 80 columns. Each command's description reads as paragraphs
(no line broken mid-sentence by the docstring's own line breaks), the options sit in
panels (settings, restrictions, mode, method, output) with one line of help each, and
``solve --help`` is far shorter than the 163 lines it had."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from piper_cli import app


def _help(*command: str) -> list[str]:
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, [*command, "--help"])
    assert r.exit_code == 0, r.output
    return r.output.splitlines()


def _commands() -> list[str]:
    names = re.findall(r"^│ (\S+)\s", "\n".join(_help()), re.M)
    return [n for n in names if not n.startswith("-")]


def _description(lines: list[str]) -> list[str]:
    """The lines above the first panel, after the usage line."""
    out = []
    for line in lines:
        if line.startswith("╭"):
            break
        out.append(line.rstrip())
    return [line for line in out if not line.strip().startswith("Usage:")]


def test_every_commands_help_fits_80_columns_without_mid_sentence_breaks():
    names = _commands()
    assert {"solve", "evaluate", "verify", "simulate", "sweep", "pipedream"} <= set(names)
    for name in names:
        lines = _help(name)
        assert max(len(line) for line in lines) <= 80, name
        desc = _description(lines)
        for a, b in zip(desc, desc[1:]):
            # a line that ends well before the margin while its paragraph goes on is a
            # line break of the docstring's source, not of the terminal
            assert not (a.strip() and b.strip() and len(a) < 60), (name, a, b)


def _panel(lines: list[str], title: str) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title} "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return lines[start + 1 : end]


def test_solve_help_is_short_and_grouped_in_panels():
    lines = _help("solve")
    assert len(lines) <= 80, len(lines)
    for title in (
        "Settings (K, M, N, B)",
        "Restrictions",
        "Mode (secs. 8, 9, 11)",
        "Method",
        "Output",
    ):
        rows = _panel(lines, title)
        assert rows, title
        if title != "Method":  # one line of help per option: every row names an option
            assert all(re.match(r"│ --", row) for row in rows), (title, rows)
    settings = "\n".join(_panel(lines, "Settings (K, M, N, B)"))
    assert all(f in settings for f in ("--devices", "--memory", "--batch", "--bandwidth"))


@pytest.mark.parametrize("command", ["evaluate", "simulate", "verify"])
def test_the_shared_options_have_the_same_panels_everywhere(command):
    lines = _help(command)
    settings = "\n".join(_panel(lines, "Settings (K, M, N, B)"))
    assert "--devices" in settings and "--memory" in settings


def _all_commands() -> list[tuple[str, ...]]:
    """Every command, and every sub-command of a group (bench, import)."""
    out = []
    for name in _commands():
        out.append((name,))
        lines = _help(name)
        if any(line.startswith("╭─ Commands ") for line in lines):
            out += [
                (name, sub)
                for sub in re.findall(r"^│ (\S+)\s", "\n".join(_panel(lines, "Commands")), re.M)
            ]
    return out


def test_every_commands_help_is_at_most_70_lines_with_every_option_in_a_panel():
    commands = _all_commands()
    assert {("bench", "milp"), ("import", "pipedream"), ("campaign",)} <= set(commands)
    for command in commands:
        lines = _help(*command)
        assert len(lines) <= 70, (command, len(lines))
        # typer's default panel holds only --help: every other option sits in a named panel
        options = [row for row in _panel(lines, "Options") if re.match(r"│\s+\*?\s*-", row)]
        assert [row.split()[1] for row in options] == ["--help"], (command, options)
        named = [line for line in lines if re.match(r"│\s+\*?\s*--[a-z]", line)]
        assert len(named) > 1 or command == ("import",), command


def test_sweep_help_lists_every_variant_from_the_registry():
    # the variants sweep_points accepts, in the registry's words (a hand-written list left
    # out pipedream once)
    from compare.experiments.sweep import VARIANT_HELP, VARIANTS, sweep_points

    text = " ".join(" ".join(_description(_help("sweep"))).split())
    assert set(VARIANT_HELP) == set(VARIANTS)
    for name, what in VARIANT_HELP.items():
        assert f"{name} ({what})" in text, (name, text)
        assert sweep_points([1], [1.0], [1], [1.0], [name])[0].variant == name


def _option_help(lines: list[str], option: str) -> str:
    """The help column of ``option``'s row in a panel, its wrapped lines joined (up to the
    next option)."""
    out, inside = [], False
    for line in lines:
        row = line.strip("│ ").split()
        if row and row[0].startswith("-"):
            inside = row[0] == option
        if inside and line.startswith("│"):
            out.append(line.strip("│").strip())
    return " ".join(" ".join(out).split())


@pytest.mark.parametrize("command", ["verify", "campaign"])
def test_methods_help_names_every_registry_method_beyond_the_default(command):
    # the registry is the one list: a hand-written "Also: scip, greedy." left out columns,
    # 2bw and pipedream; the defaults depend on the pipelining (default_methods)
    from compare.crosscheck.methods import METHODS, default_methods
    from piper_ilp.mode import PIPELINES, Mode

    text = _option_help(_help(command), "--methods")
    m = re.search(r"Default: ([^;]+); also: ([^.]+)\.", text)
    assert m is not None, text
    each = {p: [] for p in PIPELINES}  # "path (sequential)": a default in those only
    for name, only in re.findall(r"(\w+)(?: \(([\w/]+)\))?(?:, |$)", m.group(1)):
        for p in only.split("/") if only else PIPELINES:
            each[p].append(name)
    assert each == {p: list(default_methods(Mode(p))) for p in PIPELINES}, text
    also = m.group(2).split(", ")
    listed = {n for names in each.values() for n in names}
    assert sorted(listed | set(also)) == sorted(METHODS) and not listed & set(also), text
    assert "…" not in text  # nothing cut off


def test_solve_method_help_names_every_registry_method():
    # solve --help loads no project module (test_startup), so its list is written out;
    # this keeps it the registry's: exact methods first, then the heuristics
    from compare.crosscheck.methods import METHODS

    text = _option_help(_help("solve"), "--method")
    listed = text.split(None, 2)[2]  # after "--method NAME"
    proving, heuristic = (part.split(", ") for part in listed.split(".")[0].split("; "))
    assert proving == [n for n, m in METHODS.items() if m.proves], text
    assert heuristic == [n for n, m in METHODS.items() if not m.proves], text
