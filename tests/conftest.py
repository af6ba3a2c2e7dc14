"""Shared fixtures: where the published Piper profiles live, and the project's inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
INPUTS = REPO / "inputs"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the checkout (the Piper profiles and reference plans);
    the test is skipped, with the reason shown, when it is absent."""
    if not (SHARED / "piper-inputs").is_dir():
        pytest.skip(f"needs the published Piper profiles in {SHARED}/piper-inputs (not present)")
    return SHARED


@pytest.fixture(scope="session")
def inputs_dir() -> Path:
    return INPUTS
