"""Small builders for instances written inline in tests."""

from __future__ import annotations

from piper_ilp.instance import option_dict as _option_dict


def option_dict(oid="vanilla", p=1.0, w=0.0, a=0.0, b=0.0, sfw=None, sbw=None) -> dict:
    """One option in the JSON form of cost model sec. 1, with defaults for tests (sync keys
    become strings)."""
    return _option_dict(oid, p, w, a, b, {str(k): v for k, v in (sfw or {}).items()}, {str(k): v for k, v in (sbw or {}).items()})
