"""summary.md: the numbers behind the figures, as markdown tables, with the figures linked below them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from distgcn.io.safe_io import REPORT_SUMMARY, REPORT_TITLE, write_text
from distgcn.report.analysis import (
    SPLIT_PARTS,
    ScalingPoint,
    Timing,
    describe,
    scaling_series,
    setting_groups,
    timing,
)
from distgcn.report.inputs import Partition, Run
from distgcn.report.predicted import Predicted
from distgcn.report.predicted import rows as predicted_rows

UNKNOWN = "?"


def _cell(value: object) -> str:
    text = UNKNOWN if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[object]], numeric_from: int = 0) -> str:
    """A markdown table; columns from ``numeric_from`` on are right-aligned."""
    align = ["---:" if i >= numeric_from else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _node(run: Run) -> str | None:
    """ranks × threads / cores on rank 0's node (``2×1/2``; threads ? where not recorded), followed by why its
    threads waited for a core; None (shown ?) when not recorded."""
    if run.node is None:
        return None
    ranks, cores = run.node
    threads = UNKNOWN if run.threads is None else run.threads
    return " ".join([f"{ranks}×{threads}/{cores}", *(run.contention or [])])


def _load(run: Run) -> str | None:
    """The node's load average as the run started, and (in brackets) other processes' part of it."""
    node = run.header.get("node") or {}
    if node.get("load_average") is None:
        return None
    other = node.get("other_load")
    return f"{node['load_average']:.2f}" + ("" if other is None else f" ({other:.2f})")


def contention_cell(t: Timing) -> str | None:
    """A table's contention column: the reasons, ``no``, or ``no (load not recorded)`` for files that predate the
    load average; None (shown ?) when nothing was recorded."""
    if t.contention is None:
        return None
    if t.contention:
        return ", ".join(t.contention)
    return "no" if t.load_known else "no (load not recorded)"


def efficiency_cell(point: ScalingPoint) -> str:
    """The efficiency, flagged when above 1: a sign of contention at the smaller P, not a result."""
    return f"{point.efficiency:.2f}" + (" (above 1: contention)" if point.above_ideal else "")


def _flag_note(flagged: list[tuple[str | None, str | None, int, ScalingPoint]]) -> str:
    """What an efficiency above 1 says: the smallest P's time holds waiting for a core, so it is no result."""
    where = "; ".join(f"{describe(graph, model or 'unknown model')} at P={p.ranks} ({p.efficiency:.2f}, against "
                      f"P={base})" for graph, model, base, p in flagged)
    return ("**Efficiency above 1 is a sign of contention, not a result:** " + where + ". No P can run faster than "
            "its share of the smallest P's time unless that time was slowed, mostly by waiting for a core (more "
            "threads than cores, or a node busy with other processes: see the contention column and the runs' "
            "ranks×threads/cores and load); cache effects can add a little. Time the smallest P again on an idle "
            "node, with ranks × threads at most the cores, before reading the speedup.")


def run_rows(runs: list[Run]) -> list[list[object]]:
    rows = []
    for run in runs:
        last = run.records[-1]
        best = max(run.records, key=lambda r: r["val_acc"])
        t = timing([run])
        split = [_ms(t.split_s[key]) if t.split_s else None for key, _ in SPLIT_PARTS]
        rows.append([run.label, run.name, run.graph, run.model, run.ranks, _node(run), _load(run), len(run.records),
                     f"{last['loss']:.4f}", f"{last['test_acc']:.4f}",
                     f"{best['val_acc']:.4f} ({best['test_acc']:.4f})", _kept(run), _ms(t.median_s),
                     f"{_ms(t.low_s)} to {_ms(t.high_s)}", *split, f"{run.steady('halo_rows'):.0f}",
                     f"{run.steady('messages'):.0f}"])
    return rows


def _kept(run: Run) -> str:
    """Which epoch's weights the run kept (``--keep-best``), with that epoch's test accuracy; else "last"."""
    metric = (run.header.get("selection") or {}).get("keep_best")
    epoch = run.records[-1].get("best_epoch")
    kept = next((r for r in run.records if r["epoch"] == epoch), None) if metric and epoch else None
    if kept is None:
        return "last" if not metric else f"best {metric}"
    return f"{epoch}, best {metric} ({kept['test_acc']:.4f})"


def setting_rows(runs: list[Run]) -> list[list[object]]:
    """One row per setting that was run more than once: the repeats' median and range."""
    rows = []
    for (graph, model, ranks), group in setting_groups(runs).items():
        if len(group) > 1:
            t = timing(group)
            split = [_ms(t.split_s[key]) if t.split_s else None for key, _ in SPLIT_PARTS]
            rows.append([describe(graph, model, ranks), len(group), _ms(t.median_s),
                         f"{_ms(t.low_s)} to {_ms(t.high_s)}", *split,
                         contention_cell(t)])
    return rows


def partition_rows(partitions: list[Partition]) -> list[list[object]]:
    rows = []
    for p in partitions:
        m = p.meta
        rows.append([p.label, p.name, p.graph, p.model, m.get("partitioner"), p.ranks, m["volume"]["total"],
                     m["volume"]["max"], m.get("max_recv_volume"), m["messages"]["total"], f"{m['imbalance']:.3f}",
                     m.get("edge_cut"), "-" if p.minibatch_volume is None else f"{p.minibatch_volume:.1f}",
                     f"{m['partition_s']:.2f}" if m.get("partition_s") is not None else None])
    return rows


def _section(title: str, text: str, body: str) -> list[str]:
    """A titled section of the summary: its heading, what it shows, then the table."""
    return [f"## {title}", "", text, "", body, ""]


def render(runs: list[Run], partitions: list[Partition], figures: list[tuple[str, Path]], out: Path,
           predicted: list[Predicted] = ()) -> str:
    """The whole summary as markdown text (figure links relative to ``out``)."""
    parts = [REPORT_TITLE.rstrip("\n"), ""]
    if runs:
        parts += _section("Runs",
                          "Times are medians over epochs, leaving out the first (warm-up) when a run has two or more, "
                          "with the interquartile range of those epochs. Compute, halo wait and allreduce are the "
                          "slowest rank's own split of the median (the share of the steady epochs that the slowest "
                          "rank of each epoch spent in each part), so they add up to the median epoch time; ? where "
                          "the metrics file predates that record. ranks×threads/cores: on rank 0's node, then why "
                          "threads waited for a core on some node of the job: oversubscribed (ranks × threads above "
                          "the cores), busy node (other processes' load left too few CPUs); load: rank 0's node's "
                          "1-minute load average as the run started (other processes' part). Such times include "
                          "waiting for a core, and their comm share counts it. Traffic is per epoch, "
                          "summed over ranks; the best validation accuracy is followed by the test accuracy at that "
                          "epoch. kept: the epoch whose weights the run kept (--keep-best; its test accuracy), or "
                          "last.",
                          table(["run", "file", "graph", "model", "P", "ranks×threads/cores", "load", "epochs",
                                 "final loss",
                                 "final test acc", "best val acc (test)", "kept", "epoch (ms)", "epoch IQR (ms)",
                                 "compute (ms)", "halo wait (ms)", "allreduce (ms)", "halo rows", "messages"],
                                run_rows(runs), numeric_from=4))
        if any(None in (r.graph, r.ranks, r.model) for r in runs):
            parts += [f"{UNKNOWN}: not recorded in the metrics file (written before runs named themselves); "
                      "give it on the command line as FILE@ranks=P,model=HP,graph=NAME.", ""]
    repeated = setting_rows(runs)
    if repeated:
        parts += _section("Repeated settings",
                          "Runs of one graph, model and P: the median of their median epoch times, the range of those "
                          "medians, and the slowest rank's split of it (pooled over every repeat's steady epochs).",
                          table(["setting", "runs", "epoch (ms)", "range (ms)", "compute (ms)", "halo wait (ms)",
                                 "allreduce (ms)", "contention"], repeated, numeric_from=1))
    series = scaling_series(runs)
    if series:
        rows = [[describe(graph, model or "unknown model"), p.ranks, _ms(p.epoch_s),
                 f"{_ms(p.timing.low_s)} to {_ms(p.timing.high_s)}", f"{p.speedup:.2f}", efficiency_cell(p),
                 p.runs, contention_cell(p.timing)]
                for (graph, model), points in series.items() for p in points]
        flagged = [(graph, model, points[0].ranks, p) for (graph, model), points in series.items() for p in points
                   if p.above_ideal]
        parts += _section("Strong scaling",
                          "Speedup and efficiency are relative to the smallest P of each series, from median epoch "
                          "times: the median of the repeats' medians where a P was run more than once (spread: their "
                          "range), else the run's median (spread: its interquartile range over epochs).",
                          table(["graph, model", "P", "epoch time (ms)", "spread (ms)", "speedup", "efficiency", "runs",
                                 "contention"], rows, numeric_from=1))
        if flagged:
            parts += [_flag_note(flagged), ""]
    if predicted:
        parts += _section("Predicted and measured epoch time",
                          "The prediction of `distgcn stats DIR --predict-time` for each run's partition directory, "
                          "from the run's calibration (its nodes' compute rates and the link it measured): serial "
                          "adds compute, halo and allreduce; overlapped hides each exchange behind its share of the "
                          "compute. error: serial against the measured median epoch.",
                          table(["run", "model", "P", "link", "measured (ms)", "predicted serial (ms)",
                                 "predicted overlapped (ms)", "compute / halo / allreduce (ms)", "error",
                                 "calibration"], predicted_rows(predicted), numeric_from=2))
    if partitions:
        parts += _section("Partitions",
                          "Predicted per distributed SpMM: rows of H sent (total and by the busiest rank, and "
                          "received by the busiest receiver) and messages; imbalance is max/avg nonzeros per rank; "
                          "minibatch volume (stochastic model only) is what it minimises: expected rows sent per "
                          "minibatch SpMM.",
                          table(["partition", "directory", "graph", "model", "partitioner", "P", "volume", "max sent",
                                 "max received", "messages", "imbalance", "edge cut", "minibatch volume",
                                 "partition time (s)"], partition_rows(partitions), numeric_from=5))
    if figures:
        parts += ["## Figures", ""]
        for caption, path in figures:
            parts += [f"### {caption}", "", f"![{caption}]({path.relative_to(out).as_posix()})", ""]
    return "\n".join(parts)


def write_summary(runs: list[Run], partitions: list[Partition], figures: list[tuple[str, Path]], out: Path,
                  predicted: list[Predicted] = ()) -> Path:
    """Write summary.md atomically, replacing only an earlier report's (:mod:`distgcn.io.safe_io`)."""
    return write_text(out / "summary.md", REPORT_SUMMARY, render(runs, partitions, figures, out, predicted))
