"""The sampled heap profile (issue 13): `frugal run --profile` on tests/ledger/profile_sites,
whose sites allocate known byte totals, against those totals and against `frugal run --leaks`'
exact count of the bytes each site leaves live; the files it writes; and the flame graph
drawn from folded stacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from frugal import ledger as L
from frugal import profile as P

MIB = 1 << 20
# What profile_sites.c allocates at each site over the run, and holds at its peak.
ALLOCATED = {"site_small": 64 * MIB, "site_mixed": 48 * MIB, "site_large": 40 * MIB, "site_burst": 32 * MIB}
PEAK = {"site_small": 16 * MIB, "site_mixed": 24 * MIB, "site_large": 10 * MIB, "site_burst": 32 * MIB}
# One sample per 4 KiB: some 4,000 samples for the smallest site's 16 MiB live, so the
# estimates' noise (about 1/sqrt(samples), 1.6 %) is far inside the 10 % asked for.
SAMPLE_BYTES = 4096


@pytest.fixture
def build(ledger_build: Path) -> Path:
    if not (ledger_build / "tests" / "ledger" / "profile_sites").is_file():
        pytest.skip("tests/ledger/profile_sites not built")
    return ledger_build


def frugal_run(build: Path, out: Path, flag: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "frugal", "run", "--build", str(build), "-o", str(out), "--no-plots", flag, "--",
            str(build / "tests" / "ledger" / "profile_sites")]
    env = {**os.environ, "FRUGAL_SAMPLE_BYTES": str(SAMPLE_BYTES), "FRUGAL_PURGE_THREAD": "0"}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0
    return proc


def by_site(sites: list, name_of, value_of) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in sites:
        name = name_of(s)
        out[name] = out.get(name, 0) + value_of(s)
    return out


def within(estimate: float, exact: float, tolerance: float = 0.10) -> bool:
    return abs(estimate - exact) <= tolerance * exact


def test_profile_estimates_within_10_percent_of_exact_counts(build: Path, tmp_path: Path) -> None:
    frugal_run(build, tmp_path / "leaks", "--leaks")
    leaks = json.loads((tmp_path / "leaks" / "ledger.json").read_text())
    exact_live = by_site(L.leak_sites(leaks), L.site_function, lambda s: s["bytes"])
    frugal_run(build, tmp_path / "prof", "--profile")
    doc = json.loads((tmp_path / "prof" / "profile.json").read_text())
    sites = {s.name: s for s in P.sites(doc)}
    for name in ALLOCATED:
        s = sites[name]
        print(f"{name}: allocated ~{s.alloc_bytes / MIB:.2f} MiB (exact {ALLOCATED[name] / MIB:.0f}), peak "
              f"~{s.peak_bytes / MIB:.2f} ({PEAK[name] / MIB:.0f}), live at exit ~{s.live_bytes / MIB:.2f} "
              f"(--leaks: {exact_live.get(name, 0) / MIB:.2f})")
        assert within(s.alloc_bytes, ALLOCATED[name]), name
        assert within(s.peak_bytes, PEAK[name]), name
        if name == "site_burst":  # freed before exit: --leaks sees nothing of it
            assert name not in exact_live and s.live_bytes < 0.01 * ALLOCATED[name]
        else:
            assert within(s.live_bytes, exact_live[name]), name
    # Blocks: 256 B blocks at site_small, so a quarter million of them.
    assert within(sites["site_small"].alloc_count, 64 * MIB / 256)


def test_profile_writes_folded_stacks_flame_graphs_and_top_sites(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "prof"
    proc = frugal_run(build, out, "--profile")
    assert "heap profile" in proc.stdout + proc.stderr
    for name in ("alloc.folded", "live.folded", "peak.folded", "flame-alloc.svg", "flame-live.svg"):
        assert (out / name).stat().st_size > 0, name
    # Folded lines: root first (main before the site), a byte count at the end, named by file:line.
    alloc = (out / "alloc.folded").read_text().splitlines()
    small = next(line for line in alloc if "site_small" in line)
    stack, _, value = small.rpartition(" ")
    assert stack.index("main") < stack.index("site_small") and "profile_sites.c:" in stack
    assert within(int(value), 64 * MIB)
    live = (out / "live.folded").read_text()
    assert "site_burst" not in live and "site_mixed" in live
    ET.parse(out / "flame-alloc.svg")  # well-formed
    report = (out / "report.md").read_text()
    assert "Top 20 sites by bytes allocated" in report and "site_small" in report


def test_flame_graph_widths_follow_the_bytes() -> None:
    lines = ["main;a;x 300", "main;a;y 100", "main;b 600"]
    svg = ET.fromstring(P.flame_svg(lines, "test", width=1020))
    ns = "{http://www.w3.org/2000/svg}"
    widths = {}
    for g in svg.iter(f"{ns}g"):
        name = g.find(f"{ns}title").text.split(":")[0]
        widths[name] = float(g.find(f"{ns}rect").get("width"))
    assert widths["all"] == pytest.approx(1000) and widths["main"] == pytest.approx(1000)
    assert widths["b"] == pytest.approx(600, abs=0.1) and widths["a"] == pytest.approx(400, abs=0.1)
    assert widths["x"] == pytest.approx(300, abs=0.1) and widths["y"] == pytest.approx(100, abs=0.1)
    ys = {g.find(f"{ns}title").text.split(":")[0]: float(g.find(f"{ns}rect").get("y")) for g in svg.iter(f"{ns}g")}
    assert ys["all"] > ys["main"] > ys["a"] > ys["x"]  # callees above their callers


def test_folded_lines_are_root_first_and_skip_empty_views() -> None:
    doc = {"stacks": [{"alloc_bytes": 10.4, "live_bytes": 0, "peak_bytes": 0,
                       "frames": [{"function": "leaf", "file": "a.c", "line": 3}, {"function": "root;x"}]}]}
    assert P.folded(doc, "alloc") == ["root:x;leaf (a.c:3) 10"]
    assert P.folded(doc, "live") == []
