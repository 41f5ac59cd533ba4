"""Opening a report in headless Chromium as a person would: a copy of the page with a probe
script sits beside it (so relative images resolve alike), Chromium loads it and dumps the DOM
after the load event, and the probe has written into it every script error, every resource
that failed and every image that did not decode. A screenshot is taken of the page itself."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

PROBE = """<script>
window.__problems = [];
window.addEventListener('error', e => window.__problems.push(
  e.target && e.target.src ? 'failed to load ' + e.target.src : 'script error: ' + e.message), true);
window.addEventListener('load', () => {
  for (const img of document.images)
    if (!img.complete || img.naturalWidth === 0) window.__problems.push('broken image ' + img.src);
  document.body.setAttribute('data-probe', JSON.stringify(window.__problems));
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browse(page: Path, *flags: str) -> subprocess.CompletedProcess:
    sandbox = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium refuses root otherwise
    return subprocess.run([chromium() or "chromium", "--headless", "--disable-gpu", *sandbox, "--hide-scrollbars",
                           "--virtual-time-budget=5000", *flags, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)


def problems(page: Path) -> list[str]:
    """What went wrong loading page, one line each; [] when it loaded whole."""
    if not page.is_file():
        return [f"{page}: no such page"]
    text = page.read_text()
    probed = page.with_name(".probe-" + page.name)
    probed.write_text(re.sub(r"<head>", "<head>" + PROBE, text, count=1, flags=re.I))
    try:
        proc = browse(probed, "--dump-dom")
    finally:
        probed.unlink()
    found = re.search(r'data-probe="([^"]*)"', proc.stdout)
    if proc.returncode != 0 or found is None:
        return [f"{page}: the page did not load (chromium exit {proc.returncode}): {proc.stderr[-500:]}"]
    return [f"{page.name}: {p}" for p in json.loads(html.unescape(found.group(1)))]


def screenshot(page: Path, png: Path, size: str = "1280,2000") -> Path:
    proc = browse(page, f"--screenshot={png.resolve()}", f"--window-size={size}")
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-500:]
    return png
