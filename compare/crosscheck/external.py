"""External planners: a command that prints a plan, checked like every other method.

``--external NAME=COMMAND`` names a planner outside this project. COMMAND is a shell
command line with placeholders ``{instance}`` (the path of the instance JSON, written with
the run's settings), ``{devices}``, ``{memory}``, ``{batch}`` and ``{bandwidth}`` (K, M, N,
B as plain numbers); it must print one plan JSON (``docs/cost-model.md`` sec. 2) on its
standard output and exit 0.

The plan goes through the independent evaluator. An external planner is a heuristic: its
answer is FEASIBLE at best, never a proof. Its failures are its own: a command that exits
non-zero, times out or prints no plan is BACKEND_ERROR (with its stderr's last line); a plan
the evaluator rejects is an InternalError naming the planner and the first violation, which
``verify`` reports as the planner's mismatch. The command runs in its own process group,
which is killed on a timeout or an interrupt, and its temporary folder is removed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

from piper_ilp.errors import InputError, InternalError
from piper_ilp.instance import Instance, save_instance
from piper_ilp.plan import plan_from_dict
from piper_ilp.processes import interrupts_held
from piper_ilp.solution import Restrictions, Solution, Status, checked_solution

__all__ = ["PLACEHOLDERS", "parse_external", "solve_external"]

PLACEHOLDERS = ("instance", "devices", "memory", "batch", "bandwidth")

#: The most a planner may print (bytes); more is a failure of the planner.
MAX_OUTPUT = 64 * 2**20

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


def parse_external(text: str, taken: tuple[str, ...] = ()) -> tuple[str, str]:
    """Split ``NAME=COMMAND``; the name must be new (not in ``taken``) and the command's
    placeholders known.

    Examples
    --------
    >>> parse_external("mine=python plan.py {instance} --devices {devices}")
    ('mine', 'python plan.py {instance} --devices {devices}')
    """
    name, sep, command = text.partition("=")
    name, command = name.strip(), command.strip()
    if not sep or not name or not command:
        raise InputError(f"--external {text!r}: expected NAME=COMMAND")
    if not _NAME.match(name):
        raise InputError(
            f"--external {text!r}: the name {name!r} must start with a letter (letters, digits, _ "
            ". -)"
        )
    if name in taken:
        raise InputError(
            f"--external {text!r}: the name {name!r} is already a method; choose another"
        )
    for field in re.findall(r"{([^{}]*)}", command):
        if field not in PLACEHOLDERS:
            raise InputError(
                f"--external {text!r}: unknown placeholder {{{field}}}; known: "
                + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            )
    return name, command


def _fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(nothing on stderr)"


def solve_external(
    instance: Instance,
    command: str,
    restrictions: Restrictions = Restrictions(),
    *,
    name: str = "external",
    timeout: float | None = None,
    workdir: str | os.PathLike | None = None,
    check: bool = True,
) -> Solution:
    """Run an external planner on ``instance`` and check its plan.

    Parameters
    ----------
    command : str
        The command line with placeholders (see the module docstring).
    restrictions : Restrictions
        Checked on the returned plan (a plan that breaks them is the planner's error).
    timeout : float, optional
        Seconds before the planner's process group is killed (BACKEND_ERROR).
    workdir : path, optional
        Where the temporary folder for the instance file is made (default: the system's).
    check : bool
        Pass the plan through the evaluator here (an invalid plan raises). ``verify``
        checks every plan itself and calls an invalid one a mismatch, so it passes False.

    Returns
    -------
    Solution
        ``method`` = ``name``; FEASIBLE with the evaluator's TPS, or BACKEND_ERROR.

    Raises
    ------
    InternalError
        With ``check``: the planner printed a plan that the evaluator rejects or that
        breaks the restrictions.
    """
    start = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="piper-external-", dir=workdir)
    proc = None
    try:
        path = os.path.join(folder, "instance.json")
        save_instance(instance, path)
        values = {
            "instance": path,
            "devices": str(instance.K),
            "memory": _fmt_number(instance.M),
            "batch": str(instance.N),
            "bandwidth": _fmt_number(instance.B),
        }
        line = re.sub(r"{(\w+)}", lambda m: shlex.quote(values[m.group(1)]), command)
        with interrupts_held():  # an interrupt inside Popen would orphan the planner
            proc = subprocess.Popen(
                ["/bin/sh", "-c", line],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                text=True,
            )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return _failed(name, start, f"no plan within {timeout:g} s (killed)")
        if proc.returncode != 0:
            return _failed(name, start, f"exited with status {proc.returncode}: {_last_line(err)}")
        if len(out) > MAX_OUTPUT:
            return _failed(name, start, f"printed more than {MAX_OUTPUT} bytes")
        try:
            data = json.loads(out)
            plan = plan_from_dict(data, source=f"{name}'s output")
        except ValueError as exc:  # json.JSONDecodeError and InputError are ValueErrors
            return _failed(name, start, f"printed no plan JSON: {' '.join(str(exc).split())[:300]}")
    except BaseException:
        if proc is not None and proc.poll() is None:
            _kill_group(proc)
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    sol = Solution(
        name,
        Status.FEASIBLE,
        plan=plan,
        seconds=time.perf_counter() - start,
        message="external planner (not a proof)",
    )
    if not check:
        return sol
    try:
        return checked_solution(instance, sol, restrictions=restrictions)
    except InternalError as exc:
        raise InternalError(f"external planner {name}: {exc}") from None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _failed(name: str, start: float, why: str) -> Solution:
    return Solution(
        name,
        Status.BACKEND_ERROR,
        seconds=time.perf_counter() - start,
        message=f"external planner {name}: {why}",
    )
