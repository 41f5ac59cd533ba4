"""The report of one `frugal compare`: a plot of wall time and one of peak RSS (median bars,
min–max whiskers), the table, the verdicts and the machine, as report.md and report.html
(their pieces: pages.py)."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .compare import FIGURES, JUDGED, Comparison, table, verdict_lines  # noqa: E402
from .plots import colour, style  # noqa: E402
from .pages import code_md, command_line, page, table_html, table_md  # noqa: E402
from .units import KiB, MiB  # noqa: E402

PLOTS = {"time": "time.png", "rss": "rss.png"}
EXTRA_CSS = "td { white-space: normal; }"  # fifteen columns: a range wraps under its median


def plot_figure(c: Comparison, what: str, path: Path) -> None:
    """One bar per allocator at its median, a whisker over its runs' min–max."""
    figure = JUDGED[what]
    scale = MiB // KiB if figure == "peak_rss_kib" else 1
    names = [o.alloc.name for o in c.outcomes]
    summ = [o.summary.get(figure) for o in c.outcomes]
    med = [s["median"] / scale if s else 0 for s in summ]
    lo = [m - s["min"] / scale if s else 0 for m, s in zip(med, summ)]
    hi = [s["max"] / scale - m if s else 0 for m, s in zip(med, summ)]
    style()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(names, med, yerr=[lo, hi], capsize=6, color=[colour(n, names) for n in names],
           error_kw={"elinewidth": 1.2, "ecolor": "#1d2330"})
    ax.set_ylabel(FIGURES[figure])
    ax.set_ylim(bottom=0)
    ax.set_title(f"{FIGURES[figure]}: median of {c.reps} runs, whiskers min–max")
    ax.tick_params(axis="x", labelrotation=20 if len(names) > 5 else 0)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def machine_lines(c: Comparison) -> list[str]:
    m = c.meta
    mach = m.get("machine", {})
    versions = ", ".join(f"{k}: {v}" for k, v in m.get("versions", {}).items())
    return [f"{m.get('started', '')} · {m.get('duration_s', 0):.0f} s · {mach.get('cores', '?')} cores · "
            f"{mach.get('cpu', '')} · Linux {mach.get('kernel', '')} · Python {mach.get('python', '')} · "
            f"frugal CLI {m.get('cli_version', '')}",
            f"Libraries: {versions}"]


def command_text(c: Comparison) -> str:
    stdin = c.meta.get("stdin")
    return command_line(c.command) + (f" < {command_line([stdin])}" if stdin else "")


def compare_markdown(c: Comparison) -> str:
    head, rows = table(c)
    parts = [f"# frugal compare: {code_md(command_text(c))}", ""]
    parts += [f"{line}  " for line in machine_lines(c)]
    parts += ["", f"{c.reps} runs per allocator, interleaved in rotated order. Each figure: median (min–max).", "",
              table_md(head, rows), ""]
    parts += [f"- {line}" for line in verdict_lines(c)]
    parts += ["", "![time](time.png)", "", "![peak RSS](rss.png)", "",
              "Every run: `results.json` (schema: `frugal/compare.schema.json`).", ""]
    return "\n".join(parts)


def compare_html(c: Comparison) -> str:
    head, rows = table(c)
    cmd = command_text(c)
    header = [f"<p><code>{html.escape(cmd)}</code></p>"] + [f"<p>{html.escape(line)}</p>" for line in machine_lines(c)]
    parts = [f"<section><h2>Results</h2><p class='note'>{c.reps} runs per allocator, interleaved in rotated "
             "order. Each figure: median (min–max); time and peak RSS also as a ratio to glibc's and to the "
             "best median.</p>",
             table_html(head, rows), "<ul>"]
    parts += [f"<li>{html.escape(line)}</li>" for line in verdict_lines(c)]
    parts += ["</ul></section><section><h2>Plots</h2>"]
    parts += [f"<img src='{name}' alt='{what} per allocator'>" for what, name in PLOTS.items()]
    parts += ["</section><p class='note'>Every run: <code>results.json</code> (schema: "
              "<code>frugal/compare.schema.json</code>).</p>"]
    return page(f"frugal compare: {cmd}", "frugal compare", header, parts, EXTRA_CSS)


def write_compare_reports(c: Comparison, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    images = [out / name for name in PLOTS.values()]
    for what, path in zip(PLOTS, images):
        plot_figure(c, what, path)
    md, page_file = out / "report.md", out / "report.html"
    md.write_text(compare_markdown(c))
    page_file.write_text(compare_html(c))
    return [md, page_file, *images]
