"""The report of one `frugal run`: plots (size histogram, live bytes and RSS over time,
efficiency per class, leaks by site), report.md and report.html (their pieces: pages.py)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, PercentFormatter  # noqa: E402

from . import ledger as L  # noqa: E402
from . import profile as P  # noqa: E402
from .pages import code_md, command_line, page, table_html, table_md  # noqa: E402
from .plots import style  # noqa: E402
from .run import RunResult  # noqa: E402
from .symbols import frame_name  # noqa: E402
from .units import human  # noqa: E402

REQUESTED, HANDED, RSS, WASTE, HELD = "#2ca02c", "#1f77b4", "#7f7f7f", "#d62728", "#ff7f0e"
bytes_axis = FuncFormatter(lambda v, _: human(v) if v >= 0 else "")

EXTRA_CSS = """
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.card { background: #f4f6f9; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card b { display: block; font-size: 20px; }
.card span { color: #5b6573; font-size: 12px; }
ul.advice li { margin: 4px 0; }
.frames { font-family: ui-monospace, monospace; font-size: 12px; color: #3b4554; white-space: pre; }
.warn { color: #9a5b00; }
table.kv td { text-align: left; }
table.lastleft td:last-child, table.lastleft th:last-child { text-align: left; white-space: normal; }
table.leaks td:nth-child(4), table.leaks th:nth-child(4) { text-align: left; }
"""


# ---- plots -------------------------------------------------------------------------------------


def plot_sizes(d: dict, path: Path) -> None:
    """Requested sizes, one bar per histogram bucket on a log2 axis, with p50/p90/p99."""
    fig, ax = plt.subplots(figsize=(9, 3.8))
    hist = [b for b in d["histogram"] if b["count"] > 0]
    lo = [max(b["lo"], 1) for b in hist]
    hi = [min(b["hi"], 1 << 48) + 1 for b in hist]
    ax.bar(lo, [b["count"] for b in hist], width=[h - w for w, h in zip(lo, hi)], align="edge", color=HANDED,
           edgecolor="white", linewidth=0.3)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: human(v) if v >= 1 else ""))
    ax.set_yscale("log")
    a = d["advice"]
    for q, ls in (("p50", "-"), ("p90", "--"), ("p99", ":")):
        v = a[f"{q}_size"]
        if v > 0:
            ax.axvline(v, color=WASTE, ls=ls, lw=1.2, label=f"{q}: ≤ {human(v)}")
    ax.set_xlabel("requested size")
    ax.set_ylabel("allocations")
    ax.set_title("Requested sizes (one bucket per size class)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_timeline(d: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.8))
    tl = d["timeline"]
    t = [s["t_ms"] / 1000 for s in tl]
    ax.plot(t, [s["rss"] for s in tl], color=RSS, lw=1.5, label="RSS")
    if any(s.get("held_bytes") for s in tl):  # ledgers of older versions lack held_bytes
        ax.fill_between(t, [s["live_bytes_handed_out"] for s in tl],
                        [s["live_bytes_handed_out"] + s.get("held_bytes", 0) for s in tl],
                        color=HELD, alpha=0.3, label="held by frugal's caches")
    ax.plot(t, [s["live_bytes_handed_out"] for s in tl], color=HANDED, lw=2, label="live, handed out")
    ax.plot(t, [s["live_bytes_requested"] for s in tl], color=REQUESTED, lw=2, ls="--", label="live, requested")
    ax.fill_between(t, [s["live_bytes_requested"] for s in tl], [s["live_bytes_handed_out"] for s in tl],
                    color=WASTE, alpha=0.15, label="waste handed out")
    ax.yaxis.set_major_formatter(bytes_axis)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds")
    ax.set_title(f"Live bytes and RSS over time ({len(tl)} samples)")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_classes(d: dict, path: Path) -> None:
    """Efficiency (requested / handed out) per class with traffic, bar width ~ nothing: the
    colour marks how many bytes went through the class."""
    rows = [c for c in d["classes"] if c["allocations"] > 0]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    labels = [L.class_label(c).replace(" B", "") for c in rows]
    eff = [L.efficiency(c["bytes_requested"], c["bytes_handed_out"]) for c in rows]
    x = range(len(rows))
    ax.bar(x, eff, color=[WASTE if e < 0.875 else HANDED for e in eff])
    ax.axhline(0.875, color=WASTE, ls=":", lw=1, label="87.5 %: frugal's bound on waste above 128 B")
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("requested / handed out")
    ax.set_title("Efficiency per size class")
    ax.legend(loc="lower right")
    ax2.bar(x, [c["bytes_handed_out"] for c in rows], color=HANDED, label="handed out")
    ax2.bar(x, [c["bytes_requested"] for c in rows], color=REQUESTED, width=0.5, label="requested")
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(bytes_axis)
    ax2.set_ylabel("bytes, cumulative")
    ax2.legend(loc="upper left")
    step = max(1, math.ceil(len(rows) / 40))  # at most 40 labels
    ax2.set_xticks(list(x)[::step], labels[::step], rotation=90, fontsize=7)
    ax2.set_xlabel("block size (B)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_leaks(d: dict, path: Path) -> None:
    sites = L.leak_sites(d)[:12]
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.42 * max(len(sites), 1)))
    names = [f"#{i} {L.site_function(s)}"[:60] for i, s in enumerate(sites, 1)]
    ax.barh(range(len(sites)), [s["bytes"] for s in sites], color=WASTE)
    for i, s in enumerate(sites):
        ax.text(s["bytes"], i, f"  {s['count']:,} block{'s' if s['count'] != 1 else ''}", va="center", fontsize=8)
    ax.set_yticks(range(len(sites)), names)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(bytes_axis)
    ax.set_xlim(0, max([s["bytes"] for s in sites] + [1]) * 1.25)
    ax.set_title("Live at exit, by call site (bytes)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(d: dict, out: Path) -> dict[str, Path]:
    style()
    made: dict[str, Path] = {}
    jobs = [("sizes", plot_sizes, bool(d["histogram"])), ("timeline", plot_timeline, len(d["timeline"]) >= 2),
            ("classes", plot_classes, bool(d["classes"])), ("leaks", plot_leaks, bool(L.leak_sites(d)))]
    for name, fn, wanted in jobs:
        path = out / f"{name}.png"
        path.unlink(missing_ok=True)
        if wanted:
            fn(d, path)
            made[name] = path
    return made


# ---- the tables both reports show ------------------------------------------------------------


def overview_rows(r: RunResult) -> list[list[str]]:
    o = r.outside
    rows = [["exit code", str(r.exit_code)],
            ["wall / user / sys", f"{o['wall']:.3f} s / {o['user']:.3f} s / {o['sys']:.3f} s"],
            ["peak RSS (outside)", human(o["maxrss"])], ["page faults (outside)", f"{o['minflt']:,} minor, "
                                                                                   f"{o['majflt']:,} major"]]
    d = r.ledger
    if d is not None:
        t, live = d["totals"], d["live"]
        rows += [["ledger", f"pid {d['pid']}, frugal {d['version']}"],
                 ["allocations / frees", f"{t['allocations']:,} / {t['frees']:,}"],
                 ["requested / handed out", f"{human(t['bytes_requested'])} / {human(t['bytes_handed_out'])}"],
                 ["efficiency (seed 1's % used)", f"{100 * t['efficiency']:.1f} %"],
                 ["live at exit", f"{live['blocks']:,} blocks, {human(live['bytes_requested'])} requested in "
                                  f"{human(live['bytes_handed_out'])}"],
                 ["peak live (sampled)", f"{human(live['peak_bytes_requested'])} requested, "
                                         f"{human(live['peak_bytes_handed_out'])} handed out"]]
    return rows


TABLE_CLASSES = 25  # classes in the HTML table; report.md lists all
CLASS_HEAD = ["class", "allocations", "frees", "live", "peak live", "requested", "handed out", "waste", "% used"]


def class_rows(d: dict, n: int | None = None) -> list[list[str]]:
    rows = L.top_classes(d, n or len(d["classes"]))
    return [[L.class_label(c), f"{c['allocations']:,}", f"{c['frees']:,}", f"{c['live_blocks']:,}",
             f"{c['peak_live_blocks']:,}", human(c["bytes_requested"]), human(c["bytes_handed_out"]),
             human(c["bytes_handed_out"] - c["bytes_requested"]), L.pct(c["bytes_requested"], c["bytes_handed_out"])]
            for c in rows]


HIDDEN_HEAD = ["what", "value", "meaning"]


def hidden_rows(r: RunResult) -> list[list[str]]:
    d = r.ledger
    assert d is not None
    h = L.hidden_costs(d, r.outside)
    c = d["counters"]
    return [
        ["fresh pages", f"{h['fresh_pages']:,} ({human(h['fresh_bytes'])})",
         "memory frugal carved untouched: each 4 KiB a page fault and kernel zeroing (seed 3)"],
        ["  small / large", f"{human(h['fresh_small_bytes'])} / {human(h['fresh_large_bytes'])}", ""],
        ["minor faults (process)", f"{h['minor_faults']:,}", "all the process's faults, frugal's and the program's"],
        ["kernel time (process)", f"{h['sys_s']:.3f} s", "where faults and zeroing are paid"],
        ["mmap / munmap", f"{c['mmap_calls']:,} ({human(c['mmap_bytes'])}) / {c['munmap_calls']:,} "
                          f"({human(c['munmap_bytes'])})", "address space taken and returned"],
        ["madvise / mremap", f"{c['madvise_calls']:,} ({human(c['madvise_bytes'])}) / {c['mremap_calls']:,}",
         "memory given back with the range kept; large blocks resized in place"],
        ["RSS at exit / peak", f"{human(d['process']['rss'])} / {human(d['process']['peak_rss'])}", ""],
    ]


CACHE_HEAD = ["cache", "hit rate", "hits", "misses", "other"]


def cache_rows(d: dict) -> list[list[str]]:
    return [[x.name, "—" if x.rate is None else f"{100 * x.rate:.1f} %", f"{x.hits:,}", f"{x.misses:,}", x.note]
            for x in L.cache_rates(d)]


LEAK_HEAD = ["#", "bytes", "blocks", "where", "call stack (innermost first)"]


def leak_rows(d: dict, sep: str) -> list[list[str]]:
    return [[str(i), human(s["bytes"]), f"{s['count']:,}", L.site_function(s),
             sep.join(frame_name(f) for f in s["frames"][:6])] for i, s in enumerate(L.leak_sites(d), 1)]


# ---- the sampled heap profile (--profile) ------------------------------------------------------

PROFILE_TABLES = (("alloc_bytes", "Top 20 sites by bytes allocated"), ("alloc_count", "Top 20 sites by blocks"))


def profile_markdown(r: RunResult) -> list[str]:
    if r.profile is None:
        return []
    parts = ["", "## Heap profile (sampled)", "", P.summary(r.profile), "",
             "![bytes allocated by call stack](flame-alloc.svg)", "", "![bytes live at the peak](flame-peak.svg)", ""]
    for by, title in PROFILE_TABLES:
        parts += [f"### {title}", "", table_md(P.SITE_HEAD, P.site_rows(r.profile, by)), ""]
    return parts


def profile_html(r: RunResult) -> list[str]:
    if r.profile is None:
        return []
    parts = ["<section><h2>Heap profile (sampled)</h2>", f"<p>{html.escape(P.summary(r.profile))}</p>"]
    for view in ("alloc", "peak", "live"):
        parts.append(f"<object type='image/svg+xml' data='flame-{view}.svg' style='width:100%'></object>")
    for by, title in PROFILE_TABLES:
        parts += [f"<h3>{title}</h3>", table_html(P.SITE_HEAD, P.site_rows(r.profile, by), cls="lastleft")]
    return parts + ["</section>"]


# ---- report.md and report.html -----------------------------------------------------------------


def run_markdown(r: RunResult, images: dict[str, Path]) -> str:
    d = r.ledger
    parts = [f"# frugal run: {code_md(command_line(r.argv))}", ""]
    parts += [f"**warning:** {p}  " for p in r.problems]
    parts += ["", table_md(["", ""], overview_rows(r)), ""]
    if d is None:
        return "\n".join(parts + ["No ledger: nothing more to report.", ""])
    parts += ["## Seed 1's advice", ""] + [f"- {a}" for a in L.advice(d)]
    parts += ["", "## Requested sizes", "", "![sizes](sizes.png)" if "sizes" in images else "(no allocations)"]
    if "timeline" in images:
        parts += ["", "## Live bytes and RSS over time", "", "![timeline](timeline.png)"]
    parts += ["", "## Size classes", ""]
    if "classes" in images:
        parts += ["![classes](classes.png)", ""]
    parts += [table_md(CLASS_HEAD, class_rows(d))]
    parts += ["", "## Hidden costs", "", table_md(HIDDEN_HEAD, hidden_rows(r))]
    parts += ["", "## Caches", "", table_md(CACHE_HEAD, cache_rows(d))]
    if d.get("leaks") is not None:
        lk = d["leaks"]
        parts += ["", "## Leaks", "", f"{lk['blocks']:,} blocks, {human(lk['bytes'])} live at exit; top sites by "
                                     "bytes.", ""]
        if "leaks" in images:
            parts += ["![leaks](leaks.png)", ""]
        parts += [table_md(LEAK_HEAD, leak_rows(d, " ← "))]
    else:
        parts += ["", "Leaks were not recorded: `frugal run --leaks` records a call stack per block."]
    parts += profile_markdown(r)
    parts += ["", "Raw numbers: `ledger.json` (schema: `frugal/ledger.schema.json`).", ""]
    return "\n".join(parts)


def cards(r: RunResult) -> str:
    d = r.ledger
    items = [("exit code", str(r.exit_code)), ("wall", f"{r.outside['wall']:.2f} s"),
             ("peak RSS", human(r.outside["maxrss"]))]
    if d is not None:
        t = d["totals"]
        items += [("allocations", f"{t['allocations']:,}"), ("efficiency", f"{100 * t['efficiency']:.1f} %"),
                  ("live at exit", human(d["live"]["bytes_handed_out"])),
                  ("cache cutoff (p90)", human(d["advice"]["p90_size"]))]
        if d.get("leaks") is not None:
            items.append(("leaked", f"{human(d['leaks']['bytes'])} in {d['leaks']['blocks']:,}"))
    return "<div class='cards'>" + "".join(f"<div class='card'><b>{html.escape(v)}</b><span>{html.escape(k)}</span>"
                                            "</div>" for k, v in items) + "</div>"


def run_html(r: RunResult, images: dict[str, Path]) -> str:
    d = r.ledger
    cmd = command_line(r.argv)
    parts = ["<section><h2>Overview</h2>", cards(r)]
    parts += [f"<p class='warn'>warning: {html.escape(p)}</p>" for p in r.problems]
    parts += [table_html(["", ""], overview_rows(r), cls="kv"), "</section>"]
    if d is not None:
        parts += ["<section><h2>Seed 1's advice</h2><ul class='advice'>"]
        parts += [f"<li>{html.escape(a)}</li>" for a in L.advice(d)]
        parts += ["</ul>"]
        if "sizes" in images:
            parts.append("<img src='sizes.png' alt='histogram of requested sizes'>")
        parts.append("</section>")
        if "timeline" in images:
            parts += ["<section><h2>Live bytes and RSS over time</h2>",
                      "<p class='note'>The gap between handed out and requested is the waste the size classes hand "
                      "out; the gap up to RSS is what the allocator and the program hold beyond live blocks.</p>",
                      "<img src='timeline.png' alt='live bytes and RSS over time'></section>"]
        parts += ["<section><h2>Size classes</h2>"]
        if "classes" in images:
            parts.append("<img src='classes.png' alt='efficiency per class'>")
        shown = class_rows(d, TABLE_CLASSES)
        parts.append(table_html(CLASS_HEAD, shown))
        if len(d["classes"]) > len(shown):
            parts.append(f"<p class='note'>The {len(shown)} classes with the most bytes handed out, of "
                         f"{len(d['classes'])}; report.md and ledger.json have them all.</p>")
        parts.append("</section>")
        parts += ["<section><h2>Hidden costs</h2>", table_html(HIDDEN_HEAD, hidden_rows(r), cls="lastleft"), "<h3>Caches</h3>",
                  table_html(CACHE_HEAD, cache_rows(d), cls="lastleft"), "</section>"]
        parts.append("<section><h2>Leaks</h2>")
        if d.get("leaks") is not None:
            lk = d["leaks"]
            parts.append(f"<p>{lk['blocks']:,} blocks, {html.escape(human(lk['bytes']))} live at exit; the top "
                         "call sites by bytes.</p>")
            if "leaks" in images:
                parts.append("<img src='leaks.png' alt='leaks by call site'>")
            parts.append(table_html(LEAK_HEAD, leak_rows(d, "\n"), frames_last=True, cls="lastleft leaks"))
        else:
            parts.append("<p class='note'>Not recorded: <code>frugal run --leaks</code> records a call stack per "
                         "block.</p>")
        parts.append("</section>")
    parts += profile_html(r)
    parts += ["<p class='note'>Raw numbers: <code>ledger.json</code> (schema: <code>frugal/ledger.schema.json</code>)."
              "</p>"]
    return page(f"frugal run: {cmd}", "frugal run", [f"<p><code>{html.escape(cmd)}</code></p>"], parts, EXTRA_CSS)


def write_run_reports(r: RunResult, plots: bool = True) -> list[Path]:
    images = write_plots(r.ledger, r.out) if (plots and r.ledger is not None) else {}
    md, page_file = r.out / "report.md", r.out / "report.html"
    md.write_text(run_markdown(r, images))
    page_file.write_text(run_html(r, images))
    return [md, page_file, *images.values()]

