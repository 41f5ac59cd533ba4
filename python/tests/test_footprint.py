"""footprint's reduce: one run's final record and outside RSS samples to metrics and a curve;
for redis, the peak is the sampled server's, not wait4's (which is the driver's or the
server's, whichever is larger)."""

from __future__ import annotations

from frugal.experiments import EXPERIMENTS
from frugal.experiments.footprint import SERIES_POINTS
from frugal.runner import Sample
from frugal.units import MiB

from synthetic import CTX


def run(records: list[dict], rss: list[tuple[float, int]], maxrss: int) -> Sample:
    return Sample(wall=2.0, user=1.0, sys=0.5, maxrss=maxrss, minflt=10, majflt=0, exit_code=0,
                  records=records, rss=rss)


def test_reduce_idle_keeps_the_final_record_and_a_decimated_curve() -> None:
    exp = EXPERIMENTS["footprint"]
    idle = next(c for c in exp.cells(CTX) if c.key == "idle")
    rss = [(i * 0.01, (200 if i < 500 else 130) * MiB) for i in range(2000)]
    m, series = exp.reduce(idle, run([{"final": True, "mode": "idle", "live_bytes": MiB, "rss_after_idle": 130 * MiB}],
                                     rss, 201 * MiB))
    assert m["live_bytes"] == MiB and m["rss_after_idle"] == 130 * MiB and "final" not in m and "mode" not in m
    assert m["maxrss"] == 201 * MiB  # wait4's exact peak of the workload itself
    assert len(series["t"]) == len(series["rss"]) <= SERIES_POINTS
    assert max(series["rss"]) == 200 * MiB and series["t"] == sorted(series["t"])


def test_reduce_redis_takes_the_servers_sampled_peak() -> None:
    exp = EXPERIMENTS["footprint"]
    redis = [c for c in exp.cells(CTX) if c.watch]
    for cell in redis:  # none when redis-server is not installed
        m, _ = exp.reduce(cell, run([{"final": True, "rss_after_delete": 100 * MiB}],
                                    [(0.1, 20 * MiB), (0.5, 110 * MiB), (0.9, 100 * MiB)], 150 * MiB))
        assert m["maxrss"] == 110 * MiB and m["rss_after_delete"] == 100 * MiB
