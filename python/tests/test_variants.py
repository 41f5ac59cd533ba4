"""Pricing any variant (issue #13: what secure mode costs): a variant named in --allocators
comes with its base and runs on every timed cell, while the ledger that frugal brings runs on
its representative few; each measured variant's time over its base's is in results.json, the
summary's columns and the reports, and only the ledger's is judged."""

from __future__ import annotations

import html
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from frugal.allocators import EVERY_TIMED_CELL, REPRESENTATIVE_CELLS, Allocator
from frugal.bench import judge, runnable
from frugal.experiments import EXPERIMENTS
from frugal.lab import FRUGAL, LEDGER, Context
from frugal.report import all_price_lines, summary_table

from conftest import build_dir
from test_ledger import built, lab_allocators, lab_of, walls
from test_verdicts import ALLOCS

SECURE = "frugal+secure"


def test_a_named_variant_brings_its_base_and_runs_every_timed_cell(tmp_path: Path) -> None:
    build = built(tmp_path)
    for spec in (f"{FRUGAL},{SECURE}", SECURE, f"{SECURE},{FRUGAL}"):
        found = {a.name: a for a in lab_allocators(spec, build)}
        assert list(found) == [FRUGAL, LEDGER, SECURE], spec
        assert found[SECURE].runs_on == EVERY_TIMED_CELL and found[SECURE].variant_of == FRUGAL
        assert found[SECURE].env({})["FRUGAL_SECURE"] == "1"
        assert found[LEDGER].runs_on == REPRESENTATIVE_CELLS, spec
    # Named, the ledger too runs on every timed cell; not named, secure mode never runs.
    assert lab_allocators(f"{FRUGAL},{LEDGER}", build)[-1].runs_on == EVERY_TIMED_CELL
    for spec in (None, FRUGAL):
        assert [a.name for a in lab_allocators(spec, build)][-2:] == [FRUGAL, LEDGER], spec


def test_runnable_gives_each_variant_its_cells() -> None:
    ctx = Context(mode="quick", cores=2)
    ledger = Allocator(LEDGER, None, variant_of=FRUGAL, runs_on=REPRESENTATIVE_CELLS)
    secure = Allocator(SECURE, None, variant_of=FRUGAL, runs_on=EVERY_TIMED_CELL)
    for exp in EXPERIMENTS.values():
        cells = runnable(exp, exp.cells(ctx), ctx, [ledger, secure])
        assert [c.key for c in cells if SECURE in c.variants] == exp.timed_cells(ctx), exp.name
        assert [c.key for c in cells if LEDGER in c.variants] == exp.variant_cells(ctx), exp.name
        print(exp.name, "secure on", len(exp.timed_cells(ctx)), "cells, ledger on", len(exp.variant_cells(ctx)))


def test_secure_is_priced_not_judged() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        secure = 4.0 if info["policy"] == "none" else 2.0
        return walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 1.0, LEDGER: 1.05, SECURE: secure})(a, info, key)
    lab = lab_of("bufcache", f, variants=(LEDGER, SECURE))
    cost = lab.costs["bufcache"][SECURE]
    assert math.isclose(cost["ratio"], 2.0 * 2.0 ** (1 / 5)) and cost["max"] is None and cost["base"] == FRUGAL
    assert lab.ledger == {"bufcache": lab.costs["bufcache"][LEDGER]}
    assert [v.name for v in lab.verdicts["bufcache"] if "secure" in v.name] == []
    assert not lab.failed()  # secure mode's 2× fails no verdict
    head, (row,) = summary_table(lab)
    assert head == ["experiment"] + ALLOCS + ["ledger", "secure", "frugal verdicts"]
    assert row[-3:-1] == ["1.05", f"{cost['ratio']:.2f}"]
    (line,) = all_price_lines(lab)
    print(line)
    assert line.startswith(f"bufcache: {SECURE}'s time over frugal's") and "slowest: none 4.00×" in line
    lab.results["bufcache"].errors[SECURE]["buckets"] = ["signal 11 (SIGSEGV)"]
    del lab.results["bufcache"].med[SECURE]["buckets"]
    judge(lab, EXPERIMENTS["bufcache"], lab.results["bufcache"])
    assert all_price_lines(lab)[0].endswith("; failed in buckets")


@pytest.fixture
def frugal_build() -> Path:
    b = build_dir(("libfrugal.so", "bench/bufcache", "bench/bigbuf", "bench/rusage"))
    if b is None:
        pytest.skip("libfrugal.so and the workloads not built: set FRUGAL_BUILD (make test does)")
    return b


def bench(build: Path, out: Path, *args: str) -> dict:
    """`frugal bench --smoke` with `args`; its results.json."""
    proc = subprocess.run([sys.executable, "-m", "frugal", "bench", "--smoke", "--build", str(build), "--out",
                           str(out), *args], capture_output=True, text=True, timeout=120)
    print(proc.stdout[-2500:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "results.json").read_text())


def test_bench_prices_a_named_variant_on_every_timed_cell(frugal_build: Path, tmp_path: Path) -> None:
    # bigbuf's ledger runs 4 of its 16 timed cells in smoke mode: secure mode must run them all.
    data = bench(frugal_build, tmp_path, "bufcache", "bigbuf", "--allocators", f"{FRUGAL},{SECURE}")
    ctx = Context(mode="smoke")
    for name, exp in data["experiments"].items():
        timed = EXPERIMENTS[name].timed_cells(ctx)
        ran = [c for c, runs in exp["raw"][SECURE].items() if runs]
        assert ran == timed, name
        cost = exp["costs"][SECURE]
        assert set(cost["per_cell"]) == set(timed) and cost["ratio"] > 0 and cost["max"] is None, name
        assert exp["ledger"] == exp["costs"][LEDGER] and len(exp["ledger"]["per_cell"]) <= len(timed)
        assert not [v for v in exp["verdicts"] if "secure" in v["name"]]
    assert len(data["experiments"]["bigbuf"]["ledger"]["per_cell"]) < len(EXPERIMENTS["bigbuf"].timed_cells(ctx))
    summary = (tmp_path / "report.md").read_text().split("## 1.")[0]
    header = next(line for line in summary.splitlines() if line.startswith("| experiment"))
    assert [h.strip() for h in header.strip("|").split("|")][-3:] == ["ledger", "secure", "frugal verdicts"]
    for name, exp in data["experiments"].items():
        row = next(line for line in summary.splitlines() if line.startswith(f"| {name} "))
        assert f"{exp['costs'][SECURE]['ratio']:.2f}" in row.split("|")[-3], row
        assert f"{name}: {SECURE}'s time over frugal's — " in summary
    page = (tmp_path / "report.html").read_text()
    assert re.search(r"<th>ledger\s*</th>\s*<th>secure\s*</th>", page) and html.escape(f"{SECURE}'s time over frugal's") in page


def test_default_bench_brings_only_the_ledger(frugal_build: Path, tmp_path: Path) -> None:
    data = bench(frugal_build, tmp_path, "bufcache")
    variants = [a["name"] for a in data["meta"]["allocators"] if a["variant_of"]]
    assert variants == [LEDGER]
    exp = data["experiments"]["bufcache"]
    assert list(exp["costs"]) == [LEDGER] and exp["summary"]["variants"] == [LEDGER]
    assert SECURE not in (tmp_path / "report.md").read_text()
