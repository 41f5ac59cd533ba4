#!/usr/bin/env python3
"""Fast-path instruction budget (STYLE.md): count, with callgrind, the instructions of one
malloc+free pair on frugal's small fast path and compare them with the checked-in budget.
Instruction counts are exact and repeatable, unlike times, so this can be a test.
Budget lines: `SIZE LIMIT` (malloc/free pairs) or `list SIZE LIMIT` (a linked list built
and freed: see pair.c).
Usage: budget.py PAIR_BINARY LIBFRUGAL BUDGET_FILE"""
import os
import re
import subprocess
import sys
import tempfile


def instructions(binary: str, lib: str, n: int, size: int, mode: str) -> int:
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, LD_PRELOAD=lib)
        for k in [k for k in env if k.startswith("FRUGAL_")]:
            del env[k]
        # A guarded allocation (one in 100,000 by default) costs thousands of instructions and
        # falls in the measured window or not: the fast path is counted without them (their
        # cost is measured on its own, README "Guarded sampling").
        env["FRUGAL_GUARD_EVERY"] = "0"
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.out", binary, str(n), str(size), mode],
            env=env, capture_output=True, text=True, check=True)
        m = re.search(r"Collected : (\d+)", out.stderr)
        if not m:
            sys.exit(f"no callgrind total in:\n{out.stderr}")
        return int(m.group(1))


def main() -> int:
    binary, lib, budget_file = sys.argv[1:4]
    budgets = {}
    for line in open(budget_file):
        line = line.split("#", 1)[0].strip()
        if line:
            words = line.split()
            mode = words[0] if len(words) == 3 else "pair"
            budgets[(mode, int(words[-2]))] = int(words[-1])
    failed = 0
    for (mode, size), limit in sorted(budgets.items()):
        a = instructions(binary, lib, 100000, size, mode)
        b = instructions(binary, lib, 200000, size, mode)
        per_pair = (b - a) / 100000
        ok = per_pair <= limit
        failed += not ok
        what = "malloc+free pair" if mode == "pair" else "linked-list node built and freed"
        print(f"{'ok  ' if ok else 'FAIL'} {mode} {size} B: {per_pair:.1f} instructions per {what} "
              f"(loop included), budget {limit}")
    print(f"budget: {len(budgets)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
