"""Leak frames to function, file and line, with binutils' addr2line: one call per module for
all of its addresses. The ledger stores each frame as (module, offset), the offset being the
return address minus dladdr's dli_fbase, the module's lowest mapped address. For a shared
object or a PIE that base is where address 0 of the file was loaded; a non-PIE executable is
mapped at its link address (0x400000 typically), so its offsets must be moved back up by the
first LOAD segment's address before addr2line sees them. Return addresses point after the
call: asking for offset - 1 names the line of the call itself."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

PT_LOAD = 1


@dataclass(frozen=True)
class Location:
    function: str | None
    file: str | None
    line: int | None


def link_base(path: Path) -> int | None:
    """Page-aligned address of the first LOAD segment of an ELF file (0 for shared objects and
    PIEs), which is what dladdr reports as the base of a module mapped at its link address.
    None when the file is not ELF."""
    try:
        with open(path, "rb") as f:
            ident = f.read(16)
            if ident[:4] != b"\x7fELF":
                return None
            is64, end = ident[4] == 2, "<" if ident[5] == 1 else ">"
            if is64:
                f.seek(0x20)
                (phoff,) = struct.unpack(end + "Q", f.read(8))
                f.seek(0x36)
                phentsize, phnum = struct.unpack(end + "HH", f.read(4))
            else:
                f.seek(0x1C)
                (phoff,) = struct.unpack(end + "I", f.read(4))
                f.seek(0x2A)
                phentsize, phnum = struct.unpack(end + "HH", f.read(4))
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                if is64:
                    p_type, _flags, _off, vaddr, _pa, _fs, _ms, align = struct.unpack(end + "IIQQQQQQ", f.read(56))
                else:
                    p_type, _off, vaddr, _pa, _fs, _ms, _flags, align = struct.unpack(end + "IIIIIIII", f.read(32))
                if p_type == PT_LOAD:
                    page = 4096 if align == 0 else min(align, 4096)
                    return vaddr & ~(page - 1)
    except (OSError, struct.error):
        return None
    return 0


def resolve_module(module: str, program: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The file behind a frame's module name. Shared objects come with their full path; the
    main program appears as its argv[0], which may be relative or a bare name found on PATH."""
    if module in ("", "?"):
        return None
    p = Path(module)
    if p.is_absolute():
        return p if p.is_file() else None
    candidates = [(cwd or Path.cwd()) / p]
    if program is not None and program.name == p.name:
        candidates.insert(0, program)
    found = shutil.which(module)
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.is_file():
            return c.resolve()
    return None


def addr2line(path: Path, addresses: list[int], exe: str = "addr2line") -> list[Location]:
    """Function, file and line of each address of one module, in one addr2line call."""
    if not addresses:
        return []
    proc = subprocess.run([exe, "-a", "-f", "-C", "-e", str(path)], input="".join(f"{a:#x}\n" for a in addresses),
                          capture_output=True, text=True, timeout=120)
    out: list[Location] = []
    lines = proc.stdout.splitlines()
    i = 0
    while i < len(lines):  # -a: each answer opens with its address, then function, then file:line
        if not lines[i].startswith("0x"):
            i += 1
            continue
        func = lines[i + 1] if i + 1 < len(lines) else "??"
        where = lines[i + 2] if i + 2 < len(lines) else "??:0"
        i += 3
        file, _, line = where.rpartition(":")
        line = line.split(" ")[0]  # "12 (discriminator 3)"
        out.append(Location(None if func == "??" else func,
                            None if file in ("", "??") else file,
                            int(line) if line.isdigit() and line != "0" else None))
    if len(out) != len(addresses):  # addr2line failed (no such file, not ELF): nothing known
        return [Location(None, None, None)] * len(addresses)
    return out


def symbolize_frames(frames: Iterable[dict], program: Path | None = None, cwd: Path | None = None) -> int:
    """Add function, file and line to every frame dict (module, offset, symbol) in place, one
    addr2line call per module. Returns how many frames got a function name."""
    frames = list(frames)
    by_module: dict[str, list[dict]] = {}
    for f in frames:
        f.setdefault("function", None)
        f.setdefault("file", None)
        f.setdefault("line", None)
        by_module.setdefault(f.get("module", "?"), []).append(f)
    if shutil.which("addr2line") is None:
        return 0
    named = 0
    for module, fs in by_module.items():
        path = resolve_module(module, program, cwd)
        base = link_base(path) if path is not None else None
        if path is None or base is None:
            continue
        locs = addr2line(path, [max(int(f["offset"]) - 1, 0) + base for f in fs])
        for f, loc in zip(fs, locs):
            f["function"], f["file"], f["line"] = loc.function, loc.file, loc.line
            named += loc.function is not None
    return named


def frame_name(f: dict) -> str:
    """How a frame reads in a report: function (or dynamic symbol) and file:line or module+offset."""
    name = f.get("function") or f.get("symbol") or "??"
    if f.get("file"):
        where = f"{Path(f['file']).name}:{f['line']}" if f.get("line") else Path(f["file"]).name
    else:
        where = f"{Path(f.get('module', '?')).name}+{int(f.get('offset', 0)):#x}"
    return f"{name} ({where})"
