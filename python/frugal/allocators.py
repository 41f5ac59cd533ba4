"""Finding the allocators the lab compares: glibc's own malloc (nothing preloaded), the
Debian builds of jemalloc, tcmalloc and mimalloc when their packages are installed, frugal
from the build directory, and any library named on the command line. A missing allocator is
reported and skipped; it is never an error."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

# Known allocators, in the order they appear in tables, with the library file names their
# Debian packages install (libjemalloc2, libtcmalloc-minimal4, libmimalloc2.0).
KNOWN_LIBRARIES: dict[str, tuple[str, ...]] = {
    "glibc": (),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc.so"),
    "frugal": ("libfrugal.so",),
}
DEFAULT_ORDER = tuple(KNOWN_LIBRARIES)
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4", "mimalloc": "libmimalloc2.0"}
# Variants: an allocator's own library with an option on. The lab measures a variant beside
# its base to price the option, and it competes with no one: those of LAB_VARIANTS come with
# their base (what the ledger costs), and any is measured when named in --allocators (what
# secure mode costs). `frugal compare` runs any of them by name.
# The ledger's JSON goes to /dev/null: the cost measured is keeping it, not storing it.
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "frugal+ledger": ("frugal", {"FRUGAL_STATS_FILE": "/dev/null"}),
    "frugal+secure": ("frugal", {"FRUGAL_SECURE": "1"}),
}
LAB_VARIANTS = ("frugal+ledger",)
# The timed cells a variant runs in the lab. One brought along by its base runs on each
# experiment's representative few (all of them with --full), which keeps `make bench` short; one
# named in --allocators was asked for, and runs on every timed cell: its price over the whole lab.
REPRESENTATIVE_CELLS = "representative cells"
EVERY_TIMED_CELL = "every timed cell"


@dataclass
class Allocator:
    """One allocator under test. `library` is None for glibc, which needs no preload."""

    name: str
    library: Path | None
    available: bool = True
    reason: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    variant_of: str | None = None  # the base allocator of a variant (see VARIANTS)
    runs_on: str = EVERY_TIMED_CELL  # a variant's cells in the lab: REPRESENTATIVE_CELLS or this

    def env(self, base: dict[str, str] | None = None, library: Path | None = None) -> dict[str, str]:
        """The environment a workload runs in under this allocator (its library, or a copy of
        it: `library`)."""
        env = dict(os.environ if base is None else base)
        env.pop("LD_PRELOAD", None)
        if self.library is not None:
            env["LD_PRELOAD"] = str(library or self.library)
        env.update(self.extra_env)
        return env

    def describe(self) -> str:
        if not self.available:
            return f"{self.name}: skipped ({self.reason})"
        return f"{self.name}: {self.library or 'libc (no preload)'}"


def system_lib_dirs() -> list[Path]:
    """Directories where Debian-style systems keep shared libraries, multiarch first."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"
    dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/local/lib", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]
    return [Path(d) for d in dirs]


def find_library(names: Iterable[str], dirs: Iterable[Path]) -> Path | None:
    for d in dirs:
        for n in names:
            p = d / n
            if p.is_file():
                return p
    return None


def variant(base: Allocator, name: str, runs_on: str = EVERY_TIMED_CELL) -> Allocator:
    """The variant `name` of `base`: its library, its environment plus the variant's."""
    return Allocator(name, base.library, base.available, base.reason,
                     extra_env={**base.extra_env, **VARIANTS[name][1]}, variant_of=base.name, runs_on=runs_on)


def option_of(name: str) -> str:
    """What a variant turns on, as its name says after the base's: "ledger" for frugal+ledger."""
    return name.partition("+")[2]


def variants_of(base: Allocator, named: Iterable[str] = ()) -> list[Allocator]:
    """The lab's variants of an available allocator, in VARIANTS' order: those `named` in
    --allocators on every timed cell, those of LAB_VARIANTS not named on representative ones."""
    if not base.available:
        return []
    named = set(named)
    return [variant(base, name, EVERY_TIMED_CELL if name in named else REPRESENTATIVE_CELLS)
            for name, (of, _) in VARIANTS.items() if of == base.name and name in named | set(LAB_VARIANTS)]


def spec_items(spec: str | None) -> list[str]:
    """The items of an --allocators list; None means all known ones."""
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else list(DEFAULT_ORDER)


def discover(
    spec: str | None, build: Path, lib_dirs: list[Path] | None = None
) -> list[Allocator]:
    """The allocators named by `spec` ("a,b,name=/path/lib.so"; None means all known ones),
    each marked available or not with the reason. A variant's name in `spec` stands for its
    base, which brings the variant along (`benched`)."""
    lib_dirs = system_lib_dirs() if lib_dirs is None else lib_dirs
    found: list[Allocator] = []
    seen: set[str] = set()
    for item in spec_items(spec):
        item = VARIANTS[item][0] if item in VARIANTS else item
        if "=" in item:
            name, _, path = item.partition("=")
            name, lib = name.strip(), Path(path.strip()).expanduser()
            if lib.is_file():
                alloc = Allocator(name, lib.resolve())
            else:
                alloc = Allocator(name, lib, False, f"{lib} not found")
        elif item == "glibc":
            alloc = Allocator("glibc", None)
        elif item == "frugal":
            lib = build / "libfrugal.so"
            alloc = Allocator("frugal", lib.resolve()) if lib.is_file() else Allocator(
                "frugal", lib, False, f"{lib} not built")
        elif item in KNOWN_LIBRARIES:
            lib = find_library(KNOWN_LIBRARIES[item], lib_dirs)
            if lib:
                alloc = Allocator(item, lib)
            else:
                alloc = Allocator(item, None, False, f"not installed (apt-get install {PACKAGES[item]})")
        else:
            alloc = Allocator(item, None, False, "unknown allocator: give it as name=/path/lib.so")
        if alloc.name in seen:
            continue
        seen.add(alloc.name)
        found.append(alloc)
    return found


def benched(spec: str | None, build: Path, lib_dirs: list[Path] | None = None) -> list[Allocator]:
    """The allocators named by `spec` as `frugal bench` runs them: each available one followed
    by its variants (`variants_of`); a variant's name brings its base."""
    named = [item for item in spec_items(spec) if item in VARIANTS]
    return [v for a in discover(spec, build, lib_dirs) for v in [a] + variants_of(a, named)]


def chosen(spec: str | None, build: Path, lib_dirs: list[Path] | None = None) -> list[Allocator]:
    """The allocators named by `spec` as `frugal compare` runs them: a variant's name stands
    for that variant alone, and glibc, the reference, comes first whether named or not."""
    bases = {a.name: a for a in discover(spec, build, lib_dirs)}
    picked = {"glibc": Allocator("glibc", None)}
    for item in spec_items(spec):
        if item in VARIANTS:
            picked[item] = variant(bases[VARIANTS[item][0]], item)
        else:
            name = item.partition("=")[0].strip()
            picked.setdefault(name, bases[name])
    return list(picked.values())


def default_build() -> Path:
    """Where libfrugal.so and the lab's workloads (bench/) are: $FRUGAL_BUILD; else, for a
    frugal installed by `make install`, the directory holding the package's venv
    (PREFIX/libexec/frugal); else ./build; else the build directory of the checkout whose venv
    runs this."""
    if os.environ.get("FRUGAL_BUILD"):
        return Path(os.environ["FRUGAL_BUILD"])
    home = Path(sys.prefix).parent
    for d in (home, Path("build"), home / "build"):
        if (d / "libfrugal.so").is_file():
            return d
    return Path("build")


def frugal_version(library: Path) -> str:
    """FRUGAL_VERSION of the library file itself (fg_version)."""
    lib = ctypes.CDLL(str(library.resolve()))
    lib.fg_version.restype = ctypes.c_char_p
    return lib.fg_version().decode()


def library_version(alloc: Allocator) -> str:
    """The version of an allocator's library: glibc's own, frugal's fg_version, or the Debian
    package that installed the file (else the file's real name, which often carries it)."""
    if alloc.library is None:
        return "glibc " + platform.libc_ver()[1]
    if (alloc.variant_of or alloc.name) == "frugal":
        try:
            return "frugal " + frugal_version(alloc.library)
        except (OSError, AttributeError):
            pass  # an older libfrugal without fg_version, or another library under that name
    real = alloc.library.resolve()
    try:
        owner = subprocess.run(["dpkg-query", "-S", str(real)], capture_output=True, text=True, timeout=10)
        package = owner.stdout.split(":")[0].strip()
        if owner.returncode == 0 and package:
            version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                                     text=True, timeout=10).stdout.strip()
            return f"{package} {version}"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return real.name
