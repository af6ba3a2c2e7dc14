"""``piper-ilp deepen``: the CLI layer over compare.builders.deepen."""

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
    r = runner.invoke(
        app, ["deepen", str(inputs_dir / "small.json"), "-L", "9", "-o", str(tmp_path / "x.json")]
    )
    assert r.exit_code == 2
    assert "no repeated block" in r.output and r.output.count("\n") == 1
    assert not (tmp_path / "x.json").exists()


def test_deepen_chain_only_cli(shared_dir, tmp_path):
    src = shared_dir / "piper-inputs" / "bert32a100.json"
    full, chain = tmp_path / "full.json", tmp_path / "chain.json"
    assert runner.invoke(app, ["deepen", str(src), "-L", "40", "-o", str(full)]).exit_code == 0
    r = runner.invoke(app, ["deepen", str(src), "-L", "40", "--chain-only", "-o", str(chain)])
    assert r.exit_code == 0, r.output
    assert "chain edges only" in r.output
    before, a, b = load_instance(src), load_instance(full), load_instance(chain)
    assert len(a.nodes) == len(b.nodes) == len(before.nodes) + 8
    # chain only: each of the 8 copies adds one edge; all edges: also the mask edge of each copy
    assert len(b.edges) == len(before.edges) + 8 and len(a.edges) == len(before.edges) + 16


def test_deepen_refuses_an_unwritable_output_before_work(inputs_dir, tmp_path):
    r = runner.invoke(
        app,
        [
            "deepen",
            str(inputs_dir / "small.json"),
            "-L",
            "9",
            "-o",
            str(tmp_path / "no" / "x.json"),
        ],
    )
    assert r.exit_code == 2 and "does not exist" in r.output and r.output.count("\n") == 1
