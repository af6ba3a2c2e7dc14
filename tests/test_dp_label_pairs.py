"""The label DP's (set, subset) pairs found once per solve (dp/label_pairs.py) and its
guessed bounds past 1.05 times the lower bound (dp/modes.py): the pairs are every subset
once, kept or found again, and the guesses keep every value."""

from __future__ import annotations

import pytest
from test_dp_symmetry import branchy

from compare.bench.modes import towers_instance
from compare.builders.generators import random_instance
from dp.ideals import enumerate_ideals, successor_masks
from dp.label_front import front_devices
from dp.label_pairs import SubsetPairs
from dp.modes import predecessor_masks, solve_modes
from dp.symmetry import canonical_ideals, find_branches, sub_ideal_states
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions, Status


def _sets(inst, symmetry):
    succ = successor_masks(inst)
    pred = predecessor_masks(succ)
    br = find_branches(inst, succ, pred) if symmetry else None
    if br is None:
        return succ, pred, None, enumerate_ideals(inst, 100_000), None
    ideals = canonical_ideals(br, succ, 100_000)
    where = {(I & br.core, tuple(br.states(I))): i for i, I in enumerate(ideals)}

    def key_of(J, st):
        return where[(J & br.core, br.canonical_states(st))]

    return succ, pred, br, ideals, key_of


@pytest.mark.parametrize("max_kept", [0, 10, 1_000_000])
def test_subset_pairs_list_every_subset_once(max_kept):
    # whether kept or found again, the subsets of a set are its strict sub-sets among the
    # DP's sets (with branches: one per orbit of its stabiliser, in sub_ideal_states' order)
    for inst in (branchy(0), random_instance("fork-join", 6, 1, K=8, N=8)):
        for symmetry in (False, True):
            succ, pred, br, ideals, key_of = _sets(inst, symmetry)
            pairs = SubsetPairs(ideals, br, pred, key_of, max_kept=max_kept)
            for _ in range(2):
                for i, I in enumerate(ideals):
                    got = pairs.of(i)
                    if br is None:
                        want = [(J, j) for j, J in enumerate(ideals) if J != I and J & ~I == 0]
                    else:
                        want = [(J, key_of(J, st)) for J, st in sub_ideal_states(br, I, pred)]
                    assert got == want
                    assert all(J & ~I == 0 and J != I for J, _ in got)
            assert pairs.total <= max_kept


@pytest.mark.parametrize("mode", [Mode("graph"), Mode("graph", "batch-time")], ids=str)
def test_front_bound_on_kept_pairs_is_the_one_on_pairs_found_again(mode):
    # the front bound reads the pairs the DP keeps; one built on pairs found again at each
    # call (nothing kept) is the same
    for inst in (branchy(1), towers_instance(3, 2, K=8, N=16, seed=0)):
        for symmetry in (False, True):
            succ, pred, br, ideals, key_of = _sets(inst, symmetry)
            d_values = Restrictions().d_values(inst)
            args = (succ, d_values, False, mode.batch_time)
            own = front_devices(inst, ideals, SubsetPairs(ideals, br, pred, key_of, 0), *args)
            pairs = SubsetPairs(ideals, br, pred, key_of)
            shared = front_devices(inst, ideals, pairs, *args)
            for cutoff in (1e-4, 1e-3, 1e-2, 0.05, 1.0):
                assert own.needed(cutoff).tolist() == shared.needed(cutoff).tolist()
                a, bits_a = own.admissible(cutoff)
                b, bits_b = shared.admissible(cutoff)
                assert a.tolist() == b.tolist() and bits_a == bits_b


@pytest.mark.parametrize("mode", [Mode("graph"), Mode("graph", "batch-time")], ids=str)
def test_guesses_past_105_prove_the_optimum(mode):
    # tight memory: the optimum is often above 1.05 times the lower bound; the guesses go on
    # (1.1, 1.15, ...) and the run that proves the optimum is a guessed one, not the easier
    # problems' plans; the value is the unpruned DP's
    late = 0
    for seed in range(3):
        for b, L in ((2, 3), (2, 4)):
            inst = towers_instance(b, L, K=8, N=16, seed=seed)
            sol = solve_modes(inst, mode=mode)
            ref = solve_modes(inst, mode=mode, prune=False)
            assert (sol.status, sol.value) == (ref.status, ref.value)
            assert sol.status is Status.OPTIMAL
            tried = sol.info["guesses"]
            if len(tried) >= 4 and sol.info["upper_bound"] == tried[-1]:
                late += 1
    assert late >= 2
