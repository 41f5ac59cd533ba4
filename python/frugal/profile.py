"""The heap profile of `frugal run --profile`: the library's sampled estimates (DIR/profile.json,
written at exit under FRUGAL_PROFILE=DIR) named by function, file and line, as folded stacks
(`root;...;leaf BYTES`, what flame-graph tools read), flame graphs in SVG drawn here, and the
top sites. Each stack's figures are already unbiased estimates (the library weights a sample
of s bytes by s / (1 - exp(-s/T))); this module only names and arranges them."""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path

from . import ledger as L
from .symbols import frame_name, symbolize_frames
from .units import human

# What each folded file holds: the stacks' figure it sums, and how a report names it.
VIEWS = {"alloc": ("alloc_bytes", "bytes allocated over the run"),
         "live": ("live_bytes", "bytes live at exit"),
         "peak": ("peak_bytes", "bytes live at the peak")}


def load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    if doc.get("schema") != "frugal-profile/1":
        raise ValueError(f"{path}: not a frugal profile (schema {doc.get('schema')!r})")
    return doc


def symbolize(doc: dict, program: Path | None, cwd: Path | None = None) -> None:
    symbolize_frames([f for s in doc["stacks"] for f in s["frames"]], program=program, cwd=cwd)


def folded_frame(f: dict, leaf: bool) -> str:
    """A frame's name in a folded line: the function, so that a flame graph merges its calls
    from different lines; the allocating frame (and one without a name) also says where.
    `;` separates frames there, so none may hold one."""
    name = f.get("function") or f.get("symbol")
    return (name if name and not leaf else frame_name(f)).replace(";", ":")


def folded(doc: dict, view: str) -> list[str]:
    """One line per stack with bytes in this view, root first, heaviest first."""
    key = VIEWS[view][0]
    stacks = sorted((s for s in doc["stacks"] if round(s[key]) > 0), key=lambda s: -s[key])
    return [";".join(folded_frame(f, f is s["frames"][0]) for f in reversed(s["frames"])) + f" {round(s[key])}"
            for s in stacks]


@dataclass
class Sites:
    """Stacks grouped by the function a reader would go and fix (ledger.site_function)."""

    name: str
    where: str
    alloc_bytes: float = 0
    alloc_count: float = 0
    live_bytes: float = 0
    peak_bytes: float = 0
    stacks: list[dict] = field(default_factory=list)


def sites(doc: dict) -> list[Sites]:
    by: dict[str, Sites] = {}
    for s in doc["stacks"]:
        name = L.site_function(s)
        frame = next((f for f in s["frames"] if (f.get("function") or f.get("symbol")) == name), None)
        site = by.setdefault(name, Sites(name, frame_name(frame) if frame else name))
        site.alloc_bytes += s["alloc_bytes"]
        site.alloc_count += s["alloc_count"]
        site.live_bytes += s["live_bytes"]
        site.peak_bytes += s["peak_bytes"]
        site.stacks.append(s)
    return list(by.values())


def top_sites(doc: dict, by: str, n: int = 20) -> list[Sites]:
    """The n sites with the most of `by` (alloc_bytes, alloc_count, live_bytes, peak_bytes)."""
    return sorted((s for s in sites(doc) if getattr(s, by) >= 0.5), key=lambda s: -getattr(s, by))[:n]


# ---- flame graphs -----------------------------------------------------------------------------

@dataclass
class Node:
    name: str
    value: float = 0
    children: dict[str, "Node"] = field(default_factory=dict)


def tree(lines: list[str]) -> Node:
    """Folded lines into a tree whose every node's value is the sum of its stacks below."""
    root = Node("all")
    for line in lines:
        path, _, value = line.rpartition(" ")
        v = float(value)
        root.value += v
        node = root
        for name in path.split(";") if path else []:
            node = node.children.setdefault(name, Node(name))
            node.value += v
    return root


def colour(name: str) -> str:
    """Warm, and the same for a function in every graph, so two graphs compare at a glance."""
    h = hashlib.blake2s(name.encode(), digest_size=3).digest()
    return f"rgb({205 + h[0] % 50},{80 + h[1] % 130},{h[2] % 60})"


FRAME_H, FONT, CHAR_W, PAD = 17, 11, 6.2, 10


def flame_svg(lines: list[str], title: str, width: int = 1200) -> str:
    """A flame graph: the root at the bottom, each frame as wide as its share of the bytes,
    callees stacked above their caller, children heaviest first from the left. Hovering a
    frame shows its name and bytes (an SVG <title>)."""
    root = tree(lines)
    depth = 0

    def measure(node: Node, d: int) -> None:
        nonlocal depth
        depth = max(depth, d)
        for c in node.children.values():
            measure(c, d + 1)

    measure(root, 0)
    height = (depth + 1) * FRAME_H + 3 * PAD + FONT
    scale = (width - 2 * PAD) / root.value if root.value > 0 else 0
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' font-family='monospace' font-size='{FONT}'>",
           f"<rect width='100%' height='100%' fill='#fdfdfd'/>",
           f"<text x='{width / 2}' y='{PAD + FONT}' text-anchor='middle' font-size='{FONT + 3}'>"
           f"{html.escape(title)}</text>"]

    def draw(node: Node, x: float, d: int) -> None:
        w = node.value * scale
        if w < 0.5:
            return
        y = height - PAD - (d + 1) * FRAME_H
        share = 100 * node.value / root.value
        label = f"{node.name}: {human(round(node.value))} ({share:.1f} %)"
        out.append(f"<g><title>{html.escape(label)}</title><rect x='{x:.1f}' y='{y}' width='{w:.1f}' "
                   f"height='{FRAME_H - 1}' rx='2' fill='{'#c8c8c8' if d == 0 else colour(node.name)}'/>")
        fits = int((w - 6) / CHAR_W)
        if fits >= 3:
            text = node.name if len(node.name) <= fits else node.name[:fits - 2] + ".."
            out.append(f"<text x='{x + 3:.1f}' y='{y + FRAME_H - 5}'>{html.escape(text)}</text>")
        out.append("</g>")
        cx = x
        for c in sorted(node.children.values(), key=lambda c: -c.value):
            draw(c, cx, d + 1)
            cx += c.value * scale

    if root.value > 0:
        draw(root, PAD, 0)
    else:
        out.append(f"<text x='{PAD}' y='{height / 2}'>no bytes in this view</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(doc: dict, out: Path) -> list[Path]:
    """DIR/{alloc,live,peak}.folded (named again, by file and line) and DIR/flame-*.svg."""
    files = []
    for view, (_, what) in VIEWS.items():
        lines = folded(doc, view)
        f = out / f"{view}.folded"
        f.write_text("".join(line + "\n" for line in lines))
        svg = out / f"flame-{view}.svg"
        svg.write_text(flame_svg(lines, f"{what} (estimated from {doc['samples']:,} samples, "
                                        f"one per {human(doc['sample_bytes'])} on average)"))
        files += [f, svg]
    return files


# ---- the report's tables ------------------------------------------------------------------------

SITE_HEAD = ["#", "allocated", "blocks", "live at peak", "live at exit", "site"]


def site_rows(doc: dict, by: str, n: int = 20) -> list[list[str]]:
    """The top sites by `by` (alloc_bytes or alloc_count), estimates rounded as they deserve."""
    return [[str(i), "~" + human(round(s.alloc_bytes)), f"~{round(s.alloc_count):,}",
             "~" + human(round(s.peak_bytes)), "~" + human(round(s.live_bytes)), s.where]
            for i, s in enumerate(top_sites(doc, by, n), 1)]


def summary(doc: dict) -> str:
    t = doc["totals"]
    return (f"Estimated from {doc['samples']:,} sampled allocations (one per {human(doc['sample_bytes'])} "
            f"allocated, on average): ~{human(round(t['alloc_bytes']))} allocated, "
            f"~{human(round(t['peak_live_bytes']))} live at the peak, ~{human(round(t['live_bytes']))} at exit. "
            "Folded stacks: alloc.folded, peak.folded, live.folded.")
