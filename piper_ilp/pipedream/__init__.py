"""PipeDream's published profiles (``graph.txt``), its planner's states and its mapping to
Piper's instances and plans. The planner itself is :mod:`dp.pipedream`; exhaustive search
in its model is :mod:`compare.baselines.pipedream`. See ``docs/pipedream.md``."""

from piper_ilp.pipedream.convert import (
    graph_to_instance,
    instance_to_graph,
    node_id_map,
    piper_plan_from_pipedream,
)
from piper_ilp.pipedream.graph import (
    PDGraph,
    PDNode,
    Prepared,
    graph_text,
    parse_graph,
    parse_graph_text,
    prepare,
)
from piper_ilp.pipedream.states import States, antichain_states

__all__ = [
    "PDGraph",
    "PDNode",
    "Prepared",
    "States",
    "antichain_states",
    "graph_text",
    "graph_to_instance",
    "instance_to_graph",
    "node_id_map",
    "parse_graph",
    "parse_graph_text",
    "piper_plan_from_pipedream",
    "prepare",
]
