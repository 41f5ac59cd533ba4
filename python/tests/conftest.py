"""Shared fixtures: where the build is (FRUGAL_BUILD, absolute, as `make test` sets it) and
a small synthetic-results builder for the verdict tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def build_dir(needs: tuple[str, ...] = ("bench/bufcache", "bench/rusage")) -> Path | None:
    """The build directory, if it holds every file of `needs`."""
    env = os.environ.get("FRUGAL_BUILD")
    candidates = [Path(env)] if env else [Path(__file__).resolve().parents[2] / "build"]
    for c in candidates:
        if all((c / n).is_file() for n in needs):
            return c
    return None


@pytest.fixture
def build() -> Path:
    b = build_dir()
    if b is None:
        pytest.skip("workloads not built: set FRUGAL_BUILD to the build directory (make test does)")
    return b


@pytest.fixture
def ledger_build() -> Path:
    """A build with libfrugal.so and the ledger's test programs (tests/ledger)."""
    b = build_dir(("libfrugal.so", "tests/ledger/leak_c", "tests/ledger/ledger_pattern"))
    if b is None:
        pytest.skip("libfrugal.so and tests/ledger not built: set FRUGAL_BUILD (make test does)")
    return b
