"""What the three reports (the lab's, `frugal run`'s, `frugal compare`'s) are built of: one
style sheet, one page skeleton, tables in HTML and Markdown (tabulate's, cells as given), and
commands shown exactly as they ran."""

from __future__ import annotations

import html
import re
import shlex
from typing import Any, Sequence

from tabulate import tabulate

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1d2330; background: #f4f6f9;
       margin: 0; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 32px 64px; }
header { background: #1d2a3a; color: #fff; padding: 22px 32px; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header p { margin: 0; color: #c5d0dd; }
h2 { margin: 36px 0 8px; font-size: 20px; border-bottom: 2px solid #d5dbe3; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
section { background: #fff; border-radius: 8px; box-shadow: 0 1px 3px rgba(0,0,0,.08); padding: 4px 24px 20px;
          margin-top: 24px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e7ed; text-align: right; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; }
td:first-child, th:first-child { text-align: left; }
.scroll { overflow-x: auto; }
img { max-width: 100%; border: 1px solid #e3e7ed; border-radius: 6px; margin: 8px 0; }
.badge { display: inline-block; min-width: 38px; text-align: center; font-weight: 700; font-size: 12px;
         border-radius: 4px; padding: 1px 6px; margin-right: 8px; color: #fff; }
.pass { background: #2e9d4b; } .fail { background: #d33b3b; } .na { background: #9aa3ae; }
.price { background: #4f6d96; }
ul.verdicts { list-style: none; padding: 0; margin: 6px 0; }
ul.verdicts li { margin: 5px 0; }
.detail { color: #5b6573; font-size: 12.5px; }
.params { color: #3b4554; font-size: 13px; }
.params code { background: #eef1f5; padding: 1px 4px; border-radius: 3px; }
.note { color: #5b6573; font-size: 13px; }
.err { color: #b02a2a; font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; }
"""


def page(title: str, heading: str, header: Sequence[str], body: Sequence[str], css: str = "") -> str:
    """A whole report page: the window's `title` and the banner's `heading` (text), the banner's
    `header` lines and the main column's `body` (HTML); `css` adds to the shared style sheet."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>{html.escape(title)}</title><style>{CSS}{css}</style></head><body>",
             f"<header><h1>{html.escape(heading)}</h1>{''.join(header)}</header><main>",
             *body, "</main></body></html>"]
    return "\n".join(parts)


def table_html(head: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "", frames_last: bool = False) -> str:
    """A scrollable HTML table of text cells; `frames_last`: the last column is a call stack,
    one frame a line."""
    esc = [[html.escape(str(c)) for c in row] for row in rows]
    if frames_last:
        for row in esc:
            row[-1] = f"<div class='frames'>{row[-1]}</div>"
    body = tabulate(esc, [html.escape(h) for h in head], tablefmt="unsafehtml", disable_numparse=True)
    if cls:
        body = body.replace("<table>", f"<table class='{cls}'>", 1)
    return f'<div class="scroll">{body}</div>'


def table_md(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown (GitHub) table; cells as given, numbers not reformatted."""
    return tabulate(rows, head, tablefmt="github", disable_numparse=True)


def command_line(argv: Sequence[str]) -> str:
    """A command as a shell takes it back: quoted where needed, every character kept."""
    return shlex.join(argv)


def code_md(text: str) -> str:
    """`text` as a Markdown code span: fenced with one backtick more than its longest run of
    them, so a command with backticks or brackets shows as it is."""
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
