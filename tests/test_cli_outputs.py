"""Human output helpers (piper_cli.format): units, significant digits, 80-column tables."""

from __future__ import annotations

import pytest
from rich.console import Console

from piper_cli.format import format_bytes, format_ids, format_rate, format_seconds, stage_table
from piper_ilp.cost import StageCost
from piper_ilp.evaluate import Evaluation, StageReport


@pytest.mark.parametrize(
    "x,text",
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1.5 * 2**30, "1.5 GiB"),
        (80 * 2**30, "80 GiB"),
        (2e8, "190.7 MiB"),  # 2e8 / 2**20 = 190.734...
        (3 * 2**40, "3 TiB"),
    ],
)
def test_format_bytes(x, text):
    assert format_bytes(x) == text


def test_format_rate():
    assert format_rate(25 * 2**30) == "25 GiB/s"
    assert format_rate(1e10) == "9.313 GiB/s"  # 1e10 / 2**30 = 9.3132...


@pytest.mark.parametrize(
    "x,text",
    [
        (0, "0 s"),
        (2.5, "2.5 s"),
        (43.7, "43.7 s"),
        (0.25, "250 ms"),
        (0.001, "1 ms"),
        (0.0005, "500 us"),
        (0.0251751, "25.18 ms"),
    ],
)
def test_format_seconds(x, text):
    assert format_seconds(x) == text


def test_more_digits_on_request():
    assert format_seconds(0.097727361, 7) == "97.72736 ms"


def test_format_ids_keeps_runs_and_order():
    assert format_ids([3, 4, 5, 0, 9]) == "3-5,0,9"
    assert format_ids([]) == ""


def _render(table) -> list[str]:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(table)
    return console.export_text().splitlines()


def test_a_wide_stage_table_still_fits_80_columns():
    """Hundreds of devices, scattered node ids (long node lists), N in the thousands, a
    memory limit near 1024 of its unit, times of every magnitude."""
    B = 25 * 2**30
    stages = []
    for i in range(12):
        nodes = tuple(range(i, 400, 12))  # 0,12,24,...: no runs, a long list
        cost = StageCost(
            edge_bytes=3.3e9 * (i + 1),
            resync_bytes=1e6 / (i + 1),
            p_sum=12.345 * (i + 1),
            d=256,
            B=B,
        )
        stages.append(
            StageReport(
                index=i,
                nodes=nodes,
                d=256,
                t=8,
                s=1920,
                y=1920,
                memory=1023.9 * 2**30,
                memory_limit=1023.99 * 2**30,
                cost=cost,
            )
        )
    ev = Evaluation(stages=stages, devices=12 * 256 * 8, sum_d=12 * 256)
    lines = _render(stage_table(ev, title="a long title that is still shorter than eighty columns"))
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert "GiB" in text and "11*" in text  # the last stage has the largest TPS
    assert "0,12,24" in text.replace("\n", "")


def test_an_invalid_plan_shows_dashes():
    ev = Evaluation(
        stages=[
            StageReport(
                index=0,
                nodes=(0, 1),
                d=1,
                t=1,
                s=1,
                y=1,
                memory=None,
                memory_limit=2**30,
                cost=None,
            )
        ],
        violations=[object()],
    )
    lines = _render(stage_table(ev))
    row = next(line for line in lines if line.strip().startswith("0 "))
    assert row.split()[-5:] == ["-"] * 5


def test_names_are_plain_text_not_markup():
    """A layer named like rich markup or an emoji code is shown as it is."""
    from conftest import INPUTS

    from piper_cli.format import option_table
    from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance
    from piper_ilp.plan import Plan, Stage

    data = instance_to_dict(load_instance(INPUTS / "small.json"))
    data["nodes"][0]["name"] = "[bold]x[/bold]:smile:"
    inst = instance_from_dict(data)
    nodes = tuple(inst.node_ids)
    t = max(inst.nodes[0].options)
    plan = Plan(
        stages=(
            Stage(nodes=nodes, d=1, t=t, options={v: inst.node[v].options[t][0].id for v in nodes}),
        )
    )
    text = "\n".join(_render(option_table(inst, plan)))
    assert "[bold]x[/bold]:smile:" in text


def test_memory_above_the_limit_is_marked():
    limit = 2**30
    cost = StageCost(edge_bytes=0.0, resync_bytes=0.0, p_sum=1.0, d=1, B=1e9)
    ev = Evaluation(
        stages=[
            StageReport(0, (0,), 1, 1, 2, 2, float(limit), memory_limit=limit, cost=cost),
            StageReport(1, (1,), 1, 1, 1, 1, limit * (1 + 2**-40), memory_limit=limit, cost=cost),
        ],
        violations=[object()],
    )
    lines = _render(stage_table(ev))
    rows = {
        line.split()[0]: line
        for line in lines
        if line.strip()[:1] in "01" and len(line.split()) > 5
    }
    assert "!" not in rows["0"]  # exactly M fits (no slack, and no false alarm)
    assert (
        rows["1"].split()[5] == "1!"
    )  # one part in 2**40 above M is over, though it rounds to 1 GiB
    assert "! above it" in lines[-1]


def test_written_files_get_the_permissions_open_would_give(tmp_path):
    # mkstemp makes 0600 files; an atomic write must end with 0666 & ~umask like open() would
    import os
    import stat

    from piper_ilp.files import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644


def test_a_plan_with_no_stages_shows_the_instances_memory_limit(tmp_path):
    """evaluate printed "memory limit M = 1 B" for a plan with no stages (the limit came
    from the stages, default 1.0), while small.json's M is 190.7 MiB."""
    from conftest import INPUTS
    from typer.testing import CliRunner

    from piper_cli import app

    empty = tmp_path / "empty.plan.json"
    empty.write_text('{"stages": []}')
    r = CliRunner().invoke(
        app, ["evaluate", str(INPUTS / "small.json"), str(empty), "--ignore-metadata"]
    )
    assert r.exit_code == 1, r.output  # an invalid plan
    assert "memory limit M = 190.7 MiB" in r.output and "M = 1 B" not in r.output
    # an Evaluation that knows no M (built by hand, no stages) says nothing about it
    assert not any("memory limit" in line for line in _render(stage_table(Evaluation(stages=[]))))
