"""Running the lab's cells. A cell is one workload command line; a sample is one run of it
under one allocator, measured from outside with wait4's rusage (what the process cannot hide:
kernel time, page faults, peak RSS) plus the JSON records the workload printed. Repetitions
are interleaved (repetition, then cell, then allocator, the allocator order rotating) so that
drift on the machine hits every allocator alike."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .allocators import Allocator
from .units import KiB


# In a cell's arguments, stands for the directory of the built workloads (build/bench).
BENCH_DIR = "{bench}"


@dataclass(frozen=True)
class Cell:
    """One command line of one experiment. `program` is a workload of build/bench, or else a
    program on the PATH (an absolute path is taken as it is). `parallel` cells measure memory
    only (not time), so they may run side by side with each other in a phase of their own.
    `variants` names the allocators' variants that run the cell too (frugal+ledger,
    frugal+secure), to price an option in time. With `sample_ms`, the RSS of the workload is
    sampled from outside that often, or, with `watch`, that of the process of that name among
    its descendants (a server the workload started). `env` is added to the allocator's
    environment. With `busy`, that many busy loops run beside each of its runs (one per core:
    the machine oversubscribed, the workload's threads off the CPU at any moment)."""

    experiment: str
    key: str
    program: str
    args: tuple[str, ...]
    reps: int
    parallel: bool = False
    timeout: float = 900.0
    variants: tuple[str, ...] = ()
    sample_ms: int = 0
    watch: str = ""
    busy: int = 0
    env: dict = field(default_factory=dict, hash=False, compare=False)
    info: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass
class Sample:
    """One run of a cell under one allocator."""

    wall: float  # seconds, from fork to reaping
    user: float  # seconds of user CPU
    sys: float  # seconds of kernel CPU
    maxrss: int  # peak resident bytes
    minflt: int
    majflt: int
    exit_code: int
    records: list[dict] = field(default_factory=list)
    error: str = ""
    stdout: bytes = field(default=b"", repr=False)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, bytes)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("records")
        d.pop("stdout")
        d.pop("rss")
        return d


def children(pid: int) -> list[int]:
    """The children of every thread of `pid` (none once it is gone)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    except OSError:
        pass
    return out


def resident_bytes(pid: int) -> int:
    """`pid`'s RSS from /proc/PID/statm; 0 when it is gone or a zombie."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class RssSampler(threading.Thread):
    """Samples one process's RSS from outside every `period_s`, from `t0` on: the workload
    (`root`, or the launcher's child when `root` is the launcher) or, with `watch`, the process
    of that name among the workload and its descendants, found again if it goes away."""

    def __init__(self, root: int, launched: bool, period_s: float, watch: str, t0: float) -> None:
        super().__init__(daemon=True)
        self.root, self.launched, self.period_s, self.watch, self.t0 = root, launched, period_s, watch, t0
        self.samples: list[tuple[float, int]] = []
        self.done = threading.Event()
        self.pid = 0

    def target(self) -> int:
        workload = (children(self.root) or [0])[0] if self.launched else self.root
        if not self.watch or not workload:
            return workload
        todo = [workload]
        while todo:
            pid = todo.pop()
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == self.watch:
                    return pid
            except OSError:
                pass
            todo += children(pid)
        return 0

    def run(self) -> None:
        while not self.done.wait(self.period_s):
            rss = resident_bytes(self.pid) if self.pid else 0
            if not rss:
                self.pid = self.target()
                rss = resident_bytes(self.pid) if self.pid else 0
            if rss:
                self.samples.append((round(time.perf_counter() - self.t0, 4), rss))

    def stop(self) -> list[tuple[float, int]]:
        self.done.set()
        self.join()
        return self.samples


def measure(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600.0,
            launcher: Path | None = None, sample_ms: int = 0, watch: str = "") -> Sample:
    """Run argv to completion and measure it (`measure_output`); its stdout is parsed as one
    JSON object per line, the workloads' records."""
    sample = measure_output(argv, env, timeout, launcher, sample_ms=sample_ms, watch=watch)
    bad_lines = 0
    for line in sample.stdout.decode(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            sample.records.append(json.loads(line))
        except json.JSONDecodeError:
            bad_lines += 1
    if bad_lines and not sample.error:
        sample.error = f"{bad_lines} lines of output were not JSON"
    return sample


def measure_output(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600.0,
                   launcher: Path | None = None, stdin: Path | None = None, sample_ms: int = 0,
                   watch: str = "") -> Sample:
    """Run argv to completion, its stdin read from the file `stdin` (or none), and measure it
    from outside with wait4; its stdout is kept as it came.

    With `launcher` (bench/rusage), the workload is forked by that small program, which
    reports wait4's numbers: a child forked straight from Python would inherit Python's peak
    RSS in ru_maxrss. The environment's LD_PRELOAD then goes to the workload only. Without it,
    this process's own os.wait4 measures. stderr's tail is kept as the error when the process
    fails. With `sample_ms`, an RssSampler follows the workload (or the `watch` process)
    meanwhile."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="frugal-run-") as tmp:
        ru_file = Path(tmp) / "rusage.json"
        cmd = list(argv)
        if launcher is not None:
            preload = env.pop("LD_PRELOAD", "")
            cmd = [str(launcher), "--out", str(ru_file), "--preload", preload, "--", *cmd]
        err = open(Path(tmp) / "stderr", "w+b")
        source = open(stdin, "rb") if stdin is not None else subprocess.DEVNULL
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(cmd, stdin=source, stdout=subprocess.PIPE, stderr=err, env=env,
                                    start_new_session=True)
        finally:
            if stdin is not None:
                source.close()
        sampler = RssSampler(proc.pid, launcher is not None, sample_ms / 1000, watch, start) if sample_ms else None
        if sampler:
            sampler.start()
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read()
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
        rss = sampler.stop() if sampler else []
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        proc.stdout.close()
        err.seek(0)
        err_text = err.read().decode(errors="replace")[-2000:]
        err.close()
        measured = {"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "maxrss": ru.ru_maxrss * KiB,
                    "minflt": ru.ru_minflt, "majflt": ru.ru_majflt, "exit_code": proc.returncode}
        launcher_error = ""
        if launcher is not None and not timed_out.is_set():
            try:
                inner = json.loads(ru_file.read_text())
                code = -inner["signal"] if inner.get("signal") else inner["exit_code"]
                measured.update({k: inner[k] for k in ("wall", "user", "sys", "maxrss", "minflt", "majflt")})
                measured["exit_code"] = code
            except (OSError, ValueError, KeyError) as e:
                launcher_error = f"launcher failed ({e.__class__.__name__}): {err_text.strip()[-300:]}"
    code = int(measured["exit_code"])
    error = ""
    if timed_out.is_set():
        error = f"timed out after {timeout:.0f} s"
    elif launcher_error:
        error = launcher_error
    elif code != 0:
        what = f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit code {code}"
        error = f"{what}: {err_text.strip()[-500:]}" if err_text.strip() else what
    return Sample(
        wall=float(measured["wall"]),
        user=float(measured["user"]),
        sys=float(measured["sys"]),
        maxrss=int(measured["maxrss"]),
        minflt=int(measured["minflt"]),
        majflt=int(measured["majflt"]),
        exit_code=code,
        error=error,
        stdout=out,
        rss=rss,
    )


def launcher_of(bench_dir: Path) -> Path | None:
    p = bench_dir / "rusage"
    return p if p.is_file() else None


def cell_argv(cell: Cell, bench_dir: Path) -> list[str]:
    built = bench_dir / cell.program
    program = str(built) if built.is_file() else shutil.which(cell.program) or cell.program
    return [program, *(a.replace(BENCH_DIR, str(bench_dir)) for a in cell.args)]


def probe(alloc: Allocator, bench_dir: Path) -> str:
    """Check that a workload runs under the allocator at all; returns the problem or ''."""
    s = measure([str(bench_dir / "bufcache"), "--steps", "2000"], alloc.env(), timeout=20,
                launcher=launcher_of(bench_dir))
    if not s.ok:
        return s.error
    if not s.records or not s.records[-1].get("final"):
        return "the probe workload printed no result"
    return ""


# One unit of work: (repetition, cell, allocator).
Job = tuple[int, Cell, Allocator]
Reducer = Callable[[Cell, Sample], dict]


def plan(cells: Sequence[Cell], allocators: Sequence[Allocator]) -> tuple[list[Job], list[Job]]:
    """The interleaved order of the serial jobs, and the jobs of the parallel phase. A variant
    runs only the cells that name it, interleaved with the rest like any allocator."""
    serial: list[Job] = []
    parallel: list[Job] = []
    max_reps = max((c.reps for c in cells), default=0)
    for rep in range(max_reps):
        for i, cell in enumerate(cells):
            if rep >= cell.reps:
                continue
            k = (rep + i) % len(allocators) if allocators else 0
            for alloc in list(allocators[k:]) + list(allocators[:k]):
                if alloc.variant_of and alloc.name not in cell.variants:
                    continue
                (parallel if cell.parallel else serial).append((rep, cell, alloc))
    return serial, parallel


@contextlib.contextmanager
def busy_loops(n: int) -> Iterator[list[subprocess.Popen]]:
    """`n` processes that spin on the CPU until the block ends: a shell's empty loop, so that
    they hold no memory the machine could miss and start in a millisecond."""
    procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"], stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


class Placements:
    """A copy of each allocator's library for each repetition, in a directory of its own. A
    library file's pages stay where the page cache put them for as long as the file is
    cached, and where they landed moved whole runs: one copy of frugal's library ran the
    trees shape in 667-671 ms in two sets of interleaved runs where byte-identical copies took
    566-590, and in 606 once the page cache was dropped. Through one file for the whole lab,
    such luck is the run's, and its verdicts with it; a copy per repetition makes it a
    repetition's, which the median of the repetitions absorbs."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._copies: dict[tuple[str, int], Path] = {}
        self._lock = threading.Lock()

    def library(self, alloc: Allocator, rep: int) -> Path | None:
        """`alloc`'s library as repetition `rep` loads it (None: glibc, no preload)."""
        if alloc.library is None:
            return None
        key = (str(alloc.library), rep)
        with self._lock:
            if key not in self._copies:
                if self._dir is None:
                    self._dir = Path(tempfile.mkdtemp(prefix="frugal-libs-"))
                dst = self._dir / str(rep) / str(len(self._copies)) / alloc.library.name
                dst.parent.mkdir(parents=True)
                shutil.copyfile(alloc.library, dst)
                self._copies[key] = dst
            return self._copies[key]

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir, self._copies = None, {}

    def __enter__(self) -> Placements:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def measure_cell(cell: Cell, alloc: Allocator, bench_dir: Path, library: Path | None = None) -> Sample:
    """One run of `cell` under `alloc` (its library, or `library`, a copy of it), beside its
    busy loops, if it has some."""
    with busy_loops(cell.busy):
        return measure(cell_argv(cell, bench_dir), {**alloc.env(library=library), **cell.env}, timeout=cell.timeout,
                       launcher=launcher_of(bench_dir), sample_ms=cell.sample_ms, watch=cell.watch)


def run_jobs(
    jobs: Sequence[Job],
    bench_dir: Path,
    on_done: Callable[[Job, Sample], None],
    on_start: Callable[[Job], None] | None = None,
    workers: int = 1,
    skip: Callable[[Job], bool] | None = None,
    placements: Placements | None = None,
) -> None:
    """Run jobs one after the other (workers=1) or side by side; `skip` may pass over a job
    just before it would start, given what ran so far. With `placements`, each repetition
    loads its own copy of each library."""

    def one(job: Job) -> None:
        rep, cell, alloc = job
        if skip and skip(job):
            return
        if on_start:
            on_start(job)
        on_done(job, measure_cell(cell, alloc, bench_dir, placements.library(alloc, rep) if placements else None))

    if workers <= 1:
        for job in jobs:
            one(job)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(one, j) for j in jobs]:
            f.result()
