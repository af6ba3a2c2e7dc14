"""PipeDream's planner (``optimizer_graph_hierarchical.py``) in PipeDream's own cost model
(:func:`pipedream_dp`), and the bridge to Piper's instances (:func:`pipedream_plan_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from piper_ilp.errors import InputError, SizeLimitError
from piper_ilp.instance import MAX_DEVICES
from piper_ilp.pipedream.graph import PDGraph, Prepared, check_model_settings, prepare
from piper_ilp.pipedream.memory import stash_count, stash_fits
from piper_ilp.pipedream.states import States, antichain_states

__all__ = [
    "PDStage",
    "PDResult",
    "PiperMapping",
    "pipedream_dp",
    "pipedream_plan_for",
    "plan_graph",
    "check_size",
    "MAX_TABLE",
    "MAX_SPLIT",
    "MAX_MACHINES",
]

#: Largest table (rows x states x machines) a level that is not the last may fill.
MAX_TABLE = 60_000_000
#: Largest split step of a level: machines x ancestors of a state x replications m' (about
#: 32 bytes per entry over its arrays: 1.3 GB at the limit; measured 0.7 GB for 21 million on
#: alexnet).
MAX_SPLIT = 40_000_000
#: Workers per level lie in [1, MAX_MACHINES], the range of Piper's K.
MAX_MACHINES = MAX_DEVICES

_INF = math.inf
#: Candidates held at once in the split step (rows x machines x ancestors x m').
_CHUNK = 2_000_000


@dataclass(frozen=True)
class PDStage:
    """A stage of PipeDream's plan: states ``first..last`` (downset(last) minus
    downset(first - 1)), its node ids, ``replication`` (total workers running it, the
    product of ``replication_per_level``) and ``compute_time`` = T(first, last) seconds."""

    first: int
    last: int
    nodes: tuple[str, ...]
    replication: int
    replication_per_level: tuple[int, ...]
    compute_time: float


@dataclass
class PDResult:
    """PipeDream's answer: ``time_per_stage`` (its objective, None when no plan fits),
    ``single_stage_time`` = T of the whole model, ``data_parallel_time`` (PipeDream's
    all-workers data-parallel estimate), the stages in pipeline order and
    ``machines_used`` = sum of the stages' replication."""

    time_per_stage: float | None
    single_stage_time: float
    data_parallel_time: float
    stages: list[PDStage] = field(default_factory=list)
    machines: tuple[int, ...] = ()
    bandwidths: tuple[float, ...] = ()
    n_states: int = 0
    #: Layers in no stage: PipeDream plans only the last state's downset, which on some
    #: graphs with several sources misses nodes (never on the published profiles).
    uncovered: tuple[str, ...] = ()

    @property
    def machines_used(self) -> int:
        """Workers the stages use (the sum of their replications)."""
        return sum(s.replication for s in self.stages)

    def to_dict(self) -> dict:
        """The result as JSON-ready data."""
        return {
            "time_per_stage": self.time_per_stage,
            "single_stage_time": self.single_stage_time,
            "data_parallel_time": self.data_parallel_time,
            "machines": list(self.machines),
            "bandwidths": list(self.bandwidths),
            "machines_used": self.machines_used,
            "states": self.n_states,
            "uncovered_layers": list(self.uncovered),
            "stages": [
                {
                    "states": [s.first, s.last],
                    "layers": list(s.nodes),
                    "replication": s.replication,
                    "replication_per_level": list(s.replication_per_level),
                    "compute_time": s.compute_time,
                }
                for s in self.stages
            ],
        }


@dataclass
class _Level:
    value: np.ndarray  # (rows, S, n): A[i][j][m], inf = None
    used: np.ndarray  # machines of the last stage (the tuple's third element), 0 = None
    split_k: np.ndarray  # k of the split, -1 = no split
    split_m: np.ndarray  # m - m' of the split
    rows: np.ndarray  # row indices i held (0..S or just 0)


def _rows_table(states: States, what: str, rows: np.ndarray) -> np.ndarray:
    """X(r, j) of PipeDream's row/column tables for the given rows r and all j: the sum of
    ``what`` over downset(j) minus downset(r - 1) (all of downset(j) for r = 0), exactly
    (:meth:`States.between`); inf where j < r."""
    S = len(states)
    js = np.arange(S)
    out = np.empty((len(rows), S))
    for a, r in enumerate(rows):
        out[a] = states.between(what, int(r) - 1, js)
        out[a, :r] = _INF
    return out


def _solve_level(
    states: States,
    ct_rows,  # callable rows -> (len(rows), S) compute times (inf = None)
    n: int,
    bandwidth: float,
    within: int,
    final: bool,
    memory: float,
    memory_constraint: bool,
    straight: bool,
    fewer_machines: bool,
) -> _Level:
    S = len(states)
    rows = np.array([0] if final else list(range(S + 1)), dtype=np.int64)
    R = len(rows)
    ct = ct_rows(rows)
    act = _rows_table(states, "activation", rows)
    par = _rows_table(states, "parameter", rows)
    value = np.full((R, S, n), _INF)
    used = np.zeros((R, S, n), dtype=np.int32)
    split_k = np.full((R, S, n), -1, dtype=np.int32)
    split_m = np.full((R, S, n), -1, dtype=np.int32)
    # Single stage on m + 1 replicas.
    defined = np.isfinite(act)  # j >= r
    for m in range(1 if straight else n):
        ok = defined & np.isfinite(ct)
        if memory_constraint:
            ok &= stash_fits(stash_count(n - (m + 1), m + 1), act, par, memory)
        dpc = (4 * m * par) / (bandwidth * (m + 1))
        dpc = dpc / within
        v = (ct + dpc) / (m + 1)
        value[:, :, m] = np.where(ok, v, _INF)
        used[:, :, m] = np.where(ok, m + 1, 0)
    # Exclusion of k: ancestors of state i - 1 (rows i > 0).
    if not final:
        excl = np.zeros((R, S), dtype=bool)
        for a, r in enumerate(rows):
            if r > 0:
                excl[a, states.ancestors[r - 1]] = True
    # Splits. For each j (ancestors k < j are final), all m and m' at once: a candidate for
    # (m, k, m') is max(A[i][k][m - m'], last(k, j, m')); then, m by m, A[i][j][m] keeps
    # the single stage, takes A[i][j][m - 1] when strictly better (fewer machines), then the
    # first best candidate when strictly better. Same order of comparisons as PipeDream.
    MP = 1 if straight else max(n - 1, 1)
    mps = np.arange(1, MP + 1)
    ms = np.arange(n)
    invalid = mps[None, :] > ms[:, None]  # (n, MP): m' > m
    pidx = np.where(invalid, 0, ms[:, None] - mps[None, :])
    ceil_tab = stash_count(n - (ms[:, None] + 1), mps[None, :])  # (n, MP): copies stashed
    for j in range(1, S):
        live = rows < j
        K = states.ancestors[j]
        if len(K):
            last_ct = ct_rows.last(K, j)  # T(k+1, j), inf = None
            last_par = states.between("parameter", K, j)  # P(k+1, j), fsum over the stage
            last_act = states.between("activation", K, j)
            lt = (
                last_ct[:, None]
                + (4 * (mps[None, :] - 1) * last_par[:, None]) / (bandwidth * mps[None, :])
            ) / mps[None, :]
            bad = np.broadcast_to(invalid[:, None, :], (n, len(K), MP))
            if memory_constraint:
                bad = bad | ~stash_fits(
                    ceil_tab[:, None, :], last_act[None, :, None], last_par[None, :, None], memory
                )
            lt_m = np.where(bad, _INF, lt[None, :, :])  # (n, |K|, MP)
            bval = np.empty((R, n))
            bpos = np.empty((R, n), dtype=np.int64)
            step = max(1, _CHUNK // max(1, len(K) * n * MP))
            for lo in range(0, R, step):
                hi = min(R, lo + step)
                pre = value[lo:hi][:, K, :][:, :, pidx].transpose(0, 2, 1, 3)  # (rows, n, |K|, MP)
                if not final:
                    pre = np.where(excl[lo:hi][:, K][:, None, :, None], _INF, pre)
                cand = np.maximum(pre, lt_m[None]).reshape(hi - lo, n, -1)
                pos = np.argmin(cand, axis=2)
                bpos[lo:hi] = pos
                bval[lo:hi] = np.take_along_axis(cand, pos[:, :, None], axis=2)[:, :, 0]
            bk = K[bpos // MP]
            bm = mps[bpos % MP]
        for a in np.flatnonzero(live):
            v, u, sk, sm = value[a, j], used[a, j], split_k[a, j], split_m[a, j]
            vl = v.tolist()
            for m in range(1, n):
                if fewer_machines and vl[m - 1] < vl[m]:
                    vl[m] = vl[m - 1]
                    u[m], sk[m], sm[m] = u[m - 1], sk[m - 1], sm[m - 1]
                if len(K) and bval[a, m] < vl[m]:
                    vl[m] = bval[a, m]
                    u[m], sk[m], sm[m] = bm[a, m], bk[a, m], m - bm[a, m]
            v[:] = vl
    return _Level(value, used, split_k, split_m, rows)


class _FirstLevelCT:
    """Compute times of the first level: T(r, j), the exact sums of :meth:`States.between`."""

    def __init__(self, states: States):
        self.states = states

    def __call__(self, rows):
        return _rows_table(self.states, "time", rows)

    def last(self, K, j):
        return self.states.between("time", K, j)


class _UpperLevelCT:
    """Compute times of a level above the first: the level below's A[r][j][n - 1]."""

    def __init__(self, below: _Level):
        self.table = below.value[:, :, -1]  # rows 0..S, all j

    def __call__(self, rows):
        return self.table[rows]

    def last(self, K, j):
        return self.table[K + 1, j]


def _walk(level: _Level, row_index: int, end: int, n: int):
    """PipeDream's traceback of A[start][end - 1][n - 1]: [(first, last, machines), ...]
    in pipeline order, or None when that entry is None."""
    a = row_index
    j, m = end - 1, n - 1
    if not math.isfinite(level.value[a, j, m]):
        return None
    out = []
    while True:
        k = int(level.split_k[a, j, m])
        u = int(level.used[a, j, m])
        if k < 0:
            out.append((None, j, u))
            break
        out.append((k + 1, j, u))
        j, m = k, int(level.split_m[a, j, m])
    out.reverse()
    return out


def check_size(
    states: States,
    machines: Sequence[int],
    *,
    straight: bool = False,
    what: str = "machines",
    max_split: int = MAX_SPLIT,
) -> None:
    """Refuse, before any table is made, machine counts outside [1, :data:`MAX_MACHINES`] and
    levels whose tables pass :data:`MAX_TABLE` (a level below the last) or ``max_split``
    (default :data:`MAX_SPLIT`; the split step: n x ancestors x n - 1 entries, n x
    ancestors with ``straight``).

    Raises
    ------
    InputError
        A machine count that is not a whole number within [1, MAX_MACHINES]; one line
        beginning with ``what`` (the option that gave it: ``--machines``, ``--devices``).
    SizeLimitError
        Tables above a limit; one line with ``what``, the size, the limit and the most
        workers per level this graph allows.
    """
    S = len(states)
    width = max([len(a) for a in states.ancestors] + [1])  # the most ancestors k of a state j
    for L, n in enumerate(machines):
        if (
            isinstance(n, bool)
            or not isinstance(n, (int, np.integer))
            or not 1 <= n <= MAX_MACHINES
        ):
            raise InputError(
                f"{what}: machine counts must be whole numbers within [1, {MAX_MACHINES}], got "
                f"{n!r}"
            )
        n = int(n)
        final = L == len(machines) - 1
        if not final and (S + 1) * S * n > MAX_TABLE:
            raise SizeLimitError(
                f"{what}: a level below the last with {n:,} workers needs a table of {S + 1} x {S} "
                f"x {n:,} entries (limit {MAX_TABLE:,}); use fewer workers, fewer states (a "
                "smaller graph) or one level"
            )
        per = 1 if straight else max(n - 1, 1)  # replications m' of the last stage
        if n * width * per > max_split:
            most = (
                max_split // width
                if straight
                else next(
                    k
                    for k in range(math.isqrt(max_split // width) + 1, 0, -1)
                    if k * width * max(k - 1, 1) <= max_split
                )
            )
            raise SizeLimitError(
                f"{what}: {n:,} workers on a level need PipeDream's split tables of {n:,} x "
                f"{width} x {per:,} entries (machines x ancestors of a state x replications; about "
                f"{32 * n * width * per / 1e9:.3g} GB), above the limit of {max_split:,}; use at "
                f"most {most:,} workers per level on this graph"
            )


def pipedream_dp(
    states: States,
    machines: Sequence[int],
    bandwidths: Sequence[float],
    *,
    memory: float = 16e9,
    memory_constraint: bool = False,
    straight: bool = False,
    fewer_machines: bool = False,
    node_ids: Sequence[str] | None = None,
    what: str = "machines",
    max_split: int = MAX_SPLIT,
) -> PDResult:
    """Solve PipeDream's planning problem on its states (see Notes).

    Parameters
    ----------
    states : States
        From :func:`piper_ilp.pipedream.states.antichain_states`.
    machines, bandwidths : sequences of equal length >= 1
        ``-n n1 n2 ...`` and ``-b b1 b2 ...`` of PipeDream: workers per level and the
        bandwidth (bytes/s) between them.
    memory : float
        ``-s``: bytes per worker (used only with ``memory_constraint``).
    memory_constraint, straight, fewer_machines : bool
        ``--use_memory_constraint``, ``--straight_pipeline``, ``--use_fewer_machines``.
    node_ids : sequence of str, optional
        Ids of the prepared graph's nodes, to name each stage's layers.
    what : str
        Where the machine counts came from (an option: ``--machines``, ``--devices``), for
        the messages of :func:`check_size`.
    max_split : int
        The largest split step of a level (:func:`check_size`), default :data:`MAX_SPLIT`.

    Returns
    -------
    PDResult
        ``time_per_stage`` None when no plan fits (PipeDream itself fails then).

    Raises
    ------
    InputError
        For bad settings (a bandwidth, or the memory with ``memory_constraint``, outside
        [1e-30, 1e30]: :func:`~piper_ilp.pipedream.graph.check_model_settings`);
        :class:`SizeLimitError` for too large tables (both from :func:`check_size`
        before any work).

    Notes
    -----
    Written from the description in ``docs/pipedream.md``; numpy does the inner minimizations.
    Symbols: states 0..S-1 in topological order (:mod:`piper_ilp.pipedream.states`), ``T[s]``,
    ``Act[s]``, ``P[s]`` the sums of (F + G) / 1000, A and P over state ``s``'s downset. A
    stage (k, j] (k an ancestor of j in the antichain DAG) holds downset(j) minus downset(k);
    its compute time ``T(k+1, j)`` (and likewise Act, P) is the fsum over its nodes, taken
    exactly by :meth:`States.between` -- never ``T[j] - T[k]``, a difference of two rounded
    sums ((1e17 + 8) - 1e17 = 0 lost a stage's 8 parameter bytes). Where PipeDream's row
    i - 1 is not inside downset(j) (rows i > 0 of a level below the last, see
    ``docs/pipedream.md``), the entry is the correctly rounded T[j] - T[i - 1] of the exact sums.

    One level with ``n`` workers at bandwidth ``B`` (``m`` = workers - 1, as in PipeDream):

    * single stage (states i..j on m + 1 replicas):
      ``A[i][j][m] = (T(i, j) + 4 m P(i, j) / (B (m + 1)) / w) / (m + 1)`` with ``w`` the
      workers inside one machine of this level (1 at the first level), if it fits;
    * split: ``A[i][j][m] = min over k, m' of max(A[i][k][m - m'], last(k, j, m'))`` with
      ``last = (T(k+1, j) + 4 (m' - 1) P(k+1, j) / (B m')) / m'`` (no division by ``w``);
      k runs over the ancestors of j that are not ancestors of state i - 1, m' over 1..m
      (only 1 with ``straight``); a candidate is kept only when strictly better (the single
      stage wins ties, then the smallest k, then the smallest m');
    * memory (``memory_constraint``): a stage with r replicas and ``n - (m + 1)`` workers
      after its pipeline prefix stashes ``ceil((n - (m + 1)) / r) * (Act + P)`` bytes, which
      must not exceed ``memory`` (:mod:`piper_ilp.pipedream.memory`);
    * ``fewer_machines``: ``A[i][j][m]`` may take ``A[i][j][m - 1]`` when strictly better.

    With several levels (``machines = [n1, n2, ...]``), level L's values ``A[i][j][n_L - 1]``
    become the compute times ``T(i, j)`` of level L + 1 for every pair (i, j); only the last
    level is solved for i = 0 alone. The answer is ``A[0][S - 1][n_last - 1]`` of the last level.
    """
    machines = tuple(machines)
    bandwidths = tuple(bandwidths)
    if not machines or len(machines) != len(bandwidths):
        raise InputError(
            f"need one bandwidth per level: {len(machines)} machine counts, {len(bandwidths)} "
            "bandwidths"
        )
    check_size(states, machines, straight=straight, what=what, max_split=max_split)
    bandwidths = tuple(check_model_settings(bandwidths, memory if memory_constraint else None))
    S = len(states)
    levels: list[_Level] = []
    ct = _FirstLevelCT(states)
    within = 1
    for L, (n, b) in enumerate(zip(machines, bandwidths)):
        final = L == len(machines) - 1
        with np.errstate(invalid="ignore"):  # inf * 0 where a table entry is None: masked
            lev = _solve_level(
                states,
                ct,
                int(n),
                b,
                within,
                final,
                memory,
                memory_constraint,
                straight,
                fewer_machines,
            )
        levels.append(lev)
        ct = _UpperLevelCT(lev)
        within = int(n)
    T = states.time
    total = float(T[-1])
    # PipeDream's data-parallel estimate with all workers of every level.
    dpt, inner = total, 1
    for n, b in zip(machines, bandwidths):
        dpt = (dpt + (4 * (n - 1) * float(states.parameter[-1])) / (b * n) / inner) / n
        inner = n
    top = levels[-1]
    objective = float(top.value[0, S - 1, machines[-1] - 1])
    n_nodes = len(node_ids) if node_ids is not None else states.downset[-1].bit_length()
    missing = ((1 << n_nodes) - 1) & ~states.downset[-1]
    uncovered = tuple(
        (node_ids[v] if node_ids is not None else str(v))
        for v in range(n_nodes)
        if missing >> v & 1
    )
    if not math.isfinite(objective):
        return PDResult(None, total, dpt, [], machines, bandwidths, S, uncovered)
    # Traceback from the top level down: ranges (start, end) of states with a replication per level.
    ranges = [(0, S, ())]
    for L in range(len(levels) - 1, -1, -1):
        lev = levels[L]
        new = []
        for start, end, reps in ranges:
            row = 0 if lev.rows.size == 1 else start
            walked = _walk(lev, row, end, machines[L])
            if walked is None:  # a level below promised a value its own table cannot trace
                raise InputError(f"level {L + 1}: no plan for states {start}..{end - 1}")
            s0 = start
            for _first, last, u in walked:
                new.append((s0, last + 1, (u,) + reps))
                s0 = last + 1
        ranges = new
    stages = []
    seen = 0
    for start, end, reps in ranges:
        down = states.downset[end - 1]
        members = down & ~seen
        seen |= down
        idx = [v for v in range(down.bit_length()) if members >> v & 1]
        names = (
            tuple(node_ids[v] for v in idx) if node_ids is not None else tuple(str(v) for v in idx)
        )
        ct_stage = states.between("time", start - 1, end - 1)
        stages.append(PDStage(start, end - 1, names, int(np.prod(reps)), reps, ct_stage))
    return PDResult(objective, total, dpt, stages, machines, bandwidths, S, uncovered)


def plan_graph(
    graph: PDGraph | Prepared,
    machines: Sequence[int],
    bandwidths: Sequence[float],
    **kwargs,
) -> PDResult:
    """:func:`pipedream_dp` on a parsed (or prepared) ``graph.txt`` profile."""
    prep = graph if isinstance(graph, Prepared) else prepare(graph)
    states = antichain_states(prep)
    return pipedream_dp(
        states, machines, bandwidths, node_ids=[nd.id for nd in prep.nodes], **kwargs
    )


@dataclass
class PiperMapping:
    """PipeDream's plan under Piper's contract.

    ``result``: PipeDream's own answer; ``plan``: the mapped Piper plan (d = replication,
    t = 1, option ``"vanilla"``; None when PipeDream found no plan); ``evaluation``: the
    evaluator's verdict on the instance; ``reasons``: why the mapped plan is not a valid
    Piper plan (empty when it is); ``tps``: its Piper TPS when valid.
    """

    result: PDResult
    plan: "object | None"
    evaluation: "object | None"
    reasons: list[str]

    @property
    def valid(self) -> bool:
        """Whether the mapped plan passes Piper's evaluator."""
        return self.evaluation is not None and self.evaluation.valid

    @property
    def tps(self) -> float | None:
        """The evaluator's TPS of the mapped plan (None without one)."""
        return self.evaluation.tps if self.evaluation is not None else None


def pipedream_plan_for(
    instance,
    *,
    graph: PDGraph | None = None,
    machines: int | Sequence[int] | None = None,
    bandwidths: Sequence[float] | None = None,
    memory: float | None = None,
    memory_constraint: bool = True,
    straight: bool = False,
    fewer_machines: bool = True,
) -> PiperMapping:
    """Run PipeDream's planner for a Piper instance and judge its plan with Piper's evaluator.

    Parameters
    ----------
    instance : Instance or str or Path
        The Piper instance (or its JSON file), e.g. from ``piper-ilp import pipedream``.
    graph : PDGraph, optional
        The ``graph.txt`` profile the instance was imported from; PipeDream's planner then
        runs on the profile itself. Without it, the instance is turned into a profile by
        :func:`piper_ilp.pipedream.convert.instance_to_graph` (p, a, w of each node's
        ``"vanilla"`` option at t = 1).
    machines : int or sequence, optional
        Workers per level (default ``[K]``).
    bandwidths : sequence, optional
        Bandwidth per level (default ``[B]`` repeated).
    memory : float, optional
        PipeDream's ``-s`` (default M); used when ``memory_constraint``.
    memory_constraint, straight, fewer_machines : bool
        PipeDream's flags (defaults: memory rule on, replication allowed, fewer workers
        allowed, as Piper allows fewer devices).

    Returns
    -------
    PiperMapping
        When a stage's replication d does not divide N, or the replications add up to
        more than N, or a stage does not fit Piper's memory rule, the mapped plan is
        invalid under Piper's contract and ``reasons`` says which rule broke.
    """
    from piper_ilp.evaluate import evaluate
    from piper_ilp.instance import Instance, load_instance
    from piper_ilp.pipedream.convert import (
        instance_to_graph,
        node_id_map,
        piper_plan_from_pipedream,
    )

    inst = instance if isinstance(instance, Instance) else load_instance(instance)
    if graph is None:
        graph, back = instance_to_graph(inst)
    else:
        back = node_id_map(graph)
    what = "machines"
    if machines is None:
        machines, what = [inst.K], f"{inst.source}: K"
    elif isinstance(machines, (int, np.integer)):
        machines = [int(machines)]
    if bandwidths is None:
        bandwidths = [inst.B] * len(machines)
    result = plan_graph(
        graph,
        machines,
        bandwidths,
        memory=inst.M if memory is None else memory,
        memory_constraint=memory_constraint,
        straight=straight,
        fewer_machines=fewer_machines,
        what=what,
    )
    if result.time_per_stage is None:
        return PiperMapping(
            result, None, None, ["PipeDream's planner found no plan that fits its memory rule"]
        )
    try:
        plan = piper_plan_from_pipedream(
            graph, [(s.nodes, s.replication) for s in result.stages], back
        )
    except InputError as exc:
        return PiperMapping(
            result, None, None, [f"PipeDream's stages do not map to a Piper plan: {exc}"]
        )
    ev = evaluate(inst, plan)
    reasons = [str(v) for v in ev.violations]
    return PiperMapping(result, plan, ev, reasons)
