"""The ops experiment: its workload does every operation it is asked, under glibc and under
frugal, and counts wrong results; its verdicts judge frugal against the fastest other
allocator, one operation at a time."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from frugal.experiments import EXPERIMENTS
from frugal.experiments.ops import OPS
from frugal.lab import FAIL, NA, PASS, Context
from frugal.runner import Sample

from synthetic import CTX, make, spread

SMOKE = Context(mode="smoke", cores=2)
ALLOCS = ["glibc", "mimalloc", "frugal"]


def run(build: Path, *args: str, preload: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, LD_PRELOAD=preload) if preload else dict(os.environ)
    return subprocess.run([str(build / "bench" / "ops"), *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("allocator", ["glibc", "frugal"])
def test_every_op_runs_right(build: Path, allocator: str) -> None:
    lib = str(build / "libfrugal.so") if allocator == "frugal" else ""
    if lib and not Path(lib).is_file():
        pytest.skip("libfrugal.so not built")
    exp = EXPERIMENTS["ops"]
    for cell in exp.cells(SMOKE):
        proc = run(build, *cell.args, preload=lib)
        assert proc.returncode == 0, (cell.key, proc.stderr)
        rec = json.loads(proc.stdout)
        assert rec["op"] == cell.info["op"] and rec["size"] == cell.info["size"]
        assert rec["bad"] == 0 and rec["done"] == 1024 and rec["wall_ns"] > 0
        m, _ = exp.reduce(cell, Sample(1.0, 0.5, 0.1, 1 << 20, 10, 0, 0, records=[rec]))
        assert m["time"] == pytest.approx(rec["wall_ns"] / rec["done"], rel=1e-3)


def test_a_wrong_result_fails_the_run(build: Path, tmp_path: Path) -> None:
    """`bad` counts what an allocator got wrong, and the run says so by its exit status: here
    a calloc whose blocks are not zeroed (an interposed calloc that fills them)."""
    shim = tmp_path / "dirty.c"
    shim.write_text("#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <string.h>\n"
                    "void *calloc(size_t n, size_t s) {\n"
                    "  void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, \"malloc\");\n"
                    "  void *p = m(n * s); if (p) memset(p, 0xa5, n * s); return p; }\n")
    lib = tmp_path / "dirty.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(shim), "-ldl"], check=True)
    proc = run(build, "--op", "calloc", "--size", "64", "--ops", "2048", preload=str(lib))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["bad"] == 2048


def test_bad_arguments_are_refused(build: Path) -> None:
    for args in (["--op", "nothing"], ["--size", "64"], ["--op", "pair", "--size", "8"],
                 ["--op", "aligned", "--size", "64", "--align", "48"], ["--op", "aligned", "--size", "100"]):
        proc = run(build, *args)
        assert proc.returncode == 2 and "usage: ops" in proc.stderr, args


def ops_metrics(good: bool, slow: str = "pair/64 B"):
    """frugal 8 ns where the others take 10 (mimalloc 9), or, when bad, 12 ns on `slow`."""
    def f(a: str, info: dict, key: str) -> dict:
        return {"time": {"frugal": 8.0 if good or key != slow else 12.0, "mimalloc": 9.0}.get(a, 10.0)}
    return f


def test_one_verdict_per_op_pass_and_fail() -> None:
    exp = EXPERIMENTS["ops"]
    n = len(OPS)
    assert [v.status for v in exp.verdicts(make("ops", ALLOCS, ops_metrics(True)), CTX)] == [PASS] * n
    bad = exp.verdicts(make("ops", ALLOCS, ops_metrics(False)), CTX)
    failed = [v for v in bad if v.status == FAIL]
    assert len(failed) == 1 and "pair/64 B" in failed[0].name and "1.33× mimalloc" in failed[0].detail


def test_ops_judged_only_beyond_the_spread() -> None:
    res = make("ops", ALLOCS, ops_metrics(False))
    spread(res, "frugal", "pair/64 B", "time", 7.0, 14.0)
    spread(res, "mimalloc", "pair/64 B", "time", 8.0, 11.0)
    v = next(v for v in EXPERIMENTS["ops"].verdicts(res, CTX) if "pair/64 B" in v.name)
    assert v.status == NA and "within noise: pair/64 B" in v.detail


def test_ops_table_gives_frugal_over_the_fastest_other() -> None:
    (caption, head, rows), = EXPERIMENTS["ops"].tables(make("ops", ALLOCS, ops_metrics(False)), CTX)
    assert head[-1] == "frugal / fastest other" and head[2:-1] == ALLOCS
    by_op = {r[0]: r for r in rows}
    assert by_op["pair/64 B"][-1] == "1.33× mimalloc" and by_op["pair/64 B"][2:5] == ["10.0", "9.0", "12.0"]
    assert len(rows) == len(OPS)
