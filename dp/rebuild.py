"""Reading the plan out of the decision tables (step 4 of the DP, cost model sec. 4):
:func:`rebuild_plan`.
"""

from __future__ import annotations

from dp.option_choice import OptionChoices
from dp.stage_geometry import bits
from dp.table_store import StageTables
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
    """The plan a path through the decision tables names, and each stage's TPS.

    Each step of the path names a stage of the plan from the front and its group (I, J,
    t, d); the stage's options come from ``choices`` at y = ceil(s / d) (floor(s / d)
    under the in-flight rule of contract sec. 11), the same memoized choice the stage
    tables used near the memory boundary.

    Parameters
    ----------
    instance : Instance
        The instance as given (before restrictions): the TPS is the evaluator's on it.
    ideals : list of int
        The family of sets the tables were built on.
    tb : StageTables
        The stage tables.
    path : list of (int, int, int)
        (set, suffix bound s, group) per stage from the front
        (:meth:`dp.threshold_search.ThresholdDecision.plan_path`).
    choices : OptionChoices
        The memo of option choices (the tables' own).
    in_flight : {"piper", "schedule"}
        The in-flight rule the path was read under: a stage's y is ceil(s / d) under
        ``"piper"``, floor(s / d) under ``"schedule"`` (s is then q, a multiple of d).

    Returns
    -------
    (Plan, list of float)

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
