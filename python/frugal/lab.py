"""The data every experiment works on: the run's context, one experiment's results as
medians per allocator and cell, and verdicts. Kept free of running and plotting so that the
verdict logic can be tested on synthetic results."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from . import stats

FRUGAL = "frugal"
LEDGER = "frugal+ledger"  # frugal with the ledger on (allocators.VARIANTS)
# With the ledger on (no leak stacks) frugal is at most 10 % slower on whole programs and 30 %
# on single-operation microbenchmarks, where counting each call exactly is a large part of the
# work measured. Each experiment says which kind it is (Experiment.kind).
LEDGER_MAX = {"program": 1.10, "micro": 1.30}
# The variants a verdict bounds (time over their base's); the others are only priced.
BOUNDED = {LEDGER}
PASS, FAIL, NA = "pass", "fail", "n/a"


@dataclass
class Context:
    """What a run's cells depend on besides the experiment."""

    mode: str = "quick"  # quick | full | smoke
    cores: int = 2
    decay_ms: int = 1000  # frugal's decay time: bigbuf idles for twice this
    decay_source: str = "default"
    work: dict[str, int] = field(default_factory=dict)  # "experiment/cell" -> calibrated work

    @property
    def reps(self) -> int:
        return {"quick": 3, "full": 5, "smoke": 1}[self.mode]


@dataclass
class Verdict:
    experiment: str
    name: str
    status: str  # pass | fail | n/a
    detail: str = ""

    def to_json(self) -> dict:
        return asdict(self)


Metrics = dict[str, float]


@dataclass
class ExpResult:
    """One experiment's results. `med[alloc][cell][metric]` is the median over repetitions,
    `spread` (range / median), `lo` and `hi` (the repetitions' min and max) the same shape; `series[alloc][cell][name]` holds curves from one representative
    run; `errors[alloc][cell]` lists failed runs. `allocators` keeps table order and holds the
    competitors only: `variants` (frugal+ledger, frugal+secure) have medians and errors too, on
    the cells they ran, but no verdict, score, table or plot compares them with the others."""

    name: str
    allocators: list[str]
    cells: list[str]
    med: dict[str, dict[str, Metrics]] = field(default_factory=dict)
    spread: dict[str, dict[str, Metrics]] = field(default_factory=dict)
    lo: dict[str, dict[str, Metrics]] = field(default_factory=dict)
    hi: dict[str, dict[str, Metrics]] = field(default_factory=dict)
    series: dict[str, dict[str, dict[str, list]]] = field(default_factory=dict)
    errors: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell -> its parameters
    variants: list[str] = field(default_factory=list)

    def m(self, alloc: str, cell: str, metric: str) -> float:
        v = self.med.get(alloc, {}).get(cell, {}).get(metric)
        return math.nan if v is None else float(v)

    def has(self, alloc: str) -> bool:
        return alloc in self.allocators and bool(self.med.get(alloc))

    def failed_cells(self, alloc: str, cells: list[str] | None = None) -> list[str]:
        errs = self.errors.get(alloc, {})
        return [c for c in (cells if cells is not None else self.cells) if errs.get(c)]

    def first_error(self, alloc: str, cell: str) -> str:
        errs = self.errors.get(alloc, {}).get(cell) or [""]
        return errs[0]

    def to_json(self) -> dict:
        return {
            "allocators": self.allocators,
            "variants": self.variants,
            "cells": self.cells,
            "info": self.info,
            "median": self.med,
            "spread": self.spread,
            "min": self.lo,
            "max": self.hi,
            "series": self.series,
            "errors": self.errors,
        }


def frugal_gate(res: ExpResult, exp: str, name: str, cells: list[str]) -> Verdict | None:
    """The verdict to give when frugal cannot be judged: absent (n/a) or failed runs (fail)."""
    if FRUGAL not in res.allocators:
        return Verdict(exp, name, NA, "frugal was not measured")
    bad = res.failed_cells(FRUGAL, cells)
    if bad:
        return Verdict(exp, name, FAIL, f"frugal failed in {bad[0]}: {res.first_error(FRUGAL, bad[0])}")
    if not res.has(FRUGAL):
        return Verdict(exp, name, FAIL, "frugal produced no results")
    return None


def within_noise(res: ExpResult, a: str, b: str, cell: str, metric: str) -> bool:
    """The noise rule of docs/lab.md: whether the medians of `a` and `b` differ by no more than
    the min–max ranges of their repetitions put together, so that comparing them would judge noise. Runs
    that did not vary (one repetition) make no noise: they are compared as they are."""
    def width(alloc: str, median: float) -> float:
        return res.spread.get(alloc, {}).get(cell, {}).get(metric, 0.0) * median

    x, y = res.m(a, cell, metric), res.m(b, cell, metric)
    widths = width(a, x) + width(b, y)
    return widths > 0 and abs(x - y) <= widths


def check_all(exp: str, name: str, checks: list[tuple[str, bool | None, str]]) -> Verdict:
    """A verdict that passes when every (point, ok, text) check passes; the detail names the
    failing points, or summarises the passing ones. A point whose ok is None was within noise
    (docs/lab.md): it is named, not judged."""
    noise = [p for p, ok, _ in checks if ok is None]
    checks = [c for c in checks if c[1] is not None]
    tail = f"; within noise: {', '.join(noise)}" if noise else ""
    if not checks:
        return Verdict(exp, name, NA, "nothing to check" + tail)
    failing = [(p, t) for p, ok, t in checks if not ok]
    if failing:
        shown = "; ".join(f"{p}: {t}" for p, t in failing[:4])
        more = f" (+{len(failing) - 4} more)" if len(failing) > 4 else ""
        return Verdict(exp, name, FAIL, f"{len(failing)}/{len(checks)} fail — {shown}{more}{tail}")
    worst = checks[-1]
    return Verdict(exp, name, PASS, f"{len(checks)}/{len(checks)} pass (e.g. {worst[0]}: {worst[2]}){tail}")


def scores(res: ExpResult, cells: list[str], rss: str = "maxrss") -> dict[str, dict[str, float]]:
    """Per allocator: the geometric means over `cells` of median time and peak RSS, and each
    as a ratio to the best of the other allocators (< 1 means this one wins). The time is a
    cell's `time` where the experiment has one (threads: a run its cap stopped, extrapolated
    to the whole work, as its tables show it), else the wall time: the capped wall time made
    glibc's threads line 2.40 x the best other where its own cells say 7.9. Peak RSS is taken
    over the cells no allocator's run was stopped in, the same cells for all: a stopped run's
    peak is a part run's (glibc's remote shape: 2.6-8 MiB stopped at 0.33 s, 20 MiB whole).
    `rss`: the metric the experiment's peak RSS is (Experiment.rss_metric)."""
    present = [a for a in res.allocators if res.has(a) and not res.failed_cells(a, cells)]
    whole = [c for c in cells if not any(res.m(a, c, "stopped") > 0 for a in present)]

    def time(a: str, c: str) -> float:
        t = res.m(a, c, "time")
        return res.m(a, c, "wall") if math.isnan(t) else t

    raw = {a: {"time": stats.geomean(time(a, c) for c in cells),
               "rss": stats.geomean(res.m(a, c, rss) for c in whole)} for a in present}
    out: dict[str, dict[str, float]] = {}
    for a, v in raw.items():
        others = [w for b, w in raw.items() if b != a]
        out[a] = dict(v)
        for k in ("time", "rss"):
            best = min((o[k] for o in others if not math.isnan(o[k])), default=math.nan)
            out[a][f"{k}_ratio"] = v[k] / best if best and not math.isnan(best) else math.nan
    return out


def variant_cost(res: ExpResult, variant: str, base: str, cells: list[str], bound: float | None = None) -> dict[str, Any]:
    """What a variant's option costs: its median wall time over its base's, per cell of `cells`
    that both measured, and their geometric mean (the summary's time metric, so the two read
    side by side); the cells where the variant failed, which the ratio leaves out. "max" is the
    bound a verdict holds it to (`bound`), None where none does."""
    per_cell = {c: res.m(variant, c, "wall") / res.m(base, c, "wall") for c in cells}
    per_cell = {c: r for c, r in per_cell.items() if not math.isnan(r)}
    return {"variant": variant, "base": base, "metric": "wall", "max": bound,
            "ratio": stats.geomean(per_cell.values()), "per_cell": per_cell,
            "failed": res.failed_cells(variant, cells)}


def cost_detail(cost: dict[str, Any]) -> str:
    """A measured cost in words: the geometric mean, and the cell where the option cost most."""
    per_cell = cost["per_cell"]
    worst = max(per_cell, key=per_cell.__getitem__)
    return (f"{cost['ratio']:.2f}× (geometric mean over {len(per_cell)} cells; "
            f"slowest: {worst} {per_cell[worst]:.2f}×)")


def ledger_verdict(res: ExpResult, cells: list[str], cost: dict[str, Any]) -> Verdict:
    """The bound "ledger on: at most cost["max"] times slower" (LEDGER_MAX of the experiment's
    kind) on one experiment, from `variant_cost`'s result."""
    bound = cost["max"]
    name = f"ledger on / off: frugal+ledger's time ≤ {bound:.2f} × frugal's"
    gate = frugal_gate(res, res.name, name, cells)
    if gate:
        return gate
    bad = cost["failed"]
    if bad:
        return Verdict(res.name, name, FAIL, f"frugal+ledger failed in {bad[0]}: {res.first_error(LEDGER, bad[0])}")
    if not cost["per_cell"]:
        return Verdict(res.name, name, NA, "no cell was measured with the ledger on and off")
    return Verdict(res.name, name, PASS if cost["ratio"] <= bound else FAIL, cost_detail(cost))


def variant_price(cost: dict[str, Any]) -> str:
    """`variant_cost`'s result in words, for a variant that no verdict bounds: what it cost,
    and where it failed (the failed runs themselves are listed with the experiment's)."""
    variant, bad = cost["variant"], cost["failed"]
    failed = ""
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        failed = f"; failed in {', '.join(bad[:3])}{more}"
    if not cost["per_cell"]:
        return f"no cell was measured under both {variant} and {cost['base']}{failed}"
    return cost_detail(cost) + failed
