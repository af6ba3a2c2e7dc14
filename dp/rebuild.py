"""Reading the plan out of the decision tables (the last step of the DP).

Entry point: :func:`rebuild_plan`. The back-pointers of the min-devices table name, for
each stage of the plan from the front, its group (I, J, t, d); the stage's options come
from :class:`dp.option_choice.OptionChoices` at y = ceil(s / d), the same memoized
choice the stage tables used near the memory boundary.
"""

from __future__ import annotations

from dp.option_choice import OptionChoices
from dp.stage_tables import bits
from dp.threshold_search import ThresholdDecision
from piper_ilp.cost import microbatches_in_flight, stage_cost
from piper_ilp.errors import InternalError
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage

__all__ = ["rebuild_plan"]


def rebuild_plan(
    instance: Instance, ideals: list[int], decision: ThresholdDecision, f, bp, choices: OptionChoices
) -> tuple[Plan, list[float]]:
    """The plan held in the tables (f, bp) of ``decision``, and each stage's TPS as the
    evaluator computes it on ``instance`` (the instance as given, before restrictions).

    Raises
    ------
    InternalError
        A missing back-pointer, or a stage with no option choice at its y (a bug).
    """
    tb = decision.tb
    s = decision.plan_start(f)
    Ik = len(ideals) - 1
    ids = choices.ids
    stages, costs = [], []
    while Ik != 0:
        g = int(bp[Ik, s])
        if g < 0:
            raise InternalError(f"dp: no back-pointer at set {Ik}, s = {s}")
        J, d = int(tb.group_back[g]), int(tb.group_d[g])
        t = int(tb.group_devices[g]) // d
        C = ideals[Ik] & ~ideals[J]
        nodes = tuple(ids[i] for i in bits(C))
        y = microbatches_in_flight(s, d)
        got = choices.choose(C, t, d, y)
        if got is None:
            raise InternalError(f"dp: stage {nodes} with t={t}, d={d}, y={y} has no option choice at rebuild")
        opts = got[1]
        costs.append(stage_cost(instance, nodes, d, opts).tps)
        stages.append(Stage(nodes, d, t, {v: o.id for v, o in opts.items()}))
        Ik, s = J, s - d
    return Plan(tuple(stages)), costs
