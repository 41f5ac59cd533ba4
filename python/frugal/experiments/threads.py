"""Seed 4's experiment: N threads sharing a fixed amount of allocation work, the seed's own
locked designs over each allocator, and a cross-thread queue."""

from __future__ import annotations

import math
from typing import Any

from ..lab import FRUGAL, Context, ExpResult, Verdict
from ..runner import Cell, Sample
from ..units import KiB, MiB, size_label
from .base import Check, Experiment, Table, base_metrics, fmt

THREAD_SIZES = (128, 1 * KiB, 1 * MiB)
# X per size, fixed across N: one thread of glibc takes about 0.3 s in quick mode (measured on
# the lab's 2-core reference VM: 38 ns per 128 B object, 0.21 us per 1 KiB, 2.3 us per 1 MiB,
# first and last word written) and about 2 s in full.
THREAD_OBJECTS = {
    "quick": {128: 8_000_000, 1 * KiB: 1_400_000, 1 * MiB: 130_000},
    "full": {128: 52_000_000, 1 * KiB: 9_400_000, 1 * MiB: 870_000},
    "smoke": {128: 40_000, 1 * KiB: 20_000, 1 * MiB: 2_000},
}
SCALING_FACTOR = 0.9  # LAB.md: speedup >= 0.9 x min(N, cores)
SEED_DESIGNS = ("global-mutex", "mutex-array")


def thread_counts(ctx: Context) -> list[int]:
    c = ctx.cores
    if ctx.mode == "smoke":
        return [1, 2]
    if ctx.mode == "quick":  # LAB.md: 1, 2, 4 x cores; plus cores, which the verdicts compare
        return sorted({1, 2, c, 4 * c})
    return sorted(set(range(1, c + 1)) | {2 * c, 4 * c})


class Threads(Experiment):
    name = "threads"
    title = "A global heap without traffic jams"
    seed = "4"
    about = ("N threads share X objects of size S in batches of 1,000 (allocate, write "
             "first and last word, free); X is fixed per size, so perfect scaling halves "
             "the time when N doubles up to the core count. Also the seed's own designs "
             "over each allocator (global-mutex, mutex-array) and a cross-thread queue "
             "(N/2 producers allocate, N/2 consumers free).")

    def params(self, ctx: Context) -> dict[str, Any]:
        objs = THREAD_OBJECTS[ctx.mode]
        return {"cores": ctx.cores, "N": thread_counts(ctx),
                "X per size": {size_label(s): objs[s] for s in THREAD_SIZES},
                "seed designs at": [size_label(s) for s in self.design_sizes(ctx)], "repetitions": ctx.reps}

    def design_sizes(self, ctx: Context) -> tuple[int, ...]:
        # Quick mode runs the seed's designs at 1 KiB only: the seed's own chart is for 1 KiB,
        # and a global mutex under contention is too slow for the 5-minute budget at all sizes.
        return (1 * KiB,) if ctx.mode == "quick" else THREAD_SIZES

    def cells(self, ctx: Context) -> list[Cell]:
        cells = []
        objs = THREAD_OBJECTS[ctx.mode]

        def add(variant: str, size: int, n: int) -> None:
            cells.append(Cell(self.name, f"{variant}/{size}/{n}", "threads",
                              ("--threads", str(n), "--size", str(size), "--objects", str(objs[size]), "--variant", variant),
                              ctx.reps, info={"variant": variant, "size": size, "threads": n, "objects": objs[size]}))

        for size in THREAD_SIZES:
            for n in thread_counts(ctx):
                add("malloc", size, n)
        for size in self.design_sizes(ctx):
            for v in SEED_DESIGNS:
                for n in thread_counts(ctx):
                    add(v, size, n)
        for size in THREAD_SIZES:
            for n in thread_counts(ctx):
                if n >= 2:
                    add("cross", size, n)
        return cells

    def variant_subset(self, ctx: Context) -> list[str]:
        # One thread, and every size at N = cores (where the scaling verdict looks; smoke stops
        # at 2 threads), plus cross-thread frees; the seed's locked designs add nothing new.
        n = min(ctx.cores, max(thread_counts(ctx)))
        return [self.cell("malloc", 128, 1)] + [self.cell("malloc", s, n) for s in THREAD_SIZES] + [
            self.cell("cross", 1 * KiB, n)]

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        rec = next((r for r in s.records if "wall_ns" in r), {})
        m = base_metrics(s)
        t = rec.get("wall_ns", math.nan) / 1e9
        m["time"] = t
        m["throughput"] = cell.info["objects"] / t if t else math.nan
        return m, {}

    def cell(self, variant: str, size: int, n: int) -> str:
        return f"{variant}/{size}/{n}"

    def reference(self, res: ExpResult) -> str:
        """Whose 1-thread malloc time the others are relative to: glibc, as in the seed's chart,
        or the first allocator measured when glibc was left out (--allocators)."""
        return next((a for a in ["glibc", *res.allocators] if res.has(a)), "glibc")

    def counts(self, res: ExpResult, variant: str, size: int) -> list[int]:
        return sorted(res.info[c]["threads"] for c in res.cells
                      if res.info.get(c, {}).get("variant") == variant and res.info[c]["size"] == size)

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        plain = [c for c in res.cells if res.info.get(c, {}).get("variant") == "malloc"]
        cross = [c for c in res.cells if res.info.get(c, {}).get("variant") == "cross"]

        def scaling() -> list[Check]:
            checks: list[Check] = []
            for size in THREAD_SIZES:
                t1 = res.m(FRUGAL, self.cell("malloc", size, 1), "time")
                for n in [n for n in self.counts(res, "malloc", size) if n > 1]:
                    sp = t1 / res.m(FRUGAL, self.cell("malloc", size, n), "time")
                    want = SCALING_FACTOR * min(n, ctx.cores)
                    checks.append((f"{size_label(size)} N={n}", sp >= want, f"{sp:.2f} (≥ {want:.2f})"))
            return checks

        def oversubscribed() -> list[Check]:
            checks: list[Check] = []
            for size in THREAD_SIZES:
                a = res.m(FRUGAL, self.cell("malloc", size, ctx.cores), "time")
                b = res.m(FRUGAL, self.cell("malloc", size, 4 * ctx.cores), "time")
                if not (math.isnan(a) or math.isnan(b)):
                    checks.append((size_label(size), b <= a, f"{b:.3f} s vs {a:.3f} s"))
            return checks

        def handed_over() -> list[Check]:
            checks: list[Check] = []
            for c in cross:
                if res.failed_cells("mimalloc", [c]):
                    continue
                f, mi = res.m(FRUGAL, c, "throughput"), res.m("mimalloc", c, "throughput")
                i = res.info[c]
                checks.append((f"{size_label(i['size'])} N={i['threads']}", f >= mi, f"{f / mi:.2f}× mimalloc"))
            return checks

        return [
            self.judge(res, f"frugal: speedup ≥ {SCALING_FACTOR} × min(N, cores)", plain, scaling),
            self.judge(res, "frugal: at 4 × cores no worse than at cores", plain, oversubscribed),
            self.judge(res, "frugal: cross-thread throughput ≥ mimalloc's", cross, handed_over, against="mimalloc"),
        ]

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        tables: list[Table] = []
        ref = self.reference(res)
        base = {s: res.m(ref, self.cell("malloc", s, 1), "time") for s in THREAD_SIZES}
        for variant, caption in (("malloc", f"malloc/free: time (s), speedup against 1 thread, time relative to {ref} at 1 thread"),
                                 ("global-mutex", f"Seed's X allocator (global mutex) over each allocator: time (s) / relative to {ref} malloc at 1 thread"),
                                 ("mutex-array", f"Seed's pooled X allocator (mutex per thread id): time (s) / relative to {ref} malloc at 1 thread")):
            rows = []
            for size in THREAD_SIZES:
                for n in self.counts(res, variant, size):
                    row: list[Any] = [f"{size_label(size)} N={n}"]
                    for a in res.allocators:
                        t = res.m(a, self.cell(variant, size, n), "time")
                        t1 = res.m(a, self.cell("malloc", size, 1), "time")
                        rel = t / base[size] if base[size] else math.nan
                        row.append(f"{fmt(t, 3)} ×{fmt(t1 / t)} ({fmt(100 * rel, 0)} %)" if variant == "malloc"
                                   else f"{fmt(t, 3)} ({fmt(100 * rel, 0)} %)")
                    rows.append(row)
            if rows:
                tables.append((caption, ["cell"] + res.allocators, rows))
        rows = []
        for size in THREAD_SIZES:
            for n in self.counts(res, "cross", size):
                c = self.cell("cross", size, n)
                rows.append([f"{size_label(size)} N={n}"] + [
                    f"{fmt(res.m(a, c, 'throughput') / 1e6, 2)} M/s, {fmt(res.m(a, c, 'maxrss') / MiB, 0)} MiB"
                    for a in res.allocators])
        if rows:
            tables.append(("Cross-thread (producers allocate, consumers free): objects per second, peak RSS",
                           ["cell"] + res.allocators, rows))
        return tables
