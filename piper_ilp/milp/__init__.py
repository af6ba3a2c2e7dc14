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

The names below load their module (and networkx with the model) on first use: the method
registry reads :data:`BACKENDS` without paying for them when the DP is what runs.
"""

from piper_ilp.milp.backend import BACKENDS

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

# where each lazily loaded name lives (a module of this package)
_LAZY = {
    "DEFAULT_MAX_VARIABLES": "solve",
    "DEFAULT_THREADS": "solve",
    "solve_milp": "solve",
    "Var": "model",
    "Row": "model",
    "LinearModel": "model",
    "build_model": "model",
    "model_size": "model",
}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
