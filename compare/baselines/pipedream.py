"""Exhaustive search in PipeDream's single-level model, and a seeded cross-check of the DP
(:mod:`dp.pipedream`) against it on tiny random graphs.

The model (``docs/pipedream.md``), written here from its definition, not from the DP's
recurrence. A plan is

* a chain of states ``s_1, ..., s_t = S - 1`` whose downsets grow strictly
  (``downset(s_1) < downset(s_2) < ...``, compared as sets); stage 1 holds
  ``downset(s_1)``, stage i the nodes of ``downset(s_i)`` not in ``downset(s_{i-1})``;
* a replication ``r_i >= 1`` per stage with ``sum r_i = n`` (``<= n`` with
  ``fewer_machines``); with ``straight`` every ``r_i = 1``.

Stage i's time is ``(T_i + 4 (r_i - 1) P_i / (B r_i)) / r_i`` with ``T_i`` the sum of
(F + G) / 1000 over its nodes and ``P_i`` the sum of P (both :func:`math.fsum` over the
node set, not differences of prefix sums); the plan's time is the max over stages. With
``memory_constraint`` stage i must have ``ceil(after_i / r_i) * (Act_i + P_i) <= memory``
(:mod:`piper_ilp.pipedream.memory`) where ``after_i = r_{i+1} + ... + r_t``, except for two quirks
of PipeDream's table when fewer than n workers are used (``fewer_machines``, slack = n - sum r_i >
0):

* the first stage is checked with ``after_1 = n - r_1`` (the budget it was created with);
* PipeDream's table never lets the entry of the first state in its topological order
  (state 0) use fewer workers than its budget, so when ``s_1 = 0`` the slack cannot sit
  after stage 1: a one-stage plan is then impossible and stage 2 is checked with
  ``after_2 = n - r_1 - r_2``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import random
import time
from dataclasses import dataclass

from compare.builders.generators import FAMILIES, random_graph
from dp.pipedream import PDResult, pipedream_dp
from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.pipedream.graph import (
    PDGraph,
    PDNode,
    Prepared,
    check_model_settings,
    graph_text,
    parse_graph_text,
    prepare,
)
from piper_ilp.pipedream.memory import stash_count, stash_fits
from piper_ilp.pipedream.states import States, antichain_states

__all__ = [
    "BruteResult",
    "brute_pipedream",
    "plan_time",
    "random_pd_graph",
    "cross_check",
    "MAX_BRUTE_NODES",
]

#: The exhaustive search refuses larger graphs (its chains grow fast).
MAX_BRUTE_NODES = 9
#: ... and more (chain, replication) pairs than this (they grow like n ** chain length).
MAX_BRUTE_PLANS = 5_000_000


@dataclass
class BruteResult:
    """Least plan time (None when no plan fits), a best plan as ``[(state, r), ...]`` and
    the number of (chain, replication) pairs looked at."""

    value: float | None
    plan: list[tuple[int, int]] | None
    plans_seen: int


def _members(mask: int) -> list[int]:
    return [v for v in range(mask.bit_length()) if mask >> v & 1]


def plan_time(
    prep: Prepared,
    states: States,
    plan: list[tuple[int, int]],
    n: int,
    bandwidth: float,
    *,
    memory: float = 16e9,
    memory_constraint: bool = False,
    fewer_machines: bool = False,
) -> float | None:
    """The time of one plan ``[(state s_i, r_i), ...]`` in the model above, or None when it
    breaks a rule (not a chain, wrong machine count, memory)."""
    t = len(plan)
    if not plan or plan[-1][0] != len(states) - 1:
        return None
    total = sum(r for _, r in plan)
    if any(r < 1 for _, r in plan) or total > n or (not fewer_machines and total != n):
        return None
    slack = n - total
    if slack and plan[0][0] == 0 and t == 1:
        return None
    prev = 0
    worst = -math.inf
    for i, (s, r) in enumerate(plan):
        down = states.downset[s]
        if down & prev != prev or down == prev:
            return None
        T, A, P = prep.sums(down & ~prev)
        prev = down
        if memory_constraint:
            after = sum(rr for _, rr in plan[i + 1 :])
            if i == 0 or (i == 1 and slack and plan[0][0] == 0):
                after = n - sum(rr for _, rr in plan[: i + 1])
            if not stash_fits(stash_count(after, r), A, P, memory):
                return None
        worst = max(worst, (T + 4 * (r - 1) * P / (bandwidth * r)) / r)
    return worst


def brute_pipedream(
    prep: Prepared,
    n: int,
    bandwidth: float,
    *,
    memory: float = 16e9,
    memory_constraint: bool = False,
    straight: bool = False,
    fewer_machines: bool = False,
    max_plans: int = MAX_BRUTE_PLANS,
) -> BruteResult:
    """Try every plan of the model above (chains of states x replication vectors).

    ``max_plans`` (default :data:`MAX_BRUTE_PLANS`) is the most plans it tries.

    Raises
    ------
    InputError
        For settings outside their ranges
        (:func:`~piper_ilp.pipedream.graph.check_model_settings`).
    SizeLimitError
        For graphs with more than :data:`MAX_BRUTE_NODES` nodes, or more than
        ``max_plans`` plans to try (many workers), counted before any is tried.
    """
    check_model_settings([bandwidth], memory if memory_constraint else None)
    if len(prep.nodes) > MAX_BRUTE_NODES:
        raise SizeLimitError(
            f"{prep.source}: {len(prep.nodes)} nodes; exhaustive search takes at most "
            f"{MAX_BRUTE_NODES}"
        )
    states = antichain_states(prep)
    S = len(states)
    down = states.downset
    below = [
        [k for k in range(S) if down[k] & down[j] == down[k] and down[k] != down[j]]
        for j in range(S)
    ]
    best: float | None = None
    best_plan = None
    seen = 0

    def chains(j: int, length: int):
        # chains ending at state j with exactly `length` states
        if length == 1:
            yield [j]
            return
        for k in below[j]:
            for c in chains(k, length - 1):
                yield c + [j]

    # chains of t states ending at each state j, and the replication vectors of t stages
    n_chains = [[1 if t == 1 else 0 for _ in range(S)] for t in range(S + 1)]
    for t in range(2, S + 1):
        for j in range(S):
            n_chains[t][j] = sum(n_chains[t - 1][k] for k in below[j])
    total = 0
    for t in range(1, min(n, S) + 1):
        reps = (
            (1 if t == n or fewer_machines else 0)
            if straight
            else math.comb(n if fewer_machines else n - 1, t - 1 + fewer_machines)
        )
        total += n_chains[t][S - 1] * reps
    if total > max_plans:
        raise SizeLimitError(
            f"{prep.source}: {total:,} plans with {n:,} workers; exhaustive search tries at "
            f"most {max_plans:,}"
        )
    for t in range(1, n + 1):
        if straight:
            reps = [(1,) * t] if (t == n or fewer_machines) else []
        else:
            totals = range(t, n + 1) if fewer_machines else [n]
            reps = [c for tot in totals for c in _compositions(tot, t)]
        if not reps:
            continue
        for chain in chains(S - 1, t):
            for r in reps:
                seen += 1
                plan = list(zip(chain, r))
                v = plan_time(
                    prep,
                    states,
                    plan,
                    n,
                    bandwidth,
                    memory=memory,
                    memory_constraint=memory_constraint,
                    fewer_machines=fewer_machines,
                )
                if v is not None and (best is None or v < best):
                    best, best_plan = v, plan
    return BruteResult(best, best_plan, seen)


def _compositions(total: int, parts: int):
    """All tuples of ``parts`` positive ints summing to ``total``."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        edges = (0,) + cuts + (total,)
        yield tuple(edges[i + 1] - edges[i] for i in range(parts))


def random_pd_graph(family: str, n_nodes: int, seed: int, numbers: str = "plain") -> PDGraph:
    """A random PipeDream profile: the DAG shape of :func:`compare.builders.generators.random_graph`
    with random times (0-10 ms forward and backward, some zero), activation and parameter
    sizes (0-1e8 bytes, some zero); for odd seeds an ``Input`` node feeds every source.

    ``numbers="hostile"`` (family ``"hostile"`` draws the shape among isolated nodes too):
    every number log-uniform over [1e-30, 1e30], with zeros, the range's ends, subnormals
    and, in one graph in ten, one number above 1e30 (which the parser refuses on its line).
    """
    g = random_graph(family, n_nodes, seed)
    tag = "" if numbers == "plain" else f"/{numbers}"
    rng = random.Random(f"pipedream/{family}/{n_nodes}/{seed}{tag}")

    def draw(scale: float) -> float:
        return 0.0 if rng.random() < 0.15 else round(rng.uniform(0, scale), 3)

    def hostile(_scale: float) -> float:
        r = rng.random()
        if r < 0.15:
            return 0.0
        if r < 0.3:
            return rng.choice([1e-30, 1e30, 5e-324, 1e-300])
        return 10.0 ** rng.uniform(-30, 30)

    pick = hostile if numbers == "hostile" else draw
    nodes = [
        PDNode(f"node{v + 2}", f"Layer{v}", pick(10), pick(10), pick(1e8), pick(1e8))
        for v in sorted(g.nodes)
    ]
    if numbers == "hostile" and rng.random() < 0.1:  # one number beyond the range
        v = rng.randrange(len(nodes))
        field = rng.choice(["forward_ms", "backward_ms", "activation", "parameter"])
        nodes[v] = dataclasses.replace(nodes[v], **{field: 10.0 ** rng.uniform(30.1, 308)})
    edges = [(f"node{u + 2}", f"node{v + 2}") for u, v in sorted(g.edges)]
    if seed % 2:
        sources = [v for v in sorted(g.nodes) if g.in_degree(v) == 0]
        nodes.insert(0, PDNode("node1", "Input", 0.0, 0.0, 1e6, 0.0))
        edges = [("node1", f"node{v + 2}") for v in sources] + edges
    return PDGraph(tuple(nodes), tuple(edges), f"random-{family}-n{n_nodes}-s{seed}")


def _dp_plan(result: PDResult) -> list[tuple[int, int]]:
    return [(s.last, s.replication) for s in result.stages]


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its ended (reaped) child processes."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def check_pipedream(
    prep: Prepared,
    states,
    n: int,
    bandwidth: float,
    *,
    straight: bool = False,
    memory: float | None = None,
    memory_constraint: bool = False,
    fewer_machines: bool = False,
    milp: bool = True,
    what: str = "workers",
) -> dict:
    """Cross-check PipeDream's single-level model on one graph: its DP, exhaustive search,
    and (``milp``) the MILP of :mod:`piper_ilp.pipedream.milp`.

    The referee is exhaustive search, or the MILP's proof where the graph is too big for it.
    The verdict is "match" when every method agrees with the referee: both find no plan, or
    values within 1e-9 relative (1e-6 against or from the MILP, whose plan, timed exactly by
    :func:`plan_time`, must be within 1e-6 above the referee's and not below it), and the
    DP's own plan gives its value; "mismatch" otherwise (``problems`` say why);
    "inconclusive" when no referee ran. Where the MILP is the referee, a DP plan that is
    valid and beats its proof (or exists where it proves none) is a problem of the MILP.
    ``n`` is checked first (:func:`dp.pipedream.check_size`; ``what`` names where it came
    from, e.g. ``--devices``): too many workers for the DP's tables is refused before any work.

    Returns
    -------
    dict
        ``verdict``, ``values`` (per method that answered; None = no plan), ``skipped``
        (method -> why), ``referee``, ``problems``, ``cpu_s`` per method, ``plans_seen``
        (exhaustive search), ``milp_agrees``.
    """
    settings = dict(
        memory=memory, memory_constraint=memory_constraint, fewer_machines=fewer_machines
    )
    cpu: dict[str, float] = {}
    values: dict[str, float | None] = {}
    skipped: dict[str, str] = {}
    problems: list[str] = []
    plans_seen = 0

    def near(x: float, y: float, rtol: float) -> bool:
        return abs(x - y) <= rtol * max(abs(y), 1e-300)

    t0 = time.process_time()
    res = pipedream_dp(states, [n], [bandwidth], straight=straight, what=what, **settings)
    cpu["dp"] = time.process_time() - t0
    values["dp"] = res.time_per_stage
    own = (
        None
        if res.time_per_stage is None
        else plan_time(prep, states, _dp_plan(res), n, bandwidth, **settings)
    )
    dp_valid = own is not None and near(own, res.time_per_stage, 1e-9)
    t1 = time.process_time()
    try:
        br = brute_pipedream(prep, n, bandwidth, straight=straight, **settings)
        values["brute"], plans_seen = br.value, br.plans_seen
    except SizeLimitError as exc:
        skipped["brute"] = str(exc)
    cpu["brute"] = time.process_time() - t1
    milp_plan = None
    if milp:
        from piper_ilp.pipedream.milp import solve_pipedream_milp

        t3 = _cpu_with_children()
        # the DP's plan, valid by exact timing, bounds every stage of a plan at least as
        # good: the MILP's proof stays a proof, and its numbers stay within SCIP's range
        try:
            mr = solve_pipedream_milp(
                prep, n, bandwidth, straight=straight, cutoff=own if dp_valid else None, **settings
            )
        except SizeLimitError as exc:  # not run, as exhaustive search above its size
            mr = None
            skipped["milp"] = str(exc)
        cpu["milp"] = _cpu_with_children() - t3  # SCIP runs in a child process
        if mr is None:
            pass
        elif mr.status in ("optimal", "infeasible"):
            values["milp"], milp_plan = (
                (mr.value, mr.plan) if mr.status == "optimal" else (None, None)
            )
        else:
            skipped["milp"] = f"status {mr.status}"
    # the referee: exhaustive search where it ran, else the MILP's proof
    ref = "brute" if "brute" in values else "milp" if "milp" in values else None
    if ref is None:
        problems.append("no exact referee ran (exhaustive search refused the size, no MILP proof)")
    else:
        want = values[ref]
        if "milp" in values and ref != "milp":
            got = values["milp"]
            if (got is None) != (want is None):
                problems.append(f"milp: {got!r} against {ref}'s {want!r}")
            elif got is not None:
                exact = plan_time(prep, states, milp_plan, n, bandwidth, **settings)
                # the MILP proves its optimum within 1e-6: its plan may be that far above the
                # referee's, never below it (beyond the referee's own 1e-9)
                if not (
                    near(got, want, 1e-6)
                    and exact is not None
                    and near(exact, want, 1e-6)
                    and exact >= want * (1 - 1e-9)
                ):
                    problems.append(
                        f"milp: {got!r} (its plan takes {exact!r}) against {ref}'s {want!r}"
                    )
        rtol = 1e-9 if ref == "brute" else 1e-6
        if (
            ref == "milp"
            and dp_valid
            and (want is None or (own < want and not near(own, want, rtol)))
        ):
            # the DP's plan is valid and gives its value (timed exactly): it refutes the MILP's
            # proof
            problems.append(
                f"milp: its proof ({'no plan' if want is None else repr(want)}) is refuted by dp's "
                f"valid plan, which takes {own!r}"
            )
        elif (res.time_per_stage is None) != (want is None):
            problems.append(f"dp: {res.time_per_stage!r} against {ref}'s {want!r}")
        elif res.time_per_stage is not None:
            if not near(res.time_per_stage, want, rtol):
                problems.append(f"dp: {res.time_per_stage!r} against {ref}'s {want!r}")
            elif own is None or not near(own, res.time_per_stage, 1e-9):
                problems.append(f"dp: its plan takes {own!r}, not its value {res.time_per_stage!r}")
    milp_agrees = "milp" in values and not any(p.startswith("milp:") for p in problems)
    verdict = (
        "mismatch" if problems and ref is not None else "inconclusive" if ref is None else "match"
    )
    return {
        "verdict": verdict,
        "values": values,
        "skipped": skipped,
        "referee": ref,
        "problems": problems,
        "cpu_s": cpu,
        "plans_seen": plans_seen,
        "milp_agrees": milp_agrees,
    }


def cross_check(
    count: int = 300,
    seed: int = 1,
    *,
    max_nodes: int = 7,
    max_machines: int = 5,
    milp: bool = False,
    numbers: str = "plain",
) -> dict:
    """Compare the DP with exhaustive search on ``count`` seeded random cases.

    Each case draws a family, 1..``max_nodes`` nodes, n in 1..``max_machines``, a
    bandwidth, and with some probability ``straight``, ``fewer_machines`` and a memory
    limit drawn near the stages' sizes. A case *matches* when both find no plan or both
    values agree within 1e-9 relative, and the DP's own plan, timed by :func:`plan_time`,
    gives its value. With ``milp``, the MILP of :mod:`piper_ilp.pipedream.milp` (SCIP) is a
    third method where it applies (not with fewer machines and the memory rule together): its
    value and its plan, timed exactly, must be within 1e-6 relative of the exhaustive
    optimum (the plan never below it), as :func:`check_pipedream` says.

    ``numbers="hostile"``: the graphs of :func:`random_pd_graph` with hostile numbers
    (shapes with isolated nodes too), written as ``graph.txt`` text and read back by the
    parser, and settings at the ends of their ranges (bandwidth 1e-30..1e30, memory
    between 1e-30 and 1e30). A graph the parser refuses (a number above 1e30) counts as
    ``refused`` when the message names its file and line, else as a mismatch.

    Returns
    -------
    dict
        ``cases``, ``matched``, ``infeasible`` (both found no plan), ``refused``,
        ``mismatches`` (a list of case descriptions), ``plans_seen``, CPU seconds of each
        method, and for the MILP ``milp_cases`` (it answered), ``milp_matched`` and
        ``milp_skipped`` (no claim: a time limit, out of range, too many variables).
    """
    if numbers not in ("plain", "hostile"):
        raise InputError(f"numbers must be plain or hostile, got {numbers!r}")
    rng = random.Random(f"pipedream-cross-check/{seed}")
    out = {
        "cases": 0,
        "matched": 0,
        "infeasible": 0,
        "mismatches": [],
        "plans_seen": 0,
        "dp_cpu_s": 0.0,
        "brute_cpu_s": 0.0,
        "seed": seed,
        "milp_cases": 0,
        "milp_matched": 0,
        "milp_cpu_s": 0.0,
        "refused": 0,
        "milp_skipped": 0,
        "numbers": numbers,
    }
    hostile = numbers == "hostile"
    for case in range(count):
        family = "hostile" if hostile else FAMILIES[case % len(FAMILIES)]
        n_nodes = rng.randint(1, max_nodes)
        gseed = rng.randrange(10**6)
        graph = random_pd_graph(family, n_nodes, gseed, numbers)
        if hostile:  # through the parser, as a graph.txt file
            try:
                graph = parse_graph_text(graph_text(graph), graph.source)
            except InputError as exc:
                if str(exc).startswith(f"{graph.source}:"):
                    out["refused"] += 1
                else:
                    out["mismatches"].append(dict(case=case, graph_seed=gseed, refused=str(exc)))
                out["cases"] += 1
                continue
        prep = prepare(graph)
        states = antichain_states(prep)
        n = rng.randint(1, max_machines)
        B = rng.choice([1e-30, 1e-9, 1.0, 1e9, 1e30] if hostile else [1e8, 1e9, 1e10])
        straight = rng.random() < 0.25
        fewer = rng.random() < 0.4
        memcons = rng.random() < 0.5
        total = float(states.activation[-1] + states.parameter[-1])
        memory = rng.uniform(0.05, 1.5) * max(total, 1.0)
        if hostile:  # within [1e-30, 1e30], its ends now and then
            memory = rng.choice([1e-30, 1e30]) if rng.random() < 0.2 else memory
            memory = min(max(memory, 1e-30), 1e30)
        settings = dict(memory=memory, memory_constraint=memcons, fewer_machines=fewer)
        desc = dict(
            case=case,
            family=family,
            n_nodes=n_nodes,
            graph_seed=gseed,
            n=n,
            bandwidth=B,
            straight=straight,
            **settings,
        )
        v = check_pipedream(
            prep, states, n, B, straight=straight, milp=milp and not (fewer and memcons), **settings
        )
        out["cases"] += 1
        out["plans_seen"] += v["plans_seen"]
        for m in ("dp", "brute", "milp"):
            out[f"{m}_cpu_s"] += v["cpu_s"].get(m, 0.0)
        out["milp_skipped"] += "milp" in v["skipped"]
        if "milp" in v["values"]:
            out["milp_cases"] += 1
            out["milp_matched"] += v["milp_agrees"]
        if v["verdict"] == "match":
            out["matched"] += 1
            out["infeasible"] += v["values"].get("brute") is None
        else:
            out["mismatches"].append(
                dict(desc, **{m: val for m, val in v["values"].items()}, problems=v["problems"])
            )
    return out
