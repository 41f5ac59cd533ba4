"""What every experiment is: the interface the lab drives (cells, reduce, verdicts, tables),
and the small readers and formatters they share."""

from __future__ import annotations

import math
from typing import Any, Callable

from ..lab import FRUGAL, NA, Context, ExpResult, Verdict, check_all, frugal_gate, within_noise
from ..runner import Cell, Sample

# Idle waits: seconds-long smoke runs for the tests, and no cell stalled by a long decay time.
SMOKE_WAIT_MS = 100
MAX_WAIT_MS = 30_000


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


def best_other(res: ExpResult, cell: str, exclude: str = FRUGAL, metric: str = "time") -> str | None:
    """The allocator other than `exclude` with the lowest median `metric` on `cell`, leaving out
    those that failed it; None where no other measured it."""
    values = {a: res.m(a, cell, metric) for a in res.allocators if a != exclude and res.has(a)
              and not res.failed_cells(a, [cell])}
    values = {a: v for a, v in values.items() if not math.isnan(v)}
    return min(values, key=values.__getitem__) if values else None


def over_best_other(res: ExpResult, a: str, cell: str) -> tuple[float, str | None]:
    """`a`'s median time on `cell` over the best other allocator's, and that allocator."""
    other = best_other(res, cell, exclude=a)
    return (res.m(a, cell, "time") / res.m(other, cell, "time"), other) if other else (math.nan, None)


def over_best_other_text(res: ExpResult, a: str, cell: str) -> str:
    """over_best_other in words: "1.05× mimalloc", and whether that is within noise."""
    ratio, other = over_best_other(res, a, cell)
    if other is None:
        return "—"
    noise = " (within noise)" if within_noise(res, a, other, cell, "time") else ""
    return f"{fmt(ratio)}× {other}{noise}"


Table = tuple[str, list[str], list[list[Any]]]
Check = tuple[str, "bool | None", str]  # check_all's (point, passed or None within noise, measured)


class Experiment:
    """The interface every experiment implements; each says what it is in four class
    attributes, the report's heading and paragraph."""

    name: str
    title: str
    seed: str  # the seed article(s) it reproduces
    about: str
    # "micro": a single operation timed in a loop (its ledger bound is lab.LEDGER_MAX["micro"]);
    # "program": programs, or shapes written after them.
    kind: str = "program"
    # The metric its summary's peak RSS is: the run's peak, or (threads) the peak less what the
    # workload itself held at its peak.
    rss_metric: str = "maxrss"

    def cells(self, ctx: Context) -> list[Cell]:
        raise NotImplementedError

    def calibrate(self, ctx: Context, probe: Callable[[Cell, list[str] | None], dict[str, Sample]]) -> dict[str, int]:
        """Work per cell ("experiment/cell" -> count, for ctx.work) found by running cells once
        under the allocators named (`probe`; None: every one) before the lab; none by default:
        the sizes are fixed."""
        return {}

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

    def timed_cells(self, ctx: Context) -> list[str]:
        """The cells that measure time: all but the parallel ones, which measure memory only."""
        return [c.key for c in self.cells(ctx) if not c.parallel]

    def variant_cells(self, ctx: Context) -> list[str]:
        """The timed cells also run under the variants that come with their base (frugal+ledger:
        the ledger's price; a variant named in --allocators runs every timed cell). In full
        mode, all; else `variant_subset`'s: on every timed cell the ledger added ~23 s to quick
        mode (173 s in all with five allocators, 2-core VM, 2026-11-22), the subsets ~5 s."""
        timed = self.timed_cells(ctx)
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

    def judge(self, res: ExpResult, name: str, cells: list[str], checks: Callable[[], list[Check]],
              against: str | None = None) -> Verdict:
        """The verdict `name` on frugal over `cells`: n/a or fail where frugal cannot be judged
        (frugal_gate), n/a where the allocator it is judged `against` ran none of them (`checks`
        skips the cells it failed), else whether every check passes; `checks` runs only once
        the medians are there."""
        gate = frugal_gate(res, self.name, name, cells)
        if gate:
            return gate
        if against and (not res.has(against) or len(res.failed_cells(against, cells)) == len(cells)):
            return Verdict(self.name, name, NA, f"{against} was not measured")
        return check_all(self.name, name, checks())

    def first_per_cell(self, res: ExpResult, bound: float, what: str) -> list[Verdict]:
        """One verdict per cell: frugal's median time at most `bound` times the best other's
        (a difference within noise is named, not judged). `what`: the best other, in words."""
        def check(cell: str) -> list[Check]:
            ratio, other = over_best_other(res, FRUGAL, cell)
            if other is None or math.isnan(ratio):
                return []
            noise = within_noise(res, FRUGAL, other, cell, "time")
            return [(cell, None if noise else ratio <= bound, f"{ratio:.2f}× {other}")]

        return [self.judge(res, f"frugal: {c} in ≤ {bound:.2f} × {what}", [c], lambda c=c: check(c))
                for c in res.cells]
