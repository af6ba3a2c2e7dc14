"""The label DP's bounds and set enumeration (dp/label_bounds.py, dp/symmetry.py's
sub_ideal_states, the guessed bounds of dp/modes.py): the subsets up to a set's stabiliser
are the same as by the node-by-node search, and pruning by the work left over the devices
left and by guessed bounds never changes a value."""

from __future__ import annotations

import math

import pytest
from test_dp_symmetry import branchy

from compare.builders.generators import random_instance
from dp.ideals import successor_masks
from dp.label_bounds import node_work
from dp.modes import predecessor_masks, solve_modes
from dp.symmetry import canonical_ideals, find_branches, sub_ideal_states, sub_ideals
from piper_ilp.evaluate import evaluate
from piper_ilp.mode import ALL_MODES
from piper_ilp.solution import Status

NON_DEFAULT = [m for m in ALL_MODES if not m.is_default]


def test_sub_ideal_states_are_the_sub_ideals():
    checked = 0
    for seed in range(30):
        inst = branchy(seed)
        succ = successor_masks(inst)
        pred = predecessor_masks(succ)
        br = find_branches(inst, succ, pred)
        if br is None:
            continue
        for I in canonical_ideals(br, succ, 10_000):
            got = sub_ideal_states(br, I, pred)
            assert [J for J, _ in got] == sub_ideals(br, I, pred)
            assert all(list(st) == br.states(J) for J, st in got)
            checked += 1
    assert checked > 100


def test_node_work_is_the_least_device_seconds():
    inst = random_instance("chain", 5, 3)
    for v, w in zip(inst.node_ids, node_work(inst)):
        opts = inst.node[v].options
        assert w == min(t * o.p for t, ol in opts.items() for o in ol)


def _same(inst, mode):
    """Pruned (bounds, guesses) and unpruned: the same status and value; the plan is
    accepted by the evaluator at that value."""
    a = solve_modes(inst, mode=mode)
    b = solve_modes(inst, mode=mode, prune=False)
    assert a.status == b.status, (mode.label, a.status, b.status)
    if a.status is Status.OPTIMAL:
        assert math.isclose(a.value, b.value, rel_tol=1e-12), (mode.label, a.value, b.value)
        ev = evaluate(inst, a.plan, mode)
        assert ev.valid and math.isclose(ev.value, a.value, rel_tol=1e-12)
    return a


@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_bounds_keep_the_value(mode):
    guessed = 0
    for seed in range(4):
        for inst in (branchy(seed), random_instance("fork-join", 6, seed, K=8, N=8)):
            sol = _same(inst, mode)
            guessed += sol.status is Status.OPTIMAL and "guesses" in sol.info
    assert guessed > 0


@pytest.mark.parametrize("mode", NON_DEFAULT, ids=lambda m: m.label)
def test_bounds_keep_the_value_where_they_are_tight(mode):
    # memory never binds: the optimum is near the work over the devices, so the guesses
    # and the bound on the stages in front decide (an inflated bound changes values here)
    for seed in range(3):
        for family in ("chain", "fork-join", "towers"):
            _same(random_instance(family, 6, seed, K=8, N=8, memory="loose"), mode)
