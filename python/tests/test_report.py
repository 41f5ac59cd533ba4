"""Report writing on synthetic results: the plots exist, every image the HTML and Markdown
reference exists, results.json is valid JSON, and the verdicts appear; also with glibc left
out of --allocators and with nothing measured at all."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from frugal.allocators import Allocator
from frugal.bench import LabRun, summary_rows, write_json
from frugal.experiments import EXPERIMENTS
from frugal.lab import scores
from frugal.plots import plot
from frugal.report import write_reports

from synthetic import CTX, make
from test_ops import ops_metrics
from test_verdicts import (ALLOCS, bigbuf_metrics, bufcache_metrics, fifo_metrics, footprint_metrics, shapes_metrics,
                           threads_metrics)

METRICS = {"bufcache": bufcache_metrics(True), "fifo": fifo_metrics(False), "bigbuf": bigbuf_metrics(True),
           "threads": threads_metrics(True), "footprint": footprint_metrics(False), "shapes": shapes_metrics(False),
           "ops": ops_metrics(False)}


def synthetic_lab(allocs: tuple[str, ...] = tuple(ALLOCS)) -> LabRun:
    lab = LabRun(CTX, [Allocator(a, None) for a in allocs], list(EXPERIMENTS.values()))
    for name, exp in EXPERIMENTS.items():
        res = make(name, list(allocs), METRICS[name])
        if name == "bufcache":
            for a in allocs:
                for c in res.cells:
                    res.series[a][c] = {"step": [0, 1000, 2000], "efficiency": [1.0, 0.9, 0.95]}
        if name == "fifo":
            for a in allocs:
                for c in res.cells:
                    res.series[a][c] = {"round_s": [0.1, 0.1, 0.11, 0.1]}
        if name == "footprint":
            for a in allocs:
                for c in res.cells:
                    res.series[a][c] = {"t": [0.0, 0.5, 1.0], "rss": [1e6, 3e8, 2e8]}
        lab.results[name] = res
        lab.verdicts[name] = exp.verdicts(res, CTX)
        lab.scores[name] = scores(res, exp.scored_cells(res))
    lab.meta = {"mode": "quick", "started": "now", "duration_s": 1.0, "machine": {"cores": 2},
                "allocators": [{"name": a, "library": None, "available": True, "reason": ""} for a in allocs]}
    return lab


def test_reports_reference_existing_images(tmp_path: Path) -> None:
    lab = synthetic_lab()
    images = write_reports(lab, tmp_path)
    assert set(images) == set(EXPERIMENTS)
    html = (tmp_path / "report.html").read_text()
    md = (tmp_path / "report.md").read_text()
    srcs = re.findall(r"<img src='([^']+)'", html)
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(srcs) == len(EXPERIMENTS) and len(refs) == len(EXPERIMENTS)
    for ref in srcs + refs:
        p = tmp_path / ref
        assert p.is_file() and p.stat().st_size > 10_000, ref
    assert "FAIL" in html and "PASS" in html and "FAIL" in md
    print("images:", srcs)


def test_results_json_and_summary(tmp_path: Path) -> None:
    lab = synthetic_lab()
    write_json(lab, tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    assert set(data["experiments"]) == set(EXPERIMENTS)
    assert data["experiments"]["fifo"]["verdicts"][0]["status"] == "fail"
    rows = summary_rows(lab)
    assert [r[0] for r in rows] == list(EXPERIMENTS)
    assert all(len(r) == len(ALLOCS) + 2 for r in rows)
    assert rows[1][-1] == "0/3 pass" and rows[0][-1] == "3/3 pass"


@pytest.mark.parametrize("allocs", [("frugal",), ("mimalloc", "frugal")])
def test_reports_without_glibc(tmp_path: Path, allocs: tuple[str, ...]) -> None:
    """Seed 4's times relative to glibc fall back to the first allocator, and say so."""
    images = write_reports(synthetic_lab(allocs), tmp_path)
    assert set(images) == set(EXPERIMENTS)
    for p in images.values():
        assert p.is_file() and p.stat().st_size > 10_000, p
    assert f"time relative to {allocs[0]} at 1 thread" in (tmp_path / "report.md").read_text()
    print(allocs, "->", sorted(p.name for p in images.values()))


def test_plots_with_nothing_measured(tmp_path: Path) -> None:
    """Every run failed: the log-scaled panels have no positive value, the PNGs are still written."""
    for name in EXPERIMENTS:
        path = tmp_path / f"{name}.png"
        plot(name, make(name, ["frugal"], lambda a, info, key: {"maxrss": math.nan}), CTX, path)
        assert path.is_file() and path.stat().st_size > 10_000, path
    print("written:", sorted(p.name for p in tmp_path.iterdir()))
