"""SCIP's proofs against exhaustive search where SCIP once claimed a wrong optimum
(cost model sec. 7: "optimal" is a proof).

Found by hunt37 (session 6) in ``piper-ilp campaign --methods dp,cbc,scip,brute --seed
3750`` (instance 00004, verdict mismatch; the shrinker found no smaller instance that still
fails): a random fork-join DAG of 5 nodes in the default mode, where SCIP with its default 2
threads proves 9.60998906637 (its bound 9.60998810091) while brute's plan, which the
evaluator accepts, has TPS 9.45745527636 (so do dp and CBC). With 1 thread SCIP proves the
optimum. None of the rows that an earlier wrong SCIP proof switched off is on here (no
strengthening rows, no symmetry rows, no throughput floor: sequential throughput).
"""

from __future__ import annotations

import pytest

from compare.builders.generators import random_instance
from compare.crosscheck.brute import solve_brute
from compare.crosscheck.methods import run_method
from piper_ilp.solution import Status

SCIP_TWO_THREADS = (
    "SCIP with its default 2 threads proves 9.60998906637 where brute's valid plan has "
    "9.45745527636 (3 of 3 runs)"
)


def fork_join_5():
    """The campaign's instance 00004-fork-join-n5 (K = 3, N = 8, M = 41.35, B = 2000)."""
    return random_instance(
        "fork-join", 5, 1923646072, t_values=(1, 2), options_per_t=(2, 2), memory="tight"
    )


def assert_no_wrong_proof(sol, best):
    if sol.status is Status.OPTIMAL:
        assert sol.value <= best.value * (1 + 1e-6), (sol.value, sol.bound, best.value)
    assert sol.bound is None or sol.bound <= best.value * (1 + 1e-6), (sol.bound, best.value)


@pytest.mark.xfail(strict=True, reason=SCIP_TWO_THREADS)
def test_scip_default_threads_prove_no_more_than_brute():
    inst = fork_join_5()
    best = solve_brute(inst)
    assert best.status is Status.OPTIMAL
    for _ in range(3):  # SCIP with several threads need not repeat itself
        assert_no_wrong_proof(run_method(inst, "scip"), best)


def test_scip_one_thread_proves_brutes_optimum():
    inst = fork_join_5()
    best = solve_brute(inst)
    sol = run_method(inst, "scip", threads=1)
    assert_no_wrong_proof(sol, best)
    assert sol.status is Status.OPTIMAL
    assert sol.value == pytest.approx(best.value, rel=1e-6)
