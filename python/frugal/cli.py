"""The `frugal` command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .experiments import EXPERIMENTS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frugal", description="frugal's tools: the seed lab and its report (bench), a program's allocation report (run).",
                                     epilog="frugal --help-env [--build DIR] prints the allocator's FRUGAL_* options.")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="run the seed lab (LAB.md) over every allocator found",
                           description="Run the seed lab's experiments under every allocator found, "
                                       "and write results.json, plots, report.html and report.md.")
    bench.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                       help=f"experiments to run (default: all of {', '.join(EXPERIMENTS)})")
    bench.add_argument("--allocators", metavar="LIST",
                       help="comma-separated: glibc, jemalloc, tcmalloc, mimalloc, frugal (which brings frugal+ledger), "
                            "or name=/path/lib.so "
                            "(default: all known ones; missing ones are skipped)")
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="scaled-down sizes, 3 repetitions, under 5 minutes (the default)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the seeds' own sizes, 5 repetitions (hours)")
    size.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="tiny sizes, 1 repetition: seconds, for tests")
    bench.set_defaults(mode="quick")
    bench.add_argument("--out", type=Path, default=Path("out/lab"), help="output directory (default: out/lab)")
    bench.add_argument("--build", type=Path, default=Path(os.environ.get("FRUGAL_BUILD", "build")),
                       help="build directory holding libfrugal.so and bench/ (default: $FRUGAL_BUILD or build)")
    bench.add_argument("--check", action="store_true", help="exit non-zero when a verdict on frugal fails")
    bench.add_argument("--cores", type=int, default=None, help=argparse.SUPPRESS)

    run = sub.add_parser("run", help="run a program on frugal with the ledger on and report its allocations",
                         usage="frugal run [-o DIR] [--interval-ms N] [--leaks] [--build DIR] -- PROGRAM [ARGS...]",
                         description="Run PROGRAM on frugal (LD_PRELOAD) with the ledger on; write DIR/ledger.json, "
                                     "report.html, report.md and plots, print the summary, and exit with the "
                                     "program's exit code.")
    run.add_argument("-o", "--out", type=Path, default=Path("out/run"), help="output directory (default: out/run)")
    run.add_argument("--interval-ms", type=int, default=50, metavar="N",
                     help="timeline sample period in ms (default: 50)")
    run.add_argument("--leaks", action="store_true",
                     help="record a call stack per block and report the blocks live at exit by call site (slower)")
    run.add_argument("--no-plots", action="store_true", help="skip the plots (faster)")
    run.add_argument("--build", type=Path, default=Path(os.environ.get("FRUGAL_BUILD", "build")),
                     help="build directory holding libfrugal.so (default: $FRUGAL_BUILD or build)")
    run.add_argument("program_argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                     help="the program and its arguments, after --")
    return parser


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    from .bench import run_lab, write_json
    from .report import summary_note, summary_table, write_reports

    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        console.print(f"[red]unknown experiment(s): {', '.join(unknown)}[/]; choose from {', '.join(EXPERIMENTS)}")
        return 2
    exps = args.experiments or list(EXPERIMENTS)
    console.print(f"[bold]frugal bench[/] — {args.mode} mode, experiments: {', '.join(exps)}")
    try:
        lab = run_lab(exps, args.mode, args.build, args.out, args.allocators, console, cores=args.cores)
    except (FileNotFoundError, RuntimeError) as e:
        console.print(f"[red]error:[/] {e}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(lab, args.out / "results.json")
    write_reports(lab, args.out)

    head, rows = summary_table(lab)
    table = Table(title=f"Summary — {lab.meta['duration_s']:.0f} s", caption=summary_note(lab),
                  title_justify="left", caption_justify="left")
    for i, h in enumerate(head):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for v in lab.all_verdicts():
        mark = {"pass": "[green]PASS[/]", "fail": "[red]FAIL[/]"}.get(v.status, "[dim]n/a [/]")
        console.print(f"  {mark} {v.experiment}: {v.name} — {v.detail}", highlight=False)
    skipped = [a for a in lab.allocators if not a.available]
    for a in skipped:
        console.print(f"  [yellow]skipped[/] {a.describe()}", highlight=False)
    console.print(f"Report: {args.out / 'report.html'}  ({args.out / 'report.md'}, {args.out / 'results.json'})")
    if args.check and lab.failed():
        console.print("[red]--check: a verdict failed[/]")
        return 1
    return 0


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from .run import run

    command = args.program_argv[1:] if args.program_argv[:1] == ["--"] else args.program_argv
    if not command:
        console.print("[red]error:[/] no program given: frugal run [-o DIR] -- PROGRAM ARGS")
        return 2
    if args.interval_ms < 1:
        console.print("[red]error:[/] --interval-ms must be at least 1")
        return 2
    try:
        result = run(command, args.out, args.build, args.interval_ms, args.leaks, console, plots=not args.no_plots)
    except FileNotFoundError as e:
        console.print(f"[red]error:[/] {e}")
        return 127 if "command not found" in str(e) else 2
    except OSError as e:  # the output directory cannot be made or written
        console.print(f"[red]error:[/] {e}")
        return 2
    return result.exit_code


def help_env(argv: list[str]) -> int:
    """`frugal --help-env [--build DIR]`: the allocator's options table, as libfrugal prints it
    (fg_options_print: name, current value, default, one line of help), on stderr."""
    import ctypes
    import os

    build = Path(os.environ.get("FRUGAL_BUILD", "build"))
    if "--build" in argv and argv.index("--build") + 1 < len(argv):
        build = Path(argv[argv.index("--build") + 1])
    lib = build / "libfrugal.so"
    if not lib.exists():
        print(f"frugal: {lib} not found (build first: make)", file=sys.stderr)
        return 2
    sys.stderr.flush()
    ctypes.CDLL(str(lib.resolve())).fg_options_print()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--help-env" in argv:
        return help_env(argv)
    args = build_parser().parse_args(argv)
    # Piped output (make, CI logs) gets a wide console rather than rich's 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    if args.command == "bench":
        return cmd_bench(args, console)
    if args.command == "run":
        # The program's own output goes to stdout too: the summary goes to stderr, after it.
        return cmd_run(args, Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 150))
    return 2


if __name__ == "__main__":
    sys.exit(main())
