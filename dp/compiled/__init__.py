"""The compiled whole DP for small DAGs (issue 35): :func:`solve_compiled` solves the
default mode (sequential pipelining, throughput, 1f1b, Piper's in-flight rule) with the
exact knapsack in one numba kernel (:mod:`dp.compiled.kernel`), from the arrays that
:mod:`dp.compiled.small_dp` makes. The registry's method ``compiled``
(:mod:`compare.crosscheck.compiled`) and ``bench small --modes compiled`` call it. It uses
the core only. The kernel module (and numba with it) is imported on the first solve only,
so that the other methods do not pay numba's load.
"""

from dp.compiled.small_dp import (
    MAX_NODES,
    size_refusal,
    solve_compiled,
    work_estimate,
)

__all__ = ["solve_compiled", "MAX_NODES", "size_refusal", "work_estimate"]
