"""The CBC backend: the big-M rows (:func:`~piper_ilp.milp.scaled.big_m_rows`) in floating
point, solved by the CBC binary that PuLP bundles, run as a child process that
:func:`solve` controls.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

from piper_ilp.errors import InputError, InternalError
from piper_ilp.milp.backend import Answer, Progress, Settings, write_model_file
from piper_ilp.milp.scaled import ScaledModel, ScaledRow, big_m_rows, lp_name, objective_rows
from piper_ilp.solution import Status

__all__ = ["solve", "cbc_path", "lp_text", "progress_values", "read_log_progress"]

#: Feasibility and integrality tolerances (CBC's defaults are 1e-7 and 1e-6), and CBC's
#: integer preprocessing off: on models whose time coefficients span many orders of
#: magnitude it cut off the optimum (a random 2-node instance: "optimal" 794.76 s where
#: 220.43 s is valid; with preprocessing off CBC finds 220.43).
#: Its LP scaling off as well: with it, CBC called feasible random instances infeasible
#: and "proved" optima 13% too high (the certification sweep of the tests).
TOLERANCES = ("-primalT", "1e-9", "-integerT", "1e-9", "-preprocess", "off", "-scaling", "off")

#: The relative accuracy to which a bound of a floating-point backend is trusted: the
#: bound reported is lowered by this fraction (the sweep saw CBC's optimum miss the true
#: one by 4e-9 relative, within its tolerances).
BOUND_RTOL = 1e-7

#: Absolute optimality gap in model units (1e-10 of the reference value).
GAP_ABS = 1e-7

#: How far (model units) the solver's objective may sit from its plan's value: its
#: feasibility tolerance on each row of a slot's TPS.
ABS_RESOLUTION = 1e-5


def cbc_path() -> str:
    """The path of the CBC binary bundled with PuLP.

    Returns
    -------
    str

    Raises
    ------
    InputError
        The binary is missing or not executable.
    """
    import pulp

    with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled CBC's name, not the binary
        warnings.simplefilter("ignore", DeprecationWarning)
        path = pulp.PULP_CBC_CMD(msg=False).path
    if not path or not os.access(path, os.X_OK):
        raise InputError(f"cbc: PuLP's bundled CBC binary is missing or not executable ({path})")
    return path


def _num(c: float) -> str:
    return f"{c:.17g}"


def _mps_text(sm: ScaledModel, rows: list[ScaledRow]) -> str:
    """The model in MPS, in the column layout CBC reads (as PuLP writes it; variables
    x<j>, rows r<k>, at most 8 characters; 17 significant digits)."""
    if len(sm.model.vars) >= 10**7 or len(rows) >= 10**7:
        raise InternalError("cbc: the model has too many variables or rows for MPS names")
    m = sm.model
    out = ["NAME          PIPER", "ROWS", " N  OBJ"]
    sense = {"<=": "L", ">=": "G", "==": "E"}
    for k, r in enumerate(rows):
        out.append(f" {sense[r.sense]}  r{k}")
    cols: dict[int, list[tuple[str, float]]] = {j: [] for j in range(len(m.vars))}
    cols[m.objective].append(("OBJ", 1.0))
    for k, r in enumerate(rows):
        for j, c in r.terms:
            cols[j].append((f"r{k}", c))
    out.append("COLUMNS")
    marker = False
    for j, var in enumerate(m.vars):
        integer = var.kind != "continuous"
        if integer and not marker:
            out.append("    MARK      'MARKER'                 'INTORG'")
            marker = True
        elif not integer and marker:
            out.append("    MARK      'MARKER'                 'INTEND'")
            marker = False
        if not cols[j]:
            cols[j].append(("OBJ", 0.0))
        for rname, c in cols[j]:
            out.append(f"    {'x%d' % j:<8}  {rname:<8}  {c: .16e}")
    if marker:
        out.append("    MARK      'MARKER'                 'INTEND'")
    out.append("RHS")
    for k, r in enumerate(rows):
        if r.rhs != 0:
            out.append(f"    RHS       {'r%d' % k:<8}  {r.rhs: .16e}")
    out.append("BOUNDS")
    for j, var in enumerate(m.vars):
        if var.kind == "binary":
            out.append(f" BV BND       {'x%d' % j:<8}")
        else:
            out.append(f" LO BND       {'x%d' % j:<8}  {sm.lb[j]: .16e}")
            out.append(f" UP BND       {'x%d' % j:<8}  {sm.ub[j]: .16e}")
    out.append("ENDATA")
    return "\n".join(out) + "\n"


def lp_text(sm: ScaledModel, rows: list[ScaledRow]) -> str:
    """The model in CPLEX LP format, with the formulation's names (:func:`lp_name`), for a
    person to read (``--write-model``).

    Parameters
    ----------
    sm : ScaledModel
    rows : list of ScaledRow
        The rows as CBC is given them (:func:`~piper_ilp.milp.scaled.big_m_rows`).

    Returns
    -------
    str
        Coefficients with 17 significant digits; time in model units (the header
        comment gives the unit in seconds).
    """
    m = sm.model
    names = [lp_name(v.name) for v in m.vars]

    def expr(terms):
        return " ".join(f"{'+' if c >= 0 else '-'} {_num(abs(c))} {names[j]}" for j, c in terms)

    out = [
        "\\ Piper MILP (time in units of %s s)" % _num(sm.scale.unit),
        "Minimize",
        f" tps: {names[m.objective]}",
        "Subject To",
    ]
    op = {"<=": "<=", ">=": ">=", "==": "="}
    for r in rows:
        out.append(f" {lp_name(r.name)}: {expr(r.terms)} {op[r.sense]} {_num(r.rhs)}")
    out.append("Bounds")
    for j, var in enumerate(m.vars):
        if var.kind != "binary":
            out.append(f" {_num(sm.lb[j])} <= {names[j]} <= {_num(sm.ub[j])}")
    gens = [names[j] for j, v in enumerate(m.vars) if v.kind == "integer"]
    bins = [names[j] for j, v in enumerate(m.vars) if v.kind == "binary"]
    if gens:
        out += ["Generals"] + [f" {n}" for n in gens]
    if bins:
        out += ["Binaries"] + [f" {n}" for n in bins]
    out.append("End")
    return "\n".join(out) + "\n"


def _read_solution(path: Path, n_vars: int) -> tuple[str, float | None, dict[int, float]]:
    """CBC's solution file: (first line, objective value or None, {variable: value})."""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    head = text[0] if text else ""
    mo = re.search(r"objective value\s+([-+0-9.eE]+)", head)
    obj = float(mo.group(1)) if mo else None
    values: dict[int, float] = {}
    for line in text[1:]:
        f = line.split()
        if f and f[0] == "**":
            f = f[1:]
        if len(f) >= 3 and f[1].startswith("x"):
            try:
                values[int(f[1][1:])] = float(f[2])
            except ValueError:
                continue
    return head, obj, values


_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
#: "Cbc0010I After 1000 nodes, 175 on tree, 107.70586 best solution, best possible 36.53832
#: (5.96 seconds)": the incumbent (1e+50: none yet) comes before "best solution"
_NODES = re.compile(rf"{_NUM} best solution, best possible {_NUM}")
#: "Cbc0013I At root node, 13 cuts changed objective from 36.53832 to 36.6 in 10 passes"
_ROOT_CUTS = re.compile(rf"cuts changed objective from {_NUM} to {_NUM}")
#: "Continuous objective value is 36.5383 - 0.01 seconds" (the LP relaxation's)
_RELAXATION = re.compile(rf"^Continuous objective value is {_NUM}")
#: "Cbc0012I Integer solution of 304.32476 found by DiveCoefficient after ..." (0004I, 0016I)
_FOUND = re.compile(rf"^Cbc\d+I Integer solution of {_NUM}")
#: CBC's "no incumbent yet" value
_NO_INCUMBENT = 1e49


def progress_values(line: str) -> tuple[float | None, float | None]:
    """The incumbent and the bound one line of CBC's log gives, in model units (None
    where it gives none): a node line (``Cbc0010I``), the root's cut passes (``Cbc0013I``,
    the objective after the cuts), the LP relaxation, a new integer solution. Other lines
    (the cut generators' statistics, the feasibility pump's passes) give nothing.

    Parameters
    ----------
    line : str
        One whole line of the log.

    Returns
    -------
    (float or None, float or None)
        The incumbent and the bound.

    Examples
    --------
    >>> progress_values("Cbc0010I After 0 nodes, 1 on tree, 1e+50 best solution, "
    ...                 "best possible 36.53832 (0.71 seconds)")
    (None, 36.53832)
    >>> progress_values("Cbc0014I Cut generator 0 (Probing) - 14 row cuts average 20.2 "
    ...                 "elements, 12 column cuts (12 active)  in 0.020 seconds")
    (None, None)
    """
    m = _NODES.search(line)
    if m:
        incumbent = float(m.group(1))
        return (incumbent if incumbent < _NO_INCUMBENT else None), float(m.group(2))
    m = _ROOT_CUTS.search(line)
    if m:
        return None, float(m.group(2))
    m = _RELAXATION.search(line)
    if m:
        return None, float(m.group(1))
    m = _FOUND.search(line)
    if m:
        return float(m.group(1)), None
    return None, None


def read_log_progress(text: str) -> tuple[int, float | None, float | None]:
    """Read the whole lines at the start of ``text`` (the log from where the last read
    stopped; a last line CBC is still writing is left for the next read, so no number is
    read cut short).

    Parameters
    ----------
    text : str

    Returns
    -------
    (int, float or None, float or None)
        The characters read (whole lines), and the last incumbent and the last bound
        those lines give (:func:`progress_values`; None where none does).

    Examples
    --------
    >>> read_log_progress("Cbc0012I Integer solution of 304.32476 found\\nCbc0012I Integer "
    ...                   "solution of 27")
    (45, 304.32476, None)
    """
    end = text.rfind("\n") + 1
    incumbent = bound = None
    for line in text[:end].splitlines():
        inc, bnd = progress_values(line)
        incumbent = inc if inc is not None else incumbent
        bound = bnd if bnd is not None else bound
    return end, incumbent, bound


def solve(sm: ScaledModel, settings: Settings) -> Answer:
    """Solve ``sm`` with CBC: one backend call, before certification.

    The model goes to an MPS file in a private folder (``tempfile.mkdtemp``); CBC runs in
    its own process group (so a Ctrl-C at the terminal reaches only this process) with
    :data:`TOLERANCES`, its log is read for progress, and on any exception
    (KeyboardInterrupt included) the process group is killed; the folder and every file
    in it are removed in any case. No MIP start is given (``settings.hint`` is not used).

    Parameters
    ----------
    sm : ScaledModel
    settings : Settings
        The backend call's settings (:class:`piper_ilp.milp.backend.Settings`);
        ``careful`` turns CBC's presolve off.

    Returns
    -------
    Answer
        ``bound`` lowered by :data:`BOUND_RTOL` (and the absolute gap when optimal);
        ``stopped`` is ``"time limit"`` for FEASIBLE and UNKNOWN, and UNKNOWN when CBC
        wrote no solution file.

    Raises
    ------
    InputError
        The CBC binary is missing, or the model file cannot be written.
    InternalError
        CBC exits with an error or cannot read the model, the model has too many
        variables or rows for MPS names, or its files in the private folder cannot be
        written or read (an OSError: a full disk, a file size limit), or the binary cannot
        be started: one line, a backend error.
    KeyboardInterrupt
        Ctrl-C: CBC was killed first.
    """
    m = sm.model
    rows = big_m_rows(sm)
    if settings.write_model is not None:
        write_model_file(settings.write_model, lp_text(sm, rows))
    binary = cbc_path()
    try:
        tmp = tempfile.mkdtemp(prefix="piper-cbc-")
    except OSError as exc:
        raise _files_error(exc, tempfile.gettempdir()) from None
    proc = None
    try:
        mps, sol, logp = (os.path.join(tmp, n) for n in ("model.mps", "model.sol", "cbc.log"))
        Path(mps).write_text(_mps_text(sm, rows), encoding="utf-8")
        args = [binary, mps]
        # No MIP start: CBC 2.10 with a MIP start (which needs preprocessing off) can
        # write a solution file from an LP re-solve ("objective value 0", values not
        # integral) after finding the start's solution. A hint still bounds the
        # objective through the cutoff (certify).
        if settings.time_limit is not None:
            args += ["-sec", repr(float(settings.time_limit))]
        args += list(TOLERANCES) + (["-presolve", "off"] if settings.careful else [])
        args += [
            "-ratio",
            "0",
            "-allow",
            repr(GAP_ABS),
            "-threads",
            str(settings.threads),
            "-timeMode",
            "elapsed",
        ]
        args += ["-solve", "-printingOptions", "all", "-solution", sol]
        progress = Progress("cbc", settings.progress)
        t0 = time.perf_counter()
        with open(logp, "w", encoding="utf-8") as log_fh:
            proc = subprocess.Popen(
                args,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=tmp,
                start_new_session=True,
            )
            seen = 0
            while True:
                try:
                    rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if settings.progress:
                    seen = _report(logp, seen, progress, sm.scale.unit)
        wall = time.perf_counter() - t0
        log = Path(logp).read_text(encoding="utf-8", errors="replace")
        if rc != 0:
            raise InternalError(
                f"cbc: the binary exited with status {rc}: {log.strip().splitlines()[-1:] or ''}"
            )
        if "errors on input" in log or "Current model not valid" in log:
            raise InternalError(f"cbc: could not read the model: {log.strip().splitlines()[-1:]}")
        if not os.path.exists(sol):
            return Answer(
                Status.UNKNOWN,
                stopped="time limit",
                seconds=wall,
                notes=["cbc wrote no solution file"],
            )
        head, obj, values = _read_solution(Path(sol), len(m.vars))
    except BaseException as exc:
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if isinstance(exc, OSError):  # its files (a full disk, a file size limit) or the binary
            raise _files_error(exc, tmp) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    timed_out = bool(re.search(r"Stopped on time|stopped on time|Result - Stopped", log + head))
    word = head.split()[0] if head.split() else ""
    if word == "Optimal":
        status = Status.OPTIMAL
    elif word in ("Infeasible", "Integer") and not timed_out:
        status = Status.INFEASIBLE
    elif (
        obj is not None
        and word == "Stopped"
        and "objective" in head
        and "no integer solution" not in head
    ):
        status = Status.FEASIBLE
    else:
        status = Status.UNKNOWN
    unit = sm.scale.unit
    ans = Answer(status, seconds=wall)
    if status in (Status.FEASIBLE, Status.UNKNOWN):
        ans.stopped = "time limit"
    if status in (Status.OPTIMAL, Status.FEASIBLE):
        ans.values = {
            j: float(round(values.get(j, 0.0)))
            for j, var in enumerate(m.vars)
            if var.kind != "continuous"
        }
        ans.objective = obj * unit
        # 8 decimals printed; the feasibility tolerance of each row adding up in the objective
        ans.resolution = 1e-8 * abs(ans.objective) + ABS_RESOLUTION * unit * max(
            1.0, objective_rows(sm.form) / 100
        )
        if status == Status.OPTIMAL:
            ans.bound = (obj - GAP_ABS) * unit * (1 - BOUND_RTOL)
    if status != Status.OPTIMAL:
        mb = re.search(r"Lower bound:\s*([-+0-9.eE]+)", log)
        if mb and status != Status.INFEASIBLE:
            ans.bound = float(mb.group(1)) * unit * (1 - BOUND_RTOL)
    progress.update(ans.objective, ans.bound, force=True)
    return ans


def _files_error(exc: OSError, where: str) -> InternalError:
    """CBC's model, log or solution file (in ``where``) or its binary failed: one line."""
    return InternalError(
        f"cbc: could not run: {exc.strerror or exc} ({exc.filename or where}); no answer"
    )


def _report(logp: str, seen: int, progress: Progress, unit: float) -> int:
    """Report what CBC's log says past byte ``seen``; the byte up to which it was read."""
    try:
        with open(logp, "rb") as fh:
            fh.seek(seen)
            chunk = fh.read().decode("ascii", errors="replace")  # (one byte per character)
    except OSError:
        return seen
    used, incumbent, bound = read_log_progress(chunk)
    if incumbent is not None or bound is not None:
        progress.update(
            None if incumbent is None else incumbent * unit, None if bound is None else bound * unit
        )
    return seen + used
