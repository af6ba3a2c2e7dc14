"""A discrete-event simulation of a plan's pipeline schedule, the referee of the batch-time
model (contract secs. 8-9) and of the memory model's in-flight counts.

The plan's stage i has d_i replicas; microbatch m goes to replica m mod d_i. One
microbatch's work on a replica takes d_i TPS_i (TPS_i from the evaluator), a forward part
(fraction ``forward_fraction``) and a backward part (the rest; with fraction 1 there is one
task per microbatch and stage). The forward of m at stage i can start when m has finished the
forward of every predecessor stage (the stage graph under ``graph`` pipelining; the stage
before it under ``sequential``); its backward when m has finished its own forward and the
backward of every successor stage.

Each replica runs one task at a time in an order fixed in advance, as real pipelines
(PipeDream-Flush, Megatron's 1F1B) do: its next task is the forward of its next microbatch
while it has forwards left and holds fewer than y_i microbatches (forward started, backward
not finished; y_i is the model's budget, :mod:`piper_ilp.pipeline`), else the backward of
its oldest microbatch. So a replica warms up with y_i forwards, then alternates one backward
and one forward (1F1B) and cools down with the last backwards: F0 F1 B0 F2 B1 F3 B2 ... for
y_i = 2. An idle replica waits for that task; it never takes another one that happens to be
ready (a greedy "backward first" rule ran F F B B with idle gaps on a 2-stage chain and
depended on exact ties of event times). ``gpipe`` is the same rule with the budget of all the
replica's microbatches: every forward of the batch before any backward.

Schedules: ``1f1b`` runs microbatches without end (``microbatches`` of them are simulated
and the steady-state period is read from the microbatches' finish times, see
:func:`_steady_period`); ``1f1b-flush`` and ``gpipe`` run one batch of N microbatches and stop.

The model's claim that 1F1B reaches max TPS within these budgets holds in the simulation
when y_i d_i >= d_i + y_j d_j on every arc i -> j the schedule follows (always for d = 1
everywhere); where ceil(h_j / d_j) rounds up (e.g. d = 1, 2, 1: y = 4, 2, 1) the strict
alternation can leave the bottleneck idle (README, "Schedules"). The in-flight rule of
contract sec. 11 (``in_flight="schedule"``: y_i d_i = q_i >= d_i + q_j) is the budget that
keeps it; the simulator takes the budgets of the rule it is given.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance, display_path
from piper_ilp.mode import IN_FLIGHT_RULES, PIPELINES, SCHEDULES, Mode, check_choice
from piper_ilp.pipeline import batch_time, microbatches_held, stage_graph
from piper_ilp.plan import Plan

__all__ = ["MAX_TASKS", "Task", "Simulation", "simulate"]

#: The most tasks one simulation runs (each is kept for the Gantt chart: ~200 bytes each).
MAX_TASKS = 5_000_000


@dataclass(frozen=True)
class Task:
    """One task on one replica: ``kind`` "F" or "B", microbatch ``mb``, ``start``/``end``
    seconds."""

    stage: int
    replica: int
    kind: str
    mb: int
    start: float
    end: float


@dataclass
class Simulation:
    """What the simulation measured, beside the model's numbers.

    ``period``: steady-state seconds per microbatch (``1f1b``), or batch_time / N for the
    flush schedules; ``batch_time``: the makespan of one batch of N microbatches (flush
    schedules) or the time the N-th microbatch finished (``1f1b``); ``model_batch_time``:
    sec. 9's formula; ``stages``: per stage d, t, TPS, ``y_model`` and ``peak_in_flight``
    (most microbatches one replica held); ``tasks``: every task run (for the Gantt chart);
    ``in_flight``: the rule whose budgets y the replicas kept (contract sec. 11).
    """

    schedule: str
    pipeline: str
    microbatches: int
    period: float
    batch_time: float
    model_batch_time: float
    max_tps: float
    stages: list[dict]
    tasks: list[Task] = field(default_factory=list, repr=False)
    in_flight: str = "piper"

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "pipeline": self.pipeline,
            "in_flight": self.in_flight,
            "microbatches": self.microbatches,
            "period": self.period,
            "max_tps": self.max_tps,
            "batch_time": self.batch_time,
            "model_batch_time": self.model_batch_time,
            "stages": self.stages,
        }


def simulate(
    instance: Instance,
    plan: Plan,
    *,
    schedule: str = "1f1b",
    pipeline: str = "sequential",
    microbatches: int | None = None,
    forward_fraction: float = 1.0 / 3.0,
    plan_source: str | None = None,
    in_flight: str = "piper",
) -> Simulation:
    """Simulate ``plan`` under ``schedule`` (see the module docstring), each replica with
    the budget y of the in-flight rule ``in_flight`` (contract sec. 11: ``"piper"`` or
    ``"schedule"``). ``plan_source`` names the plan (its file) in the message of an invalid
    plan.

    Raises
    ------
    InputError
        An invalid plan, an unknown schedule or pipeline, a forward fraction outside (0, 1],
        or a microbatch count < 1.
    """
    check_choice(schedule, SCHEDULES, "--schedule")
    check_choice(pipeline, PIPELINES, "--pipeline")
    check_choice(in_flight, IN_FLIGHT_RULES, "--in-flight")
    if not (0.0 < forward_fraction <= 1.0):
        raise InputError(f"--forward-fraction must be in (0, 1], got {forward_fraction!r}")
    # valid under the pipelining simulated (graph: max h <= N instead of sum d <= N); the
    # memory rule of the 1F1B schedules, since the simulation reports, not enforces, what
    # a gpipe replica holds
    ev = evaluate(instance, plan, Mode(pipeline, in_flight=in_flight))
    if not ev.valid:
        where = f"{display_path(plan_source)}: " if plan_source is not None else ""
        rule = "" if in_flight == "piper" else f" with the in-flight rule {in_flight}"
        raise InputError(
            f"{where}the plan is invalid for this instance under {pipeline} pipelining{rule}: "
            f"{ev.violations[0]}"
        )
    N = instance.N
    count = (
        microbatches if microbatches is not None else (max(8 * N, 64) if schedule == "1f1b" else N)
    )
    if count < 1:
        raise InputError(f"--microbatches must be >= 1, got {count}")
    # each microbatch runs once per stage (one replica of it), forward and backward
    tasks_needed = count * len(plan.stages) * (1 if forward_fraction == 1.0 else 2)
    if tasks_needed > MAX_TASKS:
        raise InputError(
            f"--microbatches {count}: {tasks_needed:,} tasks to simulate, more than the supported "
            f"{MAX_TASKS:,}; simulate fewer microbatches"
        )
    stages = plan.stages
    m = len(stages)
    d = [st.d for st in stages]
    tps = [r.cost.tps for r in ev.stages]
    succ = stage_graph(instance, plan)
    if pipeline == "sequential":
        succ_run = [{i + 1} if i + 1 < m else set() for i in range(m)]
    else:
        succ_run = succ
    pred_run: list[set[int]] = [set() for _ in range(m)]
    for i in range(m):
        for j in succ_run[i]:
            pred_run[j].add(i)
    h = [r.s for r in ev.stages]  # h of secs. 2 and 8, or q of sec. 11
    y = [microbatches_held(h[i], d[i], N, schedule) for i in range(m)]
    tasks, peak = _run(
        d, tps, pred_run, succ_run, y, count, forward_fraction, gpipe=(schedule == "gpipe")
    )

    finish = [0.0] * count
    for t in tasks:
        finish[t.mb] = max(finish[t.mb], t.end)
    done_at = sorted(finish)
    makespan = done_at[-1]
    if schedule == "1f1b":
        period = _steady_period(finish, math.lcm(*d)) if count >= 8 else makespan / count
        bt = done_at[min(N, count) - 1]
    else:
        bt = makespan
        period = makespan / count
    model = batch_time(tps, d, succ, N, pipeline)
    rows = [
        {
            "stage": i,
            "d": d[i],
            "t": stages[i].t,
            "tps": tps[i],
            "y_model": y[i],
            "peak_in_flight": peak[i],
        }
        for i in range(m)
    ]
    return Simulation(
        schedule, pipeline, count, period, bt, model, max(tps), rows, tasks, in_flight=in_flight
    )


def _steady_period(finish: list[float], cycle: int) -> float:
    """Seconds per microbatch in the steady state, from each microbatch's finish time.

    Microbatches m and m + cycle (cycle = lcm of the d_i) go to the same replica of every
    stage. The window runs from the first quarter (after the fill) over whole cycles up to
    the third quarter (before the drain, which takes fewer than h_0 <= N microbatches), and
    the reading is exact when the schedule repeats every cycle from the first quarter on.
    Before, a window of sorted completion times split the bursts of replicas finishing
    together: a single stage with d = 3 read 15/16 of its TPS at 64 microbatches.

    Still a finite window: a transient longer than a quarter of the run (a stage whose TPS
    is close to the bottleneck's catching up after the fill) reads a period a little below
    max TPS, which no steady state can have; a steady state that repeats only over several
    cycles reads within its wobble / window. More microbatches shrink both.
    With fewer than a cycle in the middle half it spans the middle half as it is.
    """
    count = len(finish)
    lo, hi = count // 4, (3 * count) // 4
    if hi - lo >= cycle:
        hi = lo + (hi - lo) // cycle * cycle
    return (finish[hi] - finish[lo]) / (hi - lo)


def _run(d, tps, pred, succ, y, count, f, gpipe):
    """The event loop. Returns the tasks run and each stage's peak in-flight count.

    Each replica's order of tasks is fixed in advance (a static schedule, as in real
    pipelines): its next task is the forward of its next microbatch while it has forwards
    left and holds fewer than its budget (y_i; under ``gpipe`` all its microbatches), else
    the backward of its oldest microbatch. An idle replica waits for that task to become
    ready; it never takes another one instead. Waiting counts drive readiness: a forward
    waits for its predecessor stages' forwards, a backward for its own forward and its
    successor stages' backwards; a replica is looked at again only when one of its tasks
    ends or one of its microbatches' tasks becomes ready.
    """
    m = len(d)
    fw = [f * d[i] * tps[i] for i in range(m)]
    bw = [(1.0 - f) * d[i] * tps[i] for i in range(m)]
    has_bw = f < 1.0
    f_wait = [[len(pred[i])] * count for i in range(m)]
    b_wait = [[len(succ[i]) + 1] * count for i in range(m)]
    own = [
        [len(range(r, count, d[i])) for r in range(d[i])] for i in range(m)
    ]  # microbatches per replica
    # without backward tasks a microbatch is held only while its forward runs
    budget = [[own[i][r] if gpipe or not has_bw else y[i] for r in range(d[i])] for i in range(m)]
    n_f = [[0] * d[i] for i in range(m)]  # forwards started, in microbatch order
    n_b = [[0] * d[i] for i in range(m)]  # backwards started, in microbatch order
    busy = [[False] * d[i] for i in range(m)]
    peak = [0] * m
    tasks: list[Task] = []
    events: list[tuple[float, int, int, int, str, int]] = []
    seq = 0

    def start(i: int, r: int, now: float) -> None:
        nonlocal seq
        if busy[i][r]:
            return
        nf, nb = n_f[i][r], n_b[i][r]  # idle: every task started has ended
        if nf < own[i][r] and nf - nb < budget[i][r]:
            mb = r + nf * d[i]
            if f_wait[i][mb] > 0:
                return
            kind, dur = "F", fw[i]
            n_f[i][r] = nf + 1
            peak[i] = max(peak[i], nf + 1 - nb if has_bw else 1)
        elif has_bw and nb < nf:
            mb = r + nb * d[i]
            if b_wait[i][mb] > 0:
                return
            kind, dur = "B", bw[i]
            n_b[i][r] = nb + 1
        else:
            return
        busy[i][r] = True
        heapq.heappush(events, (now + dur, seq, i, r, kind, mb))
        tasks.append(Task(i, r, kind, mb, now, now + dur))
        seq += 1

    for i in range(m):
        for r in range(d[i]):
            start(i, r, 0.0)
    finished = 0
    while events:
        now = events[0][0]
        touched: set[tuple[int, int]] = set()
        while events and events[0][0] == now:  # everything that ends at this instant
            _, _, i, r, kind, mb = heapq.heappop(events)
            busy[i][r] = False
            touched.add((i, r))
            if kind == "F":
                for j in succ[i]:
                    f_wait[j][mb] -= 1
                    if f_wait[j][mb] == 0:
                        touched.add((j, mb % d[j]))
                if not has_bw:
                    finished += 1
                else:
                    b_wait[i][mb] -= 1
            else:
                finished += 1
                for p in pred[i]:
                    b_wait[p][mb] -= 1
                    if b_wait[p][mb] == 0:
                        touched.add((p, mb % d[p]))
        for i, r in sorted(touched):
            start(i, r, now)
    if finished != m * count:
        raise InputError(
            f"the schedule deadlocks with the model's in-flight budgets y = {list(y)}: "
            f"{m * count - finished} of {m * count} microbatch-stages never finished"
        )
    return tasks, peak
