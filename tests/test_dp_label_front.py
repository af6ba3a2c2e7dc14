"""The label DP's front bound (dp/label_front.py): the devices that the stages in front of a
set need at a cutoff never exceed what a valid plan of value at most the cutoff uses there,
on plans from every mode and restriction, with and without interchangeable branches; and
the DP with it keeps every value (tight memory, where the bound prunes)."""

from __future__ import annotations

import math

import pytest
from test_dp_label_bounds import _same
from test_dp_symmetry import branchy

from compare.bench.modes import towers_instance
from compare.builders.generators import random_instance
from dp.ideals import enumerate_ideals, successor_masks
from dp.label_front import front_devices
from dp.label_pairs import SubsetPairs
from dp.modes import predecessor_masks, solve_modes
from dp.symmetry import canonical_ideals, find_branches
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict
from piper_ilp.mode import ALL_MODES, Mode
from piper_ilp.solution import Restrictions, Status

NON_DEFAULT = [m for m in ALL_MODES if not m.is_default]


def _fronts(inst, mode, symmetry):
    """D at any cutoff (a function), and the set index of any successor-closed set."""
    succ = successor_masks(inst)
    pred = predecessor_masks(succ)
    br = find_branches(inst, succ, pred) if symmetry else None
    d_values = Restrictions().d_values(inst)
    gpipe = mode.schedule == "gpipe"
    if br is None:
        ideals = enumerate_ideals(inst, 100_000)
        index = {I: i for i, I in enumerate(ideals)}
        pairs = SubsetPairs(ideals, None, pred)
        fd = front_devices(inst, ideals, pairs, succ, d_values, gpipe, mode.batch_time)
        return fd, lambda I: index[I]
    ideals = canonical_ideals(br, succ, 100_000)
    where = {(I & br.core, tuple(br.states(I))): i for i, I in enumerate(ideals)}

    def key_of(J, st):
        return where[(J & br.core, br.canonical_states(st))]

    pairs = SubsetPairs(ideals, br, pred, key_of)
    fd = front_devices(inst, ideals, pairs, succ, d_values, gpipe, mode.batch_time)
    return fd, lambda I: key_of(I, br.states(I))


def _check_plan(inst, plan, mode, fd, index_of):
    """Every suffix of the plan's stages (a successor-closed set I): the stages in front use
    at least D(I) devices at the plan's value as cutoff."""
    ev = evaluate(inst, plan, mode)
    assert ev.valid
    D = fd.needed(ev.value * (1 + 1e-12))
    pos = {v: k for k, v in enumerate(inst.node_ids)}
    devices = [s.t * s.d for s in plan.stages]
    suffix = 0
    for r in range(len(plan.stages), -1, -1):
        if r < len(plan.stages):
            for v in plan.stages[r].nodes:
                suffix |= 1 << pos[v]
        front = sum(devices[:r])
        assert front >= D[index_of(suffix)], (mode.label, r, front, D[index_of(suffix)])
    return True


def _instances():
    for seed in range(3):
        yield branchy(seed)
        yield random_instance("fork-join", 6, seed, K=8, N=8)
        yield random_instance("chain", 6, seed, K=8, N=8, memory="tight")
        yield random_instance("towers", 7, seed, K=16, N=12, memory=0.1)


@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_front_devices_at_most_a_plans(mode):
    """Plans: the optimum, and the optima under restrictions (valid plans of the instance,
    usually not optimal, so the bound is checked below their own values too)."""
    checked = 0
    for inst in _instances():
        for symmetry in (False, True):
            fd, index_of = _fronts(inst, mode, symmetry)
            if fd is None:
                continue
            for r in (Restrictions(), Restrictions(max_d=1)):
                sol = solve_modes(inst, r, mode=mode, force=True)
                if sol.status is Status.OPTIMAL:
                    checked += _check_plan(inst, sol.plan, mode, fd, index_of)
    assert checked > 10


def test_front_devices_above_every_plan_is_infeasible():
    # below the optimum no plan exists, so D of the empty set may exceed K; at the
    # optimum it never does
    for seed in range(4):
        inst = towers_instance(3, 2, K=8, N=16, seed=seed)
        for mode in (Mode("graph"), Mode("graph", "batch-time")):
            sol = solve_modes(inst, mode=mode, prune=False, force=True)
            if sol.status is not Status.OPTIMAL:
                continue
            fd, index_of = _fronts(inst, mode, True)
            assert fd.needed(sol.value * (1 + 1e-12))[index_of(0)] <= inst.K


@pytest.mark.parametrize("mode", [Mode("graph"), Mode("graph", "batch-time")], ids=str)
def test_front_bound_keeps_the_value_under_tight_memory(mode):
    # towers with tight memory: the bound prunes; pruned and unpruned DP agree
    for seed in range(3):
        for b, L in ((2, 3), (3, 2)):
            inst = towers_instance(b, L, K=8, N=16, seed=seed)
            sol = _same(inst, mode)
            assert sol.info.get("front_bound") or sol.status is not Status.OPTIMAL
            assert math.isfinite(sol.value) or sol.status is not Status.OPTIMAL


def _opt(p, a, b, w, sfw=None, sbw=None):
    return {
        "id": "vanilla",
        "timePerSample": p,
        "parameterSize": w,
        "memoryUsageA": a,
        "memoryUsageB": b,
        "syncTimeFw": sfw or {},
        "syncTimeBw": sbw or {},
    }


def test_front_bound_where_memory_is_exactly_full():
    # fuzz seed 365 (random "tight" memory): the plan's second stage needs exactly M, and
    # a float sum of its memories rounds above M; the bound must still let it through
    M = 0.024319081221599516
    small = dict(p=9.940290092372484, a=0.0, b=0.0034762393832556437, w=1.906611281594437e-24)
    big = dict(p=38998.26141707458, a=0.010734060253958965, b=0.010108781584384907, w=1.2e-24)
    data = {
        "maxDevices": 2,
        "maxMemoryPerDevice": M,
        "bandwidth": 1.9131312991467383e-23,
        "mbsInBatch": 12,
        "nodes": [
            {"id": 0, "TMPCs": {"1": [_opt(**small)]}},
            {"id": 2, "TMPCs": {"1": [_opt(**big, sbw={"1": 1.7264532211797884e-24})]}},
            {"id": 1, "TMPCs": {"1": [_opt(**small, sfw={"2": 0.0})]}},
        ],
        "edges": [{"sourceId": 2, "destId": 1, "communicationCost": 0.0}],
    }
    inst = instance_from_dict(data)
    for mode in (Mode("graph"), Mode("sequential", "batch-time")):
        a = solve_modes(inst, mode=mode)
        b = solve_modes(inst, mode=mode, prune=False)
        assert b.status is Status.OPTIMAL
        assert a.status is Status.OPTIMAL and a.value == b.value, (mode.label, a.status)
