"""Exact memory decisions (cost model sec. 7) with fast float filters.

A stage fits when ``math.fsum`` of the floats a_v * y and b_v over its nodes is <= M, with
no slack (:func:`piper_ilp.cost.memory_fits`). The DP sums memory with plain float
additions (numpy, incremental sums over a walk), whose value differs from the correctly
rounded one by at most a relative :func:`float_band` (every term is >= 0, so there is no
cancellation). A float sum ``m`` therefore decides:

* ``m <= M * (1 - band)``: fits for certain;
* ``m > M * (1 + band)``: does not fit for certain;
* otherwise it is *near the boundary* and is re-checked with ``fsum`` on the terms.
"""

from __future__ import annotations

import math

import numpy as np

from piper_ilp.cost import memory_fits

__all__ = ["float_band", "fits_certainly_limit", "fits_possibly_limit", "fits_by_estimate"]

_EPS = 2.0**-52


def float_band(n_terms: int) -> float:
    """A relative bound on the difference between a float sum of ``n_terms`` non-negative
    terms (any order, products a * y formed before or after summing the a) and the
    correctly rounded sum; generous by a factor of about 2."""
    return (4 * max(int(n_terms), 1) + 16) * _EPS


def fits_certainly_limit(M: float, band: float) -> float:
    """A float memory value at most this fits in ``M`` exactly, whatever its rounding."""
    return M * (1.0 - band)


def fits_possibly_limit(M: float, band: float) -> float:
    """A float memory value above this does not fit in ``M``, whatever its rounding."""
    return M * (1.0 + band)


def fits_by_estimate(est: np.ndarray, n_terms: int, M: float, terms_of_row) -> np.ndarray:
    """For each row r with float memory estimate ``est[r]`` (a float sum of at most
    ``n_terms`` non-negative terms): whether fsum of its terms is <= M (sec. 7). Only
    rows near the boundary call ``terms_of_row(r)`` (the list of the row's terms)."""
    band = float_band(n_terms)
    fits = est <= fits_certainly_limit(M, band)
    near = ~fits & (est <= fits_possibly_limit(M, band))
    for r in np.nonzero(near)[0].tolist():
        fits[r] = memory_fits(math.fsum(terms_of_row(r)), M)
    return fits
