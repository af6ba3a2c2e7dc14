"""``piper-ilp deepen``: the CLI layer over compare.deepen."""

from __future__ import annotations

from typer.testing import CliRunner

from piper_cli import app
from piper_ilp.instance import load_instance

runner = CliRunner()


def test_deepen_bert_cli(shared_dir, tmp_path):
    src = shared_dir / "piper-inputs" / "bert32a100.json"
    out = tmp_path / "bert40.json"
    r = runner.invoke(app, ["deepen", str(src), "--layers", "40", "-o", str(out)])
    assert r.exit_code == 0, r.output
    before, after = load_instance(src), load_instance(out)
    assert len(after.nodes) == len(before.nodes) + 8
    names = [n.name for n in after.nodes]
    assert names.count("ParallelTransformerLayer") == 40


def test_deepen_without_repeated_block_is_bad_input(inputs_dir, tmp_path):
    r = runner.invoke(app, ["deepen", str(inputs_dir / "small.json"), "-L", "9", "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2
    assert "no repeated block" in r.output and r.output.count("\n") == 1
    assert not (tmp_path / "x.json").exists()
