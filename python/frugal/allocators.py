"""Finding the allocators the lab compares: glibc's own malloc (nothing preloaded), the
Debian builds of jemalloc, tcmalloc and mimalloc when their packages are installed, frugal
from the build directory, and any library named on the command line. A missing allocator is
reported and skipped; it is never an error."""

from __future__ import annotations

import os
import platform
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
# Variants: an allocator's own library with an option on, measured beside it to price that
# option (issue #4: what the ledger costs). They come with their base and compete with no one.
# The ledger's JSON goes to /dev/null: the cost measured is keeping it, not storing it.
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "frugal+ledger": ("frugal", {"FRUGAL_STATS_FILE": "/dev/null"}),
}


@dataclass
class Allocator:
    """One allocator under test. `library` is None for glibc, which needs no preload."""

    name: str
    library: Path | None
    available: bool = True
    reason: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    variant_of: str | None = None  # the base allocator of a variant (see VARIANTS)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a workload runs in under this allocator."""
        env = dict(os.environ if base is None else base)
        env.pop("LD_PRELOAD", None)
        if self.library is not None:
            env["LD_PRELOAD"] = str(self.library)
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


def variants_of(base: Allocator) -> list[Allocator]:
    """The variants of an available allocator: its library, its environment plus theirs."""
    if not base.available:
        return []
    return [Allocator(name, base.library, extra_env={**base.extra_env, **env}, variant_of=base.name)
            for name, (of, env) in VARIANTS.items() if of == base.name]


def discover(
    spec: str | None, build: Path, lib_dirs: list[Path] | None = None
) -> list[Allocator]:
    """The allocators named by `spec` ("a,b,name=/path/lib.so"; None means all known ones),
    each marked available or not with the reason. A variant's name in `spec` stands for its
    base, which brings the variant along (`with_variants`)."""
    lib_dirs = system_lib_dirs() if lib_dirs is None else lib_dirs
    items = [s.strip() for s in spec.split(",") if s.strip()] if spec else list(DEFAULT_ORDER)
    found: list[Allocator] = []
    seen: set[str] = set()
    for item in items:
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


def with_variants(allocators: list[Allocator]) -> list[Allocator]:
    """The allocators, each available one followed by its variants."""
    return [v for a in allocators for v in [a] + variants_of(a)]
