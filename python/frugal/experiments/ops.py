"""Single operations of the malloc family, each in a loop of its own (bench/ops): what a
program's allocations are made of, one at a time. A stall on one path shows whole here where
the shapes' mixes hide it: a free that subtracted 4 bytes from a word malloc adds 8 to made
every malloc after a free wait for the store, a third of the simplest loop's time, and no other
experiment moved. One verdict per operation, as the shapes have: frugal against the fastest
other allocator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..lab import FRUGAL, Context, ExpResult, Verdict
from ..runner import Cell, Sample
from ..units import size_label
from .base import Experiment, Table, base_metrics, fmt, over_best_other_text

# The verdict: frugal's median time per operation at most this times the fastest other's.
BEST_OTHER_MAX = 1.00


@dataclass(frozen=True)
class Op:
    """One cell: bench/ops' operation at a size (and an alignment), and how many to time in quick
    mode, about 0.3 s under the fastest allocator on the 2-core VM (full: 4 x, smoke: a batch).
    The aligned operations ask an alignment of `align` (their size)."""

    op: str
    size: int
    about: str
    quick: int  # operations
    align: int = 0

    @property
    def key(self) -> str:
        return f"{self.op}/{size_label(self.size)}"

    def command(self, ctx: Context) -> tuple[str, ...]:
        n = {"quick": self.quick, "full": 4 * self.quick, "smoke": 1024}[ctx.mode]
        align = ("--align", str(self.align)) if self.align else ()
        return ("--op", self.op, "--size", str(self.size), "--ops", str(n)) + align


_PAIR = "malloc, write a byte, free"
OPS: tuple[Op, ...] = (
    Op("pair", 16, _PAIR, 50_000_000),
    Op("pair", 64, _PAIR, 50_000_000),
    Op("pair", 1024, _PAIR, 50_000_000),
    Op("pair", 4096, _PAIR, 40_000_000),
    Op("pair", 16384, _PAIR, 40_000_000),
    Op("replace", 64, "16 blocks held: free the oldest, malloc its successor", 50_000_000),
    Op("mixed", 1024, "1,024 blocks held of 16 B to the size: replace a random one", 40_000_000),
    Op("usable", 64, "malloc_usable_size of a block held", 100_000_000),
    Op("calloc", 64, "calloc, check it is zeroed, write a byte, free", 40_000_000),
    Op("calloc", 4096, "calloc, check it is zeroed, write a byte, free", 6_000_000),
    Op("realloc", 4096, "one op: a block grown from 16 B to the size by doubling reallocs, then freed",
       3_000_000),
    Op("aligned", 64, "aligned_alloc, free", 40_000_000, align=64),
    Op("memalign", 4096, "posix_memalign, free", 30_000_000, align=4096),
)
BY_KEY = {o.key: o for o in OPS}


class Ops(Experiment):
    name = "ops"
    kind = "micro"
    title = "Single operations, one at a time"
    seed = "—"
    about = ("Each operation of the malloc family in a loop of its own: malloc/free pairs from 16 B "
             "to 16 KiB, a block replaced among 16 held or among 1,024 of mixed sizes, "
             "malloc_usable_size, calloc, a block grown by reallocs, aligned_alloc and "
             "posix_memalign. Nanoseconds per operation; one verdict per operation against the "
             "fastest other allocator.")

    def params(self, ctx: Context) -> dict[str, Any]:
        return {o.key: "ops " + " ".join(o.command(ctx)) for o in OPS} | {"repetitions": ctx.reps}

    def cells(self, ctx: Context) -> list[Cell]:
        return [Cell(self.name, o.key, "ops", o.command(ctx), ctx.reps, info={"op": o.op, "size": o.size})
                for o in OPS]

    def reduce(self, cell: Cell, s: Sample) -> tuple[dict[str, float], dict[str, list]]:
        rec = next(r for r in s.records if "ns_per_op" in r)
        m = base_metrics(s)
        m["time"] = float(rec["ns_per_op"])  # ns per operation, timed inside the workload
        m["bad"] = float(rec["bad"])
        return m, {}

    def variant_subset(self, ctx: Context) -> list[str]:
        # The ledger's price on the fast paths: the pair and the replacement at 64 B.
        return ["pair/64 B", "replace/64 B"]

    def verdicts(self, res: ExpResult, ctx: Context) -> list[Verdict]:
        return self.first_per_cell(res, BEST_OTHER_MAX, "the fastest other's time")

    def tables(self, res: ExpResult, ctx: Context) -> list[Table]:
        rows = [[c, BY_KEY[c].about] + [fmt(res.m(a, c, "time"), 1) for a in res.allocators]
                + [over_best_other_text(res, FRUGAL, c)] for c in res.cells]
        return [("Nanoseconds per operation: median of the repetitions; frugal over the fastest other "
                 "(< 1.00: frugal wins)", ["operation", "what one is"] + res.allocators + ["frugal / fastest other"],
                 rows)]
