"""Shared fixtures and markers.

Markers (registered in pyproject.toml):

* ``shared``: the test reads ``../shared`` (the published profiles and reference plans).
  Tests that take the ``shared_dir`` fixture are marked automatically; a marked test is
  skipped, with the reason shown, when ``../shared`` is absent.
* ``slow``: a long-running case. Deselected by default (``-m "not slow"`` in addopts);
  ``python -m pytest -m slow`` runs that lane (CI runs both lanes, see ``.ci/run``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
INPUTS = REPO / "inputs"


def _shared_missing() -> str | None:
    if not (SHARED / "piper-inputs").is_dir():
        return f"needs the published Piper profiles in {SHARED}/piper-inputs (not present)"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.shared)


def pytest_runtest_setup(item):
    if item.get_closest_marker("shared") is not None:
        reason = _shared_missing()
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the checkout (the Piper profiles and reference plans);
    the test is skipped, with the reason shown, when it is absent."""
    reason = _shared_missing()
    if reason:
        pytest.skip(reason)
    return SHARED


@pytest.fixture(scope="session")
def inputs_dir() -> Path:
    return INPUTS
