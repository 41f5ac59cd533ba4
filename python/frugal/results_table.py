"""`frugal table`: the results table of a lab run, in Markdown — workloads down, allocators
across, each cell a time and a peak RSS — with the date, the machine and the command that
measured it. Written between two marker comments of a page (the README's), so the table is
regenerated from results.json and never typed; the lab's plots can be copied beside it."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

from .pages import code_md, table_md
from .units import GiB, MiB

START = "<!-- results-table -->"
END = "<!-- /results-table -->"

# The rows: the four seed experiments, the program shapes and the single operations as one line
# each (the summary's geometric means over their cells), and the footprint experiment's
# workloads one by one (real programs first).
SUMMARY_ROWS = [("bufcache", "seed 1: buffer cache"), ("fifo", "seed 2: FIFO, many sizes"),
                ("bigbuf", "seed 3: big buffers"), ("threads", "seed 4: threads"),
                ("shapes", "program shapes (fill and drain, trees, …)"),
                ("ops", "single operations (malloc/free, calloc, …): one's time")]
# An experiment whose time is not in seconds: the factor to seconds (ops: ns per operation).
TIME_TO_S = {"ops": 1e-9}
FOOTPRINT_ROWS = [("sqlite3", "sqlite3 `:memory:`"), ("python3/pymalloc", "python3, pymalloc"),
                  ("python3/malloc", "python3, `PYTHONMALLOC=malloc`"), ("python3/lists", "python3, lists growing"),
                  ("redis", "redis-server"), ("bigrand", "random big blocks")]


def load(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def cell_text(time_s: float | None, rss: float | None, best_time: bool, best_rss: bool) -> str:
    """'840 ms<br>39.0 MiB' (seconds from 1 s: '4.57 s', nanoseconds below 1 us: '8.8 ns'), the
    best of a row in bold: two lines in the rendered cell, so the times of a row read along one
    line and the peaks along the next."""
    if time_s is None or rss is None or math.isnan(time_s) or math.isnan(rss):
        return "—"
    t = (f"{time_s * 1e9:.3g} ns" if time_s < 1e-6 else f"{time_s * 1000:.3g} ms" if time_s < 1
         else f"{time_s:.2f} s")
    m = f"{rss / MiB:.1f} MiB"
    return f"{'**' + t + '**' if best_time else t}<br>{'**' + m + '**' if best_rss else m}"


def rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The table's heading and rows: one allocator a column (those the run compared, in its
    order), one workload a row (those the run measured)."""
    exps = results["experiments"]
    allocators: list[str] = []
    for e in exps.values():
        for a in (e.get("summary") or {}).get("allocators", []):
            if a not in allocators:
                allocators.append(a)
    pairs: list[tuple[str, dict[str, tuple[float, float]]]] = []
    for name, label in SUMMARY_ROWS:
        sc = exps.get(name, {}).get("scores") or {}
        if sc:
            k = TIME_TO_S.get(name, 1.0)
            pairs.append((label, {a: (sc[a]["time"] * k, sc[a]["rss"]) for a in sc
                                  if sc[a].get("time") is not None and sc[a].get("rss") is not None}))
    fp = (exps.get("footprint") or {}).get("summary") or {}
    med, errors = fp.get("median", {}), fp.get("errors", {})
    for key, label in FOOTPRINT_ROWS:
        got = {a: (med[a][key]["wall"], med[a][key]["maxrss"]) for a in allocators
               if key in med.get(a, {}) and not errors.get(a, {}).get(key)}
        if got:
            pairs.append((label, got))
    out = []
    for label, got in pairs:
        best_t = min((t for t, _ in got.values()), default=None)
        best_m = min((m for _, m in got.values()), default=None)
        out.append([label] + [cell_text(*got[a], got[a][0] == best_t, got[a][1] == best_m) if a in got else "—"
                              for a in allocators])
    return ["workload"] + allocators, out


def command_of(meta: dict[str, Any]) -> str:
    """The command the run was made with, as typed (the program by its name, not its path)."""
    argv = shlex.split(meta.get("command", "frugal bench"))
    if argv:
        argv[0] = Path(argv[0]).name
    return shlex.join(argv)


def caption(results: dict[str, Any]) -> str:
    """When, where and how the table was measured, and what its numbers are."""
    meta = results.get("meta", {})
    mach = meta.get("machine", {})
    ctx = meta.get("context", {})
    date = str(meta.get("started", "?"))[:10]
    memory = f", {mach['memory_bytes'] / GiB:.0f} GiB" if mach.get("memory_bytes") else ""
    where = f"{mach.get('cpu') or 'an unnamed CPU'} ({mach.get('cores', '?')} cores{memory}, Linux {mach.get('kernel', '?')})"
    reps = ctx.get("repetitions")
    # Experiments whose cells run another number of times than the mode's (quick mode: the
    # FIFO once, the shapes 5 times).
    more = [f"{n} for {label.split(': ')[-1].split(' (')[0]}" for name, label in SUMMARY_ROWS
            if (n := results.get("experiments", {}).get(name, {}).get("params", {}).get("repetitions")) not in (None, reps)]
    how = f"{meta.get('mode', '?')} mode" + (f", median of {reps} runs" if reps else "") + "".join(f"; {m}" for m in more)
    return (f"Measured {date} on {where} by {code_md(command_of(meta))} ({how}). Each cell: wall time, then peak "
            "RSS; the best of a row in bold. A seed's row, the shapes' and the single operations' are the geometric mean over "
            "their experiment's cells (a threads run stopped at its time cap counts with its time extrapolated to the whole work; "
            "a threads run's peak RSS is less what the workload itself held between threads; a single operation's time is that "
            "of one).")


def markdown(results: dict[str, Any]) -> str:
    head, body = rows(results)
    return f"{caption(results)}\n\n{table_md(head, body)}\n"


def write_into(page: Path, text: str) -> None:
    """Replace what lies between the page's START and END markers with `text`."""
    old = page.read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(old):
        raise ValueError(f"{page} has no results-table markers: put {START} and {END} where the table goes")
    page.write_text(pattern.sub(lambda _: f"{START}\n{text}{END}", old, count=1))


def copy_plots(results_path: Path, results: dict[str, Any], into: Path) -> list[Path]:
    """The lab's plot of each experiment (EXPERIMENT.png beside results.json) copied into `into`."""
    into.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in results["experiments"]:
        src = Path(results_path).parent / f"{name}.png"
        if src.is_file():
            copied.append(Path(shutil.copyfile(src, into / src.name)))
    return copied
