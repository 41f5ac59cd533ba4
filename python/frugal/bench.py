"""`frugal bench`: run the seed lab and write its results. Finds the allocators, checks that
each runs at all, measures every cell (repetitions interleaved), reduces runs to medians,
judges frugal against docs/lab.md, and writes results.json, the plots and the reports."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import stats
from .allocators import EVERY_TIMED_CELL, REPRESENTATIVE_CELLS, Allocator, benched
from .experiments import EXPERIMENTS, Experiment
from .lab import BOUNDED, FRUGAL, FAIL, LEDGER, LEDGER_MAX, Context, ExpResult, Verdict, ledger_verdict, scores, variant_cost
from .runner import Cell, Job, Placements, Sample, launcher_of, measure, measure_cell, plan, probe, run_jobs
from .pages import command_line
from .units import GiB, KiB

TIMEOUTS = {"smoke": 60.0, "quick": 300.0, "full": 6 * 3600.0}
DEFAULT_DECAY_MS = 1000  # used when frugal is absent or does not report its decay time


@dataclass
class LabRun:
    """Everything one `frugal bench` run measured and concluded."""

    ctx: Context
    allocators: list[Allocator]
    experiments: list[Experiment]
    results: dict[str, ExpResult] = field(default_factory=dict)
    raw: dict[str, dict[str, dict[str, list[dict]]]] = field(default_factory=dict)
    verdicts: dict[str, list[Verdict]] = field(default_factory=dict)
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    costs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # experiment -> variant -> variant_cost
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ledger(self) -> dict[str, dict[str, Any]]:
        """frugal+ledger's cost per experiment where it was measured (results.json's "ledger")."""
        return {e: c[LEDGER] for e, c in self.costs.items() if LEDGER in c}

    @property
    def measured(self) -> list[str]:
        return [a.name for a in self.allocators if a.available]

    @property
    def competitors(self) -> list[str]:
        """The measured allocators that the summary and the verdicts compare: not variants."""
        return [a.name for a in self.allocators if a.available and not a.variant_of]

    @property
    def variants(self) -> list[str]:
        return [a.name for a in self.allocators if a.available and a.variant_of]

    def all_verdicts(self) -> list[Verdict]:
        return [v for e in self.experiments for v in self.verdicts.get(e.name, [])]

    def failed(self) -> bool:
        return any(v.status == FAIL for v in self.all_verdicts())

    def to_json(self) -> dict:
        return {
            "meta": self.meta,
            "experiments": {
                e.name: {
                    "title": e.title,
                    "seed": e.seed,
                    "about": e.about,
                    "params": e.params(self.ctx),
                    "summary": self.results[e.name].to_json() if e.name in self.results else None,
                    "scores": self.scores.get(e.name, {}),
                    "ledger": self.ledger.get(e.name),  # frugal+ledger's cost alone; "costs" holds it too
                    "costs": self.costs.get(e.name, {}),
                    "verdicts": [v.to_json() for v in self.verdicts.get(e.name, [])],
                    "raw": self.raw.get(e.name, {}),
                }
                for e in self.experiments
            },
        }


def frugal_decay_ms(allocators: Sequence[Allocator], bench_dir: Path) -> tuple[int, str]:
    """frugal's decay time (bigbuf idles twice as long), asked from frugal itself."""
    for a in allocators:
        if a.name == FRUGAL and a.available:
            s = measure([str(bench_dir / "bigbuf"), "--print-decay"], a.env(), timeout=20,
                        launcher=launcher_of(bench_dir))
            rec = s.records[0] if s.ok and s.records else {}
            if isinstance(rec.get("decay_ms"), int) and rec["decay_ms"] > 0:
                return rec["decay_ms"], "frugal's FRUGAL_DECAY_MS"
    return DEFAULT_DECAY_MS, "default: frugal did not report one"


def representative(samples: list[tuple[Sample, dict, dict]]) -> dict:
    """The curves of the run whose wall time is the median."""
    if not samples:
        return {}
    ordered = sorted(samples, key=lambda t: t[0].wall)
    return ordered[len(ordered) // 2][2]


def collect(lab: LabRun, outcomes: dict[tuple[str, str, str], list[tuple[int, Sample]]],
            cells: dict[str, list[Cell]]) -> None:
    """Reduce every run to metrics, then to medians per allocator and cell; judge."""
    names = lab.measured
    for exp in lab.experiments:
        res = ExpResult(exp.name, lab.competitors, [c.key for c in cells[exp.name]],
                        info={c.key: dict(c.info) for c in cells[exp.name]}, variants=lab.variants)
        raw: dict[str, dict[str, list[dict]]] = {}
        for a in names:
            res.med[a], res.spread[a], res.series[a], res.errors[a] = {}, {}, {}, {}
            res.lo[a], res.hi[a] = {}, {}
            raw[a] = {}
            for cell in cells[exp.name]:
                runs = outcomes.get((exp.name, cell.key, a), [])
                reduced: list[tuple[Sample, dict, dict]] = []
                raw[a][cell.key] = []
                for rep, s in sorted(runs, key=lambda t: t[0]):
                    entry = {"rep": rep, **s.to_json()}
                    if s.ok:
                        try:
                            m, series = exp.reduce(cell, s)
                            reduced.append((s, m, series))
                            entry["metrics"] = m
                        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
                            s.error = f"unreadable output: {e!r}"
                            entry["error"] = s.error
                    if not s.ok:
                        res.errors[a].setdefault(cell.key, []).append(s.error)
                    raw[a][cell.key].append(entry)
                if reduced:
                    summ = stats.summarise([m for _, m, _ in reduced])
                    res.med[a][cell.key] = {k: v["median"] for k, v in summ.items()}
                    res.spread[a][cell.key] = {k: v["spread"] for k, v in summ.items()}
                    res.lo[a][cell.key] = {k: v["min"] for k, v in summ.items()}
                    res.hi[a][cell.key] = {k: v["max"] for k, v in summ.items()}
                    res.series[a][cell.key] = representative(reduced)
            if not res.med[a]:
                del res.med[a]
        lab.results[exp.name] = res
        lab.raw[exp.name] = raw
        judge(lab, exp, res)


def judge(lab: LabRun, exp: Experiment, res: ExpResult) -> None:
    """The experiment's verdicts and scores; what each measured variant costs on the timed
    (scored) cells; and, with the ledger measured, its verdict (the only variant judged)."""
    timed = exp.scored_cells(res)
    lab.verdicts[exp.name] = exp.verdicts(res, lab.ctx)
    lab.scores[exp.name] = scores(res, timed, exp.rss_metric)
    bases = {a.name: a.variant_of for a in lab.allocators if a.variant_of}
    lab.costs[exp.name] = {v: variant_cost(res, v, bases[v], timed, LEDGER_MAX[exp.kind] if v in BOUNDED else None)
                           for v in res.variants}
    if LEDGER in res.variants:
        lab.verdicts[exp.name].append(ledger_verdict(res, timed, lab.costs[exp.name][LEDGER]))


def machine_info() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return {"host": platform.node(), "kernel": platform.release(), "cpu": cpu,
            "cores": len(os.sched_getaffinity(0)), "memory_bytes": mem, "python": platform.python_version()}


def run_lab(
    experiments: Sequence[str],
    mode: str,
    build: Path,
    out: Path,
    alloc_spec: str | None,
    console: Console,
    cores: int | None = None,
) -> LabRun:
    bench_dir = build / "bench"
    manifest = bench_dir / "workloads.txt"  # written by bench/CMakeLists.txt, the one list
    names = manifest.read_text().split() if manifest.is_file() else ["workloads.txt"]
    missing = [p for p in names if not (bench_dir / p).is_file()]
    if missing:
        raise FileNotFoundError(f"workloads not built in {bench_dir}: {', '.join(missing)} (run `make`)")
    started = time.time()
    allocators = benched(alloc_spec, build)
    for a in allocators:
        if a.available:
            problem = probe(a, bench_dir)
            if problem:
                a.available, a.reason = False, f"does not run: {problem[:200]}"
        console.print(("  [green]✓[/] " if a.available else "  [yellow]–[/] ") + escape(a.describe()), highlight=False)
    decay, source = frugal_decay_ms(allocators, bench_dir)
    ctx = Context(mode=mode, cores=cores or len(os.sched_getaffinity(0)), decay_ms=decay, decay_source=source)
    exps = [EXPERIMENTS[e] for e in experiments]
    lab = LabRun(ctx, allocators, exps)
    if not lab.measured:
        raise RuntimeError("no allocator available to measure")
    active = [a for a in allocators if a.available]
    competitors = [a for a in active if not a.variant_of]

    def probe_cell(cell: Cell, names: list[str] | None) -> dict[str, Sample]:
        return {a.name: measure_cell(cell, a, bench_dir) for a in competitors if names is None or a.name in names}

    for e in exps:
        ctx.work.update(e.calibrate(ctx, probe_cell))
    cells = {e.name: e.cells(ctx) for e in exps}
    variants = [a for a in active if a.variant_of]
    all_cells = [c for e in exps for c in runnable(e, cells[e.name], ctx, variants)]
    serial, parallel = plan(all_cells, active)
    outcomes: dict[tuple[str, str, str], list[tuple[int, Sample]]] = {}
    caps = Caps()

    with Progress(TextColumn("[bold]{task.fields[cell]:<44}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                  transient=False) as progress:
        task = progress.add_task("lab", total=len(serial) + len(parallel), cell="starting")

        def start(job: Job) -> None:
            rep, cell, alloc = job
            progress.update(task, cell=f"{cell.experiment} {cell.key} · {alloc.name} #{rep + 1}")

        def done(job: Job, s: Sample) -> None:
            rep, cell, alloc = job
            outcomes.setdefault((cell.experiment, cell.key, alloc.name), []).append((rep, s))
            caps.note(job, s)
            if not s.ok:
                progress.console.print(f"  [red]✗[/] {cell.experiment} {cell.key} under {alloc.name}: {escape(s.error[:300])}",
                                       highlight=False)
            progress.advance(task)

        def skip(job: Job) -> bool:
            if not caps.skip(job):
                return False
            progress.advance(task)
            return True

        with Placements() as placements:
            run_jobs(serial, bench_dir, done, start, skip=skip, placements=placements)
            if parallel:
                progress.update(task, cell=f"return to the OS: {len(parallel)} runs side by side")
                run_jobs(parallel, bench_dir, done, None, workers=parallel_workers(parallel), placements=placements)

    collect(lab, outcomes, cells)
    lab.meta = {
        "mode": mode,
        "started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "machine": machine_info(),
        "build": str(build.resolve()),
        "command": command_line(sys.argv),
        "context": {"mode": ctx.mode, "cores": ctx.cores, "decay_ms": ctx.decay_ms,
                    "decay_source": ctx.decay_source, "repetitions": ctx.reps, "work": ctx.work},
        "allocators": [{"name": a.name, "library": str(a.library) if a.library else None,
                        "available": a.available, "reason": a.reason, "variant_of": a.variant_of,
                        "env": a.extra_env, "runs_on": a.runs_on if a.variant_of else None}
                       for a in allocators],
    }
    return lab


class Caps:
    """Which runs not to repeat. A workload that printed "stopped": true hit its cap (its
    "max_ms"). Where another allocator's run of the cell finished in under half of that (the
    first repetition of every allocator comes before any second), the capped one is not run
    again: it is clearly the slower, and the threads experiment would otherwise spend most of
    its time on glibc. Where none did, the machine was slow, and it is repeated."""

    def __init__(self) -> None:
        self.capped: dict[tuple[str, str, str], float] = {}
        self.fastest_ms: dict[tuple[str, str], float] = {}

    def note(self, job: Job, s: Sample) -> None:
        _, cell, alloc = job
        for r in s.records:
            if r.get("stopped") is True:
                self.capped[(cell.experiment, cell.key, alloc.name)] = float(r["max_ms"])
            elif r.get("stopped") is False:
                ms = self.fastest_ms.get((cell.experiment, cell.key), math.inf)
                self.fastest_ms[(cell.experiment, cell.key)] = min(ms, r["wall_ns"] / 1e6)

    def skip(self, job: Job) -> bool:
        _, cell, alloc = job
        cap = self.capped.get((cell.experiment, cell.key, alloc.name))
        return cap is not None and self.fastest_ms.get((cell.experiment, cell.key), math.inf) < cap / 2


def runnable(exp: Experiment, cells: list[Cell], ctx: Context, variants: Sequence[Allocator]) -> list[Cell]:
    """The experiment's cells with the mode's timeout, each naming the `variants` that run it
    too, by where each runs (its `runs_on`)."""
    on = {REPRESENTATIVE_CELLS: set(exp.variant_cells(ctx)), EVERY_TIMED_CELL: set(exp.timed_cells(ctx))}
    return [replace(c, timeout=TIMEOUTS[ctx.mode], variants=tuple(v.name for v in variants if c.key in on[v.runs_on]))
            for c in cells]


def parallel_workers(jobs: Sequence[Job]) -> int:
    """How many memory-only runs fit side by side: each may hold a few copies of its block."""
    biggest = max(int(j[1].info.get("size", 1 << 27)) for j in jobs)
    try:
        avail = next(int(line.split()[1]) * KiB for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        avail = 4 * GiB
    fits = max(1, int(avail * 0.5) // (3 * biggest))
    return max(1, min(len(jobs), fits, 64))


def ratio_text(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.2f}"


def summary_rows(lab: LabRun) -> list[list[str]]:
    """Per experiment: each competitor's time and peak RSS as a ratio to the best of the others,
    each measured variant's time over its base's (frugal+ledger's, frugal+secure's), and
    frugal's verdicts."""
    rows = []
    for e in lab.experiments:
        sc = lab.scores.get(e.name, {})
        cells = []
        for a in lab.competitors:
            s = sc.get(a)
            cells.append(f"{ratio_text(s['time_ratio'])} / {ratio_text(s['rss_ratio'])}" if s else "failed")
        costs = lab.costs.get(e.name, {})
        cells += [ratio_text(costs.get(v, {}).get("ratio", math.nan)) for v in lab.variants]
        vs = lab.verdicts.get(e.name, [])
        passed = sum(v.status == "pass" for v in vs)
        judged = sum(v.status != "n/a" for v in vs)
        rows.append([e.name] + cells + [f"{passed}/{judged} pass" if judged else "n/a"])
    return rows


def write_json(lab: LabRun, path: Path) -> None:
    def clean(o: Any) -> Any:
        if isinstance(o, float):
            return None if math.isnan(o) or math.isinf(o) else o
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    path.write_text(json.dumps(clean(lab.to_json()), indent=1))
