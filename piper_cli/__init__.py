"""The ``piper-ilp`` command line: a thin layer over the Python API.

The script's entry point is :func:`piper_cli.entry.main`; the typer application is
:data:`piper_cli.commands.app`, also reachable as ``piper_cli.app`` (loaded on first use,
for callers such as typer's test runner). The package's modules import one another
directly, never through this file.
"""

from __future__ import annotations

__all__ = ["app"]


def __getattr__(name: str):
    if name == "app":
        from piper_cli.commands import app

        globals()["app"] = app
        return app
    raise AttributeError(f"module 'piper_cli' has no attribute {name!r}")
