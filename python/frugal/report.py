"""The lab's report.md and report.html: the summary line, frugal's verdicts, what the variants
cost, and per experiment its parameters, plot and tables (their pieces: pages.py)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .allocators import REPRESENTATIVE_CELLS, VARIANTS, Allocator, option_of
from .experiments import Experiment, Table
from .lab import LEDGER, LEDGER_MAX, variant_price
from .pages import code_md, page, table_html, table_md
from .plots import plot

if TYPE_CHECKING:
    from .bench import LabRun

BADGE = {"pass": "PASS", "fail": "FAIL", "n/a": "n/a"}
PRICE = "COST"  # the badge of a variant's cost, which no verdict judges


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

    columns = [option_of(v) for v in lab.variants]
    return ["experiment"] + lab.competitors + columns + ["frugal verdicts"], summary_rows(lab)


def summary_note(lab: "LabRun") -> str:
    """What the summary table's numbers are."""
    note = ("Time and peak RSS of each allocator as a ratio to the best of the others "
            "(geometric mean over the experiment's cells; < 1.00 wins). A run the threads experiment's "
            "cap stopped counts with its time extrapolated, and its cell leaves the RSS comparison "
            "(its peak is a part run's); its peak RSS is less what the workload itself held between "
            "threads at its peak (blocks mailed or queued, which no allocator can give back).")
    variants = [a for a in lab.allocators if a.name in lab.variants]
    note += "".join(" " + variant_note(a) for a in variants)
    if variants:
        note += " Variants run interleaved with the other runs and compete with no one."
    return note


def variant_note(a: Allocator) -> str:
    """What a variant's column in the summary is: its time with its option on over its time
    with it off, where it ran, and the bound a verdict holds it to, if any."""
    option = ", ".join(f"{k}={v}" for k, v in VARIANTS[a.name][1].items())
    where = ("the cells listed in the experiment's section (every timed cell in full mode, a representative "
             "few otherwise)" if a.runs_on == REPRESENTATIVE_CELLS else "every timed cell")
    bound = (f"its verdict: ≤ {LEDGER_MAX['program']:.2f} on whole programs, ≤ {LEDGER_MAX['micro']:.2f} on "
             "single-operation microbenchmarks" if a.name == LEDGER else "no verdict; its slowest cell is named below")
    return (f"{option_of(a.name)}: {a.variant_of}'s time with {option} ({a.name}) over its time without "
            f"({bound}), on {where}.")


def price_lines(lab: "LabRun", experiment: str) -> list[str]:
    """What each variant that no verdict bounds (lab.BOUNDED) cost on one experiment."""
    return [f"{v}'s time over {cost['base']}'s — {variant_price(cost)}"
            for v, cost in lab.costs.get(experiment, {}).items() if cost["max"] is None]


def all_price_lines(lab: "LabRun") -> list[str]:
    """`price_lines` of every experiment, each line naming its experiment, as verdicts do."""
    return [f"{e.name}: {line}" for e in lab.experiments for line in price_lines(lab, e.name)]


def report_tables(lab: "LabRun", exp: Experiment) -> list[Table]:
    """An experiment's own tables, then what each variant cost on each of its cells."""
    res = lab.results.get(exp.name)
    if res is None:
        return []
    tables = exp.tables(res, lab.ctx)
    for v, cost in lab.costs.get(exp.name, {}).items():
        if not cost["per_cell"]:
            continue
        base = cost["base"]
        rows = [[c, f"{res.m(base, c, 'wall'):.3f}", f"{res.m(v, c, 'wall'):.3f}", f"{r:.2f}"]
                for c, r in cost["per_cell"].items()]
        caption = f"{option_of(v).capitalize()} on / off: median wall time (s) per cell"
        tables.append((caption, ["cell", base, v, "on / off"], rows))
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
    prices = all_price_lines(lab)
    if prices:
        parts += ["", "### What the other variants cost (no verdict)", ""] + [f"- **{PRICE}** {p}" for p in prices]
    for i, e in enumerate(lab.experiments, 1):
        parts += ["", f"## {i}. {e.name} — {e.title} (seed {e.seed})", "", e.about, ""]
        parts += [f"- {k}: {param_text(v)}" for k, v in e.params(lab.ctx).items()]
        parts += [""] + [f"- **{BADGE[v.status]}** {v.name} — {v.detail}" for v in lab.verdicts.get(e.name, [])]
        parts += [f"- **{PRICE}** {line}" for line in price_lines(lab, e.name)]
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


def prices_html(lines: list[str]) -> str:
    """Variants' costs (`price_lines`) in the verdicts' list style, with a badge of their own."""
    items = [f'<li><span class="badge price">{PRICE}</span><span class="detail">{html.escape(line)}</span></li>'
             for line in lines]
    return '<ul class="verdicts">' + "".join(items) + "</ul>" if items else ""


def lab_html(lab: "LabRun", images: dict[str, Path]) -> str:
    head, rows = summary_table(lab)
    meta = "".join(f"<p>{html.escape(line)}</p>" for line in meta_lines(lab))
    parts = [
        f"<section><h2>Summary</h2><p class='note'>{html.escape(summary_note(lab))}</p>",
        table_html(head, rows),
        "<h3>frugal's verdicts (docs/lab.md)</h3>",
        verdict_html(lab.all_verdicts()),
    ]
    prices = all_price_lines(lab)
    if prices:
        parts += ["<h3>What the other variants cost (no verdict)</h3>", prices_html(prices)]
    parts.append("</section>")
    for i, e in enumerate(lab.experiments, 1):
        params = " · ".join(f"{html.escape(k)}: <code>{html.escape(param_text(v))}</code>"
                            for k, v in e.params(lab.ctx).items())
        parts += [f"<section><h2>{i}. {html.escape(e.name)} — {html.escape(e.title)} "
                  f"<span class='note'>(seed {e.seed})</span></h2>",
                  f"<p>{html.escape(e.about)}</p><p class='params'>{params}</p>",
                  verdict_html(lab.verdicts.get(e.name, [])), prices_html(price_lines(lab, e.name))]
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
