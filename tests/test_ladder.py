"""The scale-up ladder: sub-instances verified, then the full size with a certified gap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compare.baselines.twobw import block_order
from compare.crosscheck.brute import solve_brute
from compare.experiments.ladder import induced_subinstance, run_ladder, work_bound
from dp import solve_dp
from piper_ilp import load_instance, parse_size
from piper_ilp.errors import InputError
from piper_ilp.solution import Status

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "inputs" / "small.json"


def test_induced_subinstance_keeps_only_edges_among_its_nodes():
    inst = load_instance(SMALL)
    order, _ = block_order(inst)
    keep = set(order[:4])
    sub = induced_subinstance(inst, keep, "sub")
    assert set(sub.node_ids) == keep
    assert {(e.src, e.dst) for e in sub.edges} == {
        (e.src, e.dst) for e in inst.edges if e.src in keep and e.dst in keep
    }


def test_small_ladder_rungs_match_exhaustive_search_and_the_gap_is_certified():
    inst = load_instance(SMALL)
    lad = run_ladder(inst, max_nodes=7, time_limit=60, full_time_limit=60)
    assert lad.rungs and all(r.verdict == "match" for r in lad.rungs)
    order, starts = block_order(inst)
    for r in lad.rungs:
        sub = induced_subinstance(inst, set(order[: starts[r.blocks]]), "rung").with_settings(
            K=r.K, N=r.N
        )
        ref = solve_brute(sub)
        assert ref.status is Status.OPTIMAL and r.optimum == pytest.approx(ref.tps, rel=1e-6)
    dp = solve_dp(inst)
    assert lad.full["tps"] == dp.tps and lad.full["bound"] <= dp.tps * (1 + 1e-9)
    assert lad.full["bound"] >= work_bound(inst)
    assert 0 <= lad.gap < 1e-6  # small.json is proven by CP-SAT at full size


@pytest.mark.slow
def test_bert_ladder_end_to_end(shared_dir):
    args = [
        sys.executable,
        "-m",
        "piper_cli",
        "ladder",
        str(shared_dir / "piper-inputs" / "bert32a100.json"),
        "--devices",
        "512",
        "--memory",
        "8GiB",
        "--batch",
        "1920",
        "--bandwidth",
        "25GiB/s",
        "--max-nodes",
        "8",
        "--time-limit",
        "30",
        "--full-time-limit",
        "20",
        "--json",
    ]
    p = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [r["verdict"] for r in out["rungs"]][:2] == ["match", "match"]
    assert set(out["rungs"][0]) >= {"nodes", "K", "N", "verdict", "seconds"}
    assert out["full"]["status"] == "optimal" and 0 <= out["gap"] < 1
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(
        K=512, M=parse_size("8GiB"), N=1920, B=parse_size("25GiB/s", rate=True)
    )
    assert out["full"]["bound"] >= work_bound(inst) and out["full"]["tps"] == pytest.approx(
        0.00256112784601, rel=1e-9
    )


def test_ladder_reports_each_rung_as_it_ends_without_a_terminal():
    """Each finished rung is a line on stderr when it ends, on a pipe as on a terminal,
    so an interrupted ladder still shows its finished rungs; stdout stays the JSON."""
    args = [
        sys.executable,
        "-m",
        "piper_cli",
        "ladder",
        str(REPO / "inputs" / "small.json"),
        "--json",
    ]
    p = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    lines = [x for x in p.stderr.splitlines() if x.startswith("rung ")]
    assert len(lines) == len(out["rungs"]) >= 2
    for line, r in zip(lines, out["rungs"]):
        assert f"({r['nodes']} nodes, K={r['K']}, N={r['N']}): {r['verdict']}" in line


def test_ladder_table_labels_each_rung_by_its_blocks_like_the_progress_lines():
    # the table once numbered the rungs 1, 2, 3, ... while the progress lines counted blocks
    # (the fifth rung is 6 blocks): the two must name a rung alike
    args = [sys.executable, "-m", "piper_cli", "ladder", str(REPO / "inputs" / "small.json")]
    p = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    progress = [x.split()[1] for x in p.stderr.splitlines() if x.startswith("rung ")]
    lines = p.stdout.splitlines()
    assert lines[0].split()[0] == "blocks"
    table = [x.split()[0] for x in lines[1 : 1 + len(progress)]]
    assert table == progress and len(progress) >= 2


def test_a_bad_in_flight_rule_is_an_input_error_before_any_rung():
    with pytest.raises(InputError, match="in_flight: choose piper or schedule, got 'fifo'"):
        run_ladder(load_instance(SMALL), in_flight="fifo")


def test_force_and_max_ideals_reach_the_ladders_dp():
    # the full-size DP's refusal names --max-ideals or --force: the ladder takes both, as
    # solve does, for every DP solve (the bound's MILP takes the DP's plan as its hint)
    from builders import cli

    args = ["ladder", SMALL, "--max-nodes", 4, "--max-ideals", 5, "--json"]
    r = cli(*args, code=2)
    assert "--max-ideals" in r.output and "successor-closed sets" in r.output, r.output
    out = json.loads(cli(*args, "--force").stdout)
    assert all(rung["verdict"] == "match" for rung in out["rungs"]), out["rungs"]
    assert out["full"]["status"] == "optimal"
    assert out["full"]["tps"] == pytest.approx(solve_dp(load_instance(SMALL)).tps, rel=1e-12)
    assert out["full"]["milp_status"] == "optimal" and 0 <= out["gap"] < 1e-6
