"""The exact MILP of the Piper planning problem: one formulation, three backends, and the
certification of their answers (``docs/milp.md``).

* :mod:`~piper_ilp.milp.model`: the backend-neutral model, built once per instance;
* :mod:`~piper_ilp.milp.scaled`: that model in a backend's units (time scale, cutoff,
  memory relaxed or restricted);
* :mod:`~piper_ilp.milp.cpsat`, :mod:`~piper_ilp.milp.cbc`, :mod:`~piper_ilp.milp.scip`:
  the backends;
* :mod:`~piper_ilp.milp.certify`: "optimal" only when the evaluator's TPS of the plan and
  a justified lower bound agree (``docs/cost-model.md`` sec. 7);
* :mod:`~piper_ilp.milp.solve`: :func:`solve_milp`, the entry point.
"""

from piper_ilp.milp.model import LinearModel, Row, Var, build_model, model_size
from piper_ilp.milp.solve import BACKENDS, DEFAULT_MAX_VARIABLES, DEFAULT_THREADS, solve_milp

__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_VARIABLES",
    "DEFAULT_THREADS",
    "Var",
    "Row",
    "LinearModel",
    "build_model",
    "model_size",
    "solve_milp",
]
