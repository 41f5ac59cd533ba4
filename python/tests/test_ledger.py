"""The ledger's price (issue #4): frugal+ledger comes with frugal, runs frugal's timed cells
interleaved with the others, competes with no one, and its time over frugal's is a verdict
and a column of the summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from frugal.allocators import REPRESENTATIVE_CELLS, Allocator, benched
from frugal.bench import LabRun, judge, runnable, summary_rows, write_json
from frugal.experiments import EXPERIMENTS
from frugal.lab import FAIL, FRUGAL, LEDGER, NA, PASS, Context
from frugal.report import summary_table, write_reports
from frugal.runner import Cell, plan

from synthetic import CTX, make
from test_verdicts import ALLOCS, bigbuf_metrics, bufcache_metrics, shapes_metrics


def lab_allocators(spec: str | None, build: Path) -> list[Allocator]:
    """What `frugal bench --allocators spec` measures, with no system library installed."""
    return benched(spec, build, [])


def built(tmp: Path) -> Path:
    build = tmp / "build"
    build.mkdir()
    (build / "libfrugal.so").write_bytes(b"\x7fELF")
    return build


def test_variant_comes_with_frugal(tmp_path: Path) -> None:
    build = built(tmp_path)
    found = lab_allocators(None, build)
    by = {a.name: a for a in found}
    assert [a.name for a in found][-2:] == [FRUGAL, LEDGER]
    ledger = by[LEDGER]
    assert ledger.available and ledger.variant_of == FRUGAL and by[FRUGAL].variant_of is None
    assert ledger.library == by[FRUGAL].library
    env = ledger.env({"PATH": "/bin"})
    assert env["FRUGAL_STATS_FILE"] == "/dev/null" and env["LD_PRELOAD"].endswith("libfrugal.so")
    assert "FRUGAL_STATS_FILE" not in by[FRUGAL].env({"PATH": "/bin"})
    print("discovered:", [a.describe() for a in found])


def test_variant_name_brings_its_base_once(tmp_path: Path) -> None:
    build = built(tmp_path)
    for spec in (LEDGER, f"glibc,{FRUGAL},{LEDGER}", f"{LEDGER},{FRUGAL}"):
        names = [a.name for a in lab_allocators(spec, build)]
        assert names[-2:] == [FRUGAL, LEDGER] and len(names) == len(set(names)), spec
    mine = tmp_path / "libother.so"
    mine.write_bytes(b"\x7fELF")
    by = {a.name: a for a in lab_allocators(f"frugal={mine}", build)}
    assert by[LEDGER].library == mine.resolve()


def test_no_variant_without_frugal(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert LEDGER not in [a.name for a in lab_allocators(None, empty)]
    assert [a.name for a in lab_allocators("glibc", built(tmp_path))] == ["glibc"]


def test_plan_runs_the_variant_on_its_cells_only() -> None:
    allocs = [Allocator("glibc", None), Allocator(FRUGAL, None), Allocator(LEDGER, None, variant_of=FRUGAL)]
    cells = [Cell("e", "x", "p", (), 2, variants=(LEDGER,)), Cell("e", "y", "p", (), 2, variants=(LEDGER,)),
             Cell("e", "w", "p", (), 2), Cell("e", "z", "p", (), 2, parallel=True)]
    serial, parallel = plan(cells, allocs)
    runs = [(rep, c.key) for rep, c, a in serial if a.name == LEDGER]
    assert runs == [(0, "x"), (0, "y"), (1, "x"), (1, "y")]
    assert {a.name for _, c, a in serial if c.key == "w"} == {"glibc", FRUGAL}
    assert {a.name for _, _, a in parallel} == {"glibc", FRUGAL}
    # Interleaved like any allocator: it does not always run right after frugal.
    order = [[a.name for r, c, a in serial if (r, c.key) == key] for key in [(0, "x"), (0, "y")]]
    assert order[0] != order[1]


@pytest.mark.parametrize("mode", ["smoke", "quick", "full"])
def test_variant_cells_are_timed_cells_of_the_mode(mode: str) -> None:
    ctx = Context(mode=mode, cores=2)
    for exp in EXPERIMENTS.values():
        cells = {c.key: c for c in exp.cells(ctx)}
        picked = exp.variant_cells(ctx)
        timed = [k for k, c in cells.items() if not c.parallel]
        assert picked and set(picked) <= set(timed), (mode, exp.name)
        assert (picked == timed) == (mode == "full" or exp.name == "bufcache"), (mode, exp.name)
        ledger = Allocator(LEDGER, None, variant_of=FRUGAL, runs_on=REPRESENTATIVE_CELLS)
        assert [c.key for c in runnable(exp, list(cells.values()), ctx, [ledger]) if c.variants] == picked
        print(mode, exp.name, len(picked), "of", len(timed))


def lab_of(name: str, metrics, variants: tuple[str, ...] = (LEDGER,)) -> LabRun:
    """A judged one-experiment lab on synthetic results, frugal+ledger measured or not."""
    allocs = [Allocator(a, None) for a in ALLOCS] + [Allocator(v, None, variant_of=FRUGAL) for v in variants]
    exp = EXPERIMENTS[name]
    lab = LabRun(CTX, allocs, [exp])
    lab.results[name] = make(name, ALLOCS, metrics, variants=variants)
    judge(lab, exp, lab.results[name])
    lab.meta = {"mode": "quick", "allocators": [{"name": a.name, "available": True, "reason": ""} for a in allocs]}
    return lab


def walls(times: dict[str, float], base=bufcache_metrics(True)):
    """bufcache's passing metrics, with a wall time per allocator (seconds)."""
    def f(a: str, info: dict, key: str) -> dict:
        return {**base(a, info, key), "wall": times[a]}
    return f


def ledger_verdict_of(lab: LabRun, name: str = "bufcache"):
    vs = [v for v in lab.verdicts[name] if v.name.startswith("ledger on / off")]
    assert len(vs) == 1
    print(f"{vs[0].status} {vs[0].name} — {vs[0].detail}")
    return vs[0]


def test_variant_is_no_competitor() -> None:
    # The ledger variant "wins" everything here; frugal's ratio must still be to glibc/mimalloc.
    def f(a: str, info: dict, key: str) -> dict:
        m = walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 0.8, LEDGER: 0.4})(a, info, key)
        if a == LEDGER and info["policy"].startswith("keep-biggest"):
            m["eff_mean"] = 0.9  # would break "keep-biggest poisons every allocator"
        return m
    lab = lab_of("bufcache", f)
    sc = lab.scores["bufcache"]
    assert set(sc) == set(ALLOCS)
    assert math.isclose(sc[FRUGAL]["time_ratio"], 0.8) and math.isclose(sc["mimalloc"]["time_ratio"], 1.25)
    assert [v.status for v in lab.verdicts["bufcache"][:3]] == [PASS, PASS, PASS]
    assert lab.results["bufcache"].allocators == ALLOCS


def test_ratio_and_verdict() -> None:
    lab = lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 1.0, LEDGER: 1.08}))
    assert math.isclose(lab.ledger["bufcache"]["ratio"], 1.08)
    assert ledger_verdict_of(lab).status == PASS
    lab = lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 0.5, LEDGER: 0.7}))
    assert math.isclose(lab.ledger["bufcache"]["ratio"], 1.4)
    v = ledger_verdict_of(lab)
    assert v.status == FAIL and "1.40×" in v.detail and lab.failed()


def test_bound_is_the_experiments_kinds() -> None:
    # 20 % slower with the ledger: within a microbenchmark's bound, over a program's.
    micro = ledger_verdict_of(lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 1.0, LEDGER: 1.2})))
    assert micro.status == PASS and "≤ 1.30 ×" in micro.name and "1.20×" in micro.detail

    def program(a: str, info: dict, key: str) -> dict:
        return {**shapes_metrics(True)(a, info, key), "wall": 1.2 if a == LEDGER else 1.0}
    lab = lab_of("shapes", program)
    v = ledger_verdict_of(lab, "shapes")
    assert v.status == FAIL and "≤ 1.10 ×" in v.name and "1.20×" in v.detail
    assert lab.ledger["shapes"]["max"] == 1.10


def test_ratio_is_the_geometric_mean_over_cells_both_measured() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        slow = a == LEDGER and info["policy"] == "none"
        return walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 1.0, LEDGER: 3.0 if slow else 1.0})(a, info, key)
    lab = lab_of("bufcache", f)
    assert math.isclose(lab.ledger["bufcache"]["ratio"], 3.0 ** (1 / 5))
    assert "slowest: none 3.00×" in ledger_verdict_of(lab).detail
    res = lab.results["bufcache"]
    del res.med[LEDGER]["none"]  # a subset of cells: the ratio is over those only
    judge(lab, EXPERIMENTS["bufcache"], res)
    assert math.isclose(lab.ledger["bufcache"]["ratio"], 1.0) and len(lab.ledger["bufcache"]["per_cell"]) == 4


def test_only_timed_cells_count() -> None:
    def f(a: str, info: dict, key: str) -> dict:
        m = bigbuf_metrics(True)(a, info, key)
        return {**m, "wall": 9.0 if a == LEDGER and info["variant"] == "return" else 1.0}
    lab = lab_of("bigbuf", f)
    cost = lab.ledger["bigbuf"]
    assert set(cost["per_cell"]) == set(EXPERIMENTS["bigbuf"].scored_cells(lab.results["bigbuf"]))
    assert math.isclose(cost["ratio"], 1.0) and ledger_verdict_of(lab, "bigbuf").status == PASS


def test_verdict_when_a_side_failed() -> None:
    lab = lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 1.0, LEDGER: 1.0}))
    res = lab.results["bufcache"]
    res.errors[LEDGER]["cutoff-200"] = ["signal 6 (SIGABRT): frugal: ledger"]
    judge(lab, EXPERIMENTS["bufcache"], res)
    v = ledger_verdict_of(lab)
    assert v.status == FAIL and "frugal+ledger failed in cutoff-200" in v.detail
    res.med.pop(LEDGER)
    res.errors[LEDGER] = {}
    judge(lab, EXPERIMENTS["bufcache"], res)
    assert ledger_verdict_of(lab).status == NA


def test_summary_report_and_json(tmp_path: Path) -> None:
    lab = lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 0.5, LEDGER: 0.7}))
    head, rows = summary_table(lab)
    assert head == ["experiment"] + ALLOCS + ["ledger", "frugal verdicts"]
    (row,) = rows
    assert [row[0], row[1][:4], row[2][:4], row[3][:4]] == ["bufcache", "4.00", "2.00", "0.50"]
    assert row[4:] == ["1.40", "3/4 pass"]
    write_json(lab, tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())["experiments"]["bufcache"]
    assert math.isclose(data["ledger"]["ratio"], 1.4) and data["summary"]["variants"] == [LEDGER]
    assert LEDGER in data["summary"]["median"] and LEDGER not in data["scores"]
    assert data["verdicts"][-1]["status"] == FAIL
    write_reports(lab, tmp_path)
    for page in ("report.md", "report.html"):
        text = (tmp_path / page).read_text()
        assert "ledger on / off" in text and "Ledger on / off: median wall time" in text, page


def test_no_ledger_column_without_the_variant() -> None:
    lab = lab_of("bufcache", walls({"glibc": 2.0, "mimalloc": 1.0, FRUGAL: 0.5}), variants=())
    head, rows = summary_table(lab)
    assert "ledger" not in head and len(rows[0]) == len(head) == len(ALLOCS) + 2
    assert not lab.ledger and len(lab.verdicts["bufcache"]) == 3
    assert len(summary_rows(lab)[0]) == len(head)
