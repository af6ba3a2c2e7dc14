"""Graph pipelining solved over stage columns (the method ``columns``; ``docs/milp.md``,
"Stage columns under graph pipelining"): a pure-integer CP-SAT model that picks one
column per node, and the loop that raises the bound on a stage's TPS until the model's
optimum is below every plan it leaves out.

The model (x_c: column c is a stage; G_v: microbatches held by v's stage; L_v: the
longest latency path from v's stage, batch time only), all coefficients integers:

    cover[v]     sum_{c ∋ v} x_c = 1
    devices      sum_c t_c d_c x_c <= K
    own[v]       G_v >= sum_{c ∋ v} d_c x_c
    fit[v]       G_v <= sum_{c ∋ v} (d_c + limit_c) x_c
    next[e,u]    G_e >= G_u + sum_{c ∋ e} d_c x_c - cap (1 - sum_{c in A(e,u)} x_c)
    tps[v]       T >= sum_{c ∋ v} floor(cost_c / unit) x_c
    (batch time) L_v >= sum_{c ∋ v} floor(d_c cost_c / unit) x_c, the same ``next`` rows
                 on L with the latencies, Lmax >= L_v; minimize (N - 1) T + Lmax

where A(e, u) are the columns holding e, not u, with an edge into u (e's stage is a
predecessor of u's). The plan's stage graph is then acyclic (around a cycle G would
grow), and every G_v is at least the h of v's stage (by induction from the last
stages), so memory fits at y = ceil(h / d); a plan's own values satisfy every row.
With ``path_rows`` the model also gets :func:`_path_rows` (valid rows without big-M).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

from piper_ilp.bitmask import mask_bits
from piper_ilp.errors import InputError, InternalError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.milp.closed_sets import closed_sets
from piper_ilp.milp.graph_chain import DEFAULT_MAX_LABELS, chain_search
from piper_ilp.milp.graph_columns import Column, ColumnCatalog
from piper_ilp.milp.graph_orbits import Orbits
from piper_ilp.milp.path_arcs import TimeUp
from piper_ilp.milp.path_rule import GpipeRule, PiperRule
from piper_ilp.milp.path_search import lower_bound
from piper_ilp.milp.path_solve import finish_solution
from piper_ilp.mode import Mode
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status

__all__ = ["solve_columns", "columns_refusal", "DEFAULT_MAX_STAGES", "PROOF_RTOL"]

#: Above this many candidate stages (differences of successor-closed sets) the method
#: is refused.
DEFAULT_MAX_STAGES = 60_000

#: An optimum is proven when (value - bound) <= PROOF_RTOL * value (contract sec. 7).
PROOF_RTOL = 1e-6

#: The time unit is this fraction of a lower bound on the objective, divided by the
#: number of rounded terms a value sums (so the rounding costs at most this much).
UNIT_RTOL = 1e-8

#: Where the stages pass ``max_stages`` and the chain search is on, the catalog walks the
#: sets up to interchangeable chains (:class:`~piper_ilp.milp.graph_orbits.Orbits`), with
#: at most this many stages from the canonical sets (mmt4: 723,670 stages in all, 103,015
#: from its 334 canonical sets).
DEFAULT_MAX_ORBIT_STAGES = 240_000

#: The sequential start (:meth:`_Run.from_sequential`) runs the path formulation only up to
#: this many successor-closed sets: on towers 4x4 (627 sets, about 100,000 stage pairs) it
#: took 95 % of 50 CPU s, on mmt2 (200 sets) a few seconds.
SEQUENTIAL_START_MAX_SETS = 300

#: Each round that proves nothing below its bound raises the bound by this factor.
GROWTH = 1.03


def columns_refusal(mode: Mode, restrictions: Restrictions = Restrictions()) -> str | None:
    """Why the column method does not solve ``mode`` under ``restrictions`` (None when it
    does): graph pipelining, either objective, every schedule, Piper's in-flight rule,
    no ``uniform``.

    Examples
    --------
    >>> columns_refusal(Mode("graph", "batch-time")) is None
    True
    >>> columns_refusal(Mode())
    'the column method solves graph pipelining only, not sequential/throughput/1f1b'
    """
    if mode.pipeline != "graph":
        return f"the column method solves graph pipelining only, not {mode.label}"
    if mode.in_flight != "piper":
        return f"the column method does not solve the in-flight rule of {mode.label}"
    if restrictions.uniform:
        return "the column method does not solve uniform degrees (--uniform)"
    return None


def solve_columns(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    method: str = "columns",
    mode: Mode = Mode("graph"),
    time_limit: float | None = None,
    threads: int = 1,
    max_stages: int = DEFAULT_MAX_STAGES,
    progress: bool = False,
    path_rows: bool = False,
    chain: bool = True,
    max_labels: int = DEFAULT_MAX_LABELS,
    orbits: bool | None = None,
    max_orbit_stages: int = DEFAULT_MAX_ORBIT_STAGES,
) -> Solution:
    """Solve a graph-pipelining mode exactly over stage columns.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
    method : str
        The name the solution carries.
    mode : Mode
        Graph pipelining (:func:`columns_refusal`).
    time_limit : float, optional
        CPU seconds of this process (``time.process_time``, every thread's) for the
        whole call: the sequential start, the columns, the chain searches and CP-SAT
        (stopped by :func:`_cpu_watch`); stopped early, the answer is feasible or
        unknown, never optimal, and its message says where it stopped.
    threads : int
        CP-SAT's workers.
    max_stages : int
        Refuse graphs with more candidate stages.
    progress : bool
        One line per round on stderr.
    path_rows : bool
        Add the path rows (valid inequalities on the memory along the node graph's
        paths, see :func:`_path_rows`); the answer is the same either way.
    chain : bool
        Answer each round by the chain search first
        (:func:`~piper_ilp.milp.graph_chain.chain_search`, exact, no solver), CP-SAT only
        where it gives up; False: CP-SAT alone. The answer is the same either way.
    max_labels : int
        The chain search gives up above this many labels (then CP-SAT answers that
        round and the later ones; with ``orbits``, the search stops and says so).
    orbits : bool, optional
        Walk the successor-closed sets up to interchangeable chains
        (:class:`~piper_ilp.milp.graph_orbits.Orbits`; the chain search only, no CP-SAT
        fallback). None: where the candidate stages pass ``max_stages`` and ``chain``.
    max_orbit_stages : int
        Refuse graphs with more stages from the canonical sets than this, when walking
        them up to symmetry.

    Returns
    -------
    Solution
        ``info["formulation"]`` = "columns", ``info["rounds"]`` one entry per model solved.

    Raises
    ------
    InputError
        A mode or restriction it does not solve.
    SizeLimitError
        More candidate stages than ``max_stages``.
    """
    from piper_ilp.errors import SizeLimitError

    start, wall = time.process_time(), time.perf_counter()
    refused = columns_refusal(mode, restrictions)
    if refused is not None:
        raise InputError(refused)
    inst = restrictions.apply(instance)
    degrees = restrictions.d_values(instance)
    rule = GpipeRule(inst.N) if mode.schedule == "gpipe" else PiperRule()
    info: dict = {"formulation": "columns", "mode": mode.label, "threads": threads}
    info["time_limit"] = time_limit
    missing = [n.id for n in inst.nodes if not n.options]
    if missing:
        msg = f"infeasible before solving: node {missing[0]} has no option left"
        return finish_solution(
            instance,
            restrictions,
            Solution(method, Status.INFEASIBLE, message=msg, info=info, mode=mode),
            start,
            wall,
        )
    sets = closed_sets(inst, 1 << 62)
    info["sets"] = len(sets)
    deadline = None if time_limit is None else start + time_limit
    if orbits and not chain:
        raise InputError(
            "the column method walks the sets up to symmetry only with the chain search"
        )
    try:
        catalog = _catalog(
            inst, sets, degrees, rule, max_stages, max_orbit_stages, orbits, chain, deadline
        )
    except TimeUp:
        msg = "stopped at the time limit listing the candidate stages"
        sol = Solution(method, Status.UNKNOWN, message=msg, info=info, mode=mode)
        return finish_solution(instance, restrictions, sol, start, wall)
    info["stages"] = len(catalog.masks)
    if catalog.orbits is not None:
        info["orbit_sets"] = len(catalog.walk)
    limit = max_stages if catalog.orbits is None else max_orbit_stages
    if len(catalog.masks) > limit:
        what = "" if catalog.orbits is None else " from the sets up to interchangeable chains"
        raise SizeLimitError(
            f"{instance.source}: more than {limit:,} candidate stages{what}, above the "
            "column method's limit"
        )
    run = _Run(instance, inst, catalog, mode, threads, info, progress, restrictions)
    run.path_rows = path_rows
    run.chain = chain
    run.max_labels = max_labels
    sol = run.solve(lower_bound(inst, degrees), deadline)
    sol.method = method
    return finish_solution(instance, restrictions, sol, start, wall)


def _catalog(inst, sets, degrees, rule, max_stages, max_orbit_stages, orbits, chain, deadline):
    """The catalog of :func:`solve_columns`: every stage, or (``orbits``; None: where the
    stages pass ``max_stages``, the chain search is on and some chains are
    interchangeable) the stages from the sets up to interchangeable chains.

    Raises
    ------
    TimeUp
        Past ``deadline`` while listing the stages.
    """
    group = Orbits(inst) if orbits is not False and chain else None
    if group is not None and group.trivial:
        group = None
    if orbits is None or group is None:
        catalog = ColumnCatalog(inst, sets, degrees, rule, most=max_stages, deadline=deadline)
        if group is None or len(catalog.masks) <= max_stages:
            return catalog
    return ColumnCatalog(
        inst, sets, degrees, rule, most=max_orbit_stages, deadline=deadline, orbits=group
    )


class _Run:
    """The rounds of one solve: columns under a bound U, the model, its answer."""

    def __init__(self, instance, inst, catalog, mode, threads, info, progress, restrictions):
        self.instance = instance
        self.restrictions = restrictions
        self.inst = inst
        self.catalog = catalog
        self.mode = mode
        self.threads = threads
        self.info = info
        self.progress = progress
        self.batch = mode.objective == "batch-time"
        self.best: tuple[float, Plan] | None = None
        self.path_rows = False
        self.chain = True
        self.max_labels = DEFAULT_MAX_LABELS
        self.halt: str | None = None  # why the search stopped, when not the time limit
        info["rounds"] = []

    def floor_of(self, bound: float) -> float:
        """Every plan left out under ``bound`` (a stage of TPS > bound) has a value above
        this: its TPS, or N times it for the batch time ((N - 1) TPS + its latency)."""
        return bound * self.inst.N if self.batch else bound

    def solve(self, low: float, deadline: float | None) -> Solution:
        self.deadline = deadline
        # every plan's max TPS is >= this: the work bound (sum t d <= K holds under graph
        # pipelining too) and each node's least share of a stage's TPS
        self.proven = low
        got = self.from_sequential() or self.first_plan(low)
        if isinstance(got, Solution):
            return got
        cols, lows, hi, U = got
        edges = lows + [U]
        # invariant: every plan's max TPS is >= max(self.proven, lows[lo + 1]); a plan
        # whose max TPS is below edges[mid + 1] uses only columns with low <= lows[mid],
        # and its other stages need at least their work over edges[mid + 1] devices
        lo = -1
        while lo + 2 < hi and lows[lo + 2] <= self.proven:
            lo += 1
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            sub = [c for c in cols if c.low <= lows[mid] and c.usable(edges[mid + 1], self.inst.K)]
            ans = self.ask(sub, lows[mid], "feasible")
            if ans is None:
                proven = self.floor_of(max(self.proven, lows[lo + 1]))
                return self.stopped(proven, "stopped at the time limit")
            if ans.plan is None:
                lo = mid
            else:
                hi = min(hi, lows.index(max(c.low for c in ans.columns)))
        self.proven = max(self.proven, edges[hi])
        if self.batch:
            return self.batch_time()
        return self.conclude(self.proven)

    def from_sequential(self):
        """A start from above: the path formulation's sequential plan (same schedule,
        throughput) is a valid plan under graph pipelining (h <= s: no more memory); its
        max TPS V bounds the search, with the sentinel index len(lows) meaning "a plan
        whose max TPS is <= V exists". None where the path formulation does not apply or
        finds nothing (then the bound grows from below), and with the chain search, whose
        rounds from below cost less than the start (mmt2 throughput: 9.3 CPU s without
        it, 29.4 with it, 2026-11-28)."""
        from piper_ilp.errors import SizeLimitError
        from piper_ilp.milp.path_solve import path_refusal, solve_path

        seq = Mode("sequential", "throughput", self.mode.schedule)
        if self.chain or path_refusal(seq, self.restrictions) is not None:
            return None
        if self.info["sets"] > SEQUENTIAL_START_MAX_SETS:
            return None
        left = None if self.deadline is None else (self.deadline - time.process_time()) / 4
        try:
            sol = solve_path(self.instance, self.restrictions, mode=seq, time_limit=left)
        except SizeLimitError:
            return None  # above its size limit
        if sol.plan is None:
            return None
        ev = evaluate(self.instance, sol.plan, Mode("graph", "throughput", self.mode.schedule))
        if not ev.valid or ev.value <= 0:
            return None
        self.offer(sol.plan)
        self.info["start"] = f"the path formulation's sequential plan, max TPS {ev.value!r}"
        try:
            cols, _ = self.catalog.columns(ev.value, self.deadline)
        except TimeUp:
            return self.stopped(
                self.floor_of(self.proven), "stopped at the time limit building columns"
            )
        lows = sorted({c.low for c in cols})
        return cols, lows, len(lows), ev.value

    def first_plan(self, low: float):
        """Raise the bound U from ``low`` until the columns under it hold a plan: the
        columns, their sorted distinct lows and the index of the plan's largest (or a
        Solution: infeasible, or stopped).

        A round without a plan proves every plan's max TPS above its bound, whatever the
        bound (the columns under it dominate every stage such a plan could use), so the
        steps grow: the k-th raise is by GROWTH ** 2 ** k (3 %, 6 %, 13 %, ..., a factor of
        1e16 by the 11th), and a plan found above the optimum is brought down by the
        bisection that follows. An instance with no plan thus ends in a few rounds, at
        the first bound under which every column is in."""
        bound = low
        growth = GROWTH
        while True:
            if not math.isfinite(bound):
                raise InternalError("columns: every column is in, yet the catalog says not")
            try:
                cols, complete = self.catalog.columns(bound, self.deadline)
            except TimeUp:
                return self.stopped(
                    self.floor_of(self.proven), "stopped at the time limit building columns"
                )
            ans = self.ask(cols, bound, "feasible", complete)
            if ans is None:
                return self.stopped(self.floor_of(self.proven), "stopped at the time limit")
            if ans.plan is not None:
                lows = sorted({c.low for c in cols})
                return cols, lows, lows.index(max(c.low for c in ans.columns)), bound
            if complete:
                return self.answer(Status.INFEASIBLE, "no plan (every stage's column in)")
            self.proven = max(self.proven, bound)
            bound = bound * growth if bound > 0 else self.catalog.positive_floor()
            growth *= growth

    def ask(self, cols, threshold, objective, complete=False):
        """One model; None when it stopped without an answer (the time limit)."""
        if self.deadline is not None and time.process_time() >= self.deadline:
            return None
        ans = self.by_chain(cols, objective) if self.chain else None
        if ans is None:
            ans = _Model(self, cols).solve(self.deadline, objective)
        rec = {"threshold": threshold, "objective": objective, "columns": len(cols)}
        rec.update(complete=complete, **ans.record)
        self.info["rounds"].append(rec)
        if self.progress:
            _line(rec)
        if ans.plan is not None:
            self.offer(ans.plan)
        return ans if ans.proved or ans.plan is not None else None

    def by_chain(self, cols, objective) -> _Answer | None:
        """The round answered by :func:`~piper_ilp.milp.graph_chain.chain_search` (exact,
        no solver); None when it gives up (too many labels: CP-SAT answers this round and
        the later ones), an answer that proves nothing when the time is up."""
        t0 = time.process_time()
        unit, tu = 1.0, None
        if objective == "latency":
            unit, tu = _latency_units(cols, len(self.catalog.ids))
        try:
            got = chain_search(self.catalog, cols, self.inst.K, tu, self.deadline, self.max_labels)
        except TimeUp:
            return _Answer(None, 0.0, False, {"status": "chain: time limit", "cpu": 0.0})
        if got is None and self.catalog.orbits is not None:
            # CP-SAT's model needs every stage, and this catalog has them up to symmetry
            self.halt = f"stopped: the chain search passed {self.max_labels:,} labels"
            return _Answer(None, 0.0, False, {"status": "chain: too many labels", "cpu": 0.0})
        if got is None:
            self.chain = False  # it would give up on the later rounds too: CP-SAT from now
            return None
        record = {"status": "chain", "cpu": time.process_time() - t0, "labels": got.labels}
        if got.columns is None:
            record["status"] = "chain: INFEASIBLE"
            return _Answer(None, math.inf, True, record)
        plan = _Model(self, cols).plan_of(got.columns)
        lower = got.latency * unit
        record["status"] = "chain: OPTIMAL" if objective == "latency" else "chain: FEASIBLE"
        if objective == "latency":
            record["latency"] = record["lower"] = lower
        return _Answer(plan, lower, True, record, got.columns)

    def batch_time(self) -> Solution:
        """The batch time (N - 1) max TPS + the longest latency path, over ranges of the
        bottleneck. With lows the sorted distinct column lows under a bound U, the plans
        whose max TPS is in [lows[a], lows[b + 1]) use only columns with low <= lows[b]
        and are worth at least (N - 1) lows[a] + the least longest path over those
        columns; a plan with max TPS >= U is worth at least N U. The throughput proof
        gives every plan's max TPS >= ``self.proven``."""
        N, K = self.inst.N, self.inst.K
        tstar = self.proven
        top = self.best[0] / N  # a plan whose max TPS exceeds this is worse than the best
        try:
            cols, complete = self.catalog.columns(top * (1 + 1e-9), self.deadline)
        except TimeUp:
            return self.stopped(tstar * N, "stopped at the time limit building columns")
        U = top * (1 + 1e-9)
        lows = sorted({c.low for c in cols})
        a0 = max([k for k, x in enumerate(lows) if x <= tstar] or [0])
        edges = lows + [U]
        cache: dict[int, float] = {}

        def latency(b: int) -> float | None:
            if b not in cache:
                sub = [c for c in cols if c.low <= lows[b] and c.usable(edges[b + 1], K)]
                ans = self.ask(sub, lows[b], "latency")
                if ans is None or not ans.proved:
                    return None
                cache[b] = ans.lower if ans.plan is not None else math.inf
            return cache[b]

        ranges = [(a0, len(lows) - 1)]
        floor = N * U if not complete else math.inf
        proven = floor
        while ranges:
            value = self.best[0]
            need = value * (1 - PROOF_RTOL)
            a, b = ranges.pop()
            if (N - 1) * lows[a] >= need:
                proven = min(proven, (N - 1) * lows[a])
                continue
            lat = latency(b)
            if lat is None:
                return self.stopped(
                    min([proven] + [(N - 1) * lows[r[0]] for r in ranges] + [(N - 1) * lows[a]]),
                    "stopped at the time limit",
                )
            lb = (N - 1) * lows[a] + lat
            if lb >= self.best[0] * (1 - PROOF_RTOL) or a == b:
                proven = min(proven, lb)
                continue
            mid = (a + b) // 2
            ranges.append((mid + 1, b))
            ranges.append((a, mid))
        return self.conclude(proven)

    def conclude(self, proven: float) -> Solution:
        """Optimal when the best plan's value is within PROOF_RTOL of ``proven`` (a value
        every plan reaches), else feasible with that bound."""
        value = self.best[0]
        if value - proven <= PROOF_RTOL * value:
            return self.answer(Status.OPTIMAL, "optimal", proven)
        return self.answer(Status.FEASIBLE, "not proven within the tolerance", proven)

    def offer(self, plan: Plan) -> None:
        ev = evaluate(self.instance, plan, self.mode)
        if not ev.valid or ev.devices > self.instance.K:
            why = ev.violations[0] if ev.violations else "too many devices"
            raise InternalError(f"columns: the model's plan is not valid: {why}")
        if self.best is None or ev.value < self.best[0]:
            self.best = (ev.value, plan)

    def stopped(self, proven: float, message: str) -> Solution:
        """Feasible (with ``proven``, a bound on the mode's value) or unknown; callers in
        the throughput search pass ``floor_of`` their TPS bound (under the batch time a
        TPS bound is no bound on the value's scale: mmt2 stopped with 0.0248 s on a plan
        of 60.46 s, valid but N times too weak)."""
        status = Status.FEASIBLE if self.best is not None else Status.UNKNOWN
        return self.answer(status, self.halt or message, proven if proven > 0 else None)

    def answer(self, status: Status, message: str, bound: float | None = None) -> Solution:
        plan = value = None
        if self.best is not None:
            value, plan = self.best
            if bound is not None:
                bound = min(bound, value)
        return Solution(
            "columns",
            status,
            plan=plan,
            objective=value,
            bound=bound if plan is not None else None,
            message=message,
            info=self.info,
            mode=self.mode,
        )


class _Answer:
    def __init__(self, plan, lower, proved, record, columns=()):
        self.plan = plan
        self.columns = columns
        self.lower = lower
        self.proved = proved
        self.record = record


class _Model:
    """One CP-SAT model over a list of columns (see the module's docstring)."""

    def __init__(self, run: _Run, cols: list[Column]):
        self.run = run
        self.cols = cols
        self.n = len(run.catalog.ids)

    def solve(self, deadline: float | None, objective: str) -> _Answer:
        """CP-SAT on the model, stopped when this process's CPU time passes ``deadline``
        (:func:`_cpu_watch`)."""
        from ortools.sat.python import cp_model

        run, cols, n = self.run, self.cols, self.n
        inst = run.inst
        t0 = time.process_time()
        if not cols:
            return _Answer(None, math.inf, True, {"status": "no columns", "cpu": 0.0})
        if objective not in ("feasible", "latency"):
            raise ValueError(f"objective must be feasible or latency, got {objective!r}")
        m = cp_model.CpModel()
        x = [m.NewBoolVar(f"x{k}") for k in range(len(cols))]
        holding = [[] for _ in range(n)]
        for k, c in enumerate(cols):
            mask = c.mask
            for v in range(n):
                if mask >> v & 1:
                    holding[v].append(k)
        for v in range(n):
            if not holding[v]:
                return _Answer(None, math.inf, True, {"status": "a node has no column", "cpu": 0.0})
            m.AddExactlyOne(x[k] for k in holding[v])
        devices = sum(c.devices * x[k] for k, c in enumerate(cols))
        m.Add(devices <= inst.K)
        cap = run.catalog.cap
        G = [m.NewIntVar(1, cap, f"G{v}") for v in range(n)]
        for v in range(n):
            m.Add(G[v] >= sum(cols[k].d * x[k] for k in holding[v]))
            m.Add(G[v] <= sum((cols[k].d + cols[k].limit) * x[k] for k in holding[v]))
        pairs: dict[tuple[int, int], list[int]] = {}
        for k, c in enumerate(cols):
            heads = mask_bits(c.heads)
            for e in self.run.catalog.keys(c.mask):
                for u in heads:
                    pairs.setdefault((e, u), []).append(k)
        for (e, u), ks in pairs.items():
            own = sum(cols[k].d * x[k] for k in holding[e])
            m.Add(G[e] - G[u] - own - cap * sum(x[k] for k in ks) >= -cap)
        paths = run.catalog.paths() if run.path_rows else []
        for path in paths:
            _path_rows(m, x, cols, holding, path)
        unit = 1.0
        if objective == "latency":
            unit, tu = _latency_units(cols, n)
            lcap = sum(max(tu[k] for k in holding[v]) for v in range(n))
            L = [m.NewIntVar(0, lcap, f"L{v}") for v in range(n)]
            lmax = m.NewIntVar(0, lcap, "Lmax")
            for v in range(n):
                m.Add(L[v] >= sum(tu[k] * x[k] for k in holding[v]))
                m.Add(lmax >= L[v])
            for (e, u), ks in pairs.items():
                own = sum(tu[k] * x[k] for k in holding[e])
                m.Add(L[e] - L[u] - own - lcap * sum(x[k] for k in ks) >= -lcap)
            for path in paths:
                m.Add(lmax >= sum(tu[k] * x[k] for k in _entries(cols, holding, path, 0)))
            m.Minimize(lmax)
        else:
            m.Minimize(devices)
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.num_workers = max(1, self.run.threads)
        p.cp_model_use_sat_presolve = False
        if objective == "feasible":
            p.stop_after_first_solution = True
        with _cpu_watch(solver, deadline):
            status = solver.Solve(m)
        record = {
            "status": solver.StatusName(status),
            "cpu": time.process_time() - t0,
            "pairs": len(pairs),
        }
        if status == cp_model.INFEASIBLE:
            return _Answer(None, math.inf, True, record)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return _Answer(None, 0.0, False, record)
        chosen = [cols[k] for k in range(len(cols)) if solver.Value(x[k])]
        plan = self.plan_of(chosen)
        lower = 0.0
        if objective == "latency":
            lower = solver.BestObjectiveBound() * unit
            record["latency"] = solver.ObjectiveValue() * unit
            record["lower"] = lower
        return _Answer(plan, lower, status == cp_model.OPTIMAL, record, chosen)

    def plan_of(self, chosen: list[Column]) -> Plan:
        """The chosen columns as a plan: stages in a topological order of the stage graph
        (the model makes it acyclic), each with its column's options."""
        order: list[Column] = []
        left = list(chosen)
        while left:
            # the stages no other stage left has an edge into
            ready = [c for c in left if not (c.mask & _later_heads(c, left))]
            if not ready:
                raise InternalError("columns: the chosen stages form a cycle")
            order.extend(ready)
            left = [c for c in left if c not in ready]
        inst = self.run.inst
        stages = [Stage(c.nodes, c.d, c.t, c.option_ids(inst)) for c in order]
        return Plan(tuple(stages))


@contextlib.contextmanager
def _cpu_watch(solver, deadline: float | None, every: float = 0.05):
    """Stop ``solver`` (a CP-SAT ``CpSolver``) once ``time.process_time()`` (this
    process's CPU seconds, every thread's) passes ``deadline``: the one clock of the
    method's time limit. CP-SAT's own limit is wall time, which under load runs ahead of
    the CPU time (mmt2: a round stopped at 32 CPU s, the solve at 59 of its 150), so
    none is set; a watching thread polls every ``every`` s and calls ``StopSearch``.
    CP-SAT then ends UNKNOWN or FEASIBLE, never with a proof it did not reach."""
    if deadline is None:
        yield
        return
    done = threading.Event()

    def watch():
        # past the deadline, StopSearch at every poll until the solve returns: a stop that
        # comes before Solve has made its search is lost (OR-Tools 9.15), and CP-SAT has no
        # limit of its own here; calling it again is harmless
        while not done.wait(every):
            if time.process_time() >= deadline:
                solver.StopSearch()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _latency_units(cols: list[Column], n: int) -> tuple[float, list[int]]:
    """The time unit of the latency models and each column's latency d low in it, rounded
    down (a lower bound): fine enough for the least latency (UNIT_RTOL of it over the n
    terms a path sums), coarse enough that sums stay in int64."""
    tu_raw = [c.d * c.low for c in cols]
    positive = [x_ for x_ in tu_raw if x_ > 0]
    unit = max(min(positive) * UNIT_RTOL / n, max(positive) / 1e15) if positive else 1.0
    return unit, [math.floor(x_ / unit) for x_ in tu_raw]


def _entries(cols, holding, path, i) -> list[int]:
    """The columns that hold ``path[i]`` and not the node before it on the path."""
    if i == 0:
        return list(holding[path[0]])
    prev = 1 << path[i - 1]
    return [k for k in holding[path[i]] if not cols[k].mask & prev]


def _path_rows(m, x, cols, holding, path) -> None:
    r"""The path rows of one path p_0 -> ... -> p_k of the node graph: for every i < k,

        sum_{j > i} sum_{c ∋ p_j, c ∌ p_(j-1)} d_c x_c  <=  sum_{c ∋ p_i} limit_c x_c

    (the d of the stages the path enters after p_i sum to at most the limit of p_i's
    column). No big-M: the relaxation sees memory along every path.

    Why every plan satisfies them: a stage is convex (I \ J of successor-closed sets:
    p_a, p_b in S and a < j < b put p_j in I, and p_j in J would put p_b in J), so the
    path meets each stage in one run p_a..p_b and the left side counts each stage
    after the run of p_i's stage S_0 once, at its first node (the inner sum picks the
    chosen column only where the path enters it; columns that hold p_(j-1) too are
    the same stage). Those stages S_1, S_2, ... in path order form a path of the stage
    graph (the edge p_b -> p_(b+1) joins consecutive runs), so h_(S_1) >= d_(S_1) +
    h_(S_2) >= ... >= the left side, and h_(S_1) <= limit of S_0's column (S_1 is a
    successor of S_0; a column's limit bounds its successors' h). Rows for any subset
    of paths are valid: :meth:`ColumnCatalog.paths` lists up to 256."""
    entered = [_entries(cols, holding, path, i) for i in range(len(path))]
    behind = []
    for i in range(len(path) - 1, 0, -1):
        behind.extend(entered[i])
        m.Add(
            sum(cols[k].d * x[k] for k in behind)
            <= sum(cols[k].limit * x[k] for k in holding[path[i - 1]])
        )


def _later_heads(c: Column, left: list[Column]) -> int:
    """The nodes that the other stages in ``left`` have edges into."""
    out = 0
    for o in left:
        if o is not c:
            out |= o.heads
    return out


def _line(rec: dict) -> None:
    import sys

    print(
        f"columns: T {rec['threshold']:.9g}  {rec['objective']}  columns {rec['columns']}  "
        f"{rec['status']}  lower {rec.get('lower', float('nan')):.9g}  "
        f"{rec.get('cpu', 0.0):.1f} CPU s",
        file=sys.stderr,
        flush=True,
    )
