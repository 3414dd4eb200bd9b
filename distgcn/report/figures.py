"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no display, no pyplot state).

Every figure has a fixed size in inches at a fixed DPI (constrained layout,
no tight cropping), so the PNG's pixel size is known in advance.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator

from distgcn.io.safe_io import PNG_MARKER, REPORT_FIGURE, is_output, write_file
from distgcn.report.analysis import (
    SPLIT_PARTS,
    colour_limits,
    describe,
    model_groups,
    scaling_series,
    timing,
)
from distgcn.report.inputs import Partition, Run

DPI = 100
COLOURS = {"compute_s": "tab:blue", "comm_wait_s": "tab:orange", "allreduce_s": "tab:green"}
OVERSUBSCRIBED_HATCH = "//"
MARKERS = "osD^vP*Xh<>"
LINESTYLES = ("-", "--", "-.", ":")
ANNOTATE_MAX_P = 12
"""Write each cell's count in the communication heatmap up to this P (beyond, digits would overlap)."""


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    """Atomically, marked as distgcn's, replacing only an earlier report's figure (:mod:`distgcn.io.safe_io`)."""
    return write_file(path, REPORT_FIGURE, lambda fh: fig.savefig(fh, format="png", dpi=DPI, metadata=PNG_MARKER))


def earlier_figures(out: Path) -> dict[Path, tuple[int, int, int]]:
    """The figures of an earlier report in ``out``, each with its (inode, size, mtime): what it was when seen.

    Read before the new report is written: a figure drawn before the PNG marker
    existed is recognised by the old summary's link to it, which the new
    summary replaces.
    """
    found = {}
    for path in sorted(out.glob("*.png")):
        if is_output(path, REPORT_FIGURE):
            info = path.lstat()
            found[path] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return found


def remove_stale(earlier: dict[Path, tuple[int, int, int]], drawn: list[Path]) -> list[Path]:
    """Delete the earlier report's figures that this report did not draw again, unchanged since they were seen;
    returns them. A file of the user's, or one changed meanwhile, stays."""
    removed = []
    for path, seen in earlier.items():
        if path in drawn:
            continue
        try:
            info = path.lstat()
            if (info.st_ino, info.st_size, info.st_mtime_ns) == seen and not path.is_symlink():
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def slug(text: str) -> str:
    """A file-name-safe form of a label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "unnamed"


def graph_panels(runs: list[Run]) -> dict[str | None, list[Run]]:
    """The runs of each graph, graphs in order of first appearance: one row of panels each."""
    panels: dict[str | None, list[Run]] = {}
    for run in runs:
        panels.setdefault(run.graph, []).append(run)
    return panels


def run_style(index: int) -> dict:
    """Colour, marker and dash of the index-th run of a panel: runs that coincide stay told apart by marker and
    dash, and markers are staggered so that they do not sit on each other."""
    return {"color": f"C{index % 10}", "marker": MARKERS[index % len(MARKERS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)]}


def curves(runs: list[Run], path: Path) -> Path:
    """Loss and test accuracy against the epoch, one row of panels per graph (never two graphs on one axes)."""
    panels = graph_panels(runs)
    fig = _figure(12, 4.5 if len(panels) == 1 else 3.6 * len(panels))
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for (graph, group), (loss_ax, acc_ax) in zip(panels.items(), axes):
        for i, run in enumerate(group):
            epochs = run.series("epoch")
            every = max(len(group), len(epochs) // 8)  # each run's markers on epochs of their own
            style = {**run_style(i), "markevery": (i % every, every),
                     "markersize": 5, "linewidth": 1.3, "alpha": 0.85, "label": run.label}
            loss_ax.plot(epochs, run.series("loss"), **style)
            acc_ax.plot(epochs, run.series("test_acc"), **style)
        loss_ax.set(title=f"{graph or 'unknown graph'}: training loss", xlabel="epoch", ylabel="loss")
        acc_ax.set(title=f"{graph or 'unknown graph'}: test accuracy", xlabel="epoch", ylabel="test accuracy",
                   ylim=(0, 1.02))
        acc_ax.legend(title="run", fontsize="small", loc="lower right")
        for ax in (loss_ax, acc_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
    return _save(fig, path)


def _oversubscription_note(run: Run) -> str:
    if run.oversubscribed is None:
        return "cores per node not recorded"
    if run.oversubscribed:
        ranks, cores = run.node
        return f"OVERSUBSCRIBED: {ranks} ranks on {cores} cores, times include waiting for a core"
    return "not oversubscribed"


def time_split(run: Run, path: Path) -> Path:
    """Each epoch's wall time split into the slowest rank's compute, halo wait and allreduce: its own parts, so the
    stack is exactly the epoch's time."""
    fig = _figure(9, 4.5)
    ax = fig.subplots()
    epochs = run.series("epoch")
    t = timing([run])
    edges = np.append(epochs - 0.5, epochs[-1] + 0.5)
    hatch = OVERSUBSCRIBED_HATCH if run.oversubscribed else None
    if run.has_split:
        bottom = np.zeros_like(epochs)
        for key, name in SPLIT_PARTS:
            values = run.series(f"slowest_{key}") * 1e3
            ax.bar(epochs, values, width=1.0, bottom=bottom, color=COLOURS[key], linewidth=0, hatch=hatch,
                   label=f"{name} ({t.split_s[key] * 1e3:.1f} ms of the median)")
            bottom += values
        what = "stacked: the slowest rank's own compute, halo wait and allreduce"
    else:
        what = "split not recorded (metrics file older than the slowest rank's split)"
    ax.stairs(run.series("epoch_s") * 1e3, edges, color="black", linewidth=1,
              label=f"epoch wall time: median {t.median_s * 1e3:.1f} ms, "
                    f"{t.spread} {t.low_s * 1e3:.1f} to {t.high_s * 1e3:.1f} ms")
    ax.set(title=f"Time per epoch: {run.label}\n{what}\n{_oversubscription_note(run)}",
           xlabel="epoch", ylabel="time per epoch (ms)", xlim=(epochs[0] - 0.5, epochs[-1] + 0.5))
    steady_top = run.steady_series("epoch_s").max() * 1e3
    first = run.series("epoch_s")[0] * 1e3
    if len(epochs) > 1 and first > 2 * steady_top:  # the warm-up epoch would flatten every other bar
        ax.set_ylim(0, 1.5 * steady_top)
        ax.annotate(f"epoch {epochs[0]:.0f}: {first:.0f} ms (warm-up, off scale)", (epochs[0], 1.5 * steady_top),
                    textcoords="offset points", xytext=(4, -12), fontsize="small")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def strong_scaling(runs: list[Run], path: Path) -> Path:
    """Median epoch time (error bars: spread) and parallel efficiency against P, one line per (graph, model);
    oversubscribed points are hollow and labelled."""
    fig = _figure(12, 4.5)
    time_ax, eff_ax = fig.subplots(1, 2)
    all_ranks: set[int] = set()
    any_oversubscribed = False
    for i, ((graph, model), points) in enumerate(scaling_series(runs).items()):
        color = f"C{i % 10}"
        ranks = np.array([p.ranks for p in points])
        all_ranks.update(ranks.tolist())
        label = describe(graph, model or "unknown model")
        medians = np.array([p.timing.median_s for p in points]) * 1e3
        spread = np.array([[p.timing.median_s - p.timing.low_s, p.timing.high_s - p.timing.median_s]
                           for p in points]).T * 1e3
        time_ax.errorbar(ranks, medians, yerr=spread, fmt="-", color=color, capsize=4, label=label)
        time_ax.plot(ranks, points[0].epoch_s * 1e3 * ranks[0] / ranks, ":", color=color)
        eff_ax.plot(ranks, [p.efficiency for p in points], "-", color=color, label=label)
        for ax, values in ((time_ax, medians), (eff_ax, [p.efficiency for p in points])):
            for p, x, y in zip(points, ranks, values):
                over = bool(p.timing.oversubscribed)
                any_oversubscribed |= over
                ax.plot(x, y, "o", color=color, markerfacecolor="white" if over else color, zorder=3)
                if over:
                    ax.annotate("oversubscribed", (x, y), textcoords="offset points", xytext=(-6, 6),
                                ha="right", fontsize="x-small", color=color)
    eff_ax.axhline(1.0, color="grey", linewidth=0.8)
    for ax in (time_ax, eff_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ranks), [str(p) for p in sorted(all_ranks)])
        ax.minorticks_off()
        ax.set_xlabel("ranks P")
        ax.grid(alpha=0.3)
    time_ax.set_yscale("log")
    time_ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))  # 60, not 6x10^1
    time_ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))  # 20, 30, 50: readable, not crowded
    time_ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    time_ax.set(title="Strong scaling: median epoch time, error bars: range over repeats\n"
                      "(one run: interquartile range over epochs); dotted: ideal",
                ylabel="time per epoch (ms)")
    eff_ax.set(title="Parallel efficiency of the medians (relative to the smallest P)"
                     + ("\nhollow: oversubscribed (more ranks than cores)" if any_oversubscribed else ""),
               ylabel="efficiency", ylim=(0, max(1.1, eff_ax.get_ylim()[1])))
    time_ax.legend(fontsize="small", loc="best")
    return _save(fig, path)


def run_models(runs: list[Run], path: Path) -> Path:
    """Partition models compared by training runs of one graph at one P: median epoch time split as the slowest
    rank spent it, with its spread and each repeat as a dot, and halo traffic."""
    groups = model_groups(runs)
    fig = _figure(max(6.0, 4.0 * len(groups)), 7)
    axes = fig.subplots(2, len(groups), squeeze=False)
    any_oversubscribed = False
    for column, ((graph, ranks), group) in enumerate(groups.items()):
        time_ax, halo_ax = axes[0, column], axes[1, column]
        by_model: dict[str | None, list[Run]] = {}
        for run in group:
            by_model.setdefault(run.model, []).append(run)
        timings = [timing(model_runs) for model_runs in by_model.values()]
        x = np.arange(len(by_model))
        names = [f"{model}\n{len(model_runs)} run{'s' if len(model_runs) > 1 else ''}"
                 + ("\noversubscribed" if t.oversubscribed else "")
                 for (model, model_runs), t in zip(by_model.items(), timings)]
        hatches = [OVERSUBSCRIBED_HATCH if t.oversubscribed else None for t in timings]
        any_oversubscribed |= any(t.oversubscribed for t in timings)
        bottom = np.zeros(len(by_model))
        for key, name in SPLIT_PARTS:
            values = np.array([t.split_s[key] * 1e3 if t.split_s else 0.0 for t in timings])
            time_ax.bar(x, values, bottom=bottom, color=COLOURS[key], label=name, hatch=hatches)
            bottom += values
        unsplit = np.array([0.0 if t.split_s else t.median_s * 1e3 for t in timings])
        if unsplit.any():
            time_ax.bar(x, unsplit, bottom=bottom, color="lightgrey", label="split not recorded", hatch=hatches)
        medians = np.array([t.median_s for t in timings]) * 1e3
        time_ax.errorbar(x, medians, yerr=np.array([[t.median_s - t.low_s, t.high_s - t.median_s]
                                                    for t in timings]).T * 1e3,
                         fmt="none", ecolor="black", capsize=6, label="spread")
        for xi, t in zip(x, timings):
            if len(t.repeat_medians_s) > 1:
                time_ax.plot(np.full(len(t.repeat_medians_s), xi + 0.25), np.array(t.repeat_medians_s) * 1e3,
                             "k.", label="median of each repeat")
        halo_ax.bar(x, [statistics.median(r.steady("halo_bytes") for r in model_runs) / 1e6
                        for model_runs in by_model.values()], color="tab:purple")
        time_ax.set(title=describe(graph, ranks=ranks), ylabel="median time per epoch (ms)")
        halo_ax.set(ylabel="halo traffic per epoch (MB, all ranks)")
        for ax in (time_ax, halo_ax):
            ax.set_xticks(x, names, fontsize="small")
            ax.grid(axis="y", alpha=0.3)
    handles: dict[str, object] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if any_oversubscribed:
        handles["hatched: oversubscribed"] = Patch(facecolor="white", edgecolor="black", hatch=OVERSUBSCRIBED_HATCH)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=3, fontsize="small")
    fig.suptitle("Partition models in training: median epoch time in the slowest rank's split\n"
                 "error bars: range over repeats (one run: interquartile range over epochs)", fontsize="medium")
    return _save(fig, path)


PARTITION_PANELS = (
    ("total volume", "rows of H sent per SpMM (all ranks)", lambda p: p.meta["volume"]["total"]),
    ("busiest sender", "rows of H sent per SpMM by one rank", lambda p: p.meta["volume"]["max"]),
    ("messages", "messages per SpMM (all ranks)", lambda p: p.meta["messages"]["total"]),
    ("load imbalance", "max / average nonzeros per rank", lambda p: p.meta["imbalance"]),
)
MINIBATCH_PANEL = ("SHP: minibatch volume (its objective)", "expected rows sent per minibatch SpMM",
                   lambda p: p.minibatch_volume)


def partition_panels(groups: dict[tuple[str | None, int], list[Partition]]) -> list[tuple]:
    """The panels worth drawing: a panel whose value is the same for every model of every group says nothing
    and is left out; the minibatch volume is added when a stochastic partition records it."""
    panels = [panel for panel in PARTITION_PANELS if not constant_panel(panel, groups)]
    if any(p.minibatch_volume is not None for group in groups.values() for p in group):
        panels.append(MINIBATCH_PANEL)
    return panels


def constant_panel(panel: tuple, groups: dict[tuple[str | None, int], list[Partition]]) -> bool:
    """Whether every model of every group has the same value on this panel."""
    return all(len({panel[2](p) for p in group}) == 1 for group in groups.values())


def partition_models(partitions: list[Partition], path: Path) -> Path:
    """Partition models compared by their predicted communication and load balance, per graph and P."""
    groups = model_groups(partitions)
    order = [p.model for g in groups.values() for p in g]
    models = sorted(set(order), key=order.index)
    panels = partition_panels(groups)
    fig = _figure(max(7.0, 3.5 * len(panels)), 4.5)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    x = np.arange(len(groups))
    width = 0.8 / len(models)
    for ax, (title, unit, value) in zip(axes, panels):
        for m, model in enumerate(models):
            heights = [next((value(p) for p in group if p.model == model and value(p) is not None), np.nan)
                       for group in groups.values()]
            shp_full_batch = model == "SHP" and value is not MINIBATCH_PANEL[2] and title != "load imbalance"
            ax.bar(x + (m - (len(models) - 1) / 2) * width, heights, width, label=model, color=f"C{m % 10}",
                   hatch=".." if shp_full_batch else None, edgecolor="white" if shp_full_batch else None)
        ax.set_xticks(x, [describe(graph, ranks=ranks) for graph, ranks in groups], fontsize="small")
        ax.set_title(title, fontsize="medium")
        ax.set_ylabel(unit)
        ax.grid(axis="y", alpha=0.3)
        if title == "load imbalance":
            top = np.nanmax([p.meta["imbalance"] for g in groups.values() for p in g])
            ax.set_ylim(1.0, max(1.0 + 1.15 * (top - 1.0), 1.01))  # 1 is perfect balance
    handles, labels = axes[0].get_legend_handles_labels()
    if "SHP" in models:
        handles.append(Patch(facecolor="white", edgecolor="grey", hatch=".."))
        labels.append("dotted SHP: full-batch value;\nSHP minimises the minibatch one")
    fig.legend(handles, labels, title="model", loc="outside lower center", ncols=len(labels), fontsize="small")
    omitted = [f"{title}: the same for every model ({', '.join(f'{value(g[0]):g}' for g in groups.values())})"
               for title, _, value in PARTITION_PANELS if constant_panel((title, _, value), groups)]
    fig.suptitle("Partition models: predicted communication and balance (per SpMM of one layer)"
                 + "".join(f"\n{line}" for line in omitted), fontsize="medium")
    return _save(fig, path)


def comm_heatmap(part: Partition, path: Path, limits: tuple[float, float], shared_by: int) -> Path:
    """The P x P rows-sent matrix on a colour scale (``limits``) shared by the ``shared_by`` partitions of its graph
    in this report, so equal colours are equal counts across them; the diagonal (nothing sent to oneself) is grey."""
    fig = _figure(7.5, 6.5)
    ax = fig.subplots()
    nparts = part.ranks
    masked = np.ma.masked_array(part.comm, mask=np.eye(nparts, dtype=bool))
    vmin, vmax = limits
    image = ax.imshow(masked, cmap=colormaps["viridis"].with_extremes(bad="lightgrey"), interpolation="nearest",
                      vmin=vmin, vmax=vmax)
    shared = f"; scale shared by the {shared_by} partitions of {part.graph or 'this graph'}" if shared_by > 1 else ""
    fig.colorbar(image, ax=ax, label=f"rows of H sent per SpMM{shared}")
    if nparts <= ANNOTATE_MAX_P:
        threshold = (vmin + vmax) / 2
        for i in range(nparts):
            for j in range(nparts):
                if i != j:
                    ax.text(j, i, str(part.comm[i, j]), ha="center", va="center", fontsize="small",
                            color="black" if part.comm[i, j] > threshold else "white")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="receiving rank", ylabel="sending rank",
           title=f"Communication matrix: {part.label}\n"
                 f"{int(part.comm.sum())} rows in {int(np.count_nonzero(part.comm))} messages per SpMM")
    return _save(fig, path)


def rank_balance(part: Partition, path: Path) -> Path:
    """Per rank: rows sent and received (communication balance), and nonzeros owned (compute balance)."""
    fig = _figure(10, 7)
    volume_ax, load_ax = fig.subplots(2, 1, sharex=True)
    ranks = np.arange(part.ranks)
    sent, received = part.comm.sum(axis=1), part.comm.sum(axis=0)
    volume_ax.bar(ranks - 0.2, sent, 0.4, label="sent", color="tab:blue")
    volume_ax.bar(ranks + 0.2, received, 0.4, label="received", color="tab:orange")
    volume_ax.axhline(sent.mean(), color="black", linestyle="--", linewidth=0.8, label="average")
    volume_ax.set(ylabel="rows of H per SpMM",
                  title=f"Per-rank balance: {part.label}\n"
                        f"volume: max sent {sent.max()}, max received {received.max()}, average {sent.mean():.1f}")
    volume_ax.set_ylim(0, 1.25 * max(int(sent.max()), int(received.max()), 1))
    volume_ax.legend(fontsize="small", loc="upper right", ncols=3)
    load_ax.bar(ranks, part.nonzeros, 0.8, color="tab:green")
    mean = part.nonzeros.mean()
    load_ax.axhline(mean, color="black", linestyle="--", linewidth=0.8)
    imbalance = part.nonzeros.max() / mean if mean > 0 else 1.0
    low, high = int(part.owned.min()), int(part.owned.max())
    vertices = str(low) if low == high else f"{low} to {high}"
    load_ax.set(xlabel="rank", ylabel="nonzeros of Â owned",
                title=f"load: imbalance {imbalance:.3f} (max/avg nonzeros); {vertices} vertices per rank")
    load_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    load_ax.set_xlim(-0.6, part.ranks - 0.4)
    for ax in (volume_ax, load_ax):
        ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def render_all(runs: list[Run], partitions: list[Partition], out: Path) -> list[tuple[str, Path]]:
    """Every figure the inputs allow, as (caption, file) in reading order."""
    figures: list[tuple[str, Path]] = []
    used: set[str] = set()

    def name(stem: str) -> Path:
        candidate, n = stem, 1
        while candidate in used:
            n += 1
            candidate = f"{stem}-{n}"
        used.add(candidate)
        return out / f"{candidate}.png"

    if runs:
        figures.append(("Loss and test accuracy", curves(runs, name("curves"))))
        for run in runs:
            figures.append((f"Time split: {run.label}", time_split(run, name(f"time-{slug(run.name)}"))))
    if scaling_series(runs):
        figures.append(("Strong scaling", strong_scaling(runs, name("scaling"))))
    if model_groups(runs):
        figures.append(("Partition models in training", run_models(runs, name("models-training"))))
    if model_groups(partitions):
        figures.append(("Partition models: predicted communication",
                        partition_models(partitions, name("models-partitions"))))
    limits = colour_limits(partitions)
    for part in partitions:
        shared_by = sum(other.graph == part.graph for other in partitions)
        figures.append((f"Communication matrix: {part.label}",
                        comm_heatmap(part, name(f"comm-{slug(part.name)}"), limits[part.graph], shared_by)))
        figures.append((f"Per-rank balance: {part.label}", rank_balance(part, name(f"balance-{slug(part.name)}"))))
    return figures
