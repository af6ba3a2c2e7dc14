"""piper_ilp.bitmask.mask_bits against its definition (bit k set <=> k listed)."""

import random

from piper_ilp.bitmask import mask_bits


def _by_definition(mask: int) -> list[int]:
    return [k for k in range(mask.bit_length()) if mask >> k & 1]


def test_mask_bits_lists_the_set_bits_in_order():
    for mask in range(1 << 11):
        assert mask_bits(mask) == _by_definition(mask)
    rng = random.Random(8)
    for _ in range(200):  # wide masks (graphs of hundreds of nodes)
        mask = rng.getrandbits(rng.randrange(1, 700))
        assert mask_bits(mask) == _by_definition(mask)
