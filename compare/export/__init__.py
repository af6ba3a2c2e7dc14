"""Runnable plans out (``piper-ilp export``, contract sec. 12): a plan of an instance made by
``piper-ilp from-config`` turned into Megatron-LM's command-line arguments
(:mod:`compare.export.megatron`) or torchtitan's parallelism settings
(:mod:`compare.export.torchtitan`), or refused in one line naming why the framework cannot
run it (:mod:`compare.export.layout`).

It sits in ``compare`` above ``compare.builders`` because it reads the ``model`` section that
:mod:`compare.builders.transformer` writes (one definition of that section, writer and
reader side by side); it needs nothing else but the core's instance, plan and evaluator.
"""

from compare.export.layout import ExportError, PlanLayout, plan_layout
from compare.export.megatron import megatron_arguments, megatron_text
from compare.export.torchtitan import torchtitan_toml

__all__ = [
    "FRAMEWORKS",
    "ExportError",
    "PlanLayout",
    "plan_layout",
    "megatron_arguments",
    "megatron_text",
    "torchtitan_toml",
]

#: The frameworks ``export --to`` knows.
FRAMEWORKS = ("megatron", "torchtitan")
