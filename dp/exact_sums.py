"""Correctly rounded sums of many short rows at once (``math.fsum`` of each row).

A stage's cut-edge bytes E is the ``fsum`` of its cut edges' terms (cost model sec. 7); the
exact DP needs it for tens of thousands of stages, and a Python loop per stage costs more
than the rest of their table rows. :func:`fsum_rows` gives the same floats with a few
numpy passes over the rows laid side by side.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fsum_rows"]

#: The unit roundoff of float64, u = 2**-53.
_U = 2.0**-53


def fsum_rows(vals: np.ndarray) -> np.ndarray:
    """``math.fsum`` of each row of ``vals`` (m x k, non-negative floats; zeros pad the
    short rows; nan and inf allowed), bit for bit.

    Each row is summed in float with the error of every addition kept exactly (TwoSum)
    and the errors summed on the side; (hi, lo) = Fast2Sum(sum, errors) is then within
    delta = (k + 2)^2 u^2 hi of the exact sum S (for non-negative terms the side sum's own
    error is at most about k^2 u^2 S). When S is certainly on hi's side of both midpoints
    to hi's neighbours (|lo| + delta below half of each gap), the correctly rounded sum is
    hi; the few rows that are too near a midpoint, and the rows that are not finite, go
    to ``math.fsum`` (which raises OverflowError where it would).

    Parameters
    ----------
    vals : numpy.ndarray
        m x k.

    Returns
    -------
    numpy.ndarray
        m sums.

    Examples
    --------
    >>> fsum_rows(np.array([[0.1, 0.2, 0.3], [1e16, 1.0, 1.0]])).tolist()
    [0.6, 1.0000000000000002e+16]
    """
    vals = np.asarray(vals, dtype=np.float64)
    m, k = vals.shape
    s = np.zeros(m)
    c = np.zeros(m)
    with np.errstate(invalid="ignore", over="ignore"):  # (rows with inf or nan go to fsum)
        for j in range(k):
            x = vals[:, j]
            t = s + x
            z = t - s
            c += (s - (t - z)) + (x - z)  # TwoSum: s + x = t + that, exactly
            s = t
        hi = s + c
        lo = c - (hi - s)  # Fast2Sum (|s| >= |c|): hi + lo = s + c, exactly
        delta = (k + 2.0) ** 2 * _U * _U * hi
        up = np.nextafter(hi, np.inf) - hi
        down = hi - np.nextafter(hi, 0.0)
        ok = (lo + delta < up / 2) & (delta - lo < down / 2)
    ok |= (hi == 0.0) & (lo == 0.0)  # every term 0
    ok &= np.isfinite(hi)
    out = hi
    for r in np.nonzero(~ok)[0].tolist():
        out[r] = math.fsum(vals[r].tolist())
    return out
