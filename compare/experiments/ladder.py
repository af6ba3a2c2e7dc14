"""Check small, then scale up (``piper-ilp ladder``): the DP checked against the MILP on a
ladder of sub-instances of a big model, then run at full size with a certified gap.

The rungs are prefixes of the model: in one topological order (input order breaking ties),
the nodes before the j-th repeated block (the blocks of :func:`compare.baselines.twobw.block_order`:
the transformer layers of BERT, or single nodes when the model has no repeated block), for
j = 1, 2, 3, 4, 6, 8, 12, 16, ... as long as the rung has at most ``max_nodes`` nodes. Each
rung keeps the model's M and B and gets fewer devices and microbatches: K_j = min(K, 2 j)
and N_j = min(N, 2 j), so that the exact MILP stays small. ``verify`` runs the DP and
CP-SAT on each rung; the climb stops after ``misses`` rungs in a row that the MILP does not
prove (their verdicts are still shown).

At full size the DP gives its plan; the path formulation (CP-SAT where it does not
apply), given that plan as a hint and ``time_limit`` seconds, gives a lower bound; the
*certified gap* is (DP's TPS - bound) / DP's TPS, with the bound the larger of that
bound and the work bound sum_v min p_v t / K (every device busy
all the time), both valid without trusting the DP. Everything runs under one in-flight rule
(contract sec. 11, ``in_flight=``; the work bound holds under both; the path formulation
covers only Piper's, so under ``schedule`` the bound is CP-SAT's).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from compare.baselines.twobw import block_order
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.instance import Instance, instance_from_dict, instance_to_dict
from piper_ilp.plan import plan_to_dict
from piper_ilp.settings import Settings, in_flight_mode
from piper_ilp.solution import Restrictions, Status

__all__ = ["Rung", "Ladder", "induced_subinstance", "rung_sizes", "work_bound", "run_ladder"]


def induced_subinstance(instance: Instance, keep: set[int], source: str) -> Instance:
    """The instance restricted to the nodes ``keep`` (their edges among themselves, and
    the sync entries of those edges)."""
    data = instance_to_dict(instance)
    keys = {str(v) for v in keep}
    data["nodes"] = [n for n in data["nodes"] if n["id"] in keep]
    data["edges"] = [e for e in data["edges"] if e["sourceId"] in keep and e["destId"] in keep]
    for n in data["nodes"]:
        for opts in n["TMPCs"].values():
            for o in opts:
                o["syncTimeFw"] = {k: v for k, v in o["syncTimeFw"].items() if k in keys}
                o["syncTimeBw"] = {k: v for k, v in o["syncTimeBw"].items() if k in keys}
    return instance_from_dict(data, source=source)


def rung_sizes(blocks: int) -> list[int]:
    """Blocks per rung: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... below ``blocks``.

    Examples
    --------
    >>> rung_sizes(32)
    [1, 2, 3, 4, 6, 8, 12, 16, 24]
    """
    out, k = [], 1
    while k < blocks:
        out.append(k)
        k = k + 1 if k < 4 else (k * 3) // 2 if k & (k - 1) == 0 else (k * 4) // 3
    return out


def work_bound(instance: Instance, restrictions: Restrictions = Restrictions()) -> float:
    """sum over nodes of the least p * t over their options, divided by K: no plan can be
    faster than every device busy all the time (p is the time per sample on t devices)."""
    inst = restrictions.apply(instance)
    total = math.fsum(
        min(o.p * t for t, opts in n.options.items() for o in opts) for n in inst.nodes if n.options
    )
    return total / inst.K


@dataclass
class Rung:
    """One rung: its size, settings, verify's verdict, the proven optimum and CPU seconds."""

    blocks: int
    nodes: int
    K: int
    N: int
    verdict: str
    optimum: float | None
    seconds: float

    def to_dict(self) -> dict:
        return {
            "blocks": self.blocks,
            "nodes": self.nodes,
            "K": self.K,
            "N": self.N,
            "verdict": self.verdict,
            "optimum": self.optimum,
            "seconds": self.seconds,
        }


@dataclass
class Ladder:
    """The rungs, the full-size run and the certified gap (None when the DP has no plan)."""

    rungs: list[Rung]
    full: dict
    gap: float | None
    problems: list[str] = field(default_factory=list)
    in_flight: str = "piper"

    def to_dict(self) -> dict:
        return {
            "in_flight": self.in_flight,
            "rungs": [r.to_dict() for r in self.rungs],
            "full": self.full,
            "gap": self.gap,
        }

    @property
    def exit_code(self) -> int:
        """1 when a rung is a mismatch (or an error), 0 otherwise."""
        return 1 if any(r.verdict in ("mismatch", "error") for r in self.rungs) else 0


def run_ladder(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    max_nodes: int = 24,
    time_limit: float = 60.0,
    full_time_limit: float = 120.0,
    misses: int = 2,
    threads: int | None = None,
    on_rung=None,
    in_flight: str = "piper",
    force: bool = False,
    max_ideals: int | None = None,
) -> Ladder:
    """Climb the ladder (see the module docstring) and run the DP at full size, every solve
    under the in-flight rule ``in_flight`` (sec. 11). ``force`` and ``max_ideals`` are the
    DP's size guards as ``solve`` passes them
    (:func:`compare.experiments.sweep.dp_guards`), for every DP solve (``force`` also lifts
    the rungs' CP-SAT guard; the bound's MILP at full size always runs forced, with the
    DP's plan as its hint).

    Raises
    ------
    InputError
        ``max_nodes`` below 1, a time limit, thread count or ``max_ideals`` out of range, or
        ``in_flight`` not a rule: before any rung. The full-size DP's refusal (a size guard
        that ``force`` lifts) after the rungs.
    """
    from compare.crosscheck.methods import run_method
    from compare.crosscheck.verify import verify_instance
    from compare.experiments.sweep import dp_guards

    if max_nodes < 1:
        raise InputError(f"--max-nodes must be >= 1, got {max_nodes}")
    mode = in_flight_mode(in_flight)
    # checked once, before any rung (each would end "error")
    guards = dp_guards(force, max_ideals)
    rung_settings = Settings(mode=mode, time_limit=time_limit, threads=threads, options=guards)
    full_settings = Settings(
        mode=mode,
        time_limit=full_time_limit,
        threads=threads,
        time_option="--full-time-limit",
        options={"force": True},
    )
    order, starts = block_order(instance)
    rungs: list[Rung] = []
    missed = 0
    for j in rung_sizes(len(starts)):
        keep = set(order[: starts[j]])
        if len(keep) > max_nodes:
            break
        K_j, N_j = min(instance.K, 2 * j), min(instance.N, 2 * j)
        sub = induced_subinstance(
            instance, keep, f"{instance.source} (rung: {j} blocks)"
        ).with_settings(K=K_j, N=N_j)
        start = time.process_time()
        verdict = verify_instance(
            sub,
            methods=("dp", "cpsat"),
            restrictions=restrictions,
            settings=rung_settings,
            greedy=False,
        )
        rung = Rung(
            j, len(keep), K_j, N_j, verdict.verdict, verdict.optimum, time.process_time() - start
        )
        rungs.append(rung)
        if on_rung is not None:
            on_rung(rung)
        missed = 0 if verdict.verdict == "match" else missed + 1
        if missed >= misses:
            break

    start = time.process_time()
    dp = run_method(instance, "dp", restrictions, mode=mode, **guards)
    full = {
        "status": dp.status.value,
        "tps": dp.tps,
        "plan": plan_to_dict(dp.plan) if dp.plan else None,
        "dp_seconds": time.process_time() - start,
    }
    bound = work_bound(instance, restrictions)
    full["work_bound"] = bound
    milp_bound = None
    try:
        start = time.process_time()
        # the DP's plan as the hint (a second DP solve for it would meet the guards again)
        if dp.plan is not None:
            full_settings = full_settings.replace(options={"force": True, "hint": dp.plan})
        try:  # the path formulation where it covers the mode, else the compact model
            milp = run_method(instance, "path", restrictions, settings=full_settings)
        except SizeLimitError:
            milp = run_method(instance, "cpsat", restrictions, settings=full_settings)
        full["milp_method"] = milp.method
        milp_bound = (
            milp.bound if milp.status in (Status.OPTIMAL, Status.FEASIBLE, Status.UNKNOWN) else None
        )
        full["milp_status"] = milp.status.value
        full["milp_seconds"] = time.process_time() - start
    except InputError as exc:  # e.g. beyond what the backend can represent
        full["milp_status"] = f"not run: {exc}"
    full["milp_bound"] = milp_bound
    if milp_bound is not None:
        bound = max(bound, milp_bound)
    full["bound"] = bound
    gap = None
    if dp.tps is not None and dp.tps > 0:
        gap = max(0.0, (dp.tps - bound) / dp.tps)
    return Ladder(rungs, full, gap, in_flight=mode.in_flight)
