"""Without numba, the kernel module cannot be imported: its doctests are not collected."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("numba") else ["kernel.py"]
