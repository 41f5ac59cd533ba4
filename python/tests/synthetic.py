"""Synthetic results for the verdict and report tests: every cell of an experiment filled
with metrics from a function, for a chosen list of allocators."""

from __future__ import annotations

from typing import Callable

from frugal.experiments import EXPERIMENTS
from frugal.lab import Context, ExpResult
from frugal.units import MiB

CTX = Context(mode="quick", cores=2, decay_ms=500)
Metrics = dict[str, float]


def make(name: str, allocators: list[str], metrics: Callable[[str, dict, str], Metrics],
         ctx: Context = CTX, variants: tuple[str, ...] = ()) -> ExpResult:
    """`variants` (e.g. frugal+ledger) get metrics on every cell too, outside `allocators`."""
    exp = EXPERIMENTS[name]
    cells = exp.cells(ctx)
    res = ExpResult(name, allocators, [c.key for c in cells], info={c.key: dict(c.info) for c in cells},
                    variants=list(variants))
    for a in allocators + list(variants):
        res.med[a] = {}
        res.errors[a] = {}
        res.series[a] = {}
        for c in cells:
            m = {"wall": 1.0, "maxrss": 10.0 * MiB}
            m.update(metrics(a, c.info, c.key))
            res.med[a][c.key] = m
    return res


def spread(res, alloc: str, cell: str, metric: str, lo: float, hi: float) -> None:
    """Give `alloc`'s repetitions on `cell` the range lo..hi around its median."""
    med = res.m(alloc, cell, metric)
    res.lo.setdefault(alloc, {}).setdefault(cell, {})[metric] = lo
    res.hi.setdefault(alloc, {}).setdefault(cell, {})[metric] = hi
    res.spread.setdefault(alloc, {}).setdefault(cell, {})[metric] = (hi - lo) / med
