"""Reproduce the numbers of docs/pipedream.md ("Why the imported GNMT is slow").

    piper-ilp import pipedream ../shared/pipedream-inputs/gnmt/graph.txt -o g.json -K 8
    python docs/scripts/pipedream_gnmt_sets.py g.json          # sets only
    python docs/scripts/pipedream_gnmt_sets.py g.json solve    # and the DP at two settings

The imported GNMT with nodes left out: its 8 ``__getitem__`` sinks, its 8 zero nodes (the
three inputs, ``hidden`` and the four ``__getitem__`` of ``hidden``), or both. For each: the
successor-closed sets, and with ``solve`` the DP's optimum, stage pairs (I, J) tried,
candidate stages kept and CPU seconds (time.process_time) at K = 8 with N = 8, M = 16e9
(the import's default memory) and with N = 256, M = 1.2 GiB.
"""

from __future__ import annotations

import sys
import time

from dp import solve_dp
from dp.ideals import count_ideals
from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance

SINKS = (9, 13, 18, 25, 27, 33, 39, 46)  # __getitem__(1) and (3): no successors
ZERO = (1, 2, 3, 20, 22, 30, 36, 43)  # Input0-2, hidden and its __getitem__: all numbers 0
SETTINGS = (dict(K=8, N=8, M=16e9), dict(K=8, N=256, M=1.2 * 2**30))


def without(instance, drop):
    """``instance`` without the nodes ``drop``, their edges and sync entries."""
    d = instance_to_dict(instance)
    d["nodes"] = [n for n in d["nodes"] if n["id"] not in drop]
    d["edges"] = [e for e in d["edges"] if e["sourceId"] not in drop and e["destId"] not in drop]
    for n in d["nodes"]:
        for options in n["TMPCs"].values():
            for o in options:
                for key in ("syncTimeFw", "syncTimeBw"):
                    o[key] = {k: v for k, v in o[key].items() if int(k) not in drop}
    return instance_from_dict(d)


def main(path: str, solve: bool) -> None:
    g = load_instance(path)
    for name, drop in (
        ("imported", ()),
        ("without the getitem sinks", SINKS),
        ("without the zero nodes", ZERO),
        ("without both", SINKS + ZERO),
    ):
        inst = without(g, set(drop))
        print(f"{name}: {len(inst.nodes)} nodes, {count_ideals(inst)} sets", flush=True)
        for s in SETTINGS if solve else ():
            start = time.process_time()
            sol = solve_dp(inst.with_settings(**s))
            print(
                f"   K={s['K']} N={s['N']} M={s['M']:.4g}: TPS {sol.tps!r}, "
                f"{len(sol.plan.stages)} stages, pairs {sol.info['stage_pairs']}, candidates "
                f"{sol.info['stage_candidates']}, CPU {time.process_time() - start:.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "solve")
