"""`frugal top PID`: a running program's memory, refreshed every second, from frugal's control
channel: RSS beside the live bytes and what each of frugal's caches holds, fresh bytes, page
faults and OS calls per second (the change since the last refresh), the size classes (ledger)
and call sites (sampled profile) holding the most live bytes, and what grew since the view
started. q or Ctrl-C leaves, c gives cached memory back (the channel's `collect`); when the
program exits the view ends on its last frame. Without a terminal (or with --once /
--iterations N) each frame is printed in turn, as `top -b` does."""

from __future__ import annotations

import os
import select
import sys
import time
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import control as C
from . import profile as P
from .snapdiff import class_growth, leaks_as_profile, signed, site_growth
from .snapshot import HELD, Symbolizer, held_bytes, uptime_text
from .units import human

TIMEOUT = 5.0


@dataclass
class Sample:
    t: float  # time.monotonic() when the answer came
    wall: float
    ledger: dict
    profile: dict | None


class Source:
    """Where the samples come from: one process, its frames named once."""

    def __init__(self, pid: int | None, sock: str | None) -> None:
        self.pid, self.sock = pid, sock
        self.info: C.ProcessInfo | None = None
        self.symbolizer: Symbolizer | None = None
        self.has_profile = True

    def sample(self) -> Sample:
        ledger = C.request(self.pid, "ledger", self.sock, TIMEOUT)
        t, wall = time.monotonic(), time.time()
        if self.pid is None:
            self.pid = int(ledger["pid"])
        if self.info is None:
            self.info = C.process_info(self.pid)
            self.symbolizer = Symbolizer(self.info.program(), self.info.cwd, self.info.argv[0] if self.info.argv else None)
        profile = C.fetch_profile(self.pid, self.sock, TIMEOUT) if self.has_profile else None
        self.has_profile = profile is not None
        assert self.symbolizer is not None
        self.symbolizer.profile(profile)
        self.symbolizer.ledger(ledger)
        return Sample(t, wall, ledger, profile)


# ---- one frame ----------------------------------------------------------------------------------


def rate(now: float, before: float, seconds: float, kind: str) -> str:
    if seconds <= 0:
        return "—"
    r = (now - before) / seconds
    if kind == "bytes":
        return signed(r) + "/s" if abs(r) >= 0.5 else "0 B/s"
    return f"{r:,.0f}/s"


def since(now: float, before: float, kind: str) -> str:
    d = now - before
    if kind == "bytes":
        return signed(d) if round(d) else "0 B"
    return f"{round(d):+,}" if round(d) else "0"


def memory_table(first: Sample, prev: Sample, cur: Sample, compact: bool = False) -> Table:
    d0, dp, d = first.ledger, prev.ledger, cur.ledger
    dt = cur.t - prev.t
    t = Table(title="memory", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, j in (("", "left"), ("now", "right"), ("since start", "right"), ("per second", "right")):
        t.add_column(col, justify=j, no_wrap=True)

    def row(name: str, get, kind: str = "bytes", style: str = "") -> None:
        n, p, f = get(d), get(dp), get(d0)
        t.add_row(Text(name, style=style), human(n) if kind == "bytes" else f"{n:,}", since(n, f, kind),
                  rate(n, p, dt, kind))

    row("RSS", lambda x: x["process"]["rss"], style="bold")
    if d.get("ledger"):
        row("live, handed out", lambda x: x["live"]["bytes_handed_out"], style="bold")
    if cur.profile is not None:
        est = [s.profile["totals"]["live_bytes"] if s.profile else 0 for s in (first, prev, cur)]
        t.add_row(Text("live (profile, ~)", style="bold"), "~" + human(est[2]), since(est[2], est[0], "bytes"),
                  rate(est[2], est[1], dt, "bytes"))
    if not d.get("ledger") and cur.profile is None:
        t.add_row("live", "—", "", "ledger and profile off")
    row("held by caches", held_bytes, style="bold")
    if not compact:
        for key, name, _ in HELD:
            row(f"  {name}", lambda x, key=key: x["held"].get(key, 0))
    row("fresh bytes", lambda x: x["counters"]["fresh_bytes"] + x["counters"]["fresh_large_bytes"])
    row("minor faults", lambda x: x["process"]["minor_faults"], "count")
    if not compact:
        row("major faults", lambda x: x["process"]["major_faults"], "count")
    for call in ("mmap", "munmap") if compact else ("mmap", "munmap", "madvise", "mremap"):
        row(f"{call} calls", lambda x, call=call: x["counters"][f"{call}_calls"], "count")
    if d.get("ledger"):
        row("allocations", lambda x: x["totals"]["allocations"], "count")
        row("frees", lambda x: x["totals"]["frees"], "count")
    cpu = (d["process"]["user_us"] + d["process"]["sys_us"]) - (dp["process"]["user_us"] + dp["process"]["sys_us"])
    t.add_row("CPU", f"{(d['process']['user_us'] + d['process']['sys_us']) / 1e6:,.1f} s", "",
              f"{100 * cpu / 1e6 / dt:.0f} %" if dt > 0 else "—")
    return t


def class_table(first: Sample, cur: Sample, rows: int) -> Table | Text:
    if not cur.ledger.get("ledger"):
        return Text("size classes: the ledger is off (FRUGAL_STATS=1 or FRUGAL_STATS_FILE=PATH counts them)",
                    style="dim")
    t = Table(title="size classes by live bytes", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False)
    for col in ("class", "live blocks", "live", "since start"):
        t.add_column(col, justify="left" if col == "class" else "right", no_wrap=True)
    growth = {c.label: c for c in class_growth(first.ledger, cur.ledger)}
    from .ledger import class_label

    top = sorted((c for c in cur.ledger["classes"] if c["live_blocks"] > 0), key=lambda c: -c["live_bytes_handed_out"])
    for c in top[:rows]:
        g = growth.get(class_label(c))
        t.add_row(class_label(c), f"{c['live_blocks']:,}", human(c["live_bytes_handed_out"]),
                  since(g.growth, 0, "bytes") if g else "")
    return t


def sites_of(s: Sample) -> tuple[dict | None, str]:
    """The call sites of a sample: its profile, else the ledger's leak sites (FRUGAL_LEAKS)."""
    if s.profile is not None:
        p = s.profile
        return p, f"profile: {p['samples']:,} samples, one per {human(p['sample_bytes'])}"
    return leaks_as_profile(s.ledger), "FRUGAL_LEAKS: exact, the top 20"


def site_table(first: Sample, cur: Sample, rows: int) -> Table | Text:
    p, source = sites_of(cur)
    if p is None:
        return Text("call sites: no profile (FRUGAL_PROFILE=DIR samples the call stacks)", style="dim")
    t = Table(title=f"call sites by live bytes ({source})", title_justify="left", box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False, expand=True)
    t.add_column("live", justify="right", no_wrap=True)
    t.add_column("since start", justify="right", no_wrap=True)
    t.add_column("site", no_wrap=True, overflow="ellipsis", ratio=1)
    growth = {s.name: s for s in site_growth(sites_of(first)[0], p)}
    approx = "~" if cur.profile is not None else ""
    for s in P.top_sites(p, "live_bytes", rows):
        g = growth.get(s.name)
        t.add_row(approx + human(round(s.live_bytes)), since(g.growth, 0, "bytes") if g else "", escape(s.where))
    return t


def grew_table(first: Sample, cur: Sample, rows: int) -> Table | Text:
    p = sites_of(cur)[0]
    sites = [s for s in site_growth(sites_of(first)[0], p) if round(s.growth) > 0] if p is not None else []
    classes = ([c for c in class_growth(first.ledger, cur.ledger) if c.growth > 0]
               if cur.ledger.get("ledger") and first.ledger.get("ledger") else [])
    if not sites and not classes:
        return Text("grew since the view started: nothing", style="dim")
    t = Table(title=f"grew since the view started ({cur.t - first.t:.0f} s ago)", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
    t.add_column("grew by", justify="right", no_wrap=True)
    t.add_column("per second", justify="right", no_wrap=True)
    t.add_column("what", no_wrap=True, overflow="ellipsis", ratio=1)
    dt = cur.t - first.t
    approx = "~" if cur.profile is not None else ""
    for s in sites[:rows]:
        t.add_row(approx + signed(s.growth), rate(s.growth, 0, dt, "bytes"), escape(f"site {s.where}"))
    for c in classes[:max(rows // 2, 1)]:
        t.add_row(signed(c.growth), rate(c.growth, 0, dt, "bytes"), f"class {c.label} ({c.blocks:+,} blocks)")
    return t


def frame(src: Source, first: Sample, prev: Sample, cur: Sample, width: int, rows: int = 8,
          status: str = "", interactive: bool = False, compact: bool = False) -> RenderableType:
    info = src.info or C.ProcessInfo(src.pid or 0)
    command = info.command()
    if len(command) > 60:
        command = command[:57] + "..."
    uptime = C.process_info(src.pid).uptime_s if src.pid and C.alive(src.pid) else None
    head = Text.assemble(("frugal top", "bold"), f" — pid {src.pid} ", (command, "cyan"),
                         f" — up {uptime_text(uptime)} — {time.strftime('%H:%M:%S', time.localtime(cur.wall))}",
                         ("" if not interactive else "  (q quits, c gives cached memory back)" if width >= 120
                          else "  (q: quit, c: collect)", "dim"))
    parts: list[RenderableType] = [head]
    mem = memory_table(first, prev, cur, compact)
    classes = class_table(first, cur, rows)
    if width >= 130:
        grid = Table.grid(padding=(0, 4))
        grid.add_column()
        grid.add_column()
        grid.add_row(mem, classes)
        parts.append(grid)
    else:
        parts += [mem, classes]
    parts += [site_table(first, cur, rows), grew_table(first, cur, rows)]
    if status:
        parts.append(Text(status, style="yellow"))
    return Group(*parts)


# ---- the loop -------------------------------------------------------------------------------------


class Keys:
    """Single keys from a terminal's stdin (cbreak mode, restored on exit)."""

    def __init__(self) -> None:
        self.fd = None
        self.saved = None
        if sys.stdin.isatty():
            import termios
            import tty

            self.fd = sys.stdin.fileno()
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)

    def wait(self, seconds: float) -> str:
        """A key pressed within `seconds`, or ''."""
        if self.fd is None:
            time.sleep(max(seconds, 0))
            return ""
        ready, _, _ = select.select([self.fd], [], [], max(seconds, 0))
        return os.read(self.fd, 32).decode(errors="replace") if ready else ""

    def close(self) -> None:
        if self.fd is not None and self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


def gone(src: Source, e: C.ControlError) -> bool:
    """Whether an error means the program has ended (the view then ends on its last frame)."""
    return isinstance(e, C.NoSuchProcess) or (src.pid is not None and not C.alive(src.pid))


def top(pid: int | None, sock: str | None, console: Console, interval: float = 1.0,
        iterations: int | None = None, rows: int = 8) -> int:
    src = Source(pid, sock)
    try:
        first = src.sample()
    except C.ControlError as e:
        console.print(f"[red]error:[/] {escape(str(e))}")
        return 2
    if console.is_terminal and iterations is None:
        return live_view(src, first, console, interval, rows)
    prev = first
    n = 0
    while iterations is None or n < iterations:
        time.sleep(max(interval - (time.monotonic() - prev.t), 0))
        try:
            cur = src.sample()
        except C.ControlError as e:
            if gone(src, e):
                console.print(f"process {src.pid} exited" + (f"; its last frame is above" if n else ""))
                return 0
            console.print(f"[yellow]no answer:[/] {escape(str(e))}")
            n += 1
            continue
        console.print(frame(src, first, prev, cur, console.width, rows))
        prev = cur
        n += 1
        if iterations is None or n < iterations:
            console.print()
    return 0


def fitted(console: Console, make, rows: int) -> RenderableType:
    """The fullest frame that fits the terminal: make(rows, compact) with as many classes and
    sites as fit, the memory table's detail rows dropped before going below three."""
    options = console.options
    shown = None
    for compact in (False, True):
        for n in range(rows, 0 if compact else 2, -1):
            shown = make(n, compact)
            if len(console.render_lines(shown, options, pad=False)) <= console.height:
                return shown
    return shown


def live_view(src: Source, first: Sample, console: Console, interval: float, rows: int) -> int:
    from rich.live import Live

    keys = Keys()
    prev = cur = first
    status = "first frame: the rates come with the next"
    shown_until = 0.0  # a collect's answer stays a few refreshes

    def draw(live: Live | None, interactive: bool = True) -> RenderableType:
        shown = fitted(console, lambda n, compact: frame(src, first, prev, cur, console.width, n, status,
                                                         interactive, compact), rows)
        if live is not None:
            live.update(shown, refresh=True)
        return shown

    try:
        with Live(draw(None), console=console, auto_refresh=False, transient=False,
                  vertical_overflow="crop") as live:
            next_at = first.t + interval
            while True:
                key = keys.wait(next_at - time.monotonic())
                if key and key[0] in "qQ":
                    break
                if key and key[0] in "cC":
                    try:
                        returned = C.request(src.pid, "collect", src.sock, TIMEOUT)["returned_bytes"]
                        status = f"collect: {human(returned)} given back to the OS"
                        shown_until = time.monotonic() + 3 * interval
                    except C.ControlError as e:
                        status = f"collect failed: {e}"
                    draw(live)
                    continue
                if time.monotonic() < next_at:
                    continue
                next_at = time.monotonic() + interval
                try:
                    new = src.sample()
                except C.ControlError as e:
                    if gone(src, e):
                        status = f"process {src.pid} exited at {time.strftime('%H:%M:%S')}: its last frame"
                        draw(live, interactive=False)
                        break
                    status = f"no answer: {e}"
                    draw(live)
                    continue
                prev, cur = cur, new
                if time.monotonic() >= shown_until:
                    status = ""
                draw(live)
    except KeyboardInterrupt:
        pass
    finally:
        keys.close()
    return 0
