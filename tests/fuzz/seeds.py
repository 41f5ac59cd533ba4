#!/usr/bin/env python3
"""seeds.py — writes the seed corpus in tests/fuzz/corpus/: a few programs in fuzz_ops.c's
encoding (op byte, 2-byte slot, then the op's operands) that reach every call and size band,
so a short run starts from coverage instead of finding the encoding byte by byte."""
import random
import struct
from pathlib import Path

MALLOC, CALLOC, REALLOC, ALIGNED, FREE, SIZED_FREE, USABLE, HUGE, COLLECT, CHECK = (
    0, 3, 4, 6, 8, 11, 12, 13, 14, 15)


def size(n: int) -> bytes:
    """Encode n in the band take_size() decodes it from."""
    if n <= 1024:
        return bytes([0]) + struct.pack("<H", n)
    if n < 64 << 10:
        return bytes([128]) + struct.pack("<I", n - 1025)[:3]
    if n <= 512 << 10:
        return bytes([208]) + struct.pack("<I", n)[:3]
    return bytes([240]) + struct.pack("<I", n)[:3]


def op(code: int, slot: int, *rest: bytes) -> bytes:
    return bytes([code]) + struct.pack("<H", slot) + b"".join(rest)


def program(seed: int, steps: int, sizes: list[int]) -> bytes:
    rng = random.Random(seed)
    out = b""
    for _ in range(steps):
        slot, n = rng.randrange(320), rng.choice(sizes)
        kind = rng.choice([MALLOC, MALLOC, CALLOC, REALLOC, ALIGNED, FREE, SIZED_FREE, USABLE])
        if kind == CALLOC:
            out += op(kind, slot, size(n), bytes([rng.randrange(16)]))
        elif kind == ALIGNED:
            out += op(kind, slot, size(n), bytes([rng.randrange(22), rng.randrange(3)]))
        elif kind in (MALLOC, REALLOC):
            out += op(kind, slot, size(n))
        else:
            out += op(kind, slot)
    return out


def main() -> None:
    corpus = Path(__file__).parent / "corpus"
    corpus.mkdir(exist_ok=True)
    small = [0, 1, 8, 24, 100, 128, 129, 512, 1000, 1024]
    medium = [1025, 4000, 8192, 8193, 20000, 65535]
    large = [100 << 10, 512 << 10, (512 << 10) + 1, 1 << 20, 3 << 20, 4 << 20]
    files = {
        "small_churn": program(1, 400, small),
        "medium_mix": program(2, 300, small + medium),
        "large_blocks": program(3, 60, large + small),
        "realloc_ladder": b"".join(op(REALLOC, 7, size(n)) for n in
                                   [1, 16, 200, 1024, 5000, 70000, 600000, 4 << 20, 9000, 8, 0]),
        "edges": op(HUGE, 1, bytes([1])) + op(MALLOC, 1, size(64)) + op(HUGE, 1, bytes([2]))
        + op(CALLOC, 2, size(64), bytes([255])) + op(ALIGNED, 3, size(100), bytes([5, 0x81]))
        + op(ALIGNED, 5, size(100), bytes([5, 0x82]))
        + op(ALIGNED, 4, size(100), bytes([21, 1])) + op(COLLECT, 0, bytes([1]))
        + op(CHECK, 0) + op(USABLE, 1) + op(SIZED_FREE, 1),
    }
    for name, data in files.items():
        (corpus / name).write_bytes(data)


if __name__ == "__main__":
    main()
