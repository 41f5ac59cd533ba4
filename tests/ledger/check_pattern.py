#!/usr/bin/env python3
"""check_pattern.py MODE DIR — the ledger's exact numbers for pattern.c's known allocations.

DIR holds ledger.json (written by frugal at exit, FRUGAL_STATS_FILE) and what the program
wrote itself: baseline.json (fg_stats_get before the pattern), get.json (fg_stats_get after
it), inside.json (fg_stats_json after it) and expect.json (usable sizes of the 1 MiB blocks).
Every count and byte of the pattern must be in the file exactly, per class and in total, on
top of the baseline (libc's own allocations, e.g. thread-local storage of new threads);
fg_stats_get and fg_stats_json must agree with the file. Standard library only: ctest runs
this with the system's python3. Prints each check; exits 1 on the first failure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

MiB = 1 << 20
CLASS_FIELDS = ("allocations", "frees", "bytes_requested", "bytes_handed_out", "freed_requested", "freed_handed_out")
TOTAL_FIELDS = ("allocations", "frees", "bytes_requested", "bytes_handed_out")


def fail(msg: str) -> None:
    print(f"FAIL {msg}")
    sys.exit(1)


def check(what: str, got: object, want: object) -> None:
    if got != want:
        fail(f"{what}: got {got}, want {want}")
    print(f"ok   {what} = {got}")


def row(count: int, size: int, block: int, freed: int = 0, handed: int | None = None) -> dict[str, int]:
    """A class row for `count` blocks of `size` bytes in blocks of `block` bytes, `freed` of
    them freed (handed: total bytes handed out, when blocks differ, as large ones may)."""
    handed = count * block if handed is None else handed
    return {"allocations": count, "frees": freed, "bytes_requested": count * size, "bytes_handed_out": handed,
            "freed_requested": freed * size, "freed_handed_out": handed * freed // count if count else 0}


def expected_rows(mode: str, large_usable: list[int]) -> dict[str, dict[str, int]]:
    """Rows keyed by 'small:<block size>' or 'large'."""
    if len(large_usable) != 10 or any(not MiB <= u <= MiB + MiB // 8 for u in large_usable):
        fail(f"usable sizes of the 1 MiB blocks out of bounds: {large_usable}")
    rows = {
        "small:104": row(1000, 100, 104),  # 1,000 x 100 B, live: class 104
        "small:40": row(3, 40, 40),  # 3 x 40 B leaked: class 40
        "large": {**row(10, MiB, 0, 10, sum(large_usable)), "freed_handed_out": sum(large_usable)},
    }
    if mode == "churn":
        rows["small:208"] = row(2000, 200, 208, 2000)  # freed by another thread
    return rows


def key_of(c: dict) -> str:
    return "large" if c["block_size"] == 0 else f"small:{c['block_size']}"


def rows_of(doc: dict) -> dict[str, dict]:
    return {key_of(c): c for c in doc["classes"]}


def main() -> None:
    if len(sys.argv) != 3:
        fail("usage: check_pattern.py single|threads|churn DIR")
    mode, d = sys.argv[1], Path(sys.argv[2])
    try:
        ledger = json.loads((d / "ledger.json").read_text())
        base = json.loads((d / "baseline.json").read_text())
        get = json.loads((d / "get.json").read_text())
        inside = json.loads((d / "inside.json").read_text())
        expect = json.loads((d / "expect.json").read_text())
    except (OSError, ValueError) as e:
        fail(f"cannot read the pattern's output: {e}")
    check("schema", ledger["schema"], "frugal-ledger/1")
    check("the ledger file is this run's (pid)", ledger["pid"], expect["pid"])
    check("ledger on", ledger["ledger"], True)

    want = expected_rows(mode, expect["large_usable"])
    got, before = rows_of(ledger), rows_of(base)
    if mode == "single":
        check("single thread: nothing allocated before the pattern", base["totals"]["allocations"], 0)
    for k in sorted(set(got) | set(want) | set(before)):
        for f in CLASS_FIELDS:
            w = want.get(k, {}).get(f, 0) + before.get(k, {}).get(f, 0)
            check(f"{mode} {k} {f}", got.get(k, {}).get(f, 0), w)
    large = got["large"]
    check("large row: class index is the last", large["large"], True)
    for k, c in got.items():
        check(f"{k} live_blocks", c["live_blocks"], c["allocations"] - c["frees"])
        check(f"{k} live_bytes_handed_out", c["live_bytes_handed_out"], c["bytes_handed_out"] - c["freed_handed_out"])

    # Totals: the pattern's plus the baseline's.
    for f in TOTAL_FIELDS:
        w = sum(r[f] for r in want.values()) + base["totals"][f]
        check(f"{mode} totals.{f}", ledger["totals"][f], w)
    live_req = 1000 * 100 + 3 * 40 + base["live"]["bytes_requested"]
    live_handed = 1000 * 104 + 3 * 40 + base["live"]["bytes_handed_out"]
    check(f"{mode} live.bytes_requested", ledger["live"]["bytes_requested"], live_req)
    check(f"{mode} live.bytes_handed_out", ledger["live"]["bytes_handed_out"], live_handed)
    check(f"{mode} live.blocks", ledger["live"]["blocks"], 1003 + base["totals"]["allocations"] - base["totals"]["frees"])

    # The histogram of requested sizes: the pattern's sizes land in their buckets exactly.
    def bucket(doc: dict, size: int) -> int:
        return sum(b["count"] for b in doc["histogram"] if b["lo"] <= size <= b["hi"])

    check("histogram counts sum to the allocations", sum(b["count"] for b in ledger["histogram"]),
          ledger["totals"]["allocations"])
    check("histogram: 100 B", bucket(ledger, 100), 1000)
    check("histogram: 40 B", bucket(ledger, 40), 3)
    check("histogram: 1 MiB", bucket(ledger, MiB), 10)
    if mode == "single":
        check("advice p50 (100 B requests: bucket 97..104)", ledger["advice"]["p50_size"], 104)
        check("advice p99", ledger["advice"]["p99_size"], 104)

    # fg_stats_get after the pattern: the same rows and totals as the file.
    gr = rows_of(get)
    for k in sorted(set(got) | set(gr)):
        for f in CLASS_FIELDS:
            check(f"fg_stats_get {k} {f} agrees", gr.get(k, {}).get(f, 0), got.get(k, {}).get(f, 0))
    for f in TOTAL_FIELDS:
        check(f"fg_stats_get totals.{f} agrees", get["totals"][f], ledger["totals"][f])
    for f in ("bytes_requested", "bytes_handed_out"):
        check(f"fg_stats_get live.{f} agrees", get["live"][f], ledger["live"][f])

    # fg_stats_json after the pattern: the same document, but for what changes with time.
    check("fg_stats_json schema", inside["schema"], ledger["schema"])
    check("fg_stats_json totals agree", inside["totals"], ledger["totals"])
    check("fg_stats_json live agrees", inside["live"], ledger["live"])
    check("fg_stats_json classes agree", inside["classes"], ledger["classes"])
    check("fg_stats_json histogram agrees", inside["histogram"], ledger["histogram"])
    check("fg_stats_json advice agrees", inside["advice"], ledger["advice"])
    print(f"PASS ledger exact numbers, {mode}")


if __name__ == "__main__":
    main()
