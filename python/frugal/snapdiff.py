"""`frugal diff A B`: two snapshots of a program (frugal snapshot's directories, or two `frugal run
--profile` outputs) side by side: the call sites (sampled heap profile) and the size classes
(ledger) whose live bytes grew from A to B, biggest first, and the process's figures (RSS, live
bytes, caches, fresh bytes, faults, OS calls) with their change and rate. Written as text on
stdout, and as DIR/diff.md, diff.html, diff.json and a flame graph of the growth
(flame-growth.svg: each call stack as wide as the bytes it added)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import ledger as L
from . import profile as P
from .pages import page, table_html, table_md
from .snapshot import EXTRA_CSS, Saved, held_bytes
from .units import human


def signed(n: float) -> str:
    return ("+" if n >= 0 else "−") + human(abs(n))


def stack_key(stack: dict) -> tuple:
    return tuple((f.get("module", "?"), int(f.get("offset", 0))) for f in stack["frames"])


@dataclass
class SiteGrowth:
    name: str
    where: str
    before: float
    after: float
    blocks_before: float
    blocks_after: float
    samples: int  # samples of B at this site

    @property
    def growth(self) -> float:
        return self.after - self.before

    @property
    def blocks(self) -> float:
        return self.blocks_after - self.blocks_before


@dataclass
class ClassGrowth:
    label: str
    block_size: int
    before: int
    after: int
    blocks_before: int
    blocks_after: int

    @property
    def growth(self) -> int:
        return self.after - self.before

    @property
    def blocks(self) -> int:
        return self.blocks_after - self.blocks_before


@dataclass
class Diff:
    a: Saved
    b: Saved
    sites: list[SiteGrowth] = field(default_factory=list)  # every site, biggest growth first
    classes: list[ClassGrowth] = field(default_factory=list)
    totals: list[tuple[str, float | None, float | None, str]] = field(default_factory=list)  # name, A, B, kind
    growth_lines: list[str] = field(default_factory=list)  # folded stacks of the growth
    notes: list[str] = field(default_factory=list)
    site_source: str = "sampled estimates"

    @property
    def seconds(self) -> float | None:
        if self.a.time is None or self.b.time is None:
            return None
        return self.b.time - self.a.time

    def grown_sites(self) -> list[SiteGrowth]:
        return [s for s in self.sites if round(s.growth) > 0]

    def grown_classes(self) -> list[ClassGrowth]:
        return [c for c in self.classes if c.growth > 0]


def site_growth(a: dict | None, b: dict) -> list[SiteGrowth]:
    before = {s.name: s for s in P.sites(a)} if a is not None else {}
    out = []
    for s in P.sites(b):
        old = before.pop(s.name, None)
        out.append(SiteGrowth(s.name, s.where, old.live_bytes if old else 0.0, s.live_bytes,
                              sum(x["live_count"] for x in old.stacks) if old else 0.0,
                              sum(x["live_count"] for x in s.stacks), sum(x["samples"] for x in s.stacks)))
    for old in before.values():  # sites whose every sample was freed
        out.append(SiteGrowth(old.name, old.where, old.live_bytes, 0.0, sum(x["live_count"] for x in old.stacks),
                              0.0, 0))
    return sorted(out, key=lambda s: -s.growth)


LEAK_SITES = 20  # the ledger's leak report: the top 20 sites by bytes (LEAK_TOP in src/stats_report.c)


def leaks_as_profile(ledger: dict | None) -> dict | None:
    """The ledger's blocks live by call site (FRUGAL_LEAKS: exact, its top sites) in the
    profile's form, for a program run without a profile."""
    if not ledger or not isinstance(ledger.get("leaks"), dict):
        return None
    stacks = [{"samples": 0, "alloc_bytes": 0, "alloc_count": 0, "live_bytes": s["bytes"], "live_count": s["count"],
               "peak_bytes": 0, "peak_count": 0, "frames": s["frames"]} for s in L.leak_sites(ledger)]
    return {"schema": "frugal-profile/1", "samples": 0, "sample_bytes": 0, "stacks": stacks,
            "totals": {"alloc_bytes": 0, "live_bytes": ledger["leaks"]["bytes"], "peak_live_bytes": 0}}


def growth_folded(a: dict | None, b: dict) -> list[str]:
    """Folded stacks of the bytes each call stack added from A to B (those that grew)."""
    before = {stack_key(s): s["live_bytes"] for s in (a["stacks"] if a else [])}
    lines = []
    for s in b["stacks"]:
        g = s["live_bytes"] - before.get(stack_key(s), 0)
        if round(g) > 0:
            fr = s["frames"]
            lines.append(";".join(P.folded_frame(f, f is fr[0]) for f in reversed(fr)) + f" {round(g)}")
    return sorted(lines, key=lambda line: -int(line.rpartition(" ")[2]))


def class_growth(a: dict, b: dict) -> list[ClassGrowth]:
    def key(c: dict) -> tuple:
        return (bool(c.get("large")), c.get("block_size", 0))

    before = {key(c): c for c in a.get("classes", [])}
    out = []
    for c in b.get("classes", []):
        old = before.get(key(c), {})
        out.append(ClassGrowth(L.class_label(c), c.get("block_size", 0), old.get("live_bytes_handed_out", 0),
                               c["live_bytes_handed_out"], old.get("live_blocks", 0), c["live_blocks"]))
    return sorted(out, key=lambda c: -c.growth)


def totals(a: dict | None, b: dict | None, pa: dict | None, pb: dict | None) -> list[tuple]:
    rows: list[tuple] = []

    def both(name: str, get, kind: str = "bytes") -> None:
        va = get(a) if a is not None else None
        vb = get(b) if b is not None else None
        rows.append((name, va, vb, kind))

    both("RSS", lambda d: d["process"]["rss"])
    if a is not None and b is not None and a.get("ledger") and b.get("ledger"):
        both("live, handed out (ledger)", lambda d: d["live"]["bytes_handed_out"])
        both("live, requested (ledger)", lambda d: d["live"]["bytes_requested"])
        both("live blocks (ledger)", lambda d: d["live"]["blocks"], "count")
    if pa is not None and pb is not None:
        rows.append(("live (profile estimate)", pa["totals"]["live_bytes"], pb["totals"]["live_bytes"], "bytes"))
    both("held by frugal's caches", held_bytes)
    both("fresh bytes carved", lambda d: d["counters"]["fresh_bytes"] + d["counters"]["fresh_large_bytes"])
    if a is not None and b is not None and a.get("ledger") and b.get("ledger"):
        both("allocations", lambda d: d["totals"]["allocations"], "count")
        both("frees", lambda d: d["totals"]["frees"], "count")
    both("minor faults", lambda d: d["process"]["minor_faults"], "count")
    for call in ("mmap", "munmap", "madvise"):
        both(f"{call} calls", lambda d, call=call: d["counters"][f"{call}_calls"], "count")
    both("CPU user + sys (s)", lambda d: (d["process"]["user_us"] + d["process"]["sys_us"]) / 1e6, "seconds")
    return rows


def diff(a: Saved, b: Saved) -> Diff:
    out = Diff(a, b)
    if a.pid is not None and b.pid is not None and a.pid != b.pid:
        out.notes.append(f"A is of pid {a.pid} and B of pid {b.pid}: two processes, not one over time")
    if a.time is not None and b.time is not None and b.time < a.time:
        out.notes.append("B was taken before A: growth reads backwards (give the older snapshot first)")
    if b.profile is not None:
        if a.profile is None:
            out.notes.append("A has no profile: every live byte of B's profile counts as growth")
        out.sites = site_growth(a.profile, b.profile)
        out.growth_lines = growth_folded(a.profile, b.profile)
    elif leaks_as_profile(b.ledger) is not None:
        pa, pb = leaks_as_profile(a.ledger), leaks_as_profile(b.ledger)
        out.site_source = f"FRUGAL_LEAKS, exact, the top {LEAK_SITES} sites of each"
        out.sites = site_growth(pa, pb)
        out.growth_lines = growth_folded(pa, pb)
    else:
        out.notes.append("B has no heap profile (FRUGAL_PROFILE=DIR): no call sites to compare")
    if a.ledger and b.ledger and a.ledger.get("ledger") and b.ledger.get("ledger"):
        out.classes = class_growth(a.ledger, b.ledger)
    else:
        out.notes.append("the ledger was off in A or B (FRUGAL_STATS=1 or FRUGAL_STATS_FILE): no size classes to "
                         "compare")
    out.totals = totals(a.ledger, b.ledger, a.profile, b.profile)
    return out


# ---- text, tables, files ----------------------------------------------------------------------


def value_text(v: float | None, kind: str) -> str:
    if v is None:
        return "—"
    return human(v) if kind == "bytes" else f"{v:.2f}" if kind == "seconds" else f"{round(v):,}"


def change_text(a: float | None, b: float | None, kind: str, seconds: float | None) -> tuple[str, str]:
    if a is None or b is None:
        return "—", "—"
    d = b - a
    ch = signed(d) if kind == "bytes" else f"{d:+.2f}" if kind == "seconds" else f"{round(d):+,}"
    if not seconds or seconds <= 0:
        return ch, "—"
    r = d / seconds
    rate = (signed(r) + "/s") if kind == "bytes" else f"{100 * r:.0f} % of a core" if kind == "seconds" else \
        f"{r:+,.1f}/s"
    return ch, rate


TOTALS_HEAD = ["", "A", "B", "change", "per second"]
SITE_HEAD = ["#", "grew by", "A: live", "B: live", "blocks added", "site"]
CLASS_HEAD = ["class", "grew by", "A: live", "B: live", "blocks added"]


def totals_rows(d: Diff) -> list[list[str]]:
    return [[name, value_text(a, kind), value_text(b, kind), *change_text(a, b, kind, d.seconds)]
            for name, a, b, kind in d.totals]


def site_row(d: Diff, i: int, s: SiteGrowth) -> list[str]:
    t = "~" if d.site_source.startswith("sampled") else ""  # estimates read as such
    return [str(i), t + signed(s.growth), t + human(s.before), t + human(s.after), f"{t}{s.blocks:+,.0f}", s.where]


def site_rows(d: Diff, n: int = 20) -> list[list[str]]:
    return [site_row(d, i, s) for i, s in enumerate(d.grown_sites()[:n], 1)]


def shrunk_rows(d: Diff, n: int = 10) -> list[list[str]]:
    shrunk = sorted((s for s in d.sites if round(s.growth) < 0), key=lambda s: s.growth)[:n]
    return [site_row(d, i, s) for i, s in enumerate(shrunk, 1)]


def class_rows(d: Diff, n: int = 20) -> list[list[str]]:
    return [[c.label, signed(c.growth), human(c.before), human(c.after), f"{c.blocks:+,}"]
            for c in d.grown_classes()[:n]]


def interval_text(d: Diff) -> str:
    s = d.seconds
    return "unknown time apart" if s is None else f"{s:.1f} s apart"


def write(d: Diff, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    svg = out / "flame-growth.svg"
    if d.growth_lines:
        total = sum(int(line.rpartition(" ")[2]) for line in d.growth_lines)
        svg.write_text(P.flame_svg(d.growth_lines, f"bytes live in B and not in A, by call stack: ~{human(total)} "
                                                   f"added ({interval_text(d)})"))
        (out / "growth.folded").write_text("".join(line + "\n" for line in d.growth_lines))
        files += [svg, out / "growth.folded"]
    else:
        svg.unlink(missing_ok=True)
    (out / "diff.json").write_text(json.dumps(as_json(d), indent=1) + "\n")
    (out / "diff.md").write_text(markdown(d))
    (out / "diff.html").write_text(report_html(d))
    return files + [out / "diff.json", out / "diff.md", out / "diff.html"]


def as_json(d: Diff) -> dict:
    return {"schema": "frugal-diff/1", "a": str(d.a.path), "b": str(d.b.path), "seconds": d.seconds,
            "notes": d.notes, "site_source": d.site_source,
            "totals": [{"name": n, "a": a, "b": b, "kind": k} for n, a, b, k in d.totals],
            "sites": [{"name": s.name, "where": s.where, "growth_bytes": s.growth, "a_live_bytes": s.before,
                       "b_live_bytes": s.after, "growth_blocks": s.blocks, "b_samples": s.samples}
                      for s in d.sites],
            "classes": [{"class": c.label, "block_size": c.block_size, "growth_bytes": c.growth,
                         "a_live_bytes": c.before, "b_live_bytes": c.after, "growth_blocks": c.blocks}
                        for c in d.classes]}


def heading(d: Diff) -> str:
    return f"frugal diff: {d.a.path.name} → {d.b.path.name}"


def markdown(d: Diff) -> str:
    parts = [f"# {heading(d)}", "", f"- A: `{d.a.path}` — {d.a.when}", f"- B: `{d.b.path}` — {d.b.when}",
             f"- {interval_text(d)}", ""]
    parts += [f"**note:** {n}  " for n in d.notes]
    parts += ["", table_md(TOTALS_HEAD, totals_rows(d)), ""]
    if d.sites:
        parts += [f"## Call sites whose live bytes grew ({d.site_source})", ""]
        if d.growth_lines:
            parts += ["![growth by call stack](flame-growth.svg)", ""]
        rows = site_rows(d)
        parts += [table_md(SITE_HEAD, rows) if rows else "No call site grew.", ""]
        shrunk = shrunk_rows(d)
        if shrunk:
            parts += ["### Call sites whose live bytes shrank", "", table_md(SITE_HEAD, shrunk), ""]
    if d.classes:
        rows = class_rows(d)
        parts += ["## Size classes whose live bytes grew (ledger, exact)", "",
                  table_md(CLASS_HEAD, rows) if rows else "No class grew.", ""]
    return "\n".join(parts)


def report_html(d: Diff) -> str:
    parts = ["<section><h2>Overview</h2>",
             table_html(["", ""], [["A", f"{d.a.path} — {d.a.when}"], ["B", f"{d.b.path} — {d.b.when}"],
                                   ["between", interval_text(d)]], cls="kv")]
    parts += [f"<p class='warn'>note: {html.escape(n)}</p>" for n in d.notes]
    parts += [table_html(TOTALS_HEAD, totals_rows(d)), "</section>"]
    if d.sites:
        parts += [f"<section><h2>Call sites whose live bytes grew ({html.escape(d.site_source)})</h2>"]
        if d.growth_lines:
            parts += ["<p class='note'>Each call stack as wide as the bytes it holds in B beyond what it held in A; "
                      "hover a frame for its figure.</p>",
                      "<object class='flame' type='image/svg+xml' data='flame-growth.svg'></object>"]
        rows = site_rows(d)
        parts.append(table_html(SITE_HEAD, rows, cls="lastleft") if rows else "<p>No call site grew.</p>")
        shrunk = shrunk_rows(d)
        if shrunk:
            parts += ["<h3>Call sites whose live bytes shrank</h3>", table_html(SITE_HEAD, shrunk, cls="lastleft")]
        parts.append("</section>")
    if d.classes:
        rows = class_rows(d)
        parts += ["<section><h2>Size classes whose live bytes grew (ledger, exact)</h2>",
                  table_html(CLASS_HEAD, rows) if rows else "<p>No class grew.</p>", "</section>"]
    parts.append("<p class='note'>Raw numbers: <code>diff.json</code>; folded stacks of the growth: "
                 "<code>growth.folded</code>.</p>")
    return page(heading(d), "frugal diff", [f"<p>{html.escape(d.a.label)} → {html.escape(d.b.label)}, "
                                            f"{html.escape(interval_text(d))}</p>"], parts, EXTRA_CSS)
