"""make check-real's verdicts (tests/real/report.py): each (test, frugal mode) cell judged
against glibc on the same machine. A failure that glibc shares when run alone is the
machine's (flaky, not counted); one the mode passes when run alone, glibc passing, is
INTERMITTENT — listed and counted on its own, never folded into "flaky" (a deadlock that
needed two copies of a test at once hid there)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "tests" / "real"


def load_report():
    import sys
    sys.path.insert(0, str(REAL))  # report.py imports its sibling modes.py
    try:
        spec = importlib.util.spec_from_file_location("check_real_report", REAL / "report.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(REAL))


def cell(status, rerun=None, glibc_rerun=None):
    c = {"status": status}
    if rerun:
        c["rerun"] = {"status": rerun}
    if glibc_rerun:
        c["glibc_rerun"] = {"status": glibc_rerun}
    return c


def test_verdicts():
    report = load_report()
    tests = {
        "ok": {"glibc": cell("pass"), "plain": cell("pass")},
        "hang_once": {"glibc": cell("pass"), "ledger": cell("timeout", "pass", "pass")},
        "machine": {"glibc": cell("pass"), "plain": cell("fail", "fail", "fail")},
        "broken": {"glibc": cell("pass"), "secure": cell("fail", "fail", "pass")},
        "glibc_fails": {"glibc": cell("fail"), "plain": cell("fail")},
        "skips": {"glibc": cell("pass"), "plain": cell("skip")},
    }
    passed, failed, skipped, regs, inter = report.judge({"s": {"tests": tests}})
    assert (passed, failed, skipped) == (1, 1, 3)
    assert [(t, m) for _, t, m, _ in regs] == [("broken", "secure")]
    assert [(t, m) for _, t, m, _ in inter] == [("hang_once", "ledger")]
    assert tests["hang_once"]["ledger"]["judged"] == "INTERMITTENT"
    assert tests["machine"]["plain"]["judged"] == "flaky"
    assert "INTERMITTENT" in report.cell_text(tests["hang_once"]["ledger"])
    assert "glibc too" in report.cell_text(tests["machine"]["plain"])
