"""The five experiments of LAB.md: for each, the cells a mode runs (parameters as LAB.md gives
them), how one run's output reduces to metrics, the verdicts on frugal, and the tables of the
report. Verdict thresholds are LAB.md's; where LAB.md leaves a word open ("~0", "poison"),
the constant below says how it is read."""

from __future__ import annotations

import math
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable

from . import stats
from .lab import FRUGAL, MiB, NA, Context, ExpResult, Verdict, check_all, frugal_gate, within_noise
from .runner import BENCH_DIR, Cell, Sample

KiB = 1 << 10
GiB = 1 << 30

# --- bufcache (seed 1) -----------------------------------------------------------------------
POLICIES = ("none", "keep-biggest-1", "keep-biggest-10", "cutoff-200", "buckets")
BUFCACHE_STEPS = {"quick": 2_000_000, "full": 2_000_000, "smoke": 20_000}
# LAB.md: frugal with `none` keeps mean efficiency >= 96 % and never below 94 % after step 1000.
EFF_MEAN_MIN, EFF_FLOOR, EFF_FLOOR_AFTER = 0.96, 0.94, 1000
# "Poisoned": the cache hands out more than twice what is requested on average (the seed saw
# 1-8 % efficiency; a healthy allocator alone stays near 90 % or above).
POISON_EFF = 0.5
SERIES_EVERY = 10  # keep every 10th sample (every 1000 steps) of a curve in results.json

# --- fifo (seed 2) ----------------------------------------------------------------------------
POW2_SIZES = (16, 32, 64, 128, 256, 1 * KiB, 4 * KiB, 16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB,
              256 * KiB, 512 * KiB, 1 * MiB)
FIFO_MODES = {
    "quick": {"total": 128 * MiB, "rounds": 4, "stl_entries": 500_000},
    "full": {"total": 8 * GiB, "rounds": 16, "stl_entries": 8_000_000},
    "smoke": {"total": 2 * MiB, "rounds": 2, "stl_entries": 2_000},
}
STL_CONTAINERS = ("queue", "list", "deque")
LAST_FIRST_MAX = 1.05  # LAB.md: last/first <= 1.05 at every size
CLIFF_FACTOR = 1.5  # LAB.md: ns/byte at a size <= 1.5 x geometric mean of its neighbours
TRIM_SLACK = 16 * MiB  # LAB.md: RSS after trim within 16 MiB of where it started

# --- bigbuf (seed 3) --------------------------------------------------------------------------
BIG_SIZES = (1 * MiB, 8 * MiB, 32 * MiB, 128 * MiB)
BIG_VARIANTS = ("untouched", "touched", "filled", "reuse")
BIG_ITERS = {"quick": 10, "full": 100, "smoke": 2}
SMOKE_WAIT_MS = 100
MAX_WAIT_MS = 30_000
TOUCHED_OVER_REUSE = 1.25  # LAB.md: touched costs <= 1.25 x reuse per MiB
# LAB.md's "~0 minor faults per iteration after the first", read as fewer than 1 fault per MiB
# per iteration: a block of fresh pages costs 256 per MiB (4 KiB pages).
FAULTS_PER_MIB_MAX = 1.0

# --- threads (seed 4) -------------------------------------------------------------------------
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

# --- footprint (seeds 1 and 3) ----------------------------------------------------------------
# The full sizes are issue #10's: bigrand is its "random big blocks" (16 live, 5-25 MiB, 600
# replacements), idle its third row (a loop over 128 MiB blocks, then idle) plus 64 MiB of small
# objects, sqlite3 50,000 rows, redis 200,000 keys. Quick mode keeps the lab's budget (~90 s for
# this experiment, five allocators, 2 cores): bigrand takes 200 replacements (600 take 3-4.5 s a
# run under jemalloc and mimalloc; frugal's peak at 150 is already 78 % of its peak at 600),
# redis 100,000 keys (1 s a run at 200,000), python3 about 0.35 s a run (2-core VM, 2026-11-23, under load).
FOOTPRINT_MODES = {
    "quick": {"live": 16, "min": 5 * MiB, "max": 25 * MiB, "replacements": 200, "big": 128 * MiB, "big_iters": 4,
              "small": 64 * MiB, "keep": 1 * MiB, "rows": 50_000, "waves": 3, "records": 8_000, "keys": 100_000},
    "full": {"live": 16, "min": 5 * MiB, "max": 25 * MiB, "replacements": 600, "big": 128 * MiB, "big_iters": 10,
             "small": 64 * MiB, "keep": 1 * MiB, "rows": 50_000, "waves": 8, "records": 40_000, "keys": 200_000},
    "smoke": {"live": 4, "min": 1 * MiB, "max": 4 * MiB, "replacements": 20, "big": 8 * MiB, "big_iters": 1,
              "small": 4 * MiB, "keep": 256 * KiB, "rows": 2_000, "waves": 1, "records": 1_000, "keys": 2_000},
}
FOOTPRINT_BYTES = {"min", "max", "big", "small", "keep"}  # the parameters above that are sizes
RSS_SAMPLE_MS = 10  # LAB.md: RSS sampled every 10-50 ms
SERIES_POINTS = 400  # at most this many RSS samples per curve in results.json
IDLE_SLACK = 8 * MiB  # LAB.md: after the idle phase, RSS within 8 MiB of live bytes
# The interpreter that runs the lab runs the python3 cells and the redis driver: a real binary
# (not a pyenv shim or a venv wrapper, which would put other processes under the allocator).
PYTHON = os.path.realpath(sys.executable)


def size_label(n: float) -> str:
    n = int(n)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    if n >= 1024:
        for unit, scale in (("MiB", MiB), ("KiB", KiB)):
            if n >= scale:
                return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def idle_wait_ms(ctx: Context) -> int:
    """How long a workload idles to let the allocators give memory back: twice frugal's decay."""
    return SMOKE_WAIT_MS if ctx.mode == "smoke" else min(2 * ctx.decay_ms, MAX_WAIT_MS)


def fmt(v: float, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def base_metrics(s: Sample) -> dict[str, float]:
    return {"wall": s.wall, "user": s.user, "sys": s.sys, "maxrss": float(s.maxrss),
            "minflt": float(s.minflt), "majflt": float(s.majflt)}


def final_record(s: Sample) -> dict:
    for r in reversed(s.records):
        if r.get("final"):
            return r
    return {}


Table = tuple[str, list[str], list[list[Any]]]


@dataclass
class Experiment:
    """The interface every experiment implements."""

    name: str = ""
    title: str = ""
    seed: str = ""
    about: str = ""

    def cells(self, ctx: Context) -> list[Cell]:
        raise NotImplementedError

    def params(self, ctx: Context) -> dict[str, Any]:
        raise NotImplementedError

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        """One run's scalar metrics and curves."""
        raise NotImplementedError

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        raise NotImplementedError

    def scored_cells(self, res: ExpResult) -> list[str]:
        """The cells whose time and RSS make the summary line."""
        return list(res.cells)

    def variant_cells(self, ctx: Context) -> list[str]:
        """The timed cells also run under the variants (frugal+ledger: the ledger's price). In
        full mode, all; else `variant_subset`'s: on every timed cell the ledger added ~23 s to
        quick mode (173 s in all with five allocators, 2-core VM, 2026-11-22), the subsets ~5 s."""
        timed = [c.key for c in self.cells(ctx) if not c.parallel]
        if ctx.mode == "full":
            return timed
        subset = set(self.variant_subset(ctx))
        return [k for k in timed if k in subset]

    def variant_subset(self, ctx: Context) -> list[str]:
        """A representative few of the timed cells, for quick and smoke modes; by default all
        (bufcache's five runs take 0.1 s each)."""
        return [c.key for c in self.cells(ctx)]

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        raise NotImplementedError


# =============================================================================================
class Bufcache(Experiment):
    def __init__(self) -> None:
        super().__init__("bufcache", "A cache with a bad policy", "1",
                         "The seed's random process (glibc rand(), never seeded) through five "
                         "cache policies in front of each allocator; efficiency = bytes requested "
                         "/ bytes handed out (malloc_usable_size), every 100 steps.")

    def params(self, ctx: Context) -> dict[str, Any]:
        return {"steps": BUFCACHE_STEPS[ctx.mode], "policies": list(POLICIES), "repetitions": ctx.reps}

    def cells(self, ctx: Context) -> list[Cell]:
        steps = BUFCACHE_STEPS[ctx.mode]
        return [Cell(self.name, p, "bufcache", ("--policy", p, "--steps", str(steps)), ctx.reps, info={"policy": p})
                for p in POLICIES]

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        samples = [r for r in s.records if "step" in r]
        eff = [float(r["efficiency"]) for r in samples]
        late = [float(r["efficiency"]) for r in samples if r["step"] > EFF_FLOOR_AFTER]
        true_eff = [r["requested"] / r["rss"] for r in samples if r.get("rss")]
        m = base_metrics(s)
        m.update({
            "eff_mean": sum(eff) / len(eff) if eff else math.nan,
            "eff_min_late": min(late) if late else math.nan,
            "eff_final": eff[-1] if eff else math.nan,
            "true_eff_mean": sum(true_eff) / len(true_eff) if true_eff else math.nan,
            "requested_over_peak_rss": (max((r["requested"] for r in samples), default=0) / s.maxrss
                                        if s.maxrss else math.nan),
            "loop_s": final_record(s).get("loop_ns", math.nan) / 1e9,
        })
        series = {
            "step": [r["step"] for r in samples[::SERIES_EVERY]],
            "efficiency": [r["efficiency"] for r in samples[::SERIES_EVERY]],
        }
        return m, series

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        out: list[Verdict] = []
        name = f"keep-biggest policies poison every allocator (mean efficiency < {POISON_EFF:.0%})"
        kb = ["keep-biggest-1", "keep-biggest-10"]
        gate = frugal_gate(res, self.name, name, kb)
        if gate:
            out.append(gate)
        else:
            checks = [(f"{a} {p}", res.m(a, p, "eff_mean") < POISON_EFF, f"{res.m(a, p, 'eff_mean'):.1%}")
                      for a in res.allocators if res.has(a) for p in kb if not res.failed_cells(a, [p])]
            out.append(check_all(self.name, name, checks))

        name = f"frugal `none`: mean efficiency ≥ {EFF_MEAN_MIN:.0%}, never < {EFF_FLOOR:.0%} after step {EFF_FLOOR_AFTER}"
        gate = frugal_gate(res, self.name, name, ["none"])
        if gate:
            out.append(gate)
        else:
            mean, low = res.m(FRUGAL, "none", "eff_mean"), res.m(FRUGAL, "none", "eff_min_late")
            out.append(check_all(self.name, name, [
                ("mean", mean >= EFF_MEAN_MIN, f"{mean:.2%}"), ("minimum", low >= EFF_FLOOR, f"{low:.2%}")]))

        name = "frugal `none`: peak RSS ≤ glibc's"
        gate = frugal_gate(res, self.name, name, ["none"])
        if gate:
            out.append(gate)
        elif not res.has("glibc") or res.failed_cells("glibc", ["none"]):
            out.append(Verdict(self.name, name, NA, "glibc was not measured"))
        else:
            f, g = res.m(FRUGAL, "none", "maxrss"), res.m("glibc", "none", "maxrss")
            out.append(check_all(self.name, name, [("peak RSS", f <= g, f"{f / MiB:.1f} MiB vs glibc {g / MiB:.1f} MiB")]))
        return out

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        head = ["allocator"] + [f"{p}" for p in POLICIES]
        rows_eff, rows_rss = [], []
        for a in res.allocators:
            rows_eff.append([a] + [f"{fmt(100 * res.m(a, p, 'eff_mean'), 1)} % (min {fmt(100 * res.m(a, p, 'eff_min_late'), 1)})"
                                   for p in POLICIES])
            rows_rss.append([a] + [f"{fmt(res.m(a, p, 'maxrss') / MiB, 1)} MiB / {fmt(100 * res.m(a, p, 'requested_over_peak_rss'), 0)} %"
                                   for p in POLICIES])
        return [
            ("Efficiency, requested / handed out: mean over the run (minimum after step 1000)", head, rows_eff),
            ("Peak RSS / true efficiency (peak bytes requested / peak RSS)", head, rows_rss),
        ]


# =============================================================================================
def fifo_sizes() -> list[tuple[str, int]]:
    """(series, size): every size as a power of two, and as a power of two minus 32 where that
    leaves at least 32 bytes (16 - 32 and 32 - 32 are not sizes)."""
    out = [("pow2", s) for s in POW2_SIZES]
    out += [("pow2-32", s - 32) for s in POW2_SIZES if s - 32 >= 32]
    return out


class Fifo(Experiment):
    def __init__(self) -> None:
        super().__init__("fifo", "Long runs, many GiB, unlucky sizes", "2",
                         "Push blocks of one size until T bytes are live, pop them all (FIFO), R "
                         "rounds in one process; each size as a power of two and as one minus 32. "
                         "Plus the seed's own STL benchmark: std::function with 2 or 3 captured "
                         "40-character strings in std::queue / list / deque.")

    def params(self, ctx: Context) -> dict[str, Any]:
        p = FIFO_MODES[ctx.mode]
        return {"T (bytes live)": size_label(p["total"]), "R (rounds)": p["rounds"],
                "sizes": [size_label(s) for _, s in fifo_sizes()], "STL entries": p["stl_entries"],
                "repetitions": 1}

    def cells(self, ctx: Context) -> list[Cell]:
        p = FIFO_MODES[ctx.mode]
        # One repetition: the rounds repeat inside the process (LAB.md).
        cells = [Cell(self.name, f"{series}/{size}", "fifo",
                      ("--size", str(size), "--total", str(p["total"]), "--rounds", str(p["rounds"])), 1,
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
        out: list[Verdict] = []
        c_cells = self.c_cells(res)
        name = f"frugal: last round / first round ≤ {LAST_FIRST_MAX} at every size"
        gate = frugal_gate(res, self.name, name, c_cells)
        out.append(gate or check_all(self.name, name, [
            (self.label(res, c), res.m(FRUGAL, c, "last_over_first") <= LAST_FIRST_MAX,
             f"{res.m(FRUGAL, c, 'last_over_first'):.2f}") for c in c_cells]))

        name = f"frugal: no cliff (ns/byte ≤ {CLIFF_FACTOR} × geometric mean of the neighbouring sizes)"
        gate = frugal_gate(res, self.name, name, c_cells)
        if gate:
            out.append(gate)
        else:
            checks = []
            for series in ("pow2", "pow2-32"):
                cs = sorted(self.c_cells(res, series), key=lambda c: res.info[c]["size"])
                for lo, mid, hi in zip(cs, cs[1:], cs[2:]):
                    v = res.m(FRUGAL, mid, "ns_per_byte")
                    g = math.sqrt(res.m(FRUGAL, lo, "ns_per_byte") * res.m(FRUGAL, hi, "ns_per_byte"))
                    checks.append((self.label(res, mid), v <= CLIFF_FACTOR * g, f"{v / g:.2f}× neighbours"))
            out.append(check_all(self.name, name, checks))

        name = "frugal: RSS after trim within 16 MiB of where it started"
        cells = c_cells + self.stl_cells(res)
        gate = frugal_gate(res, self.name, name, cells)
        out.append(gate or check_all(self.name, name, [
            (self.label(res, c), abs(res.m(FRUGAL, c, "trim_delta")) <= TRIM_SLACK,
             f"{res.m(FRUGAL, c, 'trim_delta') / MiB:+.1f} MiB") for c in cells]))
        return out

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


# =============================================================================================
class Bigbuf(Experiment):
    def __init__(self) -> None:
        super().__init__("bigbuf", "The hidden costs of big blocks", "3",
                         "K × (malloc(B), use, free) for B = 1, 8, 32, 128 MiB: untouched, touched "
                         "(a byte per 4 KiB page), filled (memset), reuse (one block, the lower bound). "
                         "Costs per MiB per iteration; then the process idles (a small malloc/free "
                         "every 10 ms) for twice frugal's decay time and its RSS is read.")

    def wait_ms(self, ctx: Context) -> int:
        return idle_wait_ms(ctx)

    def params(self, ctx: Context) -> dict[str, Any]:
        return {"B": [size_label(b) for b in BIG_SIZES], "K (iterations)": BIG_ITERS[ctx.mode],
                "idle wait (ms)": self.wait_ms(ctx), "decay (ms)": f"{ctx.decay_ms} ({ctx.decay_source})",
                "repetitions": ctx.reps}

    def cells(self, ctx: Context) -> list[Cell]:
        k = str(BIG_ITERS[ctx.mode])
        cells = [Cell(self.name, f"{v}/{b // MiB}", "bigbuf", ("--size", str(b), "--variant", v, "--iters", k),
                      ctx.reps, info={"variant": v, "size": b}) for b in BIG_SIZES for v in BIG_VARIANTS]
        # The return-to-the-OS runs only measure memory, so they run side by side (their idle
        # waits overlap) in a phase of their own.
        cells += [Cell(self.name, f"return/{b // MiB}", "bigbuf",
                       ("--size", str(b), "--variant", "touched", "--iters", k, "--wait-ms", str(self.wait_ms(ctx))),
                       ctx.reps, parallel=True, info={"variant": "return", "size": b}) for b in BIG_SIZES]
        return cells

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        its = [r for r in s.records if "iter" in r]
        fin = final_record(s)
        mib = cell.info["size"] / MiB
        k = max(len(its), 1)
        steady = its[1:] if len(its) > 1 else its

        def per_mib_us(rows: list[dict], key: str | None = None) -> float:
            if not rows:
                return math.nan
            tot = [(r["alloc_ns"] + r["touch_ns"] + r["free_ns"]) if key is None else r[key] for r in rows]
            return sum(tot) / len(tot) / 1000 / mib

        m = base_metrics(s)
        m.update({
            "us_per_mib": per_mib_us(steady),
            "us_per_mib_all": per_mib_us(its),
            "alloc_us_per_mib": per_mib_us(steady, "alloc_ns"),
            "touch_us_per_mib": per_mib_us(steady, "touch_ns"),
            "free_us_per_mib": per_mib_us(steady, "free_ns"),
            "faults_per_mib_first": its[0]["minflt"] / mib if its else math.nan,
            "faults_per_mib_steady": (sum(r["minflt"] for r in steady) / len(steady) / mib) if steady else math.nan,
            "outside_cpu_us_per_mib": (s.user + s.sys) * 1e6 / k / mib,
            "outside_sys_us_per_mib": s.sys * 1e6 / k / mib,
            "outside_faults_per_mib": s.minflt / k / mib,
            "rss_start": float(fin.get("rss_start", math.nan)),
            "rss_after_loop": float(fin.get("rss_after_loop", math.nan)),
            "rss_after_wait": float(fin.get("rss_after_wait", math.nan)),
            "rss_after_trim": float(fin.get("rss_after_trim", math.nan)),
        })
        return m, {}

    def variant_subset(self, ctx: Context) -> list[str]:
        # `touched` at every size: a program's ordinary use of a big block; a few mallocs per
        # iteration, so the other variants would only repeat its answer.
        return [f"touched/{b // MiB}" for b in BIG_SIZES]

    def cells_of(self, res: ExpResult, variant: str) -> list[str]:
        return sorted([c for c in res.cells if res.info.get(c, {}).get("variant") == variant],
                      key=lambda c: res.info[c]["size"])

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        out: list[Verdict] = []
        touched, reuse = self.cells_of(res, "touched"), self.cells_of(res, "reuse")
        name = f"frugal: `touched` costs ≤ {TOUCHED_OVER_REUSE} × `reuse` per MiB (iterations after the first)"
        gate = frugal_gate(res, self.name, name, touched + reuse)
        if gate:
            out.append(gate)
        else:
            checks = []
            for t, r in zip(touched, reuse):
                ratio = res.m(FRUGAL, t, "us_per_mib") / res.m(FRUGAL, r, "us_per_mib")
                checks.append((size_label(res.info[t]["size"]), ratio <= TOUCHED_OVER_REUSE, f"{ratio:.2f}×"))
            out.append(check_all(self.name, name, checks))

        name = f"frugal: ~0 minor faults per iteration after the first (< {FAULTS_PER_MIB_MAX:g} per MiB)"
        gate = frugal_gate(res, self.name, name, touched)
        out.append(gate or check_all(self.name, name, [
            (size_label(res.info[t]["size"]), res.m(FRUGAL, t, "faults_per_mib_steady") < FAULTS_PER_MIB_MAX,
             f"{res.m(FRUGAL, t, 'faults_per_mib_steady'):.2f}/MiB") for t in touched]))

        ret = self.cells_of(res, "return")
        name = "frugal: RSS after the idle wait ≤ start + one block"
        gate = frugal_gate(res, self.name, name, ret)
        checks = []
        for c in ret:
            over = res.m(FRUGAL, c, "rss_after_wait") - res.m(FRUGAL, c, "rss_start")
            checks.append((size_label(res.info[c]["size"]), over <= res.info[c]["size"], f"start {over / MiB:+.1f} MiB"))
        out.append(gate or check_all(self.name, name, checks))
        return out

    def scored_cells(self, res: ExpResult) -> list[str]:
        return [c for c in res.cells if res.info.get(c, {}).get("variant") != "return"]

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        tables: list[Table] = []
        head = ["variant / B"] + res.allocators
        rows = []
        for v in BIG_VARIANTS:
            for c in self.cells_of(res, v):
                rows.append([f"{v} {size_label(res.info[c]['size'])}"] + [
                    f"{fmt(res.m(a, c, 'us_per_mib'), 1)} / {fmt(res.m(a, c, 'faults_per_mib_steady'), 1)} / "
                    f"{fmt(res.m(a, c, 'outside_cpu_us_per_mib'), 1)}" for a in res.allocators])
        tables.append(("Inside µs per MiB per iteration (after the first) / minor faults per MiB per iteration "
                       "(after the first) / outside user+sys µs per MiB per iteration", head, rows))
        rows = []
        for c in self.cells_of(res, "return"):
            rows.append([size_label(res.info[c]["size"])] + [
                f"{fmt(res.m(a, c, 'rss_start') / MiB, 1)} → {fmt(res.m(a, c, 'rss_after_wait') / MiB, 1)} → "
                f"{fmt(res.m(a, c, 'rss_after_trim') / MiB, 1)}" for a in res.allocators])
        tables.append((f"RSS (MiB) at start → after idling {self.wait_ms(ctx)} ms → after trim", ["B"] + res.allocators, rows))
        return tables


# =============================================================================================
def thread_counts(ctx: Context) -> list[int]:
    c = ctx.cores
    if ctx.mode == "smoke":
        return [1, 2]
    if ctx.mode == "quick":  # LAB.md: 1, 2, 4 x cores; plus cores, which the verdicts compare
        return sorted({1, 2, c, 4 * c})
    return sorted(set(range(1, c + 1)) | {2 * c, 4 * c})


class Threads(Experiment):
    def __init__(self) -> None:
        super().__init__("threads", "A global heap without traffic jams", "4",
                         "N threads share X objects of size S in batches of 1,000 (allocate, write "
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
        out: list[Verdict] = []
        plain = [c for c in res.cells if res.info.get(c, {}).get("variant") == "malloc"]
        name = f"frugal: speedup ≥ {SCALING_FACTOR} × min(N, cores)"
        gate = frugal_gate(res, self.name, name, plain)
        if gate:
            out.append(gate)
        else:
            checks = []
            for size in THREAD_SIZES:
                t1 = res.m(FRUGAL, self.cell("malloc", size, 1), "time")
                for n in self.counts(res, "malloc", size):
                    if n == 1:
                        continue
                    sp = t1 / res.m(FRUGAL, self.cell("malloc", size, n), "time")
                    want = SCALING_FACTOR * min(n, ctx.cores)
                    checks.append((f"{size_label(size)} N={n}", sp >= want, f"{sp:.2f} (≥ {want:.2f})"))
            out.append(check_all(self.name, name, checks))

        name = "frugal: at 4 × cores no worse than at cores"
        gate = frugal_gate(res, self.name, name, plain)
        if gate:
            out.append(gate)
        else:
            checks = []
            for size in THREAD_SIZES:
                a = res.m(FRUGAL, self.cell("malloc", size, ctx.cores), "time")
                b = res.m(FRUGAL, self.cell("malloc", size, 4 * ctx.cores), "time")
                if not (math.isnan(a) or math.isnan(b)):
                    checks.append((size_label(size), b <= a, f"{b:.3f} s vs {a:.3f} s"))
            out.append(check_all(self.name, name, checks))

        cross = [c for c in res.cells if res.info.get(c, {}).get("variant") == "cross"]
        name = "frugal: cross-thread throughput ≥ mimalloc's"
        gate = frugal_gate(res, self.name, name, cross)
        if gate:
            out.append(gate)
        elif not res.has("mimalloc") or res.failed_cells("mimalloc", cross):
            out.append(Verdict(self.name, name, NA, "mimalloc was not measured"))
        else:
            checks = []
            for c in cross:
                f, mi = res.m(FRUGAL, c, "throughput"), res.m("mimalloc", c, "throughput")
                i = res.info[c]
                checks.append((f"{size_label(i['size'])} N={i['threads']}", f >= mi, f"{f / mi:.2f}× mimalloc"))
            out.append(check_all(self.name, name, checks))
        return out

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


# =============================================================================================
class Footprint(Experiment):
    def __init__(self) -> None:
        super().__init__("footprint", "What each allocator holds, over time", "1, 3",
                         "Workloads that show retention, their RSS sampled from outside every "
                         f"{RSS_SAMPLE_MS} ms (/proc/PID/statm; for redis, the server's): random big "
                         "blocks (live blocks each replaced by a random size, every page touched); a "
                         "build / drop / idle cycle (small objects of mixed sizes and a loop over big "
                         "blocks, all dropped but the oldest small ones, then one malloc(64)/free every "
                         "10 ms for twice frugal's decay time); sqlite3 :memory: on bench/footprint.sql; "
                         "python3 on bench/footprint_py.py with pymalloc and with PYTHONMALLOC=malloc; "
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
        out: list[Verdict] = []
        name = "frugal: peak RSS ≤ glibc's on each workload"
        gate = frugal_gate(res, self.name, name, res.cells)
        if gate:
            out.append(gate)
        elif not res.has("glibc"):
            out.append(Verdict(self.name, name, NA, "glibc was not measured"))
        else:
            checks, noise = [], []
            for c in res.cells:
                if res.failed_cells("glibc", [c]):
                    continue
                f, g = res.m(FRUGAL, c, "maxrss"), res.m("glibc", c, "maxrss")
                if within_noise(res, FRUGAL, "glibc", c, "maxrss"):
                    noise.append(c)
                else:
                    checks.append((c, f <= g, f"{f / MiB:.1f} MiB vs glibc {g / MiB:.1f} MiB"))
            v = check_all(self.name, name, checks)
            if noise:
                v.detail += f"; within noise: {', '.join(noise)}"
            out.append(v)

        name = f"frugal: after the idle phase, RSS within {IDLE_SLACK // MiB} MiB of live bytes"
        gate = frugal_gate(res, self.name, name, ["idle"])
        if gate:
            out.append(gate)
        else:
            rss, live = res.m(FRUGAL, "idle", "rss_after_idle"), res.m(FRUGAL, "idle", "live_bytes")
            out.append(check_all(self.name, name, [
                ("idle", rss - live <= IDLE_SLACK, f"RSS {rss / MiB:.1f} MiB, live {live / MiB:.1f} MiB")]))
        return out

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


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (Bufcache(), Fifo(), Bigbuf(), Threads(), Footprint())}
Reduce = Callable[[Cell, Sample], tuple[dict[str, float], dict[str, list]]]
