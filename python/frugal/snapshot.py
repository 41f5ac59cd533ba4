"""`frugal snapshot PID`: what a running program holds now, asked over frugal's control channel
(control.py): the ledger (with the ledger off, the counters frugal always keeps: caches, OS
calls, fresh bytes, RSS), the sampled heap profile if one is on, the options in effect; written
into a directory as `frugal run` writes its own at exit (ledger.json, profile.json, folded
stacks and flame graphs, report.html, report.md, plots), plus options.json. The program's
frames are named with its executable (/proc/PID/exe) while it still runs.

Here too: `Symbolizer`, which names frames once and remembers them (`frugal top` asks for the
profile every second), and what a snapshot directory holds when read back (`load`)."""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import control as C
from . import ledger as L
from . import profile as P
from .pages import code_md, page, table_html, table_md
from .symbols import resolve_module, symbolize_frames
from .units import human

# The profile's views as a snapshot names them: the running program has no "exit" yet.
VIEWS = {"live": ("live_bytes", "bytes live now"), "peak": ("peak_bytes", "bytes live at the peak so far"),
         "alloc": ("alloc_bytes", "bytes allocated so far")}
SITE_HEAD = ["#", "live now", "blocks live", "live at peak", "allocated", "site"]
HELD = (("large_cache_bytes", "large cache", "freed large blocks (> 512 KiB) kept for reuse"),
        ("kept_page_bytes", "kept pages", "empty pages kept in their class queues"),
        ("free_page_bytes", "free pages", "free page slots of the threads' segments, resident"),
        ("segment_cache_bytes", "segment cache", "empty 4 MiB segments kept for reuse"))
RETURNED = (("free_page_returned_bytes", "free pages"), ("segment_cache_returned_bytes", "segment cache"))


class Symbolizer:
    """Names frames (function, file, line) by addr2line, remembering every (module, offset)
    it has named: a program's profile asked again names only its new frames.

    The library names the main program's module as dladdr does, by argv[0]'s memory: a
    program that sets its process title there (redis, nginx, postgres) has its own frames
    under the title ("redis-server *:6379"). A module that is the process's current argv[0]
    and no file is the executable: such frames get its path."""

    def __init__(self, program: Path | None, cwd: Path | None, argv0: str | None = None) -> None:
        self.program, self.cwd, self.argv0 = program, cwd, argv0
        self.known: dict[tuple[str, int], tuple] = {}

    def main_module(self, frames: list[dict]) -> None:
        if self.program is None or not self.argv0:
            return
        for f in frames:
            m = f.get("module")
            if m == self.argv0 and resolve_module(m, self.program, self.cwd) is None:
                f["module"] = str(self.program)

    def name(self, frames: list[dict]) -> None:
        self.main_module(frames)
        new = [f for f in frames if (f.get("module", "?"), int(f.get("offset", 0))) not in self.known]
        if new:
            copies = [{"module": f.get("module", "?"), "offset": int(f.get("offset", 0))} for f in new]
            unique = list({(c["module"], c["offset"]): c for c in copies}.values())
            symbolize_frames(unique, program=self.program, cwd=self.cwd)
            for c in unique:
                self.known[(c["module"], c["offset"])] = (c["function"], c["file"], c["line"])
        for f in frames:
            f["function"], f["file"], f["line"] = self.known[(f.get("module", "?"), int(f.get("offset", 0)))]

    def profile(self, doc: dict | None) -> None:
        if doc is not None:
            self.name([f for s in doc["stacks"] for f in s["frames"]])

    def ledger(self, doc: dict) -> None:
        self.name([f for s in L.leak_sites(doc) for f in s["frames"]])


@dataclass
class Snapshot:
    pid: int
    out: Path
    taken: float  # epoch seconds
    info: C.ProcessInfo
    ledger: dict
    profile: dict | None
    options: dict
    problems: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def command(self) -> str:
        return self.info.command()


def default_dir(pid: int, when: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when or time.time()))
    out = Path("out") / f"snapshot-{pid}-{stamp}"
    n = 2
    while out.exists():
        out = Path("out") / f"snapshot-{pid}-{stamp}-{n}"
        n += 1
    return out


def fetch(pid: int | None, sock: Path | None = None, timeout: float = C.DEFAULT_TIMEOUT,
          symbolizer: Symbolizer | None = None) -> Snapshot:
    """Ask the program for its ledger, profile and options, and name the frames."""
    ledger = C.request(pid, "ledger", sock, timeout)
    pid = int(ledger.get("pid", pid or 0))
    taken = time.time()
    info = C.process_info(pid)
    profile = C.fetch_profile(pid, sock, timeout)
    options = C.request(pid, "options", sock, timeout)
    snap = Snapshot(pid=pid, out=Path("."), taken=taken, info=info, ledger=ledger, profile=profile, options=options)
    sym = symbolizer or Symbolizer(info.program(), info.cwd, info.argv[0] if info.argv else None)
    sym.profile(profile)
    sym.ledger(ledger)
    if info.exe is not None and info.program() is None:
        snap.problems.append(f"the program's executable {info.exe} is gone: its own frames stay unnamed")
    meta = {"pid": pid, "time": taken, "time_text": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(taken)),
            "process": info.as_json()}
    ledger["snapshot"] = meta
    if profile is not None:
        profile["snapshot"] = meta
    snap.problems += [f"ledger schema: {p}" for p in L.validate({k: v for k, v in ledger.items() if k != "snapshot"})[:10]]
    return snap


def take(pid: int | None, out: Path | None = None, sock: Path | None = None, plots: bool = True,
         timeout: float = C.DEFAULT_TIMEOUT) -> Snapshot:
    """`frugal snapshot`: fetch, then write everything into out (default out/snapshot-PID-TIME)."""
    snap = fetch(pid, sock, timeout)
    snap.out = out or default_dir(snap.pid, snap.taken)
    write(snap, plots)
    return snap


def write(snap: Snapshot, plots: bool = True) -> list[Path]:
    out = snap.out
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, doc in (("ledger.json", snap.ledger), ("profile.json", snap.profile), ("options.json", snap.options)):
        path = out / name
        if doc is None:
            path.unlink(missing_ok=True)
            continue
        path.write_text(json.dumps(doc, indent=1) + "\n")
        files.append(path)
    if snap.profile is not None:
        files += write_flames(snap.profile, out)
    images: dict[str, Path] = {}
    if plots and snap.ledger.get("ledger"):
        from .run_report import write_plots  # matplotlib only here

        images = write_plots(snap.ledger, out)
        files += images.values()
    md, html_file = out / "report.md", out / "report.html"
    md.write_text(markdown(snap, images))
    html_file.write_text(report_html(snap, images))
    files += [md, html_file]
    snap.files = files
    return files


def write_flames(doc: dict, out: Path) -> list[Path]:
    """{live,peak,alloc}.folded and flame-*.svg, as `frugal run --profile` writes them, titled
    for a running program."""
    files = []
    for view, (key, what) in VIEWS.items():
        lines = P.folded(doc, view)
        f = out / f"{view}.folded"
        f.write_text("".join(line + "\n" for line in lines))
        svg = out / f"flame-{view}.svg"
        svg.write_text(P.flame_svg(lines, f"{what} (estimated from {doc['samples']:,} samples, one per "
                                          f"{human(doc['sample_bytes'])} on average)"))
        files += [f, svg]
    return files


# ---- figures both reports and the summary use --------------------------------------------------------


def held_bytes(d: dict) -> int:
    """What frugal's caches hold resident for reuse."""
    h = d.get("held", {})
    return sum(int(h.get(k, 0)) for k, _, _ in HELD)


def live_bytes(d: dict, profile: dict | None) -> tuple[float | None, bool]:
    """Live bytes handed out now and whether exact: the ledger's count, else the profile's
    estimate, else None."""
    if d.get("ledger"):
        return d["live"]["bytes_handed_out"], True
    if profile is not None:
        return profile["totals"]["live_bytes"], False
    return None, False


def site_rows(doc: dict, by: str = "live_bytes", n: int = 20) -> list[list[str]]:
    return [[str(i), "~" + human(round(s.live_bytes)), f"~{round(sum(x['live_count'] for x in s.stacks)):,}",
             "~" + human(round(s.peak_bytes)), "~" + human(round(s.alloc_bytes)), s.where]
            for i, s in enumerate(P.top_sites(doc, by, n), 1)]


CLASS_HEAD = ["class", "live blocks", "live, handed out", "live, requested", "peak live blocks", "allocations",
              "frees"]

def class_live_rows(d: dict, n: int = 25) -> list[list[str]]:
    rows = sorted(d.get("classes", []), key=lambda c: -c.get("live_bytes_handed_out", 0))[:n]
    return [[L.class_label(c), f"{c['live_blocks']:,}", human(c["live_bytes_handed_out"]),
             human(c["live_bytes_requested"]), f"{c['peak_live_blocks']:,}", f"{c['allocations']:,}",
             f"{c['frees']:,}"] for c in rows if c["live_blocks"] > 0]


def held_rows(d: dict) -> list[list[str]]:
    h = d.get("held", {})
    rows = [[name, human(h.get(key, 0)), what] for key, name, what in HELD]
    returned = ", ".join(f"{name} {human(h.get(key, 0))}" for key, name in RETURNED)
    rows.append(["given back", returned, "address space kept, its memory returned to the OS (not resident)"])
    return rows


def uptime_text(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d} d " if d else "") + (f"{h} h " if d or h else "") + f"{m} min {s} s"


def overview_rows(snap: Snapshot) -> list[list[str]]:
    i, d, c = snap.info, snap.ledger, snap.ledger["counters"]
    p = d["process"]
    rows = [["process", f"pid {snap.pid} ({i.name or '?'}), {i.threads or '?'} threads, frugal {d['version']}"],
            ["executable", str(i.exe or "?")],
            ["working directory", str(i.cwd or "?")],
            ["taken at", snap.ledger["snapshot"]["time_text"] + f", {uptime_text(i.uptime_s)} after the start"],
            # The peak from /proc (VmHWM): getrusage's ru_maxrss, the ledger's peak_rss, keeps the
            # peak of the process before its exec (a big parent's, for a program it started).
            ["RSS now / peak", f"{human(p['rss'])} / {human(i.hwm if i.hwm else p['peak_rss'])}"],
            ["CPU user / sys", f"{p['user_us'] / 1e6:.2f} s / {p['sys_us'] / 1e6:.2f} s"],
            ["page faults", f"{p['minor_faults']:,} minor, {p['major_faults']:,} major"],
            ["held by frugal's caches", human(held_bytes(d))],
            ["fresh bytes carved", f"{human(c['fresh_bytes'] + c['fresh_large_bytes'])} (each 4 KiB a page fault)"]]
    if d.get("ledger"):
        t, live = d["totals"], d["live"]
        rows += [["allocations / frees so far", f"{t['allocations']:,} / {t['frees']:,}"],
                 ["live now", f"{live['blocks']:,} blocks, {human(live['bytes_requested'])} requested in "
                              f"{human(live['bytes_handed_out'])}"],
                 ["peak live", f"{human(live['peak_bytes_handed_out'])} handed out"],
                 ["efficiency (seed 1's % used)", f"{100 * t['efficiency']:.1f} %"]]
    else:
        rows.append(["ledger", "off: only the counters frugal always keeps (FRUGAL_STATS=1 or FRUGAL_STATS_FILE "
                               "counts every block)"])
    pr = snap.profile
    rows.append(["heap profile", f"{pr['samples']:,} samples, one per {human(pr['sample_bytes'])}: "
                                 f"~{human(pr['totals']['live_bytes'])} live now, "
                                 f"~{human(pr['totals']['peak_live_bytes'])} at the peak, "
                                 f"~{human(pr['totals']['alloc_bytes'])} allocated so far"
                 if pr is not None else "off (FRUGAL_PROFILE=DIR samples call stacks)"])
    return rows


def hidden_rows(d: dict) -> list[list[str]]:
    c, p = d["counters"], d["process"]
    fresh = c["fresh_bytes"] + c["fresh_large_bytes"]
    return [["fresh pages", f"{fresh // 4096:,} ({human(fresh)})",
             "memory frugal carved untouched: each 4 KiB a page fault and kernel zeroing"],
            ["  small / large", f"{human(c['fresh_bytes'])} / {human(c['fresh_large_bytes'])}", ""],
            ["minor faults (process)", f"{p['minor_faults']:,}", "all the process's faults, frugal's and the program's"],
            ["mmap / munmap", f"{c['mmap_calls']:,} ({human(c['mmap_bytes'])}) / {c['munmap_calls']:,} "
                              f"({human(c['munmap_bytes'])})", "address space taken and returned"],
            ["madvise / mremap", f"{c['madvise_calls']:,} ({human(c['madvise_bytes'])}) / {c['mremap_calls']:,}",
             "memory given back with the range kept; large blocks resized in place"],
            ["returned to the OS", ", ".join(f"{k.removeprefix('returned_').removesuffix('_bytes')} {human(v)}"
                                             for k, v in c.items() if k.startswith("returned_") and v) or "nothing yet",
             "by reason: decay, idle, collect, growth, takeover, oom"]]


OPTION_HEAD = ["option", "value", "default"]


def option_rows(options: dict) -> list[list[str]]:
    rows = []
    for o in options.get("options", []):
        v = o["value"]
        text = v is None or isinstance(v, str)  # a string option: unset, or its value; no default
        changed = isinstance(v, str) or (not text and v != o["default"])
        rows.append([o["name"], ("—" if v is None else str(v)) + ("  ≠" if changed else ""),
                     "—" if text else str(o["default"])])
    return rows


# ---- report.md and report.html ----------------------------------------------------------------


def title(snap: Snapshot) -> str:
    return f"frugal snapshot: pid {snap.pid} ({snap.info.name or '?'}) at {snap.ledger['snapshot']['time_text']}"


def markdown(snap: Snapshot, images: dict[str, Path]) -> str:
    d, pr = snap.ledger, snap.profile
    parts = [f"# {title(snap)}", "", code_md(snap.command), ""]
    parts += [f"**warning:** {p}  " for p in snap.problems]
    parts += ["", table_md(["", ""], overview_rows(snap)), ""]
    if pr is not None:
        parts += ["## Where the live bytes are (sampled heap profile)", "",
                  "![bytes live now by call stack](flame-live.svg)", "",
                  "### Top 20 sites by bytes live now", "", table_md(SITE_HEAD, site_rows(pr)), "",
                  "![bytes allocated so far by call stack](flame-alloc.svg)", "",
                  "### Top 20 sites by bytes allocated so far", "", table_md(SITE_HEAD, site_rows(pr, "alloc_bytes")),
                  ""]
    if d.get("ledger"):
        parts += ["## Size classes by bytes live now", "", table_md(CLASS_HEAD, class_live_rows(d, 1000)), ""]
        if "classes" in images:
            parts += ["![classes](classes.png)", ""]
        if "timeline" in images:
            parts += ["## Live bytes and RSS over time", "", "![timeline](timeline.png)", ""]
        parts += ["## Seed 1's advice", ""] + [f"- {a}" for a in L.advice(d)] + [""]
        if "sizes" in images:
            parts += ["![sizes](sizes.png)", ""]
    parts += ["## Held by frugal's caches", "", table_md(["cache", "bytes", "what"], held_rows(d)), "",
              "## Hidden costs", "", table_md(["what", "value", "meaning"], hidden_rows(d)), ""]
    if d.get("ledger"):
        from .run_report import CACHE_HEAD, cache_rows

        parts += ["## Cache hit rates", "", table_md(CACHE_HEAD, cache_rows(d)), ""]
    if d.get("leaks") is not None:
        from .run_report import LEAK_HEAD, leak_rows

        parts += ["## Blocks live now by call site (FRUGAL_LEAKS)", "", table_md(LEAK_HEAD, leak_rows(d, " ← ")), ""]
    parts += ["## Options in effect", "", table_md(OPTION_HEAD, option_rows(snap.options)), "",
              "Raw numbers: `ledger.json`, `profile.json`, `options.json`; compare two snapshots with "
              "`frugal diff A B`.", ""]
    return "\n".join(parts)


EXTRA_CSS = """
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { background: #f4f6f9; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card b { display: block; font-size: 20px; }
.card span { color: #5b6573; font-size: 12px; }
.warn { color: #9a5b00; }
table.kv td { text-align: left; white-space: normal; }
table.lastleft td:last-child, table.lastleft th:last-child { text-align: left; white-space: normal; }
.frames { font-family: ui-monospace, monospace; font-size: 12px; color: #3b4554; white-space: pre; }
object.flame { width: 100%; border: 1px solid #e3e7ed; border-radius: 6px; margin: 8px 0; }
"""


def cards(snap: Snapshot) -> str:
    d = snap.ledger
    live, exact = live_bytes(d, snap.profile)
    items = [("RSS", human(d["process"]["rss"])),
             ("live now" + ("" if exact or live is None else " (sampled)"),
              "—" if live is None else ("" if exact else "~") + human(live)),
             ("held by caches", human(held_bytes(d))),
             ("fresh bytes", human(d["counters"]["fresh_bytes"] + d["counters"]["fresh_large_bytes"])),
             ("up for", uptime_text(snap.info.uptime_s))]
    if d.get("ledger"):
        items.append(("efficiency", f"{100 * d['totals']['efficiency']:.1f} %"))
    if snap.profile is not None:
        items.append(("profile samples", f"{snap.profile['samples']:,}"))
    return "<div class='cards'>" + "".join(f"<div class='card'><b>{html.escape(v)}</b><span>{html.escape(k)}</span>"
                                            "</div>" for k, v in items) + "</div>"


def flame_object(view: str) -> str:
    return f"<object class='flame' type='image/svg+xml' data='flame-{view}.svg'></object>"


def report_html(snap: Snapshot, images: dict[str, Path]) -> str:
    d, pr = snap.ledger, snap.profile
    parts = ["<section><h2>Overview</h2>", cards(snap)]
    parts += [f"<p class='warn'>warning: {html.escape(p)}</p>" for p in snap.problems]
    parts += [table_html(["", ""], overview_rows(snap), cls="kv"), "</section>"]
    if pr is not None:
        parts += ["<section><h2>Where the live bytes are (sampled heap profile)</h2>",
                  "<p class='note'>Each frame as wide as the bytes its calls hold now; hover a frame for its "
                  "figure. Estimates from the samples: a site with few samples is rough.</p>",
                  flame_object("live"), "<h3>Top 20 sites by bytes live now</h3>",
                  table_html(SITE_HEAD, site_rows(pr), cls="lastleft"),
                  "<h3>Bytes allocated so far</h3>", flame_object("alloc"),
                  table_html(SITE_HEAD, site_rows(pr, "alloc_bytes"), cls="lastleft"),
                  "<h3>Bytes live at the peak so far</h3>", flame_object("peak"), "</section>"]
    if d.get("ledger"):
        rows = class_live_rows(d)
        parts += ["<section><h2>Size classes by bytes live now</h2>", table_html(CLASS_HEAD, rows)]
        if len([c for c in d["classes"] if c["live_blocks"] > 0]) > len(rows):
            parts.append(f"<p class='note'>The {len(rows)} classes holding the most; report.md and ledger.json "
                         "have them all.</p>")
        if "classes" in images:
            parts.append("<img src='classes.png' alt='efficiency per class'>")
        parts.append("</section>")
        if "timeline" in images:
            parts += ["<section><h2>Live bytes and RSS over time</h2>",
                      "<img src='timeline.png' alt='live bytes and RSS over time'></section>"]
        parts += ["<section><h2>Seed 1's advice</h2><ul>"] + [f"<li>{html.escape(a)}</li>" for a in L.advice(d)]
        parts += ["</ul>"] + (["<img src='sizes.png' alt='requested sizes'>"] if "sizes" in images else [])
        parts.append("</section>")
    parts += ["<section><h2>Held by frugal's caches</h2>",
              table_html(["cache", "bytes", "what"], held_rows(d), cls="lastleft"),
              "<h3>Hidden costs</h3>", table_html(["what", "value", "meaning"], hidden_rows(d), cls="lastleft")]
    if d.get("ledger"):
        from .run_report import CACHE_HEAD, cache_rows

        parts += ["<h3>Cache hit rates</h3>", table_html(CACHE_HEAD, cache_rows(d), cls="lastleft")]
    parts.append("</section>")
    if d.get("leaks") is not None:
        from .run_report import LEAK_HEAD, leak_rows

        parts += ["<section><h2>Blocks live now by call site (FRUGAL_LEAKS)</h2>",
                  table_html(LEAK_HEAD, leak_rows(d, "\n"), frames_last=True, cls="lastleft"), "</section>"]
    parts += ["<section><h2>Options in effect</h2>", table_html(OPTION_HEAD, option_rows(snap.options)),
              "<p class='note'>≠: set in the environment.</p></section>",
              "<p class='note'>Raw numbers: <code>ledger.json</code>, <code>profile.json</code>, "
              "<code>options.json</code>. Compare two snapshots: <code>frugal diff A B</code>.</p>"]
    return page(title(snap), f"frugal snapshot — pid {snap.pid}", [f"<p><code>{html.escape(snap.command)}</code></p>"],
                parts, EXTRA_CSS)


# ---- reading a snapshot back ------------------------------------------------------------------------


@dataclass
class Saved:
    """A snapshot directory (or a `frugal run` output directory) read back."""

    path: Path
    ledger: dict | None
    profile: dict | None

    @property
    def time(self) -> float | None:
        for doc in (self.ledger, self.profile):
            if doc and "snapshot" in doc:
                return doc["snapshot"]["time"]
        return None

    @property
    def pid(self) -> int | None:
        for doc in (self.ledger, self.profile):
            if doc and "pid" in doc:
                return doc["pid"]
        return None

    @property
    def when(self) -> str:
        snap = (self.ledger or self.profile or {}).get("snapshot")
        return f"pid {self.pid}, " + (f"taken {snap['time_text']}" if snap else "at exit")

    @property
    def label(self) -> str:
        return f"{self.path.name} ({self.when})"


def load(path: Path) -> Saved:
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such snapshot directory")
    ledger = L.load(path / "ledger.json") if (path / "ledger.json").is_file() else None
    profile = P.load(path / "profile.json") if (path / "profile.json").is_file() else None
    if ledger is None and profile is None:
        raise FileNotFoundError(f"{path}: neither ledger.json nor profile.json (not a snapshot directory)")
    return Saved(path, ledger, profile)


def summary_lines(snap: Snapshot) -> list[str]:
    d, pr = snap.ledger, snap.profile
    live, exact = live_bytes(d, pr)
    live_text = "—" if live is None else ("" if exact else "~") + human(live)
    lines = [f"snapshot of pid {snap.pid} ({snap.command}), {uptime_text(snap.info.uptime_s)} after its start: "
             f"RSS {human(d['process']['rss'])}, live {live_text}, held by frugal's caches {human(held_bytes(d))}"]
    if pr is not None:
        lines.append(f"  heap profile: {pr['samples']:,} samples; top sites by bytes live now:")
        for i, s in enumerate(P.top_sites(pr, "live_bytes", 5), 1):
            lines.append(f"    #{i} ~{human(round(s.live_bytes))}: {s.where}")
    lines += [f"  warning: {p}" for p in snap.problems]
    lines.append(f"  Report: {snap.out / 'report.html'}  ({snap.out / 'report.md'}, ledger.json, "
                 f"{'profile.json, ' if pr is not None else ''}options.json)")
    return lines
