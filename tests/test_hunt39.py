"""hunt39's findings on main 98bb4a0 (adversarial hunt, session 8), as regression tests: each
strict xfail until the owner's fix lands (then the mark goes and the test joins the tests of
what it guards)."""

from __future__ import annotations

import pytest

from compare.builders.generators import random_instance
from compare.crosscheck.verify import verify_instance
from piper_ilp.errors import InputError
from piper_ilp.mode import Mode
from piper_ilp.solution import Restrictions


@pytest.mark.xfail(
    strict=True,
    reason="hunt39 N1 (owner verify39): --milp-hint is accepted when its only taker is path "
    "in a mode or under a restriction path refuses; path is then skipped and the hint ignored",
)
@pytest.mark.parametrize(
    "mode,restrictions",
    [(Mode("graph"), Restrictions()), (Mode(), Restrictions(uniform=True))],
    ids=["graph", "uniform"],
)
def test_milp_hint_whose_only_taker_path_refuses_is_refused(mode, restrictions):
    # 6165cf7 refuses --milp-hint "never accepted and then ignored" when no method takes a
    # hint; path takes one, but refuses graph pipelining and uniform degrees (path_refusal,
    # known before anything runs), so dp,path --milp-hint gives the hint to nobody and the
    # verdict is dp's single proof with milp_hint false
    inst = random_instance("fork-join", 5, 7)
    with pytest.raises(InputError, match="--milp-hint"):
        verify_instance(
            inst,
            ("dp", "path"),
            restrictions,
            greedy=False,
            milp_hint=True,
            mode=mode,
        )
