"""The exact MILP of the Piper planning problem, written once, solved by CP-SAT or CBC.

The formulation (``docs/milp.md`` gives it in full, with the proofs of exactness) is
built once as a small backend-neutral :class:`LinearModel` -- variables with bounds,
named linear rows, optional indicator ("row holds when binary e = 1"), objective -- and
then compiled to each backend:

* ``cpsat``: OR-Tools CP-SAT. Indicators become ``only_enforce_if``; CP-SAT needs integer
  coefficients, so time rows are scaled and rounded to nearest and memory rows scaled
  and rounded down (``docs/milp.md``, "Scaling"); the worst-case absolute error on the
  objective is stated with every answer (``info["scaling_error"]``).
* ``cbc``: CBC through PuLP's bundled binary. Indicators become big-M rows with the
  tightest big-M the variable bounds allow; coefficients stay floats (memory rows are
  normalized by M, time rows expressed in a unit of about 1/1000 of the largest
  possible TPS).
* ``scip``: SCIP through OR-Tools' MPSolver, from the same big-M rows as ``cbc``
  (feasibility tolerance 1e-9, zero relative gap).

Symbols (Tarnawski et al., NeurIPS 2021, and ``docs/cost-model.md``): K devices, M bytes
per device, B bytes/s, N microbatches; per node v, degree t and option l: p, w, a, b,
sfw, sbw; per stage: d (data-parallel degree), t, y = ceil(s/d) with s the suffix sum of
d. Slots i = 0..S-1 with S = min(#nodes, K, N); configurations c = (t, d) with d | N
and t * d <= K.

Variables::

    u[i,t,d]   binary   slot i is used with configuration (t, d)
    z[v,i,t,l] binary   node v sits in slot i, whose degree is t, with its option l
    g[i,k]     binary   y_i >= k   (unary code of y_i = sum_k g[i,k], k = 1..Y_i)
    s[i]       integer  suffix sum of d from slot i on (0..min(N, K))
    P[v,i]     binary   node v sits in a slot <= i (prefix of x, for the order rows)
    ob[a,b,i]  >= 0     bytes of edge a->b cut on a's side of slot i, in time units / B
    ib[a,b,i]  >= 0     the same on b's side
    T          >= T_low the objective: max over used slots of their TPS, in time units

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
    cut_out[a,b,i]   ob >= sum_{t,l} 2 (c + sbw_a[b]) / B * z[a,i,t,l] - max(...) * x[b,i]
    cut_in[a,b,i]    ib >= sum_{t,l} 2 (c + sfw_b[a]) / B * z[b,i,t,l] - max(...) * x[a,i]
    tps[i,t,d]       u[i,t,d] = 1  =>  d T >= sum_{v,l} (p + 4 (d-1) w / (N B)) z[v,i,t,l]
                                                + sum_edges (ob[.,.,i] + ib[.,.,i])

minimize T. Every returned plan is re-checked by the independent evaluator
(:func:`piper_ilp.solution.checked_solution`).
"""

from __future__ import annotations

import functools
import math
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from piper_ilp.cost import MEMORY_RTOL
from piper_ilp.errors import InputError, InternalError, SizeLimitError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import Instance
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_VARIABLES",
    "DEFAULT_THREADS",
    "Var",
    "Row",
    "LinearModel",
    "build_model",
    "model_size",
    "solve_milp",
]

#: The backends :func:`solve_milp` accepts.
BACKENDS = ("cpsat", "cbc", "scip")

#: Above this many variables :func:`solve_milp` refuses (unless ``force``).
DEFAULT_MAX_VARIABLES = 25_000

#: Solver threads when the caller does not say (CI machines have 2 cores).
DEFAULT_THREADS = 2

#: The objective's time unit is TIME_UNITS_PER_BOUND-th of the largest possible TPS.
TIME_UNITS_PER_BOUND = 1000.0

#: CP-SAT: integer steps per time unit (so the largest possible TPS is 1e9 steps).
CPSAT_STEPS_PER_UNIT = 1_000_000

#: CBC: absolute optimality gap, in time units (1e-10 of the largest possible TPS).
CBC_GAP_ABS = 1e-7

#: CBC feasibility and integrality tolerances (tighter than CBC's defaults, because a
#: plan must fit memory within MEMORY_RTOL = 1e-9 of M).
CBC_OPTIONS = ("primalT 1e-9", "integerT 1e-9")


# --------------------------------------------------------------------------------------
# The backend-neutral model
# --------------------------------------------------------------------------------------


@dataclass
class Var:
    """A model variable: ``kind`` is "binary", "integer" or "continuous"."""

    name: str
    lb: float
    ub: float
    kind: str


@dataclass
class Row:
    """A linear row ``sum coef * var  (sense)  rhs``, ``sense`` in {"<=", ">=", "=="}.

    ``enforce`` is the index of a binary variable: the row must hold only when that
    variable is 1 (an indicator). ``kind`` tells a backend that needs integers how to
    scale it: "exact" (integer data), "time" (seconds, round to nearest, shares the
    scale of continuous variables) or "memory" (a <= row of binaries, round down).
    """

    name: str
    terms: list[tuple[int, float]]
    sense: str
    rhs: float
    kind: str = "exact"
    enforce: int | None = None


@dataclass
class LinearModel:
    """Variables, rows, objective (a variable to minimize) and facts for the backends.

    ``groups`` are sets of binaries of which at most one is 1 (used for big-M bounds);
    ``time_unit`` is the number of seconds in one unit of the objective.
    """

    vars: list[Var] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)
    objective: int = -1
    time_unit: float = 1.0
    trivially_infeasible: str | None = None

    def var(self, name: str, lb: float, ub: float, kind: str) -> int:
        self.vars.append(Var(name, lb, ub, kind))
        return len(self.vars) - 1

    def row(self, name, terms, sense, rhs, kind="exact", enforce=None) -> None:
        terms = [(j, c) for j, c in terms if c != 0]
        if not terms:
            ok = (0 <= rhs) if sense == "<=" else (0 >= rhs) if sense == ">=" else (rhs == 0)
            if not ok and enforce is None:
                self.trivially_infeasible = f"row {name} reads 0 {sense} {rhs}"
            return
        self.rows.append(Row(name, terms, sense, rhs, kind, enforce))


def _fmt_id(v: int) -> str:
    return str(v) if v >= 0 else f"m{-v}"


# --------------------------------------------------------------------------------------
# The index sets (shared by the builder and the size count)
# --------------------------------------------------------------------------------------


@dataclass
class _Sets:
    inst: Instance
    V: list[int]
    S: int
    configs: list[tuple[int, int]]
    d_of_t: dict[int, list[int]]
    opts: dict[tuple[int, int], tuple]  # (v, t) -> options, only t with a config
    Y: list[int]
    edges: list[tuple[int, int, float]]
    order_edges: list[tuple[int, int]]
    t_bound: float  # largest possible TPS, seconds
    unit: float  # seconds per time unit
    t_low: float  # a lower bound on every plan's TPS, seconds

    @property
    def n(self) -> int:
        return len(self.V)


def _sets(instance: Instance, restrictions: Restrictions) -> _Sets:
    inst = restrictions.apply(instance)
    K, N, B = inst.K, inst.N, inst.B
    V = inst.node_ids
    D = restrictions.d_values(inst)
    T = inst.t_values
    configs = [(t, d) for t in T for d in D if t * d <= K]
    d_of_t: dict[int, list[int]] = {}
    for t, d in configs:
        d_of_t.setdefault(t, []).append(d)
    opts = {(v, t): tuple(lst) for v in V for t, lst in inst.node[v].options.items() if t in d_of_t}
    S = min(len(V), K, N)
    cap = min(N, K)
    Y = [max(1, cap - i) for i in range(S)]
    edges = [(e.src, e.dst, e.c) for e in inst.edges]
    red = nx.transitive_reduction(inst.graph)
    order_edges = sorted(red.edges(), key=lambda e: (V.index(e[0]), V.index(e[1])))
    # the largest TPS any stage can have: each node at its worst (t, l), d = 1, all edges cut
    t_bound = 0.0
    for v in V:
        worst = 0.0
        for opt in (o for lst in inst.node[v].options.values() for o in lst):
            eb = sum(2 * (c + opt.sfw[u]) for u, c in inst.in_edges[v])
            eb += sum(2 * (c + opt.sbw[x]) for x, c in inst.out_edges[v])
            worst = max(worst, opt.p + eb / B + 4 * opt.w / (N * B))
        t_bound += worst
    unit = t_bound / TIME_UNITS_PER_BOUND if t_bound > 0 else 1.0
    # lower bounds that every plan obeys (stage i: d_i T >= sum of its p; sum d <= min(N, K);
    # sum t d <= K; a node's own stage has d <= the largest d allowed with its t)
    work = work_t = single = 0.0
    for v in V:
        avail = [(t, o) for t in d_of_t for o in opts.get((v, t), ())]
        if not avail:
            continue
        work += min(o.p for _, o in avail)
        work_t += min(t * o.p for t, o in avail)
        single = max(single, min(o.p / max(d_of_t[t]) for t, o in avail))
    t_low = max(work / min(N, K), work_t / K, single) * (1 - 1e-9)
    return _Sets(inst, V, S, configs, d_of_t, opts, Y, edges, order_edges, t_bound, unit, t_low)


def _memory_row_needed(st: _Sets, k: int) -> bool:
    """Whether memory[i,k] can bind: the slot holding every node at its largest memory."""
    M = st.inst.M
    worst = 0.0
    for v in st.V:
        worst += max(((k * o.a + o.b) / M for t in st.d_of_t for o in st.opts.get((v, t), ())), default=0.0)
    return worst > 1.0


def _cut_coefs(st: _Sets, a: int, b: int, c: float, side: str) -> dict[tuple[int, int], float]:
    """{(t, l): 2 (c + sync) / B in time units} for the node on ``side`` of edge a->b."""
    v, other = (a, b) if side == "out" else (b, a)
    out = {}
    for t in st.d_of_t:
        for l, o in enumerate(st.opts.get((v, t), ())):
            sync = o.sbw[other] if side == "out" else o.sfw[other]
            out[(t, l)] = 2.0 * (c + sync) / st.inst.B / st.unit
    return out


# --------------------------------------------------------------------------------------
# Building the model
# --------------------------------------------------------------------------------------


@dataclass
class _Built:
    model: LinearModel
    sets: _Sets
    u: dict[tuple[int, int, int], int]
    z: dict[tuple[int, int, int, int], int]
    g: dict[tuple[int, int], int]
    T: int
    s: list[int]
    P: dict[tuple[int, int], int]


def _ordered_nodes(st: _Sets) -> list[int]:
    """Nodes on an edge of the transitive reduction (they get prefix variables P)."""
    on = {v for e in st.order_edges for v in e}
    return [v for v in st.V if v in on]


def _build(st: _Sets) -> _Built:
    inst = st.inst
    K, N, M, B = inst.K, inst.N, inst.M, inst.B
    m = LinearModel(time_unit=st.unit)
    S, V = st.S, st.V

    # ---- variables ----
    u = {(i, t, d): m.var(f"u[{i},{t},{d}]", 0, 1, "binary") for i in range(S) for t, d in st.configs}
    z = {}
    for v in V:
        for i in range(S):
            for t in st.d_of_t:
                for l in range(len(st.opts.get((v, t), ()))):
                    z[v, i, t, l] = m.var(f"z[{_fmt_id(v)},{i},{t},{l}]", 0, 1, "binary")
    g = {(i, k): m.var(f"g[{i},{k}]", 0, 1, "binary") for i in range(S) for k in range(1, st.Y[i] + 1)}
    cap = min(N, K)
    s = [m.var(f"s[{i}]", 0, cap, "integer") for i in range(S)]
    P = {(v, i): m.var(f"P[{_fmt_id(v)},{i}]", 0, 1, "binary") for v in _ordered_nodes(st) for i in range(S - 1)}
    zs_of = {}  # (v, i) -> [(t, l, var)]
    for (v, i, t, l), j in z.items():
        zs_of.setdefault((v, i), []).append((t, l, j))
    cut_vars = []  # (name, a, b, i, var, coefs, side)
    for a, b, c in st.edges:
        for side in ("out", "in"):
            coefs = _cut_coefs(st, a, b, c, side)
            if not coefs or max(coefs.values()) <= 0:
                continue
            for i in range(S):
                name = f"{'ob' if side == 'out' else 'ib'}[{_fmt_id(a)},{_fmt_id(b)},{i}]"
                j = m.var(name, 0.0, max(coefs.values()), "continuous")
                cut_vars.append((a, b, i, j, coefs, side))
    T = m.var("T", st.t_low / st.unit, TIME_UNITS_PER_BOUND * (1 + 1e-6), "continuous")
    m.objective = T

    # groups of binaries with at most one set (for big-M bounds)
    m.groups = [[j for i in range(S) for (_, _, j) in zs_of.get((v, i), [])] for v in V]
    m.groups += [[u[i, t, d] for t, d in st.configs] for i in range(S)]

    def x(v, i):
        return [(j, 1.0) for (_, _, j) in zs_of.get((v, i), [])]

    # ---- rows: assignment and slot use ----
    for v in V:
        m.row(f"assign[{_fmt_id(v)}]", [tm for i in range(S) for tm in x(v, i)], "==", 1)
    for i in range(S):
        used_i = [(u[i, t, d], 1.0) for t, d in st.configs]
        m.row(f"one_config[{i}]", used_i, "<=", 1)
        if i + 1 < S:
            m.row(f"used_first[{i}]", [(u[i + 1, t, d], 1.0) for t, d in st.configs] + [(j, -1.0) for j, _ in used_i], "<=", 0)
        m.row(f"nonempty[{i}]", used_i + [(j, -1.0) for v in V for j, _ in x(v, i)], "<=", 0)
        for v in V:
            for t, ds in st.d_of_t.items():
                zl = [(z[v, i, t, l], 1.0) for l in range(len(st.opts.get((v, t), ())))]
                if zl:
                    m.row(f"t_link[{_fmt_id(v)},{i},{t}]", zl + [(u[i, t, d], -1.0) for d in ds], "<=", 0)

    # ---- order: every edge goes forward, P[v,i] = sum_{j<=i} x[v,j] (cumulative form) ----
    for (v, i), j in P.items():
        prev = [(P[v, i - 1], -1.0)] if i > 0 else []
        m.row(f"prefix[{_fmt_id(v)},{i}]", [(j, 1.0)] + prev + [(jj, -1.0) for jj, _ in x(v, i)], "==", 0)
    for a, b in st.order_edges:
        for i in range(S - 1):
            m.row(f"order[{_fmt_id(a)},{_fmt_id(b)},{i}]", [(P[b, i], 1.0), (P[a, i], -1.0)], "<=", 0)

    # ---- budgets; suffix sums s_i = d_i + s_{i+1} ----
    m.row("devices", [(u[i, t, d], t * d) for i in range(S) for t, d in st.configs], "<=", K)
    for i in range(S):
        nxt = [(s[i + 1], -1.0)] if i + 1 < S else []
        m.row(f"suffix[{i}]", [(s[i], 1.0)] + nxt + [(u[i, t, d], -float(d)) for t, d in st.configs], "==", 0)
    m.row("microbatches", [(s[0], 1.0)], "<=", N)

    # ---- microbatches in flight y_i = sum_k g[i,k] >= ceil(s_i / d_i) ----
    for i in range(S):
        for k in range(1, st.Y[i]):
            m.row(f"y_order[{i},{k}]", [(g[i, k + 1], 1.0), (g[i, k], -1.0)], "<=", 0)
        ys = [(g[i, k], 1.0) for k in range(1, st.Y[i] + 1)]
        for t, d in st.configs:
            m.row(f"y_link[{i},{t},{d}]", [(jj, d * c) for jj, c in ys] + [(s[i], -1.0)], ">=", 0, enforce=u[i, t, d])

    # ---- memory: sum (k a + b) <= M when y_i >= k ----
    needed = {k: _memory_row_needed(st, k) for k in range(1, max(st.Y) + 1)}
    for i in range(S):
        for k in range(1, st.Y[i] + 1):
            if not needed[k]:
                continue
            terms = []
            for v in V:
                for t, l, j in zs_of.get((v, i), []):
                    o = st.opts[v, t][l]
                    # a term above 1 alone breaks the row; capping it at 2 keeps that and
                    # keeps the numbers small for both backends
                    terms.append((j, min((k * o.a + o.b) / M, 2.0)))
            m.row(f"memory[{i},{k}]", terms, "<=", 1.0, kind="memory", enforce=g[i, k])

    # ---- cut edges ----
    cut_of_slot: dict[int, list[int]] = {i: [] for i in range(S)}
    for a, b, i, j, coefs, side in cut_vars:
        here, other = (a, b) if side == "out" else (b, a)
        terms = [(j, 1.0)] + [(z[here, i, t, l], -cf) for (t, l), cf in coefs.items()]
        terms += [(jj, max(coefs.values())) for jj, _ in x(other, i)]
        m.row(f"cut_{side}[{_fmt_id(a)},{_fmt_id(b)},{i}]", terms, ">=", 0, kind="time")
        cut_of_slot[i].append(j)

    # ---- TPS of each slot: d T >= sum (p + 4 (d-1) w / (N B)) z + cut bytes / B ----
    for i in range(S):
        for t, d in st.configs:
            terms = [(T, float(d))]
            for v in V:
                for l, o in enumerate(st.opts.get((v, t), ())):
                    terms.append((z[v, i, t, l], -(o.p + 4.0 * (d - 1) * o.w / (N * B)) / st.unit))
            terms += [(j, -1.0) for j in cut_of_slot[i]]
            m.row(f"tps[{i},{t},{d}]", terms, ">=", 0, kind="time", enforce=u[i, t, d])

    return _Built(m, st, u, z, g, T, s, P)


def build_model(instance: Instance, restrictions: Restrictions = Restrictions()) -> LinearModel:
    """The backend-neutral model of an instance (see the module docstring).

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        Applied before building (excluded options, max_t, max_d).

    Returns
    -------
    LinearModel
        ``time_unit`` seconds per unit of the objective variable ``T``.
    """
    return _build(_sets(instance, restrictions)).model


def _count(st: _Sets) -> dict[str, int]:
    """Variables and rows of the model for ``st`` without building it."""
    S, V = st.S, st.V
    n_opts = sum(len(o) for o in st.opts.values())  # sum over (v, t) of options
    n_vt = len(st.opts)
    n_cut = 0
    for a, b, c in st.edges:
        for side in ("out", "in"):
            coefs = _cut_coefs(st, a, b, c, side)
            if coefs and max(coefs.values()) > 0:
                n_cut += 1
    nC = len(st.configs)
    nP = len(_ordered_nodes(st)) * (S - 1)
    variables = S * nC + S * n_opts + sum(st.Y) + S + nP + n_cut * S + 1
    binaries = S * nC + S * n_opts + sum(st.Y) + nP
    needed = {k: _memory_row_needed(st, k) for k in range(1, max(st.Y) + 1)}
    rows = len(V)  # assign
    rows += S + (S - 1)  # one_config, used_first
    rows += S  # nonempty
    rows += S * n_vt  # t_link
    rows += nP  # prefix
    rows += len(st.order_edges) * (S - 1)
    rows += 2 + S  # budgets, suffix
    rows += sum(y - 1 for y in st.Y)  # y_order
    rows += S * nC  # y_link
    rows += sum(1 for i in range(S) for k in range(1, st.Y[i] + 1) if needed[k])
    rows += n_cut * S
    rows += S * nC  # tps
    return {"variables": variables, "binaries": binaries, "constraints": rows, "slots": S, "configurations": nC}


def model_size(instance: Instance, restrictions: Restrictions = Restrictions()) -> dict:
    """The MILP's size before solving: ``variables``, ``binaries``, ``constraints``
    (rows), ``slots`` (S) and ``configurations`` ((t, d) pairs).

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> opt = {"id": "v", "timePerSample": 1.0, "parameterSize": 0, "memoryUsageA": 1,
    ...        "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 1, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 1, "nodes": [{"id": 0, "TMPCs": {"1": [opt]}}], "edges": []})
    >>> model_size(inst)["variables"]  # u, z, g, s, T
    5
    """
    return _count(_sets(instance, restrictions))


# --------------------------------------------------------------------------------------
# Bounds of linear expressions (for big-M and for CP-SAT's domains)
# --------------------------------------------------------------------------------------


def _expr_range(m: LinearModel, terms, group_of: dict[int, int]) -> tuple[float, float]:
    lo = hi = 0.0
    grouped: dict[int, list[float]] = {}
    for j, c in terms:
        gid = group_of.get(j)
        if gid is not None:
            grouped.setdefault(gid, []).append(c)
            continue
        var = m.vars[j]
        a, b = c * var.lb, c * var.ub
        lo += min(a, b)
        hi += max(a, b)
    for cs in grouped.values():  # binaries, at most one of them is 1
        lo += min(0.0, min(cs))
        hi += max(0.0, max(cs))
    return lo, hi


def _group_index(m: LinearModel) -> dict[int, int]:
    return {j: gi for gi, grp in enumerate(m.groups) for j in grp}


# --------------------------------------------------------------------------------------
# Completing a solution: the least values of the continuous variables
# --------------------------------------------------------------------------------------


def _complete(m: LinearModel, rows, values: dict[int, float], integral: bool, scale: float = 1.0) -> dict[int, float]:
    """Given values of every binary/integer variable, set each continuous variable to the
    least value its rows allow (rows list (terms, sense, rhs, enforce) in the backend's
    own coefficients; ``scale`` backend units per model unit of a continuous variable,
    ``integral`` for a backend that counts them in integer steps). A continuous variable
    is defined by the rows in which it is the last continuous variable with a positive
    coefficient in a >= row."""
    cont = [j for j, var in enumerate(m.vars) if var.kind == "continuous"]
    pos = {j: k for k, j in enumerate(cont)}
    defining: dict[int, list] = {j: [] for j in cont}
    for terms, sense, rhs, enforce in rows:
        if enforce is not None and values.get(enforce, 0) < 0.5:
            continue
        last = max((j for j, _ in terms if j in pos), key=lambda j: pos[j], default=None)
        if last is None:
            continue
        defining[last].append((terms, sense, rhs))
    out = dict(values)
    for j in cont:
        lb = m.vars[j].lb
        best = lb * scale if not integral else math.floor(lb * scale)  # CP-SAT's domain starts there
        for terms, sense, rhs in defining[j]:
            cj = next(c for jj, c in terms if jj == j)
            rest = sum(c * out[jj] for jj, c in terms if jj != j)
            if sense == ">=" and cj > 0:
                need = (rhs - rest) / cj if not integral else -((rest - rhs) // cj)
                best = max(best, need)
            elif sense == "<=" and cj < 0:
                need = (rest - rhs) / (-cj) if not integral else -((rhs - rest) // cj)
                best = max(best, need)
        out[j] = best
    return out


# --------------------------------------------------------------------------------------
# CP-SAT
# --------------------------------------------------------------------------------------


@dataclass
class _Compiled:
    backend: str
    rows: list  # (terms, sense, rhs, enforce) in the backend's coefficients
    scale: float  # backend objective units per model time unit
    error: float  # worst-case absolute error on the objective, seconds


def _cpsat_rows(m: LinearModel, memory_scale: int, memory_terms: int) -> list:
    """The rows in CP-SAT's integers. A memory row (at most ``memory_terms`` binaries set)
    becomes sum floor(c Rm) z <= Rm rhs + memory_terms with the integer Rm =
    ``memory_scale``: every plan with memory <= M passes (each computed floor is at most
    c Rm + 1, float error included) and every plan that passes has memory
    <= M (1 + 3 memory_terms / Rm) (each computed floor is at least c Rm - 2)."""
    out = []
    for r in m.rows:
        if r.kind == "exact":
            terms = [(j, int(c)) for j, c in r.terms]
            if any(c != int(c) for _, c in r.terms) or r.rhs != int(r.rhs):
                raise InternalError(f"cpsat: row {r.name} has non-integer data")
            rhs = int(r.rhs)
        elif r.kind == "time":
            # continuous variables are counted in steps already: their (integer)
            # coefficient is kept; binaries' coefficients are scaled and rounded
            if any(m.vars[j].kind == "continuous" and c != int(c) for j, c in r.terms):
                raise InternalError(f"cpsat: row {r.name} has a non-integer coefficient on a continuous variable")
            terms = [(j, int(round(c * CPSAT_STEPS_PER_UNIT)) if m.vars[j].kind != "continuous" else int(c))
                     for j, c in r.terms]
            rhs = int(round(r.rhs * CPSAT_STEPS_PER_UNIT))
        elif r.kind == "memory":
            if r.sense != "<=" or any(c < 0 or m.vars[j].kind != "binary" for j, c in r.terms):
                raise InternalError(f"cpsat: memory row {r.name} must be a <= row of binaries with c >= 0")
            terms = [(j, int(math.floor(c * memory_scale))) for j, c in r.terms]
            rhs = int(math.floor(r.rhs * memory_scale)) + memory_terms
        else:
            raise InternalError(f"unknown row kind {r.kind}")
        terms = [(j, c) for j, c in terms if c != 0]
        out.append((terms, r.sense, rhs, r.enforce, r.name))
    return out


def _time_row_terms_max(m: LinearModel, st: _Sets) -> int:
    # rounded terms that can be active in one TPS row: one z per node of the slot, and one
    # rounded coefficient per cut edge end (inside cut_out / cut_in)
    return st.n + len(st.edges)


def _solve_cpsat(built: _Built, time_limit, threads, write_model, hint_values) -> dict:
    from ortools.sat.python import cp_model

    m, st = built.model, built.sets
    # Rm = 4 n / MEMORY_RTOL, an exact integer: admitted plans exceed M by less than
    # 3 n / Rm = 0.75 MEMORY_RTOL relative (see _cpsat_rows)
    memory_scale = int(round(4 * max(1, st.n) / MEMORY_RTOL))
    crow = _cpsat_rows(m, memory_scale, max(1, st.n))
    cm = cp_model.CpModel()
    cv = []
    for var in m.vars:
        if var.kind == "continuous":
            lo = math.floor(var.lb * CPSAT_STEPS_PER_UNIT)
            hi = math.ceil(var.ub * CPSAT_STEPS_PER_UNIT) + 2 * (_time_row_terms_max(m, st) + 2)
            cv.append(cm.new_int_var(lo, hi, var.name))
        elif var.kind == "binary":
            cv.append(cm.new_bool_var(var.name))
        else:
            cv.append(cm.new_int_var(int(var.lb), int(var.ub), var.name))
    for terms, sense, rhs, enforce, name in crow:
        expr = cp_model.LinearExpr.weighted_sum([cv[j] for j, _ in terms], [c for _, c in terms])
        if sense == "<=":
            ct = cm.add(expr <= rhs)
        elif sense == ">=":
            ct = cm.add(expr >= rhs)
        else:
            ct = cm.add(expr == rhs)
        ct.with_name(name)
        if enforce is not None:
            ct.only_enforce_if(cv[enforce])
    cm.minimize(cv[m.objective])
    if hint_values:
        for j, val in hint_values.items():
            if m.vars[j].kind == "continuous":
                cm.add_hint(cv[j], int(math.ceil(val * CPSAT_STEPS_PER_UNIT - 1e-9)))
            else:
                cm.add_hint(cv[j], int(round(val)))
    if write_model is not None:
        _write(write_model, lambda path: Path(path).write_text(str(cm.proto), encoding="utf-8"))

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = threads
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.log_search_progress = False
    # CP-SAT 9.15 can certify a wrong optimum after its at-most-one + linear inclusion
    # presolve (google/or-tools#5293; seen here on a 4-node instance whose memory rows
    # have coefficients near 1e9). Switching that presolve step off avoids it.
    solver.parameters.presolve_inclusion_work_limit = 0
    # the linear relaxation of every row (indicators included) in the LP-based search:
    # on bert32a100 with K = 4 this proves optimality in about 1 s instead of > 30 s
    solver.parameters.linearization_level = 2
    code = solver.solve(cm)
    status = {
        cp_model.OPTIMAL: Status.OPTIMAL,
        cp_model.FEASIBLE: Status.FEASIBLE,
        cp_model.INFEASIBLE: Status.INFEASIBLE,
        cp_model.UNKNOWN: Status.UNKNOWN,
    }.get(code)
    if status is None:
        raise InternalError(f"cpsat: the model is invalid ({solver.status_name(code)}): {cm.validate()}")
    values = None
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        values = {j: solver.value(cv[j]) for j, var in enumerate(m.vars) if var.kind != "continuous"}
        raw_obj = solver.objective_value
    else:
        raw_obj = None
    bound = solver.best_objective_bound if status != Status.INFEASIBLE else None
    rows4 = [(t, s, r, e) for t, s, r, e, _ in crow]
    steps = CPSAT_STEPS_PER_UNIT
    error = ((_time_row_terms_max(m, st)) / 2.0 + 1.0) * m.time_unit / steps
    return {
        "status": status,
        "values": values,
        "rows": rows4,
        "integral": True,
        "scale": steps,
        "solver_objective": raw_obj,
        "solver_bound": bound,
        "error": error,
        "stats": {"wall_time": solver.wall_time},
    }


# --------------------------------------------------------------------------------------
# CBC through PuLP
# --------------------------------------------------------------------------------------


def _big_m_rows(m: LinearModel) -> list:
    """Rows with indicators rewritten as big-M rows (for a MIP solver without indicators).
    Returns (terms, sense, rhs, enforce, name); ``enforce`` is kept for the completion."""
    group_of = _group_index(m)
    out = []
    for r in m.rows:
        terms, rhs = list(r.terms), r.rhs
        if r.enforce is not None:
            lo, hi = _expr_range(m, [(j, c) for j, c in terms if j != r.enforce], group_of)
            # rest + c_e e >= rhs - big (1 - e): at e = 1 the row itself, at e = 0 slack
            # when big >= rhs - min(rest); big = 0 keeps the row as it is.
            if r.sense == ">=":
                big = rhs - lo
                if big > 0:
                    terms = terms + [(r.enforce, -big)]
                    rhs = rhs - big
            elif r.sense == "<=":
                big = hi - rhs
                if big > 0:
                    terms = terms + [(r.enforce, big)]
                    rhs = rhs + big
            else:
                raise InternalError(f"indicator equality row {r.name} is not supported")
        merged: dict[int, float] = {}
        for j, c in terms:
            merged[j] = merged.get(j, 0.0) + c
        out.append(([(j, c) for j, c in merged.items() if c != 0], r.sense, rhs, r.enforce, r.name))
    return out


def _lp_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name.replace("[", "_").replace("]", "").replace(",", "_"))


def _float_backend_result(status, values, rows, raw_obj, bound, wall) -> dict:
    """The answer of a backend that solves the big-M rows in floating point (CBC, MPSolver):
    unscaled (scale 1, no stated scaling error)."""
    return {
        "status": status,
        "values": values,
        "rows": [(t, s, r, e) for t, s, r, e, _ in rows],
        "integral": False,
        "scale": 1.0,
        "solver_objective": raw_obj,
        "solver_bound": bound,
        "error": 0.0,
        "stats": {"wall_time": wall},
    }


def _solve_cbc(built: _Built, time_limit, threads, write_model, hint_values) -> dict:
    import pulp

    m = built.model
    rows = _big_m_rows(m)
    prob = pulp.LpProblem("piper", pulp.LpMinimize)
    pv = []
    for var in m.vars:
        cat = {"binary": pulp.LpBinary, "integer": pulp.LpInteger, "continuous": pulp.LpContinuous}[var.kind]
        if var.kind == "binary":
            pv.append(prob.add_variable(_lp_name(var.name), cat=cat))
        else:
            pv.append(prob.add_variable(_lp_name(var.name), lowBound=var.lb, upBound=var.ub, cat=cat))
    prob += pulp.LpAffineExpression([(pv[m.objective], 1.0)]), "tps"
    for terms, sense, rhs, _, name in rows:
        expr = pulp.LpAffineExpression([(pv[j], c) for j, c in terms])
        op = {"<=": pulp.LpConstraintLE, ">=": pulp.LpConstraintGE, "==": pulp.LpConstraintEQ}[sense]
        prob.addConstraint(pulp.LpConstraint(expr, op, rhs=rhs), name=_lp_name(name))
    warm = False
    if hint_values:
        for j, val in hint_values.items():
            pv[j].setInitialValue(val)
        warm = True
    if write_model is not None:
        _write(write_model, lambda path: prob.writeLP(str(path)))

    with tempfile.TemporaryDirectory(prefix="piper-cbc-") as tmp:
        log_path = os.path.join(tmp, "cbc.log")
        with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled CBC's name, not the binary
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.PULP_CBC_CMD(
                msg=False,
                timeLimit=time_limit,
                threads=threads,
                gapRel=0.0,
                gapAbs=CBC_GAP_ABS,
                warmStart=warm,
                logPath=log_path,
                # CBC 2.10's preprocessing discards a MIP start ("mipstart values could not
                # be used"), so with a hint it is switched off
                options=list(CBC_OPTIONS) + (["preprocess off"] if warm else []),
            )
        t0 = time.perf_counter()
        prob.solve(solver)
        wall = time.perf_counter() - t0
        log = Path(log_path).read_text(encoding="utf-8", errors="replace") if os.path.exists(log_path) else ""

    if prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionOptimal:
        status = Status.OPTIMAL
    elif prob.status == pulp.LpStatusOptimal and prob.sol_status == pulp.LpSolutionIntegerFeasible:
        status = Status.FEASIBLE
    elif prob.status == pulp.LpStatusInfeasible:
        status = Status.INFEASIBLE
    elif prob.status == pulp.LpStatusNotSolved:
        status = Status.UNKNOWN
    else:
        raise InternalError(f"cbc: unexpected outcome {pulp.LpStatus.get(prob.status)} / sol_status {prob.sol_status}")
    if status == Status.INFEASIBLE and time_limit is not None and re.search(r"Stopped on time", log):
        status = Status.UNKNOWN  # never claim a proof the solver did not finish
    values = None
    raw_obj = bound = None
    mb = re.search(r"Lower bound:\s*([-+0-9.eE]+)", log)
    if mb:
        bound = float(mb.group(1))
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        values = {}
        for j, var in enumerate(m.vars):
            if var.kind == "continuous":
                continue
            val = pv[j].varValue
            if val is None:
                raise InternalError(f"cbc: no value for {var.name}")
            values[j] = float(round(val))
        raw_obj = pv[m.objective].varValue
        if status == Status.OPTIMAL and bound is None:
            bound = raw_obj - CBC_GAP_ABS
    return _float_backend_result(status, values, rows, raw_obj, bound, wall)


# --------------------------------------------------------------------------------------
# SCIP and HiGHS through OR-Tools' MPSolver (the same big-M rows as CBC)
# --------------------------------------------------------------------------------------

#: MPSolver backends: our name -> (OR-Tools solver id, solver-specific parameters that
#: tighten feasibility so that a plan fits memory within MEMORY_RTOL of M, and ask for
#: a zero relative gap).
MPSOLVER_BACKENDS = {
    "scip": ("SCIP", "numerics/feastol = 1e-9\nlimits/gap = 0\nlimits/absgap = 1e-7\n"),
}
# (HiGHS is in OR-Tools too, but MPSolver passes it no parameters: its default 1e-4
# relative gap would make "optimal" mean "within 0.01%", so it is not offered.)


def _solve_mpsolver(built: _Built, time_limit, threads, write_model, hint_values, backend: str) -> dict:
    from ortools.linear_solver import pywraplp

    m = built.model
    solver_id, params = MPSOLVER_BACKENDS[backend]
    solver = pywraplp.Solver.CreateSolver(solver_id)
    if solver is None:
        raise InputError(f"{backend}: this OR-Tools build has no {solver_id} solver")
    rows = _big_m_rows(m)
    mv = []
    for var in m.vars:
        if var.kind == "continuous":
            mv.append(solver.NumVar(var.lb, var.ub, _lp_name(var.name)))
        else:
            mv.append(solver.IntVar(var.lb, var.ub, _lp_name(var.name)))
    inf = solver.infinity()
    for terms, sense, rhs, _, name in rows:
        lo, hi = {"<=": (-inf, rhs), ">=": (rhs, inf), "==": (rhs, rhs)}[sense]
        ct = solver.Constraint(lo, hi, _lp_name(name))
        for j, c in terms:
            ct.SetCoefficient(mv[j], c)
    obj = solver.Objective()
    obj.SetCoefficient(mv[m.objective], 1.0)
    obj.SetMinimization()
    if hint_values:
        pairs = sorted(hint_values.items())
        solver.SetHint([mv[j] for j, _ in pairs], [float(v) for _, v in pairs])
    if write_model is not None:
        _write(write_model, lambda path: Path(path).write_text(solver.ExportModelAsLpFormat(False), encoding="utf-8"))
    if time_limit is not None:
        solver.SetTimeLimit(int(math.ceil(time_limit * 1000)))
    solver.SetNumThreads(threads)
    if not solver.SetSolverSpecificParametersAsString(params):
        raise InternalError(f"{backend}: parameters not accepted: {params!r}")
    t0 = time.perf_counter()
    code = solver.Solve()
    wall = time.perf_counter() - t0
    status = {
        pywraplp.Solver.OPTIMAL: Status.OPTIMAL,
        pywraplp.Solver.FEASIBLE: Status.FEASIBLE,
        pywraplp.Solver.INFEASIBLE: Status.INFEASIBLE,
        pywraplp.Solver.NOT_SOLVED: Status.UNKNOWN,
    }.get(code)
    if status is None:
        raise InternalError(f"{backend}: the solver ended abnormally (MPSolver status {code})")
    values = raw_obj = None
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        values = {j: float(round(mv[j].solution_value())) for j, var in enumerate(m.vars) if var.kind != "continuous"}
        raw_obj = obj.Value()
    bound = obj.BestBound() if status != Status.INFEASIBLE else None
    return _float_backend_result(status, values, rows, raw_obj, bound, wall)


# --------------------------------------------------------------------------------------
# Plans <-> variable values
# --------------------------------------------------------------------------------------


def _extract_plan(built: _Built, values: dict[int, float]) -> Plan:
    st = built.sets
    stages = []
    for i in range(st.S):
        conf = [(t, d) for (ii, t, d), j in built.u.items() if ii == i and values[j] > 0.5]
        if not conf:
            continue
        t, d = conf[0]
        nodes, options = [], {}
        for v in st.V:
            for tt in st.d_of_t:
                for l, o in enumerate(st.opts.get((v, tt), ())):
                    if values[built.z[v, i, tt, l]] > 0.5:
                        nodes.append(v)
                        options[v] = o.id
        stages.append(Stage(tuple(nodes), d, t, options))
    return Plan(tuple(stages))


def _write(path, write) -> None:
    try:
        write(path)
    except OSError as exc:
        raise InputError(f"cannot write the model to {path}: {exc.strerror or exc}") from None


def _hint_values(built: _Built, plan: Plan) -> tuple[dict[int, float] | None, str]:
    """Values of every variable for ``plan`` (None and the reason when it does not map)."""
    st, m = built.sets, built.model
    ev = evaluate(st.inst, plan)
    if not ev.valid:
        return None, f"not a valid plan for the instance as restricted: {ev.violations[0]}"
    if len(plan.stages) > st.S:
        return None, f"the hint has {len(plan.stages)} stages, more than the {st.S} slots"
    values = {j: 0.0 for j, var in enumerate(m.vars) if var.kind != "continuous"}
    s = 0
    suffix = []
    for stg in reversed(plan.stages):
        s += stg.d
        suffix.append(s)
    suffix.reverse()
    for i, stg in enumerate(plan.stages):
        if (i, stg.t, stg.d) not in built.u:
            return None, f"stage {i} has (t, d) = ({stg.t}, {stg.d}), not a configuration of the model"
        values[built.u[i, stg.t, stg.d]] = 1.0
        for v in stg.nodes:
            ids = [o.id for o in st.opts.get((v, stg.t), ())]
            if stg.options.get(v) not in ids:
                return None, f"node {v} has no option {stg.options.get(v)!r} for t = {stg.t} in the model"
            values[built.z[v, i, stg.t, ids.index(stg.options[v])]] = 1.0
        y = -(-suffix[i] // stg.d)
        for k in range(1, min(y, st.Y[i]) + 1):
            values[built.g[i, k]] = 1.0
        values[built.s[i]] = float(suffix[i])
        for v in stg.nodes:
            for j in range(i, st.S - 1):
                if (v, j) in built.P:
                    values[built.P[v, j]] = 1.0
    return values, ""


# --------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------


def solve_milp(
    instance: Instance,
    restrictions: Restrictions = Restrictions(),
    *,
    backend: str = "cpsat",
    time_limit: float | None = None,
    threads: int | None = None,
    write_model: str | Path | None = None,
    hint: Plan | None = None,
    force: bool = False,
    max_variables: int = DEFAULT_MAX_VARIABLES,
) -> Solution:
    """Solve the Piper problem exactly with the MILP on one backend.

    Parameters
    ----------
    instance : Instance
    restrictions : Restrictions
        The ablations (no data / tensor parallelism, excluded options).
    backend : {"cpsat", "cbc", "scip"}
        OR-Tools CP-SAT, CBC through PuLP's bundled binary, or SCIP through OR-Tools'
        MPSolver (the same big-M rows as CBC).
    time_limit : float, optional
        Seconds; without it the backend runs until it proves optimality.
    threads : int, optional
        Solver threads (default :data:`DEFAULT_THREADS`).
    write_model : path, optional
        Write the model as solved: the CP-SAT model proto in text, or an LP file (CBC,
        SCIP).
    hint : Plan, optional
        A warm start (e.g. the DP's plan). Without it the MILP runs independently.
    force : bool
        Solve even above ``max_variables``.
    max_variables : int
        The size guard.

    Returns
    -------
    Solution
        ``method`` = backend; ``status`` optimal (proven), feasible (limit hit with a
        plan; ``bound`` and gap given), infeasible (proven) or unknown (limit hit, no
        plan). ``objective`` is the model's value of the plan (seconds), ``bound`` a
        proven lower bound on the optimal TPS (already lowered by the scaling error);
        ``info`` holds ``variables``, ``constraints``, ``binaries``, ``scaling_error``
        (worst-case absolute error in seconds of ``objective`` against the evaluator's
        TPS), ``gap``, ``solver_objective`` and ``solver_bound`` (in seconds, as the
        backend reported them) and ``hint``.

    Raises
    ------
    SizeLimitError
        Above ``max_variables`` variables, unless ``force``.
    InputError
        An unknown backend or a bad setting.
    InternalError
        A returned plan that the evaluator rejects, or whose TPS differs from the model's
        value by more than the stated error.

    Examples
    --------
    >>> from piper_ilp.instance import instance_from_dict
    >>> opt = {"id": "v", "timePerSample": 2.0, "parameterSize": 0, "memoryUsageA": 1,
    ...        "memoryUsageB": 0, "syncTimeFw": {}, "syncTimeBw": {}}
    >>> inst = instance_from_dict({"maxDevices": 2, "maxMemoryPerDevice": 10, "bandwidth": 1,
    ...     "mbsInBatch": 2, "nodes": [{"id": 0, "TMPCs": {"1": [opt]}}], "edges": []})
    >>> sol = solve_milp(inst, backend="cbc")
    >>> sol.status.value, sol.tps, sol.plan.stages[0].d
    ('optimal', 1.0, 2)

    References
    ----------
    J. Tarnawski, D. Narayanan, A. Phanishayee. Piper: Multidimensional Planner for DNN
    Parallelization. NeurIPS 2021.
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown MILP backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if time_limit is not None and not (time_limit >= 0 and math.isfinite(time_limit)):
        raise InputError(f"time limit must be a number of seconds >= 0, got {time_limit!r}")
    threads = DEFAULT_THREADS if threads is None else threads
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a whole number >= 1, got {threads!r}")
    t0 = time.perf_counter()
    st = _sets(instance, restrictions)
    size = _count(st)
    if size["variables"] > max_variables and not force:
        raise SizeLimitError(
            f"{instance.source}: the MILP would have {size['variables']} variables "
            f"({size['constraints']} constraints), above the limit of {max_variables}; "
            "use the DP (--method dp), or pass --force with a --time-limit to get a plan and a bound"
        )
    built = _build(st)
    m = built.model
    info: dict[str, Any] = {
        "variables": len(m.vars),
        "binaries": sum(1 for v in m.vars if v.kind == "binary"),
        "constraints": len(m.rows),
        "slots": st.S,
        "configurations": len(st.configs),
        "time_unit": m.time_unit,
        "threads": threads,
        "time_limit": time_limit,
    }
    if m.trivially_infeasible:
        sol = Solution(backend, Status.INFEASIBLE, seconds=time.perf_counter() - t0,
                       message=f"infeasible before solving: {m.trivially_infeasible}", info=info)
        info["scaling_error"] = 0.0
        return sol

    if time_limit == 0:
        info["scaling_error"] = 0.0
        return Solution(backend, Status.UNKNOWN, seconds=time.perf_counter() - t0,
                        message="time limit 0: not solved", info=info)

    hint_values = None
    if hint is not None:
        hint_values, why = _hint_values(built, hint)
        info["hint"] = "used" if hint_values is not None else f"ignored: {why}"

    if backend == "cpsat":
        solve = _solve_cpsat
    elif backend == "cbc":
        solve = _solve_cbc
    else:
        solve = functools.partial(_solve_mpsolver, backend=backend)
    if hint_values is not None:
        # a complete hint also sets the continuous variables to their least values
        rows = [(r.terms, r.sense, r.rhs, r.enforce) for r in m.rows]
        hint_values = _complete(m, rows, hint_values, integral=False)
    res = solve(built, time_limit, threads, write_model, hint_values)
    seconds = time.perf_counter() - t0
    unit_s = m.time_unit / res["scale"]  # seconds per backend objective unit
    err = res["error"]
    info["scaling_error"] = err
    info["solver_seconds"] = res["stats"]["wall_time"]
    status = res["status"]
    info["solver_objective"] = None if res["solver_objective"] is None else res["solver_objective"] * unit_s
    info["solver_bound"] = None if res["solver_bound"] is None else res["solver_bound"] * unit_s

    plan = objective = bound = None
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        values = _complete(m, res["rows"], res["values"], integral=res["integral"], scale=res["scale"])
        plan = _extract_plan(built, values)
        objective = values[m.objective] * unit_s
        if status == Status.OPTIMAL and abs(objective - info["solver_objective"]) > err + 1e-6 * abs(objective) + CBC_GAP_ABS * m.time_unit:
            # (CBC writes its values with about 8 significant digits, hence the 1e-6)
            raise InternalError(
                f"{backend}: claimed optimum {info['solver_objective']!r} but its plan's model value is {objective!r}"
            )
    if hint_values is not None:
        # The hint is a valid plan (checked when it was encoded): a backend that calls the
        # model infeasible contradicts it, and one that stops at its limit with nothing
        # better (or nothing at all: presolve alone can use up a short limit) returns it.
        hint_objective = hint_values[m.objective] * m.time_unit
        if status == Status.INFEASIBLE:
            raise InternalError(f"{backend}: claims the model infeasible, but the hint is a valid plan of it")
        if status == Status.UNKNOWN or (status == Status.FEASIBLE and objective > hint_objective):
            status, plan, objective = Status.FEASIBLE, hint, hint_objective
            info["plan_from"] = "hint"  # the backend found nothing better in its time
    # a proven lower bound on the true optimum: the solver's, less the scaling error, and
    # never below T_low, which every plan obeys
    if status in (Status.OPTIMAL, Status.FEASIBLE, Status.UNKNOWN):
        bound = st.t_low
        if info["solver_bound"] is not None and math.isfinite(info["solver_bound"]):
            bound = max(bound, info["solver_bound"] - err)
        if objective is not None:
            bound = min(bound, objective)
    message = {
        Status.OPTIMAL: "optimal (proven by the backend)",
        Status.FEASIBLE: "time limit reached with a plan; optimality not proven",
        Status.INFEASIBLE: "proven infeasible: no valid plan exists",
        Status.UNKNOWN: "time limit reached with no plan and no proof",
    }[status]
    sol = Solution(backend, status, plan=plan, objective=objective, bound=bound, seconds=seconds, message=message, info=info)
    sol = checked_solution(instance, sol, tolerance=1e-9, absolute=err, restrictions=restrictions)
    info["gap"] = sol.gap
    return sol
