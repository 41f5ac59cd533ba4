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
