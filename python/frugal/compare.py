"""`frugal compare -- PROGRAM ARGS`: which allocator suits one program. Runs it under every
allocator found, the repetitions interleaved in rotated order (runner.plan) so that drift on a
shared machine hits all alike, measures each run from outside (runner.measure_output), checks
its stdout against glibc's, and names a winner only where the ranges of the runs do not touch."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import __version__, stats
from .allocators import Allocator, chosen, library_version
from .bench import machine_info
from .run import exit_code_of
from .runner import Cell, Placements, launcher_of, measure_output, plan
from .units import KiB, MiB

GLIBC = "glibc"
SCHEMA_PATH = Path(__file__).with_name("compare.schema.json")
# The figures of a run as results.json names them, with their heading and unit in the tables.
FIGURES: dict[str, str] = {"wall_s": "wall (s)", "user_s": "user (s)", "sys_s": "sys (s)",
                           "peak_rss_kib": "peak RSS (MiB)", "minor_faults": "minor faults",
                           "major_faults": "major faults"}
JUDGED = {"time": "wall_s", "rss": "peak_rss_kib"}  # what a winner is named for
# A winner's worst run must also beat the others' best by this share: peak RSS repeats to
# within 0.1 % run after run, so ranges that do not touch can still be a difference nobody
# would switch allocators for (sort: 204.0 against 204.1 MiB).
MIN_GAP = 0.01


@dataclass
class Outcome:
    """Every run of the program under one allocator."""

    alloc: Allocator
    runs: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, dict[str, float]]:
        return stats.summarise([{k: r[k] for k in FIGURES} for r in self.runs])

    def median(self, figure: str) -> float:
        return self.summary.get(figure, {}).get("median", math.nan)

    def failed(self, reference: int) -> bool:
        """The program failed here where it did not under glibc, or printed something else."""
        return any(r["exit_code"] != reference or r["stdout_matches"] is False for r in self.runs)


@dataclass
class Comparison:
    command: list[str]
    reps: int
    outcomes: list[Outcome]
    skipped: list[Allocator]
    output_varies: bool  # glibc's own runs printed different things: stdout is not compared
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def reference(self) -> Outcome:
        return self.outcomes[0]

    @property
    def exit_code(self) -> int:
        """The program's own exit code under glibc, or 1 where another allocator changed it."""
        code = self.reference.runs[0]["exit_code"]
        return (code or 1) if any(o.failed(code) for o in self.outcomes) else code

    def eligible(self) -> list[Outcome]:
        code = self.reference.runs[0]["exit_code"]
        return [o for o in self.outcomes if o.runs and not o.failed(code)]

    def best(self, figure: str) -> Outcome | None:
        ok = [o for o in self.eligible() if not math.isnan(o.median(figure))]
        return min(ok, key=lambda o: o.median(figure)) if ok else None

    def winner(self, what: str) -> str | None:
        """The allocator whose slowest (biggest) run beats every other's fastest (smallest) by MIN_GAP."""
        figure = JUDGED[what]
        best = self.best(figure)
        if best is None or len(self.eligible()) < 2:
            return None
        top = best.summary[figure]["max"]
        others = [o for o in self.eligible() if o is not best]
        return best.alloc.name if all(top < o.summary[figure]["min"] * (1 - MIN_GAP) for o in others) else None

    def to_json(self) -> dict:
        def clean(v: float) -> float | None:
            return None if math.isnan(v) else v

        return {
            "command": self.command,
            "reps": self.reps,
            "allocators": [{"name": o.alloc.name, "library": str(o.alloc.library) if o.alloc.library else None,
                            "env": o.alloc.extra_env, "runs": o.runs,
                            "median": {k: clean(o.median(k)) for k in FIGURES}} for o in self.outcomes],
            "winner": {what: self.winner(what) for what in JUDGED},
            "output_varies": self.output_varies,
            "skipped": [{"name": a.name, "reason": a.reason} for a in self.skipped],
            "meta": self.meta,
        }


def parse_env(items: list[str], names: list[str]) -> dict[str, dict[str, str]]:
    """--env NAME=K=V, repeated: the extra environment of each allocator by name."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        name, _, kv = item.partition("=")
        key, eq, value = kv.partition("=")
        if not eq or not key:
            raise ValueError(f"--env {item}: expected ALLOCATOR=NAME=VALUE, e.g. frugal=FRUGAL_DECAY_MS=100")
        if name not in names:
            raise ValueError(f"--env {item}: {name} is not one of the allocators compared ({', '.join(names)})")
        out.setdefault(name, {})[key] = value
    return out


def run_record(s: Any, digest: str, reference: str | None) -> dict:
    return {"wall_s": round(s.wall, 6), "user_s": round(s.user, 6), "sys_s": round(s.sys, 6),
            "peak_rss_kib": s.maxrss // KiB, "minor_faults": s.minflt, "major_faults": s.majflt,
            "exit_code": exit_code_of(s.exit_code),
            "stdout_matches": None if reference is None else digest == reference}


def compare(argv: list[str], reps: int, spec: str | None, env: list[str], stdin: Path | None, build: Path,
            console: Console, timeout: float = 3600.0) -> Comparison:
    """Run argv `reps` times under each allocator of `spec` (all found when None)."""
    program = shutil.which(argv[0])
    if program is None:
        raise FileNotFoundError(f"{argv[0]}: command not found")
    if stdin is not None and not stdin.is_file():
        raise FileNotFoundError(f"--stdin {stdin}: no such file")
    allocators = chosen(spec, build)
    extra = parse_env(env, [a.name for a in allocators])
    for a in allocators:
        a.extra_env.update(extra.get(a.name, {}))
    active = [a for a in allocators if a.available]
    launcher = launcher_of(build / "bench")
    if launcher is None:
        console.print(f"[yellow]warning:[/] {build / 'bench' / 'rusage'} not found: peak RSS includes this "
                      "process's own")
    cell = Cell("compare", "program", str(Path(program).absolute()), tuple(argv[1:]), reps,
                variants=tuple(a.name for a in active if a.variant_of))
    jobs, _ = plan([cell], active)
    outcomes = {a.name: Outcome(a) for a in active}
    digests: dict[str, list[str]] = {a.name: [] for a in active}
    samples: list[tuple[str, Any, str]] = []
    started = time.time()
    with Placements() as placements, \
            Progress(TextColumn("[bold]{task.fields[what]:<28}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=console) as progress:
        task = progress.add_task("compare", total=len(jobs), what="starting")
        for rep, _, alloc in jobs:
            progress.update(task, what=f"{alloc.name} #{rep + 1}")
            env = alloc.env(library=placements.library(alloc, rep))  # a copy a repetition, as in the lab
            s = measure_output([cell.program, *cell.args], env, timeout, launcher, stdin)
            digest = hashlib.sha256(s.stdout).hexdigest()
            digests[alloc.name].append(digest)
            samples.append((alloc.name, s, digest))
            if s.error:
                outcomes[alloc.name].errors.append(s.error)
                progress.console.print(f"  [red]✗[/] {alloc.name} #{rep + 1}: {escape(s.error[:300])}", highlight=False)
            progress.advance(task)
    ref = digests[GLIBC]
    output_varies = len(set(ref)) > 1
    for name, s, digest in samples:
        outcomes[name].runs.append(run_record(s, digest, None if output_varies else ref[0]))
    result = Comparison(list(argv), reps, list(outcomes.values()), [a for a in allocators if not a.available],
                        output_varies)
    result.meta = {"started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
                   "duration_s": round(time.time() - started, 1), "machine": machine_info(),
                   "stdin": str(stdin) if stdin else None, "cli_version": __version__,
                   "versions": {a.name: library_version(a) for a in active}}
    return result


# ---- the table the console, report.md and report.html show -----------------------------------


INLINE = "{median} ({min}–{max})"  # a figure in report.md and report.html
STACKED = "{median}\n{min}–{max}"  # on the console, narrower


def figure_text(o: Outcome, figure: str, layout: str = INLINE) -> str:
    """A figure's median and range (min–max) as `layout` places them, in the unit of the
    table's heading; the median alone where every run gave the same."""
    summ = o.summary.get(figure)
    if not summ:
        return "—"
    scale = MiB // KiB if figure == "peak_rss_kib" else 1
    fmt = "{:.3f}" if figure.endswith("_s") else "{:.1f}" if scale > 1 else "{:,.0f}"
    text = {k: fmt.format(summ[k] / scale) for k in ("median", "min", "max")}
    return text["median"] if text["min"] == text["max"] else layout.format(**text)


def ratio(v: float, ref: float) -> str:
    return "—" if math.isnan(v) or math.isnan(ref) or ref == 0 else f"{v / ref:.2f}"


def output_text(c: Comparison, o: Outcome) -> str:
    codes = sorted({r["exit_code"] for r in o.runs})
    verdict = "not compared" if c.output_varies else (
        "same" if all(r["stdout_matches"] for r in o.runs) else "DIFFERS")
    return f"{','.join(map(str, codes))} / {verdict}"


def table(c: Comparison, layout: str = INLINE) -> tuple[list[str], list[list[str]]]:
    """One row per allocator: every figure's median and range (`figure_text`), time and peak
    RSS also as ratios to glibc's and to the best's, and the exit code(s) and whether stdout
    matched glibc's."""
    head = ["allocator"]
    for figure, title in FIGURES.items():
        head.append(title)
        if figure in JUDGED.values():
            head += ["÷ glibc", "÷ best"]
    head.append("exit / stdout")
    rows = []
    for o in c.outcomes:
        row = [o.alloc.name]
        for figure in FIGURES:
            row.append(figure_text(o, figure, layout))
            if figure in JUDGED.values():
                best = c.best(figure)
                row += [ratio(o.median(figure), c.reference.median(figure)),
                        ratio(o.median(figure), best.median(figure) if best else math.nan)]
        rows.append(row + [output_text(c, o)])
    return head, rows


def verdict_lines(c: Comparison) -> list[str]:
    """The winners (or "no difference"), then what went wrong, one line each."""
    lines = []
    for what, figure in JUDGED.items():
        w, best = c.winner(what), c.best(figure)
        label = "time (wall)" if what == "time" else "peak RSS"
        if w:
            lines.append(f"{label}: {w} wins — its worst run beats every other allocator's best by over "
                         f"{MIN_GAP:.0%}")
        elif best is not None:
            lines.append(f"{label}: no difference — the lowest median is {best.alloc.name}'s, but the runs' ranges "
                         f"overlap or lie within {MIN_GAP:.0%} of each other")
    code = c.reference.runs[0]["exit_code"]
    for o in c.outcomes:
        if o.failed(code):
            lines.append(f"{o.alloc.name}: the program failed or printed something else than under glibc "
                         f"(exit / stdout: {output_text(c, o)})" + (f": {o.errors[0][:300]}" if o.errors else ""))
    if c.output_varies:
        lines.append("glibc's own runs printed different output: stdout is not compared")
    lines += [f"skipped {a.name}: {a.reason}" for a in c.skipped]
    return lines


def write_json(c: Comparison, path: Path) -> None:
    path.write_text(json.dumps(c.to_json(), indent=1) + "\n")


def validate(doc: dict) -> list[str]:
    """Problems of a results.json against compare.schema.json; [] when valid (see ledger.validate)."""
    from .ledger import validate_against

    return validate_against(json.loads(SCHEMA_PATH.read_text()), doc)
