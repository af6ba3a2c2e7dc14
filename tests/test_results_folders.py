"""Results folders (compare/experiments/jobs.py run_in_folder): what wrote a folder, and a
damaged results.jsonl.

A campaign and a sweep both write ``results.jsonl``; each folder's manifest (``campaign.json``
or ``sweep.json``) records what wrote it, and neither kind appends to the other's file. On
``--resume`` a torn last line (a run killed mid-write) is cut off with a note; any other line
that is not a whole record is an error naming the file and line (exit 2).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compare.experiments.campaign import read_results, run_campaign
from compare.experiments.sweep import read_rows, run_sweep, sweep_points
from piper_cli import app
from piper_ilp import load_instance
from piper_ilp.errors import InputError

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "inputs" / "small.json"
CAMPAIGN = dict(families=("chain",), nodes=(2, 3), methods=("brute",), workers=1, progress=False)
CAMPAIGN_ARGS = [
    "--count",
    "3",
    "--seed",
    "1",
    "--families",
    "chain",
    "--nodes",
    "2-3",
    "--methods",
    "brute",
    "--workers",
    "1",
    "--scheduler",
    "processes",
    "--no-progress",
]


def _sweep(out: Path, **kw) -> list[dict]:
    inst = load_instance(SMALL)
    return run_sweep(
        inst, sweep_points([2, 4], [inst.M], [inst.N], [inst.B], ["all", "2bw"]), out, **kw
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A finished campaign folder and a finished sweep folder (copied by the tests that change
    them)."""
    base = tmp_path_factory.mktemp("folders")
    run_campaign(base / "camp", 3, 1, **CAMPAIGN)
    _sweep(base / "sweep")
    return base / "camp", base / "sweep"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "piper_cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


# ---- a folder records what wrote it ----------------------------------------------------------


def test_a_campaign_refuses_a_sweeps_folder_and_a_sweep_a_campaigns(folders, tmp_path):
    camp, sweep = (_copy(f, tmp_path / f.name) for f in folders)
    before = {f: (f / "results.jsonl").read_bytes() for f in (camp, sweep)}
    for resume in (False, True):
        with pytest.raises(
            InputError, match=r"holds a sweep's results .*sweep\.json.*a campaign cannot share it"
        ):
            run_campaign(sweep, 3, 1, resume=resume, **CAMPAIGN)
        with pytest.raises(
            InputError,
            match=r"holds a campaign's results .*campaign\.json.*a sweep cannot share it",
        ):
            _sweep(camp, resume=resume)
    assert {
        f: (f / "results.jsonl").read_bytes() for f in (camp, sweep)
    } == before  # nothing appended
    # the command line: one line, exit 2
    for args in (
        ["campaign", *CAMPAIGN_ARGS, "--out", str(sweep)],
        ["campaign", *CAMPAIGN_ARGS, "--out", str(sweep), "--resume"],
        [
            "sweep",
            str(SMALL),
            "--out",
            str(camp),
            "--devices",
            "2,4",
            "--variants",
            "all,2bw",
            "--resume",
        ],
    ):
        p = _cli(*args)
        assert (
            p.returncode == 2
            and len(p.stderr.strip().splitlines()) == 1
            and "cannot share it" in p.stderr
        ), p.stderr
    # plot draws only a sweep's folder
    p = _cli("plot", str(camp), "-o", str(tmp_path / "fig.png"))
    assert p.returncode == 2 and "holds a campaign's results, not a sweep's" in p.stderr, p.stderr


def test_results_of_another_kind_without_a_manifest_are_refused(folders, tmp_path):
    camp, sweep = folders
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(sweep / "results.jsonl", bare / "results.jsonl")  # a sweep's rows, no manifest
    with pytest.raises(InputError, match=r"results\.jsonl, line 1: not a campaign result"):
        run_campaign(bare, 3, 1, resume=True, **CAMPAIGN)
    bare2 = tmp_path / "bare2"
    bare2.mkdir()
    shutil.copy(camp / "results.jsonl", bare2 / "results.jsonl")
    with pytest.raises(InputError, match=r"results\.jsonl, line 1: not a sweep result"):
        _sweep(bare2, resume=True)
    # this kind's results, but no manifest: what wrote them (which parameters) is unknown
    shutil.copy(camp / "results.jsonl", bare / "results.jsonl")
    with pytest.raises(InputError, match=r"campaign\.json is missing"):
        run_campaign(bare, 3, 1, resume=True, **CAMPAIGN)


def test_an_incompatible_configuration_is_refused(folders, tmp_path):
    camp = _copy(folders[0], tmp_path / "camp")
    with pytest.raises(InputError, match="already holds 3 results; add --resume"):
        run_campaign(camp, 3, 1, **CAMPAIGN)
    with pytest.raises(InputError, match=r"other parameters: seed 1 -> 2; it may only grow"):
        run_campaign(camp, 3, 2, resume=True, **CAMPAIGN)


# ---- a damaged results.jsonl ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["campaign", "sweep"])
def test_resume_drops_a_torn_last_line_with_a_note(folders, tmp_path, kind):
    out = _copy(folders[0] if kind == "campaign" else folders[1], tmp_path / kind)
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:30])  # killed while writing line 3
    notes, seen = [], []
    if kind == "campaign":
        run_campaign(out, 3, 1, resume=True, note=notes.append, on_record=seen.append, **CAMPAIGN)
        records = read_results(out)
    else:
        _sweep(out, resume=True, note=notes.append, on_row=seen.append)
        records = read_rows(out)
    assert len(notes) == 1 and "dropped the torn last line 3" in notes[0] and str(path) in notes[0]
    assert len(seen) == len(lines) - 2 and len(records) == len(lines)
    text = path.read_text()
    assert text.endswith("\n") and [json.loads(x)["id"] for x in text.splitlines()] == [
        r["id"] for r in records
    ]


def test_resume_refuses_garbage_in_the_middle_naming_the_file_and_line(folders, tmp_path):
    out = _copy(folders[0], tmp_path / "camp")
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    # what the old resume left: a torn line ended with a newline, then more records
    damaged = "\n".join([lines[0], lines[1][:40], lines[2]]) + "\n"
    path.write_text(damaged)
    with pytest.raises(InputError, match=rf"{path}, line 2: not whole JSON"):
        run_campaign(out, 3, 1, resume=True, **CAMPAIGN)
    assert path.read_text() == damaged  # left as it was
    p = _cli("campaign", *CAMPAIGN_ARGS, "--out", str(out), "--resume")
    assert (
        p.returncode == 2
        and len(p.stderr.strip().splitlines()) == 1
        and f"{path}, line 2" in p.stderr
    ), p.stderr
    path.write_text("\n".join([lines[0], "", lines[2]]) + "\n")
    with pytest.raises(InputError, match=rf"{path}, line 2: an empty line"):
        run_campaign(out, 3, 1, resume=True, **CAMPAIGN)


def test_a_whole_last_record_without_its_newline_is_kept(folders, tmp_path):
    out = _copy(folders[0], tmp_path / "camp")
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]))  # line 2 whole, its newline lost
    notes = []
    run_campaign(out, 3, 1, resume=True, note=notes.append, **CAMPAIGN)
    assert notes == []
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == [
        json.loads(x)["id"] for x in lines
    ]


def test_the_cli_prints_the_note(folders, tmp_path):
    out = _copy(folders[0], tmp_path / "camp")
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:10])
    result = CliRunner().invoke(app, ["campaign", *CAMPAIGN_ARGS, "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert "piper-ilp: note: " in result.output and "dropped the torn last line 2" in result.output
