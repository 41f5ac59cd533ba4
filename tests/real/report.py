"""Comparing each frugal mode with glibc, and writing it down (JSON, markdown, console).

The rule (RELIABILITY.md): a test that passes under glibc must pass under frugal. So each
(test, frugal mode) cell is judged against the glibc cell of the same test on the same machine:
  ok         glibc passed and so did this mode
  REGRESSION glibc passed, this mode failed, timed out, crashed, left a process running, or
             never got to run before its bound
  flaky      as REGRESSION, but the test failed again under glibc when run alone afterwards:
             this machine's doing, not frugal's, so not counted (still shown)
  INTERMITTENT as REGRESSION, but the mode passed it when run alone again, and glibc did too:
             perhaps load, perhaps frugal (a deadlock that needs two copies at once hid
             here once). Counted and listed on lines of their own; a failure in full runs
             (--strict), not in the quick one CI runs, where load makes timing tests fail
  n/a        glibc did not pass it (failed, skipped, timed out): nothing to compare with;
             or this mode did not run it (the quick run's subsets)
A skip under frugal where glibc passed is shown but not counted: a test may skip itself for
reasons of its own (a resource it finds busy), and one that skips runs nothing that could fail.
"""
import json
import os

from modes import ALL_MODES, FRUGAL_MODES

BAD = ("fail", "timeout", "env", "notrun")
CELL = {"pass": "pass", "fail": "**FAIL**", "timeout": "**TIMEOUT**", "skip": "skip",
        "env": "**ENV-CHANGED**", "notrun": "**NOT RUN**"}


def judge(suites):
    """Add a verdict to every frugal cell; return (passed, failed, skipped, regressions,
    intermittent), the last two lists of (suite, test, mode, cell)."""
    passed = failed = skipped = 0
    regressions, intermittent = [], []
    for sname, suite in suites.items():
        for test, row in suite["tests"].items():
            base = row.get("glibc", {}).get("status")
            for mode in FRUGAL_MODES:
                cell = row.get(mode)
                if cell is None:
                    continue
                st = cell["status"]
                if base != "pass":
                    cell["judged"] = "n/a"
                    skipped += 1
                elif st == "pass":
                    cell["judged"] = "ok"
                    passed += 1
                elif st == "skip":
                    cell["judged"] = "skipped"
                    skipped += 1
                elif cell.get("glibc_rerun", {}).get("status") in BAD:
                    cell["judged"] = "flaky"  # glibc fails it too when run alone
                    skipped += 1
                elif cell.get("rerun", {}).get("status") == "pass":
                    cell["judged"] = "INTERMITTENT"
                    intermittent.append((sname, test, mode, cell))
                else:
                    cell["judged"] = "REGRESSION"
                    failed += 1
                    regressions.append((sname, test, mode, cell))
    return passed, failed, skipped, regressions, intermittent


def cell_text(cell, markdown=True):
    if cell is None:
        return "–"
    text = CELL.get(cell["status"], cell["status"]) if markdown else cell["status"]
    if cell.get("judged") == "flaky":
        text += " (flaky: fails under glibc too)"
    elif cell.get("judged") == "INTERMITTENT":
        text += " (INTERMITTENT: passed when run alone)"
    d = cell.get("duration")
    if d is not None and markdown:
        text += f" {d:.0f}s" if d >= 1 else ""
    return text


def markdown(doc):
    out = [f"# check-real: {doc['summary']}", "",
           f"- library: `{doc['lib']}` ({doc['size']} run, {doc['started']})",
           "- modes: " + ", ".join(f"{m} `{e}`" for m, e in doc["mode_env"].items()),
           f"- total time {doc['duration']:.0f} s", ""]
    regs = doc["regressions"]
    out += ["## Regressions (glibc passes, frugal does not)", ""]
    if not regs:
        out.append("None.")
    for r in regs:
        out.append(f"- **{r['suite']} {r['test']}** under **{r['mode']}**: {r['status']} — "
                   + "; ".join(r["detail"])[:600])
    out += ["", "## Intermittent (failed, then passed when run alone in the same mode; glibc passes)", ""]
    if not doc.get("intermittent"):
        out.append("None.")
    for r in doc.get("intermittent", []):
        out.append(f"- **{r['suite']} {r['test']}** under **{r['mode']}**: {r['status']} — "
                   + "; ".join(r["detail"])[:600])
    out.append("")
    for sname, suite in doc["suites"].items():
        out += [f"## {sname}", "", suite.get("about", ""), ""]
        if suite.get("unavailable"):
            out += [f"Not run: {suite['unavailable']}", ""]
            continue
        out.append(f"{suite.get('version', '')}")
        for mode, info in suite.get("runs", {}).items():
            extra = ""
            if info.get("strays"):
                extra += f"; {len(info['strays'])} stray process(es) killed"
            if "ledgers" in info:
                lg = info["ledgers"]
                extra += f"; {lg['files']} ledger files, {lg['bad_count']} unreadable"
            if info.get("peak_rss_mib"):
                extra += f"; peak RSS of the run {info['peak_rss_mib']} MiB"
            cached = " (cached baseline)" if info.get("cached") else ""
            out.append(f"- {mode}: {info.get('duration', 0):.0f} s{cached}{extra}")
            for stray in info.get("strays", [])[:5]:
                out.append(f"  - left running, killed: `{stray[:160]}`")
        out += ["", "| test | " + " | ".join(ALL_MODES) + " |",
                "|---|" + "---|" * len(ALL_MODES)]
        for test, row in suite["tests"].items():
            out.append(f"| {test} | " + " | ".join(cell_text(row.get(m)) for m in ALL_MODES)
                       + " |")
        notes = [(t, m, row[m]) for t, row in suite["tests"].items() for m in ALL_MODES
                 if m in row and row[m]["status"] != "pass" and row[m].get("detail")]
        if notes:
            out += ["", "Details of every cell that did not pass:", ""]
            for t, m, c in notes:
                out.append(f"- {t} [{m}] {c['status']}: " + "; ".join(c["detail"])[:400])
        out.append("")
    return "\n".join(out) + "\n"


def console_table(doc):
    """The rows worth a look (anything not passing everywhere), and per-column counts."""
    lines = []
    for sname, suite in doc["suites"].items():
        if suite.get("unavailable"):
            lines.append(f"{sname}: NOT RUN: {suite['unavailable']}")
            continue
        tests = suite["tests"]
        w = max([len(t) for t in tests] + [10])
        lines.append(f"{sname} ({len(tests)} tests)")
        lines.append(f"  {'test':<{w}} " + " ".join(f"{m:>8}" for m in ALL_MODES))
        counts = {m: {} for m in ALL_MODES}
        for test, row in tests.items():
            for m in ALL_MODES:
                if m in row:
                    s = row[m]["status"]
                    counts[m][s] = counts[m].get(s, 0) + 1
            if all(row[m]["status"] == "pass" for m in ALL_MODES if m in row):
                continue
            lines.append(f"  {test:<{w}} " + " ".join(
                f"{cell_text(row.get(m), markdown=False)[:8]:>8}" for m in ALL_MODES))
        lines.append(f"  {'pass/total':<{w}} " + " ".join(
            f"{counts[m].get('pass', 0):>4}/{sum(counts[m].values()):<3}" for m in ALL_MODES))
    return "\n".join(lines)


def write(doc, outdir):
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(markdown(doc))
