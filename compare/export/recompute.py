"""The recomputation a framework runs for a plan whose own per-layer choice it cannot express.

A framework sets recomputation once for every stage (Megatron-LM: none, selective, full on
every layer or on the first k of each stage; torchtitan: none, full, or full on every n-th
layer of each stage), but the planner picks an option per layer. When a plan's choice is
none of the framework's settings, :func:`runnable_recomputation` tries each setting the
framework offers on the plan's stages and degrees, judges the resulting plan with the
evaluator (memory and the mode's objective), and keeps the best one that fits in memory on
every stage; :class:`Substitution` says which stages differ and what that costs. No setting
fits: one line, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from compare.builders.transformer_costs import FULL, SELECTIVE, VANILLA
from compare.export.layout import FRAMEWORK_NAMES, ExportError, PlanLayout
from piper_ilp.evaluate import evaluate
from piper_ilp.plan import Plan, Stage

__all__ = ["Setting", "Substitution", "stage_mixes", "runnable_recomputation"]


@dataclass(frozen=True)
class Setting:
    """One recomputation setting of a framework: ``label`` says it in words ("selective
    recomputation in every layer"), ``options`` gives the option id of each layer of each
    stage that it runs, ``value`` is what the framework is told (its arguments, its mode)."""

    label: str
    options: tuple[tuple[str, ...], ...]
    value: Any


def _stage_mix(options: Sequence[str]) -> str:
    counts = {o: options.count(o) for o in (VANILLA, SELECTIVE, FULL) if o in options}
    return " + ".join(f"{n} {o}" for o, n in counts.items())


def _ranges(indices: Sequence[int]) -> str:
    """'0-1, 4' for [0, 1, 4]."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _stages(indices: Sequence[int]) -> str:
    """'stage 3' or 'stages 0-1, 4'."""
    return f"stage{'s' * (len(indices) > 1)} {_ranges(indices)}"


def stage_mixes(layout: PlanLayout) -> str:
    """Each run of stages with the same options: "stages 0-1: 4 vanilla + 1 selective
    recomp; stages 2-15: 5 vanilla" (stages without layers left out)."""
    runs: list[list] = []
    for st in layout.stages:
        if not st.count:
            continue
        mix = _stage_mix(st.options)
        if runs and runs[-1][2] == mix and runs[-1][1] == st.index - 1:
            runs[-1][1] = st.index
        else:
            runs.append([st.index, st.index, mix])
    return "; ".join(f"stage {a}: {m}" if a == b else f"stages {a}-{b}: {m}" for a, b, m in runs)


@dataclass(frozen=True)
class Substitution:
    """A framework setting run in place of the plan's recomputation.

    ``planned`` is the plan's choice (:func:`stage_mixes`), ``changed`` the stages whose
    layers the setting recomputes otherwise, ``value`` and ``planned_value`` the evaluator's
    values of the mode's objective (``objective``: "TPS" or "batch time", seconds) with the
    setting and as planned, ``tps`` the TPS with the setting.
    """

    framework: str
    setting: Setting
    planned: str
    changed: tuple[int, ...]
    objective: str
    value: float
    planned_value: float
    tps: float

    @property
    def ratio(self) -> float:
        """value / planned value (1.0 when both are 0)."""
        return self.value / self.planned_value if self.planned_value else 1.0

    def _cost(self) -> str:
        """'TPS 0.00466556 s, 1.90% above the plan's 0.00457874 s' (or below, or equal to):
        in seconds, the unit every command prints the cost model's times in."""
        pct = (self.ratio - 1) * 100
        side = "above" if pct > 0 else "below" if pct < 0 else "equal to"
        amount = f"{abs(pct):.2f}% " if pct else ""
        return (
            f"{self.objective} {self.value:.6g} s, {amount}{side} the plan's "
            f"{self.planned_value:.6g} s"
        )

    def notes(self) -> list[str]:
        """Two comment lines for the framework's settings."""
        name = FRAMEWORK_NAMES[self.framework]
        return [
            f"# recomputation: the plan's per-layer choice ({self.planned}) is no setting of "
            f"{name}, which recomputes the same way in every stage",
            f"# these settings run {self.setting.label} instead ({_stages(self.changed)} "
            f"change): {self._cost()} by piper-ilp's evaluator; every stage fits in memory",
        ]

    def summary(self) -> str:
        """One line for standard error."""
        return (
            f"the plan's recomputation is no {FRAMEWORK_NAMES[self.framework]} setting; exported "
            f"{self.setting.label} instead ({_stages(self.changed)} change): "
            f"{self._cost()}"
        )

    def to_dict(self) -> dict:
        return {
            "planned": self.planned,
            "exported": self.setting.label,
            "changed_stages": list(self.changed),
            "objective": self.objective,
            "value": self.value,
            "planned_value": self.planned_value,
            "ratio": self.ratio,
            "tps": self.tps,
            "summary": self.summary(),
        }


def _with_options(layout: PlanLayout, options: tuple[tuple[str, ...], ...]) -> Plan:
    """The layout's plan with each stage's layers given ``options`` (the embedding and
    the head keep theirs)."""
    stages = []
    for st, plan_st, opts in zip(layout.stages, layout.plan.stages, options):
        chosen = dict(plan_st.options)
        chosen.update(zip(range(st.first, st.first + st.count), opts))
        stages.append(Stage(plan_st.nodes, plan_st.d, plan_st.t, chosen))
    return Plan(tuple(stages), layout.plan.metadata)


def runnable_recomputation(
    layout: PlanLayout, settings: Sequence[Setting], framework: str
) -> Substitution:
    """The best of ``settings`` on the plan's stages and degrees: every stage fits in
    memory, and the mode's objective is least (the first of equals).

    Raises
    ------
    ExportError
        No setting fits (one line naming the plan's choice and the settings tried).
    """
    best = None
    for setting in settings:
        ev = evaluate(layout.instance, _with_options(layout, setting.options), layout.mode)
        if ev.valid and (best is None or ev.value < best[1].value):
            best = (setting, ev)
    name = FRAMEWORK_NAMES[framework]
    if best is None:
        raise ExportError(
            f"cannot export to {name}: the plan's recomputation ({stage_mixes(layout)}) is no "
            f"setting of {name}, and with none of its settings "
            f"({'; '.join(s.label for s in settings)}) does every stage fit in memory"
        )
    setting, ev = best
    changed = tuple(
        st.index for st, opts in zip(layout.stages, setting.options) if st.options != opts
    )
    return Substitution(
        framework,
        setting,
        stage_mixes(layout),
        changed,
        "batch time" if layout.mode.batch_time else "TPS",
        ev.value,
        layout.value,
        ev.tps,
    )
