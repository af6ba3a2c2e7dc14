"""The formulation: one backend-neutral MILP of the Piper problem, built once per instance
(:func:`index_sets`, then :func:`formulate`, whose docstring lists the variables and rows) and
compiled by each backend (:mod:`piper_ilp.milp.scaled`). ``docs/milp.md`` gives the model in
full, with the proofs of exactness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx

from piper_ilp.cost import cut_edge_bytes, resync_bytes, stage_tps
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.milp.symmetry import Symmetry, canonical_plan, find_symmetry
from piper_ilp.mode import DEFAULT_MODE, Mode
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions

__all__ = [
    "Var",
    "Row",
    "LinearModel",
    "Formulation",
    "IndexSets",
    "index_sets",
    "formulate",
    "build_model",
    "model_size",
    "size_of_sets",
]

#: Memory rows are kept whenever the slot's worst memory exceeds this fraction of M (not
#: only 1: the rows near the boundary matter when a backend restricts memory to M(1 - e)).
MEMORY_ROW_THRESHOLD = 1.0 - 1e-6


@dataclass
class Var:
    """A model variable.

    Attributes
    ----------
    name : str
        As in the formulation (``u[0,1,2]``).
    lb, ub : float
        Its bounds.
    kind : str
        ``"binary"``, ``"integer"`` or ``"continuous"`` (seconds).
    """

    name: str
    lb: float
    ub: float
    kind: str


@dataclass
class Row:
    """A linear row ``sum coef * var  (sense)  rhs``.

    Attributes
    ----------
    name : str
        As in the formulation (``tps[0,1,2]``).
    terms : list of (int, float)
        (variable index, coefficient), no zero coefficient.
    sense : str
        ``"<="``, ``">="`` or ``"=="``.
    rhs : float
    kind : str
        How a backend scales it: ``"exact"`` (integer data), ``"time"`` (seconds: a >=
        row whose continuous variables are in seconds) or ``"memory"`` (a <= row of
        binaries, coefficients (k a + b) / M, right-hand side 1).
    enforce : int or None
        The index of a binary variable: the row must hold only when that variable is 1
        (an indicator).
    """

    name: str
    terms: list[tuple[int, float]]
    sense: str
    rhs: float
    kind: str = "exact"
    enforce: int | None = None


@dataclass
class LinearModel:
    """Variables, rows, the objective (a variable to minimize) and facts for the backends.

    Attributes
    ----------
    vars : list of Var
        A variable's index in this list is its index everywhere (rows, values, hints).
    rows : list of Row
    groups : list of list of int
        Sets of binaries of which at most one is 1 (used for big-M bounds).
    objective : int
        The index of the variable to minimize (-1 until set).
    trivially_infeasible : str or None
        Set when a row without terms cannot hold (its name and what it reads).

    Examples
    --------
    >>> m = LinearModel()
    >>> x = m.var("x", 0, 1, "binary")
    >>> m.row("zero", [(x, 0.0)], ">=", 1)
    >>> m.rows, m.trivially_infeasible
    ([], 'row zero reads 0 >= 1')
    """

    vars: list[Var] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    objective: int = -1
    trivially_infeasible: str | None = None

    def var(self, name: str, lb: float, ub: float, kind: str) -> int:
        """Add a variable (the fields of :class:`Var`).

        Returns
        -------
        int
            Its index.
        """
        self.vars.append(Var(name, lb, ub, kind))
        return len(self.vars) - 1

    def row(self, name, terms, sense, rhs, kind="exact", enforce=None) -> None:
        """Add a row (the fields of :class:`Row`), its zero terms dropped.

        A row left without terms is not added: when it cannot hold (and has no
        ``enforce``), :attr:`trivially_infeasible` says so.
        """
        terms = [(j, c) for j, c in terms if c != 0]
        if not terms:
            ok = (0 <= rhs) if sense == "<=" else (0 >= rhs) if sense == ">=" else (rhs == 0)
            if not ok and enforce is None:
                self.trivially_infeasible = f"row {name} reads 0 {sense} {rhs}"
            return
        self.rows.append(Row(name, terms, sense, rhs, kind, enforce))


def _fmt_id(v: int) -> str:
    return str(v) if v >= 0 else f"m{-v}"


@dataclass
class IndexSets:
    """The index sets and the facts derived from the data (shared by the builder and the
    size count), made by :func:`index_sets`.

    Attributes
    ----------
    inst : Instance
        The instance after the restrictions (:meth:`piper_ilp.solution.Restrictions.apply`).
    V : list of int
        Node ids.
    S : int
        Slots (the most stages a plan can have).
    configs : list of (int, int)
        The configurations (t, d): d among the allowed divisors of N, t * d <= K.
    d_of_t : dict of int to list of int
        The d of each t that has a configuration.
    opts : dict of (int, int) to tuple of Option
        (v, t) -> the node's options under t, for every t with a configuration.
    Y : list of int
        Per slot, the most microbatches in flight it can hold (:func:`in_flight_cap`).
    edges : list of (int, int, float)
        (src, dst, c) for every edge.
    order_edges : list of (int, int)
        The edges of the transitive reduction (the order rows), in node order.
    t_bound, t_low : float
        Seconds: at least every stage's TPS / at most every plan's TPS.
    mode : Mode
    obj_bound, obj_low : float
        The same bounds for the mode's objective (TPS or batch time).
    tau_bound : float
        At least every path's sum of d_i TPS_i.
    uniform : bool
        Every used slot takes one configuration (rows uniform_one, uniform).
    sym : Symmetry or None
        Graph pipelining with the symmetry rows: the interchangeable chains and the rank
        of the nodes (:func:`~piper_ilp.milp.symmetry.find_symmetry`); else None.
    """

    inst: Instance
    V: list[int]
    S: int
    configs: list[tuple[int, int]]
    d_of_t: dict[int, list[int]]
    opts: dict[tuple[int, int], tuple]  # (v, t) -> options, only t with a config
    Y: list[int]
    edges: list[tuple[int, int, float]]
    order_edges: list[tuple[int, int]]
    t_bound: float
    t_low: float
    mode: Mode = DEFAULT_MODE
    obj_bound: float = math.inf
    obj_low: float = 0.0
    tau_bound: float = math.inf
    uniform: bool = False  # every used slot takes one configuration (rows uniform_one, uniform)
    sym: Symmetry | None = None  # graph pipelining: the symmetry rows' classes and rank

    @property
    def gpipe(self) -> bool:
        """y_i = N / d_i, fixed by the slot's configuration (memory rows per
        configuration; no g variables unless sec. 11's rule needs them for q)."""
        return self.mode.schedule == "gpipe"

    @property
    def schedule_rule(self) -> bool:
        """Sec. 11's in-flight rule: q variables instead of s / h."""
        return self.mode.in_flight == "schedule"

    @property
    def has_g(self) -> bool:
        """Whether the model has the unary y variables g."""
        return not self.gpipe or self.schedule_rule

    @property
    def graph(self) -> bool:
        """Graph pipelining (sec. 8)."""
        return self.mode.graph

    @property
    def batch(self) -> bool:
        """The batch-time objective (sec. 9)."""
        return self.mode.batch_time

    @property
    def n(self) -> int:
        """The number of nodes."""
        return len(self.V)

    @property
    def max_d(self) -> int:
        """The largest d of a configuration (1 without any)."""
        return max((d for _, d in self.configs), default=1)


def index_sets(
    instance: Instance,
    restrictions: Restrictions,
    mode: Mode = DEFAULT_MODE,
    t_floor: float = 0.0,
    symmetry: bool = False,
) -> IndexSets:
    """The index sets of the model for ``instance`` under ``restrictions`` and ``mode``.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        Applied first: excluded options, max_t, max_d, fixed degrees, uniform.
    mode : Mode
    t_floor : float
        A proven lower bound on every plan's largest stage TPS (seconds), e.g. the bound
        of the throughput objective's own solve (:func:`~piper_ilp.milp.solve.solve_milp`
        under the batch time); ``t_low`` is at least it. 0: none.
    symmetry : bool
        Under graph pipelining, add the symmetry rows (``docs/milp.md``, "Symmetry
        rows"); ignored sequentially.

    Returns
    -------
    IndexSets
        ``t_bound`` / ``t_low`` bound every plan's TPS; ``obj_bound`` / ``obj_low`` the
        mode's objective (the TPS, or the batch time of sec. 9); ``tau_bound`` every
        path's sum of d_i TPS_i. A bound beyond floats is inf (upper) or falls back to a
        smaller valid one (lower), so that every backend answers out-of-range rather
        than overflow.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> from piper_ilp.solution import Restrictions
    >>> node = (0, {"1": [option_dict("v", p=1.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=4, M=10, N=4, B=1))
    >>> st = index_sets(inst, Restrictions())
    >>> st.S, st.configs, st.Y
    (1, [(1, 1), (1, 2), (1, 4)], [4])
    """
    inst = restrictions.apply(instance)
    K, N, B = inst.K, inst.N, inst.B
    V = inst.node_ids
    D = restrictions.d_values(inst)
    configs = [(t, d) for t in inst.t_values for d in D if t * d <= K]
    d_of_t: dict[int, list[int]] = {}
    for t, d in configs:
        d_of_t.setdefault(t, []).append(d)
    opts = {(v, t): tuple(lst) for v in V for t, lst in inst.node[v].options.items() if t in d_of_t}
    cap = min(N, K)
    if mode.graph:
        # sum d <= N no longer holds, only max h <= N: a stage takes a device, so at most
        # K stages, and h_i <= sum_{j >= i} d_j <= K - i (the i slots before are used)
        S = min(len(V), K)
    else:
        S = min(len(V), K, N)
    Y = [in_flight_cap(mode, N, K, i) for i in range(S)]
    edges = [(e.src, e.dst, e.c) for e in inst.edges]
    red = nx.transitive_reduction(inst.graph)
    pos = {v: k for k, v in enumerate(V)}
    order_edges = sorted(red.edges(), key=lambda e: (pos[e[0]], pos[e[1]]))
    # An upper bound on every stage's TPS: a stage's TPS is a sum of per-node parts for
    # its d (sec. 3), each at most that node's worst part over every (t, d, option) with
    # every edge cut.
    # The same for d_i TPS_i (a stage's latency, sec. 9): a sum of per-node parts times d.
    worst_parts, worst_lat = [], []
    for v in V:
        worst = lat = 0.0
        for t, ds in d_of_t.items():
            for o in opts.get((v, t), ()):
                eb = math.fsum(
                    [cut_edge_bytes(c, o.sfw[u]) for u, c in inst.in_edges[v]]
                    + [cut_edge_bytes(c, o.sbw[x]) for x, c in inst.out_edges[v]]
                )
                for d in ds:
                    part = stage_tps(eb, resync_bytes(o.w, d, N), o.p, d, B)
                    worst = max(worst, part)
                    lat = max(lat, d * part)
        worst_parts.append(worst)
        worst_lat.append(lat)
    try:
        t_bound = math.fsum(worst_parts) * (1 + 1e-9)
        tau_bound = math.fsum(worst_lat) * (1 + 1e-9)
    except OverflowError:  # beyond floats: every backend answers out-of-range
        t_bound = tau_bound = math.inf
    # Lower bounds that every plan obeys: stage i has d_i TPS_i >= its p; sum d <= min(N, K)
    # (graph pipelining: sum d <= K only); sum t d <= K; a node's own stage has d <= the
    # largest d allowed with its t.
    work, work_t, single = [], [], 0.0
    least_p: dict[int, float] = {}
    for v in V:
        avail = [(t, o) for t in d_of_t for o in opts.get((v, t), ())]
        if not avail:
            continue
        least_p[v] = min(o.p for _, o in avail)
        work.append(least_p[v])
        work_t.append(min(t * o.p for t, o in avail))
        single = max(single, min(o.p / max(d_of_t[t]) for t, o in avail))
    sum_d_cap = K if mode.graph else cap
    try:
        t_low = max(math.fsum(work) / sum_d_cap, math.fsum(work_t) / K, single) * (1 - 1e-9)
    except OverflowError:
        t_low = single * (1 - 1e-9)
    t_low = max(t_low, t_floor)
    if not mode.batch_time:
        obj_bound, obj_low = t_bound, t_low
    else:
        # T_batch = (N - 1) max TPS + a path of d_i TPS_i: at most (N - 1) t_bound + tau_bound;
        # at least N max TPS (every d_i TPS_i >= TPS_i) and (N - 1) t_low + the p along a
        # path (d_i TPS_i >= the p of its nodes; a path of nodes runs along a path of stages,
        # sequential: through every stage)
        try:
            obj_bound = ((N - 1) * t_bound + tau_bound) * (1 + 1e-9)
        except OverflowError:
            obj_bound = math.inf
        if mode.graph:
            longest: dict[int, float] = {}
            for v in reversed(list(nx.topological_sort(inst.graph))):
                longest[v] = least_p.get(v, 0.0) + max(
                    (longest[x] for x in inst.graph.successors(v)), default=0.0
                )
            path_low = max(longest.values(), default=0.0)
        else:
            try:
                path_low = math.fsum(work)
            except OverflowError:
                path_low = 0.0
        obj_low = max(N * t_low, (N - 1) * t_low + path_low) * (1 - 1e-9)
        if not math.isfinite(obj_low):  # a lower bound of 0 is always valid
            obj_low = 0.0
    return IndexSets(
        inst,
        V,
        S,
        configs,
        d_of_t,
        opts,
        Y,
        edges,
        order_edges,
        t_bound,
        t_low,
        mode,
        obj_bound,
        obj_low,
        tau_bound,
        restrictions.uniform and len(configs) > 1,
        find_symmetry(inst) if symmetry and mode.graph and S > 1 else None,
    )


def in_flight_cap(mode: Mode, N: int, K: int, i: int) -> int:
    """The most microbatches in flight slot i can hold (at least 1): its h, q and y are
    at most this.

    The slots before i are used, one device each at least, so the slots from i on have
    sum d <= K - i; sequential pipelining adds >= 1 per slot in front, so also <= N - i.
    Piper's h is at most that sum of d; sec. 11's q at most 2 sum d - 1 (each stage adds
    d + at most d - 1 of rounding) and N.

    Parameters
    ----------
    mode : Mode
        Its pipelining and in-flight rule count.
    N, K : int
        Microbatches per batch and devices.
    i : int
        The slot, from 0.

    Returns
    -------
    int

    Examples
    --------
    >>> from piper_ilp.mode import Mode
    >>> in_flight_cap(Mode(), 8, 4, 1), in_flight_cap(Mode(in_flight="schedule"), 8, 4, 1)
    (3, 5)
    """
    if mode.in_flight == "schedule":
        top = 2 * (K - i) - 1
        return max(1, min(top, N) if mode.graph else min(top, N - i))
    return max(1, min(N, K - i)) if mode.graph else max(1, min(N, K) - i)


def _memory_row_needed(st: IndexSets, k: int, t_only: int | None = None) -> bool:
    """Whether memory[i,k] can bind (or come near binding): the slot holding every node
    at its largest memory (with ``t_only``: its options under that t)."""
    M = st.inst.M
    ts = list(st.d_of_t) if t_only is None else [t_only]
    worst = math.fsum(
        max(((k * o.a + o.b) / M for t in ts for o in st.opts.get((v, t), ())), default=0.0)
        for v in st.V
    )
    return worst > MEMORY_ROW_THRESHOLD


def _first_memory_row(st: IndexSets, top: int) -> int:
    """The least k in 1..``top`` with :func:`_memory_row_needed` (``top + 1`` when none): it
    is monotone in k (each k a + b, its quotient by M, their maxima and their fsum only
    grow with k), so a bisection finds it in O(log top) tests, where a test per k took
    seconds at N = 2^20."""
    if not _memory_row_needed(st, top):
        return top + 1
    lo, hi = 0, top  # not needed at lo (0: none below 1), needed at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _memory_row_needed(st, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _cut_coefs(st: IndexSets, a: int, b: int, c: float, side: str) -> dict[tuple[int, int], float]:
    """{(t, l): cut_edge_bytes(c, sync) / B, seconds} for the node on ``side`` of edge a->b."""
    v, other = (a, b) if side == "out" else (b, a)
    out = {}
    for t in st.d_of_t:
        for l, o in enumerate(st.opts.get((v, t), ())):
            sync = o.sbw[other] if side == "out" else o.sfw[other]
            out[(t, l)] = cut_edge_bytes(c, sync) / st.inst.B
    return out


def _ordered_nodes(st: IndexSets) -> list[int]:
    """Nodes on an edge of the transitive reduction (they get prefix variables P)."""
    on = {v for e in st.order_edges for v in e}
    return [v for v in st.V if v in on]


@dataclass
class Formulation:
    """The model and the maps from the formulation's indices to its variables (indices
    into ``model.vars``), made by :func:`formulate`.

    Attributes
    ----------
    model : LinearModel
    sets : IndexSets
    u : dict of (i, t, d) to int
    z : dict of (v, i, t, l) to int
        ``l`` the option's position in ``sets.opts[v, t]``.
    g : dict of (i, k) to int
        Empty when the model has no g (gpipe under Piper's rule).
    T : int
    s : list of int
        Sequential pipelining under Piper's rule: the suffix sums (else empty).
    P : dict of (v, i) to int
    h : list of int
        Graph pipelining under Piper's rule: the microbatches in flight (else empty).
    arc : dict of (i, j) to int
        Graph pipelining: the stage-graph arcs.
    latency : list of int
        The batch time's path variables (tau, L, Lmax).
    q : list of int
        Sec. 11's rule: the microbatches in flight q_i.
    r : list of int
        Sec. 11's rule under graph pipelining: the successors' largest q.
    w : dict of (t, d) to int
        Uniform: the one configuration.
    key, adj, adj_any
        The symmetry rows' variables (``docs/milp.md``, "Symmetry rows"): key[i] <= the
        least rank in slot i; adj[a,b,i] <= [a in slot i and b in slot i + 1] for the
        reduction's edges; adj_any[i] <= [some edge from slot i to slot i + 1].
    """

    model: LinearModel
    sets: IndexSets
    u: dict[tuple[int, int, int], int]
    z: dict[tuple[int, int, int, int], int]
    g: dict[tuple[int, int], int]
    T: int
    s: list[int]
    P: dict[tuple[int, int], int]
    h: list[int] = field(default_factory=list)  # graph pipelining: microbatches in flight
    arc: dict[tuple[int, int], int] = field(default_factory=dict)  # graph: stage-graph arcs
    latency: list[int] = field(default_factory=list)  # batch time: path variables (tau, L, Lmax)
    q: list[int] = field(default_factory=list)  # sec. 11: microbatches in flight q_i
    r: list[int] = field(default_factory=list)  # sec. 11, graph: the successors' largest q
    w: dict[tuple[int, int], int] = field(default_factory=dict)  # uniform: the one configuration
    key: list[int] = field(default_factory=list)  # symmetry rows: a slot's least rank (or less)
    adj: dict[tuple[int, int, int], int] = field(default_factory=dict)  # a in i, b in i + 1
    adj_any: list[int] = field(default_factory=list)  # symmetry rows: an edge from i to i + 1

    def plan_of(self, values: dict[int, float]) -> Plan:
        """The plan that integer values of the variables describe.

        Parameters
        ----------
        values : dict of int to float
            A value for every binary (by variable index); > 0.5 reads as 1.

        Returns
        -------
        Plan
            The used slots in order, each with its first configuration set to 1; not
            checked (the evaluator's job).
        """
        st = self.sets
        stages = []
        for i in range(st.S):
            conf = [(t, d) for (ii, t, d), j in self.u.items() if ii == i and values[j] > 0.5]
            if not conf:
                continue
            t, d = conf[0]
            nodes, options = [], {}
            for v in st.V:
                for tt in st.d_of_t:
                    for l, o in enumerate(st.opts.get((v, tt), ())):
                        if values[self.z[v, i, tt, l]] > 0.5:
                            nodes.append(v)
                            options[v] = o.id
            stages.append(Stage(tuple(nodes), d, t, options))
        return Plan(tuple(stages))

    def values_of(self, plan: Plan) -> tuple[dict[int, float] | None, str]:
        """Values of every binary and integer variable for ``plan`` (a MIP start, or a
        check of the model against a plan).

        Parameters
        ----------
        plan : Plan

        Returns
        -------
        tuple
            (values by variable index, ``""``), or (None, the reason) when the plan is
            not one of this model: not valid for the instance as restricted under the
            mode, more stages than slots, a configuration or an option the model does
            not have.
        """
        st, m = self.sets, self.model
        ev = evaluate(st.inst, plan, st.mode)
        if ev.valid and st.sym is not None:  # the point of the plan's orbit the rows admit
            plan = canonical_plan(st.inst, plan, st.sym)
            ev = evaluate(st.inst, plan, st.mode)
        if not ev.valid:
            under = "" if st.mode.is_default else f" under {st.mode.label}"
            return (
                None,
                f"not a valid plan for the instance as restricted{under}: {ev.violations[0]}",
            )
        if len(plan.stages) > st.S:
            return None, f"the plan has {len(plan.stages)} stages, more than the {st.S} slots"
        values = {j: 0.0 for j, var in enumerate(m.vars) if var.kind != "continuous"}
        for i, stg in enumerate(plan.stages):
            if (i, stg.t, stg.d) not in self.u:
                return (
                    None,
                    f"stage {i} has (t, d) = ({stg.t}, {stg.d}), not a configuration of the model",
                )
            values[self.u[i, stg.t, stg.d]] = 1.0
            if self.w:
                values[self.w[stg.t, stg.d]] = 1.0
            for v in stg.nodes:
                ids = [o.id for o in st.opts.get((v, stg.t), ())]
                if stg.options.get(v) not in ids:
                    return (
                        None,
                        f"node {v} has no option {stg.options.get(v)!r} for t = {stg.t} in the "
                        "model",
                    )
                values[self.z[v, i, stg.t, ids.index(stg.options[v])]] = 1.0
            rep = ev.stages[i]
            if self.g:
                for k in range(1, min(rep.y, st.Y[i]) + 1):
                    values[self.g[i, k]] = 1.0
            if self.s:
                values[self.s[i]] = float(rep.s)  # the suffix sum
            if self.h:
                values[self.h[i]] = float(rep.s)  # h_i of sec. 8
            if self.q:
                values[self.q[i]] = float(rep.s)  # q_i of sec. 11
            if self.r:
                values[self.r[i]] = float(max((ev.stages[j].s for j in rep.successors), default=0))
            if self.arc:
                for j in rep.successors:
                    values[self.arc[i, j]] = 1.0
            for v in stg.nodes:
                for j in range(i, st.S - 1):
                    if (v, j) in self.P:
                        values[self.P[v, j]] = 1.0
        if self.key:
            self._symmetry_values(plan, values)
        return values, ""

    def _symmetry_values(self, plan: Plan, values: dict[int, float]) -> None:
        """The symmetry rows' variables of a canonical plan (:meth:`values_of`)."""
        rank = self.sets.sym.rank
        slot = {v: i for i, stg in enumerate(plan.stages) for v in stg.nodes}
        for i, key in enumerate(self.key):
            if i < len(plan.stages):
                values[key] = float(min(rank[v] for v in plan.stages[i].nodes))
        for (a, b, i), j in self.adj.items():
            if slot[a] == i and slot[b] == i + 1:
                values[j] = values[self.adj_any[i]] = 1.0


def formulate(st: IndexSets, strong: bool = False) -> Formulation:
    """Build the model from its index sets.

    Parameters
    ----------
    st : IndexSets
        From :func:`index_sets`.
    strong : bool
        Add the valid strengthening rows boundary[i] and work (``docs/milp.md``,
        "Strengthening").

    Returns
    -------
    Formulation

    Notes
    -----
    Symbols (Tarnawski et al., NeurIPS 2021, and ``docs/cost-model.md``): K devices, M bytes
    per device, B bytes/s, N microbatches; per node v, degree t and option l: p, w, a, b, sfw,
    sbw; per stage: d, t, y = ceil(s/d) with s the suffix sum of d. Slots i = 0..S-1 with
    S = min(#nodes, K, N); configurations c = (t, d) with d | N and t * d <= K.

    Variables::

        u[i,t,d]   binary   slot i is used with configuration (t, d)
        z[v,i,t,l] binary   node v sits in slot i, whose degree is t, with its option l
        g[i,k]     binary   y_i >= k   (unary code of y_i = sum_k g[i,k], k = 1..Y_i)
        s[i]       integer  suffix sum of d from slot i on (0..min(N, K))
        P[v,i]     binary   node v sits in a slot <= i (prefix of x, for the order rows)
        ob[a,b,i]  >= 0     seconds of edge a->b cut on a's side of slot i (bytes / B)
        ib[a,b,i]  >= 0     the same on b's side
        T          >= T_low the objective, seconds: max over used slots of their TPS
        w[t,d]     binary   uniform only: the one configuration every used slot takes

    with x[v,i] = sum_{t,l} z[v,i,t,l]. Rows::

        assign[v]        sum_{i,t,l} z[v,i,t,l] = 1
        one_config[i]    sum_c u[i,c] <= 1
        used_first[i]    sum_c u[i+1,c] <= sum_c u[i,c]
        nonempty[i]      sum_c u[i,c] <= sum_v x[v,i]
        t_link[v,i,t]    sum_l z[v,i,t,l] <= sum_d u[i,t,d]
        prefix[v,i]      P[v,i] = P[v,i-1] + x[v,i]                 (P[v,-1] = 0)
        order[a,b,i]     P[b,i] <= P[a,i]          (edges of the transitive reduction, i < S-1)
        devices          sum t*d*u <= K
        suffix[i]        s[i] = sum_c d_c u[i,c] + s[i+1]           (s[S] = 0)
        microbatches     s[0] <= N
        y_order[i,k]     g[i,k+1] <= g[i,k]
        y_link[i,t,d]    u[i,t,d] = 1  =>  d * sum_k g[i,k] >= s[i]
        memory[i,k]      g[i,k] = 1    =>  sum_{v,t,l} min((k a + b)/M, 2) * z[v,i,t,l] <= 1
        cut_out[a,b,i]   ob >= sum_{t,l} cut_edge_bytes(c, sbw_a[b]) / B * z[a,i,t,l]
                               - max(...) * x[b,i]
        cut_in[a,b,i]    ib >= sum_{t,l} cut_edge_bytes(c, sfw_b[a]) / B * z[b,i,t,l]
                               - max(...) * x[a,i]
        tps[i,t,d]       u[i,t,d] = 1  =>  d T >= sum_{v,l} (p + d resync_bytes(w, d, N) / B)
                                                          * z[v,i,t,l]
                                                    + sum_edges (ob[.,.,i] + ib[.,.,i])
        uniform_one      sum_c w[c] <= 1                    (``Restrictions.uniform``: one (t, d)
        uniform[i,t,d]   u[i,t,d] <= w[t,d]                  for every stage, sec. 12)

    and, with ``strong=True`` (valid; CP-SAT's default, off for CBC and SCIP: SCIP gave a wrong
    proof with them)::

        boundary[i]      sum_{reduction edges} (P[a,i] - P[b,i]) >= sum_c u[i+1,c]
                         (when the graph is weakly connected)
        work             K T >= sum t p z + sum of every ob and ib      (sum t d <= K, T >= TPS_i)

    minimize T. Time rows hold seconds and memory rows fractions of M, exactly as computed
    from the data; each backend scales them (:mod:`piper_ilp.milp.scaled`).

    That is the default :class:`~piper_ilp.mode.Mode`. The others (``docs/milp.md``,
    "Modes") change four parts::

        gpipe         no g; memory[i,t,d]: u[i,t,d] = 1 => sum min(((N/d) a + b)/M, 2) z <= 1
        graph         S = min(#nodes, K); h[i] in 0..min(N, K - i) instead of s (no suffix,
                      no microbatches row); arc[i,j] >= x[a,i] + x[b,j] - 1 (reduction edges),
                      h[i] >= d_i, arc[i,j] = 1 => h[i] >= d_i + h[j]; y_link on h
        batch-time    latency[i,t,d]: u = 1 => tau[i] >= (the right side of tps[i,t,d]);
                      Tbatch >= (N - 1) T + sum tau (graph: + Lmax, with L[i] >= tau[i],
                      arc[i,j] = 1 => L[i] >= tau[i] + L[j], Lmax >= L[i]); minimize Tbatch
        in-flight     (sec. 11, --in-flight schedule) q[i] in 0..Y_i instead of s / h, with
        schedule      r_i the successors' largest q (sequential: q[i+1], 0 past the last slot;
                      graph: r[i] >= q[j] when arc[i,j] = 1) and, when u[i,t,d] = 1,
                      y_front: d sum_k g[i,k] >= d + r_i (y_i >= 1 + ceil(r_i / d)) and
                      q_link: q[i] >= d sum_k g[i,k]; q[0] <= N (graph: q[i] <= N); g also
                      under gpipe (it then counts only for q; memory stays N / d)
    """
    m = LinearModel()
    vs = _slot_variables(m, st)
    _time_variables(m, st, vs)
    _assignment_rows(m, st, vs)
    held = _held_rows(m, st, vs)
    _memory_rows(m, st, vs, held)
    _time_rows(m, st, vs, strong)
    if st.sym is not None:
        _symmetry_rows(m, st, vs)
    return Formulation(
        m,
        st,
        vs.u,
        vs.z,
        vs.g,
        vs.T,
        vs.s,
        vs.P,
        vs.h,
        vs.arc,
        vs.latency,
        vs.q,
        vs.r,
        vs.w,
        vs.key,
        vs.adj,
        vs.adj_any,
    )


@dataclass
class _Vars:
    """The variables of a model under construction (indices into its ``vars``), as
    :func:`formulate`'s Notes name them; ``zs_of[v, i]`` lists node v's (t, l, z) in slot i
    and ``cut_vars`` the (a, b, i, index, coefficients, side) of each ob / ib."""

    u: dict
    z: dict
    g: dict
    s: list
    h: list
    q: list
    r: list
    P: dict
    arc: dict
    zs_of: dict
    cut_vars: list = field(default_factory=list)
    T: int = -1
    tau: list = field(default_factory=list)
    L: list = field(default_factory=list)
    Lmax: int = -1
    Tb: int = -1
    latency: list = field(default_factory=list)
    w: dict = field(default_factory=dict)
    key: list = field(default_factory=list)
    adj: dict = field(default_factory=dict)
    adj_any: list = field(default_factory=list)

    def x(self, v: int, i: int) -> list[tuple[int, float]]:
        """x[v,i] = sum_{t,l} z[v,i,t,l] as row terms."""
        return [(j, 1.0) for (_, _, j) in self.zs_of.get((v, i), [])]


def _slot_variables(m: LinearModel, st: IndexSets) -> _Vars:
    """u, z, g, the in-flight counts (s, h or q and r), P and the arcs."""
    K, N, S = st.inst.K, st.inst.N, st.S
    u = {
        (i, t, d): m.var(f"u[{i},{t},{d}]", 0, 1, "binary") for i in range(S) for t, d in st.configs
    }
    z = {}
    for v in st.V:
        for i in range(S):
            for t in st.d_of_t:
                for l in range(len(st.opts.get((v, t), ()))):
                    z[v, i, t, l] = m.var(f"z[{_fmt_id(v)},{i},{t},{l}]", 0, 1, "binary")
    g = {}
    if st.has_g:  # gpipe: y_i = N / d_i is fixed by the configuration
        g = {
            (i, k): m.var(f"g[{i},{k}]", 0, 1, "binary")
            for i in range(S)
            for k in range(1, st.Y[i] + 1)
        }
    cap = min(N, K)
    s, h, q, r = [], [], [], []
    if st.schedule_rule:  # sec. 11: q_i <= Y_i (and the batch limit N)
        q = [m.var(f"q[{i}]", 0, st.Y[i], "integer") for i in range(S)]
        if st.graph:
            r = [m.var(f"r[{i}]", 0, st.Y[i], "integer") for i in range(S)]
    elif st.graph:  # h_i <= N (the batch limit) and h_i <= K - i
        h = [m.var(f"h[{i}]", 0, min(N, K - i), "integer") for i in range(S)]
    else:
        s = [m.var(f"s[{i}]", 0, cap, "integer") for i in range(S)]
    P = {
        (v, i): m.var(f"P[{_fmt_id(v)},{i}]", 0, 1, "binary")
        for v in _ordered_nodes(st)
        for i in range(S - 1)
    }
    arc = {}
    if st.graph:
        arc = {
            (i, j): m.var(f"arc[{i},{j}]", 0, 1, "binary")
            for i in range(S)
            for j in range(i + 1, S)
        }
    zs_of: dict[tuple[int, int], list] = {}
    for (v, i, t, l), j in z.items():
        zs_of.setdefault((v, i), []).append((t, l, j))
    return _Vars(u, z, g, s, h, q, r, P, arc, zs_of)


def _time_variables(m: LinearModel, st: IndexSets, vs: _Vars) -> None:
    """ob / ib, T, the batch time's tau, L, Lmax and Tbatch, w; the objective and the
    groups (one z per node, one u per slot, one w)."""
    S = st.S
    for a, b, c in st.edges:
        for side in ("out", "in"):
            coefs = _cut_coefs(st, a, b, c, side)
            if not coefs or max(coefs.values()) <= 0:
                continue
            for i in range(S):
                name = f"{'ob' if side == 'out' else 'ib'}[{_fmt_id(a)},{_fmt_id(b)},{i}]"
                j = m.var(name, 0.0, max(coefs.values()), "continuous")
                vs.cut_vars.append((a, b, i, j, coefs, side))
    vs.T = m.var("T", st.t_low, st.t_bound, "continuous")
    m.objective = vs.T
    if st.batch:
        # tau_i >= d_i TPS_i; graph: L_i >= tau_i + L_j on arcs (created from the last slot
        # on, so that each L_i comes after the L_j it depends on), Lmax >= L_i
        vs.tau = [m.var(f"tau[{i}]", 0.0, st.tau_bound, "continuous") for i in range(S)]
        vs.latency += vs.tau
        if st.graph:
            vs.L = [0] * S
            for i in reversed(range(S)):
                vs.L[i] = m.var(f"L[{i}]", 0.0, st.tau_bound, "continuous")
            vs.Lmax = m.var("Lmax", 0.0, st.tau_bound, "continuous")
            vs.latency += vs.L + [vs.Lmax]
        vs.Tb = m.var("Tbatch", st.obj_low, st.obj_bound, "continuous")
        m.objective = vs.Tb
    if st.uniform:
        vs.w = {(t, d): m.var(f"w[{t},{d}]", 0, 1, "binary") for t, d in st.configs}
    m.groups = [[j for i in range(S) for (_, _, j) in vs.zs_of.get((v, i), [])] for v in st.V]
    m.groups += [[vs.u[i, t, d] for t, d in st.configs] for i in range(S)]


def _assignment_rows(m: LinearModel, st: IndexSets, vs: _Vars) -> None:
    """assign, one_config, used_first, nonempty, t_link; uniform; prefix and order."""
    S, V, u, z, P, x = st.S, st.V, vs.u, vs.z, vs.P, vs.x
    for v in V:
        m.row(f"assign[{_fmt_id(v)}]", [tm for i in range(S) for tm in x(v, i)], "==", 1)
    for i in range(S):
        used_i = [(u[i, t, d], 1.0) for t, d in st.configs]
        m.row(f"one_config[{i}]", used_i, "<=", 1)
        if i + 1 < S:
            m.row(
                f"used_first[{i}]",
                [(u[i + 1, t, d], 1.0) for t, d in st.configs] + [(j, -1.0) for j, _ in used_i],
                "<=",
                0,
            )
        m.row(f"nonempty[{i}]", used_i + [(j, -1.0) for v in V for j, _ in x(v, i)], "<=", 0)
        for v in V:
            for t, ds in st.d_of_t.items():
                zl = [(z[v, i, t, l], 1.0) for l in range(len(st.opts.get((v, t), ())))]
                if zl:
                    m.row(
                        f"t_link[{_fmt_id(v)},{i},{t}]",
                        zl + [(u[i, t, d], -1.0) for d in ds],
                        "<=",
                        0,
                    )

    # ---- uniform (sec. 12): every used slot takes the one configuration w ----
    if vs.w:
        m.row("uniform_one", [(j, 1.0) for j in vs.w.values()], "<=", 1)
        m.groups.append(list(vs.w.values()))
        for (i, t, d), j in u.items():
            m.row(f"uniform[{i},{t},{d}]", [(j, 1.0), (vs.w[t, d], -1.0)], "<=", 0)

    # ---- order: every edge goes forward, P[v,i] = sum_{j<=i} x[v,j] ----
    for (v, i), j in P.items():
        prev = [(P[v, i - 1], -1.0)] if i > 0 else []
        m.row(
            f"prefix[{_fmt_id(v)},{i}]",
            [(j, 1.0)] + prev + [(jj, -1.0) for jj, _ in x(v, i)],
            "==",
            0,
        )
    for a, b in st.order_edges:
        for i in range(S - 1):
            m.row(
                f"order[{_fmt_id(a)},{_fmt_id(b)},{i}]", [(P[b, i], 1.0), (P[a, i], -1.0)], "<=", 0
            )


def _held_rows(m: LinearModel, st: IndexSets, vs: _Vars) -> list[int]:
    """The devices budget and what bounds the microbatches in flight: suffix sums
    s_i = d_i + s_{i+1} (sequential), h_i >= d_i + h_j on arcs (graph) or sec. 11's q;
    the variables that y_link compares with (s, h or q)."""
    K, N, S = st.inst.K, st.inst.N, st.S
    u, s, h, q, r, arc, x = vs.u, vs.s, vs.h, vs.q, vs.r, vs.arc, vs.x
    m.row("devices", [(u[i, t, d], t * d) for i in range(S) for t, d in st.configs], "<=", K)
    d_of = {i: [(u[i, t, d], float(d)) for t, d in st.configs] for i in range(S)}
    if st.graph:
        # ---- graph pipelining (sec. 8): arcs of the stage graph, h_i >= d_i + h_j on them ----
        # arc[i,j] >= x[a,i] + x[b,j] - 1 for the edges of the transitive reduction (a path
        # of them runs along every arc an edge makes, and h and L only grow along paths);
        # an arc set without an edge only raises h and L, which never helps the optimum
        for a, b in st.order_edges:
            for (i, j), jj in arc.items():
                m.row(
                    f"arc_def[{_fmt_id(a)},{_fmt_id(b)},{i},{j}]",
                    [(jj, 1.0)] + [(q, -1.0) for q, _ in x(a, i)] + [(q, -1.0) for q, _ in x(b, j)],
                    ">=",
                    -1,
                )
        if st.schedule_rule:
            for (i, j), jj in arc.items():
                m.row(f"r_arc[{i},{j}]", [(r[i], 1.0), (q[j], -1.0)], ">=", 0, enforce=jj)
        else:
            for i in range(S):
                m.row(f"h_own[{i}]", [(h[i], 1.0)] + [(x, -c) for x, c in d_of[i]], ">=", 0)
            for (i, j), jj in arc.items():
                m.row(
                    f"h_arc[{i},{j}]",
                    [(h[i], 1.0), (h[j], -1.0)] + [(x, -c) for x, c in d_of[i]],
                    ">=",
                    0,
                    enforce=jj,
                )
        return h
    if st.schedule_rule:
        m.row("microbatches", [(q[0], 1.0)], "<=", N)
        return q
    for i in range(S):
        nxt = [(s[i + 1], -1.0)] if i + 1 < S else []
        m.row(
            f"suffix[{i}]",
            [(s[i], 1.0)] + nxt + [(u[i, t, d], -float(d)) for t, d in st.configs],
            "==",
            0,
        )
    m.row("microbatches", [(s[0], 1.0)], "<=", N)
    return s


def _memory_rows(m: LinearModel, st: IndexSets, vs: _Vars, held: list[int]) -> None:
    """gpipe's memory rows per configuration, y_order and y_link (or sec. 11's rows), and
    the memory rows per y_i >= k."""
    N, M, S, V, u, z, g = st.inst.N, st.inst.M, st.S, st.V, vs.u, vs.z, vs.g
    if st.gpipe:
        # ---- gpipe (sec. 9): y = N / d, one memory row per configuration ----
        for i in range(S):
            for t, d in st.configs:
                y = N // d
                if not _memory_row_needed(st, y, t):
                    continue
                terms = []
                for v in V:
                    for l, o in enumerate(st.opts.get((v, t), ())):
                        terms.append((z[v, i, t, l], min((y * o.a + o.b) / M, 2.0)))
                m.row(f"memory[{i},{t},{d}]", terms, "<=", 1.0, kind="memory", enforce=u[i, t, d])

    # ---- microbatches in flight y_i = sum_k g[i,k] >= ceil(s_i / d_i) (graph: h_i) ----
    for i in range(S if g else 0):
        for k in range(1, st.Y[i]):
            m.row(f"y_order[{i},{k}]", [(g[i, k + 1], 1.0), (g[i, k], -1.0)], "<=", 0)
        ys = [(g[i, k], 1.0) for k in range(1, st.Y[i] + 1)]
        if st.schedule_rule:
            _schedule_rows(m, st, i, ys, u, vs.q, vs.r)
            continue
        for t, d in st.configs:
            m.row(
                f"y_link[{i},{t},{d}]",
                [(jj, d * c) for jj, c in ys] + [(held[i], -1.0)],
                ">=",
                0,
                enforce=u[i, t, d],
            )

    # ---- memory: sum (k a + b) / M <= 1 when y_i >= k ----
    memory_g = g and not st.gpipe
    # the rows k >= first can bind
    first = _first_memory_row(st, max(st.Y)) if memory_g else 1
    for i in range(S if memory_g else 0):
        for k in range(first, st.Y[i] + 1):
            terms = []
            for v in V:
                for t, l, j in vs.zs_of.get((v, i), []):
                    o = st.opts[v, t][l]
                    # a term above 1 alone breaks the row; capping it at 2 keeps that
                    terms.append((j, min((k * o.a + o.b) / M, 2.0)))
            m.row(f"memory[{i},{k}]", terms, "<=", 1.0, kind="memory", enforce=g[i, k])


def _time_rows(m: LinearModel, st: IndexSets, vs: _Vars, strong: bool) -> None:
    """cut_out / cut_in, the strengthening rows (with ``strong``), tps and latency, and the
    batch time."""
    inst = st.inst
    K, N, B, S, V = inst.K, inst.N, inst.B, st.S, st.V
    u, z, P, T, tau = vs.u, vs.z, vs.P, vs.T, vs.tau
    # ---- cut edges (seconds) ----
    cut_of_slot: dict[int, list[int]] = {i: [] for i in range(S)}
    for a, b, i, j, coefs, side in vs.cut_vars:
        here, other = (a, b) if side == "out" else (b, a)
        terms = [(j, 1.0)] + [(z[here, i, t, l], -cf) for (t, l), cf in coefs.items()]
        terms += [(jj, max(coefs.values())) for jj, _ in vs.x(other, i)]
        m.row(f"cut_{side}[{_fmt_id(a)},{_fmt_id(b)},{i}]", terms, ">=", 0, kind="time")
        cut_of_slot[i].append(j)

    # ---- strengthening (valid rows; docs/milp.md "Strengthening") ----
    # boundary[i]: the slots <= i hold a down-set of the graph; when slot i+1 is used, both
    # it and its complement are non-empty, so in a weakly connected graph some edge of the
    # transitive reduction leaves it: sum_{reduction edges} (P[a,i] - P[b,i]) >= used_{i+1}
    if strong and len(V) > 1 and nx.is_weakly_connected(inst.graph):
        for i in range(S - 1):
            terms = [(P[a, i], 1.0) for a, b in st.order_edges] + [
                (P[b, i], -1.0) for a, b in st.order_edges
            ]
            terms += [(u[i + 1, t, d], -1.0) for t, d in st.configs]
            m.row(f"boundary[{i}]", terms, ">=", 0)
    # work: K T >= sum_i t_i d_i TPS_i >= sum t p z + every cut second (sum t d <= K, t >= 1)
    if strong:
        terms = [(T, float(K))]
        for (v, _i, t, l), j in z.items():
            terms.append((j, -t * st.opts[v, t][l].p))
        terms += [(j, -1.0) for i in range(S) for j in cut_of_slot[i]]
        m.row("work", terms, ">=", 0, kind="time")

    # ---- TPS of each slot: d T >= sum (p + d resync / B) z + cut seconds ----
    for i in range(S):
        for t, d in st.configs:
            terms = [(T, float(d))]
            for v in V:
                for l, o in enumerate(st.opts.get((v, t), ())):
                    terms.append((z[v, i, t, l], -(o.p + d * resync_bytes(o.w, d, N) / B)))
            terms += [(j, -1.0) for j in cut_of_slot[i]]
            m.row(f"tps[{i},{t},{d}]", terms, ">=", 0, kind="time", enforce=u[i, t, d])
            if st.batch:  # the same work, not divided by d: tau_i >= d_i TPS_i
                m.row(
                    f"latency[{i},{t},{d}]",
                    [(tau[i], 1.0)] + terms[1:],
                    ">=",
                    0,
                    kind="time",
                    enforce=u[i, t, d],
                )

    # ---- batch time (sec. 9): (N - 1) T + the longest path of tau ----
    if st.batch:
        L, Lmax = vs.L, vs.Lmax
        if st.graph:
            for i in range(S):
                m.row(f"path_own[{i}]", [(L[i], 1.0), (tau[i], -1.0)], ">=", 0, kind="time")
            for (i, j), jj in vs.arc.items():
                m.row(
                    f"path[{i},{j}]",
                    [(L[i], 1.0), (tau[i], -1.0), (L[j], -1.0)],
                    ">=",
                    0,
                    kind="time",
                    enforce=jj,
                )
            for i in range(S):
                m.row(f"path_max[{i}]", [(Lmax, 1.0), (L[i], -1.0)], ">=", 0, kind="time")
            path = [(Lmax, -1.0)]
        else:
            path = [(tau[i], -1.0) for i in range(S)]
        m.row("batch_time", [(vs.Tb, 1.0), (T, -float(N - 1))] + path, ">=", 0, kind="time")


def _symmetry_rows(m: LinearModel, st: IndexSets, vs: _Vars) -> None:
    """The symmetry rows (graph pipelining; docs/milp.md, "Symmetry rows"): consecutive
    used slots without an edge from the first to the second are in increasing least rank,
    and the first nodes of interchangeable chains sit in non-decreasing slots. Every plan
    has a point of its orbit (the same value) that satisfies them
    (:func:`~piper_ilp.milp.symmetry.canonical_plan`)."""
    S, V, x, sym = st.S, st.V, vs.x, st.sym
    n = len(V)
    for i in range(S - 1):
        key = m.var(f"key[{i}]", 0, n - 1, "integer")
        vs.key.append(key)
        adj = []
        for a, b in st.order_edges:
            j = m.var(f"adj[{_fmt_id(a)},{_fmt_id(b)},{i}]", 0, 1, "binary")
            vs.adj[a, b, i] = j
            adj.append(j)
            m.row(f"adj_out[{_fmt_id(a)},{_fmt_id(b)},{i}]", [(j, 1.0)] + _neg(x(a, i)), "<=", 0)
            m.row(f"adj_in[{_fmt_id(a)},{_fmt_id(b)},{i}]", [(j, 1.0)] + _neg(x(b, i + 1)), "<=", 0)
        any_ = m.var(f"adj_any[{i}]", 0, 1, "binary")
        vs.adj_any.append(any_)
        m.row(f"adj_any[{i}]", [(any_, 1.0)] + [(j, -1.0) for j in adj], "<=", 0)
        for v in V:
            r = sym.rank[v]
            up = [(key, 1.0)] + [(j, float(n)) for j, _ in x(v, i)]
            m.row(f"key_up[{_fmt_id(v)},{i}]", up, "<=", r + n)
            order = [(key, 1.0), (any_, -float(n))] + [(j, float(n)) for j, _ in x(v, i + 1)]
            m.row(f"key_order[{_fmt_id(v)},{i}]", order, "<=", r - 1 + n)
    for c, cls in enumerate(sym.classes):
        for k, (c1, c2) in enumerate(zip(cls, cls[1:])):
            terms = [(j, float(i)) for i in range(1, S) for j, _ in x(c1[0], i)]
            terms += [(j, -float(i)) for i in range(1, S) for j, _ in x(c2[0], i)]
            m.row(f"chain_order[{c},{k}]", terms, "<=", 0)


def _neg(terms: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(j, -c) for j, c in terms]


def _schedule_rows(m: LinearModel, st: IndexSets, i: int, ys, u, q, r) -> None:
    """Sec. 11's in-flight rows of slot i, y_i = sum_k g[i,k] (``ys``): when u[i,t,d] = 1,
    d y_i >= d + r_i (so y_i >= 1 + ceil(r_i / d)) and q_i >= d y_i, r_i the successors'
    largest q (sequential: q[i+1]; graph: r[i]). q and y only need lower bounds: larger
    values only make memory and the batch limit harder, and a plan's own q and y satisfy
    every row."""
    if st.graph:
        after = [(r[i], -1.0)]
    else:
        after = [(q[i + 1], -1.0)] if i + 1 < st.S else []
    for t, d in st.configs:
        m.row(
            f"y_front[{i},{t},{d}]",
            [(jj, d * c) for jj, c in ys] + after,
            ">=",
            d,
            enforce=u[i, t, d],
        )
        m.row(
            f"q_link[{i},{t},{d}]",
            [(q[i], 1.0)] + [(jj, -d * c) for jj, c in ys],
            ">=",
            0,
            enforce=u[i, t, d],
        )


def build_model(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    mode: Mode = DEFAULT_MODE,
    strong: bool = False,
) -> LinearModel:
    """The backend-neutral model of an instance (:func:`formulate`).

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        Applied first (excluded options, max_t, max_d, fixed degrees, uniform).
    mode : Mode
    strong : bool
        With the strengthening rows.

    Returns
    -------
    LinearModel

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> node = (0, {"1": [option_dict("v", p=1.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=1, M=10, N=1, B=1))
    >>> [v.name for v in build_model(inst).vars]
    ['u[0,1,1]', 'z[0,0,1,0]', 'g[0,1]', 's[0]', 'T']
    """
    return formulate(index_sets(instance, restrictions, mode), strong).model


def size_of_sets(st: IndexSets, strong: bool = False) -> dict[str, int]:
    """The model's size for the index sets ``st`` without building it.

    Parameters
    ----------
    st : IndexSets
        From :func:`index_sets`.
    strong : bool
        Count the strengthening rows too.

    Returns
    -------
    dict
        What :func:`model_size` returns.
    """
    S, V = st.S, st.V
    n_opts = sum(len(o) for o in st.opts.values())
    n_vt = len(st.opts)
    n_cut = 0
    for a, b, c in st.edges:
        for side in ("out", "in"):
            coefs = _cut_coefs(st, a, b, c, side)
            if coefs and max(coefs.values()) > 0:
                n_cut += 1
    nC = len(st.configs)
    nP = len(_ordered_nodes(st)) * (S - 1)
    nY = sum(st.Y) if st.has_g else 0
    n_arc = S * (S - 1) // 2 if st.graph else 0
    n_r = S if st.graph and st.schedule_rule else 0
    n_lat = (S + (S + 1 if st.graph else 0) + 1) if st.batch else 0  # tau, L, Lmax, Tbatch
    n_w = nC if st.uniform else 0
    variables = S * nC + S * n_opts + nY + S + n_r + nP + n_arc + n_cut * S + 1 + n_lat + n_w
    binaries = S * nC + S * n_opts + nY + nP + n_arc + n_w
    rows = len(V)  # assign
    rows += S + (S - 1)  # one_config, used_first
    rows += S  # nonempty
    rows += S * n_vt  # t_link
    rows += nP  # prefix
    rows += len(st.order_edges) * (S - 1)
    rows += 1  # devices
    rows += (1 + S * nC) if st.uniform else 0  # uniform_one, uniform
    if st.graph:
        rows += len(st.order_edges) * n_arc  # arc_def
        rows += n_arc if st.schedule_rule else S + n_arc  # r_arc; h_own, h_arc
    else:
        rows += 1 if st.schedule_rule else 1 + S  # microbatches, suffix
    if st.has_g:
        rows += sum(y - 1 for y in st.Y)  # y_order
        rows += S * nC * (2 if st.schedule_rule else 1)  # y_front and q_link, or y_link
    if st.gpipe:
        rows += sum(1 for t, d in st.configs if _memory_row_needed(st, st.inst.N // d, t)) * S
    else:
        first = _first_memory_row(st, max(st.Y))
        rows += sum(max(0, y - first + 1) for y in st.Y)  # memory rows for k = first..y
    rows += n_cut * S
    rows += 1 if strong else 0
    if strong:
        if len(V) > 1 and nx.is_weakly_connected(st.inst.graph):
            rows += S - 1  # boundary
    rows += S * nC  # tps
    if st.batch:
        rows += S * nC + 1  # latency, batch_time
        if st.graph:
            rows += 2 * S + n_arc  # path_own, path_max, path
    if st.sym is not None:  # key, adj, adj_any; adj_out, adj_in, adj_any, key_up, key_order
        n_red = len(st.order_edges)
        variables += (S - 1) * (n_red + 2)
        binaries += (S - 1) * (n_red + 1)
        rows += (S - 1) * (2 * n_red + 1 + 2 * len(V))
        rows += sum(len(cls) - 1 for cls in st.sym.classes)  # chain_order
    return {
        "variables": variables,
        "binaries": binaries,
        "constraints": rows,
        "slots": S,
        "configurations": nC,
    }


def model_size(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    mode: Mode = DEFAULT_MODE,
    strong: bool = False,
) -> dict:
    """The MILP's size before solving, counted without building it (:func:`size_of_sets`).

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
    mode : Mode
    strong : bool
        Count the strengthening rows too.

    Returns
    -------
    dict
        ``variables``, ``binaries``, ``constraints`` (rows), ``slots`` (S) and
        ``configurations`` ((t, d) pairs), each an int.

    Examples
    --------
    >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
    >>> node = (0, {"1": [option_dict("v", p=1.0, w=0, a=1, b=0)]})
    >>> inst = instance_from_dict(instance_dict([node], K=1, M=10, N=1, B=1))
    >>> model_size(inst)["variables"]  # u, z, g, s, T
    5
    """
    return size_of_sets(index_sets(instance, restrictions, mode), strong)
