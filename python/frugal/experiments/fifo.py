"""Seed 2's experiment: FIFOs of one block size for R rounds in one process, each size as a
power of two and one minus 32, and the seed's STL containers of std::function."""

from __future__ import annotations

import math
from typing import Any

from .. import stats
from ..lab import FRUGAL, Context, ExpResult, Verdict
from ..runner import Cell, Sample
from ..units import GiB, KiB, MiB, size_label
from .base import Check, Experiment, Table, base_metrics, final_record, fmt

POW2_SIZES = (16, 32, 64, 128, 256, 1 * KiB, 4 * KiB, 16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB,
              256 * KiB, 512 * KiB, 1 * MiB)
FIFO_MODES = {
    "quick": {"total": 128 * MiB, "rounds": 4, "stl_entries": 500_000, "timed_blocks": 1 << 18},
    "full": {"total": 8 * GiB, "rounds": 16, "stl_entries": 8_000_000, "timed_blocks": 1 << 18},
    "smoke": {"total": 2 * MiB, "rounds": 2, "stl_entries": 2_000, "timed_blocks": 0},
}
STL_CONTAINERS = ("queue", "list", "deque")
LAST_FIRST_MAX = 1.05  # LAB.md: last/first <= 1.05 at every size
CLIFF_FACTOR = 1.5  # LAB.md: ns/byte at a size <= 1.5 x geometric mean of its neighbours
TRIM_SLACK = 16 * MiB  # LAB.md: RSS after trim within 16 MiB of where it started


def fifo_rounds(p: dict[str, int], size: int) -> int:
    """R, or more where T / size blocks a round would time fewer than the mode's timed_blocks
    in R rounds. Quick's 4 rounds of 128 MiB are 128 blocks a round at 1 MiB, 10-20 us, and
    the median of such rounds swung 4x between runs of one build (frugal at 1 MiB: 200, then
    837 ns a block; 33 over 200 rounds), failing "no cliff" at another size in almost every
    lab. And the first round after the cold one runs slower under every allocator (4 KiB:
    frugal 103 ns a push, then 52-65; tcmalloc 143, then 75-103): with 8 rounds or more the
    median is a warm round's. The small sizes time millions of blocks in R rounds."""
    return max(p["rounds"], -(-p["timed_blocks"] // max(1, p["total"] // size)))


def cliff_reference(lo: tuple[int, float], hi: tuple[int, float], size: int) -> float:
    """ns/byte expected at `size` from its neighbours (size, ns/byte): their geometric mean,
    each weighed by how near it is in log size. Where the neighbours are as far on both sides
    it is the plain geometric mean; 256 B's are 128 B and 1 KiB, and the plain mean took
    1 KiB's ns/byte, four times the size away, as much as 128 B's, and 256 B sat at 1.5 x."""
    (s0, v0), (s1, v1) = lo, hi
    w = math.log(size / s0) / math.log(s1 / s0)
    return math.exp((1 - w) * math.log(v0) + w * math.log(v1))


def fifo_sizes() -> list[tuple[str, int]]:
    """(series, size): every size as a power of two, and as a power of two minus 32 where that
    leaves at least 32 bytes (16 - 32 and 32 - 32 are not sizes)."""
    out = [("pow2", s) for s in POW2_SIZES]
    out += [("pow2-32", s - 32) for s in POW2_SIZES if s - 32 >= 32]
    return out


class Fifo(Experiment):
    name = "fifo"
    kind = "micro"
    title = "Long runs, many GiB, unlucky sizes"
    seed = "2"
    about = ("Push blocks of one size until T bytes are live, pop them all (FIFO), R "
             "rounds in one process; each size as a power of two and as one minus 32. "
             "Plus the seed's own STL benchmark: std::function with 2 or 3 captured "
             "40-character strings in std::queue / list / deque.")

    def params(self, ctx: Context) -> dict[str, Any]:
        p = FIFO_MODES[ctx.mode]
        out = {"T (bytes live)": size_label(p["total"]), "R (rounds)": p["rounds"],
               "sizes": [size_label(s) for _, s in fifo_sizes()], "STL entries": p["stl_entries"],
               "repetitions": 1}
        more = {size_label(s): fifo_rounds(p, s) for series, s in fifo_sizes()
                if series == "pow2" and fifo_rounds(p, s) > p["rounds"]}
        if more:
            out[f"more rounds, to time {p['timed_blocks']:,} blocks (− 32: as the size)"] = [
                f"{s}: {r}" for s, r in more.items()]
        return out

    def cells(self, ctx: Context) -> list[Cell]:
        p = FIFO_MODES[ctx.mode]
        # One repetition: the rounds repeat inside the process (LAB.md).
        cells = [Cell(self.name, f"{series}/{size}", "fifo",
                      ("--size", str(size), "--total", str(p["total"]), "--rounds", str(fifo_rounds(p, size))), 1,
                      info={"kind": "c", "series": series, "size": size})
                 for series, size in fifo_sizes()]
        for c in STL_CONTAINERS:
            for n in (2, 3):
                cells.append(Cell(self.name, f"stl/{c}/{n}", "fifo_stl",
                                  ("--container", c, "--strings", str(n), "--entries", str(p["stl_entries"]),
                                   "--rounds", str(p["rounds"])), 1,
                                  info={"kind": "stl", "container": c, "strings": n}))
        return cells

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        rounds = [r for r in s.records if "round" in r]
        fin = final_record(s)
        ns = [float(r["push_ns"] + r["pop_ns"]) for r in rounds]
        per = [float(r.get("ns_per_block", r.get("ns_per_entry", math.nan))) for r in rounds]
        m = base_metrics(s)
        m.update({
            "ns_per_item": stats.median(per),
            "first_round_s": ns[0] / 1e9 if ns else math.nan,
            "last_round_s": ns[-1] / 1e9 if ns else math.nan,
            "last_over_first": ns[-1] / ns[0] if ns and ns[0] else math.nan,
            "rss_start": float(fin.get("rss_start", math.nan)),
            "rss_after_pop": float(fin.get("rss_after_pop", math.nan)),
            "rss_after_trim": float(fin.get("rss_after_trim", math.nan)),
        })
        m["trim_delta"] = m["rss_after_trim"] - m["rss_start"]
        if cell.info.get("kind") == "c":
            m["ns_per_byte"] = m["ns_per_item"] / cell.info["size"]
        return m, {"round_s": [v / 1e9 for v in ns]}

    def variant_subset(self, ctx: Context) -> list[str]:
        # Every size class family once (small, page-sized, big, the large-block path) and the
        # STL entries that allocate most per item; the -32 series repeats the same paths.
        return [f"pow2/{s}" for s in (32, 256, 4 * KiB, 64 * KiB, 1 * MiB)] + ["stl/list/3"]

    def c_cells(self, res: ExpResult, series: str | None = None) -> list[str]:
        return [c for c in res.cells if res.info.get(c, {}).get("kind") == "c"
                and (series is None or res.info[c]["series"] == series)]

    def stl_cells(self, res: ExpResult) -> list[str]:
        return [c for c in res.cells if res.info.get(c, {}).get("kind") == "stl"]

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        c_cells = self.c_cells(res)
        trimmed = c_cells + self.stl_cells(res)

        def steady() -> list[Check]:
            return [(self.label(res, c), res.m(FRUGAL, c, "last_over_first") <= LAST_FIRST_MAX,
                     f"{res.m(FRUGAL, c, 'last_over_first'):.2f}") for c in c_cells]

        def no_cliff() -> list[Check]:
            checks: list[Check] = []
            for series in ("pow2", "pow2-32"):
                cs = sorted(self.c_cells(res, series), key=lambda c: res.info[c]["size"])
                for lo, mid, hi in zip(cs, cs[1:], cs[2:]):
                    v = res.m(FRUGAL, mid, "ns_per_byte")
                    g = cliff_reference(*((res.info[c]["size"], res.m(FRUGAL, c, "ns_per_byte")) for c in (lo, hi)),
                                        res.info[mid]["size"])
                    checks.append((self.label(res, mid), v <= CLIFF_FACTOR * g, f"{v / g:.2f}× neighbours"))
            return checks

        def trim() -> list[Check]:
            return [(self.label(res, c), abs(res.m(FRUGAL, c, "trim_delta")) <= TRIM_SLACK,
                     f"{res.m(FRUGAL, c, 'trim_delta') / MiB:+.1f} MiB") for c in trimmed]

        return [
            self.judge(res, f"frugal: last round / first round ≤ {LAST_FIRST_MAX} at every size", c_cells, steady),
            self.judge(res, f"frugal: no cliff (ns/byte ≤ {CLIFF_FACTOR} × geometric mean of the neighbouring sizes, weighed by log distance)",
                       c_cells, no_cliff),
            self.judge(res, f"frugal: RSS after trim within {TRIM_SLACK // MiB} MiB of where it started", trimmed, trim),
        ]

    def label(self, res: ExpResult, cell: str) -> str:
        info = res.info.get(cell, {})
        if info.get("kind") == "c":
            if info["series"] == "pow2-32":
                return f"{size_label(info['size'] + 32)} − 32"
            return size_label(info["size"])
        return f"{info.get('container')} ×{info.get('strings')} strings"

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        head = ["size"] + res.allocators
        cells = sorted(self.c_cells(res), key=lambda c: res.info[c]["size"])
        t1 = [[self.label(res, c)] + [f"{fmt(res.m(a, c, 'ns_per_item'), 1)} ({fmt(res.m(a, c, 'last_over_first'))})"
                                      for a in res.allocators] for c in cells]
        stl = self.stl_cells(res)
        t2 = [[self.label(res, c)] + [f"{fmt(res.m(a, c, 'ns_per_item'), 1)} ({fmt(res.m(a, c, 'last_over_first'))})"
                                      for a in res.allocators] for c in stl]
        t3 = [[self.label(res, c)] + [f"{fmt(res.m(a, c, 'rss_after_pop') / MiB, 1)} → {fmt(res.m(a, c, 'rss_after_trim') / MiB, 1)}"
                                      for a in res.allocators] for c in cells + stl]
        return [
            ("ns per block, median round (last round / first round)", head, t1),
            ("STL: ns per entry, median round (last / first)", ["container"] + res.allocators, t2),
            ("RSS after the final pop → after trim (MiB)", ["cell"] + res.allocators, t3),
        ]
