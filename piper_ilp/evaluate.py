"""The independent plan evaluator: validity (cost model sec. 2) and TPS (sec. 3), under
any :class:`~piper_ilp.mode.Mode` (graph pipelining sec. 8, batch time and the
schedules' memory sec. 9, the in-flight rule sec. 11).

Every solver's answer passes through :func:`evaluate` before it is returned, as in
Piper's reference implementation (``getTPSForResult``). It shares no code with the
solvers beyond the formulas of :mod:`piper_ilp.cost`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from piper_ilp.cost import StageCost, memory_fits, stage_cost, stage_memory
from piper_ilp.instance import Instance, Option, human_bytes
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.pipeline import batch_limit_ok, batch_time, in_flight, microbatches_held, stage_graph
from piper_ilp.plan import Plan

__all__ = ["Violation", "StageReport", "Evaluation", "evaluate", "check_plan_matches"]

#: The rules of sec. 2 a plan must keep, by number (:attr:`Violation.rule`).
RULES = {
    1: "every node in exactly one stage, no empty stage",
    2: "every edge goes forward (stage(u) <= stage(v))",
    3: "d >= 1 dividing N, t >= 1",
    4: "every node names one of its options under the stage's t",
    5: "sum of d <= N (graph pipelining: max h <= N; --in-flight schedule: max q <= N) "
    "and sum of t*d <= K",
    6: "memory sum(a*y + b) <= M",
}


@dataclass(frozen=True)
class Violation:
    """A broken rule of sec. 2.

    Attributes
    ----------
    rule : int
        1-6, a key of :data:`RULES`.
    message : str
        What is wrong, in one line.
    stage : int or None
        The stage's index where it applies (None when it concerns no one stage).
    node : int or None
        The node's id where it applies.

    Examples
    --------
    >>> str(Violation(3, "d = 3 must be >= 1 and divide N = 4", stage=1))
    'rule 3 (stage 1): d = 3 must be >= 1 and divide N = 4'
    """

    rule: int
    message: str
    stage: int | None = None
    node: int | None = None

    def __str__(self) -> str:
        where = []
        if self.stage is not None:
            where.append(f"stage {self.stage}")
        if self.node is not None:
            where.append(f"node {self.node}")
        loc = f" ({', '.join(where)})" if where else ""
        return f"rule {self.rule}{loc}: {self.message}"


@dataclass(frozen=True)
class StageReport:
    """One stage's numbers, as the evaluator found them.

    Attributes
    ----------
    index : int
        The stage's position in the plan.
    nodes : tuple of int
        Its nodes, as the plan lists them.
    d, t : int
        Its data- and tensor-parallel degrees.
    s : int
        The microbatches in flight h (sequential pipelining: the suffix sum of d; graph:
        sec. 8; q of sec. 11 under ``--in-flight schedule``).
    y : int
        The microbatches one replica holds (ceil(h / d); N / d under ``gpipe``; 0 when
        d < 1).
    memory : float or None
        Bytes used per device (None when its options do not resolve or d < 1).
    memory_limit : float
        M.
    cost : StageCost or None
        The TPS split into parts (:func:`piper_ilp.cost.stage_cost`); None as for
        ``memory``.
    successors : tuple of int
        Its successors in the stage graph (:func:`piper_ilp.pipeline.stage_graph`), sorted.
    """

    index: int
    nodes: tuple[int, ...]
    d: int
    t: int
    s: int
    y: int
    memory: float | None
    memory_limit: float
    cost: StageCost | None
    successors: tuple[int, ...] = ()


@dataclass
class Evaluation:
    """The evaluator's verdict on one plan (:func:`evaluate`).

    Attributes
    ----------
    stages : list of StageReport
        One per stage of the plan, in its order.
    violations : list of Violation
        Every broken rule (empty when the plan is valid).
    devices : int
        sum of t * d.
    sum_d : int
        sum of d.
    mode : Mode
        The mode the plan was judged under.
    N : int
        Microbatches per batch.
    M : float or None
        The instance's memory limit (None when not known), also for a plan with no stages.
    """

    stages: list[StageReport]
    violations: list[Violation] = field(default_factory=list)
    devices: int = 0
    sum_d: int = 0
    mode: Mode = DEFAULT_MODE
    N: int = 1
    M: float | None = None

    @property
    def valid(self) -> bool:
        """No rule is broken."""
        return not self.violations

    @property
    def tps(self) -> float | None:
        """The plan's TPS, the largest stage TPS (sec. 3); None when the plan is not valid."""
        if self.violations or not self.stages:
            return None
        return max(r.cost.tps for r in self.stages)

    @property
    def batch_time(self) -> float | None:
        """T_batch of sec. 9 (None when the plan is not valid)."""
        if self.tps is None:
            return None
        return batch_time(
            [r.cost.tps for r in self.stages],
            [r.d for r in self.stages],
            [set(r.successors) for r in self.stages],
            self.N,
            self.mode.pipeline,
        )

    @property
    def value(self) -> float | None:
        """The value of the mode's objective: ``tps`` or ``batch_time``."""
        return self.batch_time if self.mode.batch_time else self.tps

    @property
    def bottleneck(self) -> int | None:
        """Index of the stage with the largest TPS (the first such); None when the plan is
        not valid."""
        if self.tps is None:
            return None
        return max(range(len(self.stages)), key=lambda i: (self.stages[i].cost.tps, -i))


def evaluate(instance: Instance, plan: Plan, mode: Mode = DEFAULT_MODE) -> Evaluation:
    """Check a plan against an instance and compute its TPS (and batch time).

    Parameters
    ----------
    instance : Instance
    plan : Plan
    mode : Mode
        Pipelining, objective, schedule and in-flight rule (default: the contract's secs.
        2-4).

    Returns
    -------
    Evaluation
        Per-stage reports, and every violated rule of sec. 2 (empty when valid). A bad
        plan is never an exception: each problem is a :class:`Violation`.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> from piper_ilp.plan import plan_from_dict
    >>> node = (0, {"1": [option_dict("v", p=2.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=2, M=10, N=2, B=1))
    >>> ev = evaluate(inst, plan_from_dict({"stages": [{"nodes": [0], "dataParallelDegree": 2,
    ...     "tensorParallelDegree": 1, "TMPCids": {"0": "v"}}]}))
    >>> ev.valid, ev.tps
    (True, 1.0)
    """
    V: list[Violation] = []
    K, N, M = instance.K, instance.N, instance.M
    stages = plan.stages
    if not stages:
        V.append(Violation(1, "the plan has no stages"))

    # rule 1: a partition of the nodes into non-empty stages
    where: dict[int, int] = {}
    for i, st in enumerate(stages):
        if not st.nodes:
            V.append(Violation(1, "stage is empty", stage=i))
        for v in st.nodes:
            if v not in instance.node:
                V.append(Violation(1, f"node {v} is not in the instance", stage=i, node=v))
            elif v in where:
                V.append(
                    Violation(
                        1,
                        f"node {v} is in stage {where[v]} and again in stage {i}",
                        stage=i,
                        node=v,
                    )
                )
            else:
                where[v] = i
    for v in instance.node_ids:
        if v not in where:
            V.append(Violation(1, f"node {v} is in no stage", node=v))

    # rule 2: edges go forward
    for e in instance.edges:
        if e.src in where and e.dst in where and where[e.src] > where[e.dst]:
            V.append(
                Violation(
                    2,
                    f"edge {e.src}->{e.dst} goes backward: node {e.src} in stage {where[e.src]}, "
                    f"node {e.dst} in stage {where[e.dst]}",
                    stage=where[e.dst],
                    node=e.dst,
                )
            )

    # rule 3: degrees
    for i, st in enumerate(stages):
        if st.d < 1 or N % st.d != 0:
            V.append(Violation(3, f"d = {st.d} must be >= 1 and divide N = {N}", stage=i))
        if st.t < 1:
            V.append(Violation(3, f"t = {st.t} must be >= 1", stage=i))

    # rule 4: options exist under the stage's t
    chosen: list[dict[int, Option] | None] = []
    for i, st in enumerate(stages):
        opts: dict[int, Option] | None = {}
        for v in st.nodes:
            if v not in instance.node:
                opts = None
                continue
            node = instance.node[v]
            if v not in st.options:
                V.append(Violation(4, f"node {v} has no entry in TMPCids", stage=i, node=v))
                opts = None
                continue
            oid = st.options[v]
            opt = node.option(st.t, oid)
            if opt is None:
                have = [o.id for o in node.options.get(st.t, ())]
                offer = (
                    f"its options for t = {st.t} are {have}"
                    if have
                    else f"it has no option for t = {st.t}"
                )
                V.append(
                    Violation(
                        4,
                        f"node {v} has no option {oid!r} for t = {st.t}; {offer}",
                        stage=i,
                        node=v,
                    )
                )
                opts = None
            elif opts is not None:
                opts[v] = opt
        for v in st.options:
            if v not in st.nodes:
                V.append(
                    Violation(
                        4, f"TMPCids names node {v}, which is not in this stage", stage=i, node=v
                    )
                )
        chosen.append(opts)

    # rule 5: device and microbatch budgets
    sum_d = sum(st.d for st in stages)
    devices = sum(st.t * st.d for st in stages)
    # (a d < 1 is rule 3's; the in-flight counts take it as 0, or as 1 under sec. 11's
    # rule, which divides by d)
    d = [max(st.d, 0 if mode.in_flight == "piper" else 1) for st in stages]
    successors = stage_graph(instance, plan)
    h = in_flight(d, successors, mode.pipeline, mode.in_flight)
    if not batch_limit_ok(h, N):
        if mode.in_flight == "schedule":
            V.append(Violation(5, f"max q = {max(h)} microbatches in flight exceeds N = {N}"))
        elif mode.graph:
            V.append(Violation(5, f"max h = {max(h)} microbatches in flight exceeds N = {N}"))
        else:
            V.append(Violation(5, f"sum of d = {sum_d} exceeds N = {N}"))
    if devices > K:
        V.append(Violation(5, f"sum of t*d = {devices} exceeds K = {K}"))

    # rule 6 and the costs
    reports: list[StageReport] = []
    for i, st in enumerate(stages):
        opts = chosen[i]
        y = microbatches_held(h[i], st.d, N, mode.schedule) if st.d >= 1 else 0
        memory = cost = None
        if opts is not None and st.d >= 1:
            memory = stage_memory(st.nodes, opts, y)
            cost = stage_cost(instance, st.nodes, st.d, opts)
            if not memory_fits(memory, M):
                used, limit = f"{memory:.6g}", f"{M:.6g}"
                if used == limit:  # show the digits that differ
                    used, limit = repr(memory), repr(M)
                used, limit = human_bytes(memory, used), human_bytes(M, limit)
                V.append(Violation(6, f"memory {used} with y = {y} exceeds M = {limit}", stage=i))
        reports.append(
            StageReport(
                i,
                tuple(st.nodes),
                st.d,
                st.t,
                h[i],
                y,
                memory,
                M,
                cost,
                tuple(sorted(successors[i])),
            )
        )

    return Evaluation(
        stages=reports, violations=V, devices=devices, sum_d=sum_d, mode=mode, N=N, M=M
    )


def check_plan_matches(instance: Instance, plan: Plan, *, shown: int = 3) -> str | None:
    """Whether ``plan`` belongs to ``instance`` at all, before its rules are checked.

    With metadata (written by :func:`piper_ilp.plan.save_plan`): the plan's instance
    fingerprint must equal ``instance.fingerprint()`` and its K, M, N, B the settings
    being evaluated. Without a fingerprint: the plan's node ids must be exactly the
    instance's node ids.

    Parameters
    ----------
    instance : Instance
        With the settings being evaluated.
    plan : Plan
    shown : int
        The most node ids the message names of each kind.

    Returns
    -------
    str or None
        None when the plan belongs to the instance, else one line saying why not
        (which settings differ, or how many node ids are unknown or missing, with up
        to ``shown`` of each).

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> from piper_ilp.plan import Plan, Stage
    >>> node = (0, {"1": [option_dict("v", p=1.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=1, M=10, N=1, B=1))
    >>> check_plan_matches(inst, Plan((Stage((0,), 1, 1, {0: "v"}),))) is None
    True
    >>> bad = Plan((Stage((7,), 1, 1, {7: "v"}),))
    >>> print(check_plan_matches(inst, bad))  # doctest: +NORMALIZE_WHITESPACE
    the plan does not fit this instance: 1 of its node ids are not in the instance (7);
    1 of the instance's 1 nodes are in no stage (0)
    """
    meta = plan.metadata or {}
    if meta.get("instance") is not None:
        have = instance.fingerprint()
        if meta["instance"] != have:
            return (
                f"the plan was made for another model (instance fingerprint {meta['instance']}; "
                f"this instance is {have})"
            )
        differ = [
            f"{name} = {meta[name]!r} (evaluating with {value!r})"
            for name, value in (
                ("K", instance.K),
                ("M", instance.M),
                ("N", instance.N),
                ("B", instance.B),
            )
            if meta.get(name) is not None and meta[name] != value
        ]
        if differ:
            return "the plan was solved for other settings: " + ", ".join(differ)
        return None
    in_plan = {v for st in plan.stages for v in st.nodes}
    ids = set(instance.node_ids)
    unknown = sorted(in_plan - ids)
    missing = sorted(ids - in_plan)
    if not unknown and not missing:
        return None
    parts = []
    if unknown:
        parts.append(
            f"{len(unknown)} of its node ids are not in the instance ({_few(unknown, shown)})"
        )
    if missing:
        parts.append(
            f"{len(missing)} of the instance's {len(ids)} nodes are in no stage "
            f"({_few(missing, shown)})"
        )
    return "the plan does not fit this instance: " + "; ".join(parts)


def _few(ids: list[int], shown: int) -> str:
    head = ", ".join(str(v) for v in ids[:shown])
    return head + (", ..." if len(ids) > shown else "")
