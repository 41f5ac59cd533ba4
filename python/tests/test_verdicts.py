"""The verdict logic of every experiment on synthetic results: one run that passes every
verdict and one that fails each, plus n/a without frugal and fail when frugal crashed."""

from __future__ import annotations

import math

import pytest

from frugal.experiments import EXPERIMENTS
from frugal.lab import FAIL, NA, PASS, scores
from frugal.units import KiB, MiB

from synthetic import CTX, make

ALLOCS = ["glibc", "mimalloc", "frugal"]


def statuses(name: str, res) -> list[str]:
    vs = EXPERIMENTS[name].verdicts(res, CTX)
    for v in vs:
        print(f"{name}: {v.status} {v.name} — {v.detail}")
    return [v.status for v in vs]


# --- bufcache ---------------------------------------------------------------------------------
def bufcache_metrics(good: bool):
    def f(a: str, info: dict, key: str) -> dict:
        p = info["policy"]
        if p.startswith("keep-biggest"):
            return {"eff_mean": 0.2, "eff_min_late": 0.01}
        if a == "frugal" and p == "none":
            return {"eff_mean": 0.97 if good else 0.90, "eff_min_late": 0.95 if good else 0.80,
                    "maxrss": (9 if good else 20) * MiB}
        return {"eff_mean": 0.9, "eff_min_late": 0.85, "maxrss": 12 * MiB}
    return f


def test_bufcache_pass_and_fail() -> None:
    assert statuses("bufcache", make("bufcache", ALLOCS, bufcache_metrics(True))) == [PASS, PASS, PASS]
    assert statuses("bufcache", make("bufcache", ALLOCS, bufcache_metrics(False))) == [PASS, FAIL, FAIL]


def test_bufcache_poison_fails_when_one_allocator_resists() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        m = bufcache_metrics(True)(a, info, key)
        if a == "mimalloc" and info["policy"] == "keep-biggest-1":
            m["eff_mean"] = 0.8
        return m
    assert statuses("bufcache", make("bufcache", ALLOCS, f))[0] == FAIL


# --- fifo ---------------------------------------------------------------------------------------
def fifo_metrics(good: bool):
    def f(a: str, info: dict, key: str) -> dict:
        m = {"last_over_first": 1.0, "trim_delta": 1.0 * MiB}
        if info["kind"] == "c":
            size = info["size"]
            m["ns_per_byte"] = 10.0 / size + 0.01
            if not good and a == "frugal" and size == 64 * KiB:
                m.update(ns_per_byte=3 * m["ns_per_byte"], last_over_first=1.3)
        if not good and a == "frugal" and key == "stl/list/3":
            m["trim_delta"] = 200.0 * MiB
        return m
    return f


def test_fifo_pass_and_fail() -> None:
    assert statuses("fifo", make("fifo", ALLOCS, fifo_metrics(True))) == [PASS, PASS, PASS]
    assert statuses("fifo", make("fifo", ALLOCS, fifo_metrics(False))) == [FAIL, FAIL, FAIL]


# --- bigbuf -------------------------------------------------------------------------------------
def bigbuf_metrics(good: bool):
    def f(a: str, info: dict, key: str) -> dict:
        v, size = info["variant"], info["size"]
        if v == "return":
            over = 0.5 * size if good or a != "frugal" else 2.0 * size
            return {"rss_start": 2.0 * MiB, "rss_after_wait": 2.0 * MiB + over}
        cost = {"reuse": 100.0, "touched": 110.0 if good or a != "frugal" else 300.0}.get(v, 200.0)
        faults = 0.0 if good or a != "frugal" else 256.0
        return {"us_per_mib": cost, "faults_per_mib_steady": faults}
    return f


def test_bigbuf_pass_and_fail() -> None:
    assert statuses("bigbuf", make("bigbuf", ALLOCS, bigbuf_metrics(True))) == [PASS, PASS, PASS]
    assert statuses("bigbuf", make("bigbuf", ALLOCS, bigbuf_metrics(False))) == [FAIL, FAIL, FAIL]


# --- threads ------------------------------------------------------------------------------------
def threads_metrics(good: bool):
    def f(a: str, info: dict, key: str) -> dict:
        n = info["threads"]
        if a == "frugal" and not good:
            t = 1.0 if n <= CTX.cores else 1.5  # no scaling, and worse when oversubscribed
        else:
            t = 1.0 / min(n, CTX.cores)
        thr = 2e6 if (a == "frugal") == good else 1e6
        return {"time": t, "throughput": thr}
    return f


def test_threads_pass_and_fail() -> None:
    assert statuses("threads", make("threads", ALLOCS, threads_metrics(True))) == [PASS, PASS, PASS]
    assert statuses("threads", make("threads", ALLOCS, threads_metrics(False))) == [FAIL, FAIL, FAIL]


def test_threads_cross_is_na_without_mimalloc() -> None:
    res = make("threads", ["glibc", "frugal"], threads_metrics(True))
    assert statuses("threads", res)[2] == NA


# --- footprint ----------------------------------------------------------------------------------
def footprint_metrics(good: bool):
    def f(a: str, info: dict, key: str) -> dict:
        bad = a == "frugal" and not good
        m = {"maxrss": (900.0 if bad else 370.0) * MiB if key == "bigrand" else (60.0 if bad else 40.0) * MiB}
        if key == "idle":
            m.update(live_bytes=1.0 * MiB, rss_after_idle=(133.0 if bad else 5.0) * MiB)
        return m
    return f


def test_footprint_pass_and_fail() -> None:
    assert statuses("footprint", make("footprint", ALLOCS, footprint_metrics(True))) == [PASS, PASS]
    assert statuses("footprint", make("footprint", ALLOCS, footprint_metrics(False))) == [FAIL, FAIL]


def test_footprint_peak_within_noise_is_not_judged() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        m = footprint_metrics(True)(a, info, key)
        if key == "python3/pymalloc" and a == "frugal":
            m["maxrss"] = 42.0 * MiB  # 2 MiB above glibc's 40
        return m
    res = make("footprint", ALLOCS, f)
    assert statuses("footprint", res)[0] == FAIL  # one repetition each: no spread, judged
    for a in ("frugal", "glibc"):  # repetitions spanning 3 % of the median: 2.4 MiB in all
        res.spread[a] = {"python3/pymalloc": {"maxrss": 0.03}}
    v = EXPERIMENTS["footprint"].verdicts(res, CTX)[0]
    assert v.status == PASS and "within noise: python3/pymalloc" in v.detail, v.detail


def test_footprint_peak_is_na_without_glibc() -> None:
    res = make("footprint", ["mimalloc", "frugal"], footprint_metrics(True))
    assert statuses("footprint", res) == [NA, PASS]


# --- frugal absent or broken ------------------------------------------------------------------
@pytest.mark.parametrize("name,metrics", [("bufcache", bufcache_metrics(True)), ("fifo", fifo_metrics(True)),
                                          ("bigbuf", bigbuf_metrics(True)), ("threads", threads_metrics(True)),
                                          ("footprint", footprint_metrics(True))])
def test_na_without_frugal_and_fail_when_it_crashed(name: str, metrics) -> None:
    res = make(name, ["glibc", "mimalloc"], metrics)
    assert set(statuses(name, res)) == {NA}
    res = make(name, ALLOCS, metrics)
    for cell in res.cells:
        res.errors["frugal"][cell] = ["signal 11 (SIGSEGV)"]
    vs = EXPERIMENTS[name].verdicts(res, CTX)
    judged = [v for v in vs if v.status != NA]
    assert judged and all(v.status == FAIL and "SIGSEGV" in v.detail for v in judged)


def test_scores_are_ratios_to_the_best_other() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        return {"wall": {"glibc": 2.0, "mimalloc": 1.0, "frugal": 0.5}[a],
                "maxrss": {"glibc": 10.0, "mimalloc": 20.0, "frugal": 40.0}[a]}
    res = make("bufcache", ALLOCS, f)
    sc = scores(res, res.cells)
    assert math.isclose(sc["frugal"]["time_ratio"], 0.5) and math.isclose(sc["frugal"]["rss_ratio"], 4.0)
    assert math.isclose(sc["mimalloc"]["time_ratio"], 2.0) and math.isclose(sc["glibc"]["rss_ratio"], 0.5)
