"""The 2BW baseline (contract sec. 10): equal stages, one d and t, best that fits."""

from __future__ import annotations

import pytest

from compare.baselines.twobw import block_order, solve_2bw
from compare.builders.deepen import repeated_chain
from compare.builders.generators import FAMILIES, random_instance
from dp import solve_dp
from piper_ilp import evaluate, load_instance, parse_size
from piper_ilp.solution import Status

CASES = [(f, n, s) for f in FAMILIES for n in (3, 5) for s in range(4)]


@pytest.mark.parametrize("family,n,seed", CASES)
def test_2bw_is_a_valid_equal_stage_plan_never_below_the_optimum(family, n, seed):
    inst = random_instance(family, n, seed, memory="loose")
    base = solve_2bw(inst)
    opt = solve_dp(inst)
    if base.status is Status.UNKNOWN:  # no equal-stage plan fits: no claim either way
        return
    assert base.status is Status.FEASIBLE  # a heuristic never claims a proof
    ev = evaluate(inst, base.plan)
    assert ev.valid and ev.tps == base.tps
    assert len({(s.d, s.t) for s in base.plan.stages}) == 1
    assert opt.status is Status.OPTIMAL and base.tps >= opt.tps * (1 - 1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_one_device_leaves_one_stage_and_2bw_is_the_optimum(seed):
    # K = N = 1: every valid plan is one stage with d = t = 1, the only 2BW configuration
    inst = random_instance("layered", 5, seed, memory="loose").with_settings(K=1, N=1)
    base, opt = solve_2bw(inst), solve_dp(inst)
    assert opt.status is Status.OPTIMAL and base.status is Status.FEASIBLE
    assert base.tps == pytest.approx(opt.tps, rel=1e-12)


def test_bert_blocks_are_its_32_layers_and_the_baseline_is_slower_than_piper(shared_dir):
    inst = load_instance(shared_dir / "piper-inputs" / "bert32a100.json").with_settings(
        K=512, M=parse_size("8GiB"), N=1920, B=parse_size("25GiB/s", rate=True)
    )
    order, starts = block_order(inst)
    assert len(starts) == 32 and sorted(order) == sorted(inst.node_ids)
    base = solve_2bw(inst)
    opt = solve_dp(inst)
    assert base.status is Status.FEASIBLE
    stages = base.plan.stages
    # equal stages: every stage holds the same number of transformer layers
    layers = set(repeated_chain(inst))
    per_stage = [sum(v in layers for v in s.nodes) for s in stages]
    assert len(set(per_stage)) == 1 and sum(per_stage) == 32
    assert base.tps > opt.tps
