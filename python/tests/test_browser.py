"""Every HTML report the project writes (compare, bench --smoke, run), opened in headless
Chromium: it must load with every image and no script error; a screenshot of each is kept in
FRUGAL_BUILD/screenshots to look at. Skipped where Chromium is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from browser import chromium, problems, screenshot

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium not installed (apt-get install chromium): "
                                                           "the reports are not checked in a browser")

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82")


def test_the_check_fails_on_broken_pages(tmp_path: Path) -> None:
    (tmp_path / "good.png").write_bytes(PNG)
    (tmp_path / "garbled.png").write_bytes(b"not a png")
    page = tmp_path / "report.html"
    page.write_text("<!doctype html><html><head><title>t</title></head><body><img src='good.png'>"
                    "<img src='missing.png'><img src='garbled.png'><script>noSuchFunction()</script></body></html>")
    found = problems(page)
    print("\n".join(found))
    assert any("missing.png" in p for p in found)
    assert any("garbled.png" in p for p in found)
    assert any("noSuchFunction" in p for p in found)
    assert not any("good.png" in p for p in found)
    assert problems(tmp_path / "absent.html") != []
    page.write_text("<!doctype html><html><head></head><body><img src='good.png'></body></html>")
    assert problems(page) == []


def frugal(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "frugal", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


REPORTS = {
    "compare": lambda b, out: frugal("compare", "-n", "2", "--build", str(b), "-o", str(out), "--",
                                     "python3", "-c", "print(sum(range(10**6)))"),
    "bench": lambda b, out: frugal("bench", "--smoke", "--build", str(b), "--out", str(out), "--allocators",
                                   "glibc,frugal"),
    "run": lambda b, out: frugal("run", "--build", str(b), "-o", str(out), "--", "python3", "-c",
                                 "x = [bytes(i % 5000) for i in range(20000)]"),
}


@pytest.mark.parametrize("kind", list(REPORTS))
def test_report_loads_whole_in_chromium(kind: str, build: Path, tmp_path: Path) -> None:
    out = tmp_path / kind
    REPORTS[kind](build, out)
    page = out / "report.html"
    found = problems(page)
    assert found == [], "\n".join(found)
    shots = build / "screenshots"
    shots.mkdir(exist_ok=True)
    png = screenshot(page, shots / f"{kind}.png", "1280,3200" if kind == "bench" else "1280,2000")
    assert png.stat().st_size > 10_000  # a page with content, not a blank one
    print(f"{kind}: loaded with {page.read_text().count('<img')} images, no error; screenshot {png}")
