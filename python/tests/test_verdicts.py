"""The verdict logic of every experiment on synthetic results: one run that passes every
verdict and one that fails each, plus n/a without frugal and fail when frugal crashed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from frugal.bench import LabRun, judge
from frugal.experiments import EXPERIMENTS, fifo
from frugal.experiments.threads import CAP_MIN_MS, CAP_TARGETS, LOAD_REPS, LOAD_SHAPES, QUICK_OBJECTS, SHAPES, TARGET_S
from frugal.lab import FAIL, NA, PASS, Context, scores
from frugal.runner import Sample
from frugal.units import KiB, MiB, size_label

from synthetic import CTX, make, spread
from test_ops import ops_metrics

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


def test_fifo_cliff_weighs_neighbours_by_distance() -> None:
    # Time per block growing as size^0.6: ns/byte falls smoothly, no cliff anywhere. 256 B's
    # neighbours are 128 B and 1 KiB; their plain geometric mean puts the smooth curve at
    # 1.15 x already, so 1.35 x that curve (which passes) failed.
    def smooth(bump: float):
        def f(a: str, info: dict, key: str) -> dict:
            m = {"last_over_first": 1.0, "trim_delta": 1.0 * MiB}
            if info["kind"] == "c":
                size = info["size"]
                m["ns_per_byte"] = size ** 0.6 / size * (bump if a == "frugal" and size == 256 else 1.0)
            return m
        return f
    plain = math.sqrt((128 ** -0.4) * (1024 ** -0.4)) / 256 ** -0.4
    assert 1.5 < 1.35 / plain < 1.6  # what the plain mean said
    assert statuses("fifo", make("fifo", ALLOCS, smooth(1.35)))[1] == PASS
    assert statuses("fifo", make("fifo", ALLOCS, smooth(1.6)))[1] == FAIL  # a cliff still fails
    assert fifo.cliff_reference((1, 4.0), (4, 1.0), 2) == pytest.approx(2.0)  # equal spacing: geometric mean


def test_fifo_rounds_time_enough_blocks() -> None:
    for mode, p in fifo.FIFO_MODES.items():
        for _, size in fifo.fifo_sizes():
            r = fifo.fifo_rounds(p, size)
            assert r >= p["rounds"]
            assert r * (p["total"] // size) >= p["timed_blocks"], (mode, size)
            assert r == p["rounds"] or (r - 1) * (p["total"] // size) < p["timed_blocks"]  # no more than needed


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
        n, variant = info["threads"], info["variant"]
        if a == "frugal" and not good:
            ns = 100.0 if n <= CTX.cores else 150.0  # no scaling, and worse when oversubscribed
        else:
            ns = 100.0 / min(n, CTX.cores)
        thr = 2e6 if (a == "frugal") == good else 1e6
        # The shapes: frugal first or last by a clear margin.
        time = 1.0 if variant not in SHAPES else (0.8 if (a == "frugal") == good else 1.0)
        # Issue #30's shapes: frugal's peak RSS twice everyone's when bad, beyond what the
        # workload held between threads (2 MiB).
        rss = 20.0 * MiB if variant in LOAD_SHAPES and a == "frugal" and not good else 10.0 * MiB
        return {"ns_per_object": ns, "time": time, "throughput": thr, "maxrss": rss, "held_peak": 2.0 * MiB,
                "own_rss": rss - 2.0 * MiB}
    return f


def test_threads_pass_and_fail() -> None:
    assert statuses("threads", make("threads", ALLOCS, threads_metrics(True))) == [PASS] * 5
    assert statuses("threads", make("threads", ALLOCS, threads_metrics(False))) == [FAIL] * 5


def test_threads_cross_is_na_without_mimalloc() -> None:
    res = make("threads", ["glibc", "frugal"], threads_metrics(True))
    assert statuses("threads", res)[2] == NA


def test_threads_shapes_judged_only_beyond_the_spread() -> None:
    """frugal 10 % slower than mimalloc on the storm: a fail when the repetitions agree, within
    noise when they spread over more than the gap; the other shapes are still judged."""
    def f(a: str, info: dict, key: str) -> dict:
        m = threads_metrics(True)(a, info, key)
        if info["variant"] == "storm":
            m["time"] = {"frugal": 0.33, "mimalloc": 0.30}.get(a, 0.9)
        return m
    storm = f"storm/{SHAPES['storm']}/2"
    res = make("threads", ALLOCS, f)
    v = EXPERIMENTS["threads"].verdicts(res, CTX)[3]
    assert v.status == FAIL and "storm" in v.detail and "1.10× mimalloc" in v.detail, v.detail
    spread(res, "frugal", storm, "time", 0.30, 0.40)
    spread(res, "mimalloc", storm, "time", 0.25, 0.35)
    v = EXPERIMENTS["threads"].verdicts(res, CTX)[3]
    print(v.detail)
    assert v.status == PASS and f"within noise: storm {size_label(SHAPES['storm'])} N=2" in v.detail


def test_threads_scaling_within_noise_when_the_range_straddles_the_bar() -> None:
    res = make("threads", ALLOCS, threads_metrics(False))  # frugal: speedup 1.00 at N=2, bar 1.80
    for size in (128, 1024, 1 << 20):
        one, two = f"malloc/{size}/1", f"malloc/{size}/2"
        spread(res, "frugal", one, "ns_per_object", 60.0, 190.0)
        spread(res, "frugal", two, "ns_per_object", 99.0, 101.0)
    v = EXPERIMENTS["threads"].verdicts(res, CTX)[0]
    print(v.detail)
    assert "within noise: 128 B N=2, 1 KiB N=2, 1 MiB N=2" in v.detail
    assert v.status == FAIL and "N=8" in v.detail  # 4 x cores is still outside its range


FULL = Context(mode="full", cores=2, decay_ms=500)


def test_threads_full_mode_runs_issue_30s_shapes_ten_times_alone_and_oversubscribed() -> None:
    cells = {c.key: c for c in EXPERIMENTS["threads"].cells(FULL)}
    busy = [c for c in cells.values() if c.busy]
    assert len(busy) == len(LOAD_SHAPES) * 2 and all(c.busy == FULL.cores for c in busy)
    for c in busy:
        twin = cells[c.key.removesuffix("/busy")]  # the same work, without the busy loops
        assert c.reps == twin.reps == LOAD_REPS and c.args == twin.args, c.key
        assert c.info["threads"] in (2, 4 * FULL.cores)
    assert {c.info["variant"] for c in busy} == set(LOAD_SHAPES)
    assert not any(c.busy for c in EXPERIMENTS["threads"].cells(CTX)), "quick mode keeps its budget"
    res = make("threads", ALLOCS, threads_metrics(True), ctx=FULL)
    assert not any(k.endswith("/busy") for k in EXPERIMENTS["threads"].scored_cells(res)), "not in the summary line"
    for cell in ("remote/256/8/busy", "cross/1024/8/busy"):  # slower beside the busy loops: not judged
        res.med["frugal"][cell].update(time=9.0, throughput=1.0)
    assert statuses("threads", res)[2:4] == [PASS, PASS]


def test_threads_shapes_judged_by_their_worst_peak_rss_beyond_what_the_workload_held() -> None:
    """frugal's median like everyone's, but its worst run's own part (peak RSS less held_peak)
    1.5 x glibc's worst: a fail that names the cell; within 1.25 x glibc's worst and under
    mimalloc's, a pass, however high its raw peak went with the workload's own pile."""
    res = make("threads", ALLOCS, threads_metrics(True), ctx=FULL)
    cell = "remote/256/8/busy"
    spread(res, "glibc", cell, "own_rss", 6 * MiB, 20 * MiB)
    spread(res, "mimalloc", cell, "own_rss", 6 * MiB, 40 * MiB)
    spread(res, "frugal", cell, "own_rss", 6 * MiB, 30 * MiB)
    v = EXPERIMENTS["threads"].verdicts(res, FULL)[4]
    print(v.detail)
    assert v.status == FAIL and "remote 256 B N=8 + 2 busy: 30.0 MiB (≤ 25.0, 1.25× glibc's)" in v.detail
    spread(res, "frugal", cell, "own_rss", 6 * MiB, 24 * MiB)
    spread(res, "frugal", cell, "maxrss", 8 * MiB, 90 * MiB)  # the pile mailed meanwhile: not judged
    spread(res, "frugal", cell, "held_peak", 2 * MiB, 70 * MiB)
    assert EXPERIMENTS["threads"].verdicts(res, FULL)[4].status == PASS
    table = EXPERIMENTS["threads"].tables(res, FULL)[-1]
    row = next(r for r in table[2] if r[0] == "remote 256 B N=8 + 2 busy")
    assert row[table[1].index("frugal")] == "90.0 (10.0); own 24.0; held 70.0"


def test_threads_time_is_extrapolated_where_the_cap_stopped_a_run() -> None:
    exp = EXPERIMENTS["threads"]
    cell = next(c for c in exp.cells(CTX) if c.key == "malloc/128/1")
    assert cell.info["objects"] == QUICK_OBJECTS[("malloc", 128)]
    assert cell.args[cell.args.index("--max-ms") + 1] == str(max(CAP_MIN_MS, round(1000 * CAP_TARGETS * TARGET_S["quick"])))
    record = {"wall_ns": 750_000_000, "done": cell.info["objects"] // 4, "stopped": True, "objects": 0}
    m, _ = exp.reduce(cell, Sample(0.8, 0.7, 0.1, 1 << 20, 10, 0, 0, records=[record]))
    assert m["time"] == pytest.approx(3.0) and m["stopped"] == 1.0
    assert m["ns_per_object"] == pytest.approx(750e6 / (cell.info["objects"] // 4))
    # Stopped before any object was done (a thread never ran within the cap): a lower bound,
    # not a division by zero (test_e2e's smoke run failed so on a loaded machine).
    idle = {"wall_ns": 200_000_000, "done": 0, "stopped": True, "objects": 0}
    m, _ = exp.reduce(cell, Sample(0.2, 0.0, 0.0, 1 << 20, 10, 0, 0, records=[idle]))
    assert m["time"] == pytest.approx(0.2 * cell.info["objects"]) and m["stopped"] == 1.0


def test_threads_full_mode_calibrates_every_cell_to_the_target() -> None:
    """A fake machine where allocator "fast" takes 2 ns per object after 50 ms of warm-up and
    "slow" 20 ns: the probe sees mostly warm-up, the rounds that follow find the steady rate."""
    full = Context(mode="full", cores=2)
    calls: list[tuple[str, list | None]] = []

    def probe(cell, names):
        calls.append((cell.key, names))
        args = cell.args
        objects, cap = int(args[args.index("--objects") + 1]), int(args[args.index("--max-ms") + 1]) / 1000
        out = {}
        for name, ns in (("fast", 2e-9), ("slow", 20e-9)):
            if names is None or name in names:
                done = min(objects, max(0, int((cap - 0.05) / ns)))
                secs = 0.05 + done * ns if done < objects else 0.05 + objects * ns
                rec = {"wall_ns": int(secs * 1e9), "done": max(done, 1), "stopped": done < objects}
                out[name] = Sample(secs, secs, 0.0, 1, 0, 0, 0, records=[rec])
        return out

    work = EXPERIMENTS["threads"].calibrate(full, probe)
    cells = EXPERIMENTS["threads"].cells(replace(full, work=work))
    assert len(work) == len([c for c in cells if not c.busy])  # a busy cell does its plain twin's work
    for c in cells:
        took = 0.05 + c.info["objects"] * 2e-9  # what "fast" takes on it
        assert TARGET_S["full"] <= took <= 1.5 * TARGET_S["full"], (c.key, took)
    assert calls[0][1] is None and all(n is not None for _, n in calls[1:3])  # all, then the finalists
    assert EXPERIMENTS["threads"].calibrate(CTX, probe) == {}  # quick mode keeps its measured X


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


# --- shapes -------------------------------------------------------------------------------------
def shapes_metrics(good: bool, slow: str = "trees"):
    """frugal 0.8 s where the others take 1.0 (mimalloc 0.9), or, when bad, 1.1 s on `slow`."""
    def f(a: str, info: dict, key: str) -> dict:
        time = {"frugal": 0.8 if good or key != slow else 1.1, "mimalloc": 0.9}.get(a, 1.0)
        return {"time": time, "rate": info["work"] / time}
    return f


def test_shapes_one_verdict_per_shape_pass_and_fail() -> None:
    n = len(EXPERIMENTS["shapes"].cells(CTX))
    assert n == 6
    assert statuses("shapes", make("shapes", ALLOCS, shapes_metrics(True))) == [PASS] * n
    bad = EXPERIMENTS["shapes"].verdicts(make("shapes", ALLOCS, shapes_metrics(False)), CTX)
    assert [v.status for v in bad] == [PASS] * (n - 1) + [FAIL]
    assert "trees" in bad[-1].name and "1.22× mimalloc" in bad[-1].detail, bad[-1].detail


def test_shapes_are_judged_by_five_runs_in_quick_mode_too() -> None:
    """Issue #28's verdicts are on the median of 5 interleaved runs; smoke runs stay one."""
    assert CTX.mode == "quick" and CTX.reps == 3
    assert {c.reps for c in EXPERIMENTS["shapes"].cells(CTX)} == {5}
    assert {c.reps for c in EXPERIMENTS["shapes"].cells(FULL)} == {5}
    assert {c.reps for c in EXPERIMENTS["shapes"].cells(replace(CTX, mode="smoke"))} == {1}
    assert EXPERIMENTS["shapes"].params(CTX)["repetitions"] == 5


def test_shapes_judged_only_beyond_the_spread() -> None:
    """frugal 1.1 s against mimalloc's 0.9 on the server: a fail while the repetitions agree,
    within noise (so n/a, nothing else to judge) when they spread over more than the gap."""
    res = make("shapes", ALLOCS, shapes_metrics(False, slow="server"))
    v = next(v for v in EXPERIMENTS["shapes"].verdicts(res, CTX) if "server" in v.name)
    assert v.status == FAIL
    spread(res, "frugal", "server", "time", 0.9, 1.3)
    spread(res, "mimalloc", "server", "time", 0.8, 1.0)
    v = next(v for v in EXPERIMENTS["shapes"].verdicts(res, CTX) if "server" in v.name)
    print(v.detail)
    assert v.status == NA and "within noise: server" in v.detail


def test_shapes_tables_give_frugal_over_the_best_other() -> None:
    res = make("shapes", ALLOCS, shapes_metrics(False))
    tables = EXPERIMENTS["shapes"].tables(res, CTX)
    assert len(tables) == 1 + len(res.cells)  # the overview, then one per shape
    caption, head, rows = tables[0]
    assert head[-1] == "frugal / best other"
    assert dict((r[0], r[-1]) for r in rows)["trees"] == "1.22× mimalloc"
    caption, head, rows = next(t for t in tables[1:] if t[0].startswith("working-set"))
    assert "runs 600 ms" in caption
    assert {r[0] for r in rows} == set(ALLOCS) and all(len(r) == len(head) for r in rows)


# --- frugal absent or broken ------------------------------------------------------------------
@pytest.mark.parametrize("name,metrics", [("bufcache", bufcache_metrics(True)), ("fifo", fifo_metrics(True)),
                                          ("bigbuf", bigbuf_metrics(True)), ("threads", threads_metrics(True)),
                                          ("footprint", footprint_metrics(True)), ("shapes", shapes_metrics(True)),
                                          ("ops", ops_metrics(True))])
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


def test_threads_rss_is_less_what_the_workload_held() -> None:
    """frugal ran fastest and its receiver was off the CPU: 30 MiB of the 36 it peaked at were
    mail the workload held, against glibc's 2 of 10. The summary (bench.judge) compares what
    each allocator added (6 against 8 MiB), not the piles."""
    def f(a: str, info: dict, key: str) -> dict:
        peak, held = {"glibc": (10.0, 2.0), "mimalloc": (20.0, 10.0), "frugal": (36.0, 30.0)}[a]
        return {"wall": 1.0, "time": 1.0, "maxrss": peak * MiB, "held_peak": held * MiB,
                "own_rss": (peak - held) * MiB}
    res = make("threads", ALLOCS, f)
    lab = LabRun(CTX, [], [EXPERIMENTS["threads"]])
    judge(lab, EXPERIMENTS["threads"], res)
    sc = lab.scores["threads"]
    assert math.isclose(sc["frugal"]["rss"], 6.0 * MiB) and math.isclose(sc["frugal"]["rss_ratio"], 0.75)
    assert math.isclose(scores(res, res.cells)["frugal"]["rss_ratio"], 3.6)  # the raw peaks
    assert {n for n, e in EXPERIMENTS.items() if e.rss_metric != "maxrss"} == {"threads"}


def test_scores_extrapolate_stopped_runs_and_leave_their_rss_out() -> None:
    """glibc's run of the second cell hit the cap at 1 s, a quarter of the work done: its time
    counts as 4 s (its wall time made it look 4 x faster than it was), and the cell's RSS, a
    part run's, is left out for every allocator."""
    def f(a: str, info: dict, key: str) -> dict:
        stopped = a == "glibc" and info["threads"] == 2
        return {"wall": 1.0, "time": 4.0 if stopped else {"glibc": 2.0, "mimalloc": 1.0, "frugal": 0.5}[a],
                "stopped": 1.0 if stopped else 0.0,
                "maxrss": 1.0 if stopped else {"glibc": 10.0, "mimalloc": 20.0, "frugal": 40.0}[a]}
    res = make("threads", ALLOCS, f)
    two = [c for c in res.cells if res.info[c]["threads"] == 2]
    assert two and len(two) < len(res.cells)
    sc = scores(res, res.cells)
    assert math.isclose(sc["frugal"]["rss_ratio"], 4.0) and math.isclose(sc["glibc"]["rss_ratio"], 0.5)
    assert math.isclose(sc["frugal"]["time_ratio"], 0.5)
    assert sc["glibc"]["time"] > 2.0 and math.isclose(sc["mimalloc"]["time"], 1.0)
