"""The package's version, in a module of its own so that any module can read it without
importing the whole core (``piper_ilp/__init__``)."""

__version__ = "0.1.0"
