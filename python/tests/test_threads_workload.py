"""bench/threads on its own, under the allocator it was started with: every variant does the
work asked of it with every block's tag intact, and --max-ms stops a run and says how far it
got, which the lab extrapolates from."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

VARIANTS = ("malloc", "global-mutex", "mutex-array", "cross", "storm", "bursts", "takeover", "remote")


def threads(build: Path, *args: str) -> dict:
    proc = subprocess.run([str(build / "bench" / "threads"), *args], capture_output=True, text=True, timeout=120)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_does_its_work_intact(build: Path, variant: str) -> None:
    rec = threads(build, "--variant", variant, "--threads", "4", "--size", "256", "--objects", "30000",
                  "--rounds", "20")
    assert rec["bad"] == 0 and rec["stopped"] is False
    assert rec["done"] >= 30000 and rec["wall_ns"] > 0
    if variant not in ("storm", "takeover"):  # those round the work up to whole rounds
        assert rec["done"] == 30000


@pytest.mark.parametrize("variant", ["malloc", "cross", "storm", "takeover", "remote"])
def test_max_ms_stops_the_run_and_reports_the_work_done(build: Path, variant: str) -> None:
    rec = threads(build, "--variant", variant, "--threads", "2", "--size", "128", "--objects", "10G",
                  "--max-ms", "30")
    assert rec["stopped"] is True and rec["max_ms"] == 30 and rec["bad"] == 0
    assert 0 < rec["done"] < rec["objects"]
    assert 0.025e9 <= rec["wall_ns"] < 5e9, "stopped near its deadline, not at the end of the work"


def test_bad_arguments_are_refused(build: Path) -> None:
    for args in (["--variant", "nosuch"], ["--variant", "bursts", "--threads", "1"], ["--rounds", "0"],
                 ["--variant", "storm", "--size", "16"]):  # a tagged block needs 24 bytes
        proc = subprocess.run([str(build / "bench" / "threads"), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "usage" in proc.stderr, args


@pytest.mark.parametrize("variant", ["cross", "bursts", "remote"])
def test_held_peak_counts_what_the_workload_holds_between_threads(build: Path, variant: str) -> None:
    """held_peak: the most bytes handed to another thread and not yet freed there. The queue
    holds at most 2 x N batches of --batch blocks (bursts: of up to 2 x --size bytes each); the
    mailboxes are unbounded, but something is always mailed."""
    n, size, batch = 4, 256, 100
    rec = threads(build, "--variant", variant, "--threads", str(n), "--size", str(size), "--objects", "200000",
                  "--batch", str(batch))
    assert rec["bad"] == 0 and rec["held_peak"] > 0
    if variant != "remote":
        per_block = size if variant == "cross" else 2 * size
        assert rec["held_peak"] <= 2 * n * batch * per_block
