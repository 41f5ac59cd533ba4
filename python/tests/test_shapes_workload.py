"""The shapes experiment's workloads on their own, under the allocator they were started with:
every shape, run with the arguments the lab gives it in smoke mode, does the work asked with
every block's marks intact, and its record reduces to a time and a rate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from frugal.experiments import EXPERIMENTS
from frugal.experiments.shapes import BY_NAME, SHAPES
from frugal.lab import Context
from frugal.runner import Sample

SMOKE = Context(mode="smoke", cores=2)


def run(build: Path, program: str, *args: str) -> dict:
    proc = subprocess.run([str(build / "bench" / program), *args], capture_output=True, text=True, timeout=120)
    print(program, *args, "->", proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, "one record"
    return json.loads(lines[0])


@pytest.mark.parametrize("name", [s.name for s in SHAPES])
def test_every_shape_does_its_work_intact(build: Path, name: str) -> None:
    shape = BY_NAME[name]
    rec = run(build, shape.program, *shape.command(SMOKE))
    assert rec["bad"] == 0 and rec["wall_ns"] > 0 and rec["done"] > 0
    assert rec["threads"] == shape.thread_count(SMOKE)
    if shape.program == "threads":  # the cross variant: every block made was freed by the other thread
        assert rec["variant"] == "cross" and rec["done"] == shape.work["smoke"]
        return
    assert rec["shape"] == name and rec["unit"] == shape.unit and rec.get("final") is True
    if shape.fixed_time:
        ms = shape.ms["smoke"]
        assert rec["ms"] == ms and ms * 1e6 <= rec["wall_ns"] < ms * 1e6 + 0.5e9, "stopped when told to"
    elif name == "trees":  # whole trees: a little past the work asked, never short of it
        assert rec["done"] >= shape.work["smoke"]
    else:
        assert rec["done"] == shape.work["smoke"]
    if name == "fill-drain":  # the main thread's part, then the second thread's
        assert 0 < rec["first_ns"] and 0 < rec["second_ns"]
        assert rec["first_ns"] + rec["second_ns"] == rec["wall_ns"]


def test_every_cell_reduces_to_a_time_and_a_rate(build: Path) -> None:
    """Fixed-time shapes are quoted as the time of a fixed work at their rate: a run that did
    half of it in its time reads twice that time."""
    exp = EXPERIMENTS["shapes"]
    for cell in exp.cells(SMOKE):
        rec = run(build, cell.program, *cell.args)
        m, _ = exp.reduce(cell, Sample(1.0, 0.5, 0.1, 1 << 20, 10, 0, 0, records=[rec]))
        assert m["rate"] == pytest.approx(rec["done"] / (rec["wall_ns"] / 1e9))
        assert m["time"] == pytest.approx(cell.info["work"] / m["rate"]) and m["time"] > 0
    cell = next(c for c in exp.cells(SMOKE) if c.key == "working-set")
    half = {"wall_ns": 500_000_000, "done": cell.info["work"] // 2}
    m, _ = exp.reduce(cell, Sample(0.6, 1.0, 0.0, 1 << 20, 10, 0, 0, records=[half]))
    assert m["time"] == pytest.approx(1.0)


def test_bad_arguments_are_refused(build: Path) -> None:
    for args in (["--shape", "nosuch"], [], ["--shape", "minimizer", "--threads", "2"],
                 ["--shape", "trees", "--min-size", "16"],  # a node's links and size need 24 bytes
                 ["--shape", "trees", "--depth", "2"], ["--shape", "server", "--ms", "0"],
                 ["--shape", "fill-drain", "--min-size", "64", "--max-size", "16"],
                 ["--shape", "working-set", "extra"]):
        proc = subprocess.run([str(build / "bench" / "shapes"), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and "usage" in proc.stderr, args
