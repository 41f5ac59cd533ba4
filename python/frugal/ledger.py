"""Reading a ledger (the JSON frugal writes under FRUGAL_STATS_FILE) and the figures a reader
wants from it: totals and efficiency, the classes that matter, the hidden costs (fresh pages
against the process's page faults), cache hit rates, and seed 1's advice. The schema is
ledger.schema.json beside this file; the report and the summary both draw on this module."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .units import PAGE, human, size_label

SCHEMA_PATH = Path(__file__).with_name("ledger.schema.json")


def pct(a: float, b: float) -> str:
    return "—" if not b else f"{100.0 * a / b:.1f} %"


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validate(doc: dict) -> list[str]:
    """Problems of doc against the ledger's schema (`validate_against`)."""
    return validate_against(schema(), doc)


def validate_against(schema: dict, doc: dict) -> list[str]:
    """Problems of doc against a JSON schema, one line each; [] when it is valid. Needs the
    jsonschema package (the test extra); without it nothing is checked."""
    try:
        import jsonschema
    except ImportError:
        return []
    v = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}" for e in v.iter_errors(doc)]


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def class_label(c: dict) -> str:
    """A class by its block size: 104 B, 1.25 KiB, 512 KiB; the large row is 'large'."""
    return "large" if c.get("large") or c.get("block_size", 0) == 0 else size_label(c["block_size"])


def class_by_index(doc: dict) -> dict[int, dict]:
    return {c["class"]: c for c in doc.get("classes", [])}


def efficiency(requested: float, handed: float) -> float:
    return requested / handed if handed else 1.0


def top_classes(doc: dict, n: int = 8) -> list[dict]:
    """The classes holding the most bytes handed out over the run."""
    return sorted(doc.get("classes", []), key=lambda c: c["bytes_handed_out"], reverse=True)[:n]


@dataclass
class Rate:
    name: str
    hits: int
    misses: int
    note: str

    @property
    def rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None


def cache_rates(doc: dict) -> list[Rate]:
    """Hit rates of frugal's three caches. A small allocation hits the thread cache unless it
    took the slow path (slow_allocs, counted whenever frugal runs); the ledger's own count of
    small allocations gives the total."""
    c = doc["counters"]
    small = sum(r["allocations"] for r in doc.get("classes", []) if not r.get("large"))
    thread_hits = max(small - c["slow_allocs"], 0)
    return [
        Rate("thread cache (small blocks)", thread_hits, c["slow_allocs"] if small else 0,
             f"{c['pages_new']} pages started, {c['pages_released']} released "
             f"({c.get('pages_handed_back', 0)} by other threads' frees), "
             f"{c.get('pages_reused', 0)} taken over by another class, "
             f"{c.get('pages_handed_over', 0) + c.get('slots_lent', 0)} from other threads' heaps"),
        Rate("large cache (> 512 KiB)", c["large_cache_hits"], c["large_cache_misses"],
             f"{c['large_cache_evictions']} evictions, {c['large_cache_decays']} decays"),
        Rate("segment cache (4 MiB)", c["segment_cache_hits"], c["segment_cache_misses"],
             f"{c['segment_cache_evictions']} evictions, {c['segment_cache_decays']} decays"),
    ]


def hidden_costs(doc: dict, outside: dict | None = None) -> dict[str, Any]:
    """Seed 3's hidden cost: pages frugal carved fresh (each one a page fault and a page of
    kernel zeroing) next to the faults and kernel time the process actually paid."""
    c, p = doc["counters"], doc["process"]
    fresh = c["fresh_bytes"] + c["fresh_large_bytes"]
    out = {
        "fresh_bytes": fresh,
        "fresh_pages": fresh // PAGE,
        "fresh_small_bytes": c["fresh_bytes"],
        "fresh_large_bytes": c["fresh_large_bytes"],
        "minor_faults": p["minor_faults"],
        "major_faults": p["major_faults"],
        "sys_s": p["sys_us"] / 1e6,
        "user_s": p["user_us"] / 1e6,
        "os_calls": {k: c[k] for k in ("mmap_calls", "munmap_calls", "madvise_calls", "mremap_calls")},
        "os_bytes": {k: c[k] for k in ("mmap_bytes", "munmap_bytes", "madvise_bytes")},
    }
    if outside:
        out["outside_minor_faults"] = outside.get("minflt")
        out["outside_sys_s"] = outside.get("sys")
    return out


def advice(doc: dict) -> list[str]:
    """Seed 1's recommendations, made concrete with this run's numbers."""
    a = doc["advice"]
    idx = class_by_index(doc)
    lines = []
    total = doc["totals"]["allocations"]
    if total:
        lines.append(f"Sizes: 50 % of allocations ask for ≤ {human(a['p50_size'])}, 90 % for ≤ {human(a['p90_size'])}, "
                     f"99 % for ≤ {human(a['p99_size'])}.")
        lines.append(f"Suggested cache cutoff: {human(a['p90_size'])} (serves 90 % of requests; "
                     f"{human(a['p99_size'])} serves 99 %). Blocks above it should bypass a cache, so big "
                     f"buffers never get in (seed 1).")
    waste = [idx[i] for i in a["waste_classes"] if i in idx]
    if waste:
        parts = [f"{class_label(c)} ({human(c['bytes_handed_out'] - c['bytes_requested'])} over "
                 f"{c['allocations']} blocks, {pct(c['bytes_requested'], c['bytes_handed_out'])} used)" for c in waste]
        lines.append("Most waste handed out: " + "; ".join(parts) + ". A bucket nearer these requests would waste less.")
    frees = doc["totals"]["frees"]
    churn = [idx[i] for i in a["churn_classes"] if i in idx and idx[i]["frees"] * 100 >= frees > 0]
    if churn:
        parts = [f"{class_label(c)} ({c['frees']} frees)" for c in churn]
        lines.append("Most churn (reuse traffic): " + "; ".join(parts) + ". These are the sizes a cache pays off for.")
    lines.append("When a cache is full, free the block just returned rather than keep the biggest; then "
                 "reinstrument: run `frugal run` again after the change (seed 1).")
    return lines


def leak_sites(doc: dict) -> list[dict]:
    leaks = doc.get("leaks")
    return list(leaks.get("sites", [])) if isinstance(leaks, dict) else []


WRAPPERS = {"malloc", "calloc", "realloc", "reallocarray", "strdup", "strndup", "aligned_alloc", "posix_memalign",
            "memalign", "xmalloc", "xcalloc", "xrealloc", "PyMem_RawMalloc", "PyMem_Malloc", "_PyObject_Malloc",
            # redis's allocation layer (zmalloc.c) and its strings' (sds.c)
            "zmalloc", "zcalloc", "zrealloc", "ztrymalloc_usable", "ztrycalloc_usable", "ztryrealloc_usable",
            "zmalloc_usable", "zcalloc_usable", "zrealloc_usable", "ztrymalloc", "zstrdup", "s_malloc",
            "s_realloc", "s_malloc_usable", "s_realloc_usable", "_sdsnewlen", "sdsnewlen", "sdsMakeRoomFor",
            "_sdsMakeRoomFor"}


def site_function(site: dict) -> str:
    """The first frame of a site that names a function of the program rather than of the C++
    library's containers and allocators or libc: the place a reader goes to fix the leak."""
    library = ("std::", "__gnu_cxx::", "operator new", "__libc", "_dl_", "__GI_")
    names = [f.get("function") or f.get("symbol") for f in site.get("frames", [])]
    for n in names:
        head = (n or "").split("(")[0]
        if n and head not in WRAPPERS and not any(lib in head for lib in library):
            return n
    return next((n for n in names if n), "??")
