"""Seed 3's experiment: K x (malloc, use, free) of big blocks, untouched, touched, filled and
reused, costs per MiB; then how much each allocator gives back while the process idles."""

from __future__ import annotations

import math
from typing import Any

from ..lab import FRUGAL, Context, ExpResult, Verdict
from ..runner import Cell, Sample
from ..units import MiB, size_label
from .base import Check, Experiment, Table, base_metrics, final_record, fmt, idle_wait_ms

BIG_SIZES = (1 * MiB, 8 * MiB, 32 * MiB, 128 * MiB)
BIG_VARIANTS = ("untouched", "touched", "filled", "reuse")
BIG_ITERS = {"quick": 10, "full": 100, "smoke": 2}
TOUCHED_OVER_REUSE = 1.25  # LAB.md: touched costs <= 1.25 x reuse per MiB
# LAB.md's "~0 minor faults per iteration after the first", read as fewer than 1 fault per MiB
# per iteration: a block of fresh pages costs 256 per MiB (4 KiB pages).
FAULTS_PER_MIB_MAX = 1.0


class Bigbuf(Experiment):
    name = "bigbuf"
    kind = "micro"
    title = "The hidden costs of big blocks"
    seed = "3"
    about = ("K × (malloc(B), use, free) for B = 1, 8, 32, 128 MiB: untouched, touched "
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
        touched, reuse = self.cells_of(res, "touched"), self.cells_of(res, "reuse")
        ret = self.cells_of(res, "return")

        def cheap() -> list[Check]:
            checks: list[Check] = []
            for t, r in zip(touched, reuse):
                ratio = res.m(FRUGAL, t, "us_per_mib") / res.m(FRUGAL, r, "us_per_mib")
                checks.append((size_label(res.info[t]["size"]), ratio <= TOUCHED_OVER_REUSE, f"{ratio:.2f}×"))
            return checks

        def no_faults() -> list[Check]:
            return [(size_label(res.info[t]["size"]), res.m(FRUGAL, t, "faults_per_mib_steady") < FAULTS_PER_MIB_MAX,
                     f"{res.m(FRUGAL, t, 'faults_per_mib_steady'):.2f}/MiB") for t in touched]

        def returned() -> list[Check]:
            checks: list[Check] = []
            for c in ret:
                over = res.m(FRUGAL, c, "rss_after_wait") - res.m(FRUGAL, c, "rss_start")
                checks.append((size_label(res.info[c]["size"]), over <= res.info[c]["size"],
                               f"start {over / MiB:+.1f} MiB"))
            return checks

        return [
            self.judge(res, f"frugal: `touched` costs ≤ {TOUCHED_OVER_REUSE} × `reuse` per MiB (iterations after "
                       "the first)", touched + reuse, cheap),
            self.judge(res, f"frugal: ~0 minor faults per iteration after the first (< {FAULTS_PER_MIB_MAX:g} per "
                       "MiB)", touched, no_faults),
            self.judge(res, "frugal: RSS after the idle wait ≤ start + one block", ret, returned),
        ]

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
