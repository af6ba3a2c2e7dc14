"""A MILP backend warm-started with a plan (``hint``, ``hint_from_dp``): the hint's value
sets the cutoff and the time scale (``piper_ilp/milp/certify.py``), so a hint whose value is
0 must still give the proven optimum 0.

Found by hunt37 (session 6): one node with a free option (p = 0) and a slow one;
the DP's plan (value 0) as hint. CP-SAT then returned the slow option's plan with its model
value 0 (the cutoff 0 capped every time coefficient at 0), which certification rejected:
status backend-error instead of optimal. CBC and SCIP happen to return the hint.
"""

from __future__ import annotations

import pytest

from compare.crosscheck.methods import run_method
from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
from piper_ilp.mode import Mode
from piper_ilp.solution import Status


def free_and_slow(p_slow: float):
    """One node, K = N = 1: option 'free' (p = 0) and option 'slow' (p = p_slow)."""
    opts = [option_dict("free", 0.0, 0, 1.0, 0), option_dict("slow", p_slow, 0, 2.0, 0)]
    return instance_from_dict(instance_dict([(0, {"1": opts})], [], K=1, M=1e9, N=1, B=1.0))


@pytest.mark.parametrize(
    "backend",
    ["cpsat", "cbc", "scip"],
)
@pytest.mark.parametrize(
    "mode", [Mode(), Mode("graph", "batch-time", "gpipe", "schedule")], ids=lambda m: m.label
)
def test_hint_of_value_zero_gives_the_optimum(backend, mode):
    inst = free_and_slow(1.0)
    assert run_method(inst, backend, mode=mode).value == 0.0  # without a hint: proven 0
    sol = run_method(inst, backend, mode=mode, hint_from_dp=True)
    assert sol.status is Status.OPTIMAL, sol.message
    assert sol.value == 0.0
