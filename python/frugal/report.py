"""The lab's report.md and report.html: the summary line, frugal's verdicts, and per experiment
its parameters, plot and tables (their pieces: pages.py)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .experiments import Experiment, Table
from .lab import FRUGAL, LEDGER, LEDGER_MAX
from .pages import code_md, page, table_html, table_md
from .plots import plot

if TYPE_CHECKING:
    from .bench import LabRun

BADGE = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a"}


def param_text(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return str(v)


def meta_lines(lab: "LabRun") -> list[str]:
    m = lab.meta
    mach = m.get("machine", {})
    found = ", ".join(a["name"] for a in m.get("allocators", []) if a["available"])
    skipped = "; ".join(f"{a['name']} ({a['reason']})" for a in m.get("allocators", []) if not a["available"])
    lines = [
        f"{m.get('mode', '?')} mode · {m.get('started', '')} · {m.get('duration_s', 0):.0f} s · "
        f"{mach.get('cores', '?')} cores · {mach.get('cpu', '')} · Linux {mach.get('kernel', '')}",
        f"Allocators measured: {found or 'none'}" + (f" · skipped: {skipped}" if skipped else ""),
    ]
    if m.get("mode") != "full":
        lines.append("Sizes are scaled down from the seeds' (see each experiment's parameters); "
                     "`frugal bench --full` runs the seeds' own sizes.")
    return lines


def summary_table(lab: "LabRun") -> tuple[list[str], list[list[str]]]:
    from .bench import summary_rows

    ledger = ["ledger"] if LEDGER in lab.variants else []
    return ["experiment"] + lab.competitors + ledger + ["frugal verdicts"], summary_rows(lab)


def summary_note(lab: "LabRun") -> str:
    """What the summary table's numbers are."""
    note = ("Time and peak RSS of each allocator as a ratio to the best of the others "
            "(geometric mean over the experiment's cells; < 1.00 wins).")
    if LEDGER in lab.variants:
        note += (f" ledger: frugal's time with the ledger on ({LEDGER}: FRUGAL_STATS_FILE=/dev/null) over "
                 f"its time with it off (issue #4: ≤ {LEDGER_MAX:.2f}), on the cells listed in the "
                 f"experiment's section (every timed cell in full mode, a representative few "
                 f"otherwise), interleaved with the other runs; it competes with no one.")
    return note


def report_tables(lab: "LabRun", exp: Experiment) -> list[Table]:
    """An experiment's own tables, then what the ledger cost on each of its cells."""
    res = lab.results.get(exp.name)
    if res is None:
        return []
    tables = exp.tables(res, lab.ctx)
    cost = lab.ledger.get(exp.name)
    if cost and cost["per_cell"]:
        rows = [[c, f"{res.m(FRUGAL, c, 'wall'):.3f}", f"{res.m(LEDGER, c, 'wall'):.3f}", f"{r:.2f}"]
                for c, r in cost["per_cell"].items()]
        tables.append(("Ledger on / off: median wall time (s) per cell", ["cell", FRUGAL, LEDGER, "on / off"], rows))
    return tables


def errors_of(lab: "LabRun", name: str) -> list[str]:
    res = lab.results.get(name)
    if not res:
        return []
    out = []
    for a, cells in res.errors.items():
        for cell, errs in cells.items():
            for e in errs:
                out.append(f"{a} · {cell}: {e}")
    return out


def write_reports(lab: "LabRun", out: Path) -> dict[str, Path]:
    """Plot every experiment, then write report.md and report.html; returns the images."""
    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, Path] = {}
    for e in lab.experiments:
        res = lab.results.get(e.name)
        if res is None:
            continue
        path = out / f"{e.name}.png"
        plot(e.name, res, lab.ctx, path)
        images[e.name] = path
    (out / "report.md").write_text(lab_markdown(lab, images))
    (out / "report.html").write_text(lab_html(lab, images))
    return images


def lab_markdown(lab: "LabRun", images: dict[str, Path]) -> str:
    parts = ["# frugal seed lab", ""]
    parts += [f"{line}  " for line in meta_lines(lab)]
    head, rows = summary_table(lab)
    parts += ["", "## Summary", "", summary_note(lab), "",
              table_md(head, rows), "", "### frugal's verdicts", ""]
    for v in lab.all_verdicts():
        parts.append(f"- **{BADGE[v.status]}** {v.experiment}: {v.name} — {v.detail}")
    for i, e in enumerate(lab.experiments, 1):
        parts += ["", f"## {i}. {e.name} — {e.title} (seed {e.seed})", "", e.about, ""]
        parts += [f"- {k}: {param_text(v)}" for k, v in e.params(lab.ctx).items()]
        parts += [""] + [f"- **{BADGE[v.status]}** {v.name} — {v.detail}" for v in lab.verdicts.get(e.name, [])]
        if e.name in images:
            parts += ["", f"![{e.name}]({images[e.name].name})"]
        for caption, head, rows in report_tables(lab, e):
            parts += ["", f"**{caption}**", "", table_md(head, rows)]
        errs = errors_of(lab, e.name)
        if errs:
            parts += ["", "**Failed runs**", ""] + [f"- `{x[:300]}`" for x in errs[:20]]
    parts += ["", f"Raw and summarised numbers: `results.json`. Command: {code_md(str(lab.meta.get('command', '')))}", ""]
    return "\n".join(parts)


def verdict_html(vs: list[Any]) -> str:
    items = []
    for v in vs:
        cls = {"pass": "pass", "fail": "fail"}.get(v.status, "na")
        items.append(f'<li><span class="badge {cls}">{BADGE[v.status]}</span>{html.escape(v.name)}'
                     f' <span class="detail">— {html.escape(v.detail)}</span></li>')
    return '<ul class="verdicts">' + "".join(items) + "</ul>"


def lab_html(lab: "LabRun", images: dict[str, Path]) -> str:
    head, rows = summary_table(lab)
    meta = "".join(f"<p>{html.escape(line)}</p>" for line in meta_lines(lab))
    parts = [
        f"<section><h2>Summary</h2><p class='note'>{html.escape(summary_note(lab))}</p>",
        table_html(head, rows),
        "<h3>frugal's verdicts (LAB.md; the ledger's price: issue #4)</h3>",
        verdict_html(lab.all_verdicts()),
        "</section>",
    ]
    for i, e in enumerate(lab.experiments, 1):
        params = " · ".join(f"{html.escape(k)}: <code>{html.escape(param_text(v))}</code>"
                            for k, v in e.params(lab.ctx).items())
        parts += [f"<section><h2>{i}. {html.escape(e.name)} — {html.escape(e.title)} "
                  f"<span class='note'>(seed {e.seed})</span></h2>",
                  f"<p>{html.escape(e.about)}</p><p class='params'>{params}</p>",
                  verdict_html(lab.verdicts.get(e.name, []))]
        if e.name in images:
            parts.append(f"<img src='{html.escape(images[e.name].name)}' alt='{html.escape(e.name)} plot'>")
        for caption, thead, trows in report_tables(lab, e):
            parts += [f"<h3>{html.escape(caption)}</h3>", table_html(thead, trows)]
        errs = errors_of(lab, e.name)
        if errs:
            parts += ["<h3>Failed runs</h3>"] + [f"<div class='err'>{html.escape(x[:300])}</div>" for x in errs[:20]]
        parts.append("</section>")
    parts += [f"<p class='note'>Raw and summarised numbers: <code>results.json</code>. Command: "
              f"<code>{html.escape(str(lab.meta.get('command', '')))}</code></p>",
              f"<script type='application/json' id='meta'>{html.escape(json.dumps(lab.meta))}</script>"]
    return page("frugal seed lab", "frugal seed lab", [meta], parts)
