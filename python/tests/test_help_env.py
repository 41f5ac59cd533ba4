"""`frugal --help-env` prints libfrugal's options table (one row per FRUGAL_* option)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("FRUGAL_BUILD", "build"))


@pytest.mark.skipif(not (BUILD / "libfrugal.so").exists(), reason="libfrugal.so not built")
def test_help_env_lists_every_option_with_value_and_default():
    env = dict(os.environ, FRUGAL_DECAY_MS="250")
    out = subprocess.run([sys.executable, "-m", "frugal", "--help-env", "--build", str(BUILD)],
                         env=env, capture_output=True, text=True, check=True)
    rows = [line for line in out.stderr.splitlines() if line.startswith("FRUGAL_")]
    names = {row.split("=", 1)[0] for row in rows}
    assert {"FRUGAL_DECAY_MS", "FRUGAL_LARGE_CACHE_MB", "FRUGAL_SEGMENT_CACHE_MB", "FRUGAL_STATS",
            "FRUGAL_STATS_FILE", "FRUGAL_LEAKS", "FRUGAL_SECURE", "FRUGAL_VERBOSE"} <= names
    decay = next(row for row in rows if row.startswith("FRUGAL_DECAY_MS="))
    assert decay.startswith("FRUGAL_DECAY_MS=250 (default 1000)")


def test_help_env_without_a_build_says_so(tmp_path):
    out = subprocess.run([sys.executable, "-m", "frugal", "--help-env", "--build", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "not found" in out.stderr


@pytest.mark.skipif(not (BUILD / "libfrugal.so").exists(), reason="libfrugal.so not built")
def test_readme_options_table_is_the_library_s():
    """The README's options table has a row for every option of FG_OPTIONS (frugal.h), none
    other, and each row's default is the library's ("–" for the string options)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FRUGAL_")}
    out = subprocess.run([sys.executable, "-m", "frugal", "--help-env", "--build", str(BUILD)],
                         env=env, capture_output=True, text=True, check=True)
    library = {}
    for line in out.stderr.splitlines():
        if line.startswith("FRUGAL_"):
            name, rest = line.split("=", 1)
            library[name] = rest.split("(default ", 1)[1].split(")", 1)[0]
            if rest.startswith(" (default"):  # a string option: no value when unset
                library[name] = "–"
    readme = Path(__file__).resolve().parents[2] / "README.md"
    table = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `FRUGAL_") and len(cells) >= 3:
            table[cells[0].strip("`")] = cells[1]
    assert table.keys() == library.keys(), (sorted(table.keys() - library.keys()), sorted(library.keys() - table.keys()))
    assert {k: table[k] for k in library} == library
