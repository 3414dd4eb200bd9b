"""summary.md: the numbers behind the figures, as markdown tables, with the figures linked below them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..safe_io import REPORT_SUMMARY, REPORT_TITLE, write_text
from .analysis import describe, scaling_series
from .inputs import Partition, Run

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


def run_rows(runs: list[Run]) -> list[list[object]]:
    rows = []
    for run in runs:
        last = run.records[-1]
        best = max(run.records, key=lambda r: r["val_acc"])
        split = [f"{run.steady(key) * 1e3:.2f}" for key in ("compute_s", "comm_wait_s", "allreduce_s")]
        rows.append([run.label, run.graph, run.model, run.ranks, len(run.records), f"{last['loss']:.4f}",
                     f"{last['test_acc']:.4f}", f"{best['val_acc']:.4f} ({best['test_acc']:.4f})",
                     f"{run.steady('epoch_s') * 1e3:.2f}", *split, f"{run.steady('halo_rows'):.0f}",
                     f"{run.steady('messages'):.0f}"])
    return rows


def partition_rows(partitions: list[Partition]) -> list[list[object]]:
    rows = []
    for p in partitions:
        m = p.meta
        rows.append([p.label, p.graph, p.model, m.get("partitioner"), p.ranks, m["volume"]["total"],
                     m["volume"]["max"], m.get("max_recv_volume"), m["messages"]["total"], f"{m['imbalance']:.3f}",
                     m.get("edge_cut"), f"{m['partition_s']:.2f}" if m.get("partition_s") is not None else None])
    return rows


def render(runs: list[Run], partitions: list[Partition], figures: list[tuple[str, Path]], out: Path) -> str:
    """The whole summary as markdown text (figure links relative to ``out``)."""
    parts = [REPORT_TITLE.rstrip("\n"), ""]
    if runs:
        parts += ["## Runs", "",
                  "Times are medians over epochs, leaving out the first (warm-up) when a run has two or more; "
                  "compute, halo wait and allreduce are each the maximum over ranks, so they need not add up "
                  "to the epoch's wall time; traffic is per epoch, summed over ranks; the best validation "
                  "accuracy is followed by the test accuracy at that epoch.", "",
                  table(["run", "graph", "model", "P", "epochs", "final loss", "final test acc",
                         "best val acc (test)", "epoch (ms)", "compute (ms)", "halo wait (ms)", "allreduce (ms)",
                         "halo rows", "messages"], run_rows(runs), numeric_from=3), ""]
        if any(None in (r.graph, r.ranks, r.model) for r in runs):
            parts += [f"{UNKNOWN}: not recorded in the metrics file (written before runs named themselves); "
                      "give it on the command line as FILE@ranks=P,model=HP,graph=NAME.", ""]
    series = scaling_series(runs)
    if series:
        rows = [[describe(graph, model or "unknown model"), p.ranks, f"{p.epoch_s * 1e3:.2f}", f"{p.speedup:.2f}",
                 f"{p.efficiency:.2f}", p.runs] for (graph, model), points in series.items() for p in points]
        parts += ["## Strong scaling", "",
                  "Speedup and efficiency are relative to the smallest P of each series; runs at the same P "
                  "are averaged.", "",
                  table(["graph, model", "P", "epoch time (ms)", "speedup", "efficiency", "runs"], rows,
                        numeric_from=1), ""]
    if partitions:
        parts += ["## Partitions", "",
                  "Predicted per distributed SpMM: rows of H sent (total and by the busiest rank, and "
                  "received by the busiest receiver) and messages; imbalance is max/avg nonzeros per rank.", "",
                  table(["partition", "graph", "model", "partitioner", "P", "volume", "max sent", "max received",
                         "messages", "imbalance", "edge cut", "partition time (s)"],
                        partition_rows(partitions), numeric_from=4), ""]
    if figures:
        parts += ["## Figures", ""]
        for caption, path in figures:
            parts += [f"### {caption}", "", f"![{caption}]({path.relative_to(out).as_posix()})", ""]
    return "\n".join(parts)


def write_summary(runs: list[Run], partitions: list[Partition], figures: list[tuple[str, Path]], out: Path) -> Path:
    """Write summary.md atomically, replacing only an earlier report's (:mod:`distgcn.safe_io`)."""
    return write_text(out / "summary.md", REPORT_SUMMARY, render(runs, partitions, figures, out))
