"""A plan read in a training framework's terms: which layers each pipeline stage holds, the
one tensor- and data-parallel size, the batch; refused (:class:`ExportError`, one line)
when no framework could run it as planned.

What every framework here needs (contract sec. 12): an instance written by ``piper-ilp
from-config`` (its ``model`` section names the layers), a valid plan, every stage a run of
consecutive nodes, and one (t, d) for every stage (``solve --uniform`` finds the best such
plan). What each framework can express of the recomputation is checked by its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compare.builders.transformer import ModelSection, check_model_section, read_model_section
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan

__all__ = ["ExportError", "StageLayers", "PlanLayout", "plan_layout", "FRAMEWORK_NAMES"]

#: How the frameworks are named in messages.
FRAMEWORK_NAMES = {"megatron": "Megatron-LM", "torchtitan": "torchtitan"}


class ExportError(InputError):
    """A plan the framework cannot run as planned (one line naming the reason; exit 2)."""


@dataclass(frozen=True)
class StageLayers:
    """One pipeline stage: whether it holds the embedding, its layers (``first``,
    ``first + 1``, ..., 1-based; ``count`` may be 0), whether it holds the head, and the
    option id of each of its layers in order."""

    index: int
    embedding: bool
    first: int
    count: int
    head: bool
    options: tuple[str, ...]

    def option_counts(self) -> dict[str, int]:
        """How many of the stage's layers take each option."""
        out: dict[str, int] = {}
        for o in self.options:
            out[o] = out.get(o, 0) + 1
        return out


@dataclass(frozen=True)
class PlanLayout:
    """A uniform plan of a from-config instance, stage by stage.

    ``t`` and ``d`` are every stage's tensor- and data-parallel degrees; ``N`` the
    microbatches per batch; ``tps`` the plan's TPS (seconds per microbatch, the evaluator's)
    and ``value`` the evaluator's value of the mode's objective (the TPS or the batch time);
    ``identical_layers`` says that every layer node offers the same options (so which layers
    of a stage recompute changes neither its time nor its memory). ``instance``, ``plan``
    and ``mode`` are what was read, for judging another recomputation on the same stages.
    """

    model: ModelSection
    stages: tuple[StageLayers, ...]
    t: int
    d: int
    N: int
    tps: float
    identical_layers: bool
    instance: Instance = field(repr=False, compare=False)
    plan: Plan = field(repr=False, compare=False)
    mode: Mode = DEFAULT_MODE
    value: float = 0.0

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def world_size(self) -> int:
        """GPUs the plan uses: stages x t x d."""
        return self.pp * self.t * self.d

    @property
    def micro_batch_size(self) -> int:
        return self.model.micro_batch_size

    @property
    def global_batch_size(self) -> int:
        """Sequences per batch: N microbatches of b sequences."""
        return self.N * self.micro_batch_size

    @property
    def microbatches_per_replica(self) -> int:
        """Microbatches each data-parallel replica runs per batch, N / d."""
        return self.N // self.d

    def layer_counts(self) -> list[int]:
        return [st.count for st in self.stages]


def _check_chain(instance: Instance, model: ModelSection, where: str) -> None:
    L = model.layers
    ids = instance.node_ids
    edges = sorted((e.src, e.dst) for e in instance.edges)
    if ids != list(range(L + 2)) or edges != [(i, i + 1) for i in range(L + 1)]:
        raise ExportError(
            f"{where}: its nodes and edges are not from-config's chain (embedding 0, layers "
            f"1..{L}, head {L + 1}, edges i -> i+1)"
        )


def _identical_layers(instance: Instance, L: int) -> bool:
    """Whether every layer node 1..L has the same options (id, p, w, a, b) for every t."""

    def shape(v: int):
        return {
            t: [(o.id, o.p, o.w, o.a, o.b) for o in opts]
            for t, opts in instance.node[v].options.items()
        }

    first = shape(1) if L else None
    return all(shape(v) == first for v in range(2, L + 1))


def plan_layout(data: Any, instance: Instance, plan: Plan, framework: str) -> PlanLayout:
    """Read ``plan`` in layer terms for ``framework`` ("megatron" or "torchtitan").

    Parameters
    ----------
    data : dict
        The instance file's parsed JSON (its ``model`` section).
    instance : Instance
        The instance as loaded (with the settings the plan was solved for).
    plan : Plan
        The plan to export.
    framework : str
        For the messages.

    Raises
    ------
    ExportError
        No from-config ``model`` section (or a damaged one, or one whose numbers are not
        the instance's), nodes that are not its chain, an invalid plan, a stage that is not
        a run of consecutive nodes, or stages with different (t, d).
    """
    name = FRAMEWORK_NAMES[framework]
    where = instance.source
    try:
        model = read_model_section(data, where)
        _check_chain(instance, model, where)
        check_model_section(data, model, instance.t_values, where)
    except InputError as exc:
        raise ExportError(str(exc)) from None
    mode = Mode.from_dict(plan.metadata)
    ev = evaluate(instance, plan, mode)
    if not ev.valid:
        raise ExportError(f"{where}: the plan is not valid for this instance: {ev.violations[0]}")
    L = model.layers
    stages = []
    for i, st in enumerate(plan.stages):
        nodes = sorted(st.nodes)
        if nodes != list(range(nodes[0], nodes[-1] + 1)):
            raise ExportError(
                f"cannot export to {name}: stage {i} (nodes {nodes[0]}..{nodes[-1]}) is not a "
                "run of consecutive layers"
            )
        if (st.t, st.d) != (plan.stages[0].t, plan.stages[0].d):
            raise ExportError(
                f"cannot export to {name}: stage {i} has (t, d) = ({st.t}, {st.d}) but stage 0 "
                f"has ({plan.stages[0].t}, {plan.stages[0].d}); {name} runs one tensor- and "
                "data-parallel size for every stage (solve with --uniform)"
            )
        layers = [v for v in nodes if 1 <= v <= L]
        stages.append(
            StageLayers(
                i,
                0 in nodes,
                layers[0] if layers else 0,
                len(layers),
                L + 1 in nodes,
                tuple(st.options[v] for v in layers),
            )
        )
    return PlanLayout(
        model,
        tuple(stages),
        plan.stages[0].t,
        plan.stages[0].d,
        instance.N,
        ev.tps,
        _identical_layers(instance, L),
        instance,
        plan,
        mode,
        ev.value,
    )
