"""Progress on a terminal: sets done of the total and the elapsed time, on stderr."""

from __future__ import annotations

import sys

__all__ = ["Progress"]


class Progress:
    """A rich progress display on stderr, only when ``enabled`` and stderr is a terminal;
    otherwise every method does nothing. A context manager.

    Parameters
    ----------
    enabled : bool
        Show progress (when stderr is a terminal).

    Examples
    --------
    >>> with Progress(False) as bar:
    ...     tick = bar.task("sets", 10)
    ...     tick(5)
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            self._p = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._p.__enter__()
        return self

    def __exit__(self, *exc):
        if self._p is not None:
            self._p.__exit__(*exc)

    def task(self, name: str, total: int):
        """A callable k -> None that shows k of ``total`` done for ``name``.

        Parameters
        ----------
        name : str
            What is counted.
        total : int
            The count when done.

        Returns
        -------
        callable
        """
        if self._p is None:
            return lambda k: None
        tid = self._p.add_task(name, total=total)
        return lambda k: self._p.update(tid, completed=k)
