"""The footprint experiment (seeds 1 and 3): what each allocator holds over time, RSS sampled
from outside, on workloads that show retention."""

from __future__ import annotations

import math
import os
import shutil
import sys
from typing import Any

from .. import stats
from ..lab import FRUGAL, Context, ExpResult, Verdict, within_noise
from ..runner import BENCH_DIR, Cell, Sample
from ..units import KiB, MiB, size_label
from .base import Check, Experiment, Table, base_metrics, final_record, fmt, idle_wait_ms

# The full sizes: bigrand is "random big blocks" (16 live, 5-25 MiB, 600 replacements), idle a
# loop over 128 MiB blocks, then idle, plus 64 MiB of small objects, sqlite3 50,000 rows, redis
# 200,000 keys. Quick mode keeps the lab's budget (~90 s for
# this experiment, five allocators, 2 cores): bigrand takes 200 replacements (600 take 3-4.5 s a
# run under jemalloc and mimalloc; frugal's peak at 150 is already 78 % of its peak at 600),
# redis 100,000 keys (1 s a run at 200,000), python3 about 0.35 s a run (2-core VM, 2026-11-23, under load).
# python3's lists growing together: 64 lists of 40,000 items, 0.35 s a run; 80,000 in full.
FOOTPRINT_MODES = {
    "quick": {"live": 16, "min": 5 * MiB, "max": 25 * MiB, "replacements": 200, "big": 128 * MiB, "big_iters": 4,
              "small": 64 * MiB, "keep": 1 * MiB, "rows": 50_000, "waves": 3, "records": 8_000, "keys": 100_000,
              "lists": 64, "items": 40_000},
    "full": {"live": 16, "min": 5 * MiB, "max": 25 * MiB, "replacements": 600, "big": 128 * MiB, "big_iters": 10,
             "small": 64 * MiB, "keep": 1 * MiB, "rows": 50_000, "waves": 8, "records": 40_000, "keys": 200_000,
             "lists": 64, "items": 80_000},
    "smoke": {"live": 4, "min": 1 * MiB, "max": 4 * MiB, "replacements": 20, "big": 8 * MiB, "big_iters": 1,
              "small": 4 * MiB, "keep": 256 * KiB, "rows": 2_000, "waves": 1, "records": 1_000, "keys": 2_000,
              "lists": 8, "items": 2_000},
}
FOOTPRINT_BYTES = {"min", "max", "big", "small", "keep"}  # the parameters above that are sizes
RSS_SAMPLE_MS = 10  # LAB.md: RSS sampled every 10-50 ms
SERIES_POINTS = 400  # at most this many RSS samples per curve in results.json
IDLE_SLACK = 8 * MiB  # LAB.md: after the idle phase, RSS within 8 MiB of live bytes
# The interpreter that runs the lab runs the python3 cells and the redis driver: a real binary
# (not a pyenv shim or a venv wrapper, which would put other processes under the allocator).
PYTHON = os.path.realpath(sys.executable)


class Footprint(Experiment):
    name = "footprint"
    title = "What each allocator holds, over time"
    seed = "1, 3"
    about = ("Workloads that show retention, their RSS sampled from outside every "
             f"{RSS_SAMPLE_MS} ms (/proc/PID/statm; for redis, the server's): random big "
             "blocks (live blocks each replaced by a random size, every page touched); a "
             "build / drop / idle cycle (small objects of mixed sizes and a loop over big "
             "blocks, all dropped but the oldest small ones, then one malloc(64)/free every "
             "10 ms for twice frugal's decay time); sqlite3 :memory: on bench/footprint.sql; "
             "python3 on bench/footprint_py.py with pymalloc and with PYTHONMALLOC=malloc; python3 "
             "lists growing together (bench/footprint_lists.py); "
             "redis-server filled with keys of mixed sizes, then every other one deleted.")

    def missing(self) -> list[str]:
        """The workloads' programs that are not installed: their cells are left out."""
        return [p for p in ("sqlite3", "redis-server") if not shutil.which(p)]

    def params(self, ctx: Context) -> dict[str, Any]:
        p, full = FOOTPRINT_MODES[ctx.mode], FOOTPRINT_MODES["full"]
        out = {
            "bigrand": f"{p['live']} live blocks of {size_label(p['min'])}–{size_label(p['max'])}, "
                       f"{p['replacements']} replacements",
            "idle": f"{size_label(p['small'])} of 16 B–4 KiB objects (the oldest {size_label(p['keep'])} kept), "
                    f"{p['big_iters']} × {size_label(p['big'])} blocks, then idle {idle_wait_ms(ctx)} ms",
            "decay (ms)": f"{ctx.decay_ms} ({ctx.decay_source})",
            "sqlite3": f"{p['rows']} rows",
            "python3": f"{p['waves']} waves of {p['records']} records ({PYTHON})",
            "python3 lists": f"{p['lists']} lists appended to in turn, {p['items']} items each, 3 rounds",
            "redis": f"{p['keys']} keys, half deleted (Debian's redis-server links jemalloc: under glibc, "
                     "libc is preloaded into it)",
            "repetitions": ctx.reps,
        }
        if ctx.mode != "full":
            show = {k: size_label if k in FOOTPRINT_BYTES else str for k in p}
            out["scaled down from --full"] = [f"{k} {show[k](p[k])} (full: {show[k](full[k])})"
                                              for k in p if p[k] != full[k]]
        if self.missing():
            out["not installed (left out)"] = self.missing()
        return out

    def cells(self, ctx: Context) -> list[Cell]:
        p = FOOTPRINT_MODES[ctx.mode]

        def cell(key: str, program: str, *args: Any, **kw: Any) -> Cell:
            return Cell(self.name, key, program, tuple(str(a) for a in args), ctx.reps, sample_ms=RSS_SAMPLE_MS,
                        **kw)

        cells = [
            cell("bigrand", "footprint", "--mode", "bigrand", "--live", p["live"], "--min", p["min"],
                 "--max", p["max"], "--replacements", p["replacements"]),
            # Idling only measures memory: the idle runs go side by side, their waits overlapping.
            cell("idle", "footprint", "--mode", "idle", "--big", p["big"], "--big-iters", p["big_iters"],
                 "--small", p["small"], "--keep", p["keep"], "--wait-ms", idle_wait_ms(ctx),
                 parallel=True, info={"size": p["big"]}),
        ]
        if "sqlite3" not in self.missing():
            cells.append(cell("sqlite3", "sqlite3", ":memory:", f".parameter set @rows {p['rows']}",
                              f".read {BENCH_DIR}/footprint.sql"))
        for pymalloc in ("pymalloc", "malloc"):
            cells.append(cell(f"python3/{pymalloc}", PYTHON, f"{BENCH_DIR}/footprint_py.py", "--waves", p["waves"],
                              "--records", p["records"], env={"PYTHONMALLOC": pymalloc}))
        cells.append(cell("python3/lists", PYTHON, f"{BENCH_DIR}/footprint_lists.py", "--lists", p["lists"],
                          "--items", p["items"]))
        if "redis-server" not in self.missing():
            cells.append(cell("redis", PYTHON, f"{BENCH_DIR}/footprint_redis.py", "--keys", p["keys"],
                              watch="redis-server"))
        return cells

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        m = base_metrics(s)
        m.update({k: float(v) for k, v in final_record(s).items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)})
        if cell.watch:  # wait4's peak is the larger of the driver's and the server's: sample the server's
            m["maxrss"] = float(max((b for _, b in s.rss), default=math.nan))
        points = stats.decimate(s.rss, SERIES_POINTS)
        return m, {"t": [t for t, _ in points], "rss": [b for _, b in points]}

    def variant_subset(self, ctx: Context) -> list[str]:
        # One big-block and one small-object workload, both always installed.
        return ["bigrand", "python3/pymalloc"]

    def scored_cells(self, res: ExpResult) -> list[str]:
        return [c for c in res.cells if c != "idle"]  # idle's time is its wait

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        def peaks() -> list[Check]:
            checks: list[Check] = []
            for c in res.cells:
                if res.failed_cells("glibc", [c]):
                    continue  # a workload glibc could not run is compared with no one
                f, g = res.m(FRUGAL, c, "maxrss"), res.m("glibc", c, "maxrss")
                ok = None if within_noise(res, FRUGAL, "glibc", c, "maxrss") else f <= g
                checks.append((c, ok, f"{f / MiB:.1f} MiB vs glibc {g / MiB:.1f} MiB"))
            return checks

        def idle() -> list[Check]:
            rss, live = res.m(FRUGAL, "idle", "rss_after_idle"), res.m(FRUGAL, "idle", "live_bytes")
            return [("idle", rss - live <= IDLE_SLACK, f"RSS {rss / MiB:.1f} MiB, live {live / MiB:.1f} MiB")]

        return [
            self.judge(res, "frugal: peak RSS ≤ glibc's on each workload", res.cells, peaks, against="glibc"),
            self.judge(res, f"frugal: after the idle phase, RSS within {IDLE_SLACK // MiB} MiB of live bytes",
                       ["idle"], idle),
        ]

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        def peak(a: str, c: str) -> str:
            spread = res.spread.get(a, {}).get(c, {}).get("maxrss", math.nan)
            return (f"{fmt(res.m(a, c, 'maxrss') / MiB, 1)} MiB ({fmt(100 * spread, 0)} %) / "
                    f"{fmt(res.m(a, c, 'wall'), 2)} s")

        def mib(a: str, c: str, *metrics: str) -> str:
            return " → ".join(fmt(res.m(a, c, k) / MiB, 1) for k in metrics)

        rows = [[c] + [peak(a, c) for a in res.allocators] for c in res.cells]
        tables: list[Table] = [("Peak RSS (the repetitions' min–max range, % of the median) / wall time, medians",
                                ["workload"] + res.allocators, rows)]
        rows = []
        if "idle" in res.cells:
            rows.append([f"idle: RSS built → dropped → after idling {idle_wait_ms(ctx)} ms"] +
                        [mib(a, "idle", "rss_built", "rss_after_drop", "rss_after_idle") for a in res.allocators])
            rows.append(["idle: live bytes"] + [mib(a, "idle", "live_bytes") for a in res.allocators])
        if "redis" in res.cells:
            rows.append(["redis: RSS after the fill → after deleting half"] +
                        [mib(a, "redis", "rss_after_fill", "rss_after_delete") for a in res.allocators])
            rows.append(["redis: used_memory after the fill → after deleting half"] +
                        [mib(a, "redis", "used_after_fill", "used_after_delete") for a in res.allocators])
        if rows:
            tables.append(("What is held once the work is done (MiB)", [""] + res.allocators, rows))
        return tables
