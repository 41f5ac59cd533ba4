"""The ledger from the outside: its JSON against ledger.schema.json, and `frugal run` end to end
on python3 -c and on the C and C++ leak programs of tests/ledger (built with -g): report
files present, the exit code passed through, the command shown as it ran, and the leak report
naming the functions that leaked, through addr2line, for a PIE and a non-PIE executable."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from frugal import ledger as L
from frugal.pages import code_md
from frugal.symbols import link_base

REPORT_FILES = ("ledger.json", "report.md", "report.html")


@pytest.fixture
def build(ledger_build: Path) -> Path:
    return ledger_build


def frugal_run(build: Path, out: Path, *command: str, leaks: bool = False, plots: bool = False,
               env: dict | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "frugal", "run", "--build", str(build), "-o", str(out), "--interval-ms", "5"]
    args += (["--leaks"] if leaks else []) + ([] if plots else ["--no-plots"]) + ["--", *command]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    print(proc.stdout[-3000:], proc.stderr[-6000:])
    return proc


def valid(doc: dict) -> None:
    jsonschema.Draft202012Validator(L.schema()).validate(doc)


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(L.schema())
    required = L.schema()["required"]
    for key in ("totals", "live", "classes", "timeline"):
        assert key in required
    assert {"allocations", "frees", "bytes_requested", "bytes_handed_out"} <= set(
        L.schema()["properties"]["totals"]["required"])
    assert {"bytes_requested", "bytes_handed_out"} <= set(L.schema()["properties"]["live"]["required"])


def test_schema_rejects_a_broken_ledger(build: Path, tmp_path: Path) -> None:
    doc = pattern_ledger(build, tmp_path)
    del doc["totals"]["bytes_handed_out"]
    doc["classes"][0]["frees"] = -1
    errors = L.validate(doc)
    assert any("bytes_handed_out" in e for e in errors) and any("classes/0/frees" in e for e in errors), errors


def pattern_ledger(build: Path, tmp: Path, mode: str = "single") -> dict:
    env = {**os.environ, "FRUGAL_STATS_FILE": str(tmp / "ledger.json"), "FRUGAL_STATS_INTERVAL_MS": "1"}
    subprocess.run([str(build / "tests" / "ledger" / "ledger_pattern"), mode, str(tmp)], check=True, env=env,
                   timeout=60)
    return json.loads((tmp / "ledger.json").read_text())


@pytest.mark.parametrize("mode", ["single", "churn"])
def test_pattern_ledger_and_fg_stats_json_validate(build: Path, tmp_path: Path, mode: str) -> None:
    doc = pattern_ledger(build, tmp_path, mode)
    valid(doc)
    valid(json.loads((tmp_path / "inside.json").read_text()))  # fg_stats_json, from inside
    assert doc["totals"]["allocations"] >= 1013 and doc["leaks"] is None


def test_run_python(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "py"
    code = ("import sys, time\n"
            "blocks = [bytearray(1000 + i % 3000) for i in range(20000)]\n"
            "time.sleep(0.05)\n"
            "big = [bytearray(1 << 20) for _ in range(8)]\n"
            "print('done', len(blocks))\n"
            "sys.exit(7)\n")
    proc = frugal_run(build, out, sys.executable, "-c", code, plots=True)
    assert proc.returncode == 7, "the program's exit code must come through"
    assert "done 20000" in proc.stdout, "the program's own output stays on stdout"
    for f in REPORT_FILES + ("sizes.png", "classes.png", "timeline.png"):
        assert (out / f).is_file(), f
    doc = json.loads((out / "ledger.json").read_text())
    valid(doc)
    assert doc["run"]["exit_code"] == 7 and doc["run"]["outside"]["wall"] > 0
    assert doc["totals"]["allocations"] >= 20008
    assert doc["totals"]["bytes_requested"] <= doc["totals"]["bytes_handed_out"]
    large = [c for c in doc["classes"] if c["large"]]
    assert large and large[0]["allocations"] >= 8
    assert len(doc["timeline"]) >= 2, "a 5 ms interval over a run of 50+ ms gives samples"
    summary = proc.stderr
    for words in ("% used", "hidden costs", "cache hit rates", "Suggested cache cutoff", "Top classes"):
        assert words in summary, words
    page = (out / "report.html").read_text()
    assert "Seed 1&#x27;s advice" in page or "Seed 1's advice" in page
    assert "timeline.png" in page and "Hidden costs" in page


def leak_sites(out: Path) -> list[dict]:
    doc = json.loads((out / "ledger.json").read_text())
    valid(doc)
    assert doc["leaks"] is not None
    return doc["leaks"]["sites"]


@pytest.mark.parametrize("program", ["leak_c", "leak_c_nopie"])
def test_run_leaks_names_the_c_function(build: Path, tmp_path: Path, program: str) -> None:
    out = tmp_path / program
    proc = frugal_run(build, out, str(build / "tests" / "ledger" / program), leaks=True)
    assert proc.returncode == 3
    for f in REPORT_FILES:
        assert (out / f).is_file(), f
    sites = leak_sites(out)
    top = sites[0]
    assert (top["bytes"], top["count"]) == (48 * 256, 48)
    assert top["frames"][0]["function"] == "leak_config_table"
    assert Path(top["frames"][0]["file"]).name == "leak_c.c" and top["frames"][0]["line"] > 0
    assert top["frames"][1]["function"] == "main"
    one = [s for s in sites if s["count"] == 1 and s["bytes"] == 24]
    assert one and L.site_function(one[0]) == "leak_one_name"
    assert "leak_config_table" in proc.stderr and "leak_one_name" in proc.stderr
    assert "leak_config_table" in (out / "report.md").read_text()


def test_run_leaks_names_the_cxx_function(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "cxx"
    proc = frugal_run(build, out, str(build / "tests" / "ledger" / "leak_cxx"), leaks=True, plots=True)
    assert proc.returncode == 0
    for f in REPORT_FILES + ("leaks.png",):
        assert (out / f).is_file(), f
    sites = leak_sites(out)
    widgets = sites[0]
    assert widgets["count"] == 100
    assert widgets["frames"][0]["function"] == "Registry::remember(int)"
    assert widgets["frames"][1]["function"] == "leak_widgets(int)"
    assert Path(widgets["frames"][0]["file"]).name == "leak_cxx.cpp"
    assert any(L.site_function(s) == "leak_widgets(int)" and s["count"] == 1 for s in sites)  # the Registry
    # The map freed before exit is no leak: every site goes through leak_widgets.
    assert all(any(f.get("function") == "leak_widgets(int)" for f in s["frames"]) for s in sites)
    assert "Registry::remember(int)" in (out / "report.html").read_text()


def test_run_python_leaks_without_deadlock(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "pyleaks"
    env = {**os.environ, "PYTHONMALLOC": "malloc"}  # every object through malloc: many stacks
    proc = frugal_run(build, out, sys.executable, "-c", "import json; print(len(json.dumps(list(range(50000)))))",
                      leaks=True, env=env)
    assert proc.returncode == 0
    sites = leak_sites(out)
    assert sites and any(f.get("function") for s in sites for f in s["frames"])


def test_run_errors(build: Path, tmp_path: Path) -> None:
    proc = frugal_run(build, tmp_path / "x", "no-such-program-frugal")
    assert proc.returncode == 127 and "not found" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "frugal", "run", "--build", str(tmp_path), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not built" in proc.stderr
    # Killed by a signal: 128 + N, as a shell reports it, and still a report.
    proc = frugal_run(build, tmp_path / "sig", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)")
    assert proc.returncode == 128 + 9
    assert (tmp_path / "sig" / "report.md").is_file() and "wrote no ledger" in proc.stderr


def test_link_base_pie_and_non_pie(build: Path) -> None:
    assert link_base(build / "tests" / "ledger" / "leak_c") == 0
    assert link_base(build / "tests" / "ledger" / "leak_c_nopie") == 0x400000
    assert link_base(build / "libfrugal.so") == 0
    assert link_base(Path(__file__)) is None


def test_advice_and_rates_on_a_synthetic_ledger() -> None:
    doc = {
        "totals": {"allocations": 100, "frees": 60},
        "advice": {"p50_size": 112, "p90_size": 200, "p99_size": 4096, "waste_classes": [12], "churn_classes": [12]},
        "classes": [{"class": 12, "block_size": 112, "large": False, "allocations": 100, "frees": 60,
                     "bytes_requested": 10800, "bytes_handed_out": 11200}],
        "counters": {"slow_allocs": 5, "pages_new": 1, "pages_released": 0, "pages_reused": 0, "large_cache_hits": 3,
                     "large_cache_misses": 1, "large_cache_evictions": 0, "large_cache_decays": 0,
                     "segment_cache_hits": 0, "segment_cache_misses": 0, "segment_cache_evictions": 0,
                     "segment_cache_decays": 0},
    }
    text = "\n".join(L.advice(doc))
    assert "Suggested cache cutoff: 200 B" in text and "112 B (400 B over 100 blocks, 96.4 % used)" in text
    rates = {r.name.split(" (")[0]: r for r in L.cache_rates(doc)}
    assert rates["thread cache"].rate == pytest.approx(0.95)
    assert rates["large cache"].rate == pytest.approx(0.75)
    assert rates["segment cache"].rate is None


BRACKETS = "d = {}; d[str(5)] = [5] * 5; print(d)"  # issue #13 item 5: rich's markup ate [str(5)]


def test_commands_are_shown_verbatim(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "brackets"
    proc = frugal_run(build, out, sys.executable, "-c", BRACKETS)
    assert proc.returncode == 0 and "{'5': [5, 5, 5, 5, 5]}" in proc.stdout
    shown = f"{sys.executable} -c '{BRACKETS}'"  # as a shell would take it back
    assert f"frugal run {shown}" in proc.stderr
    assert shown in (out / "report.md").read_text()
    assert f"<code>{shown}</code>" in html.unescape((out / "report.html").read_text())


def test_code_spans_survive_backticks() -> None:
    assert code_md("echo `date`") == "`` echo `date` ``"
    assert code_md("a[1]") == "`a[1]`"
