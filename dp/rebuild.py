"""Reading the plan out of the decision tables (the last step of the DP).

Entry point: :func:`rebuild_plan`. The plan path read from the min-devices table names, for
each stage of the plan from the front, its group (I, J, t, d); the stage's options come
from :class:`dp.option_choice.OptionChoices` at y = ceil(s / d) (floor(s / d) under the
in-flight rule of contract sec. 11), the same memoized choice the stage tables used near the
memory boundary.
"""

from __future__ import annotations

from dp.option_choice import OptionChoices
from dp.stage_tables import StageTables, bits
from piper_ilp.cost import microbatches_in_flight, stage_cost
from piper_ilp.errors import InternalError
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage

__all__ = ["rebuild_plan"]


def rebuild_plan(
    instance: Instance,
    ideals: list[int],
    tb: StageTables,
    path: list[tuple[int, int, int]],
    choices: OptionChoices,
    in_flight: str = "piper",
) -> tuple[Plan, list[float]]:
    """The plan ``path`` (:meth:`dp.threshold_search.ThresholdDecision.plan_path`: one
    (set, suffix bound s, group) per stage from the front) over the stage tables ``tb``,
    and each stage's TPS as the evaluator computes it on ``instance`` (the instance as
    given, before restrictions). ``in_flight``: the rule the path was read under (a
    stage's y is ceil(s / d) under ``"piper"``, floor(s / d) under ``"schedule"``).

    Raises
    ------
    InternalError
        A stage with no option choice at its y (a bug).
    """
    ids = choices.ids
    stages, costs = [], []
    for Ik, s, g in path:
        J, d = int(tb.group_back[g]), int(tb.group_d[g])
        t = int(tb.group_devices[g]) // d
        C = ideals[Ik] & ~ideals[J]
        nodes = tuple(ids[i] for i in bits(C))
        y = s // d if in_flight == "schedule" else microbatches_in_flight(s, d)
        got = choices.choose(C, t, d, y)
        if got is None:
            raise InternalError(
                f"dp: stage {nodes} with t={t}, d={d}, y={y} has no option choice at rebuild"
            )
        opts = got[1]
        costs.append(stage_cost(instance, nodes, d, opts).tps)
        stages.append(Stage(nodes, d, t, {v: o.id for v, o in opts.items()}))
    return Plan(tuple(stages)), costs
