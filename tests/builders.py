"""Small builders for instances written inline in tests."""

from __future__ import annotations


def option_dict(oid="vanilla", p=1.0, w=0.0, a=0.0, b=0.0, sfw=None, sbw=None) -> dict:
    """One option in the JSON form of cost model sec. 1 (sync keys become strings)."""
    return {
        "id": oid,
        "timePerSample": p,
        "parameterSize": w,
        "memoryUsageA": a,
        "memoryUsageB": b,
        "syncTimeFw": {str(k): v for k, v in (sfw or {}).items()},
        "syncTimeBw": {str(k): v for k, v in (sbw or {}).items()},
    }
