"""Allocator discovery: known names, library paths, missing ones skipped with a reason."""

from __future__ import annotations

from pathlib import Path

from frugal.allocators import DEFAULT_ORDER, discover, system_lib_dirs


def fake_libs(tmp: Path, names: list[str]) -> Path:
    d = tmp / "lib"
    d.mkdir()
    for n in names:
        (d / n).write_bytes(b"\x7fELF")
    return d


def test_default_finds_installed_and_skips_missing(tmp_path: Path) -> None:
    libdir = fake_libs(tmp_path, ["libjemalloc.so.2", "libmimalloc.so.2"])
    build = tmp_path / "build"
    build.mkdir()
    found = discover(None, build, [libdir])
    by = {a.name: a for a in found}
    assert [a.name for a in found] == list(DEFAULT_ORDER)
    assert by["glibc"].available and by["glibc"].library is None
    assert by["jemalloc"].available and by["jemalloc"].library == libdir / "libjemalloc.so.2"
    assert by["mimalloc"].available
    assert not by["tcmalloc"].available and "libtcmalloc-minimal4" in by["tcmalloc"].reason
    assert not by["frugal"].available and "not built" in by["frugal"].reason
    print("discovery:", [a.describe() for a in found])


def test_frugal_from_build_and_custom_library(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "libfrugal.so").write_bytes(b"\x7fELF")
    mine = tmp_path / "libmine.so"
    mine.write_bytes(b"\x7fELF")
    found = discover(f"frugal,mine={mine},gone=/nonexistent/lib.so,bogus", build, [])
    by = {a.name: a for a in found}
    assert by["frugal"].available and by["frugal"].library == (build / "libfrugal.so").resolve()
    assert by["mine"].available and by["mine"].library == mine.resolve()
    assert not by["gone"].available and "not found" in by["gone"].reason
    assert not by["bogus"].available and "name=/path" in by["bogus"].reason


def test_env_sets_and_clears_preload(tmp_path: Path) -> None:
    build = tmp_path / "b"
    build.mkdir()
    (build / "libfrugal.so").write_bytes(b"")
    glibc, frugal = discover("glibc,frugal", build, [])
    assert "LD_PRELOAD" not in glibc.env({"LD_PRELOAD": "/x.so", "PATH": "/bin"})
    assert frugal.env({"PATH": "/bin"})["LD_PRELOAD"].endswith("libfrugal.so")


def test_system_lib_dirs_include_multiarch() -> None:
    dirs = [str(d) for d in system_lib_dirs()]
    assert any(d.startswith("/usr/lib/") and d.endswith("-linux-gnu") for d in dirs)
