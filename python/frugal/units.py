"""Byte units and how sizes read, for every module: `size_label` names an exact size as the
lab's tables and axes do (1 KiB, 1.25 KiB); `human` rounds a measured amount (12.3 MiB)."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
PAGE = 4 * KiB  # the kernel's page: one fault and one page zeroed per fresh 4 KiB


def size_label(n: float) -> str:
    """An exact size in the largest unit that divides it (1 MiB, 64 KiB), else two decimals
    (1.25 KiB), bytes below 1 KiB."""
    n = int(n)
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def human(n: float) -> str:
    """A measured amount of bytes for people: 1023 B, 1.5 KiB, 12.0 MiB."""
    v, unit = float(n), "B"
    for u in ("KiB", "MiB", "GiB", "TiB"):
        if abs(v) < KiB:
            break
        v, unit = v / KiB, u
    return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
