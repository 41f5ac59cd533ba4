"""`frugal compare`: the allocators it picks, the winner rule, results.json against its schema,
--env for one allocator only, --stdin, and the exit code when an allocator changes the output."""

from __future__ import annotations

import html
import json
import subprocess
import sys
from pathlib import Path

from frugal.allocators import Allocator, chosen
from frugal.compare import Comparison, Outcome, validate


def compare(build: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "frugal", "compare", "--build", str(build), "-o", str(out), *args],
                          capture_output=True, text=True, timeout=300)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    return proc


def test_variants_stand_for_themselves_and_glibc_comes_first(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "libfrugal.so").write_bytes(b"\x7fELF")
    picked = chosen("frugal+secure,frugal", build, [])
    assert [a.name for a in picked] == ["glibc", "frugal+secure", "frugal"]
    assert picked[1].extra_env == {"FRUGAL_SECURE": "1"} and picked[1].library == picked[2].library
    assert picked[2].extra_env == {}
    print("picked:", [a.describe() for a in picked])


def synthetic(walls: dict[str, list[float]]) -> Comparison:
    outcomes = [Outcome(Allocator(name, None), [{"wall_s": w, "user_s": w, "sys_s": 0.0, "peak_rss_kib": 1000,
                                                 "minor_faults": 10, "major_faults": 0, "exit_code": 0,
                                                 "stdout_matches": True} for w in ws])
                for name, ws in walls.items()]
    return Comparison(["prog"], 3, outcomes, [], False)


def test_winner_only_where_ranges_do_not_touch() -> None:
    clear = synthetic({"glibc": [1.0, 1.1, 1.2], "a": [0.5, 0.6, 0.7], "b": [0.8, 0.9, 0.95]})
    assert clear.winner("time") == "a"
    assert clear.winner("rss") is None  # every peak RSS is the same
    close = synthetic({"glibc": [1.0, 1.1, 1.2], "a": [0.5, 0.6, 0.81], "b": [0.8, 0.9, 0.95]})
    assert close.winner("time") is None and close.best("wall_s").alloc.name == "a"
    near = synthetic({"glibc": [1.0, 1.1, 1.2], "a": [0.5, 0.6, 0.795], "b": [0.8, 0.9, 0.95]})
    assert near.winner("time") is None  # apart, but by under MIN_GAP
    failing = synthetic({"glibc": [1.0, 1.1, 1.2], "a": [0.5, 0.6, 0.7]})
    failing.outcomes[1].runs[0]["stdout_matches"] = False
    assert failing.winner("time") is None and failing.exit_code == 1
    print("winners:", clear.winner("time"), close.winner("time"), failing.winner("time"))


def test_compare_runs_writes_valid_results_and_reports(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    script = tmp_path / "prog.py"
    script.write_text("import os, sys\nd = {i: str(i) for i in range(20000)}\n"
                      "print(len(d), sys.stdin.read().count('x'), os.environ.get('FRUGAL_DECAY_MS'))\n")
    stdin = tmp_path / "in.txt"
    stdin.write_text("x\n" * 7)
    proc = compare(build, out, "-n", "2", "--allocators", "glibc,frugal,frugal+secure",
                   "--env", "frugal+secure=FRUGAL_DECAY_MS=100", "--env", "glibc=FRUGAL_DECAY_MS=100",
                   "--env", "frugal=FRUGAL_DECAY_MS=100", "--stdin", str(stdin), "--", "python3", str(script))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert validate(doc) == []
    assert doc["reps"] == 2 and doc["command"] == ["python3", str(script)]
    by = {a["name"]: a for a in doc["allocators"]}
    assert list(by) == ["glibc", "frugal", "frugal+secure"]
    assert by["frugal+secure"]["env"] == {"FRUGAL_SECURE": "1", "FRUGAL_DECAY_MS": "100"}
    for a in by.values():
        assert len(a["runs"]) == 2 and all(r["exit_code"] == 0 and r["stdout_matches"] for r in a["runs"])
        assert a["median"]["peak_rss_kib"] > 1000 and a["median"]["wall_s"] > 0
    for name in ("report.html", "report.md", "time.png", "rss.png"):
        assert (out / name).stat().st_size > 0, name
    assert "peak RSS" in proc.stdout and "wall (s)" in proc.stdout


def test_schema_rejects_a_broken_document(build: Path, tmp_path: Path) -> None:
    doc = {"command": ["x"], "reps": 0, "allocators": [], "winner": {"time": 3}}
    problems = validate(doc)
    print("\n".join(problems))
    assert len(problems) >= 3  # reps below 1, no allocator, a winner that is not a name, rss missing


def test_changed_output_or_exit_code_fails_the_comparison(build: Path, tmp_path: Path) -> None:
    # --env gives frugal alone a different output, then a different exit code: the program
    # stands in for an allocator that changes what a program does.
    proc = compare(build, tmp_path / "a", "-n", "1", "--allocators", "glibc,frugal", "--env", "frugal=SAY=other",
                   "--", "sh", "-c", "echo ${SAY:-same}")
    assert proc.returncode == 1 and "DIFFERS" in proc.stdout
    doc = json.loads((tmp_path / "a" / "results.json").read_text())
    assert [r["stdout_matches"] for a in doc["allocators"] for r in a["runs"]] == [True, False]
    proc = compare(build, tmp_path / "b", "-n", "1", "--allocators", "glibc,frugal", "--env", "frugal=CODE=3",
                   "--", "sh", "-c", "exit ${CODE:-0}")
    assert proc.returncode == 1 and "failed" in proc.stdout
    proc = compare(build, tmp_path / "c", "-n", "1", "--allocators", "glibc", "--", "sh", "-c", "exit 4")
    assert proc.returncode == 4  # the program's own exit code
    proc = compare(build, tmp_path / "d", "--env", "nosuch=A=1", "--", "true")
    assert proc.returncode == 2 and "not one of the allocators" in proc.stdout


def test_command_with_brackets_is_shown_verbatim(build: Path, tmp_path: Path) -> None:
    code = "d = {}; d[str(5)] = [5] * 5"  # issue #13 item 5: rich's markup ate [str(5)]
    proc = compare(build, tmp_path / "cmd", "-n", "1", "--allocators", "glibc", "--", "python3", "-c", code)
    assert proc.returncode == 0
    shown = f"python3 -c '{code}'"
    assert shown in proc.stdout
    assert shown in (tmp_path / "cmd" / "report.md").read_text()
    assert f"<code>{shown}</code>" in html.unescape((tmp_path / "cmd" / "report.html").read_text())
