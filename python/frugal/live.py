"""The commands that look into a running program through frugal's control channel:
`frugal snapshot PID`, `frugal top PID`, `frugal diff A B`. `add_subcommands(sub)` adds them
to the CLI's subparsers and `dispatch(args)` runs the one chosen (cli.py wires both in).
`python -m frugal.live snapshot PID ...` runs them without cli.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

COMMANDS = ("snapshot", "top", "diff")

CHANNEL_NOTE = ("The program must run on frugal (LD_PRELOAD=libfrugal.so) with its control channel on "
                "(FRUGAL_CONTROL=1, or periodic snapshots: FRUGAL_SNAPSHOT_EVERY_S); the ledger (FRUGAL_STATS_FILE=PATH) "
                "or a profile (FRUGAL_PROFILE=DIR) beside it gives classes and call sites; its socket is "
                "$XDG_RUNTIME_DIR/frugal/PID.sock, else /tmp/frugal-UID/PID.sock.")


def positive(text: str) -> float:
    v = float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return v


def at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("pid", type=int, nargs="?", metavar="PID", help="the running program's process id")
    p.add_argument("--socket", type=Path, metavar="PATH",
                   help="the program's control socket, when it is not where PID says (another XDG_RUNTIME_DIR)")


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Add snapshot, top and diff to the CLI's subparsers."""
    snap = sub.add_parser("snapshot", help="write the ledger, profile, options and reports of a running program",
                          usage="frugal snapshot PID [-o DIR] [--socket PATH] [--no-plots]",
                          description="Ask a running program (over frugal's control channel) for its ledger, heap "
                                      "profile and options, and write them into DIR with report.html, report.md, "
                                      "flame graphs and plots, as `frugal run` writes at exit. " + CHANNEL_NOTE)
    add_target(snap)
    snap.add_argument("-o", "--out", type=Path, metavar="DIR",
                      help="output directory (default: out/snapshot-PID-YYYYmmdd-HHMMSS)")
    snap.add_argument("--no-plots", action="store_true", help="skip the PNG plots (faster)")
    snap.add_argument("--timeout", type=positive, default=10.0, metavar="S",
                      help="seconds to wait for each answer (default: 10)")

    top = sub.add_parser("top", help="a live view of a running program's memory, refreshed every second",
                         usage="frugal top PID [--interval S] [--once | --iterations N] [--rows N] [--socket PATH]",
                         description="RSS beside live bytes and what frugal's caches hold, fresh bytes, faults and "
                                     "OS calls per second, the size classes and call sites holding the most live "
                                     "bytes, and what grew since the view started. q or Ctrl-C leaves; c gives "
                                     "cached memory back. Without a terminal, or with --once/--iterations, frames "
                                     "are printed one after another. " + CHANNEL_NOTE)
    add_target(top)
    top.add_argument("--interval", type=positive, default=1.0, metavar="S", help="seconds between refreshes (default: 1)")
    n = top.add_mutually_exclusive_group()
    n.add_argument("--once", dest="iterations", action="store_const", const=1,
                   help="print one frame (after one interval, so that the rates are measured) and leave")
    n.add_argument("--iterations", type=at_least_one, metavar="N", help="print N frames and leave")
    top.add_argument("--rows", type=at_least_one, default=8, metavar="N",
                     help="classes and call sites shown (default: 8)")

    diff = sub.add_parser("diff", help="what grew between two snapshots: call sites and size classes",
                          usage="frugal diff A B [-o DIR] [-n N]",
                          description="Compare two snapshot directories (frugal snapshot's, or frugal run --profile "
                                      "outputs): the call sites (heap profile) and size classes (ledger) whose live "
                                      "bytes grew from A to B, biggest first, and the process's figures. Prints the "
                                      "text and writes DIR/diff.html, diff.md, diff.json and a flame graph of the "
                                      "growth.")
    diff.add_argument("a", type=Path, metavar="A", help="the earlier snapshot directory")
    diff.add_argument("b", type=Path, metavar="B", help="the later snapshot directory")
    diff.add_argument("-o", "--out", type=Path, metavar="DIR", help="output directory (default: out/diff-A-B)")
    diff.add_argument("-n", "--top", type=at_least_one, default=10, metavar="N",
                      help="call sites and classes printed (default: 10; the reports show 20)")


def console_for(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 150)


def target(args: argparse.Namespace, console: Console) -> bool:
    if args.pid is None and args.socket is None:
        console.print("[red]error:[/] give the program's PID (or --socket PATH)")
        return False
    return True


def cmd_snapshot(args: argparse.Namespace, console: Console) -> int:
    from . import control as C
    from . import snapshot as S

    if not target(args, console):
        return 2
    try:
        snap = S.take(args.pid, args.out, args.socket, plots=not args.no_plots, timeout=args.timeout)
    except C.ControlError as e:
        console.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    except OSError as e:
        console.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    for line in S.summary_lines(snap):
        console.print(escape(line))
    return 0


def cmd_top(args: argparse.Namespace, console: Console) -> int:
    from .top import top

    if not target(args, console):
        return 2
    return top(args.pid, str(args.socket) if args.socket else None, console, args.interval, args.iterations,
               args.rows)


def cmd_diff(args: argparse.Namespace, console: Console) -> int:
    from rich import box
    from rich.table import Table

    from . import snapdiff as D
    from . import snapshot as S

    try:
        a, b = S.load(args.a), S.load(args.b)
    except (OSError, ValueError) as e:
        console.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    d = D.diff(a, b)
    out = args.out or Path("out") / f"diff-{a.path.resolve().name}-{b.path.resolve().name}"
    files = D.write(d, out)

    def table(title: str, head: list[str], rows: list[list[str]]) -> None:
        t = Table(title=escape(title), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        for i, h in enumerate(head):
            left = i == len(head) - 1 or (i == 0 and h in ("", "class"))
            t.add_column(h, justify="left" if left else "right", no_wrap=i < len(head) - 1)
        for r in rows:
            t.add_row(*(escape(c) for c in r))
        console.print(t)

    console.print(escape(f"frugal diff: A = {a.label}, B = {b.label}; {D.interval_text(d)}"))
    for n in d.notes:
        console.print(f"  [yellow]note:[/] {escape(n)}")
    table("the process", D.TOTALS_HEAD, D.totals_rows(d))
    if d.sites:
        rows = D.site_rows(d, args.top)
        if rows:
            table(f"call sites whose live bytes grew ({d.site_source})", D.SITE_HEAD, rows)
        else:
            console.print("no call site grew")
    if d.classes:
        rows = D.class_rows(d, args.top)
        if rows:
            table("size classes whose live bytes grew (ledger)", D.CLASS_HEAD, rows)
        else:
            console.print("no size class grew")
    console.print(escape(f"Report: {out / 'diff.html'}  ({out / 'diff.md'}, {out / 'diff.json'}"
                         + (", flame-growth.svg)" if any(f.name == "flame-growth.svg" for f in files) else ")")))
    return 0


def dispatch(args: argparse.Namespace) -> int:
    """Run the command args.command names (one of COMMANDS); its exit code."""
    console = console_for()
    if args.command == "snapshot":
        return cmd_snapshot(args, console)
    if args.command == "top":
        return cmd_top(args, console)
    if args.command == "diff":
        return cmd_diff(args, console)
    raise ValueError(f"not a command of frugal.live: {args.command}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="frugal", description="frugal's live commands")
    sub = parser.add_subparsers(dest="command", required=True)
    add_subcommands(sub)
    return dispatch(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
