"""Running the lab's cells. A cell is one workload command line; a sample is one run of it
under one allocator, measured from outside with wait4's rusage (what the process cannot hide:
kernel time, page faults, peak RSS) plus the JSON records the workload printed. Repetitions
are interleaved (repetition, then cell, then allocator, the allocator order rotating) so that
drift on the machine hits every allocator alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .allocators import Allocator


@dataclass(frozen=True)
class Cell:
    """One command line of one experiment. `parallel` cells measure memory only (not time),
    so they may run side by side with each other in a phase of their own. `variants` cells run
    under the allocators' variants too (frugal+ledger), to price an option in time."""

    experiment: str
    key: str
    program: str
    args: tuple[str, ...]
    reps: int
    parallel: bool = False
    timeout: float = 900.0
    variants: bool = False
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

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("records")
        d.pop("stdout")
        return d


def measure(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600.0,
            launcher: Path | None = None) -> Sample:
    """Run argv to completion and measure it (`measure_output`); its stdout is parsed as one
    JSON object per line, the workloads' records."""
    sample = measure_output(argv, env, timeout, launcher)
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
                   launcher: Path | None = None, stdin: Path | None = None) -> Sample:
    """Run argv to completion, its stdin read from the file `stdin` (or none), and measure it
    from outside with wait4; its stdout is kept as it came.

    With `launcher` (bench/rusage), the workload is forked by that small program, which
    reports wait4's numbers: a child forked straight from Python would inherit Python's peak
    RSS in ru_maxrss. The environment's LD_PRELOAD then goes to the workload only. Without it,
    this process's own os.wait4 measures. stderr's tail is kept as the error when the process
    fails."""
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
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        proc.stdout.close()
        err.seek(0)
        err_text = err.read().decode(errors="replace")[-2000:]
        err.close()
        measured = {"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "maxrss": ru.ru_maxrss * 1024,
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
    )


def launcher_of(bench_dir: Path) -> Path | None:
    p = bench_dir / "rusage"
    return p if p.is_file() else None


def cell_argv(cell: Cell, bench_dir: Path) -> list[str]:
    return [str(bench_dir / cell.program), *cell.args]


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
    """The interleaved order of the serial jobs, and the jobs of the parallel phase. Variants
    run only the cells marked for them, interleaved with the rest like any allocator."""
    serial: list[Job] = []
    parallel: list[Job] = []
    max_reps = max((c.reps for c in cells), default=0)
    for rep in range(max_reps):
        for i, cell in enumerate(cells):
            if rep >= cell.reps:
                continue
            k = (rep + i) % len(allocators) if allocators else 0
            for alloc in list(allocators[k:]) + list(allocators[:k]):
                if alloc.variant_of and not cell.variants:
                    continue
                (parallel if cell.parallel else serial).append((rep, cell, alloc))
    return serial, parallel


def run_jobs(
    jobs: Sequence[Job],
    bench_dir: Path,
    on_done: Callable[[Job, Sample], None],
    on_start: Callable[[Job], None] | None = None,
    workers: int = 1,
) -> None:
    """Run jobs one after the other (workers=1) or side by side."""

    def one(job: Job) -> None:
        rep, cell, alloc = job
        if on_start:
            on_start(job)
        sample = measure(cell_argv(cell, bench_dir), alloc.env(), timeout=cell.timeout,
                         launcher=launcher_of(bench_dir))
        on_done(job, sample)

    if workers <= 1:
        for job in jobs:
            one(job)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(one, j) for j in jobs]:
            f.result()
