"""Sets of node positions as bitmasks: bit k of a mask stands for the node at position k.

The MILP formulations (``piper_ilp.milp``) and PipeDream's planner (``piper_ilp.pipedream``)
both read their sets this way; the helper lives here, in the core, because the DP imports
PipeDream's planner and may not import the MILP package (``.importlinter``).
"""

from __future__ import annotations

__all__ = ["mask_bits"]


def mask_bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask`` (>= 0), in increasing order.

    Examples
    --------
    >>> mask_bits(0b101001)
    [0, 3, 5]
    >>> mask_bits(0)
    []
    """
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out
