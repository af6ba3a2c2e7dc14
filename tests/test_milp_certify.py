"""Certification of MILP answers (``docs/cost-model.md`` sec. 7): every backend either
proves within 1e-6 relative of the optimum or does not claim a proof.

* the known failures, one test each (a huge dummy option beside an ordinary one; memory
  exactly at M and one ulp around it);
* claims that fail certification, made by a stand-in backend handed to ``certify``
  (a plan the evaluator rejects, a bound above a valid plan, "infeasible" against a
  known plan, a value that is not the plan's): Status.BACKEND_ERROR, never a proof;
* a seeded sweep of tiny instances whose numbers spread over 1e-6..1e18 in one instance,
  with M set to a stage's memory exactly, or one ulp around it, against the exhaustive
  oracle: OPTIMAL must be within 1e-6 of the oracle's optimum, INFEASIBLE must be the
  oracle's verdict; FEASIBLE / UNKNOWN / OUT_OF_RANGE are honest and are counted.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from builders import certify_fake, certify_stand_in, option_dict

from compare.builders.generators import FAMILIES, random_instance
from compare.crosscheck.brute import solve_brute
from piper_ilp.errors import InputError, InternalError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict, instance_to_dict
from piper_ilp.milp import BACKENDS, solve_milp
from piper_ilp.milp.backend import Answer
from piper_ilp.milp.certify import PROOF_RTOL
from piper_ilp.milp.model import formulate, index_sets
from piper_ilp.solution import Restrictions, Status

HONEST = (Status.FEASIBLE, Status.UNKNOWN, Status.OUT_OF_RANGE)


def option(oid, p, a=1.0, b=0.0, w=0.0):
    return option_dict(oid, p, w, a, b)


# --------------------------------------------------------------------------------------
# Known failures
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_huge_dummy_option_does_not_coarsen_the_proof(backend):
    # K = N = 4, one node: p = 1 (d = 4 gives 0.25) beside p = 1e12. The time unit once
    # came from the largest possible TPS (1e12), so CP-SAT "proved" 0.5 and CBC ended in
    # an internal error; the optimum is 1 / 4.
    inst = instance_from_dict(
        {
            "maxDevices": 4,
            "maxMemoryPerDevice": 100,
            "bandwidth": 1,
            "mbsInBatch": 4,
            "nodes": [{"id": 0, "TMPCs": {"1": [option("vanilla", 1.0), option("dummy", 1e12)]}}],
            "edges": [],
        },
        "dummy",
    )
    sol = solve_milp(inst, backend=backend)
    assert sol.status == Status.OPTIMAL, sol.message
    assert sol.tps == 0.25 and sol.bound <= 0.25 and 0.25 - sol.bound <= PROOF_RTOL * 0.25


@pytest.mark.parametrize("backend", BACKENDS)
def test_numbers_at_the_ends_of_the_float_range(backend):
    def inst(ps, K):
        return instance_from_dict(
            {
                "maxDevices": K,
                "maxMemoryPerDevice": 100,
                "bandwidth": 1,
                "mbsInBatch": K,
                "nodes": [
                    {"id": i, "TMPCs": {"1": [option("vanilla", p)]}} for i, p in enumerate(ps)
                ],
                "edges": [],
            },
            "float-range",
        )

    # one node at either end of the supported range (p = 1e30 or 1e-30): proven, relative to the
    # optimum
    for p, K in ((1e30, 1), (1e-30, 2)):
        sol = solve_milp(inst([p], K), backend=backend)
        assert sol.status == Status.OPTIMAL and sol.tps == p / K, sol.message
        assert sol.tps - sol.bound <= PROOF_RTOL * sol.tps
    # beyond it (where a stage's TPS could overflow floats) the loader refuses the instance
    with pytest.raises(InputError, match="supported range"):
        inst([1e308, 1e308], 1)


def _boundary_instance(M):
    # K = 1, one stage with both nodes: memory a + b per node at y = 1, fsum = 0.1 + 0.2
    # (which is 0.30000000000000004 in floats). Option "fast" (p = 1) uses that memory;
    # option "slow" (p = 3) uses half of it.
    def node(i, a, b):
        return {
            "id": i,
            "TMPCs": {"1": [option("fast", 1.0, a, b), option("slow", 3.0, a / 2, b / 2)]},
        }

    return instance_from_dict(
        {
            "maxDevices": 1,
            "maxMemoryPerDevice": M,
            "bandwidth": 1,
            "mbsInBatch": 1,
            "nodes": [node(0, 0.1, 0.0), node(1, 0.0, 0.2)],
            "edges": [],
        },
        "boundary",
    )


EXACT_M = math.fsum([0.1, 0.0, 0.0, 0.2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["at", "ulp-above", "ulp-below"])
def test_memory_exactly_at_M_and_one_ulp_around_it(backend, where):
    M = {
        "at": EXACT_M,
        "ulp-above": math.nextafter(EXACT_M, math.inf),
        "ulp-below": math.nextafter(EXACT_M, 0),
    }[where]
    inst = _boundary_instance(M)
    # by hand: the fast pair (TPS 1 + 1) needs fsum(0.1, 0.2) = EXACT_M, so it fits unless
    # M is one ulp short; then a fast and a slow node (1 + 3; memory 0.2 or 0.25) is best
    optimum = 2.0 if where != "ulp-below" else 4.0
    sol = solve_milp(inst, backend=backend)
    assert sol.status in (Status.OPTIMAL,) + HONEST, sol.message
    if sol.status == Status.OPTIMAL:
        assert abs(sol.tps - optimum) <= PROOF_RTOL * optimum
    if sol.plan is not None:
        assert evaluate(inst, sol.plan).valid
    if sol.status == Status.FEASIBLE:
        assert sol.bound <= optimum


# --------------------------------------------------------------------------------------
# A stand-in backend: claims that must fail certification
# --------------------------------------------------------------------------------------


def _fixed_sync(data):
    data["nodes"][0]["TMPCs"]["1"][0]["syncTimeBw"] = {"1": 0.0}
    data["nodes"][1]["TMPCs"]["1"][0]["syncTimeFw"] = {"0": 0.0}
    return data


def _two_nodes():
    data = {
        "maxDevices": 2,
        "maxMemoryPerDevice": 10,
        "bandwidth": 1,
        "mbsInBatch": 2,
        "nodes": [
            {"id": 0, "TMPCs": {"1": [option("vanilla", 2.0)]}},
            {"id": 1, "TMPCs": {"1": [option("vanilla", 1.0)]}},
        ],
        "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 0.5}],
    }
    return instance_from_dict(_fixed_sync(data), "two-nodes")


def _certify_with(inst, answer_of):
    """certify() with a stand-in backend: ``answer_of(form, real_values)`` makes the claim
    from the true optimum's variable values."""
    return certify_stand_in(inst, lambda form, values, ref: answer_of(form, values, ref.tps))


def test_an_honest_stand_in_is_certified():
    sol, ref = _certify_with(_two_nodes(), lambda f, v, x: Answer(Status.OPTIMAL, v, x, x))
    assert sol.status == Status.OPTIMAL and sol.plan == ref.plan


def test_a_plan_the_evaluator_rejects_is_a_backend_error():
    def lying(form, values, x):
        for j in form.u.values():  # every slot used with every configuration: not a plan
            values[j] = 1.0
        return Answer(Status.OPTIMAL, values, x, x)

    sol, _ = _certify_with(_two_nodes(), lying)
    assert sol.status == Status.BACKEND_ERROR and sol.plan is None
    assert "rejected by the evaluator" in sol.message


def test_a_bound_above_a_valid_plan_is_a_backend_error():
    sol, _ = _certify_with(_two_nodes(), lambda f, v, x: Answer(Status.OPTIMAL, v, x, 2 * x))
    assert sol.status == Status.BACKEND_ERROR and "above the TPS" in sol.message


def test_a_value_that_is_not_the_plans_is_a_backend_error():
    sol, _ = _certify_with(_two_nodes(), lambda f, v, x: Answer(Status.OPTIMAL, v, x / 2, x / 2))
    assert sol.status == Status.BACKEND_ERROR and "differ" in sol.message


def _two_nodes_apart():
    # memory (a = b = 1, M = 3) holds one node per device, so the optimum is two stages with the
    # edge cut: max(2, 1) + 2 * 10 = 22 s, far above the trivial lower bound (1.5 s) of the model
    data = {
        "maxDevices": 2,
        "maxMemoryPerDevice": 3,
        "bandwidth": 1,
        "mbsInBatch": 2,
        "nodes": [
            {"id": 0, "TMPCs": {"1": [option("vanilla", 2.0, 1.0, 1.0)]}},
            {"id": 1, "TMPCs": {"1": [option("vanilla", 1.0, 1.0, 1.0)]}},
        ],
        "edges": [{"sourceId": 0, "destId": 1, "communicationCost": 10.0}],
    }
    return instance_from_dict(_fixed_sync(data), "two-nodes-apart")


def test_an_optimum_with_a_loose_bound_is_never_a_proof():
    inst = _two_nodes_apart()
    assert solve_brute(inst).tps == 22.0
    sol, _ = _certify_with(inst, lambda f, v, x: Answer(Status.OPTIMAL, v, x, x * (1 - 1e-3)))
    assert sol.status in (Status.BACKEND_ERROR, Status.FEASIBLE) and sol.status != Status.OPTIMAL


def test_infeasible_against_a_known_plan_is_a_backend_error():
    inst = _two_nodes()
    ref = solve_brute(inst)
    form = formulate(index_sets(inst, Restrictions()))
    values, _ = form.values_of(ref.plan)
    sol = certify_fake(form, lambda sm, s: Answer(Status.INFEASIBLE), ref.plan, values)
    assert sol.status == Status.BACKEND_ERROR and "infeasible" in sol.message


# --------------------------------------------------------------------------------------
# The sweep: magnitudes over 1e-6..1e18, memory at a stage's exact memory or 1 ulp off
# --------------------------------------------------------------------------------------


def spread_instance(seed: int):
    """A tiny random instance whose fields are scaled by powers of ten drawn from
    1e-6..1e18 (each field kind its own scale, each entry varied by up to 1e3 more), with
    M set to the exact memory of a random stage, or one ulp above or below it."""
    rng = random.Random(seed)
    family = FAMILIES[seed % len(FAMILIES)]
    n = 2 + seed % 3
    inst = random_instance(
        family, n, seed, t_values=(1, 2), options_per_t=(1, 2), integer=(seed % 4 == 0)
    )
    data = instance_to_dict(inst)
    scale = {k: 10.0 ** rng.uniform(-6, 18) for k in ("p", "w", "a", "b", "s", "c")}
    data["bandwidth"] = data["bandwidth"] * 10.0 ** rng.uniform(-6, 18)

    def vary(x, kind):
        return (
            x * scale[kind] * 10.0 ** rng.uniform(-1.5, 1.5)
            if rng.random() < 0.9
            else x * 10.0 ** rng.uniform(-6, 18)
        )

    for nd in data["nodes"]:
        for opts in nd["TMPCs"].values():
            for o in opts:
                o["timePerSample"] = vary(o["timePerSample"], "p")
                o["parameterSize"] = vary(o["parameterSize"], "w")
                o["memoryUsageA"] = vary(o["memoryUsageA"], "a")
                o["memoryUsageB"] = vary(o["memoryUsageB"], "b")
                o["syncTimeFw"] = {k: vary(v, "s") for k, v in o["syncTimeFw"].items()}
                o["syncTimeBw"] = {k: vary(v, "s") for k, v in o["syncTimeBw"].items()}
    for e in data["edges"]:
        e["communicationCost"] = vary(e["communicationCost"], "c")
    # M: the exact memory of a random set of nodes with a random option each, at y = 1 or 2
    nodes = rng.sample(data["nodes"], rng.randint(1, len(data["nodes"])))
    y = rng.choice([1, 1, 2])
    terms = []
    for nd in nodes:
        opts = [o for lst in nd["TMPCs"].values() for o in lst]
        o = rng.choice(opts)
        terms += [o["memoryUsageA"] * y, o["memoryUsageB"]]
    M = math.fsum(terms)
    where = rng.choice(["at", "at", "up", "down"])
    if where == "up":
        M = math.nextafter(M, math.inf)
    elif where == "down":
        M = math.nextafter(M, 0)
    data["maxMemoryPerDevice"] = max(M, 5e-324)
    return instance_from_dict(data, f"spread-{seed}")


def check_against_oracle(sol, ref) -> str:
    """The verdict of one MILP answer against the oracle: "ok-<status>" or a failure."""
    if sol.status == Status.OPTIMAL:
        if ref.status != Status.OPTIMAL:
            return f"WRONG: optimal {sol.tps!r} but the oracle says {ref.status}"
        if abs(sol.tps - ref.tps) > PROOF_RTOL * ref.tps:
            return f"WRONG: optimal {sol.tps!r}, oracle {ref.tps!r}"
        if sol.bound > ref.tps * (1 + 1e-12):
            return f"WRONG: bound {sol.bound!r} above the optimum {ref.tps!r}"
    elif sol.status == Status.INFEASIBLE:
        if ref.status != Status.INFEASIBLE:
            return f"WRONG: infeasible, but the oracle has {ref.tps!r}"
    elif sol.status == Status.FEASIBLE:
        if ref.status != Status.OPTIMAL or sol.tps < ref.tps * (1 - 1e-12):
            return f"WRONG: feasible {sol.tps!r}, oracle {ref.status} {ref.tps!r}"
        if sol.bound is not None and sol.bound > ref.tps * (1 + 1e-12):
            return f"WRONG: bound {sol.bound!r} above the optimum {ref.tps!r}"
    elif sol.status == Status.BACKEND_ERROR:
        return f"ok-{sol.status.value}"  # counted; never a proof
    return f"ok-{sol.status.value}"


def oracle(inst):
    """The exhaustive oracle's answer, or None when it cannot give one (its own check
    rejected its plan)."""
    try:
        return solve_brute(inst)
    except InternalError:
        return None


SWEEP_SEEDS = range(40)


def run_sweep(seeds, backends=BACKENDS, time_limit=None):
    counts = {b: Counter() for b in backends}
    wrong = []
    for seed in seeds:
        inst = spread_instance(seed)
        ref = oracle(inst)
        if ref is None:
            for b in backends:
                counts[b]["no-oracle"] += 1
            continue
        for b in backends:
            sol = solve_milp(inst, backend=b, threads=1, time_limit=time_limit)
            verdict = check_against_oracle(sol, ref)
            counts[b][verdict if not verdict.startswith("WRONG") else "WRONG"] += 1
            if verdict.startswith("WRONG"):
                wrong.append((b, seed, verdict))
    return counts, wrong


@pytest.mark.parametrize("backend", BACKENDS)
def test_sweep_spread_magnitudes_no_wrong_proof(backend):
    counts, wrong = run_sweep(SWEEP_SEEDS, (backend,))
    print(backend, dict(counts[backend]))
    assert not wrong, wrong
    # the sweep must exercise proofs, not only honest refusals
    assert (
        counts[backend]["ok-optimal"] + counts[backend]["ok-infeasible"] >= len(SWEEP_SEEDS) // 2
    ), counts


if __name__ == "__main__":  # python -m tests.test_milp_certify [n_seeds]: the counts
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    counts, wrong = run_sweep(range(n))
    for b, c in counts.items():
        print(b, dict(sorted(c.items())))
    for w in wrong:
        print(*w)


@pytest.mark.parametrize("careful", ["infeasible", "plan", "unknown"])
def test_an_infeasible_claim_without_an_exact_bound_gets_a_second_opinion(careful):
    # a float backend's "infeasible" stands only when the model solved again with presolve
    # off is infeasible too (a stand-in that says so twice is believed here: verify's other
    # methods refute it); the instance has a plan (brute), so a second opinion that finds
    # it makes the claim a backend error, and one that ends otherwise proves nothing
    inst = _two_nodes()
    ref = solve_brute(inst)
    form = formulate(index_sets(inst, Restrictions()))
    values, _ = form.values_of(ref.plan)
    second = {
        "infeasible": Answer(Status.INFEASIBLE),
        "plan": Answer(Status.FEASIBLE, values, ref.tps, None),
        "unknown": Answer(Status.UNKNOWN),
    }[careful]
    sol = certify_fake(
        form, lambda sm, s: second if s.careful else Answer(Status.INFEASIBLE, exact_bound=False)
    )
    expected = {
        "infeasible": Status.INFEASIBLE,
        "plan": Status.BACKEND_ERROR,
        "unknown": Status.UNKNOWN,
    }[careful]
    assert sol.status == expected and sol.plan is None, sol.message
    rounds = sol.info["rounds"]
    assert len(rounds) == 2 and rounds[1]["note"] == "second opinion, presolve off"
    if careful == "plan":
        assert "with presolve off it finds a plan" in sol.message
        assert rounds[1]["value"] == pytest.approx(ref.tps)
