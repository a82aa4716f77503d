"""Shared fixtures: paths to the repository's test data and the shared benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def traces_dir() -> Path:
    return DATA / "traces"


@pytest.fixture
def shared_dir() -> Path:
    """../shared beside the checkout (or STALLOC_SHARED)."""
    return Path(os.environ.get("STALLOC_SHARED", REPO.parent / "shared"))
