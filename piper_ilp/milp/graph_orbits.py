"""Successor-closed sets up to interchangeable branches, for the column method's chain
search (``docs/milp.md``, "Stage columns under graph pipelining", "Orbits").

The classes of interchangeable chains are :func:`~piper_ilp.milp.symmetry.find_symmetry`'s
(found from the data: swapping two chains of a class node by node maps the instance onto
itself, options position by position), so every permutation of the chains of a class is
an automorphism of the instance: it maps a plan to a plan of the same value in every mode,
a successor-closed set to one, and a stage to a stage of the same columns (the same least
TPS, degrees, limit and option positions). A set's canonical form lists each class's chain
states (the bits of the set on the chain's nodes) in decreasing order: one form per orbit.
Permutations are tuples ``rho`` of node positions (``rho[p]`` is where p goes).
"""

from __future__ import annotations

from piper_ilp.bitmask import mask_bits
from piper_ilp.instance import Instance
from piper_ilp.milp.symmetry import find_symmetry

__all__ = ["Orbits", "move_mask", "invert"]


def move_mask(mask: int, rho: tuple[int, ...]) -> int:
    """The image of the bitmask ``mask`` under the permutation ``rho`` of positions.

    Examples
    --------
    >>> move_mask(0b011, (1, 2, 0))  # 0 -> 1, 1 -> 2
    6
    """
    out = 0
    for p in mask_bits(mask):
        out |= 1 << rho[p]
    return out


def invert(rho: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse permutation.

    Examples
    --------
    >>> invert((1, 2, 0))
    (2, 0, 1)
    """
    out = [0] * len(rho)
    for p, q in enumerate(rho):
        out[q] = p
    return tuple(out)


class Orbits:
    """Canonical forms of node sets under the permutations of interchangeable chains.

    Parameters
    ----------
    instance : Instance
        After the restrictions (the symmetry must hold for the instance the columns read).

    Attributes
    ----------
    classes : list of list of tuple of int
        Each class of at least two interchangeable chains, each chain its node positions.
    """

    def __init__(self, instance: Instance):
        pos = {v: k for k, v in enumerate(instance.node_ids)}
        self.n = len(pos)
        self.classes = [
            [tuple(pos[v] for v in chain) for chain in cls]
            for cls in find_symmetry(instance).classes
        ]
        self.identity = tuple(range(self.n))

    @property
    def trivial(self) -> bool:
        """No two interchangeable chains: every set is its own canonical form."""
        return not self.classes

    def canon(self, mask: int) -> tuple[int, tuple[int, ...]]:
        """The canonical form of ``mask`` and a permutation ``rho`` taking ``mask`` to it.

        Examples
        --------
        >>> from piper_ilp.instance import instance_dict, instance_from_dict, option_dict
        >>> def node(v, edges):  # one option; no sync time on any edge
        ...     sfw = {str(u): 0.0 for u, x, _ in edges if x == v}
        ...     sbw = {str(x): 0.0 for u, x, _ in edges if u == v}
        ...     return v, {"1": [option_dict("v", 1.0, 0, 0, 0, sfw=sfw, sbw=sbw)]}
        >>> edges = [(0, 1, 1.0), (0, 2, 1.0), (1, 3, 1.0), (2, 3, 1.0)]
        >>> nodes = [node(v, edges) for v in range(4)]
        >>> orb = Orbits(instance_from_dict(instance_dict(nodes, edges, K=4, M=1e9, N=4, B=1e9)))
        >>> orb.canon(0b1100), orb.canon(0b1010)  # {2, 3} and {1, 3} are one orbit
        ((10, (0, 2, 1, 3)), (10, (0, 1, 2, 3)))
        """
        if not self.classes:
            return mask, self.identity
        rho = list(self.identity)
        out = mask
        for cls in self.classes:
            states = []
            for j, chain in enumerate(cls):
                s = 0
                for i, p in enumerate(chain):
                    if mask >> p & 1:
                        s |= 1 << i
                states.append((s, j))
            states.sort(key=lambda x: -x[0])  # stable: equal states keep their order
            for i, (s, j) in enumerate(states):
                for a, b in zip(cls[j], cls[i]):
                    rho[a] = b
                    if s & 1:
                        out |= 1 << b
                    else:
                        out &= ~(1 << b)
                    s >>= 1
        return out, tuple(rho)
