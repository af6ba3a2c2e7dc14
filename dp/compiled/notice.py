"""numba's compile, said when it happens: the first solve on a machine (or after the kernels
change) compiles the numba kernels of :mod:`dp.compiled.kernel` and :mod:`dp.greedy_kernel`
into numba's cache, 15-25 CPU s; every later process loads them from the cache (under a
second). numba signals a compile (a cache miss, never a load) with its ``numba:compile``
event; the first one in a process is logged at INFO on the logger ``piper_ilp.compile``,
which the command line shows on a terminal's stderr (:func:`piper_cli.entry.main`).
Imported by the kernel module, so by every process that loads a kernel, and by none other.
"""

from __future__ import annotations

import logging

from numba.core import event

__all__ = ["LOGGER", "FirstCompile"]

#: Where the first compile of a process is said (INFO).
LOGGER = logging.getLogger("piper_ilp.compile")


class FirstCompile(event.Listener):
    """A listener of numba's ``numba:compile`` event that logs one line on the first
    compile it hears, and nothing after.

    Examples
    --------
    >>> FirstCompile().said
    False
    """

    def __init__(self):
        self.said = False

    def on_start(self, event_) -> None:
        if not self.said:
            self.said = True
            LOGGER.info(
                "compiling the numba kernels for this machine, once (15-25 CPU s); "
                "later runs load them from numba's cache"
            )

    def on_end(self, event_) -> None:
        pass


event.register("numba:compile", FirstCompile())
