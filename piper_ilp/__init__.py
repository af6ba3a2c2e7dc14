"""piper-ilp: Piper's DNN-parallelization planning problem, solved by an optimized DP
and cross-checked against an exact MILP (OR-Tools CP-SAT, CBC through PuLP).

The public API::

    from piper_ilp import load_instance, load_plan, evaluate
    inst = load_instance("inputs/small.json").with_settings(K=8, M=8 * 2**30)
    ev = evaluate(inst, load_plan("inputs/small.plan.json"))
    print(ev.valid, ev.tps)
"""

from piper_ilp.errors import InputError, InternalError
from piper_ilp.evaluate import Evaluation, check_plan_matches, evaluate
from piper_ilp.instance import Instance, Node, Option, load_instance, parse_size, save_instance
from piper_ilp.plan import Plan, Stage, load_plan, save_plan
from piper_ilp.version import __version__

__all__ = [
    "__version__",
    "InputError",
    "InternalError",
    "Instance",
    "Node",
    "Option",
    "Plan",
    "Stage",
    "Evaluation",
    "evaluate",
    "check_plan_matches",
    "load_instance",
    "save_instance",
    "load_plan",
    "save_plan",
    "parse_size",
]
