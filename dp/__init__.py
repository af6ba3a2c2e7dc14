"""The Piper DP over successor-closed sets, with an exact or Piper-greedy option choice.

Public entry points:

* :func:`solve_dp` -- the optimal plan (cost model sec. 4), ``knapsack="exact"`` (default,
  status OPTIMAL) or ``"greedy"`` (Piper's rule of sec. 5, status FEASIBLE).
* :func:`count_ideals` -- the number of successor-closed sets (the DP's states).
* :func:`exact_options` / :func:`greedy_options` -- one stage's option choice, exact or by
  Piper's rule; :func:`greedy_choice` the rule on plain cost/memory lists;
  :func:`pareto_frontier` the frontier the exact choice's tables are read from.
"""

from dp.greedy_rule import greedy_choice, greedy_options
from dp.ideals import DEFAULT_MAX_IDEALS, count_ideals, enumerate_ideals
from dp.knapsack import exact_options, pareto_frontier
from dp.solver import solve_dp

__all__ = [
    "solve_dp",
    "count_ideals",
    "enumerate_ideals",
    "exact_options",
    "greedy_options",
    "greedy_choice",
    "pareto_frontier",
    "DEFAULT_MAX_IDEALS",
]
