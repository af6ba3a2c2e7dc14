"""The option choice of one stage at one (t, d, y), computed once and remembered
(:class:`OptionChoices`): the stage tables ask it where float memory sums cannot decide,
and the plan rebuild for every stage of the plan.
"""

from __future__ import annotations

from dp.greedy_rule import greedy_options
from dp.knapsack import cheapest_choice, exact_choices_at, stage_items
from piper_ilp.cost import stage_cost
from piper_ilp.instance import Instance, Option

__all__ = ["OptionChoices"]


class OptionChoices:
    """Memo of option choices keyed by (stage bitmask C, t, d, y).

    The stage tables use it where float memory sums cannot decide (near M, see
    :mod:`dp.memory`) and the plan rebuild for every stage of the plan; a key is computed
    at most once per solve. Exact mode takes the least-cost choice whose memory fits
    exactly (:func:`dp.knapsack.exact_choices_at`: the choices it keeps at (C, t, y)
    serve every d); greedy mode follows Piper's rule
    (:func:`dp.greedy_rule.greedy_options`).

    Parameters
    ----------
    instance : Instance
        The instance after the restrictions (its node order defines the bitmasks).
    greedy : bool
        Piper's rule instead of the exact choice.

    Attributes
    ----------
    computed : list of tuple
        Every key in the order it was computed (each at most once).
    """

    def __init__(self, instance: Instance, greedy: bool):
        self.instance = instance
        self.greedy = greedy
        self.ids = instance.node_ids
        self.memo: dict[tuple[int, int, int, int], tuple[float, dict[int, Option]] | None] = {}
        # exact mode: the choices kept at (C, t, y), the same for every d; the items of
        # (C, t), the same for every y; the groups' sums (dp.knapsack.exact_choices_at)
        self.kept_at: dict[tuple[int, int, int], tuple | None] = {}
        self.items_at: dict[tuple[int, int], list] = {}
        self.group_memo: dict = {}
        self.computed: list[tuple[int, int, int, int]] = []

    def __len__(self) -> int:
        return len(self.computed)

    def choose(self, C: int, t: int, d: int, y: int) -> tuple[float, dict[int, Option]] | None:
        """The option choice of stage C with degrees (t, d) and y microbatches in flight.

        Parameters
        ----------
        C : int
            The stage, a bitmask over node positions.
        t, d : int
            The degrees.
        y : int
            Microbatches in flight.

        Returns
        -------
        (float, dict) or None
            The stage's TPS and its options (node id -> Option), or None when no choice
            fits.
        """
        key = (C, t, d, y)
        if key in self.memo:
            return self.memo[key]
        inst = self.instance
        nodes = [self.ids[i] for i in range(C.bit_length()) if (C >> i) & 1]
        got: tuple[float, dict[int, Option]] | None
        if self.greedy:
            opts = greedy_options(inst, nodes, t, d, y)
            got = None if opts is None else (stage_cost(inst, nodes, d, opts).tps, opts)
        else:
            kept = self.kept_at.get((C, t, y), False)
            if kept is False:
                items = self.items_at.get((C, t))
                if items is None:
                    items = self.items_at[(C, t)] = stage_items(inst, nodes, t)
                kept = self.kept_at[(C, t, y)] = exact_choices_at(items, y, inst.M, self.group_memo)
            res = None if kept is None else cheapest_choice(kept, len(nodes), d, inst.N, inst.B)
            if res is None:
                got = None
            else:
                opts = {v: inst.node[v].options[t][res[1][i]] for i, v in enumerate(nodes)}
                got = (res[0], opts)
        self.memo[key] = got
        self.computed.append(key)
        return got

    def exact_cost(self, C: int, t: int, d: int, y: int) -> float | None:
        """The least cost of :meth:`choose`, or None when no choice fits."""
        got = self.choose(C, t, d, y)
        return None if got is None else got[0]
