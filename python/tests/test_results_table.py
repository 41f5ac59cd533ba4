"""`frugal table`: the README's results table made from a lab run's results.json — here a
synthetic one — printed, and written between the page's markers without touching the rest."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from frugal import results_table
from frugal.bench import write_json
from frugal.units import MiB

from test_report import synthetic_lab

META = {"mode": "quick", "started": "2026-01-02T03:04:05", "duration_s": 300.0,
        "command": "/somewhere/.venv/bin/frugal bench --build build --out out/lab",
        "machine": {"host": "vm", "kernel": "6.1.0", "cpu": "Some CPU", "cores": 2, "memory_bytes": 8 << 30},
        "context": {"mode": "quick", "cores": 2, "repetitions": 3}}


def synthetic_results(out: Path) -> dict:
    """A lab run's results.json written into `out` (and returned), from the report tests'
    synthetic lab, with a run's meta."""
    lab = synthetic_lab()
    lab.meta.update(META)
    write_json(lab, out / "results.json")
    return json.loads((out / "results.json").read_text())


def test_table_has_a_row_per_workload_and_a_column_per_allocator(tmp_path: Path) -> None:
    results = synthetic_results(tmp_path)
    head, rows = results_table.rows(results)
    allocators = results["experiments"]["bufcache"]["summary"]["allocators"]
    assert head == ["workload"] + allocators
    labels = [r[0] for r in rows]
    summaries = [label for key, label in results_table.SUMMARY_ROWS if results["experiments"].get(key, {}).get("scores")]
    assert len(summaries) >= 4 and labels[:len(summaries)] == summaries
    footprint_cells = results["experiments"]["footprint"]["summary"]["cells"]
    assert labels[len(summaries):] == [label for key, label in results_table.FOOTPRINT_ROWS if key in footprint_cells]
    for row in rows:
        assert len(row) == len(head)
        for cell in row[1:]:
            assert re.fullmatch(r"(\*\*)?[\d.]+ (ns|ms|s)(\*\*)?<br>(\*\*)?[\d.]+ MiB(\*\*)?", cell), cell
        # the best time and the best peak of a row are bold
        assert any(c.startswith("**") for c in row[1:]) and any(c.endswith("MiB**") for c in row[1:])


def test_cells_show_the_medians_of_the_run(tmp_path: Path) -> None:
    results = synthetic_results(tmp_path)
    med = results["experiments"]["footprint"]["summary"]["median"]["glibc"]["sqlite3"]
    med.update(wall=1.234, maxrss=40.5 * MiB)
    _, rows = results_table.rows(results)
    sqlite = next(r for r in rows if r[0].startswith("sqlite3"))
    glibc = 1 + results["experiments"]["bufcache"]["summary"]["allocators"].index("glibc")
    assert sqlite[glibc].replace("**", "") == "1.23 s<br>40.5 MiB"


def test_single_operations_read_in_nanoseconds(tmp_path: Path) -> None:
    """The ops experiment's time is nanoseconds per operation: its row says so, not '8.8e-06 ms'."""
    results = synthetic_results(tmp_path)
    results["experiments"]["ops"]["scores"]["glibc"].update(time=8.84, rss=2.5 * MiB)
    _, rows = results_table.rows(results)
    ops = next(r for r in rows if r[0].startswith("single operations"))
    glibc = 1 + results["experiments"]["bufcache"]["summary"]["allocators"].index("glibc")
    assert ops[glibc].replace("**", "") == "8.84 ns<br>2.5 MiB"


def test_caption_gives_date_machine_and_command(tmp_path: Path) -> None:
    text = results_table.markdown(synthetic_results(tmp_path))
    first = text.splitlines()[0]
    assert first.startswith("Measured 2026-01-02 on Some CPU (2 cores, 8 GiB, Linux 6.1.0) by "
                            "`frugal bench --build build --out out/lab` (quick mode, median of 3 runs; 1 for FIFO, "
                            "many sizes; 5 for program shapes).")


def test_command_writes_between_the_markers_only(tmp_path: Path) -> None:
    synthetic_results(tmp_path)
    (tmp_path / "bufcache.png").write_bytes(b"\x89PNG fake")
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nbefore\n\n{results_table.START}\nold table\n{results_table.END}\n\nafter\n")
    cmd = [sys.executable, "-m", "frugal", "table", str(tmp_path / "results.json"), "--into", str(page),
           "--plots", str(tmp_path / "img")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n\n" + results_table.START + "\nMeasured 2026-01-02")
    assert text.endswith(results_table.END + "\n\nafter\n") and "old table" not in text
    assert (tmp_path / "img" / "bufcache.png").read_bytes() == b"\x89PNG fake"
    # Run again: the same page (the markers stay, the table is replaced, not added).
    subprocess.run(cmd, check=True, capture_output=True)
    assert page.read_text() == text


def test_command_prints_without_into(tmp_path: Path) -> None:
    synthetic_results(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "frugal", "table", str(tmp_path / "results.json")],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.startswith("Measured 2026-01-02") and "| workload" in proc.stdout


@pytest.mark.parametrize("problem", ["no markers", "no file", "not json"])
def test_command_errors(tmp_path: Path, problem: str) -> None:
    synthetic_results(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("# no markers here\n")
    results = tmp_path / "results.json"
    if problem == "no file":
        results = tmp_path / "missing.json"
    if problem == "not json":
        results.write_text("{")
    proc = subprocess.run([sys.executable, "-m", "frugal", "table", str(results), "--into", str(page)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "error" in proc.stdout
    assert page.read_text() == "# no markers here\n"
