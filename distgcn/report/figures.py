"""The report's figures, drawn with matplotlib's object API on the Agg canvas (no display, no pyplot state).

Every figure has a fixed size in inches at a fixed DPI (constrained layout,
no tight cropping), so the PNG's pixel size is known in advance.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator

from ..safe_io import PNG_MARKER, REPORT_FIGURE, write_file
from .analysis import describe, model_groups, scaling_series
from .inputs import Partition, Run

DPI = 100
SPLIT = (("compute_s", "compute", "tab:blue"), ("comm_wait_s", "halo wait", "tab:orange"),
         ("allreduce_s", "allreduce", "tab:green"))
ANNOTATE_MAX_P = 12
"""Write each cell's count in the communication heatmap up to this P (beyond, digits would overlap)."""


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    """Atomically, marked as distgcn's, replacing only an earlier report's figure (:mod:`distgcn.safe_io`)."""
    return write_file(path, REPORT_FIGURE, lambda fh: fig.savefig(fh, format="png", dpi=DPI, metadata=PNG_MARKER))


def slug(text: str) -> str:
    """A file-name-safe form of a label."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "unnamed"


def curves(runs: list[Run], path: Path) -> Path:
    """Loss, and train/validation/test accuracy, against the epoch: one colour per run."""
    fig = _figure(12, 4.5)
    loss_ax, acc_ax = fig.subplots(1, 2)
    styles = (("train_acc", ":", "train"), ("val_acc", "--", "validation"), ("test_acc", "-", "test"))
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        epochs = run.series("epoch")
        loss_ax.plot(epochs, run.series("loss"), color=color, label=run.label)
        for key, style, _ in styles:
            acc_ax.plot(epochs, run.series(key), color=color, linestyle=style)
    loss_ax.set(title="Training loss", xlabel="epoch", ylabel="loss")
    acc_ax.set(title="Accuracy", xlabel="epoch", ylabel="accuracy", ylim=(0, 1.02))
    loss_ax.legend(title="run", fontsize="small")
    acc_ax.legend([Line2D([], [], color="black", linestyle=style) for _, style, _ in styles],
                  [name for _, _, name in styles], fontsize="small", loc="lower right")
    for ax in (loss_ax, acc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    return _save(fig, path)


def time_split(run: Run, path: Path) -> Path:
    """Each epoch's time split into compute, halo wait and allreduce, with the epoch's wall time over it.

    Each part is the maximum over ranks, measured separately, so the stack can
    exceed the wall time when different ranks are the slowest in different parts.
    """
    fig = _figure(9, 4.5)
    ax = fig.subplots()
    epochs = run.series("epoch")
    bottom = np.zeros_like(epochs)
    for key, name, color in SPLIT:
        values = run.series(key) * 1e3
        ax.bar(epochs, values, width=1.0, bottom=bottom, color=color, linewidth=0,
               label=f"{name} (median {run.steady(key) * 1e3:.1f} ms)")
        bottom += values
    ax.stairs(run.series("epoch_s") * 1e3, np.append(epochs - 0.5, epochs[-1] + 0.5), color="black", linewidth=1,
              label=f"epoch wall time (median {run.steady('epoch_s') * 1e3:.1f} ms)")
    ax.set(title=f"Time per epoch: {run.label}\n{describe(run.graph, run.model, run.ranks)}; "
                 "each part is the max over ranks",
           xlabel="epoch", ylabel="time (ms)", xlim=(epochs[0] - 0.5, epochs[-1] + 0.5))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def strong_scaling(runs: list[Run], path: Path) -> Path:
    """Steady epoch time and parallel efficiency against P, one line per (graph, partition model)."""
    fig = _figure(12, 4.5)
    time_ax, eff_ax = fig.subplots(1, 2)
    all_ranks: set[int] = set()
    for i, ((graph, model), points) in enumerate(scaling_series(runs).items()):
        color = f"C{i % 10}"
        ranks = np.array([p.ranks for p in points])
        all_ranks.update(ranks.tolist())
        label = describe(graph, model or "unknown model")
        time_ax.plot(ranks, [p.epoch_s * 1e3 for p in points], "o-", color=color, label=label)
        time_ax.plot(ranks, points[0].epoch_s * 1e3 * ranks[0] / ranks, ":", color=color)
        eff_ax.plot(ranks, [p.efficiency for p in points], "o-", color=color, label=label)
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
    time_ax.set(title="Strong scaling: median epoch time (dotted: ideal)", ylabel="time per epoch (ms)")
    eff_ax.set(title="Parallel efficiency (relative to the smallest P)", ylabel="efficiency",
               ylim=(0, max(1.1, eff_ax.get_ylim()[1])))
    time_ax.legend(fontsize="small", loc="best")
    return _save(fig, path)


def run_models(runs: list[Run], path: Path) -> Path:
    """Partition models compared by training runs of one graph at one P: epoch time split and halo traffic."""
    groups = model_groups(runs)
    fig = _figure(max(6.0, 4.0 * len(groups)), 7)
    axes = fig.subplots(2, len(groups), squeeze=False)
    for column, ((graph, ranks), group) in enumerate(groups.items()):
        time_ax, halo_ax = axes[0, column], axes[1, column]
        x = np.arange(len(group))
        names = [r.model if sum(o.model == r.model for o in group) == 1 else f"{r.model}\n{r.label}" for r in group]
        bottom = np.zeros(len(group))
        for key, name, color in SPLIT:
            values = np.array([r.steady(key) * 1e3 for r in group])
            time_ax.bar(x, values, bottom=bottom, color=color, label=name)
            bottom += values
        halo_ax.bar(x, [r.steady("halo_bytes") / 1e6 for r in group], color="tab:purple")
        time_ax.set(title=describe(graph, ranks=ranks), ylabel="median time per epoch (ms)")
        halo_ax.set(ylabel="halo traffic per epoch (MB)")
        for ax in (time_ax, halo_ax):
            ax.set_xticks(x, names)
            ax.grid(axis="y", alpha=0.3)
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize="small")
    fig.suptitle("Partition models in training")
    return _save(fig, path)


def partition_models(partitions: list[Partition], path: Path) -> Path:
    """Partition models compared by their predicted communication and load balance, per graph and P."""
    groups = model_groups(partitions)
    models = sorted({p.model for group in groups.values() for p in group},
                    key=lambda m: [p.model for g in groups.values() for p in g].index(m))
    panels = (("total volume (rows per SpMM)", lambda p: p.meta["volume"]["total"]),
              ("max rows sent by a rank", lambda p: p.meta["volume"]["max"]),
              ("total messages per SpMM", lambda p: p.meta["messages"]["total"]),
              ("load imbalance (max/avg nonzeros)", lambda p: p.meta["imbalance"]))
    fig = _figure(14, 4.5)
    axes = fig.subplots(1, len(panels))
    x = np.arange(len(groups))
    width = 0.8 / len(models)
    for ax, (title, value) in zip(axes, panels):
        for m, model in enumerate(models):
            heights = [next((value(p) for p in group if p.model == model), np.nan) for group in groups.values()]
            ax.bar(x + (m - (len(models) - 1) / 2) * width, heights, width, label=model,
                   color=f"C{m % 10}")
        ax.set_xticks(x, [describe(graph, ranks=ranks) for graph, ranks in groups], fontsize="small")
        ax.set_title(title, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    axes[-1].axhline(1.0, color="grey", linewidth=0.8)
    fig.legend(*axes[0].get_legend_handles_labels(), title="model", loc="outside right upper", fontsize="small")
    fig.suptitle("Partition models: predicted communication and balance")
    return _save(fig, path)


def comm_heatmap(part: Partition, path: Path) -> Path:
    """The P x P rows-sent matrix; the diagonal (nothing sent to oneself) is drawn grey."""
    fig = _figure(7.5, 6.5)
    ax = fig.subplots()
    nparts = part.ranks
    masked = np.ma.masked_array(part.comm, mask=np.eye(nparts, dtype=bool))
    image = ax.imshow(masked, cmap=colormaps["viridis"].with_extremes(bad="lightgrey"), interpolation="nearest", vmin=0)
    fig.colorbar(image, ax=ax, label="rows of H sent per SpMM")
    if nparts <= ANNOTATE_MAX_P:
        threshold = masked.max() / 2 if masked.count() else 0
        for i in range(nparts):
            for j in range(nparts):
                if i != j:
                    ax.text(j, i, str(part.comm[i, j]), ha="center", va="center", fontsize="small",
                            color="black" if part.comm[i, j] > threshold else "white")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="receiving rank", ylabel="sending rank",
           title=f"Communication matrix: {part.label}\n{describe(part.graph, part.model, nparts)}\n"
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
                  title=f"Per-rank balance: {part.label} ({describe(part.graph, part.model, part.ranks)})\n"
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
        figures.append(("Loss and accuracy", curves(runs, name("curves"))))
        for run in runs:
            figures.append((f"Time split: {run.label}", time_split(run, name(f"time-{slug(run.label)}"))))
    if scaling_series(runs):
        figures.append(("Strong scaling", strong_scaling(runs, name("scaling"))))
    if model_groups(runs):
        figures.append(("Partition models in training", run_models(runs, name("models-training"))))
    if model_groups(partitions):
        figures.append(("Partition models: predicted communication",
                        partition_models(partitions, name("models-partitions"))))
    for part in partitions:
        figures.append((f"Communication matrix: {part.label}", comm_heatmap(part, name(f"comm-{slug(part.label)}"))))
        figures.append((f"Per-rank balance: {part.label}", rank_balance(part, name(f"balance-{slug(part.label)}"))))
    return figures
