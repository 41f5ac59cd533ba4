"""The `frugal` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import __version__, live, results_table
from .allocators import LAB_VARIANTS, VARIANTS, default_build, frugal_version
from .experiments import EXPERIMENTS
from .pages import command_line


BUILD_HELP = ("directory holding libfrugal.so (default: $FRUGAL_BUILD, the installed one, ./build, "
              "or the checkout's build)")
BENCH_BUILD_HELP = BUILD_HELP.replace("libfrugal.so", "libfrugal.so and the lab's workloads (bench/)")
ALLOCATORS_HELP = ("comma-separated: glibc, jemalloc, tcmalloc, mimalloc, frugal, or name=/path/lib.so "
                   "(default: all known ones; missing ones are skipped)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frugal", description="frugal's tools: a program under every allocator "
                                     "(compare), a program's allocation report (run), a running program's memory "
                                     "(snapshot, top) and what grew between two snapshots (diff), the lab (bench) "
                                     "and its results table (table).")
    parser.add_argument("--version", action="store_true", help="print the CLI's and the library's versions")
    parser.add_argument("--help-env", action="store_true",
                        help="print the allocator's FRUGAL_* options: value, default and meaning (with --build DIR: "
                             "that build's library)")
    sub = parser.add_subparsers(dest="command")
    compare = sub.add_parser("compare", help="run a program under every allocator and say which is best for it",
                             usage="frugal compare [-n REPS] [--allocators LIST] [--env NAME=K=V ...] [--stdin FILE] "
                                   "[-o DIR] -- PROGRAM [ARGS...]",
                             description="Run PROGRAM REPS times under each allocator (interleaved, in rotated "
                                         "order), measure wall, user and sys time, peak RSS and page faults, check "
                                         "its exit code and stdout against glibc's, print a table, and name a "
                                         "winner for time and for peak RSS only where its worst run is more than "
                                         "1 % better than every other allocator's best; write DIR/results.json, "
                                         "report.html and report.md. Exit code: the program's under glibc, or 1 "
                                         "(if that was 0) when another allocator made it fail or print something "
                                         "else.")
    compare.add_argument("-n", "--reps", type=at_least_one, default=5, metavar="REPS", help="runs per allocator (default: 5)")
    compare.add_argument("--allocators", metavar="LIST",
                         help=ALLOCATORS_HELP.replace("frugal,", "frugal, frugal+ledger, frugal+secure,")
                         + "; glibc, the reference, always runs")
    compare.add_argument("--env", action="append", default=[], metavar="NAME=K=V",
                         help="set K=V for allocator NAME only, e.g. frugal=FRUGAL_DECAY_MS=100 (repeatable)")
    compare.add_argument("--stdin", type=Path, metavar="FILE", help="feed FILE to every run's stdin")
    compare.add_argument("-o", "--out", type=Path, default=Path("out/compare"), metavar="DIR",
                         help="output directory (default: out/compare)")
    compare.add_argument("--timeout", type=float, default=3600.0, metavar="S", help="seconds per run (default: 3600)")
    compare.add_argument("--build", type=Path, default=default_build(), metavar="DIR", help=BUILD_HELP)
    add_program(compare)

    run = sub.add_parser("run", help="run a program on frugal with the ledger on and report its allocations",
                         usage="frugal run [-o DIR] [--interval-ms N] [--leaks | --profile] [--build DIR] -- PROGRAM [ARGS...]",
                         description="Run PROGRAM on frugal (LD_PRELOAD) with the ledger on; write DIR/ledger.json, "
                                     "report.html, report.md and plots, print the summary, and exit with the "
                                     "program's exit code.")
    run.add_argument("-o", "--out", type=Path, default=Path("out/run"), metavar="DIR",
                     help="output directory (default: out/run)")
    run.add_argument("--interval-ms", type=at_least_one, default=50, metavar="N",
                     help="timeline sample period in ms (default: 50)")
    run.add_argument("--leaks", action="store_true",
                     help="record a call stack per block and report the blocks live at exit by call site (slower)")
    run.add_argument("--profile", action="store_true",
                     help="sample about one allocation per FRUGAL_SAMPLE_BYTES (1 MiB) allocated and write estimated "
                          "bytes by call stack: DIR/profile.json, alloc.folded, peak.folded, live.folded, "
                          "flame-*.svg, top sites (cheap)")
    run.add_argument("--no-plots", action="store_true", help="skip the plots (faster)")
    run.add_argument("--build", type=Path, default=default_build(), metavar="DIR", help=BUILD_HELP)
    add_program(run)

    live.add_subcommands(sub)  # snapshot, top, diff: a running program, through its control channel

    bench = sub.add_parser("bench", help="run the lab's experiments under every allocator found",
                           description="Run the lab's experiments under every allocator found, judge frugal "
                                       "against each experiment's verdicts, and write results.json, one plot "
                                       "per experiment, report.html and report.md.")
    bench.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                       help=f"experiments to run (default: all of {', '.join(EXPERIMENTS)})")
    bench.add_argument("--allocators", metavar="LIST",
                       help=ALLOCATORS_HELP.replace("frugal,", f"frugal (which brings {', '.join(LAB_VARIANTS)} on a "
                                                    f"few cells), a variant ({', '.join(VARIANTS)}: priced beside "
                                                    "its base on every timed cell),"))
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="scaled-down sizes, 3 repetitions, about 10 minutes (the default)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the seeds' own sizes, 5 repetitions (hours)")
    size.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="tiny sizes, 1 repetition: seconds, for tests")
    bench.set_defaults(mode="quick")
    bench.add_argument("--out", type=Path, default=Path("out/lab"), metavar="DIR",
                       help="output directory (default: out/lab)")
    bench.add_argument("--build", type=Path, default=default_build(), metavar="DIR", help=BENCH_BUILD_HELP)
    bench.add_argument("--check", action="store_true", help="exit non-zero when a verdict on frugal fails")
    bench.add_argument("--cores", type=int, default=None, help=argparse.SUPPRESS)

    table = sub.add_parser("table", help="write a lab run's results table into a Markdown page",
                           description="Make the results table of a lab run (its results.json): one row per "
                                       "workload, one column per allocator, each cell wall time and peak RSS, "
                                       "with the date, the machine and the command that measured it. Print it, "
                                       "or write it into FILE between the marker comments "
                                       f"{results_table.START} and {results_table.END}.")
    table.add_argument("results", nargs="?", type=Path, default=Path("out/lab/results.json"), metavar="RESULTS",
                       help="the lab run's results.json (default: out/lab/results.json)")
    table.add_argument("--into", type=Path, metavar="FILE", help="write the table into FILE (e.g. README.md)")
    table.add_argument("--plots", type=Path, metavar="DIR",
                       help="also copy the run's plots (one PNG per experiment, beside RESULTS) into DIR")
    return parser


def at_least_one(text: str) -> int:
    """An argparse type: a count or a period, 1 or more."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def add_program(sub: argparse.ArgumentParser) -> None:
    """The program a subcommand runs: the rest of the command line (after --); `program_of`."""
    sub.add_argument("program_argv", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                     help="the program and its arguments, after --")


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    from .bench import run_lab, write_json
    from .report import PRICE, all_price_lines, summary_note, summary_table, write_reports

    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        console.print(f"[red]unknown experiment(s): {', '.join(unknown)}[/]; choose from {', '.join(EXPERIMENTS)}")
        return 2
    exps = args.experiments or list(EXPERIMENTS)
    console.print(f"[bold]frugal bench[/] — {args.mode} mode, experiments: {', '.join(exps)}")
    try:
        lab = run_lab(exps, args.mode, args.build, args.out, args.allocators, console, cores=args.cores)
    except (FileNotFoundError, RuntimeError) as e:
        console.print(f"[red]error:[/] {escape(str(e))}")
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
        console.print(f"  {mark} {escape(f'{v.experiment}: {v.name} — {v.detail}')}", highlight=False)
    for line in all_price_lines(lab):
        console.print(f"  [blue]{PRICE}[/] {escape(line)}", highlight=False)
    skipped = [a for a in lab.allocators if not a.available]
    for a in skipped:
        console.print(f"  [yellow]skipped[/] {escape(a.describe())}", highlight=False)
    console.print(escape(f"Report: {args.out / 'report.html'}  ({args.out / 'report.md'}, {args.out / 'results.json'})"))
    if args.check and lab.failed():
        console.print("[red]--check: a verdict failed[/]")
        return 1
    return 0


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from .run import print_summary, run

    command = program_of(args)
    if not command:
        return error(console, "no program given: frugal run [-o DIR] -- PROGRAM ARGS")
    if args.leaks and args.profile:
        return error(console, "--leaks and --profile: choose one (with a stack for every block, nothing is sampled)")
    try:
        result = run(command, args.out, args.build, args.interval_ms, args.leaks, profile=args.profile)
        from .run_report import write_run_reports  # matplotlib only after the program ran

        result.files += write_run_reports(result, plots=not args.no_plots)
    except OSError as e:  # the program or libfrugal.so not found, the output directory not writable
        return error(console, e)
    print_summary(result, console)
    return result.exit_code


def program_of(args: argparse.Namespace) -> list[str]:
    """The command after `--` (argparse keeps the separator in a REMAINDER)."""
    return args.program_argv[1:] if args.program_argv[:1] == ["--"] else args.program_argv


def error(console: Console, problem: object) -> int:
    """Print the problem; the exit code a shell gives a missing command (127), else 2."""
    console.print(f"[red]error:[/] {escape(str(problem))}")
    return 127 if isinstance(problem, FileNotFoundError) and "command not found" in str(problem) else 2


def cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from .compare import STACKED, compare, table, verdict_lines, write_json
    from .compare_report import write_compare_reports

    command = program_of(args)
    if not command:
        return error(console, "no program given: frugal compare [-n REPS] -- PROGRAM ARGS")
    try:
        result = compare(command, args.reps, args.allocators, args.env, args.stdin, args.build, console,
                         args.timeout)
        args.out.mkdir(parents=True, exist_ok=True)
        write_json(result, args.out / "results.json")
        write_compare_reports(result, args.out)
    except (OSError, ValueError) as e:  # as for run; ValueError: a bad --env
        return error(console, e)
    head, rows = table(result, STACKED)
    out = Table(title=escape(f"frugal compare: {command_line(command)} — {args.reps} runs each, median (min–max)"),
                title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for i, h in enumerate(head):  # the headings wrap, the numbers never do
        widest = max(len(line) for row in rows for line in row[i].splitlines())
        out.add_column(h, justify="left" if i == 0 else "right", min_width=widest)
    for row in rows:
        out.add_row(*row)
    console.print(out)
    for line in verdict_lines(result):
        console.print(f"  {escape(line)}", highlight=False)
    console.print(escape(f"Report: {args.out / 'report.html'}  ({args.out / 'report.md'}, {args.out / 'results.json'})"))
    return result.exit_code


def cmd_table(args: argparse.Namespace, console: Console) -> int:
    try:
        results = results_table.load(args.results)
        text = results_table.markdown(results)
        if args.into:
            results_table.write_into(args.into, text)
            console.print(escape(f"results table of {args.results} written into {args.into}"))
        else:
            print(text, end="")
        if args.plots:
            for png in results_table.copy_plots(args.results, results, args.plots):
                console.print(escape(f"plot copied: {png}"))
    except (OSError, ValueError, KeyError) as e:  # no results file, not a lab run's, no markers
        return error(console, e)
    return 0


def version(build: Path) -> str:
    lib = build / "libfrugal.so"
    try:
        found = f"libfrugal {frugal_version(lib)} ({lib.resolve()})"
    except (OSError, AttributeError) as e:
        found = f"libfrugal not found or unreadable at {lib} ({e.__class__.__name__})"
    return f"frugal CLI {__version__}\n{found}"


def help_env(argv: list[str]) -> int:
    """`frugal --help-env [--build DIR]`: the allocator's options table, as libfrugal prints it
    (fg_options_print: name, current value, default, one line of help), on stderr."""
    import ctypes

    build = default_build()
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
    if args.version:
        print(version(default_build()))
        return 0
    if args.command is None:
        build_parser().print_usage()
        return 2
    if args.command == "bench":
        return cmd_bench(args, console)
    if args.command == "compare":
        return cmd_compare(args, console)
    if args.command == "table":
        return cmd_table(args, console)
    if args.command in live.COMMANDS:
        return live.dispatch(args)
    if args.command == "run":
        # The program's own output goes to stdout too: the summary goes to stderr, after it.
        return cmd_run(args, Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 150))
    return 2


if __name__ == "__main__":
    sys.exit(main())
