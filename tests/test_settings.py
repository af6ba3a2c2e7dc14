"""The settings of a solve (piper_ilp/settings.py): checked once when built, carried down
to the solvers by run_method and verify_instance, and applied to the instance."""

from __future__ import annotations

import pytest
from conftest import INPUTS
from typer.testing import CliRunner

from compare.builders.generators import random_instance
from compare.crosscheck.methods import METHODS, check_method, run_method
from compare.crosscheck.verify import verify_instance
from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.settings import Settings


@pytest.mark.parametrize(
    "fields, says",
    [
        (dict(overrides={"K": 0}), "--devices (K) must be an integer within [1, 1048576], got 0"),
        (dict(overrides={"M": -1.0}), "--memory (M) must be a number"),
        (dict(overrides={"X": 3}), "unknown setting 'X'"),
        (dict(mode="graph"), "mode must be a piper_ilp.mode.Mode, got 'graph'"),
        (dict(time_limit=-1.0, time_option="--full-time-limit"), "--full-time-limit: the time"),
        (dict(threads=65), "--threads: the solver threads must be a whole number within [1, 64]"),
        (dict(options={"time_limit": 1.0}), "time_limit is a field of Settings"),
    ],
)
def test_a_value_out_of_range_is_refused_when_the_settings_are_built(fields, says):
    with pytest.raises(InputError) as err:
        Settings(**fields)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_replace_checks_what_changed_and_restricted_keeps_what_a_method_takes():
    s = Settings(time_limit=3.0, threads=2, options={"force": True, "knapsack": "greedy"})
    with pytest.raises(InputError, match="time limit"):
        s.replace(time_limit=float("nan"))
    with pytest.raises(InputError, match="K"):
        s.replace(overrides={"K": 2**40})
    assert s.replace(mode=Mode("graph")).mode == Mode("graph") and s.mode == DEFAULT_MODE
    dp = s.restricted(METHODS["dp"].options)
    assert dp.given == {"time_limit": 3.0, "force": True, "knapsack": "greedy"}
    check_method(METHODS["dp"], dp)  # nothing left that dp does not take
    with pytest.raises(InputError, match="option threads does not apply to method dp"):
        check_method(METHODS["dp"], s)
    # brute takes the time limit too (issue 31), not the threads nor the knapsack
    assert s.restricted(METHODS["brute"].options).given == {"time_limit": 3.0, "force": True}


def test_apply_overrides_the_instance_or_returns_it_unchanged():
    inst = random_instance("chain", 4, 0, memory="loose")
    assert Settings().apply(inst) is inst
    assert Settings(overrides={"K": inst.K}).apply(inst) is inst
    half = Settings(overrides={"K": 2, "N": 4}).apply(inst)
    assert (half.K, half.N, half.M) == (2, 4, inst.M) and (inst.K, inst.N) != (2, 4)


def test_run_method_solves_the_instance_with_the_overrides_of_its_settings():
    inst = random_instance("layered", 5, 3, memory="loose")
    small = Settings(overrides={"K": 1})
    sol = run_method(inst, "dp", settings=small)
    alone = run_method(inst.with_settings(K=1), "dp")
    assert sol.status.value == alone.status.value == "optimal"
    assert sol.tps == alone.tps and sol.plan.stages == alone.plan.stages
    assert all(st.t * st.d == 1 for st in sol.plan.stages)
    assert sol.tps > run_method(inst, "dp").tps  # one device is slower than inst.K of them


def test_settings_and_loose_values_are_not_both_given():
    inst = random_instance("chain", 3, 0, memory="loose")
    with pytest.raises(InputError, match="settings= or the mode and options, not both"):
        run_method(inst, "dp", settings=Settings(), time_limit=1.0)
    with pytest.raises(InputError, match="not both"):
        run_method(inst, "dp", settings=Settings(), mode=Mode("graph"))
    with pytest.raises(InputError, match="not both"):
        verify_instance(inst, ("dp",), settings=Settings(), threads=2, greedy=False)


def test_verify_instance_judges_the_instance_its_settings_override():
    # tight memory, overridden by a thousand times more: the plans use it, and are judged
    # under the overridden M (under the file's own M they break the memory rule)
    inst = random_instance("fork-join", 5, 0, memory="tight")
    roomy = inst.with_settings(M=inst.M * 1000)
    v = verify_instance(
        inst, ("dp", "brute"), settings=Settings(overrides={"M": roomy.M}), greedy=False
    )
    assert v.verdict == "match" and v.optimum == run_method(roomy, "dp").tps
    for r in v.results.values():
        assert r.evaluation.valid and not evaluate(inst, r.solution.plan).valid


def test_the_cli_refuses_a_bad_override_before_it_reads_any_instance():
    # the file does not exist: the override is refused first, naming its option
    for command in ("solve", "verify"):
        r = CliRunner().invoke(app, [command, str(INPUTS / "no-such.json"), "--devices", "2000000"])
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines() == [
            "piper-ilp: error: --devices (K) must be an integer within [1, 1048576], got 2000000"
        ]
