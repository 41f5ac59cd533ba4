"""Seed 1's experiment: the seed's random process through five cache policies in front of each
allocator, efficiency (requested / handed out) every 100 steps."""

from __future__ import annotations

import math
from typing import Any

from ..lab import FRUGAL, Context, ExpResult, Verdict
from ..runner import Cell, Sample
from ..units import MiB
from .base import Check, Experiment, Table, base_metrics, final_record, fmt

POLICIES = ("none", "keep-biggest-1", "keep-biggest-10", "cutoff-200", "buckets")
BUFCACHE_STEPS = {"quick": 2_000_000, "full": 2_000_000, "smoke": 20_000}
# LAB.md: frugal with `none` keeps mean efficiency >= 96 % and never below 94 % after step 1000.
EFF_MEAN_MIN, EFF_FLOOR, EFF_FLOOR_AFTER = 0.96, 0.94, 1000
# "Poisoned": the cache hands out more than twice what is requested on average (the seed saw
# 1-8 % efficiency; a healthy allocator alone stays near 90 % or above).
POISON_EFF = 0.5
SERIES_EVERY = 10  # keep every 10th sample (every 1000 steps) of a curve in results.json


class Bufcache(Experiment):
    name = "bufcache"
    kind = "micro"
    title = "A cache with a bad policy"
    seed = "1"
    about = ("The seed's random process (glibc rand(), never seeded) through five "
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
        kb = ["keep-biggest-1", "keep-biggest-10"]

        def poisoned() -> list[Check]:
            return [(f"{a} {p}", res.m(a, p, "eff_mean") < POISON_EFF, f"{res.m(a, p, 'eff_mean'):.1%}")
                    for a in res.allocators if res.has(a) for p in kb if not res.failed_cells(a, [p])]

        def efficient() -> list[Check]:
            mean, low = res.m(FRUGAL, "none", "eff_mean"), res.m(FRUGAL, "none", "eff_min_late")
            return [("mean", mean >= EFF_MEAN_MIN, f"{mean:.2%}"), ("minimum", low >= EFF_FLOOR, f"{low:.2%}")]

        def peak() -> list[Check]:
            f, g = res.m(FRUGAL, "none", "maxrss"), res.m("glibc", "none", "maxrss")
            return [("peak RSS", f <= g, f"{f / MiB:.1f} MiB vs glibc {g / MiB:.1f} MiB")]

        return [
            self.judge(res, f"keep-biggest policies poison every allocator (mean efficiency < {POISON_EFF:.0%})",
                       kb, poisoned),
            self.judge(res, f"frugal `none`: mean efficiency ≥ {EFF_MEAN_MIN:.0%}, never < {EFF_FLOOR:.0%} after "
                       f"step {EFF_FLOOR_AFTER}", ["none"], efficient),
            self.judge(res, "frugal `none`: peak RSS ≤ glibc's", ["none"], peak, against="glibc"),
        ]

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
