"""The formulation in a backend's units (:func:`scale`): time in a unit set from an upper
bound on the optimum, under a cutoff, and the memory rows relaxed or restricted around M
(cost model sec. 7); plus what the backends share to write the rows (:func:`big_m_rows`,
:func:`complete`, :func:`lp_name`).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

from piper_ilp.milp.model import Formulation, LinearModel

__all__ = [
    "Memory",
    "TimeScale",
    "ScaledRow",
    "ScaledModel",
    "scale",
    "objective_rows",
    "big_m_rows",
    "complete",
    "lp_name",
]

#: The objective's reference value (an upper bound on the optimum) in model units.
UNITS_PER_REFERENCE = 1000.0

#: Relaxed memory rows read sum (k a + b)/M <= 1 + RELAX_MARGIN (covers the rounding of
#: the coefficients; a backend's own feasibility tolerance only relaxes further).
RELAX_MARGIN = 1e-9

#: Restricted memory rows read sum (k a + b)/M <= 1 - RESTRICT_MARGIN (well above any
#: backend's feasibility tolerance, 1e-9, so its plans fit M exactly).
RESTRICT_MARGIN = 1e-7

#: Capped time coefficients sit this factor above the most an admitted plan can pay.
CAP_FACTOR = 1.0 + 1e-3


class Memory(str, enum.Enum):
    """How the memory rows bracket the contract's ``memory <= M`` (cost model sec. 7).

    Attributes
    ----------
    RELAX
        Rows read sum (y a + b) / M <= 1 + :data:`RELAX_MARGIN`: every plan whose memory
        is <= M passes, so the backend's bound is a lower bound on the true optimum.
    RESTRICT
        Rows read sum (y a + b) / M <= 1 - :data:`RESTRICT_MARGIN`: a backend's plan fits
        M exactly, whatever its feasibility tolerance.
    """

    RELAX = "relax"
    RESTRICT = "restrict"


@dataclass(frozen=True)
class TimeScale:
    """The time scale of one solve.

    Attributes
    ----------
    unit : float
        Seconds per model unit.
    t_ub : float
        The cutoff: every plan of interest has a value (TPS or batch time) <= ``t_ub``
        seconds.
    """

    unit: float
    t_ub: float

    @classmethod
    def around(cls, reference: float, t_ub: float) -> "TimeScale":
        """The scale that puts ``reference`` seconds at :data:`UNITS_PER_REFERENCE` units.

        Parameters
        ----------
        reference : float
            An upper bound on the optimum, in seconds (a unit of 1 s when it is not > 0).
        t_ub : float
            The cutoff, in seconds.

        Returns
        -------
        TimeScale

        Examples
        --------
        >>> TimeScale.around(2.5, 3.0)
        TimeScale(unit=0.0025, t_ub=3.0)
        """
        unit = reference / UNITS_PER_REFERENCE if reference > 0 else 1.0
        return cls(unit, t_ub)


@dataclass
class ScaledRow:
    """A row in model units (or a backend's own, e.g. CP-SAT's integers).

    Attributes
    ----------
    terms : list of (int, float)
        (variable index, coefficient).
    sense : str
        ``"<="``, ``">="`` or ``"=="``.
    rhs : float
    enforce : int or None
        The indicator binary that switches the row on, or None (always on).
    name : str
        As in the model (``tps[2,1,4]``).
    kind : str
        As in the model: ``"time"``, ``"memory"`` or ``"exact"``.
    """

    terms: list[tuple[int, float]]
    sense: str
    rhs: float
    enforce: int | None
    name: str
    kind: str


@dataclass
class ScaledModel:
    """The formulation in model units, ready for a backend (:func:`scale` builds it).

    Attributes
    ----------
    form : Formulation
        The formulation it came from.
    scale : TimeScale
    memory : Memory
        How the memory rows bracket M.
    lb, ub : list of float
        The variables' bounds (continuous ones in model units, capped under the cutoff).
    rows : list of ScaledRow
        Time rows in model units; memory rows in fractions of M (unrounded, so a backend
        that rounds them itself can), with the bracketed right-hand side.
    capped : int
        How many time coefficients were capped under the cutoff.
    """

    form: Formulation
    scale: TimeScale
    memory: Memory
    lb: list[float]
    ub: list[float]
    rows: list[ScaledRow]
    capped: int

    @property
    def model(self) -> LinearModel:
        """The formulation's linear model (variables, rows, objective)."""
        return self.form.model

    @property
    def memory_rhs(self) -> float:
        """The memory rows' right-hand side: 1 + RELAX_MARGIN or 1 - RESTRICT_MARGIN."""
        return 1.0 + RELAX_MARGIN if self.memory == Memory.RELAX else 1.0 - RESTRICT_MARGIN

    def seconds(self, units: float) -> float:
        """``units`` model units in seconds."""
        return units * self.scale.unit


def objective_rows(form: Formulation) -> int:
    """How many rows' feasibility tolerances can add up in the objective.

    Parameters
    ----------
    form : Formulation

    Returns
    -------
    int
        1 for the TPS; for the batch time (cost model sec. 9) N + 2 S + 1: N - 1 for T,
        one per slot for tau and for L, one for the sum, and one to spare.
    """
    st = form.sets
    return st.inst.N + 2 * st.S + 1 if st.batch else 1


def scale(form: Formulation, ts: TimeScale, memory: Memory) -> ScaledModel:
    """The formulation in the units of ``ts``, with memory bracketed as ``memory``.

    A backend solves in units where the reference value (an upper bound on the optimum:
    first the largest possible TPS, then a plan's own) is :data:`UNITS_PER_REFERENCE`,
    under the cutoff ``ts.t_ub`` on the objective. For the batch time (cost model sec. 9)
    the cutoff bounds the rest too: T_batch >= N max_i TPS_i (each d_i TPS_i, on some
    path, is >= TPS_i), so T <= t_ub / N, and every tau_i, L_i <= T_batch <= t_ub. Under
    the cutoff, a time coefficient above what any admitted plan can pay is capped at
    :data:`CAP_FACTOR` times that (the binary it multiplies still cannot be 1), so the
    numbers of every row stay within a few orders of magnitude of the optimum.

    Parameters
    ----------
    form : Formulation
    ts : TimeScale
        The unit and the cutoff.
    memory : Memory
        Relaxed (a valid lower bound) or restricted (plans that fit M exactly).

    Returns
    -------
    ScaledModel
    """
    m = form.model
    u = ts.unit
    t_ub_units = ts.t_ub / u
    batch = form.sets.batch
    t_cap = t_ub_units / form.sets.inst.N * CAP_FACTOR if batch else t_ub_units
    latency = set(form.latency)
    # the most any cut variable can matter: above max_d * (the most T can be) a single
    # term breaks every tps row of its slot
    cont_cap = form.sets.max_d * t_cap * CAP_FACTOR
    lb, ub = [], []
    for j, var in enumerate(m.vars):
        if var.kind != "continuous":
            lb.append(var.lb)
            ub.append(var.ub)
        elif j == m.objective:
            lb.append(min(var.lb, ts.t_ub) / u)
            ub.append(min(var.ub, ts.t_ub) / u)
        elif batch and j == form.T:
            lb.append(min(var.lb / u, t_cap))
            ub.append(min(var.ub / u, t_cap))
        elif j in latency:
            lb.append(var.lb / u)
            ub.append(min(var.ub / u, t_ub_units * CAP_FACTOR))
        else:
            lb.append(var.lb / u)
            ub.append(min(var.ub / u, cont_cap))
    rows, capped = [], 0
    for r in m.rows:
        if r.kind == "time":
            # continuous coefficients are dimensionless (T's d, a cut variable's 1); the
            # binaries' coefficients are seconds. A binary whose cost alone exceeds the
            # most the row's positive side can reach cannot be 1: cap it just above that.
            reach = math.fsum(
                c * ub[j] for j, c in r.terms if m.vars[j].kind == "continuous" and c > 0
            )
            cap = reach * CAP_FACTOR
            terms = []
            for j, c in r.terms:
                if m.vars[j].kind == "continuous":
                    terms.append((j, c))
                    continue
                cu = c / u
                if abs(cu) > cap:
                    cu = math.copysign(cap, cu)
                    capped += 1
                terms.append((j, cu))
            rows.append(ScaledRow(terms, r.sense, r.rhs / u, r.enforce, r.name, r.kind))
        elif r.kind == "memory":
            rhs = 1.0 + RELAX_MARGIN if memory == Memory.RELAX else 1.0 - RESTRICT_MARGIN
            rows.append(ScaledRow(list(r.terms), r.sense, rhs, r.enforce, r.name, r.kind))
        else:
            rows.append(ScaledRow(list(r.terms), r.sense, r.rhs, r.enforce, r.name, r.kind))
    return ScaledModel(form, ts, memory, lb, ub, rows, capped)


def _expr_range(sm: ScaledModel, terms, group_of: dict[int, int]) -> tuple[float, float]:
    lo = hi = 0.0
    grouped: dict[int, list[float]] = {}
    for j, c in terms:
        gid = group_of.get(j)
        if gid is not None:
            grouped.setdefault(gid, []).append(c)
            continue
        a, b = c * sm.lb[j], c * sm.ub[j]
        lo += min(a, b)
        hi += max(a, b)
    for cs in grouped.values():  # binaries, at most one of them is 1
        lo += min(0.0, min(cs))
        hi += max(0.0, max(cs))
    return lo, hi


def big_m_rows(sm: ScaledModel) -> list[ScaledRow]:
    """The rows with indicators rewritten as big-M rows, for a MIP solver without
    indicators (CBC).

    Each big-M is the tightest that the variables' bounds and the model's groups (sets of
    binaries of which at most one is 1) allow; terms on one variable are merged.

    Parameters
    ----------
    sm : ScaledModel

    Returns
    -------
    list of ScaledRow
        One per row of ``sm``, ``enforce`` kept (for :func:`complete`).

    Raises
    ------
    ValueError
        An equality row with an indicator (the formulation writes none).
    """
    group_of = {j: gi for gi, grp in enumerate(sm.model.groups) for j in grp}
    out = []
    for r in sm.rows:
        terms, rhs = list(r.terms), r.rhs
        if r.enforce is not None:
            lo, hi = _expr_range(sm, [(j, c) for j, c in terms if j != r.enforce], group_of)
            # rest + c_e e >= rhs - big (1 - e): at e = 1 the row itself, at e = 0 slack
            if r.sense == ">=":
                big = rhs - lo
                if big > 0:
                    terms.append((r.enforce, -big))
                    rhs -= big
            elif r.sense == "<=":
                big = hi - rhs
                if big > 0:
                    terms.append((r.enforce, big))
                    rhs += big
            else:
                raise ValueError(f"indicator equality row {r.name} is not supported")
        merged: dict[int, float] = {}
        for j, c in terms:
            merged[j] = merged.get(j, 0.0) + c
        out.append(
            ScaledRow(
                [(j, c) for j, c in merged.items() if c != 0],
                r.sense,
                rhs,
                r.enforce,
                r.name,
                r.kind,
            )
        )
    return out


def complete(
    m: LinearModel, rows, values: dict[int, float], lb: list[float], integral: bool
) -> dict[int, float]:
    """Complete a hint: each continuous variable at the least value its rows allow.

    A continuous variable is defined by the rows (switched on by ``values``) in which it
    is the last continuous variable, in the model's order.

    Parameters
    ----------
    m : LinearModel
    rows : list of ScaledRow
        The rows in the backend's own coefficients.
    values : dict
        A value for every binary and integer variable, by index.
    lb : list of float
        The backend's lower bounds.
    integral : bool
        The backend counts continuous variables in integer steps (CP-SAT): each is
        rounded up.

    Returns
    -------
    dict
        ``values`` with every continuous variable added.

    Raises
    ------
    KeyError
        ``values`` lacks a binary or integer variable that a row uses.
    """
    cont = [j for j, var in enumerate(m.vars) if var.kind == "continuous"]
    pos = {j: k for k, j in enumerate(cont)}
    defining: dict[int, list] = {j: [] for j in cont}
    for r in rows:
        if r.enforce is not None and values.get(r.enforce, 0) < 0.5:
            continue
        last = max((j for j, _ in r.terms if j in pos), key=lambda j: pos[j], default=None)
        if last is not None:
            defining[last].append(r)
    out = dict(values)
    for j in cont:
        best = lb[j]
        for r in defining[j]:
            cj = next(c for jj, c in r.terms if jj == j)
            rest = sum(c * out[jj] for jj, c in r.terms if jj != j)
            if r.sense == ">=" and cj > 0:
                need = (r.rhs - rest) / cj if not integral else -((rest - r.rhs) // cj)
                best = max(best, need)
            elif r.sense == "<=" and cj < 0:
                need = (rest - r.rhs) / (-cj) if not integral else -((r.rhs - rest) // cj)
                best = max(best, need)
        out[j] = best
    return out


def lp_name(name: str) -> str:
    """A variable or row name that LP and MPS files accept: ``[`` and ``,`` become ``_``,
    ``]`` is dropped, and every other character outside ``[A-Za-z0-9_]`` becomes ``_``.

    Examples
    --------
    >>> lp_name("x[3,1]"), lp_name("mem slot-1")
    ('x_3_1', 'mem_slot_1')
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", name.replace("[", "_").replace("]", "").replace(",", "_"))
