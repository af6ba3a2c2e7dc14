"""A compiled whole-DP prototype for small DAGs (issue 35): :func:`solve_compiled` solves the
default mode (sequential pipelining, throughput, 1f1b, Piper's in-flight rule) with the
exact knapsack in one numba kernel (:mod:`dp.compiled.kernel`), from the arrays that
:mod:`dp.compiled.small_dp` makes. A measurement, not a method: nothing else calls it.
numba is optional (``pip install -e '.[compiled]'``).
"""

from dp.compiled.small_dp import MAX_NODES, compiled_available, solve_compiled

__all__ = ["solve_compiled", "compiled_available", "MAX_NODES"]
