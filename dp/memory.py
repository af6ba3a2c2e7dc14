"""Exact memory decisions (cost model sec. 7) with fast float filters: a float memory sum
decides away from M, ``fsum`` of the terms near it (:func:`fits_by_estimate`), and
:func:`kept_row_limit` widens "near" for rows kept by the frontier filters.
"""

from __future__ import annotations

import math

import numpy as np

from piper_ilp.cost import memory_fits

__all__ = [
    "float_band",
    "fits_certainly_limit",
    "fits_possibly_limit",
    "fits_by_estimate",
    "kept_row_limit",
    "truncate_low_bits",
]

_EPS = 2.0**-52


def float_band(n_terms: int) -> float:
    """A relative bound on the difference between a float sum of ``n_terms`` non-negative
    terms (any order, products a * y formed before or after summing the a) and the
    correctly rounded sum; generous by a factor of about 2. Every term is >= 0, so there
    is no cancellation.

    Examples
    --------
    >>> float_band(1) == 20 * 2.0**-52
    True
    """
    return (4 * max(int(n_terms), 1) + 16) * _EPS


def fits_certainly_limit(M: float, band: float) -> float:
    """M (1 - ``band``): a float memory value at most this fits in ``M`` exactly,
    whatever its rounding (``band`` from :func:`float_band`)."""
    return M * (1.0 - band)


def fits_possibly_limit(M: float, band: float) -> float:
    """M (1 + ``band``): a float memory value above this does not fit in ``M``, whatever
    its rounding; between the two limits it is *near the boundary*."""
    return M * (1.0 + band)


def kept_row_limit(M: float, band: float, drops: int, low_bits: int = 0) -> float:
    """A float memory value above this means that no choice the row replaced fits in ``M``.

    A frontier of option choices drops a row when another is no worse in float memory;
    float errors make "no worse" approximate, and a kept row may in turn be dropped, so
    the rows kept can need a little more than the choices they replaced. A decision on a
    kept row above ``M * (1 + band)`` but below this limit goes to the exact sum instead
    (a choice it replaced may fit).

    A row r is dropped for a row q when each compared float memory value of q (at the two
    ends of the y range, or its slope and constant) is <= r's, after both were truncated to
    ``low_bits`` fewer mantissa bits (:func:`truncate_low_bits`, relative loss below
    theta = 2**(low_bits - 52), absolute below 2**(low_bits - 1074)). Each value is within
    relative ``band`` of the exact sum, so exactly q needs at most (1 + eta) times what r
    needs at both ends, eta = (1 + band) / ((1 - band) (1 - theta)) - 1, and (memory being
    affine in y) at every y between. Adding the same option to q and r keeps that, so after
    a chain of at most ``drops`` drops, a choice that fits at y was replaced by a kept row
    needing at most M (1 + eta)^drops there, whose float value is at most that times
    (1 + band). Rounded up. (The loader keeps every number 0 or in [1e-30, 1e30], so no
    sum or product here is subnormal and theta is a true relative bound; the small
    absolute term only guards a value truncated near zero.)

    Parameters
    ----------
    M : float
        Memory per device.
    band : float
        :func:`float_band` of the sums compared.
    drops : int
        The most drops in a chain (per node added, per option group and for the node's own
        options).
    low_bits : int
        The mantissa bits the filters clear.

    Returns
    -------
    float
    """
    theta = 2.0 ** (int(low_bits) - 52)
    eta = (1.0 + band) / ((1.0 - band) * (1.0 - theta)) - 1.0
    growth = math.exp(int(drops) * math.log1p(eta))
    tiny = int(drops) * 2.0 ** (int(low_bits) - 1074) * 4.0
    return (M * growth * (1.0 + band) + tiny) * (1.0 + 16 * _EPS)


def truncate_low_bits(x: np.ndarray, low_bits: int) -> np.ndarray:
    """A copy of ``x`` (non-negative floats, inf allowed) with the lowest ``low_bits`` bits
    of each mantissa cleared: monotone (x <= x' gives the same order, ties included) and
    at most relative 2**(low_bits - 52) below x (for normal x; absolute 2**(low_bits -
    1074) for subnormals); float sums that differ only by their rounding mostly become
    equal.

    Examples
    --------
    >>> truncate_low_bits(np.array([1.0 + 2.0**-52, 1.0, np.inf]), 10).tolist()
    [1.0, 1.0, inf]
    """
    mask = np.int64(~((1 << int(low_bits)) - 1))
    return (np.asarray(x, dtype=np.float64).view(np.int64) & mask).view(np.float64)


def fits_by_estimate(est: np.ndarray, n_terms: int, M: float, terms_of_row) -> np.ndarray:
    """Whether each row's memory fits in M exactly (sec. 7: ``fsum`` of its terms <= M).

    A float estimate m decides for itself when m <= M (1 - band) (fits for certain) or
    m > M (1 + band) (does not fit for certain); only the rows near the boundary are
    summed exactly.

    Parameters
    ----------
    est : numpy.ndarray
        Per row, a float sum of at most ``n_terms`` non-negative terms.
    n_terms : int
        The most terms of a row (:func:`float_band`).
    M : float
        Memory per device.
    terms_of_row : callable
        ``terms_of_row(r)``: the list of row r's terms; called only near the boundary.

    Returns
    -------
    numpy.ndarray of bool

    Examples
    --------
    >>> fits_by_estimate(np.array([1.0, 3.0, 2.0]), 2, 2.0, lambda r: [1.0, 1.0]).tolist()
    [True, False, True]
    """
    band = float_band(n_terms)
    fits = est <= fits_certainly_limit(M, band)
    near = ~fits & (est <= fits_possibly_limit(M, band))
    for r in np.nonzero(near)[0].tolist():
        fits[r] = memory_fits(math.fsum(terms_of_row(r)), M)
    return fits
