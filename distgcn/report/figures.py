"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no display, no pyplot state).

Every figure has a fixed size in inches at a fixed DPI (constrained layout,
no tight cropping), so the PNG's pixel size is known in advance.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import (
    FormatStrFormatter,
    LogLocator,
    MaxNLocator,
    ScalarFormatter,
)

from distgcn.io.safe_io import PNG_MARKER, REPORT_FIGURE, is_output, write_file
from distgcn.report.analysis import (
    SPLIT_PARTS,
    BalanceLimits,
    balance_limits,
    colour_limits,
    describe,
    model_groups,
    scaling_series,
    timing,
)
from distgcn.report.inputs import Partition, Run
from distgcn.report.predicted import Predicted, panels

DPI = 100
COLOURS = {"compute_s": "tab:blue", "comm_wait_s": "tab:orange", "allreduce_s": "tab:green"}
CONTENTION_HATCH = "//"
"""Bars of runs whose threads waited for a core (oversubscribed, or a busy node)."""
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


ACCURACIES = (("train_acc", "train", ":"), ("val_acc", "validation", "--"), ("test_acc", "test", "-"))
"""The accuracy curves of a run: key, name and dash (the run's colour and marker tell the runs apart)."""
RESUME_DASH = "-."
"""The vertical line after the epoch a run resumed from: a dash no accuracy curve uses."""


def _plain_axis(ax: Axes) -> None:
    """Tick labels that are the values themselves: no offset (``+2.079``) or common factor (``1e-4``), which make a
    span of 3·10⁻⁴ look like a curve going somewhere."""
    formatter = ScalarFormatter(useOffset=False)
    formatter.set_scientific(False)
    ax.yaxis.set_major_formatter(formatter)


def _loss_limits(group: list[Run], chance: list[float]) -> tuple[float, float]:
    """From 0 (a cross-entropy is never below) to a little above the largest finite loss or chance level, so that
    a flat loss looks flat and a falling one shows how far it fell."""
    values = np.concatenate([run.series("loss") for run in group])
    finite = values[np.isfinite(values)]
    top = max([*(finite.tolist() if finite.size else []), *chance, 0.0])
    low = min(0.0, float(finite.min())) if finite.size else 0.0
    return low, 1.05 * top if top > 0 else 1.0


def curves_figure(runs: list[Run]) -> Figure:
    """Loss and train/validation/test accuracy against the epoch, one row of panels per graph (never two graphs on
    one axes). A graph whose labels are random says so and shows chance level (ln C and 1/C); a resumed run has a
    dotted vertical line after the epoch it resumed from. The legend sits right of the panels, off the curves."""
    panels = graph_panels(runs)
    fig = _figure(12, 4.5 if len(panels) == 1 else 3.6 * len(panels))
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for (graph, group), (loss_ax, acc_ax) in zip(panels.items(), axes):
        name = graph or "unknown graph"
        handles: list = []
        for i, run in enumerate(group):
            epochs = run.series("epoch")
            every = max(len(group), len(epochs) // 8)  # each run's markers on epochs of their own
            style = {**run_style(i), "markevery": (i % every, every), "markersize": 5, "linewidth": 1.3,
                     "alpha": 0.85}
            loss_ax.plot(epochs, run.series("loss"), **style)
            handles.append(Line2D([], [], color=style["color"], marker=style["marker"], linestyle="none",
                                  markersize=5, label=run.label))  # the dash is the loss's only, see below
            for key, _, dash in ACCURACIES:
                acc_ax.plot(epochs, run.series(key), **{**style, "linestyle": dash})
            for after in run.resumed_after:
                for ax in (loss_ax, acc_ax):
                    ax.axvline(after + 0.5, color=style["color"], linestyle=RESUME_DASH, linewidth=1.2)
                loss_ax.annotate(f"resumed after epoch {after}", (after + 0.5, 0.02),
                                 xycoords=("data", "axes fraction"), rotation=90, ha="right", va="bottom",
                                 fontsize="x-small", color=style["color"])
        random = [run for run in group if run.random_labels]
        classes = sorted({run.classes for run in random if run.classes})
        loss_title, acc_title = f"{name}: training loss", f"{name}: accuracy"
        if random:
            which = "" if len(random) == len(group) else f" in {', '.join(run.label for run in random)}"
            counts = "/".join(map(str, classes)) or "?"
            note = f"labels are random{which} ({counts} classes):\nnothing to learn, chance level dotted"
            loss_title, acc_title = f"{loss_title}\n{note}", f"{acc_title}\n{note}"
            for count in classes:
                handles.append(loss_ax.axhline(math.log(count), color="grey", linestyle=":", linewidth=1,
                                               label=f"chance: loss ln {count} = {math.log(count):.3f}, "
                                                     f"accuracy 1/{count}"))
                acc_ax.axhline(1 / count, color="grey", linestyle=":", linewidth=1)
        loss_ax.set(title=loss_title, xlabel="epoch", ylabel="loss",
                    ylim=_loss_limits(group, [math.log(count) for count in classes]))
        _plain_axis(loss_ax)
        acc_ax.set(title=acc_title, xlabel="epoch", ylabel="accuracy", ylim=(0, 1.02))
        handles += [Line2D([], [], color="black", linestyle=dash, label=f"{what} accuracy")
                    for _, what, dash in ACCURACIES]
        if len(group) > 1:
            handles.append(Line2D([], [], color="black", linestyle="none", label="loss: dashes tell runs apart"))
        if any(run.resumed_after for run in group):
            handles.append(Line2D([], [], color="black", linestyle=RESUME_DASH, linewidth=1.2,
                                  label="resumed from a checkpoint"))
        acc_ax.legend(handles=handles, title="run (colour, marker)", fontsize="small", title_fontsize="small",
                      loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        for ax in (loss_ax, acc_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
    return fig


def curves(runs: list[Run], path: Path) -> Path:
    """:func:`curves_figure`, saved."""
    return _save(curves_figure(runs), path)


def _contention_note(run: Run) -> str:
    """The title line of a run's time split: why its threads waited for a core, or that they did not."""
    if run.contention is None:
        return "cores per node not recorded"
    node = run.header.get("node") or {}
    notes = []
    if run.oversubscribed:
        ranks, cores = run.node
        notes.append(f"OVERSUBSCRIBED (rank 0's node: {ranks} ranks × {run.threads or '?'} threads on {cores} cores)")
    if run.busy:
        notes.append(f"BUSY NODE (load average {node['load_average']:.2f}, other processes "
                     f"{node.get('other_load') or 0.0:.2f})")
    if notes:
        return "; ".join(notes) + ": times include waiting for a core"
    return "not oversubscribed" + (", node not busy" if run.busy is not None else "; node load not recorded")


def time_split(run: Run, path: Path) -> Path:
    """Each epoch's wall time split into the slowest rank's compute, halo wait and allreduce: its own parts, so the
    stack is exactly the epoch's time."""
    fig = _figure(9, 4.5)
    ax = fig.subplots()
    epochs = run.series("epoch")
    t = timing([run])
    edges = np.append(epochs - 0.5, epochs[-1] + 0.5)
    hatch = CONTENTION_HATCH if run.contention else None
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
    ax.set(title=f"Time per epoch: {run.label}\n{what}\n{_contention_note(run)}",
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


EFFICIENCY_TOP = 1.2
"""The efficiency axis ends here when some efficiency is above 1: such a point is a flag, not a value to scale to."""


def scaling_figure(runs: list[Run]) -> Figure:
    """Median epoch time (error bars: spread) and parallel efficiency against P, one line per (graph, model).

    Points whose runs waited for a core (oversubscribed, busy node) are hollow and labelled. An efficiency above 1
    is no result but a sign that the smallest P was slowed: such a point is left off its line and drawn as a red
    cross at the top of the axis, its value written beside it.
    """
    fig = _figure(12, 4.5)
    time_ax, eff_ax = fig.subplots(1, 2)
    all_ranks: set[int] = set()
    any_contended = any_above = False
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
        results = [p for p in points if not p.above_ideal]
        eff_ax.plot([p.ranks for p in results], [p.efficiency for p in results], "-", color=color, label=label)
        for p, median in zip(points, medians):
            contended = bool(p.timing.contended)
            any_contended |= contended
            face = "white" if contended else color
            time_ax.plot(p.ranks, median, "o", color=color, markerfacecolor=face, zorder=3)
            if contended:
                time_ax.annotate(", ".join(p.timing.contention), (p.ranks, median), textcoords="offset points",
                                 xytext=(-6, 6), ha="right", fontsize="x-small", color=color)
            if p.above_ideal:
                any_above = True
                y = min(p.efficiency, EFFICIENCY_TOP - 0.05)
                eff_ax.plot(p.ranks, y, "x", color="red", markersize=9, markeredgewidth=2, zorder=4)
                eff_ax.annotate(f"{p.efficiency:.2f}: above 1,\ncontention at P={points[0].ranks}?", (p.ranks, y),
                                textcoords="offset points", xytext=(-8, -4), ha="right", va="top",
                                fontsize="x-small", color="red")
            else:
                eff_ax.plot(p.ranks, p.efficiency, "o", color=color, markerfacecolor=face, zorder=3)
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
                      "(one run: interquartile range over epochs); dotted: ideal"
                      + ("\nhollow: contention (threads waited for a core)" if any_contended else ""),
                ylabel="time per epoch (ms)")
    eff_ax.set(title="Parallel efficiency of the medians (relative to the smallest P)"
                     + ("\nhollow: contention (oversubscribed or a busy node)" if any_contended else "")
                     + ("\nred ×: above 1, a sign of contention, not a result" if any_above else ""),
               ylabel="efficiency",
               ylim=(0, EFFICIENCY_TOP if any_above else max(1.1, eff_ax.get_ylim()[1])))
    time_ax.legend(fontsize="small", loc="best")
    return fig


def strong_scaling(runs: list[Run], path: Path) -> Path:
    """:func:`scaling_figure`, saved."""
    return _save(scaling_figure(runs), path)


def run_models(runs: list[Run], path: Path) -> Path:
    """Partition models compared by training runs of one graph at one P: median epoch time split as the slowest
    rank spent it, with its spread and each repeat as a dot, and halo traffic."""
    groups = model_groups(runs)
    fig = _figure(max(6.0, 4.0 * len(groups)), 7)
    axes = fig.subplots(2, len(groups), squeeze=False)
    any_contended = False
    for column, ((graph, ranks), group) in enumerate(groups.items()):
        time_ax, halo_ax = axes[0, column], axes[1, column]
        by_model: dict[str | None, list[Run]] = {}
        for run in group:
            by_model.setdefault(run.model, []).append(run)
        timings = [timing(model_runs) for model_runs in by_model.values()]
        x = np.arange(len(by_model))
        names = [f"{model}\n{len(model_runs)} run{'s' if len(model_runs) > 1 else ''}"
                 + ("\n" + ", ".join(t.contention) if t.contended else "")
                 for (model, model_runs), t in zip(by_model.items(), timings)]
        hatches = [CONTENTION_HATCH if t.contended else None for t in timings]
        any_contended |= any(t.contended for t in timings)
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
    if any_contended:
        handles["hatched: contention (oversubscribed or busy node)"] = Patch(facecolor="white", edgecolor="black",
                                                                               hatch=CONTENTION_HATCH)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=3, fontsize="small")
    fig.suptitle("Partition models in training: median epoch time in the slowest rank's split\n"
                 "error bars: range over repeats (one run: interquartile range over epochs)", fontsize="medium")
    return _save(fig, path)


def predicted_time(predicted: list[Predicted], path: Path) -> Path:
    """Per graph, P and link: each model's measured epoch (the slowest rank's split) beside its prediction (compute,
    halo, allreduce added; a line at the prediction with every transfer hidden)."""
    groups = panels(predicted)
    fig = _figure(max(6.0, 4.5 * len(groups)), 5)
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    predicted_parts = (("compute_s", "compute_s"), ("comm_wait_s", "halo_s"), ("allreduce_s", "allreduce_s"))
    for ax, ((graph, ranks, link), group) in zip(axes, groups.items()):
        x = np.arange(len(group))
        measured_bottom, predicted_bottom = np.zeros(len(group)), np.zeros(len(group))
        splits = [timing([p.run]).split_s for p in group]
        for (key, name), (_, predicted_key) in zip(SPLIT_PARTS, predicted_parts):
            measured = np.array([(s[key] if s else 0.0) * 1e3 for s in splits])
            ax.bar(x - 0.2, measured, 0.38, bottom=measured_bottom, color=COLOURS[key], label=f"measured: {name}")
            measured_bottom += measured
            values = np.array([p.prediction[predicted_key] * 1e3 for p in group])
            ax.bar(x + 0.2, values, 0.38, bottom=predicted_bottom, color=COLOURS[key], alpha=0.45, hatch="..",
                   label=f"predicted: {name}")
            predicted_bottom += values
        unsplit = np.array([0.0 if s else p.run.steady("epoch_s") * 1e3 for s, p in zip(splits, group)])
        if unsplit.any():
            ax.bar(x - 0.2, unsplit, 0.38, bottom=measured_bottom, color="lightgrey", label="measured: not split")
        ax.hlines([p.prediction["overlapped_s"] * 1e3 for p in group], x + 0.01, x + 0.39, colors="black",
                  label="predicted, every transfer hidden")
        ax.set_xticks(x, [f"{p.run.model}\n{p.error:+.0%}" for p in group], fontsize="small")
        ax.set(title=f"{graph}, P={ranks}\n{link}", ylabel="time per epoch (ms)")
        ax.grid(axis="y", alpha=0.3)
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=4, fontsize="small")
    fig.suptitle("Measured (left, median epoch) and predicted (right, stats --predict-time) epoch time per model; "
                 "under each model: the prediction's error", fontsize="medium")
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


def balance_figure(part: Partition, limits: BalanceLimits, shared_by: int) -> Figure:
    """Per rank: rows sent and received (communication balance), and nonzeros owned (compute balance), on the
    scales (``limits``) shared by the ``shared_by`` partitions of its graph in this report, so that equal heights
    are equal counts across them."""
    fig = _figure(10, 7)
    volume_ax, load_ax = fig.subplots(2, 1, sharex=True)
    ranks = np.arange(part.ranks)
    sent, received = part.comm.sum(axis=1), part.comm.sum(axis=0)
    volume_ax.bar(ranks - 0.2, sent, 0.4, label="sent", color="tab:blue")
    volume_ax.bar(ranks + 0.2, received, 0.4, label="received", color="tab:orange")
    volume_ax.axhline(sent.mean(), color="black", linestyle="--", linewidth=0.8, label="average")
    shared = f"; scales shared by the {shared_by} partitions of {part.graph or 'this graph'}" if shared_by > 1 else ""
    volume_ax.set(ylabel="rows of H per SpMM",
                  title=f"Per-rank balance: {part.label}{shared}\n"
                        f"volume: max sent {sent.max()}, max received {received.max()}, average {sent.mean():.1f}")
    volume_ax.set_ylim(0, 1.25 * limits.volume)  # room for the legend above the tallest bar of any partition
    volume_ax.legend(fontsize="small", loc="upper right", ncols=3)
    load_ax.bar(ranks, part.nonzeros, 0.8, color="tab:green")
    mean = part.nonzeros.mean()
    load_ax.axhline(mean, color="black", linestyle="--", linewidth=0.8)
    load_ax.set_ylim(0, 1.05 * limits.nonzeros)
    imbalance = part.nonzeros.max() / mean if mean > 0 else 1.0
    low, high = int(part.owned.min()), int(part.owned.max())
    vertices = str(low) if low == high else f"{low} to {high}"
    load_ax.set(xlabel="rank", ylabel="nonzeros of Â owned",
                title=f"load: imbalance {imbalance:.3f} (max/avg nonzeros); {vertices} vertices per rank")
    load_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    load_ax.set_xlim(-0.6, part.ranks - 0.4)
    for ax in (volume_ax, load_ax):
        ax.grid(axis="y", alpha=0.3)
    return fig


def rank_balance(part: Partition, path: Path, limits: BalanceLimits, shared_by: int) -> Path:
    """:func:`balance_figure`, saved."""
    return _save(balance_figure(part, limits, shared_by), path)


def render_all(runs: list[Run], partitions: list[Partition], out: Path,
               predicted: list[Predicted] = ()) -> list[tuple[str, Path]]:
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
        figures.append(("Loss and accuracy", curves(runs, name("curves"))))
        for run in runs:
            figures.append((f"Time split: {run.label}", time_split(run, name(f"time-{slug(run.name)}"))))
    if scaling_series(runs):
        figures.append(("Strong scaling", strong_scaling(runs, name("scaling"))))
    if model_groups(runs):
        figures.append(("Partition models in training", run_models(runs, name("models-training"))))
    if panels(predicted):
        figures.append(("Predicted and measured epoch time", predicted_time(predicted, name("predicted-time"))))
    if model_groups(partitions):
        figures.append(("Partition models: predicted communication",
                        partition_models(partitions, name("models-partitions"))))
    limits, scales = colour_limits(partitions), balance_limits(partitions)
    for part in partitions:
        shared_by = sum(other.graph == part.graph for other in partitions)
        figures.append((f"Communication matrix: {part.label}",
                        comm_heatmap(part, name(f"comm-{slug(part.name)}"), limits[part.graph], shared_by)))
        figures.append((f"Per-rank balance: {part.label}",
                        rank_balance(part, name(f"balance-{slug(part.name)}"), scales[part.graph], shared_by)))
    return figures
