"""`frugal run -- PROGRAM ARGS`: run a program on frugal with the ledger on and measure it from
outside, through bench/rusage when built (forked from Python, it would inherit our peak RSS);
write DIR/ledger.json, print the summary. The program keeps its own stdio and exit code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import ledger as L
from .pages import command_line
from .symbols import frame_name, symbolize_frames
from .units import KiB, human

DEFAULT_INTERVAL_MS = 50


@dataclass
class RunResult:
    """What one `frugal run` saw: the command, the outside measures, the ledger (None when the
    program wrote none) and the files written."""

    argv: list[str]
    program: Path
    exit_code: int
    outside: dict
    ledger: dict | None
    out: Path
    problems: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    profile: dict | None = None  # --profile: profile.json, its frames named


def child_env(lib: Path, ledger_file: Path, interval_ms: int, leaks: bool,
              profile_dir: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if profile_dir is not None:
        env["FRUGAL_PROFILE"] = str(profile_dir)
    else:
        env.pop("FRUGAL_PROFILE", None)
    env["FRUGAL_STATS_FILE"] = str(ledger_file)
    env["FRUGAL_STATS_INTERVAL_MS"] = str(interval_ms)
    if leaks:
        env["FRUGAL_LEAKS"] = "1"
    else:
        env.pop("FRUGAL_LEAKS", None)
    # frugal goes first; a preload the user already had stays after it.
    env["LD_PRELOAD"] = " ".join(x for x in (str(lib), env.get("LD_PRELOAD", "")) if x)
    return env


def exit_code_of(status_code: int) -> int:
    """os.waitstatus_to_exitcode's value as a shell would report it: 128 + N for signal N."""
    return 128 - status_code if status_code < 0 else status_code


def execute(argv: list[str], env: dict[str, str], launcher: Path | None) -> dict:
    """Run argv to completion with its own stdio; wait4's numbers from outside."""
    with tempfile.TemporaryDirectory(prefix="frugal-run-") as tmp:
        ru_file = Path(tmp) / "rusage.json"
        cmd = list(argv)
        if launcher is not None:
            env = dict(env)
            cmd = [str(launcher), "--out", str(ru_file), "--preload", env.pop("LD_PRELOAD"), "--", *cmd]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env)
        while True:
            try:
                _, status, ru = os.wait4(proc.pid, 0)
                break
            except KeyboardInterrupt:  # the program got the same ^C; let it decide and exit
                continue
            except ChildProcessError:
                raise
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        measured = {"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "maxrss": ru.ru_maxrss * KiB,
                    "minflt": ru.ru_minflt, "majflt": ru.ru_majflt, "exit_code": exit_code_of(proc.returncode),
                    "signal": -proc.returncode if proc.returncode < 0 else 0, "launcher": False}
        if launcher is not None:
            try:
                inner = json.loads(ru_file.read_text())
                measured.update({k: inner[k] for k in ("wall", "user", "sys", "maxrss", "minflt", "majflt")})
                measured["signal"] = inner.get("signal", 0)
                measured["exit_code"] = 128 + inner["signal"] if inner.get("signal") else inner["exit_code"]
                measured["launcher"] = True
            except (OSError, ValueError, KeyError):
                pass  # the launcher itself failed (e.g. exec): its own exit code stands
    return measured


def run(argv: list[str], out: Path, build: Path, interval_ms: int = DEFAULT_INTERVAL_MS,
        leaks: bool = False, profile: bool = False) -> RunResult:
    """Run argv under frugal with the ledger on; write the ledger (run_report writes the rest).
    profile: the sampled heap profile too (FRUGAL_PROFILE=out): profile.json and folded stacks."""
    lib = (build / "libfrugal.so").resolve()
    if not lib.is_file():
        raise FileNotFoundError(f"{lib} not built: run `make` (or give --build DIR)")
    found = shutil.which(argv[0])
    if found is None:
        raise FileNotFoundError(f"{argv[0]}: command not found")
    program = Path(os.path.abspath(found))  # not resolved: a venv's python is a symlink that must stay one
    out.mkdir(parents=True, exist_ok=True)
    ledger_file = (out / "ledger.json").resolve()
    ledger_file.unlink(missing_ok=True)
    launcher = build / "bench" / "rusage"
    profile_file = (out / "profile.json").resolve()
    profile_file.unlink(missing_ok=True)
    env = child_env(lib, ledger_file, interval_ms, leaks, profile_file.parent if profile else None)
    outside = execute([str(program), *argv[1:]], env, launcher.resolve() if launcher.is_file() else None)

    result = RunResult(argv=list(argv), program=program, exit_code=int(outside["exit_code"]), outside=outside,
                       ledger=None, out=out)
    if not ledger_file.is_file():
        result.problems.append("the program wrote no ledger: it ended without running exit handlers "
                               "(_exit, a signal, exec) or did not load frugal (a static program?)")
    else:
        try:
            doc = L.load(ledger_file)
        except ValueError as e:
            doc = None
            result.problems.append(f"ledger.json is not valid JSON ({e}): the program may have been killed while "
                                   "writing it")
        if doc is not None:
            if leaks:
                frames = [f for s in L.leak_sites(doc) for f in s["frames"]]
                symbolize_frames(frames, program=program, cwd=Path.cwd())
            doc["run"] = {"argv": list(argv), "program": str(program), "exit_code": result.exit_code,
                          "outside": outside, "library": str(lib)}
            result.problems += [f"schema: {p}" for p in L.validate(doc)[:10]]
            ledger_file.write_text(json.dumps(doc, indent=1) + "\n")
            result.ledger = doc
    result.files = [ledger_file] + (read_profile(result, profile_file) if profile else [])
    return result


def read_profile(result: RunResult, path: Path) -> list[Path]:
    """The library's profile.json, its frames named by addr2line; the folded files and flame
    graphs written again from it."""
    from . import profile as P

    if not path.is_file():
        result.problems.append("the program wrote no profile: it ended without running exit handlers, or "
                               "FRUGAL_SAMPLE_BYTES=0 turned the sampler off")
        return []
    try:
        doc = P.load(path)
    except ValueError as e:
        result.problems.append(f"profile.json: {e}")
        return []
    P.symbolize(doc, result.program, Path.cwd())
    path.write_text(json.dumps(doc, indent=1) + "\n")
    result.profile = doc
    return [path, *P.write(doc, result.out)]


def print_summary(r: RunResult, console: Console) -> None:
    o = r.outside
    sig = f" (signal {o['signal']}: {signal.Signals(o['signal']).name})" if o.get("signal") else ""
    # Everything the program or the user wrote goes through escape: rich would take brackets
    # (d[str(i)]) for markup and drop them.
    console.print(f"[bold]frugal run[/] {escape(command_line(r.argv))}  →  exit code {r.exit_code}{sig}")
    console.print(f"  outside: wall {o['wall']:.3f} s, user {o['user']:.3f} s, sys {o['sys']:.3f} s, "
                  f"peak RSS {human(o['maxrss'])}, {o['minflt']} minor faults, {o['majflt']} major")
    for p in r.problems:
        console.print(f"  [yellow]warning:[/] {escape(p)}")
    d = r.ledger
    if d is None:
        return
    t, live = d["totals"], d["live"]
    console.print(f"  ledger of pid {d['pid']}: {t['allocations']:,} allocations, {t['frees']:,} frees; requested "
                  f"{human(t['bytes_requested'])}, handed out {human(t['bytes_handed_out'])}: "
                  f"[bold]{100 * t['efficiency']:.1f} % used[/] (seed 1's efficiency)")
    console.print(f"  live at exit: {live['blocks']:,} blocks, {human(live['bytes_requested'])} requested in "
                  f"{human(live['bytes_handed_out'])}; peak live {human(live['peak_bytes_handed_out'])} "
                  f"handed out")

    table = Table(title="Top classes by bytes handed out", title_justify="left", show_edge=False)
    for col in ("class", "allocations", "frees", "live", "peak live", "requested", "handed out", "% used"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for c in L.top_classes(d, 8):
        table.add_row(L.class_label(c), f"{c['allocations']:,}", f"{c['frees']:,}", f"{c['live_blocks']:,}",
                      f"{c['peak_live_blocks']:,}", human(c["bytes_requested"]), human(c["bytes_handed_out"]),
                      L.pct(c["bytes_requested"], c["bytes_handed_out"]))
    console.print(table)

    h = L.hidden_costs(d, o)
    console.print(f"  [bold]hidden costs[/]: {h['fresh_pages']:,} fresh pages ({human(h['fresh_small_bytes'])} small + "
                  f"{human(h['fresh_large_bytes'])} large; each a fault plus kernel zeroing) against "
                  f"{h['minor_faults']:,} minor faults of the process; sys {h['sys_s']:.3f} s; "
                  f"mmap {h['os_calls']['mmap_calls']}, munmap {h['os_calls']['munmap_calls']}, "
                  f"madvise {h['os_calls']['madvise_calls']}")
    rates = "; ".join(f"{x.name} {'—' if x.rate is None else f'{100 * x.rate:.1f} %'} "
                      f"({x.hits:,} hits, {x.misses:,} misses)" for x in L.cache_rates(d))
    console.print(f"  [bold]cache hit rates[/]: {rates}")
    console.print("  [bold]advice[/] (seed 1):")
    for line in L.advice(d):
        console.print(f"    • {escape(line)}")
    sites = L.leak_sites(d)
    if d.get("leaks") is not None:
        lk = d["leaks"]
        console.print(f"  [bold]leaks[/]: {lk['blocks']:,} blocks, {human(lk['bytes'])} live at exit in "
                      f"{len(sites)} call sites (top {min(len(sites), 5)}):")
        for i, s in enumerate(sites[:5], 1):
            frames = " ← ".join(frame_name(f) for f in s["frames"][:3])
            console.print(f"    #{i} {human(s['bytes'])} in {s['count']:,} blocks: [bold]{escape(L.site_function(s))}[/]  "
                          f"[dim]{escape(frames)}[/]")
    if r.profile is not None:
        from . import profile as P

        p = r.profile
        console.print(f"  [bold]heap profile[/] ({p['samples']:,} samples, one per {human(p['sample_bytes'])}): "
                      f"~{human(p['totals']['alloc_bytes'])} allocated, ~{human(p['totals']['peak_live_bytes'])} "
                      f"live at the peak, ~{human(p['totals']['live_bytes'])} at exit; top sites by bytes allocated:")
        for i, s in enumerate(P.top_sites(p, "alloc_bytes", 5), 1):
            console.print(f"    #{i} ~{human(round(s.alloc_bytes))} in ~{round(s.alloc_count):,} blocks, "
                          f"~{human(round(s.live_bytes))} live at exit: [bold]{escape(s.where)}[/]")
        console.print(escape(f"  Flame graphs: {r.out / 'flame-alloc.svg'}, {r.out / 'flame-live.svg'}"))
    console.print(escape(f"  Report: {r.out / 'report.html'}  ({r.out / 'report.md'}, {r.out / 'ledger.json'})"))
