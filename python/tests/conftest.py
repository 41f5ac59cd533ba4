"""Shared fixtures: where the build is (FRUGAL_BUILD, absolute, as `make test` sets it) and
a small synthetic-results builder for the verdict tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def build_dir() -> Path | None:
    env = os.environ.get("FRUGAL_BUILD")
    candidates = [Path(env)] if env else [Path(__file__).resolve().parents[2] / "build"]
    for c in candidates:
        if (c / "bench" / "bufcache").is_file() and (c / "bench" / "rusage").is_file():
            return c
    return None


@pytest.fixture
def build() -> Path:
    b = build_dir()
    if b is None:
        pytest.skip("workloads not built: set FRUGAL_BUILD to the build directory (make test does)")
    return b
