"""Writing output files safely: every output path checked before any work
(:func:`check_writable`), every file written atomically (:func:`atomic_write_text`), so that
a reader never sees a half-written file and an interrupted run leaves the old file (or none).

A symlink is followed (the file at its end is replaced, the link stays); a device, a FIFO or
this process's own descriptor (``-o /dev/stdout``) is written in place; a folder is refused.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from piper_ilp.errors import InputError

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "check_not_input",
    "check_writable",
    "json_safe",
    "read_jsonl",
    "remove_output",
]

#: Symlinks followed before a path is refused as a loop (Linux's own limit).
_MAX_LINKS = 40


def _output_target(path: str | Path) -> tuple[str, str]:
    """How an output at ``path`` is written: ``(kind, target)``, ``target`` the path at the
    end of ``path``'s symlinks and ``kind`` one of

    * ``"file"``: nothing or a regular file there: replaced atomically;
    * ``"folder"``: refused;
    * ``"fd"``: one of this process's descriptors (/dev/stdout -> /proc/self/fd/1): the
      target is /proc/PID/fd/N; written to descriptor N;
    * ``"in place"``: any other existing file (a device, a FIFO) or a path under /proc:
      opened and written, never replaced.

    The links are followed one at a time (not with :func:`os.path.realpath`), so that a
    link into /proc (whose own links name pipes and deleted files) is noticed."""
    p = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        head, tail = os.path.split(p)
        head = os.path.realpath(head)
        p = os.path.join(head, tail)
        if head == "/proc" or head.startswith("/proc/"):
            own = head == f"/proc/{os.getpid()}/fd" and tail.isdigit()
            return ("fd" if own else "in place"), p
        if not os.path.islink(p):
            break
        p = os.path.join(head, os.readlink(p))
    else:
        raise InputError(f"{path}: too many levels of symbolic links (a loop?)")
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        return "file", p
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        return "folder", p
    return ("file" if stat.S_ISREG(mode) else "in place"), p


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode when both exist (symlinks,
    hard links, ``..``), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_input(
    path: str | Path, inputs: Mapping[str | Path, str], what: str = "output"
) -> None:
    """Refuse an output path that would overwrite one of the command's input files.

    Parameters
    ----------
    path : str or Path
        The output path.
    inputs : mapping
        ``{input path: what it is}``, e.g. ``{"m.json": "instance"}``.
    what : str
        What the output is, for the message.

    Raises
    ------
    InputError
        ``path`` names one of ``inputs`` under any name (the same path, a symlink or a hard
        link to it, ``..``): one line naming both.

    Examples
    --------
    >>> check_not_input("m.json", {"m.json": "instance"}, "plan")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    piper_ilp.errors.InputError: m.json: the plan would overwrite the instance file; choose
    another path
    """
    for inp, label in inputs.items():
        if _same_file(path, inp):
            alias = "" if str(inp) == str(path) else f" {inp}"
            raise InputError(
                f"{path}: the {what} would overwrite the {label} file{alias}; choose another path"
            )


def check_writable(
    path: str | Path, what: str = "output", inputs: Mapping[str | Path, str] | None = None
) -> Path:
    """Check, before any work, that an output can be written at ``path``.

    For a regular file (or none yet), its folder must exist and a file must really be
    creatable in it: a probe file is made and removed there, which catches read-only file
    systems that permission bits do not. A device, FIFO or /proc path must exist and be
    writable; this process's own descriptor (/dev/stdout) must be open. ``path`` itself is
    not touched.

    Parameters
    ----------
    path : str or Path
        The output path.
    what : str
        What the output is, for the message (``"plan"``, ``"report"``).
    inputs : mapping, optional
        The command's input files, ``{path: what it is}``; ``path`` must be none of them
        (:func:`check_not_input`).

    Returns
    -------
    Path
        ``path``, as given.

    Raises
    ------
    InputError
        One line naming ``path``: it is a folder or one of ``inputs``, its folder is
        missing, it cannot be written, or its symlinks loop.
    """
    if inputs:
        check_not_input(path, inputs, what)
    kind, target = _output_target(path)
    if kind == "folder":
        raise InputError(f"{path}: {what} path is a folder")
    if kind == "fd":
        try:
            os.fstat(int(os.path.basename(target)))
        except OSError as exc:
            raise InputError(f"{path}: cannot write {what}: {exc.strerror or exc}") from None
        return Path(path)
    if kind == "in place":
        if not os.path.exists(target):
            raise InputError(f"{path}: cannot write {what}: no such file")
        if not os.access(target, os.W_OK):
            raise InputError(f"{path}: cannot write {what}: not writable")
        return Path(path)
    p = (
        Path(path) if os.path.abspath(path) == target else Path(target)
    )  # the user's words when no link
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{path}: cannot write {what}: folder {parent} does not exist")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{path}: cannot write {what}: file is not writable")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise InputError(f"{path}: cannot write {what}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    return Path(path)


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text``, UTF-8 encoded, to ``path`` atomically (:func:`atomic_write_bytes`).

    Parameters
    ----------
    path : str or Path
        The output path.
    text : str
        The file's content.

    Raises
    ------
    InputError
        The file cannot be written (one line naming the path and the reason).
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_in_place(path: str | Path, kind: str, target: str, data: bytes) -> None:
    """Write ``data`` to a device, FIFO, /proc file or this process's descriptor (see
    :func:`_output_target`), without replacing it."""
    if kind == "fd":
        fd = int(os.path.basename(target))
        for stream in (sys.stdout, sys.stderr):  # what Python holds for that descriptor comes first
            try:
                same = stream is not None and stream.fileno() == fd
            except (OSError, ValueError, AttributeError):
                same = False
            if same:
                stream.flush()  # its own failure is the stream's (the CLI reports a failed stdout)
    try:
        if kind == "fd":
            _write_all(fd, data)
            return
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically.

    What is at ``path`` decides how:

    * nothing, or a regular file: a temporary file in the same folder (fsynced, with the
      mode ``open()`` would give it) is renamed over it; the temporary file is removed on
      any failure, an interrupt included;
    * a symlink: the same for the file at the end of the links (the links stay);
    * a device (/dev/null), a FIFO or a path under /proc: opened and written in place;
    * this process's own descriptor (/dev/stdout, /dev/fd/N): written to it after what
      Python has buffered for it, so ``-o /dev/stdout`` prints in order.

    Parameters
    ----------
    path : str or Path
        The output path.
    data : bytes
        The file's content.

    Raises
    ------
    InputError
        The file cannot be written, or ``path`` is a folder (one line naming the path and
        the reason).
    """
    kind, target = _output_target(path)
    if kind == "folder":
        raise InputError(f"{path}: cannot write: is a folder")
    if kind != "file":
        _write_in_place(path, kind, target, data)
        return
    p = Path(target)
    parent = p.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; give it the mode open() would
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise


def remove_output(path: str | Path) -> bool:
    """Remove the regular file an output path names, as when a run has nothing to write.

    The file at the end of ``path``'s symlinks is removed (the links stay); a device, FIFO,
    descriptor or folder is left alone.

    Parameters
    ----------
    path : str or Path
        The output path.

    Returns
    -------
    bool
        True when a file was removed, False when there was none (or it is not a regular
        file).

    Raises
    ------
    InputError
        ``path``'s symlinks loop, or it cannot be examined.
    OSError
        The file exists but cannot be removed (e.g. PermissionError).
    """
    kind, target = _output_target(path)
    if kind != "file":
        return False
    try:
        os.unlink(target)
    except FileNotFoundError:
        return False
    return True


def json_safe(obj: Any) -> Any:
    """``obj`` made ready for strict JSON (``json.dumps(..., allow_nan=False)``).

    Non-finite floats become None, numpy scalars Python numbers, numpy arrays (nested)
    lists, tuples lists and non-string dict keys strings, recursively through dicts, lists
    and tuples; anything else is returned as it is.

    Parameters
    ----------
    obj : any
        A tree of dicts, lists, tuples, numpy arrays and scalars.

    Returns
    -------
    any
        A new tree (``obj`` is not changed).

    Examples
    --------
    >>> import numpy as np
    >>> json_safe({"tps": float("nan"), 2: (1.5, np.float32(0.5), np.int64(3))})
    {'tps': None, '2': [1.5, 0.5, 3]}
    >>> json_safe({"y": np.array([[1.0, np.inf], [2.0, 3.0]])})
    {'y': [[1.0, None], [2.0, 3.0]]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "tolist"):
        return json_safe(obj.tolist())  # a scalar's Python number, an array's nested lists
    return obj


def read_jsonl(path: str | Path, keep: Callable[[dict], bool] = lambda rec: True) -> list[dict]:
    """The records of a JSON-lines file (a campaign's or a sweep's results).

    Lines that are not whole JSON objects (a torn last line from a killed run, an array)
    are skipped; undecodable bytes are replaced, not refused.

    Parameters
    ----------
    path : str or Path
        The file; a missing one has no records.
    keep : callable, optional
        ``keep(record) -> bool``: only the records for which it is true are returned.

    Returns
    -------
    list of dict
        In file order.

    Raises
    ------
    OSError
        The file exists but cannot be read (e.g. it is a folder).
    """
    p = Path(path)
    records: list[dict] = []
    if not p.exists():
        return records
    with p.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and keep(rec):
                records.append(rec)
    return records
