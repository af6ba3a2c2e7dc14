"""Findings of the adversarial hunt on main e9fc3eb (session 7): the column method
(``columns``) and verify's verdicts, each on the smallest instance found. A test marked
``xfail(strict=True)`` records a finding not fixed yet: it fails today and must start
passing (then the mark goes) when the fix lands."""

import pytest
from builders import make_instance, option_dict

from compare.crosscheck.brute import solve_brute
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import InternalError
from piper_ilp.milp.graph_solve import solve_columns
from piper_ilp.mode import Mode
from piper_ilp.solution import Solution, Status


def _two_node_chain(K: int, M: float):
    """0 -> 1, one option each (p = 1, one byte per microbatch in flight), N = 2."""
    nodes = [
        (0, {"1": [option_dict(p=1.0, a=1.0, sbw={1: 0.0})]}),
        (1, {"1": [option_dict(p=1.0, a=1.0, sfw={0: 0.0})]}),
    ]
    return make_instance(nodes, [(0, 1, 0.0)], K=K, N=2, M=M)


@pytest.mark.parametrize("K, M", [(1, 1.5), (2, 0.5), (64, 0.5)])
def test_columns_proves_a_tiny_infeasible_instance_in_few_rounds(K, M):
    # K = 1: one stage holding both nodes needs 2 bytes at y = 1 (M = 1.5); M = 0.5: no node
    # fits anywhere. Each is infeasible. A (t, d) with t d = K leaves no device to the other
    # node, so it is no column at any bound (1,221 rounds at K = 1 when the catalog waited
    # for it), and the bound's steps grow, so that from the work bound at K = 64 the catalog
    # is complete in a few rounds (48 at a fixed 3 %).
    sol = solve_columns(_two_node_chain(K, M), mode=Mode("graph"))
    assert sol.status is Status.INFEASIBLE
    assert len(sol.info["rounds"]) <= 8, len(sol.info["rounds"])


def _one_node():
    """One node, p = 4, w = 1, K = N = 2, B = 1: the optimum is TPS 3 (d = 2)."""
    nodes = [(9, {"1": [option_dict(p=4.0, w=1.0, a=1.0)]})]
    return make_instance(nodes, K=2, N=2, M=100.0, B=1.0)


def _brute_as(name):
    def solve(instance, restrictions, time_limit, threads):
        s = solve_brute(instance, restrictions)
        s.method = name
        return s

    return solve


def _raises(exc):
    def solve(instance, restrictions, time_limit, threads):
        raise exc

    return solve


def _claims(name, bound):
    """An optimal claim with the oracle's plan and a bound above that plan's TPS."""

    def solve(instance, restrictions, time_limit, threads):
        s = solve_brute(instance, restrictions)
        return Solution(name, Status.OPTIMAL, plan=s.plan, objective=s.objective, bound=bound)

    return solve


@pytest.mark.parametrize("name", ["columns", "path"])
@pytest.mark.parametrize("how", ["internal error", "bound above its own plan"])
def test_a_failure_of_our_own_formulations_is_an_error(name, how):
    wrong = (
        _raises(InternalError(f"{name}: the model's plan is not valid"))
        if how == "internal error"
        else _claims(name, 3.5)
    )
    solvers = {"dp": _brute_as("dp"), "brute": _brute_as("brute"), name: wrong}
    v = verify_instance(_one_node(), ("dp", "brute", name), solvers=solvers, greedy=False)
    assert v.verdict in ("error", "mismatch") and v.exit_code == 1, (v.verdict, v.backend_errors)
