"""The path formulation (piper_ilp.milp.path_solve) against exhaustive search on small
random instances in every mode it claims, its refusals, and its certificates."""

import math

import pytest

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import run_method
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import load_instance
from piper_ilp.milp.path_rule import COVERED_MODES
from piper_ilp.milp.path_solve import PROOF_RTOL, path_refusal, solve_path
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Status

FAMILIES_N = list(FAMILIES) + ["numerics"]


def _case(k: int):
    family = FAMILIES_N[k % len(FAMILIES_N)]
    memory = ("tight", "loose", 0.3)[k % 3]
    ts = (1, 2, 4) if k % 4 == 0 else (1, 2)
    return random_instance(family, 2 + k % 6, k, memory=memory, options_per_t=(1, 3), t_values=ts)


def _agrees(path, brute) -> None:
    assert path.status == brute.status, (path.status, brute.status, path.message)
    if brute.status is Status.OPTIMAL:
        opt = brute.value
        assert path.bound <= opt * (1 + 1e-12)
        assert path.value - opt <= PROOF_RTOL * opt
        assert path.value >= opt * (1 - 1e-12)  # no plan beats the oracle's optimum
        assert (path.value - path.bound) <= PROOF_RTOL * path.value


def _check_range(mode: Mode, cases: range) -> dict:
    seen = {}
    for k in cases:
        inst = _case(k)
        brute = solve_brute(inst, mode=mode, force=True)
        path = solve_path(inst, mode=mode)
        _agrees(path, brute)
        if path.plan is not None:
            assert evaluate(inst, path.plan, mode).valid
        seen[path.status] = seen.get(path.status, 0) + 1
    return seen


@pytest.mark.parametrize("mode", COVERED_MODES, ids=lambda m: m.schedule)
def test_path_matches_brute_on_small_instances(mode):
    seen = _check_range(mode, range(60))
    assert seen.get(Status.OPTIMAL, 0) > 30 and seen.get(Status.INFEASIBLE, 0) > 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", COVERED_MODES, ids=lambda m: m.schedule)
def test_path_matches_brute_campaign(mode):
    _check_range(mode, range(100, 600))


def test_path_under_restrictions_matches_brute():
    cases = [
        Restrictions(max_d=1),
        Restrictions(max_t=1),
        Restrictions.from_flags(no_recompute=True),
    ]
    for k in range(30):
        inst = _case(k)
        r = cases[k % 3]
        brute = solve_brute(inst, r, force=True)
        path = solve_path(inst, r)
        _agrees(path, brute)
        if path.plan is not None:
            assert r.violation(inst, path.plan) is None


@pytest.mark.parametrize(
    "mode, restrictions",
    [
        (Mode("graph"), Restrictions()),
        (Mode(objective="batch-time"), Restrictions()),
        (Mode("graph", "batch-time", "gpipe"), Restrictions()),
        (Mode(in_flight="schedule"), Restrictions()),  # sec. 11's rule: not in COVERED_MODES
        (Mode(), Restrictions(uniform=True)),
    ],
)
def test_path_refuses_what_it_does_not_cover(mode, restrictions):
    inst = _case(1)
    assert path_refusal(mode, restrictions) is not None
    with pytest.raises(InputError, match="does not solve"):
        solve_path(inst, restrictions, mode=mode)


def test_path_refusal_names_every_exact_method_that_solves_the_mode():
    from compare.crosscheck.methods import METHODS

    with pytest.raises(
        SizeLimitError, match="; use dp, columns, cpsat, cbc, scip or brute$"
    ) as exc:
        run_method(_case(1), "path", mode=Mode("graph"))
    named = str(exc.value).rsplit("; use ", 1)[1].replace(" or ", ", ").split(", ")
    # every method of all modes but path itself and compiled (the default mode only)
    assert set(named) == {name for name, m in METHODS.items() if m.all_modes} - {
        "path",
        "compiled",
    }


def test_path_proof_is_recorded_and_bound_below_every_plan():
    inst = random_instance("skip", 7, 5, memory=0.4, K=8, N=8)
    sol = solve_path(inst)
    brute = solve_brute(inst, force=True)
    assert sol.status is Status.OPTIMAL and brute.status is Status.OPTIMAL
    assert sol.info["formulation"] == "path"
    assert sol.info["proof"]["threshold"] == sol.bound
    assert sol.bound < brute.value * (1 + 1e-12)
    assert math.isclose(sol.value, brute.value, rel_tol=1e-9)


def test_path_time_limit_zero_proves_nothing():
    inst = random_instance("chain", 6, 2, memory="loose", K=8, N=8)
    sol = solve_path(inst, time_limit=0)
    assert sol.status in (Status.UNKNOWN, Status.FEASIBLE)
    assert sol.status is not Status.OPTIMAL


# ---- through the registry: the method ``path``, a lineage of its own ------------------


def test_the_path_method_agrees_with_the_compact_model():
    inst = _case(2)
    path = run_method(inst, "path")
    assert path.method == "path" and path.info["formulation"] == "path"
    compact = run_method(inst, "cbc")
    assert "formulation" not in compact.info and compact.info["variables"] > 0
    assert path.status == compact.status
    if path.status is Status.OPTIMAL:
        assert math.isclose(path.value, compact.value, rel_tol=2e-6)


@pytest.mark.parametrize(
    "mode, restrictions",
    [
        (Mode("graph"), Restrictions()),
        (Mode(in_flight="schedule"), Restrictions()),
        (Mode(), Restrictions(uniform=True)),
    ],
)
def test_outside_its_modes_path_is_refused_and_verify_skips_it(mode, restrictions):
    inst = _case(3)
    with pytest.raises(SizeLimitError, match="does not solve"):
        run_method(inst, "path", restrictions, mode=mode)
    v = verify_instance(inst, ("dp", "path", "cpsat"), restrictions, mode=mode, greedy=False)
    assert v.results["path"].skipped is not None and "does not solve" in v.results["path"].skipped
    assert v.verdict == "match", v.problems


def test_the_path_method_is_its_own_lineage():
    from compare.crosscheck.methods import METHODS

    assert METHODS["path"].lineage not in {METHODS[m].lineage for m in ("dp", "cpsat", "brute")}


def test_verify_default_methods_match_on_bert_at_64_devices(shared_dir):
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(
        K=64, M=2 * 2**30, N=512, B=25 * 2**30
    )
    v = verify_instance(inst)
    assert v.verdict == "match", v.problems
    assert v.results["path"].solution.status is Status.OPTIMAL
    assert {"dp", "path"} <= set(v.lineages)
