"""Exceptions shared by the whole project."""

__all__ = ["InputError", "InternalError", "SizeLimitError"]


class InputError(ValueError):
    """Bad input or usage: an instance, plan or setting that breaks the contract.

    The message is one line that names the file and the node, edge or field at
    fault. The CLI prints it and exits with status 2.
    """


class InternalError(RuntimeError):
    """A solver's answer failed the independent check (a bug, never the user's fault).

    The CLI prints it and exits with status 1.
    """


class SizeLimitError(InputError):
    """An instance too large for the method asked (too many successor-closed sets for the
    DP, too many variables for the MILP, too many nodes for the exhaustive oracle).

    The message gives the size and the limit, and how to go on. Exit status 2.
    """
