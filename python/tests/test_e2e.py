"""End to end: `frugal bench --smoke` over the workloads of the build (FRUGAL_BUILD) with
every allocator found (at least two: glibc plus the Debian ones or frugal; libc itself
preloaded stands in when nothing else is installed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from frugal.allocators import discover, find_library, system_lib_dirs
from frugal.lab import FRUGAL, LEDGER


def test_smoke_run(build: Path, tmp_path: Path) -> None:
    found = [a.name for a in discover(None, build) if a.available]
    spec = ",".join(found)
    if len(found) < 2:
        libc = find_library(["libc.so.6"], system_lib_dirs())
        assert libc is not None
        spec += f",libc-preloaded={libc}"
    out = tmp_path / "lab"
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "frugal", "bench", "--smoke", "--build", str(build),
                           "--out", str(out), "--allocators", spec], capture_output=True, text=True, timeout=300)
    took = time.time() - t0
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert took < 60, f"smoke run took {took:.0f} s"
    data = json.loads((out / "results.json").read_text())
    measured = [a["name"] for a in data["meta"]["allocators"] if a["available"]]
    assert len(measured) >= 2
    for name, exp in data["experiments"].items():
        summary = exp["summary"]
        assert set(summary["median"]) == set(measured), name
        for a in measured:
            if a in (FRUGAL, LEDGER):
                continue  # frugal may still be under construction; its failures are verdicts
            assert not any(summary["errors"][a].values()), (name, a, summary["errors"][a])
        assert (out / f"{name}.png").is_file()
        if "frugal" not in measured:
            assert all(v["status"] == "n/a" for v in exp["verdicts"])
        if LEDGER in measured:  # the ledger's price is measured and judged
            assert exp["ledger"]["per_cell"] and exp["verdicts"][-1]["name"].startswith("ledger on / off")
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert "Summary" in proc.stdout
    # Seed 1's process is deterministic: glibc's rand(), never seeded.
    med = data["experiments"]["bufcache"]["summary"]["median"]
    assert med[measured[0]]["none"]["eff_mean"] > 0.5
    print(f"smoke run: {took:.1f} s, allocators {measured}")


def test_check_flag_fails_on_failed_verdict(build: Path, tmp_path: Path) -> None:
    # A "frugal" that is plain libc preloaded: present, so verdicts are judged, and it cannot
    # meet all of them (its fifo ns/byte cliffs and bigbuf faults are glibc's); --check fails.
    libc = find_library(["libc.so.6"], system_lib_dirs())
    assert libc is not None
    proc = subprocess.run([sys.executable, "-m", "frugal", "bench", "bigbuf", "--smoke", "--check", "--build",
                           str(build), "--out", str(tmp_path / "lab"), "--allocators", f"glibc,frugal={libc}"],
                          capture_output=True, text=True, timeout=120)
    print(proc.stdout[-2000:])
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout
