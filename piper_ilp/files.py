"""Writing output files safely: checked before any work, written atomically.

Every file the project writes (plans, instances, JSON reports, campaign summaries) goes
through :func:`atomic_write_text`, so a reader never sees a half-written file and an
interrupted run leaves the old file (or none), never a torn one.
:func:`check_writable` is called on every output path before any solving starts.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from piper_ilp.errors import InputError

__all__ = ["atomic_write_text", "check_not_input", "check_writable", "json_safe", "read_jsonl"]


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same inode when both exist (symlinks,
    hard links, ``..``), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one of them does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_input(path: str | Path, inputs: Mapping[str | Path, str], what: str = "output") -> None:
    """Raise :class:`InputError` (one line naming both) when the output ``path`` is one of
    the command's ``inputs`` (``{input path: what it is}``, e.g. ``{"m.json": "instance"}``)
    under any name: the same file, a symlink or a hard link to it."""
    for inp, label in inputs.items():
        if _same_file(path, inp):
            alias = "" if str(inp) == str(path) else f" {inp}"
            raise InputError(f"{path}: the {what} would overwrite the {label} file{alias}; choose another path")


def check_writable(path: str | Path, what: str = "output", inputs: Mapping[str | Path, str] | None = None) -> Path:
    """Raise :class:`InputError` (one line naming ``path``) unless a file can be created
    or replaced at ``path``: its folder exists and a file can really be created in it (a
    probe file is made and removed: this catches read-only file systems and /proc, which
    permission bits do not), ``path`` is not a folder, and it is none of the command's
    ``inputs`` (:func:`check_not_input`). ``path`` itself is not touched."""
    if inputs:
        check_not_input(path, inputs, what)
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"{path}: {what} path is a folder")
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
    return p


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and an
    atomic rename; the temporary file is removed on any failure (including an interrupt).

    Raises
    ------
    InputError
        The file cannot be written (one line naming the path and the reason).
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
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


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None and numpy scalars by Python
    numbers, so that ``json.dumps(..., allow_nan=False)`` writes strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
        return json_safe(obj.item())
    return obj


def read_jsonl(path: str | Path, keep: Callable[[dict], bool] = lambda rec: True) -> list[dict]:
    """The JSON objects of a JSON-lines file, one per line, for which ``keep`` is true.
    Lines that are not whole JSON objects (a torn last line from a killed run) are skipped;
    a missing file has none."""
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
