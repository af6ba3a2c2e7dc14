"""The registry method ``compiled`` (compare/crosscheck/compiled.py): the same status and TPS
as ``dp`` through the public entry points, one-line refusals, the DP's lineage in verify,
and ``bench small --modes compiled``."""

import json

import pytest
from typer.testing import CliRunner

from compare.builders.generators import ALL_FAMILIES, random_instance
from compare.crosscheck.methods import METHODS, run_method
from compare.crosscheck.verify import verify_instance
from piper_cli import app
from piper_ilp.errors import SizeLimitError
from piper_ilp.instance import instance_to_dict
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Status

runner = CliRunner()


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_compiled_and_dp_agree_on_random_dags(family):
    for nodes, seed in ((6, 3), (9, 4), (11, 5)):
        inst = random_instance(family, nodes, seed)
        try:
            want = run_method(inst, "dp")
        except SizeLimitError:  # hostile sizes the DP refuses too
            continue
        try:
            got = run_method(inst, "compiled")
        except SizeLimitError as exc:  # the kernel's table guard, one line naming dp
            assert "\n" not in str(exc) and str(exc).endswith("; use dp")
            continue
        assert got.method == "compiled"
        assert (got.status, repr(got.tps)) == (want.status, repr(want.tps)), inst.source


def test_dp_and_compiled_alone_are_a_single_proof_not_a_match():
    inst = random_instance("layered", 8, 1)
    v = verify_instance(inst, methods=("dp", "compiled"), greedy=False)
    assert v.verdict == "single-proof" and v.lineages == ["dp"]
    assert set(v.proofs) == {"dp", "compiled"}
    # an independent lineage beside them makes the match
    v = verify_instance(inst, methods=("dp", "compiled", "brute"), greedy=False)
    assert v.verdict == "match" and set(v.lineages) == {"dp", "brute"}


@pytest.mark.parametrize(
    "mode, restrictions, says",
    [
        (Mode("graph"), Restrictions(), "solves only the default mode"),
        (Mode(in_flight="schedule"), Restrictions(), "solves only the default mode"),
        (Mode(), Restrictions(uniform=True), "uniform degrees"),
    ],
)
def test_compiled_refuses_what_it_does_not_solve_in_one_line(mode, restrictions, says):
    inst = random_instance("chain", 4, 0)
    with pytest.raises(SizeLimitError, match=says) as exc:
        run_method(inst, "compiled", restrictions, mode=mode)
    assert "\n" not in str(exc.value) and str(exc.value).endswith("; use dp")


def test_compiled_refuses_more_than_15_nodes_and_a_short_time_limit():
    with pytest.raises(SizeLimitError, match="at most 15 nodes, not 16; use dp"):
        run_method(random_instance("chain", 16, 0), "compiled")
    inst = random_instance("layered", 13, 3)
    with pytest.raises(SizeLimitError, match="cannot stop early"):
        run_method(inst, "compiled", time_limit=1e-6)
    # a limit the estimate fits in: solved
    assert run_method(inst, "compiled", time_limit=60.0).status == Status.OPTIMAL


def test_verify_skips_compiled_in_another_mode(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(instance_to_dict(random_instance("chain", 4, 0))))
    result = runner.invoke(
        app, ["verify", str(path), "--methods", "dp,compiled,brute", "--pipeline", "graph"]
    )
    assert result.exit_code == 0, result.output
    assert "compiled: skipped: the compiled DP solves only the default mode" in result.output


def test_bench_small_runs_the_compiled_mode_from_the_cli():
    result = runner.invoke(app, ["bench", "small", "--seeds", "1", "--modes", "compiled"])
    assert result.exit_code == 0, result.output
    assert "compiled: 42 instances" in result.output
    assert "one-time load" in result.output


def test_compiled_is_the_dps_lineage():
    assert METHODS["compiled"].lineage == METHODS["dp"].lineage
    assert METHODS["compiled"].kind == "exact"
