"""Small builders for instances written inline in tests."""

from __future__ import annotations

import itertools
import json

from piper_ilp.instance import instance_from_dict
from piper_ilp.instance import option_dict as _option_dict
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import divisors


def make_instance(nodes, edges=(), K=2, N=2, M=1e9, B=1.0):
    """An instance from (id, TMPCs) pairs and (u, v, c) edges."""
    return instance_from_dict(
        {
            "maxDevices": K,
            "maxMemoryPerDevice": M,
            "bandwidth": B,
            "mbsInBatch": N,
            "nodes": [{"id": nid, "TMPCs": tm} for nid, tm in nodes],
            "edges": [{"sourceId": u, "destId": v, "communicationCost": c} for u, v, c in edges],
        }
    )


def json_lines(output: str) -> list[dict]:
    """The JSON objects printed one per line in a command's output."""
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def option_dict(oid="vanilla", p=1.0, w=0.0, a=0.0, b=0.0, sfw=None, sbw=None) -> dict:
    """One option in the JSON form of cost model sec. 1, with defaults for tests (sync keys
    become strings)."""
    return _option_dict(
        oid,
        p,
        w,
        a,
        b,
        {str(k): v for k, v in (sfw or {}).items()},
        {str(k): v for k, v in (sbw or {}).items()},
    )


def every_plan(inst):
    """Every plan, naively: all ordered set partitions, all degrees, all options."""
    ids = inst.node_ids
    n = len(ids)
    for k in range(1, n + 1):
        for labels in itertools.product(range(k), repeat=n):
            if set(labels) != set(range(k)):
                continue
            groups = [tuple(v for v, lab in zip(ids, labels) if lab == i) for i in range(k)]
            for degs in itertools.product(
                [(t, d) for t in inst.t_values for d in divisors(inst.N)], repeat=k
            ):
                per_stage = []
                for (t, _d), grp in zip(degs, groups):
                    choices = [[o.id for o in inst.node[v].options.get(t, ())] for v in grp]
                    per_stage.append([dict(zip(grp, pick)) for pick in itertools.product(*choices)])
                for picks in itertools.product(*per_stage):
                    yield Plan(
                        tuple(Stage(g, d, t, o) for g, (t, d), o in zip(groups, degs, picks))
                    )
