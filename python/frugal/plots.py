"""One PNG per experiment (matplotlib, Agg): the seeds' charts, one colour per allocator,
frugal drawn thickest."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator, PercentFormatter  # noqa: E402

from .experiments.bigbuf import BIG_VARIANTS, Bigbuf  # noqa: E402
from .experiments.bufcache import POLICIES  # noqa: E402
from .experiments.fifo import Fifo  # noqa: E402
from .experiments.footprint import IDLE_SLACK  # noqa: E402
from .experiments.threads import SHAPES, THREAD_SIZES, Threads, cell_key  # noqa: E402
from .lab import FRUGAL, Context, ExpResult  # noqa: E402
from .units import KiB, MiB, size_label  # noqa: E402

COLOURS = {"glibc": "#7f7f7f", "jemalloc": "#1f77b4", "tcmalloc": "#ff7f0e", "mimalloc": "#9467bd",
           "frugal": "#2ca02c"}
EXTRA = ["#d62728", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def colour(name: str, allocators: list[str]) -> str:
    if name in COLOURS:
        return COLOURS[name]
    extras = [a for a in allocators if a not in COLOURS]
    return EXTRA[extras.index(name) % len(EXTRA)] if name in extras else "#000000"


def width(name: str) -> float:
    return 2.6 if name == FRUGAL else 1.4


def style() -> None:
    plt.rcParams.update({"figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
                         "axes.spines.right": False, "font.size": 9, "axes.titlesize": 10,
                         "axes.titleweight": "bold", "legend.fontsize": 8, "legend.frameon": False})


def log_scale(ax: Axes, axis: str, **kw: Any) -> None:
    """Log-scale `axis` ("x" or "y") if the panel holds a positive value on it. Without one (an
    allocator left out or failed everywhere, a missing reference) matplotlib finds no log tick
    and tight_layout raises, so the axis stays linear and the panel says why it is empty."""
    if math.isfinite(ax.dataLim.minposx if axis == "x" else ax.dataLim.minposy):
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", **kw)
    elif not ax.texts:
        ax.text(0.5, 0.5, "no positive value measured", transform=ax.transAxes, ha="center", va="center", color="gray")


def size_axis(ax: Axes) -> None:
    log_scale(ax, "x", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(v) if v >= 1 else ""))


def finite(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and not math.isnan(y)]
    return [p[0] for p in pts], [p[1] for p in pts]


def legend_once(fig: plt.Figure, ax: Axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 8), bbox_to_anchor=(0.5, 0.965))

def finish_with_legend(fig: plt.Figure, legend_ax: Axes, title: str, path: Path) -> None:
    """One legend for the figure, the title above it, and the PNG written."""
    legend_once(fig, legend_ax)
    fig.suptitle(title, y=0.995, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    fig.savefig(path)
    plt.close(fig)



def time_over_fastest(res: ExpResult, cells: list[str]) -> Callable[[str, int], float]:
    """For grouped_bars over `cells`: an allocator's median time over the fastest's."""
    def value(a: str, k: int) -> float:
        fastest = min((res.m(b, cells[k], "time") for b in res.allocators), default=math.nan)
        return res.m(a, cells[k], "time") / fastest
    return value


def grouped_bars(ax: Axes, labels: list[str], allocators: list[str], value: Callable[[str, int], float]) -> None:
    """One group of bars per label, one bar per allocator in its colour."""
    n = max(len(allocators), 1)
    for i, a in enumerate(allocators):
        ax.bar([x + (i - (n - 1) / 2) * 0.8 / n for x in range(len(labels))],
               [value(a, k) for k in range(len(labels))], 0.8 / n, color=colour(a, allocators), label=a)
    ax.set_xticks(range(len(labels)), labels)


def plot_bufcache(res: ExpResult, ctx: Context, path: Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, policy in zip(axes.flat, POLICIES):
        for a in res.allocators:
            s = res.series.get(a, {}).get(policy, {})
            if s.get("step"):
                ax.plot(s["step"], s["efficiency"], color=colour(a, res.allocators), lw=width(a) * 0.45, label=a)
        ax.set_title(f"policy: {policy}")
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_xlabel("step")
        # 250k, not 250000: six digits a tick ran into each other across a third of the page.
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel("requested / handed out")
    ax = axes.flat[5]
    grouped_bars(ax, [p.replace("keep-biggest", "kb") for p in POLICIES], res.allocators,
                 lambda a, k: res.m(a, POLICIES[k], "maxrss") / MiB)
    ax.set_title("peak RSS (MiB) by policy")
    finish_with_legend(fig, axes.flat[0], "Seed 1 — efficiency over the run, one curve per allocator and policy", path)


def plot_fifo(res: ExpResult, ctx: Context, path: Path) -> None:
    exp = Fifo()
    fig = plt.figure(figsize=(15, 9))
    grid = fig.add_gridspec(2, 3)
    ax = fig.add_subplot(grid[0, :2])
    for a in res.allocators:
        for series, ls in (("pow2", "-"), ("pow2-32", "--")):
            cells = sorted(exp.c_cells(res, series), key=lambda c: res.info[c]["size"])
            xs, ys = finite([res.info[c]["size"] for c in cells], [res.m(a, c, "ns_per_byte") for c in cells])
            ax.plot(xs, ys, ls, marker="o", ms=3, color=colour(a, res.allocators), lw=width(a),
                    label=a if series == "pow2" else None)
    size_axis(ax)
    log_scale(ax, "y")
    ax.set_ylabel("ns per byte (median round)")
    ax.set_title("ns per byte against size (solid: 2ⁿ, dashed: 2ⁿ − 32)")
    ax.legend()

    ax = fig.add_subplot(grid[0, 2])
    cells = sorted(exp.c_cells(res, "pow2"), key=lambda c: res.info[c]["size"])
    for a in res.allocators:
        xs, ys = finite([res.info[c]["size"] for c in cells], [res.m(a, c, "last_over_first") for c in cells])
        ax.plot(xs, ys, marker="o", ms=3, color=colour(a, res.allocators), lw=width(a))
    ax.axhline(1.05, color="#d62728", ls=":", lw=1)
    size_axis(ax)
    ax.set_title("last round / first round (2ⁿ sizes)")

    for k, size in enumerate((64, 64 * KiB, 512 * KiB)):
        ax = fig.add_subplot(grid[1, k])
        cell = f"pow2/{size}"
        for a in res.allocators:
            r = res.series.get(a, {}).get(cell, {}).get("round_s", [])
            if r:
                ax.plot(range(1, len(r) + 1), [v * 1000 for v in r], marker="o", ms=3,
                        color=colour(a, res.allocators), lw=width(a))
        ax.set_title(f"round time against round — {size_label(size)} blocks")
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
    fig.suptitle("Seed 2 — FIFO of blocks of one size: cliffs and slowdowns", fontweight="bold")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_bigbuf(res: ExpResult, ctx: Context, path: Path) -> None:
    exp = Bigbuf()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, variant in zip(axes.flat, BIG_VARIANTS):
        cells = exp.cells_of(res, variant)
        for a in res.allocators:
            xs, ys = finite([res.info[c]["size"] for c in cells], [res.m(a, c, "us_per_mib") for c in cells])
            ax.plot(xs, ys, marker="o", ms=4, color=colour(a, res.allocators), lw=width(a), label=a)
            xs, ys = finite([res.info[c]["size"] for c in cells], [res.m(a, c, "outside_cpu_us_per_mib") for c in cells])
            ax.plot(xs, ys, ":", marker="x", ms=4, color=colour(a, res.allocators), lw=1)
        size_axis(ax)
        log_scale(ax, "y", nonpositive="mask")
        ax.set_title(f"{variant}: µs per MiB per iteration")
        ax.set_ylabel("inside (solid), outside user+sys (dotted)")
    ax = axes.flat[4]
    cells = exp.cells_of(res, "touched")
    for a in res.allocators:
        xs, ys = finite([res.info[c]["size"] for c in cells], [res.m(a, c, "faults_per_mib_steady") for c in cells])
        ax.plot(xs, ys, marker="o", ms=4, color=colour(a, res.allocators), lw=width(a))
    size_axis(ax)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_title("touched: minor faults per MiB per iteration (after the first)")
    ax = axes.flat[5]
    cells = exp.cells_of(res, "return")
    grouped_bars(ax, [size_label(res.info[c]["size"]) for c in cells], res.allocators,
                 lambda a, k: (res.m(a, cells[k], "rss_after_wait") - res.m(a, cells[k], "rss_start")) / MiB)
    ax.set_title(f"RSS above start after idling {exp.wait_ms(ctx)} ms (MiB)")
    finish_with_legend(fig, axes.flat[0], "Seed 3 — the hidden costs of big blocks", path)


def plot_threads(res: ExpResult, ctx: Context, path: Path) -> None:
    exp = Threads()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, size in zip(axes[0], THREAD_SIZES):
        ns = exp.counts(res, "malloc", size)
        for a in res.allocators:
            t1 = res.m(a, cell_key("malloc", size, 1), "ns_per_object")
            xs, ys = finite(ns, [t1 / res.m(a, cell_key("malloc", size, n), "ns_per_object") for n in ns])
            ax.plot(xs, ys, marker="o", ms=4, color=colour(a, res.allocators), lw=width(a), label=a)
        if ns:
            ax.plot(ns, [min(n, ctx.cores) for n in ns], color="black", ls=":", lw=1, label="perfect")
        log_scale(ax, "x", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_title(f"{size_label(size)}: speedup against 1 thread")
        ax.set_xlabel("threads")
    ax = axes[1][0]
    size = 1 * KiB
    ref = exp.reference(res)
    base = res.m(ref, cell_key("malloc", size, 1), "ns_per_object")
    for a in res.allocators:
        for variant, ls in (("malloc", "-"), ("mutex-array", "--"), ("global-mutex", ":")):
            ns = exp.counts(res, variant, size)
            xs, ys = finite(ns, [res.m(a, cell_key(variant, size, n), "ns_per_object") / base for n in ns])
            ax.plot(xs, ys, ls, marker="o", ms=3, color=colour(a, res.allocators), lw=width(a) * 0.8)
    log_scale(ax, "x", base=2)
    ns = exp.counts(res, "malloc", size)
    ax.set_xticks(ns, [str(n) for n in ns])
    log_scale(ax, "y")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_title(f"1 KiB, seed's chart: time / {ref} at 1 thread\n(solid malloc, dashed mutex-array, dotted global-mutex)")
    ax.set_xlabel("threads")
    ax = axes[1][1]
    cells = exp.of(res, "cross", *SHAPES)
    labels = [f"{res.info[c]['variant']}\n{size_label(res.info[c]['size'])}, N={res.info[c]['threads']}" for c in cells]

    grouped_bars(ax, labels, res.allocators, time_over_fastest(res, cells))
    log_scale(ax, "y")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title("blocks freed by other threads: time / the fastest's")
    ax = axes[1][2]
    top = max(exp.counts(res, "malloc", THREAD_SIZES[0]) or [1])
    grouped_bars(ax, [size_label(s) for s in THREAD_SIZES], res.allocators,
                 lambda a, k: res.m(a, cell_key("malloc", THREAD_SIZES[k], top), "maxrss") / MiB)
    ax.set_title(f"peak RSS at N={top} (MiB)")
    finish_with_legend(fig, axes[0][0], "Seed 4 — threads sharing a heap", path)


def plot_footprint(res: ExpResult, ctx: Context, path: Path) -> None:
    cols = 3
    rows = max(1, math.ceil(len(res.cells) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(15, 4.25 * rows), squeeze=False)
    for ax, cell in zip(axes.flat, res.cells):
        for a in res.allocators:
            s = res.series.get(a, {}).get(cell, {})
            if s.get("t"):
                ax.plot(s["t"], [b / MiB for b in s["rss"]], color=colour(a, res.allocators), lw=width(a) * 0.6, label=a)
        live = res.m(FRUGAL, cell, "live_bytes") if cell == "idle" else math.nan
        if not math.isnan(live):
            ax.axhline(live / MiB, color="black", ls=":", lw=1)
            ax.axhline((live + IDLE_SLACK) / MiB, color="#d62728", ls=":", lw=1)
        ax.set_title(f"{cell}" + (" (dotted: live bytes, and live + 8 MiB)" if not math.isnan(live) else ""))
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS (MiB)")
        ax.set_ylim(bottom=0)
    for ax in axes.flat[len(res.cells):]:
        ax.set_visible(False)
    finish_with_legend(fig, axes.flat[0], "Footprint — RSS over time, sampled from outside (the median run of each)", path)


def plot_shapes(res: ExpResult, ctx: Context, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(15, 4.75))
    cells = res.cells

    grouped_bars(axes[0], cells, res.allocators, time_over_fastest(res, cells))
    axes[0].axhline(1.0, color="black", ls=":", lw=1)
    axes[0].set_title("time / the fastest's (lower is better)")
    grouped_bars(axes[1], cells, res.allocators, lambda a, k: res.m(a, cells[k], "maxrss") / MiB)
    axes[1].set_title("peak RSS (MiB)")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    finish_with_legend(fig, axes[0], "Shapes — programs frugal must win one by one", path)


def plot_ops(res: ExpResult, ctx: Context, path: Path) -> None:
    fig, ax = plt.subplots(1, 1, figsize=(15, 4.75))
    cells = res.cells

    grouped_bars(ax, cells, res.allocators, time_over_fastest(res, cells))
    ax.axhline(1.0, color="black", ls=":", lw=1)
    ax.set_title("time per operation / the fastest's (lower is better)")
    ax.tick_params(axis="x", labelsize=8)
    finish_with_legend(fig, ax, "Ops — single operations, one at a time", path)


PLOTTERS: dict[str, Callable[[ExpResult, Context, Path], None]] = {
    "bufcache": plot_bufcache, "fifo": plot_fifo, "bigbuf": plot_bigbuf, "threads": plot_threads,
    "footprint": plot_footprint, "shapes": plot_shapes,
    "ops": plot_ops}


def plot(name: str, res: ExpResult, ctx: Context, path: Path) -> None:
    style()
    PLOTTERS[name](res, ctx, path)
