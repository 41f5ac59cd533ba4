"""Median, spread, geometric mean and the per-metric summary."""

from __future__ import annotations

import math

from frugal import stats


def test_median_and_spread() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([1.0, 2.0, 3.0, 10.0]) == 2.5
    assert math.isnan(stats.median([]))
    assert stats.spread([10.0]) == 0.0
    assert stats.spread([9.0, 10.0, 11.0]) == 0.2
    assert stats.spread([0.0, 0.0]) == 0.0


def test_geomean_ignores_missing() -> None:
    assert math.isclose(stats.geomean([1.0, 4.0]), 2.0)
    assert math.isclose(stats.geomean([2.0, math.nan]), 2.0)
    assert math.isnan(stats.geomean([]))


def test_summarise_numeric_fields() -> None:
    runs = [{"wall": 1.0, "rss": 10, "name": "x", "ok": True}, {"wall": 3.0, "rss": 30}, {"wall": 2.0, "rss": 20}]
    s = stats.summarise(runs)
    assert set(s) == {"wall", "rss"}
    assert s["wall"]["median"] == 2.0 and s["wall"]["n"] == 3
    assert s["rss"]["spread"] == 1.0 and s["rss"]["min"] == 10 and s["rss"]["max"] == 30


def test_decimate_keeps_order_and_peaks() -> None:
    points = [(float(t), float(t % 7)) for t in range(1000)]
    points[503] = (503.0, 99.0)
    out = stats.decimate(points, 100)
    assert len(out) <= 100 and [p[0] for p in out] == sorted(p[0] for p in out)
    assert (503.0, 99.0) in out
    assert stats.decimate(points[:50], 100) == points[:50]
