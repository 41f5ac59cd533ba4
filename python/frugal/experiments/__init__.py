"""The five experiments of LAB.md, the program shapes frugal must win and the single
operations, one module each: the cells a mode runs (parameters as LAB.md gives them), how one
run reduces to metrics, the verdicts on frugal and the report's tables. Thresholds are LAB.md's; where it leaves a word open
("~0", "poison"), a constant says how."""

from __future__ import annotations

from .base import Experiment, Table
from .bigbuf import Bigbuf
from .bufcache import Bufcache
from .fifo import Fifo
from .footprint import Footprint
from .ops import Ops
from .shapes import Shapes
from .threads import Threads

EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (Bufcache(), Fifo(), Bigbuf(), Threads(), Footprint(),
                                                          Shapes(), Ops())}
__all__ = ["EXPERIMENTS", "Experiment", "Table"]
