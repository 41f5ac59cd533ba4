"""Summaries of repeated measurements: the median is what the lab reports, the spread (the
range as a fraction of the median) says how much to trust it."""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Mapping, Sequence


def median(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return math.nan
    return float(statistics.median(vals))


def spread(values: Iterable[float]) -> float:
    """(max - min) / median: 0 for identical runs, 0.1 when they span 10 % of the median."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if len(vals) < 2:
        return 0.0
    m = statistics.median(vals)
    if m == 0:
        return 0.0 if max(vals) == min(vals) else math.inf
    return float((max(vals) - min(vals)) / abs(m))


def geomean(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v) and v > 0]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def decimate(points: Sequence[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    """At most `n` of the (x, y) points, in order: the one with the highest y of each run
    of consecutive points, so that a curve's peaks survive."""
    if len(points) <= n:
        return list(points)
    run = math.ceil(len(points) / n)
    return [max(points[i:i + run], key=lambda p: p[1]) for i in range(0, len(points), run)]


def summarise(samples: Sequence[Mapping[str, object]]) -> dict[str, dict[str, float]]:
    """For every numeric field the samples share: median, spread, min, max and count."""
    keys: list[str] = []
    for s in samples:
        for k, v in s.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in keys:
                keys.append(k)
    out: dict[str, dict[str, float]] = {}
    for k in keys:
        vals = [float(s[k]) for s in samples if isinstance(s.get(k), (int, float))]  # type: ignore[arg-type]
        out[k] = {
            "median": median(vals),
            "spread": spread(vals),
            "min": min(vals) if vals else math.nan,
            "max": max(vals) if vals else math.nan,
            "n": len(vals),
        }
    return out


def medians(summary: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {k: v["median"] for k, v in summary.items()}
