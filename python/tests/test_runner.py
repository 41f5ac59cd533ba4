"""Measuring from outside: rusage capture (directly and through bench/rusage), failures,
interleaved order, and passing over jobs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from frugal.allocators import Allocator
from frugal.bench import Caps
from frugal.runner import Cell, Placements, Sample, busy_loops, launcher_of, measure, plan, run_jobs

# A child that prints two JSON records, burns CPU, touches ~64 MiB and exits.
CHILD = (
    "import json,sys\n"
    "b = bytearray(64 << 20)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "print(json.dumps({'a': 1})); print(json.dumps({'final': True}))\n"
    "sum(range(2_000_000))\n"
)


def test_measure_captures_rusage_and_records() -> None:
    s = measure([sys.executable, "-c", CHILD], timeout=60)
    assert s.ok, s.error
    assert s.records == [{"a": 1}, {"final": True}]
    assert s.wall > 0 and s.user > 0 and s.sys >= 0
    assert s.maxrss >= 64 << 20
    assert s.minflt >= (64 << 20) // 4096 // 2
    print(f"wall {s.wall:.3f} s, user {s.user:.3f} s, maxrss {s.maxrss >> 20} MiB, {s.minflt} faults")


def test_measure_through_launcher_reports_the_child_peak(build: Path) -> None:
    launcher = launcher_of(build / "bench")
    assert launcher is not None
    small = measure([str(build / "bench" / "bufcache"), "--steps", "1000"], launcher=launcher)
    assert small.ok, small.error
    # Forked from Python, ru_maxrss would include this process's peak; through the launcher it
    # is the small workload's own.
    assert small.maxrss < 32 << 20
    big = measure([sys.executable, "-c", CHILD], launcher=launcher)
    assert big.ok and big.maxrss >= 64 << 20
    print(f"bufcache peak {small.maxrss >> 10} KiB, python child peak {big.maxrss >> 20} MiB")


def test_measure_samples_rss_of_the_workload_or_a_named_descendant(build: Path) -> None:
    hold = "import time\nb = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(0.3)\n"
    launcher = launcher_of(build / "bench")
    t0 = time.perf_counter()
    s = measure([sys.executable, "-c", hold], launcher=launcher, sample_ms=10)
    outside = time.perf_counter() - t0
    assert s.ok, s.error
    times = [t for t, _ in s.rss]
    # Within the run as seen from here: s.wall is the launcher's, from its child's start, which
    # the sampler's clock (started before the launcher) may pass by a few ms.
    assert len(times) >= 10 and times == sorted(times) and times[-1] <= outside
    assert max(b for _, b in s.rss) >= 64 << 20
    # A shell that starts python (not exec'ing it: `; true`): the shell stays small, the sampled
    # process is python, found by its name.
    name = Path(sys.executable).name[:15]  # comm: the name exec'd, 15 characters at most
    s = measure(["/bin/sh", "-c", f"{sys.executable} -c '{hold}'; true"], launcher=launcher, sample_ms=10,
                watch=name)
    assert s.ok, s.error
    assert max(b for _, b in s.rss) >= 64 << 20
    print(f"{len(s.rss)} samples of {name} under /bin/sh, peak {max(b for _, b in s.rss) >> 20} MiB")


def test_measure_reports_failures() -> None:
    s = measure([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])
    assert not s.ok and s.exit_code == 3 and "boom" in s.error
    s = measure([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert not s.ok and "SIGSEGV" in s.error
    s = measure([sys.executable, "-c", "print('not json')"])
    assert not s.ok and "not JSON" in s.error
    s = measure([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert not s.ok and "timed out" in s.error and s.wall < 10


def test_plan_interleaves_and_rotates() -> None:
    allocs = [Allocator(n, None) for n in ("a", "b", "c")]
    cells = [Cell("e", "x", "p", (), 2), Cell("e", "y", "p", (), 1), Cell("e", "z", "p", (), 2, parallel=True)]
    serial, parallel = plan(cells, allocs)
    order = [(rep, c.key, a.name) for rep, c, a in serial]
    # Repetition-major: every cell and allocator once before any second repetition.
    assert [o[0] for o in order] == [0] * 6 + [1] * 3
    # The allocator that goes first changes from cell to cell and from repetition to repetition.
    firsts = [order[0][2], order[3][2], order[6][2]]
    assert len(set(firsts)) > 1
    assert len(parallel) == 6 and all(c.key == "z" for _, c, _ in parallel)


def test_run_jobs_passes_over_what_skip_names(tmp_path: Path) -> None:
    """The lab does not repeat a run its cap stopped: `skip` sees each job just before it starts,
    after the ones before it have finished."""
    cell = Cell("x", "echo", "echo", ('{"stopped": true}',), reps=3)
    alloc = Allocator("glibc", None)
    seen: list[int] = []

    def done(job, s) -> None:
        assert s.ok and s.records == [{"stopped": True}]
        seen.append(job[0])

    run_jobs([(rep, cell, alloc) for rep in range(3)], tmp_path, done, skip=lambda job: bool(seen))
    assert seen == [0]


def test_caps_repeat_a_capped_run_only_when_no_one_was_clearly_faster() -> None:
    cell, glibc, fast = Cell("threads", "c", "threads", (), reps=3), Allocator("glibc", None), Allocator("fast", None)

    def sample(stopped: bool, ms: float) -> Sample:
        rec = {"stopped": stopped, "max_ms": 900, "wall_ns": int(ms * 1e6)}
        return Sample(ms / 1000, 0.0, 0.0, 0, 0, 0, 0, records=[rec])

    caps = Caps()
    caps.note((0, cell, glibc), sample(True, 905))
    assert not caps.skip((1, cell, glibc)), "no one finished: a slow machine, not a slow allocator"
    caps.note((0, cell, fast), sample(False, 600))
    assert not caps.skip((1, cell, glibc)), "600 ms is not under half the cap"
    caps.note((1, cell, fast), sample(False, 350))
    assert caps.skip((1, cell, glibc)) and not caps.skip((1, cell, fast))


def test_busy_loops_spin_while_the_block_runs_and_are_gone_after() -> None:
    with busy_loops(2) as procs:
        time.sleep(0.2)
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
        cpu = [float(Path(f"/proc/{p.pid}/stat").read_text().split()[13]) for p in procs]
        assert all(c > 0 for c in cpu), "they spin (user ticks)"
    assert all(p.poll() is not None for p in procs)


def test_each_repetition_loads_its_own_copy_of_the_library(build: Path, tmp_path: Path) -> None:
    """Placements: a repetition's runs preload a copy of the allocator's library made for that
    repetition (same bytes, another file), glibc none; the copies go when the run is done."""
    lib = build / "libfrugal.so"
    cell = Cell("x", "env", "sh", ("-c", 'printf \'{"lib": "%s"}\\n\' "$LD_PRELOAD"'), reps=2)
    frugal, glibc = Allocator("frugal", lib), Allocator("glibc", None)
    seen: dict[tuple[int, str], str] = {}

    def done(job, s) -> None:
        assert s.ok, s.error
        rep, _, alloc = job
        seen[rep, alloc.name] = s.records[0]["lib"]
        if alloc.library is not None:  # the copy is there while it runs, byte for byte
            assert Path(seen[rep, alloc.name]).read_bytes() == lib.read_bytes()

    with Placements() as placements:
        run_jobs([(rep, cell, a) for rep in range(2) for a in (frugal, glibc)], tmp_path, done, placements=placements)
        copies = [Path(seen[rep, "frugal"]) for rep in range(2)]
        assert all(c.exists() for c in copies)
    assert seen[0, "glibc"] == seen[1, "glibc"] == ""
    assert copies[0] != copies[1] and all(c != lib and c.name == lib.name for c in copies)
    assert not any(c.exists() for c in copies)
