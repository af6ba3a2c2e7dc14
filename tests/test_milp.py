"""The exact MILP (piper_ilp.milp) on CP-SAT, CBC and SCIP: agreement with the exhaustive
oracle and the DP, statuses, the size guard, model files, hints, progress lines.
(Certification of wrong claims: tests/test_milp_certify.py; interrupts:
tests/test_milp_signals.py.)"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
from builders import make_instance, option_dict

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import brute_applies, solve_brute
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict, load_instance
from piper_ilp.milp import BACKENDS, build_model, model_size, solve_milp
from piper_ilp.milp.backend import run_stoppable
from piper_ilp.mode import Mode
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Status

REPO = Path(__file__).resolve().parents[1]

try:  # the DP is another helper's module; the agreement test uses it when present
    from dp.solver import solve_dp
except ImportError:  # pragma: no cover
    solve_dp = None


def agree(sol, ref) -> None:
    """``sol`` (a MILP answer) has ``ref``'s status and, within twice the stated scaling
    error (the model's optimum may sit that far from the true one), its TPS."""
    assert sol.status == ref.status, (sol.status, ref.status, sol.message)
    if ref.status == Status.OPTIMAL:
        err = sol.info["scaling_error"]
        assert abs(sol.tps - ref.tps) <= 2 * err + 1e-9 * ref.tps, (sol.tps, ref.tps, err)
        assert sol.bound <= ref.tps * (1 + 1e-9)
        assert abs(sol.objective - sol.tps) <= err + 1e-9 * sol.tps
    else:
        assert sol.plan is None and sol.tps is None


# --------------------------------------------------------------------------------------
# 100 seeded tiny instances: both backends against the oracle (and the DP)
# --------------------------------------------------------------------------------------


def tiny_case(seed: int):
    """Shapes of the DP issue: 2-5 nodes, every family, float and integer data, t up to 4,
    one or two options, tight memory (so some are infeasible), and now and then an
    ablation."""
    family = FAMILIES[seed % len(FAMILIES)]
    n = 2 + seed % 4
    inst = random_instance(
        family,
        n,
        seed,
        integer=(seed % 3 == 0),
        t_values=(1, 2, 4) if seed % 4 == 1 else (1, 2),
        options_per_t=(1, 2),
    )
    if seed % 10 == 7:
        restr = Restrictions.from_flags(no_recompute=True)
    elif seed % 10 == 8:
        restr = Restrictions.from_flags(no_data_parallel=True)
    elif seed % 10 == 9:
        restr = Restrictions.from_flags(no_tensor_parallel=True)
    else:
        restr = Restrictions()
    return inst, restr


SEEDS = range(100)


@pytest.fixture(scope="module")
def references():
    """The oracle's (and the DP's) answer per seed, computed once."""
    out = {}
    for seed in SEEDS:
        inst, restr = tiny_case(seed)
        assert brute_applies(inst)
        dp = solve_dp(inst, restr) if solve_dp is not None else None
        out[seed] = (inst, restr, solve_brute(inst, restr), dp)
    return out


def test_the_tiny_cases_cover_infeasible_and_ablations(references):
    statuses = [ref.status for _, _, ref, _ in references.values()]
    assert statuses.count(Status.INFEASIBLE) >= 5
    assert statuses.count(Status.OPTIMAL) >= 50
    assert sum(1 for _, r, _, _ in references.values() if r != Restrictions()) >= 20


# CP-SAT and CBC on all 100; SCIP (an extra backend from the same rows) on every third
AGREEMENT = [
    (b, seed) for b in BACKENDS for seed in SEEDS if b in ("cpsat", "cbc") or seed % 3 == 0
]


@pytest.mark.parametrize("backend, seed", AGREEMENT)
def test_agrees_with_oracle_and_dp_on_tiny_instances(references, backend, seed):
    inst, restr, ref, dp = references[seed]
    sol = solve_milp(inst, restr, backend=backend, threads=1)
    agree(sol, ref)
    if dp is not None:
        agree(sol, dp)
    if sol.plan is not None:  # the plan obeys the restrictions (checked_solution did too)
        for st in sol.plan.stages:
            assert restr.max_d is None or st.d <= restr.max_d
            assert restr.max_t is None or st.t <= restr.max_t
            assert not any(st.options[v] in restr.exclude_options for v in st.nodes)


# --------------------------------------------------------------------------------------
# inputs/small.json and its ablations
# --------------------------------------------------------------------------------------

ABLATIONS = {
    "none": Restrictions(),
    "no-recompute": Restrictions.from_flags(no_recompute=True),
    "no-tensor-parallel": Restrictions.from_flags(no_tensor_parallel=True),
    "no-data-parallel": Restrictions.from_flags(no_data_parallel=True),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ablation", list(ABLATIONS))
def test_small_json(inputs_dir, backend, ablation):
    inst = load_instance(inputs_dir / "small.json")
    restr = ABLATIONS[ablation]
    sol = solve_milp(inst, restr, backend=backend)
    agree(sol, solve_brute(inst, restr))
    assert sol.info["variables"] > 0 and sol.info["constraints"] > 0
    assert sol.info["gap"] is not None and sol.info["gap"] < 1e-6


# --------------------------------------------------------------------------------------
# A CP-SAT presolve bug (google/or-tools#5293) seen on this 4-node instance: CP-SAT 9.15
# with default presolve certified 20.14 as optimal. The oracle's optimum is 9.3255.
# --------------------------------------------------------------------------------------

CPSAT_REGRESSION = {
    "maxDevices": 3,
    "maxMemoryPerDevice": 26.377856726574006,
    "bandwidth": 0.792427915227581,
    "mbsInBatch": 3,
    "nodes": [
        {
            "id": -1,
            "TMPCs": {
                "1": [
                    {
                        "id": "vanilla",
                        "timePerSample": 7.7706690530276035,
                        "parameterSize": 14.803385742412821,
                        "memoryUsageA": 3.9451692151791913,
                        "memoryUsageB": 5.956231371300409,
                        "syncTimeFw": {},
                        "syncTimeBw": {"5": 0.024207083061598578, "14": 1.9488620581635656},
                    },
                    {
                        "id": "activation recomp",
                        "timePerSample": 6.463206029215876,
                        "parameterSize": 5.0587791409385785,
                        "memoryUsageA": 3.6746638986560898,
                        "memoryUsageB": 2.02699374899364,
                        "syncTimeFw": {},
                        "syncTimeBw": {"5": 1.3006285760919967, "14": 1.4084941419141996},
                    },
                ]
            },
        },
        {
            "id": 5,
            "TMPCs": {
                "1": [
                    {
                        "id": "vanilla",
                        "timePerSample": 1.0775097367134407,
                        "parameterSize": 7.83881779789116,
                        "memoryUsageA": 1.8122156967843213,
                        "memoryUsageB": 4.496466493419955,
                        "syncTimeFw": {"-1": 1.8624536698695262},
                        "syncTimeBw": {},
                    }
                ]
            },
        },
        {
            "id": 14,
            "TMPCs": {
                "1": [
                    {
                        "id": "vanilla",
                        "timePerSample": 1.7848042394948294,
                        "parameterSize": 14.150785975399076,
                        "memoryUsageA": 1.5903445574768083,
                        "memoryUsageB": 5.9837771974917615,
                        "syncTimeFw": {"-1": 0.34581865333744655},
                        "syncTimeBw": {},
                    }
                ]
            },
        },
        {
            "id": 7,
            "TMPCs": {
                "1": [
                    {
                        "id": "vanilla",
                        "timePerSample": 4.575491634153857,
                        "parameterSize": 3.0243628243144483,
                        "memoryUsageA": 5.338034417066403,
                        "memoryUsageB": 3.447977919093309,
                        "syncTimeFw": {},
                        "syncTimeBw": {},
                    }
                ]
            },
        },
    ],
    "edges": [
        {"sourceId": -1, "destId": 5, "communicationCost": 4.170759127097793},
        {"sourceId": -1, "destId": 14, "communicationCost": 4.548407243185854},
    ],
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("backend", BACKENDS)
def test_cpsat_presolve_regression(backend, threads):
    inst = instance_from_dict(CPSAT_REGRESSION, "cpsat-regression")
    ref = solve_brute(inst)
    assert ref.tps == pytest.approx(9.325520005424146, rel=1e-12)
    agree(solve_milp(inst, backend=backend, threads=threads), ref)


# --------------------------------------------------------------------------------------
# Model size, the size guard, model files
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(0, 100, 7))
def test_model_size_matches_the_built_model(seed):
    inst, restr = tiny_case(seed)
    size = model_size(inst, restr)
    m = build_model(inst, restr)
    assert size["variables"] == len(m.vars)
    assert size["constraints"] == len(m.rows)
    assert size["binaries"] == sum(1 for v in m.vars if v.kind == "binary")


@pytest.mark.parametrize("seed", range(6))
def test_memory_rows_are_exactly_those_that_can_bind_at_large_n(seed):
    # the model keeps memory[i, k] for the k whose slot, every node at its largest memory
    # k a + b, could come near M: found by a bisection (the test per k took seconds at
    # N = 2^20), checked here against the definition, k by k, and the size count against
    # the model built
    from piper_ilp.milp.model import MEMORY_ROW_THRESHOLD

    inst = random_instance("chain", 2, seed, options_per_t=(1, 2), memory=8.0, K=64, N=64)
    m = build_model(inst)
    assert model_size(inst)["constraints"] == len(m.rows)
    ks = {int(r.name.split(",")[1].rstrip("]")) for r in m.rows if r.name.startswith("memory[")}

    def can_bind(k):
        worst = math.fsum(
            max((k * o.a + o.b) / inst.M for opts in node.options.values() for o in opts)
            for node in inst.nodes
        )
        return worst > MEMORY_ROW_THRESHOLD

    # y of a slot runs up to 64 (N = K = 64), M is 8 times a slot's memory at y = 1: the
    # rows are those of k = first..64, first above 1
    assert ks == {k for k in range(1, 65) if can_bind(k)} and 1 < min(ks) < max(ks) == 64


def test_size_guard_refuses_with_size_limit_and_advice(inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    n = model_size(inst)["variables"]
    with pytest.raises(SizeLimitError) as exc:
        solve_milp(inst, max_variables=n - 1)
    msg = str(exc.value)
    assert str(n) in msg and str(n - 1) in msg
    assert "--time-limit" in msg and "DP" in msg and "--force" in msg
    sol = solve_milp(inst, max_variables=n - 1, force=True)
    assert sol.status == Status.OPTIMAL
    assert solve_milp(inst, max_variables=n).status == Status.OPTIMAL


@pytest.mark.parametrize("backend", ["cbc", "scip"])
def test_write_model_lp_file(tmp_path, inputs_dir, backend):
    inst = load_instance(inputs_dir / "small.json")
    path = tmp_path / "model.lp"
    sol = solve_milp(inst, backend=backend, write_model=path)
    text = path.read_text()
    assert "minimize" in text.lower() and "subject to" in text.lower()
    assert "assign_" in text and "tps_" in text and "memory_" in text
    # one row per model row (big-M rewriting keeps the count)
    assert text.count("tps_") >= model_size(inst)["slots"] * model_size(inst)["configurations"]
    assert sol.status == Status.OPTIMAL


def test_write_model_cpsat_text_proto(tmp_path, inputs_dir):
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2

    inst = load_instance(inputs_dir / "small.json")
    path = tmp_path / "model.txt"
    sol = solve_milp(inst, backend="cpsat", write_model=path)
    proto = text_format.Parse(path.read_text(), cp_model_pb2.CpModelProto())
    assert len(proto.variables) == sol.info["variables"]
    assert len(proto.constraints) == sol.info["constraints"]
    assert any(c.name.startswith("tps[") for c in proto.constraints)


# --------------------------------------------------------------------------------------
# Hints, restrictions, bad arguments, statuses
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_hint_from_a_known_optimum(backend, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    ref = solve_brute(inst)
    sol = solve_milp(inst, backend=backend, hint=ref.plan)
    assert sol.info["hint"] == "used"
    agree(sol, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cutoff_at_exactly_the_optimum_keeps_the_proof(backend, inputs_dir):
    # the non-strict cutoff: the optimal plan itself stays in the model, whatever the
    # rounding of the backend's units, so the same optimum is proven
    inst = load_instance(inputs_dir / "small.json")
    ref = solve_brute(inst)
    sol = solve_milp(inst, backend=backend, cutoff=ref.tps)
    assert sol.info["cutoff"] == ref.tps
    agree(sol, ref)
    # with the optimal plan as hint too (what verify --milp-hint passes)
    sol = solve_milp(inst, backend=backend, cutoff=ref.tps, hint=ref.plan)
    agree(sol, ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cutoff_below_the_optimum_is_never_a_proof(backend, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    ref = solve_brute(inst)
    assert ref.status == Status.OPTIMAL
    for low in (ref.tps * (1 - 1e-4), ref.tps * 0.5, ref.tps * 1e-12):
        sol = solve_milp(inst, backend=backend, cutoff=low)
        # neither "infeasible" (the instance has plans) nor a wrong "optimal"
        assert sol.status == Status.UNKNOWN, (low, sol.status, sol.message)
        assert "cutoff" in sol.message and "not a proof" in sol.message
        assert sol.plan is None
        assert sol.bound is None or sol.bound <= ref.tps * (1 + 1e-9)
    # a valid hint above a too-low cutoff comes back as the plan, unproven
    sol = solve_milp(inst, backend=backend, cutoff=ref.tps * 0.5, hint=ref.plan)
    assert sol.status == Status.FEASIBLE and sol.plan == ref.plan, sol.message
    assert sol.info["hint"].startswith("not used as the first plan")
    assert sol.bound <= ref.tps * (1 + 1e-9)


def test_cutoff_above_the_optimum_still_finds_the_optimum(inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    ref = solve_brute(inst)
    for backend in BACKENDS:
        agree(solve_milp(inst, backend=backend, cutoff=ref.tps * 1.5), ref)


def test_cutoff_on_an_infeasible_instance_is_unknown_not_infeasible():
    # with a cutoff, an infeasible model says only "nothing at or below the cutoff"
    for seed in range(200):
        inst = random_instance(FAMILIES[seed % len(FAMILIES)], 3, seed, memory="tight")
        if solve_brute(inst).status == Status.INFEASIBLE:
            break
    else:  # pragma: no cover
        pytest.skip("no infeasible instance among the seeds")
    assert solve_milp(inst, backend="cpsat").status == Status.INFEASIBLE
    sol = solve_milp(inst, backend="cpsat", cutoff=1.0)
    assert sol.status == Status.UNKNOWN and "not a proof" in sol.message


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan, "1", True])
def test_cutoff_must_be_a_finite_number(bad, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    with pytest.raises(InputError, match="cutoff"):
        solve_milp(inst, cutoff=bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hint_that_is_not_a_valid_plan_is_ignored_with_a_reason(inputs_dir, backend):
    inst = load_instance(inputs_dir / "small.json")
    ref = solve_brute(inst)
    bad = Plan((Stage(tuple(inst.node_ids), 1, 3, {v: "vanilla" for v in inst.node_ids}),))
    sol = solve_milp(inst, backend=backend, hint=bad)
    assert sol.info["hint"].startswith("ignored: not a valid plan") and "t = 3" in sol.info["hint"]
    agree(sol, ref)
    # the unrestricted optimum uses recomputation: under --no-recompute it is no hint
    restr = Restrictions.from_flags(no_recompute=True)
    sol = solve_milp(inst, restr, backend=backend, hint=ref.plan)
    assert sol.info["hint"].startswith("ignored:") and "activation recomp" in sol.info["hint"]
    agree(sol, solve_brute(inst, restr))


def test_write_model_to_a_missing_folder_is_an_input_error(tmp_path, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    for backend in BACKENDS:
        with pytest.raises(InputError, match="cannot write the model"):
            solve_milp(inst, backend=backend, write_model=tmp_path / "no" / "such" / "model.txt")


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_memory_coefficients_do_not_overflow(backend):
    # a = 1e30 bytes per microbatch against M = 1e3: node 1 never fits, with any option
    big = {
        "id": "vanilla",
        "timePerSample": 1.0,
        "parameterSize": 0,
        "memoryUsageA": 1e30,
        "memoryUsageB": 0,
        "syncTimeFw": {},
        "syncTimeBw": {},
    }
    ok = {**big, "memoryUsageA": 1.0}
    data = {
        "maxDevices": 2,
        "maxMemoryPerDevice": 1e3,
        "bandwidth": 1,
        "mbsInBatch": 2,
        "nodes": [{"id": 0, "TMPCs": {"1": [ok]}}, {"id": 1, "TMPCs": {"1": [big]}}],
        "edges": [],
    }
    inst = instance_from_dict(data, "huge")
    assert solve_milp(inst, backend=backend).status == Status.INFEASIBLE
    data["nodes"][1]["TMPCs"]["1"].append({**ok, "id": "activation recomp", "timePerSample": 2.0})
    inst = instance_from_dict(data, "huge2")
    agree(solve_milp(inst, backend=backend), solve_brute(inst))


def test_unknown_backend_and_bad_settings_are_input_errors(inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    with pytest.raises(InputError, match="unknown MILP backend"):
        solve_milp(inst, backend="gurobi")
    with pytest.raises(InputError, match="threads"):
        solve_milp(inst, threads=0)
    with pytest.raises(InputError, match="time limit"):
        solve_milp(inst, time_limit=-1)
    with pytest.raises(InputError, match="time limit"):
        solve_milp(inst, time_limit=math.nan)


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_zero_is_unknown_never_optimal(backend, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    sol = solve_milp(inst, backend=backend, time_limit=0)
    assert sol.status == Status.UNKNOWN and sol.plan is None
    assert sol.message == "time limit 0: not solved"


def test_a_limit_the_throughput_floor_used_up_is_named_not_called_0():
    # hunt37: `solve t44.json --pipeline graph --objective batch-time --method cpsat
    # --time-limit 5` said "time limit 0: not solved". A limit of 1 ms is gone before the
    # batch-time solve (the floor's own model takes longer to build): the message names the
    # user's limit and what the floor used
    inst = random_instance("fork-join", 4, seed=5, N=4, t_values=(1, 2))
    mode = Mode("graph", "batch-time")
    sol = solve_milp(inst, backend="cpsat", mode=mode, time_limit=1e-3)
    assert sol.status == Status.UNKNOWN and sol.plan is None
    assert sol.info["throughput_floor"]["status"] == "unknown"
    assert "(time limit 0.001 s, of which the throughput floor's solve used" in sol.message
    assert "time limit 0:" not in sol.message


def test_a_solver_running_past_its_deadline_is_stopped():
    stopped = threading.Event()
    out = run_stoppable(
        lambda: "stopped" if stopped.wait(60) else "ran on",
        stop=stopped.set,
        deadline=time.monotonic() + 0.05,
    )
    assert out == "stopped"


@pytest.mark.parametrize("backend", BACKENDS)
def test_node_without_any_option_left_is_infeasible(backend):
    nodes = [(0, {"1": [option_dict("vanilla", a=1)]})]
    nodes.append((1, {"1": [option_dict("activation recomp", a=1)]}))
    inst = make_instance(nodes, K=2, N=2, M=10, B=1)
    restr = Restrictions.from_flags(no_recompute=True)
    sol = solve_milp(inst, restr, backend=backend)
    assert sol.status == Status.INFEASIBLE and sol.plan is None
    assert solve_brute(inst, restr).status == Status.INFEASIBLE


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_exactly_at_the_limit_fits(backend):
    # two nodes, integer data: the only plan with one stage uses exactly M = 10 bytes
    # (y = 1: a + b = 4 + 6); splitting is impossible (K = 1)
    first = option_dict("vanilla", 1, 0, 2, 3, sbw={"1": 0})
    second = option_dict("vanilla", 2, 0, 2, 3, sfw={"0": 0})
    nodes = [(0, {"1": [first]}), (1, {"1": [second]})]
    inst = make_instance(nodes, [(0, 1, 0)], K=1, N=1, M=10, B=1)
    sol = solve_milp(inst, backend=backend)
    assert sol.status == Status.OPTIMAL and sol.tps == pytest.approx(3.0, rel=1e-9)
    over = inst.with_settings(M=10 * (1 - 1e-7))
    assert solve_milp(over, backend=backend).status == Status.INFEASIBLE


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", range(2, 9))
def test_memory_summing_exactly_to_the_limit_fits(backend, n):
    # K = 1: one stage holds every node; the integer memories a + b sum to exactly M, so
    # the plan fits, and with M one byte less nothing does (regression: CP-SAT's memory
    # scale n / 1e-9 was not an integer in floats and refused the first case)
    sizes = [(3, 3)] + [(1, 2)] * (n - 1)  # (a, b); with n = 4, M = 15: the campaign's case
    M = sum(a + b for a, b in sizes)

    nodes = [
        {"id": 10 * i, "TMPCs": {"1": [option_dict("vanilla", 1.0, 0, a, b)]}}
        for i, (a, b) in enumerate(sizes)
    ]
    # a faster option that never fits, so that the memory row is in the model
    nodes[0]["TMPCs"]["1"].append(option_dict("big", 0.5, 0, M, M))
    data = {
        "maxDevices": 1,
        "maxMemoryPerDevice": M,
        "bandwidth": 1,
        "mbsInBatch": 3,
        "nodes": nodes,
        "edges": [],
    }
    sol = solve_milp(instance_from_dict(data, "exact-fit"), backend=backend)
    assert sol.status == Status.OPTIMAL and sol.tps == pytest.approx(n, rel=1e-9)
    data["maxMemoryPerDevice"] = M - 1
    assert (
        solve_milp(instance_from_dict(data, "one-byte-short"), backend=backend).status
        == Status.INFEASIBLE
    )


COUNTEREXAMPLES = sorted((REPO / "compare" / "counterexamples").glob("*.json"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", COUNTEREXAMPLES, ids=lambda p: p.stem)
def test_campaign_counterexamples(backend, path):
    # instances on which a backend once disagreed with the DP and the oracle (found by the
    # cross-check campaign): CP-SAT's memory scale, CBC's primal tolerance 1e-10
    inst = load_instance(path)
    agree(solve_milp(inst, backend=backend), solve_brute(inst))


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_on_a_hard_instance_is_never_optimal(backend, shared_dir):
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(K=16)
    sol = solve_milp(inst, backend=backend, time_limit=1.0)
    # how far a backend gets in 1 s depends on the machine: every honest status passes
    assert sol.status in (Status.FEASIBLE, Status.UNKNOWN, Status.OPTIMAL, Status.OUT_OF_RANGE), (
        sol.status
    )
    # one stage with d = 16 is a valid plan (and the DP's optimum), so the optimum is at most its
    # TPS
    one_stage = Plan((Stage(tuple(inst.node_ids), 16, 1, {v: "vanilla" for v in inst.node_ids}),))
    if sol.status == Status.OPTIMAL:
        assert abs(sol.tps - evaluate(inst, one_stage).tps) <= 1e-6 * sol.tps
        return
    if sol.status == Status.OUT_OF_RANGE:
        return
    assert sol.bound is not None and 0 < sol.bound <= evaluate(inst, one_stage).tps
    if sol.status == Status.FEASIBLE:
        assert evaluate(inst, sol.plan).valid
        assert sol.bound <= sol.tps
        assert sol.info["gap"] is not None and sol.info["gap"] > 0
    else:
        assert sol.plan is None and sol.tps is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_time_limit_with_a_warm_start_gives_a_plan_and_a_bound(backend, shared_dir):
    # bert32a100 at K = 16: a single stage with d = 16 is a valid plan (and the DP's
    # optimum), but neither backend proves that within a few seconds; with it as a hint
    # both return it with status feasible, a bound below it and a positive gap
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(K=16)
    hint = Plan((Stage(tuple(inst.node_ids), 16, 1, {v: "vanilla" for v in inst.node_ids}),))
    hint_tps = evaluate(inst, hint).tps
    sol = solve_milp(inst, backend=backend, time_limit=8.0, hint=hint)
    assert sol.info["hint"] == "used"
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL), sol.status
    assert sol.tps <= hint_tps * (1 + 1e-9)
    if sol.status == Status.FEASIBLE:
        assert 0 < sol.bound < sol.tps and sol.info["gap"] > 0
        assert sol.message.startswith("time limit")


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_states_how_far_its_value_is_from_the_evaluators(backend, inputs_dir):
    inst = load_instance(inputs_dir / "small.json")
    sol = solve_milp(inst, backend=backend)
    err = sol.info["scaling_error"]
    assert sol.status == Status.OPTIMAL
    assert 0 <= err < 1e-6 * sol.tps
    assert abs(sol.objective - sol.tps) <= err
    assert sol.tps - sol.bound <= 1e-6 * sol.tps


@pytest.mark.parametrize("backend", BACKENDS)
def test_progress_lines_show_incumbent_and_bound(backend, inputs_dir, capsys):
    inst = load_instance(inputs_dir / "small.json")
    sol = solve_milp(inst, backend=backend, progress=True)
    err = capsys.readouterr().err
    assert sol.status == Status.OPTIMAL
    lines = [ln for ln in err.splitlines() if ln.startswith(f"{backend}:")]
    assert lines and "incumbent" in lines[-1] and "bound" in lines[-1], err
    assert f"{sol.tps:.6g}"[:5] in lines[-1]  # the last line shows the optimum found


# --------------------------------------------------------------------------------------
# A bigger sweep (slow): 6-8 nodes, against the DP (the exhaustive oracle where it applies)
# --------------------------------------------------------------------------------------


SWEEP = [
    (b, seed)
    for b in BACKENDS
    for seed in range(1000, 1020)
    if b in ("cpsat", "cbc") or seed % 4 == 0
]


@pytest.mark.slow
@pytest.mark.skipif(solve_dp is None, reason="needs dp.solver.solve_dp")
@pytest.mark.parametrize("backend, seed", SWEEP)
def test_agrees_with_dp_on_6_to_8_nodes(backend, seed):
    family = FAMILIES[seed % len(FAMILIES)]
    inst = random_instance(
        family,
        6 + seed % 3,
        seed,
        memory="tight" if seed % 2 else 0.6,
        integer=(seed % 5 == 0),
        options_per_t=(1, 3) if seed % 7 == 0 else 2,
    )
    restr = Restrictions.from_flags(no_recompute=True) if seed % 6 == 5 else Restrictions()
    ref = solve_dp(inst, restr)
    sol = solve_milp(inst, restr, backend=backend, time_limit=120)
    agree(sol, ref)
    if brute_applies(inst):
        agree(sol, solve_brute(inst, restr))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_valid_hint_is_never_lost_at_a_short_limit(backend, shared_dir):
    # 0.2 s is too short for any backend to prove (or, for some, even to load) bert at
    # K = 16; the valid hint must come back as the plan, with status feasible, never unknown
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(K=16)
    hint = Plan((Stage(tuple(inst.node_ids), 16, 1, {v: "vanilla" for v in inst.node_ids}),))
    sol = solve_milp(inst, backend=backend, time_limit=0.2, hint=hint)
    assert sol.status in (Status.FEASIBLE, Status.OPTIMAL)  # a fast machine may prove it
    assert sol.tps <= evaluate(inst, hint).tps * (1 + 1e-9)
    assert sol.bound is not None and sol.bound <= sol.tps
    if sol.info.get("plan_from") == "hint":
        assert sol.plan == hint


def test_boundary_rows_cut_off_the_evenly_spread_point():
    # every node spread evenly over every slot, each slot used with d = 1: no edge is cut
    # (P[a,i] = P[b,i]), so this fractional point pays no cut second; the boundary rows
    # (valid: a used slot i+1 needs a reduction edge across the boundary after slot i)
    # exclude it, and the work row charges K T with every cut second
    from piper_ilp.milp.model import formulate, index_sets

    inst = random_instance("chain", 6, 3, t_values=(1,), K=4, N=4, memory="loose")
    assert not [
        r for r in formulate(index_sets(inst, Restrictions())).model.rows if r.name == "work"
    ]
    form = formulate(index_sets(inst, Restrictions()), strong=True)
    m, st = form.model, form.sets
    rows = {r.name: r for r in m.rows}
    assert [n for n in rows if n.startswith("boundary[")] == [
        f"boundary[{i}]" for i in range(st.S - 1)
    ]
    assert "work" in rows
    work = rows["work"]
    assert (form.T, float(st.inst.K)) in work.terms
    assert sum(1 for j, c in work.terms if m.vars[j].name.startswith(("ob[", "ib["))) > 0
    spread = {j: 0.0 for j in range(len(m.vars))}
    for (_v, _i, _t, l), j in form.z.items():
        spread[j] = 1.0 / st.S if l == 0 else 0.0
    for (_v, i), j in form.P.items():
        spread[j] = (i + 1) / st.S
    for i in range(st.S):
        spread[form.u[i, 1, 1]] = 1.0
    for i in range(st.S - 1):
        r = rows[f"boundary[{i}]"]
        assert math.fsum(c * spread[j] for j, c in r.terms) < r.rhs  # violated: 0 - 1 < 0


def test_no_boundary_rows_for_a_graph_that_is_not_connected():
    from piper_ilp.milp.model import formulate, index_sets

    inst = make_instance([(k, {"1": [option_dict("v", a=1)]}) for k in range(2)], M=10, B=1)
    form = formulate(index_sets(inst, Restrictions()), strong=True)
    assert not [r for r in form.model.rows if r.name.startswith("boundary")]
    assert model_size(inst, strong=True)["constraints"] == len(form.model.rows)
    sol, ref = solve_milp(inst, backend="cpsat"), solve_brute(inst)
    assert sol.status == Status.OPTIMAL and sol.tps == ref.tps
