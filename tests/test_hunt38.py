"""Findings of the adversarial hunt on main e9fc3eb (session 7): the column method
(``columns``) and verify's verdicts, each on the smallest instance found. A test marked
``xfail(strict=True)`` records a finding not fixed yet: it fails today and must start
passing (then the mark goes) when the fix lands."""

import pytest
from builders import make_instance, option_dict

from piper_ilp.milp.graph_solve import solve_columns
from piper_ilp.mode import Mode
from piper_ilp.solution import Status


def _two_node_chain(K: int, M: float):
    """0 -> 1, one option each (p = 1, one byte per microbatch in flight), N = 2."""
    nodes = [
        (0, {"1": [option_dict(p=1.0, a=1.0, sbw={1: 0.0})]}),
        (1, {"1": [option_dict(p=1.0, a=1.0, sfw={0: 0.0})]}),
    ]
    return make_instance(nodes, [(0, 1, 0.0)], K=K, N=2, M=M)


@pytest.mark.xfail(
    strict=True,
    reason="hunt38 F1: on an infeasible instance the column method raises its bound by 3 % "
    "per round until every column is in, but a column with t d = K while other nodes remain "
    "is left out (others(rest, bound) > 0) until rest / bound rounds away, near "
    "bound = 1e16 rest: about 1,200 CP-SAT rounds (1,800 on hostile numbers)",
)
@pytest.mark.parametrize("K, M", [(1, 1.5), (2, 0.5)])
def test_columns_proves_a_tiny_infeasible_instance_in_few_rounds(K, M):
    # K = 1: one stage holding both nodes needs 2 bytes at y = 1 (M = 1.5); K = 2, M = 0.5:
    # no node fits anywhere. Both are infeasible; the catalog is complete once the bound
    # passes every stage's least TPS (2 here), a handful of 3 % rounds from the work bound.
    sol = solve_columns(_two_node_chain(K, M), mode=Mode("graph"))
    assert sol.status is Status.INFEASIBLE
    assert len(sol.info["rounds"]) <= 50, len(sol.info["rounds"])
