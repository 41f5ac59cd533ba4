#!/usr/bin/env python3
"""check_pattern.py MODE DIR [--under plain|secure|leaks] — the ledger's exact numbers for
pattern.c's known allocations.

DIR holds ledger.json (written by frugal at exit, FRUGAL_STATS_FILE) and what the program
wrote itself: baseline.json (fg_stats_get before the pattern), get.json (fg_stats_get after
it), inside.json (fg_stats_json after it) and expect.json (usable sizes of the large blocks,
the mixed kinds as made and freed, the timeline's pair count). Every count and byte of the
pattern must be in the file exactly, per class, in the histogram and in total, on top of the
baseline (libc's own allocations, e.g. thread-local storage of new threads); fg_stats_get and
fg_stats_json must agree with the file. --under names the mode ctest ran the program in, so
a test that lost its environment fails rather than checking the plain path twice. Standard
library only: ctest runs this with the system's python3. Prints each check; exits 1 on the
first failure."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
PAGE = 4096
CLASS_FIELDS = ("allocations", "frees", "bytes_requested", "bytes_handed_out", "freed_requested", "freed_handed_out")
TOTAL_FIELDS = ("allocations", "frees", "bytes_requested", "bytes_handed_out")

# The block size of each of pattern.c's mixed kinds, by the name the program gives it: plain
# (FRUGAL_LEAKS hands out the same blocks) and under FRUGAL_SECURE, which asks for one byte
# more for its canary. None: a large block. The aligned forms take the class of the size
# rounded up to the alignment, whose blocks are aligned (every page starts on an OS page), where
# its size is a multiple of the alignment; else room to align inside a block (size + align - 8).
BLOCKS: dict[str, tuple[int, int] | None] = {
    "malloc(0)": (8, 8),
    "malloc(100)": (112, 112),
    "malloc(128)": (128, 144),
    "malloc(5000)": (5120, 5120),
    "calloc(9, 10)": (96, 96),
    "realloc(NULL, 16)": (16, 32),
    "malloc(50)": (64, 64),  # the block realloc(malloc(50), 300) moves out of
    "realloc(malloc(50), 300)": (320, 320),
    "aligned_alloc(64, 72)": (128, 128),  # 72 rounded up to 64: the 128 B class
    "aligned_alloc(4096, 200)": (4096, 4096),  # 200 rounded up to 4096: the 4 KiB class
    "posix_memalign(256, 40)": (256, 256),
    "memalign(128, 24)": (128, 128),
    f"malloc({MiB})": None,
}
EDGE_LO, EDGE_HI = (512 << 10) + 1, 576 << 10  # as in pattern.c
TIMELINE_LIVE, TIMELINE_SIZE, TIMELINE_MS = 100, 64, 400  # as in pattern.c
TIMELINE_CACHED = 1 << 20  # pattern.c: a large block freed before the loop, held in the large cache


def fail(msg: str) -> None:
    print(f"FAIL {msg}")
    sys.exit(1)


@dataclass(frozen=True)
class Between:
    """A number known only within bounds: under FRUGAL_SECURE, a large block's usable size is
    not observable from outside (fg_usable_size answers the request)."""

    lo: int
    hi: int

    def __add__(self, other: int | Between) -> Between:
        o = other if isinstance(other, Between) else Between(other, other)
        return Between(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__


def check(what: str, got: object, want: object) -> None:
    if isinstance(want, Between):
        if not (isinstance(got, int) and want.lo <= got <= want.hi):
            fail(f"{what}: got {got}, want {want.lo}..{want.hi}")
    elif got != want:
        fail(f"{what}: got {got}, want {want}")
    print(f"ok   {what} = {got}")


def check_that(what: str, ok: bool, got: object) -> None:
    if not ok:
        fail(f"{what}: got {got}")
    print(f"ok   {what}: {got}")


# The extra class's bytes above 2^k (types.h's FG_PLUS): 16, more where as many blocks still fit a page.
PLUS = {11: 64, 12: 272, 13: 128}


def bucket_of(size: int) -> tuple[int, int, int]:
    """Index, lo and hi of a request's histogram bucket, as the schema defines them: size 0
    alone, then 1..8, 9..16 and 16-byte steps to 128 B, then 8 buckets per doubling, the
    doublings from 256 B to 8 KiB led by a bucket of 16 bytes right above their power of two."""
    if size == 0:
        return 0, 0, 0
    if size <= 16:
        i = (size + 7) // 8
        return i, i * 8 - 7, i * 8
    if size <= 128:
        i = 1 + (size + 15) // 16
        return i, 16 * (i - 1) - 15, 16 * (i - 1)
    k = (size - 1).bit_length() - 1  # 2^k < size <= 2^(k+1)
    plus_below = min(max(k - 8, 0), 6)  # doublings below k that have the extra bucket
    i = 10 + (k - 7) * 8 + plus_below
    plus = PLUS.get(k, 16)
    if 8 <= k <= 13:
        if size <= (1 << k) + plus:
            return i, (1 << k) + 1, (1 << k) + plus
        i += 1
    step = 1 << (k - 3)
    lo = (size - 1) // step * step + 1
    return i + (lo - (1 << k) - 1) // step, max(lo, (1 << k) + plus + 1 if 8 <= k <= 13 else lo), lo + step - 1


Rows = dict[str, dict[str, "int | Between"]]


def add(rows: Rows, key: str, count: int, size: int, freed: int, handed: int | Between, freed_handed: int | Between):
    """Count `count` requests of `size` bytes in row `key`, `freed` of them freed, handing out
    `handed` bytes (of which the freed blocks had `freed_handed`)."""
    r = rows.setdefault(key, dict.fromkeys(CLASS_FIELDS, 0))
    for f, v in zip(CLASS_FIELDS, (count, freed, count * size, handed, freed * size, freed_handed)):
        r[f] = r[f] + v


def small(rows: Rows, count: int, size: int, block: int, freed: int = 0) -> None:
    add(rows, f"small:{block}", count, size, freed, count * block, freed * block)


def expected(mode: str, expect: dict, secure: bool) -> tuple[Rows, Counter[int]]:
    """The pattern's rows, keyed by 'small:<block size>' or 'large', and its requests by size."""
    rows: Rows = {}
    sizes: Counter[int] = Counter()
    if mode in ("single", "threads", "churn"):
        large_usable = expect["large_usable"]
        if len(large_usable) != 10 or any(not MiB <= u <= MiB + MiB // 8 for u in large_usable):
            fail(f"usable sizes of the 1 MiB blocks out of bounds: {large_usable}")
        small(rows, 1000, 100, 112)  # 1,000 x 100 B, live: class 112
        small(rows, 3, 40, 48)  # 3 x 40 B leaked: class 48
        add(rows, "large", 10, MiB, 10, sum(large_usable), sum(large_usable))
        sizes.update({100: 1000, 40: 3, MiB: 10})
        if mode == "churn":
            small(rows, 2000, 200, 208, 2000)  # freed by another thread
            sizes[200] += 2000
    elif mode in ("mixed", "xthread"):
        unknown = [k["name"] for k in expect["kinds"] if k["name"] not in BLOCKS]
        if unknown or not expect["kinds"]:
            fail(f"pattern.c's kinds are not all in BLOCKS: {unknown or 'none made'}")
        for k in expect["kinds"]:
            n, size, freed = k["count"], k["size"], k["freed"]
            if mode == "xthread" and freed != n:
                fail(f"{k['name']}: {freed} of {n} blocks freed, want all")
            block = BLOCKS[k["name"]]
            if block is not None:
                small(rows, n, size, block[secure], freed)
            elif secure:  # at least the canary byte more, at most a page
                add(rows, "large", n, size, freed, Between(n * (size + 1), n * (size + PAGE)),
                    Between(freed * (size + 1), freed * (size + PAGE)))
            else:
                add(rows, "large", n, size, freed, k["usable"], k["usable_freed"])
            sizes[size] += n
            if k["from"]:  # realloc moved each block out of one malloc'd before, freeing it
                small(rows, n, k["from"], BLOCKS[f"malloc({k['from']})"][secure], n)
                sizes[k["from"]] += n
    elif mode == "edge":  # 512 KiB + 1 and 576 KiB in turn, the first half freed
        usable = expect["large_usable"]
        for i, u in enumerate(usable):
            size = EDGE_HI if i % 2 else EDGE_LO
            freed = int(i < len(usable) // 2)
            add(rows, "large", 1, size, freed, u, u * freed)
            sizes[size] += 1
    elif mode == "timeline":
        n = TIMELINE_LIVE + expect["pairs"]
        small(rows, n, TIMELINE_SIZE, TIMELINE_SIZE, expect["pairs"])
        sizes[TIMELINE_SIZE] += n
        cached = expect["large_usable"][0]  # the large block freed before the loop
        add(rows, "large", 1, TIMELINE_CACHED, 1, cached, cached)
        sizes[TIMELINE_CACHED] += 1
    else:
        fail(f"unknown mode {mode}")
    return rows, sizes


def key_of(c: dict) -> str:
    return "large" if c["block_size"] == 0 else f"small:{c['block_size']}"


def rows_of(doc: dict) -> dict[str, dict]:
    return {key_of(c): c for c in doc["classes"]}


def histogram_of(doc: dict, what: str) -> dict[tuple[int, int], int]:
    """Counts by (lo, hi). The ledger file gives hi; fg_stats_get's numbers give the bucket
    index instead, and both must match the schema's bounds."""
    out = {}
    for b in doc["histogram"]:
        i, lo, hi = bucket_of(b["lo"])
        if b["lo"] != lo or b.get("hi", hi) != hi or b.get("bucket", i) != i:
            fail(f"{what}: bucket {b} is not the schema's: index {i}, {lo}..{hi}")
        out[(lo, hi)] = b["count"]
    return out


def check_histogram(ledger: dict, base: dict, sizes: Counter[int], tag: str) -> None:
    """Every bucket exactly: the baseline's plus the pattern's requests, no other, none wrapped
    below zero (the ledger stores corrections of -1 and derives a class's +1 on merging)."""
    got = histogram_of(ledger, "ledger.json")
    wrapped = [b for b in ledger["histogram"] if b["count"] >= 1 << 63]
    check(f"{tag} histogram: no bucket wrapped below zero", wrapped, [])
    want = Counter(histogram_of(base, "baseline.json"))
    names: dict[tuple[int, int], list[int]] = {}
    for size, n in sizes.items():
        _, lo, hi = bucket_of(size)
        want[(lo, hi)] += n
        names.setdefault((lo, hi), []).append(size)
    for lo, hi in sorted(set(got) | set(want)):
        of = f" ({', '.join(f'{s} B' for s in names[(lo, hi)])})" if (lo, hi) in names else ""
        check(f"{tag} histogram {lo}..{hi}{of}", got.get((lo, hi), 0), want.get((lo, hi), 0))
    check(f"{tag} histogram counts sum to the allocations", sum(got.values()), ledger["totals"]["allocations"])


def check_timeline(ledger: dict, base: dict) -> None:
    """Samples all along the 400 ms loop, a period apart at least; in the loop, 100 blocks live
    at each sample (the 100 kept: the sampler's countdown, which says when to look at the
    clock, trips before the allocation it counts), so the sampled peak is exactly that."""
    period = ledger["options"]["stats_interval_ms"]
    check_that("timeline: FRUGAL_STATS_INTERVAL_MS is set", period > 0, period)
    # The loop must stay on the fast path, or this would not test the inline count's sampling.
    slow, allocs = ledger["counters"]["slow_allocs"], ledger["totals"]["allocations"]
    check_that("timeline: the loop's allocations hit the thread cache (slow_allocs < 0.1 %)", slow * 1000 < allocs,
               f"{slow} of {allocs}")
    t = [s["t_ms"] for s in ledger["timeline"]]
    check_that(f"timeline: at least 8 samples in {TIMELINE_MS} ms", len(t) >= 8, f"{len(t)} at {t} ms")
    check_that(f"timeline: the last sample at t >= {TIMELINE_MS * 3 // 4} ms", t[-1] >= TIMELINE_MS * 3 // 4, t[-1])
    check(f"timeline: samples at least {period} ms apart", [b - a for a, b in zip(t, t[1:]) if b - a < period], [])
    top_req = base["live"]["bytes_requested"] + TIMELINE_LIVE * TIMELINE_SIZE
    top_handed = base["live"]["bytes_handed_out"] + TIMELINE_LIVE * TIMELINE_SIZE
    timeline = ledger["timeline"]
    above = [s for s in timeline if s["live_bytes_requested"] > top_req or s["live_bytes_handed_out"] > top_handed]
    check("timeline: no sample above 100 live blocks", above, [])
    thin = [s for s in timeline if s["held_bytes"] < TIMELINE_CACHED]
    check("timeline: every sample holds the 1 MiB block freed before the loop (held_bytes)", thin, [])
    check("timeline: sampled peak requested (100 blocks of 64 B)", ledger["live"]["peak_bytes_requested"], top_req)
    check("timeline: sampled peak handed out", ledger["live"]["peak_bytes_handed_out"], top_handed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("single", "threads", "churn", "mixed", "xthread", "timeline", "edge"))
    ap.add_argument("dir", type=Path)
    ap.add_argument("--under", choices=("plain", "secure", "leaks"), default="plain")
    args = ap.parse_args()
    mode, d, tag = args.mode, args.dir, args.mode if args.under == "plain" else f"{args.mode}/{args.under}"
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
    check("the pattern ran the mode asked for", expect["mode"], mode)
    check("ledger on", ledger["ledger"], True)
    check(f"FRUGAL_SECURE {'on' if args.under == 'secure' else 'off'}", expect["secure"], args.under == "secure")
    check(f"FRUGAL_LEAKS {'on' if args.under == 'leaks' else 'off'}", ledger["options"]["leaks"],
          args.under == "leaks")

    want, sizes = expected(mode, expect, expect["secure"])
    got, before = rows_of(ledger), rows_of(base)
    if mode in ("single", "mixed", "timeline", "edge") and args.under != "leaks":
        check(f"{tag}: one thread, nothing allocated before the pattern", base["totals"]["allocations"], 0)
    for k in sorted(set(got) | set(want) | set(before)):
        for f in CLASS_FIELDS:
            w = want.get(k, {}).get(f, 0) + before.get(k, {}).get(f, 0)
            check(f"{tag} {k} {f}", got.get(k, {}).get(f, 0), w)
            if isinstance(w, Between):  # within bounds: from here on, the ledger's number
                want[k][f] = got[k][f] - before.get(k, {}).get(f, 0)
    large = got.get("large")
    if large is not None:
        check("large row: class index is the last", large["large"], True)
    for k, c in got.items():
        if k != "large":
            check(f"{k} bytes_handed_out = allocations x block size", c["bytes_handed_out"],
                  c["allocations"] * c["block_size"])
            check(f"{k} freed_handed_out = frees x block size", c["freed_handed_out"], c["frees"] * c["block_size"])
        check(f"{k} live_blocks", c["live_blocks"], c["allocations"] - c["frees"])
        check(f"{k} live_bytes_requested", c["live_bytes_requested"], c["bytes_requested"] - c["freed_requested"])
        check(f"{k} live_bytes_handed_out", c["live_bytes_handed_out"], c["bytes_handed_out"] - c["freed_handed_out"])

    # Totals and live bytes: the pattern's plus the baseline's.
    for f in TOTAL_FIELDS:
        check(f"{tag} totals.{f}", ledger["totals"][f], sum(r[f] for r in want.values()) + base["totals"][f])
    live = {f: sum(r[f] - r[g] for r in want.values()) + base["live"][f]
            for f, g in (("bytes_requested", "freed_requested"), ("bytes_handed_out", "freed_handed_out"))}
    check(f"{tag} live.bytes_requested", ledger["live"]["bytes_requested"], live["bytes_requested"])
    check(f"{tag} live.bytes_handed_out", ledger["live"]["bytes_handed_out"], live["bytes_handed_out"])
    base_live_blocks = base["totals"]["allocations"] - base["totals"]["frees"]
    check(f"{tag} live.blocks", ledger["live"]["blocks"],
          sum(r["allocations"] - r["frees"] for r in want.values()) + base_live_blocks)

    check_histogram(ledger, base, sizes, tag)
    if mode == "single":
        check("advice p50 (100 B requests: bucket 97..112)", ledger["advice"]["p50_size"], 112)
        check("advice p99", ledger["advice"]["p99_size"], 112)
    if mode == "timeline":
        check_timeline(ledger, base)
    if args.under == "leaks":
        pattern_live = live["bytes_requested"] - base["live"]["bytes_requested"]
        check_that(f"{tag}: the leak report holds the pattern's {pattern_live} live bytes at least",
                   ledger["leaks"]["bytes"] >= pattern_live, ledger["leaks"]["bytes"])

    # fg_stats_get after the pattern: the same rows, histogram and totals as the file.
    gr = rows_of(get)
    for k in sorted(set(got) | set(gr)):
        for f in CLASS_FIELDS:
            check(f"fg_stats_get {k} {f} agrees", gr.get(k, {}).get(f, 0), got.get(k, {}).get(f, 0))
    check("fg_stats_get histogram agrees", histogram_of(get, "get.json"), histogram_of(ledger, "ledger.json"))
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
    print(f"PASS ledger exact numbers, {tag}")


if __name__ == "__main__":
    main()
