"""numba's cache keeps a kernel's compiled code until the kernel's own file changes
(numba compares that file's time stamp and size); code it compiled in from other files, the
cost model's formulas (:mod:`piper_ilp.cost`), ``fsum`` or the memory band (:mod:`dp.memory`),
is not watched, so after such a file changes (a ``git checkout``, an edit) the cached kernel
would still run the old formula. :func:`drop_stale` keeps a digest of those files beside
numba's cache files and removes the module's cache files when the digest differs, before any
of its kernels is loaded: numba then compiles them again. (A ``pip install`` writes every file
anew, which numba's own check already catches.)
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

__all__ = ["drop_stale"]


def drop_stale(module_file: str, dep_files: tuple[str, ...]) -> bool:
    """Remove the numba cache files of the module at ``module_file`` (``__pycache__`` beside
    it, ``<stem>.*.nbi`` and ``.nbc``) when the files it compiles code in from,
    ``dep_files``, differ from those its cache was made with; record their digest. Returns
    whether files were removed. Where the folder cannot be written, nothing happens (numba
    then keeps its cache elsewhere, written anew by each install).

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "k.py").write_text("x = 1"), (d / "dep.py").write_text("y = 1")
    >>> (d / "__pycache__").mkdir(); _ = (d / "__pycache__" / "k.f-1.py311.nbi").write_bytes(b"")
    >>> drop_stale(str(d / "k.py"), (str(d / "dep.py"),))  # no digest yet: dropped
    True
    >>> _ = (d / "__pycache__" / "k.f-1.py311.nbi").write_bytes(b"")
    >>> drop_stale(str(d / "k.py"), (str(d / "dep.py"),))  # the same sources: kept
    False
    >>> _ = (d / "dep.py").write_text("y = 2")
    >>> drop_stale(str(d / "k.py"), (str(d / "dep.py"),))  # a dependency changed: dropped
    True
    """
    src = Path(module_file)
    cache = src.parent / "__pycache__"
    digest = hashlib.sha256()
    for dep in dep_files:
        digest.update(Path(dep).read_bytes())
    want = digest.hexdigest()
    stamp = cache / f"{src.stem}.deps.{sys.implementation.cache_tag}"
    try:
        if stamp.read_text() == want:
            return False
    except OSError:
        pass
    dropped = False
    for f in [*cache.glob(f"{src.stem}.*.nbi"), *cache.glob(f"{src.stem}.*.nbc")]:
        try:
            f.unlink()
            dropped = True
        except OSError:
            pass
    try:
        cache.mkdir(exist_ok=True)
        stamp.write_text(want)
    except OSError:
        pass
    return dropped
