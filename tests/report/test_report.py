"""``distgcn report``: every figure rendered from small inputs, the summary's numbers, the run header."""

from __future__ import annotations

import json
import math
import statistics
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import distgcn_in_process, run_distgcn

from distgcn.cli.jobs import load_metrics, scaling_table
from distgcn.cli.main import main
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.io.schema import EPOCH_KEYS
from distgcn.partitioning.metrics import comm_matrix
from distgcn.report.analysis import (
    SPLIT_PARTS,
    BalanceLimits,
    balance_limits,
    colour_limits,
    model_groups,
    setting_groups,
    timing,
)
from distgcn.report.figures import (
    EFFICIENCY_TOP,
    balance_figure,
    curves,
    curves_figure,
    graph_panels,
    partition_panels,
    run_style,
    scaling_figure,
)
from distgcn.report.inputs import Partition, load_inputs

pytest.importorskip("matplotlib")

GRAPH = "synthetic:sbm,n=300,classes=3,features=8"
SBM_NAME = "sbm-n300-c3-f8-d10-p0.8-s0"  # the name partition gives that graph in meta.json
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("part") / "p3"
    proc = distgcn_in_process(["partition", GRAPH, "--parts", "3", "--model", "random", "--out", str(out), "--quiet"])
    assert proc.returncode == 0, proc.stderr
    return out


def write_metrics(path: Path, epoch_ms: float, *, ranks: int | None, model: str | None, epochs: int = 6,
                  graph: str = "toy", cores: int | None = None, run: dict | None = None, node: dict | None = None,
                  extra: dict[int, dict] | None = None) -> Path:
    """A synthetic metrics file: steady epochs of ``epoch_ms`` after a slower first one.

    The per-key maxima (compute 60%, halo wait 50%, allreduce 10% of the epoch) add up to more than the epoch,
    as when different ranks are slowest in different parts; the slowest rank's own split (50/40/10) adds up to it.
    ``cores``: record rank 0's node as ``ranks`` ranks on that many cores, with ``node``'s further keys; ``run``:
    further header keys; ``extra``: further keys of the records of some epochs.
    """
    lines = []
    for epoch in range(1, epochs + 1):
        epoch_s = (epoch_ms * (3 if epoch == 1 else 1)) / 1e3
        record = {"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5 + epoch / 100, "val_acc": 0.4 + epoch / 100,
                  "test_acc": 0.3 + epoch / 100, "epoch_s": epoch_s, "compute_s": 0.6 * epoch_s,
                  "comm_wait_s": 0.5 * epoch_s, "allreduce_s": 0.1 * epoch_s, "halo_rows": 1000 * (ranks or 1),
                  "halo_bytes": 32000 * (ranks or 1), "messages": 6, "max_rank_halo_rows": 400,
                  "spmm_exchanges": 5, "slowest_rank": 0, "slowest_compute_s": 0.5 * epoch_s,
                  "slowest_comm_wait_s": 0.4 * epoch_s, "slowest_allreduce_s": 0.1 * epoch_s}
        if epoch == 1 and ranks is not None:
            record["run"] = {"ranks": ranks, "partition_model": model, "graph": {"name": graph}}
            record["run"].update(run or {})
            if cores is not None:
                record["run"]["node"] = {"ranks": ranks, "cores": cores, "device": "cpu", **(node or {})}
        record.update((extra or {}).get(epoch, {}))
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    """Strong scaling of RP over P = 1, 2, 4 and the four models at P = 4."""
    return [write_metrics(tmp_path / "rp1.jsonl", 100.0, ranks=1, model="random"),
            write_metrics(tmp_path / "rp2.jsonl", 62.5, ranks=2, model="random"),
            write_metrics(tmp_path / "rp4.jsonl", 50.0, ranks=4, model="random"),
            write_metrics(tmp_path / "gp4.jsonl", 40.0, ranks=4, model="graph"),
            write_metrics(tmp_path / "hp4.jsonl", 30.0, ranks=4, model="hypergraph"),
            write_metrics(tmp_path / "shp4.jsonl", 35.0, ranks=4, model="stochastic")]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def report(inputs: list[str], out: Path) -> int:
    return main(["report", *inputs, "--out", str(out)])


def test_every_figure_is_a_png_of_the_expected_size_and_not_blank(tmp_path, runs, partition_dir):
    from matplotlib.image import imread

    out = tmp_path / "report"
    assert report([*map(str, runs), str(partition_dir)], out) == 0
    expected = {"curves.png": (1200, 450), "scaling.png": (1200, 450), "models-training.png": (600, 700),
                "comm-p3.png": (750, 650), "balance-p3.png": (1000, 700),
                **{f"time-{run.stem}.png": (900, 450) for run in runs}}
    assert {p.name for p in out.glob("*.png")} == set(expected)
    for name, size in expected.items():
        path = out / name
        assert path.stat().st_size > 10_000, name
        assert png_size(path) == size, name
        pixels = imread(path)[..., :3]
        colours = np.unique(pixels.reshape(-1, 3), axis=0).shape[0]
        assert colours > 50, f"{name} looks blank ({colours} colours)"


def test_partition_models_are_compared_from_partition_directories(tmp_path, partition_dir):
    other = tmp_path / "graph3"
    proc = distgcn_in_process(["partition", GRAPH, "--parts", "3", "--model", "graph", "--out", str(other),
                               "--quiet"])
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "report"
    assert report([str(partition_dir), str(other)], out) == 0
    _, partitions = load_inputs([str(partition_dir), str(other)])
    panels = [title for title, _, _ in partition_panels(model_groups(partitions))]
    assert panels[0] == "total volume" and "load imbalance" in panels
    assert png_size(out / "models-partitions.png") == (max(700, 350 * len(panels)), 450)
    assert not (out / "curves.png").exists()  # no runs given, no run figures


def test_comm_matrix_read_from_shards_equals_the_partition_metric(partition_dir):
    _, partitions = load_inputs([str(partition_dir)])
    part = partitions[0]
    _, a_hat = prepare_graph(GraphOptions(spec=GRAPH))
    parts = np.load(partition_dir / "parts.npy")
    np.testing.assert_array_equal(part.comm, comm_matrix(a_hat, parts, 3))
    assert part.comm.sum() == part.meta["volume"]["total"]
    assert part.nonzeros.sum() == a_hat.nnz and part.owned.sum() == 300
    np.testing.assert_array_equal(part.nonzeros, np.bincount(parts, weights=np.diff(a_hat.indptr)).astype(int))


def summary_rows(text: str) -> dict[str, list[str]]:
    return {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")
            for line in text.splitlines() if line.startswith("| ")}


def test_summary_tables(tmp_path, runs, partition_dir):
    out = tmp_path / "report"
    assert report([*map(str, runs), str(partition_dir)], out) == 0
    text = (out / "summary.md").read_text()
    rows = summary_rows(text)
    # run, file, graph, model, P, ranks×threads/cores, load, epochs, final loss, final test acc, best val (test),
    # kept, epoch, IQR
    assert rows["toy, RP, P=4"][:13] == ["toy, RP, P=4", "rp4", "toy", "RP", "4", "?", "?", "6", "0.1667", "0.3600",
                                          "0.4600 (0.3600)", "last", "50.00"]
    assert rows["toy, HP, P=4"][3:5] == ["HP", "4"] and rows["toy, SHP, P=4"][3] == "SHP"
    # the slowest rank's split of the median, which adds up to it (the per-key maxima would give 30 + 25 + 5)
    assert rows["toy, RP, P=4"][13:17] == ["50.00 to 50.00", "25.00", "20.00", "5.00"]
    # Strong scaling: efficiency T1 / (P * TP) = 100 / (2 * 62.5) and 100 / (4 * 50).
    scaling = [line for line in text.splitlines() if line.startswith("| toy, RP |")]
    assert [cells.split(" | ")[1:6] for cells in scaling] == [
        ["1", "100.00", "100.00 to 100.00", "1.00", "1.00"], ["2", "62.50", "62.50 to 62.50", "1.60", "0.80"],
        ["4", "50.00", "50.00 to 50.00", "2.00", "0.50"]]
    assert rows[f"{SBM_NAME}, RP, P=3"][1:6] == ["p3", SBM_NAME, "RP", "numpy.random.default_rng", "3"]
    assert "![Communication matrix: " in text and "](comm-p3.png)" in text
    assert all("?" not in rows[f"toy, {name}"][2:5] for name in ("GP, P=4", "SHP, P=4"))  # named
    assert rows["toy, 1 rank"][2:5] == ["toy", "?", "1"]  # one rank: no partition, so no model


def test_the_split_adds_up_to_the_median_epoch_and_never_exceeds_it(tmp_path):
    """Issue #16: stacking per-rank maxima rose above the epoch's wall time; the slowest rank's split cannot."""
    runs, _ = load_inputs([str(write_metrics(tmp_path / "a.jsonl", 40.0, ranks=2, model="random")),
                           str(write_metrics(tmp_path / "b.jsonl", 60.0, ranks=2, model="random"))])
    for group in ([runs[0]], runs):
        t = timing(group)
        assert sum(t.split_s.values()) == pytest.approx(t.median_s)
        maxima = sum(statistics.median(r.steady(key) for r in group) for key, _ in SPLIT_PARTS)
        assert maxima > t.median_s  # the old stack's flaw is present in these records
    assert timing(runs).split_s == pytest.approx({"compute_s": 0.025, "comm_wait_s": 0.02, "allreduce_s": 0.005})


def test_the_slowest_rank_split_is_gathered_from_every_rank():
    """Rank 1 computes for 90 of its 100 ms, rank 0 waits 70 of its 80: the record keeps rank 1's own split,
    which adds up to the epoch, while the per-key maxima (90 + 70) do not."""
    from types import SimpleNamespace

    from distgcn.comm.counters import CommCounters
    from distgcn.comm.transport.inprocess import run_ranks
    from distgcn.training.trainer import Trainer

    def rank_main(transport):
        epoch_s, wait_s = [(0.080, 0.070), (0.100, 0.010), (0.050, 0.020)][transport.rank]
        fake = SimpleNamespace(counters=CommCounters(comm_wait_s=wait_s), transport=transport,
                               global_counts={"train": 1, "val": 1, "test": 1})
        hits = {"train_hits": 0, "val_hits": 0, "test_hits": 0, "val_loss": 0.0}
        return Trainer._reduce_metrics(fake, 1, 0.0, hits, epoch_s)

    for record in run_ranks(3, rank_main):
        assert record["slowest_rank"] == 1 and record["epoch_s"] == 0.100
        assert (record["slowest_compute_s"], record["slowest_comm_wait_s"], record["slowest_allreduce_s"]) == \
            pytest.approx((0.090, 0.010, 0.0))
        assert record["compute_s"] + record["comm_wait_s"] > record["epoch_s"]  # the per-key maxima


def test_repeats_give_a_median_and_their_range_one_run_its_epoch_quartiles(tmp_path):
    paths = [write_metrics(tmp_path / f"r{i}.jsonl", ms, ranks=2, model="random")
             for i, ms in enumerate((40.0, 30.0, 50.0))]
    runs, _ = load_inputs(list(map(str, paths)))
    t = timing(runs)
    assert (t.median_s, t.low_s, t.high_s) == pytest.approx((0.040, 0.030, 0.050))
    assert t.spread == "range over 3 repeats" and t.repeat_medians_s == pytest.approx([0.04, 0.03, 0.05])
    records = [json.loads(line) for line in paths[0].read_text().splitlines()]
    paths[0].write_text("".join(json.dumps({**r, "epoch_s": ms / 1e3}) + "\n"
                                for r, ms in zip(records, (90, 10, 20, 30, 40, 50))))
    one = timing(load_inputs([str(paths[0])])[0])  # epochs 2..6: 10..50 ms, quartiles 20 and 40
    assert (one.median_s, one.low_s, one.high_s) == pytest.approx((0.030, 0.020, 0.040))
    assert one.spread == "interquartile range over epochs"
    groups = setting_groups(runs)
    assert list(groups) == [("toy", "RP", 2)] and len(groups["toy", "RP", 2]) == 3


def test_contention_is_marked_from_ranks_times_threads_and_the_load(tmp_path):
    """Issue #50: 1 or 2 ranks of 2 threads on 2 cores, or a busy node, were reported "oversubscribed: no"."""
    files = {
        # older files: no verdict recorded, so rank 0's ranks × threads (ranks alone without threads) against cores
        "ranks": write_metrics(tmp_path / "ranks.jsonl", 50.0, ranks=4, model="random", graph="a", cores=2),
        "threads": write_metrics(tmp_path / "threads.jsonl", 50.0, ranks=2, model="random", graph="b", cores=2,
                                 run={"threads": 2}),
        "fits": write_metrics(tmp_path / "fits.jsonl", 50.0, ranks=2, model="random", graph="c", cores=2,
                              run={"threads": 1}),
        # files with the verdicts: the busy node's other processes hold 4.1 of its 2 CPUs
        "busy": write_metrics(tmp_path / "busy.jsonl", 50.0, ranks=2, model="random", graph="d", cores=2,
                              run={"threads": 1}, node={"threads_per_rank": 1, "load_average": 5.0,
                                                        "other_load": 4.1, "oversubscribed": False, "busy": True}),
        "idle": write_metrics(tmp_path / "idle.jsonl", 50.0, ranks=2, model="random", graph="e", cores=2,
                              run={"threads": 1}, node={"threads_per_rank": 1, "load_average": 0.2,
                                                        "other_load": 0.0, "oversubscribed": False, "busy": False}),
        "unknown": write_metrics(tmp_path / "old.jsonl", 50.0, ranks=2, model="graph", graph="f"),
    }
    runs, _ = load_inputs([str(path) for path in files.values()])
    assert [r.contention for r in runs] == [["oversubscribed"], ["oversubscribed"], [], ["busy node"], [], None]
    assert [r.threads for r in runs] == [None, 2, 1, 1, 1, None]
    assert timing(runs[:3]).contention == ["oversubscribed"] and timing(runs[5:]).contention is None
    assert timing(runs[2:4]).contention == ["busy node"] and timing(runs[4:5]).contention == []
    out = tmp_path / "report"
    assert report([str(path) for path in files.values()], out) == 0
    rows = summary_rows((out / "summary.md").read_text())
    cells = {graph: rows[f"{graph}, {model}, P={ranks}"][5:7] for graph, model, ranks in
             [("a", "RP", 4), ("b", "RP", 2), ("c", "RP", 2), ("d", "RP", 2), ("e", "RP", 2), ("f", "GP", 2)]}
    assert cells == {"a": ["4×?/2 oversubscribed", "?"], "b": ["2×2/2 oversubscribed", "?"], "c": ["2×1/2", "?"],
                     "d": ["2×1/2 busy node", "5.00 (4.10)"], "e": ["2×1/2", "0.20 (0.00)"], "f": ["?", "?"]}


def test_an_efficiency_above_one_is_flagged_as_contention_not_drawn_as_a_result(tmp_path):
    """P = 1 at 100 ms (its two threads slowed on a busy node), P = 2 at 10 ms: efficiency 100 / (2 · 10) = 5, which
    no run can reach; P = 4 at 30 ms: 100 / (4 · 30) = 0.83, a result."""
    paths = [write_metrics(tmp_path / "p1.jsonl", 100.0, ranks=1, model="hypergraph", graph="fb", cores=2,
                           node={"threads_per_rank": 2}),
             write_metrics(tmp_path / "p2.jsonl", 10.0, ranks=2, model="hypergraph", graph="fb", cores=2,
                           node={"threads_per_rank": 1}),
             write_metrics(tmp_path / "p4.jsonl", 30.0, ranks=4, model="hypergraph", graph="fb", cores=4,
                           node={"threads_per_rank": 1})]
    runs, _ = load_inputs(list(map(str, paths)))
    out = tmp_path / "report"
    assert report(list(map(str, paths)), out) == 0
    text = (out / "summary.md").read_text()
    scaling = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| fb, HP |")]
    assert [(cells[1], cells[5]) for cells in scaling] == [("1", "1.00"), ("2", "5.00 (above 1: contention)"),
                                                          ("4", "0.83")]
    assert "**Efficiency above 1 is a sign of contention, not a result:** fb, HP at P=2 (5.00, against P=1)" in text

    fig = scaling_figure(runs)
    _, eff_ax = fig.axes
    assert eff_ax.get_ylim()[1] <= EFFICIENCY_TOP < 5.0
    drawn = [y for line in eff_ax.get_lines() for y in np.asarray(line.get_ydata(), dtype=float)]
    assert max(drawn) < EFFICIENCY_TOP  # 5.0 is not a point of any line: it is written, not drawn to scale
    series = [line for line in eff_ax.get_lines() if line.get_label() == "fb, HP"]
    assert len(series) == 1 and list(series[0].get_xdata()) == [1, 4]  # the line joins the results only
    assert any("5.00: above 1" in text.get_text() for text in eff_ax.texts)
    assert "a sign of contention" in eff_ax.get_title()


def test_curves_draw_one_row_of_panels_per_graph_and_every_run_in_its_legend(tmp_path):
    paths = [write_metrics(tmp_path / "a.jsonl", 50.0, ranks=2, model="random", graph="cora"),
             write_metrics(tmp_path / "b.jsonl", 50.0, ranks=2, model="random", graph="cora"),
             write_metrics(tmp_path / "c.jsonl", 50.0, ranks=2, model="hypergraph", graph="slashdot")]
    runs, _ = load_inputs(list(map(str, paths)))
    panels = graph_panels(runs)
    assert {graph: [r.label for r in group] for graph, group in panels.items()} == {
        "cora": ["cora, RP, P=2 #1", "cora, RP, P=2 #2"], "slashdot": ["slashdot, HP, P=2"]}
    styles = [run_style(i) for i in range(len(panels["cora"]))]
    assert styles[0]["marker"] != styles[1]["marker"] and styles[0]["linestyle"] != styles[1]["linestyle"]
    assert png_size(curves(runs, tmp_path / "curves.png")) == (1200, 720)  # two rows of 3.6 inches


def flat_random_labels(path: Path, classes: int = 8, epochs: int = 6) -> Path:
    """A run on random labels: the loss stays at ln C, moving by parts in 10⁴; accuracies stay near 1/C."""
    path = write_metrics(path, 20.0, ranks=2, model="hypergraph", graph="rmat", epochs=epochs, cores=2,
                         run={"graph": {"name": "rmat", "spec": "synthetic:rmat,scale=8", "random_labels": True},
                              "widths": [16, 16, classes]})
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        r.update(loss=math.log(classes) + 1e-4 * (-1) ** r["epoch"], train_acc=0.126, val_acc=0.124, test_acc=0.125)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_curves_of_random_labels_say_so_on_a_plain_axis_from_zero(tmp_path):
    """Issue #50: a flat ln 8 loss drawn on an offset axis (+2.079, span 3·10⁻⁴) looked like learning."""
    runs, _ = load_inputs([str(flat_random_labels(tmp_path / "flat.jsonl"))])
    fig = curves_figure(runs)
    fig.canvas.draw()
    loss_ax, acc_ax = fig.axes[:2]
    formatter = loss_ax.yaxis.get_major_formatter()
    assert formatter.get_offset() == "" and formatter.get_useOffset() is False  # no +2.079 above the axis, ever
    assert all("e" not in tick.get_text() for tick in loss_ax.get_yticklabels())  # nor a common 1e-4
    low, high = loss_ax.get_ylim()
    assert low == 0 and high >= math.log(8)  # the whole loss, not its last digits
    for ax in (loss_ax, acc_ax):
        assert "labels are random (8 classes)" in ax.get_title()
    chance = {round(float(line.get_ydata()[0]), 6) for ax in (loss_ax, acc_ax) for line in ax.get_lines()
              if line.get_linestyle() == ":" and len(set(line.get_ydata())) == 1}
    assert {round(math.log(8), 6), round(1 / 8, 6)} <= chance


def test_training_records_whether_its_labels_are_random(tmp_path):
    """The run header says what the report's curves need: drawn labels on an unlabelled graph, an SBM's own."""
    edges = tmp_path / "g.txt"
    edges.write_text("".join(f"{v} {(v * 7 + 1) % 60}\n" for v in range(60)))
    for name, args in (("drawn", ["--graph", str(edges), "--features", "4", "--classes", "5"]),
                       ("own", ["--graph", GRAPH])):
        done = distgcn_in_process(["train", *args, "--epochs", "1", "--quiet", "--metrics",
                                   str(tmp_path / f"{name}.jsonl")])
        assert done.returncode == 0, done.stderr
    runs, _ = load_inputs([str(tmp_path / "drawn.jsonl"), str(tmp_path / "own.jsonl")])
    assert [run.random_labels for run in runs] == [True, False] and runs[0].classes == 5


def test_curves_show_every_accuracy_and_keep_the_legend_off_the_panels(tmp_path):
    paths = [write_metrics(tmp_path / f"{i}.jsonl", 50.0, ranks=2, model=model, graph=graph)
             for i, (model, graph) in enumerate([("random", "cora"), ("hypergraph", "cora"), ("random", "pubmed")])]
    runs, _ = load_inputs(list(map(str, paths)))
    fig = curves_figure(runs)
    fig.canvas.draw()
    acc_axes = fig.axes[1::2]
    for run in runs:  # its train, validation and test accuracy, each a curve of the panel of its graph
        ax = acc_axes[0 if run.graph == "cora" else 1]
        drawn = [list(line.get_ydata()) for line in ax.get_lines()]
        for key in ("train_acc", "val_acc", "test_acc"):
            assert list(run.series(key)) in drawn, key
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2
    whole = fig.bbox
    for legend in legends:
        box = legend.get_window_extent()
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and whole.y0 <= box.y0 and box.y1 <= whole.y1
        for ax in fig.axes:  # over no panel, so over no curve
            assert not box.overlaps(ax.get_window_extent()), (legend.get_title().get_text(), ax.get_title())


def test_a_resumed_run_is_marked_on_its_curves(tmp_path, partition_dir):
    """A real run resumed from its checkpoint of epoch 2: its metrics file says so, and the curves mark it."""
    metrics = tmp_path / "m.jsonl"
    common = ["train", str(partition_dir), "--hidden", "4", "--quiet", "--metrics", str(metrics), "--checkpoint-dir",
              str(tmp_path / "ckpt"), "--checkpoint-every", "2"]
    assert distgcn_in_process([*common, "--epochs", "2"], ranks=3).returncode == 0
    resumed = distgcn_in_process([*common, "--epochs", "4", "--resume"], ranks=3)
    assert resumed.returncode == 0, resumed.stderr
    runs, _ = load_inputs([str(metrics)])
    assert [r["epoch"] for r in runs[0].records] == [1, 2, 3, 4] and runs[0].resumed_after == [2]
    fig = curves_figure(runs)
    for ax in fig.axes[:2]:
        marks = [line for line in ax.get_lines() if list(line.get_xdata()) == [2.5, 2.5]]
        assert len(marks) == 1, ax.get_title()
    assert any(text.get_text() == "resumed after epoch 2" for text in fig.axes[0].texts)


def test_balance_figures_of_one_graph_share_their_scales(tmp_path, partition_dir):
    other = tmp_path / "graph3"
    proc = distgcn_in_process(["partition", GRAPH, "--parts", "3", "--model", "graph", "--out", str(other),
                               "--quiet"])
    assert proc.returncode == 0, proc.stderr
    _, partitions = load_inputs([str(partition_dir), str(other)])
    tops = [max(int(p.comm.sum(axis=0).max()), int(p.comm.sum(axis=1).max())) for p in partitions]
    assert tops[0] != tops[1]  # a scale of its own per figure would differ
    scales = balance_limits(partitions)
    assert scales == {SBM_NAME: BalanceLimits(max(tops), max(int(p.nonzeros.max()) for p in partitions))}
    figures = [balance_figure(part, scales[SBM_NAME], shared_by=2) for part in partitions]
    for row in range(2):  # the volume panels, then the load panels, each pair on one scale
        assert figures[0].axes[row].get_ylim() == figures[1].axes[row].get_ylim()
    assert "scales shared by the 2 partitions" in figures[0].axes[0].get_title()


def test_communication_matrices_of_one_graph_share_their_colour_scale(tmp_path, partition_dir):
    other = tmp_path / "graph3"
    proc = distgcn_in_process(["partition", GRAPH, "--parts", "3", "--model", "graph", "--out", str(other),
                               "--quiet"])
    assert proc.returncode == 0, proc.stderr
    _, partitions = load_inputs([str(partition_dir), str(other)])
    largest = max(int(p.comm.max()) for p in partitions)
    assert largest > min(int(p.comm.max()) for p in partitions)  # a separate scale per matrix would differ
    for order in (partitions, partitions[::-1]):
        assert colour_limits(order) == {SBM_NAME: (0.0, largest)}


def test_partition_panels_leave_out_a_constant_one_and_add_the_minibatch_volume(partition_dir):
    _, [part] = load_inputs([str(partition_dir)])
    variant = lambda model, messages, extra=None: Partition(  # noqa: E731
        label=model, path=partition_dir, comm=part.comm, nonzeros=part.nonzeros, owned=part.owned,
        meta={**part.meta, "model": model, "messages": {**part.meta["messages"], "total": messages}, **(extra or {})})
    same = {("toy", 3): [variant("random", 6), variant("hypergraph", 6)]}
    assert "messages" not in [title for title, _, _ in partition_panels(same)]
    differ = {("toy", 3): [variant("random", 6), variant("hypergraph", 4)]}
    assert "messages" in [title for title, _, _ in partition_panels(differ)]
    shp = variant("stochastic", 4, {"shp_samples": 8, "partition_info": {"km1_reported": 100}})
    panels = partition_panels({("toy", 3): [variant("random", 6), shp]})
    assert panels[-1][0].startswith("SHP: minibatch volume") and panels[-1][2](shp) == 12.5


def test_runs_without_a_header_are_unknown_unless_annotated(tmp_path):
    bare = write_metrics(tmp_path / "old.jsonl", 20.0, ranks=None, model=None)
    runs, _ = load_inputs([str(bare)])
    assert (runs[0].ranks, runs[0].model, runs[0].graph) == (None, None, None)
    runs, _ = load_inputs([f"{bare}@ranks=8,model=hp,graph=cora,label=old run"])
    assert (runs[0].ranks, runs[0].model, runs[0].graph, runs[0].label) == (8, "HP", "cora", "old run")
    out = tmp_path / "report"
    assert report([str(bare)], out) == 0
    text = (out / "summary.md").read_text()
    assert "| old | old | ? | ? | ? | ? | ? | 6 |" in text and "FILE@ranks=P" in text


@pytest.mark.parametrize("epoch_ms, steady_ms", [
    ([50.0], 50.0),  # one epoch: the only measurement there is
    ([90.0, 20.0], 20.0),  # two: the second alone (the median of both, 55, would be half warm-up)
    ([90.0, 20.0, 40.0], 30.0),  # median of epochs 2 and 3
    ([90.0, 10.0, 50.0, 20.0], 20.0),  # median of epochs 2 to 4
])
def test_report_and_jobs_collect_leave_out_the_same_warm_up_epoch(tmp_path, epoch_ms, steady_ms):
    """One rule (metrics_log.steady): the first epoch is left out as soon as a run has two."""
    path = write_metrics(tmp_path / "metrics-p2.jsonl", 0.0, ranks=2, model="random", epochs=len(epoch_ms))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "epoch_s": ms / 1e3}) + "\n" for r, ms in zip(records, epoch_ms)))
    runs, _ = load_inputs([str(path)])
    assert runs[0].steady("epoch_s") == pytest.approx(steady_ms / 1e3)
    [row] = scaling_table(dict([load_metrics(path)]))
    assert row["epoch_s"] == runs[0].steady("epoch_s")


@pytest.mark.parametrize("content, message", [("not json\n", "old.jsonl:1: not a JSON line"),
                                              ('{"epoch": 1}\n', "lacks loss"),
                                              ("", "no epoch records")])
def test_bad_metrics_files_are_one_line_errors(tmp_path, capsys, content, message):
    (tmp_path / "old.jsonl").write_text(content)
    assert report([str(tmp_path / "old.jsonl")], tmp_path / "out") == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("where, value, message", [
    ("node", {"threads_per_rank": "x"}, 'field run.node.threads_per_rank: expected an integer >= 1, got "x"'),
    ("node", {"load_average": -1}, "field run.node.load_average: expected a number >= 0 or null, got -1"),
    ("node", {"busy": "yes"}, 'field run.node.busy: expected true or false or null, got "yes"'),
    ("run", {"widths": [8, "x"]}, 'field run.widths[1]: expected an integer >= 1, got "x"'),
    ("epoch", {"resumed_after": "2"}, 'field resumed_after: expected an integer >= 1, got "2"'),
])
def test_what_the_report_reads_of_a_header_is_checked(tmp_path, capsys, where, value, message):
    """The keys the report reads for contention, labels and resumes: a bad one is a one-line error, no traceback."""
    path = write_metrics(tmp_path / "m.jsonl", 10.0, ranks=2, model="random", cores=2,
                         node=value if where == "node" else None, run=value if where == "run" else None,
                         extra={1: value} if where == "epoch" else None)
    assert report([str(path)], tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    assert report([str(tmp_path / "missing.jsonl")], tmp_path / "out") == 2
    assert "no such metrics file or partition directory" in capsys.readouterr().err
    assert report([str(tmp_path / "missing.jsonl@cores=3")], tmp_path / "out") == 2
    assert "keys label, ranks, model, graph" in capsys.readouterr().err


def test_without_matplotlib_the_error_says_what_to_install(tmp_path, runs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" raise ImportError
    assert report([str(runs[0])], tmp_path / "out") == 2
    assert "pip install 'distgcn[report]'" in capsys.readouterr().err


def test_training_writes_the_run_header_and_prints_progress_on_rank_zero(tmp_path, partition_dir):
    """On in-process ranks, which share one stdout (a line printed by every rank would be counted 3 times);
    the --quiet run is a real mpiexec job, whose stderr holds all that the processes wrote."""
    metrics = tmp_path / "m.jsonl"
    proc = distgcn_in_process(["train", str(partition_dir), "--epochs", "3", "--hidden", "4", "--metrics",
                               str(metrics)], ranks=3)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert all(set(EPOCH_KEYS) <= set(r) for r in records)
    assert ["run" in r for r in records] == [True, False, False]
    run = records[0]["run"]
    meta = json.loads((partition_dir / "meta.json").read_text())
    assert run["ranks"] == 3 and run["partition_model"] == "random"
    assert run["partition_id"] == meta["partition_id"]
    assert run["graph"]["fingerprint"] == meta["graph"]["fingerprint"]
    assert run["widths"] == [8, 4, 3] and run["layers"] == 2 and run["dtype"] == "float32"
    assert run["node"]["ranks"] == 3 and run["node"]["cores"] >= 1 and run["node"]["device"] == "cpu"
    for r in records:  # the slowest rank's own split is its epoch, which is the epoch's (max) time
        assert r["slowest_rank"] in range(3)
        assert r["slowest_compute_s"] + r["slowest_comm_wait_s"] + r["slowest_allreduce_s"] == \
            pytest.approx(r["epoch_s"], rel=1e-9)
    assert proc.stderr.count("training: started") == 1 and proc.stderr.count("training: done in") == 1
    assert sum(line.startswith("epoch") for line in proc.stdout.splitlines()) == 3

    verbose = distgcn_in_process(["train", str(partition_dir), "--epochs", "2", "--verbose"], ranks=3)
    assert verbose.returncode == 0, verbose.stderr
    assert sum("halo wait" in line for line in verbose.stdout.splitlines()) == 2
    quiet = run_distgcn(["train", str(partition_dir), "--epochs", "2", "--quiet"], ranks=3)
    # nothing but warnings, which --quiet keeps (3 ranks on a machine of fewer cores warn that they wait for one)
    assert quiet.returncode == 0 and all(" warning: " in line for line in quiet.stderr.splitlines()), quiet.stderr
    assert quiet.stdout.startswith("done: 2 epochs on 3 rank(s)")


def test_runs_are_labelled_by_dataset_name_not_path(tmp_path):
    """Runs of train --graph /abs/path name their graph by file name; runs whose file names clash are told apart
    by the shortest trailing part of their paths (issue #22: plots and summary.md showed absolute paths)."""
    paths = []
    for ranks in (1, 2):
        (tmp_path / f"p{ranks}").mkdir()
        path = write_metrics(tmp_path / f"p{ranks}" / "run.jsonl", 50.0, ranks=ranks, model="random")
        records = [json.loads(line) for line in path.read_text().splitlines()]
        records[0]["run"]["graph"] = {"name": None, "fingerprint": None,
                                      "spec": str(tmp_path / "data" / "soc-Slashdot0902.txt.gz")}
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(str(path))
    runs, _ = load_inputs(paths)
    assert [r.graph for r in runs] == ["soc-Slashdot0902", "soc-Slashdot0902"]
    assert [r.label for r in runs] == ["soc-Slashdot0902, 1 rank", "soc-Slashdot0902, RP, P=2"]
    assert [r.name for r in runs] == ["p1/run", "p2/run"]  # figure files keep their names
    out = tmp_path / "report"
    assert report(paths, out) == 0
    text = (out / "summary.md").read_text()
    assert str(tmp_path) not in text and "| soc-Slashdot0902, 1 rank | p1/run |" in text
    assert {p.name for p in out.glob("time-*.png")} == {"time-p1-run.png", "time-p2-run.png"}


def test_jobs_collect_splits_the_epoch_as_the_slowest_rank_spent_it(tmp_path):
    """The per-key maxima (each from its own rank) add up to more than the epoch; the slowest rank's own split
    does not, and older files without it fall back to the maxima."""
    path = write_metrics(tmp_path / "metrics-p2.jsonl", 0.0, ranks=2, model="random", epochs=3)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    split = {"epoch_s": 0.1, "compute_s": 0.09, "comm_wait_s": 0.06, "allreduce_s": 0.01,
             "slowest_compute_s": 0.07, "slowest_comm_wait_s": 0.025, "slowest_allreduce_s": 0.005}
    path.write_text("".join(json.dumps({**r, **split}) + "\n" for r in records))
    [row] = scaling_table(dict([load_metrics(path)]))
    assert (row["compute_s"], row["comm_wait_s"], row["allreduce_s"]) == (0.07, 0.025, 0.005)
    assert row["compute_s"] + row["comm_wait_s"] + row["allreduce_s"] == pytest.approx(row["epoch_s"])
    old = [{k: v for k, v in {**r, **split}.items() if not k.startswith("slowest_")} for r in records]
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    [row] = scaling_table(dict([load_metrics(path)]))
    assert (row["compute_s"], row["comm_wait_s"], row["allreduce_s"]) == (0.09, 0.06, 0.01)


def test_the_kept_epoch_is_named_with_its_test_accuracy(tmp_path):
    """A run with --keep-best names the epoch whose weights it kept (the last record's best_epoch) and that epoch's
    test accuracy; a run without it kept the last epoch's."""
    kept = write_metrics(tmp_path / "kept.jsonl", 10.0, ranks=2, model="random",
                         run={"selection": {"keep_best": "val_loss", "watched": "val_loss", "patience": None}},
                         extra={epoch: {"best_epoch": min(epoch, 4)} for epoch in range(1, 7)})
    plain = write_metrics(tmp_path / "plain.jsonl", 10.0, ranks=2, model="hypergraph")
    out = tmp_path / "report"
    assert distgcn_in_process(["report", str(kept), str(plain), "--out", str(out)]).returncode == 0
    rows = summary_rows((out / "summary.md").read_text())
    cells = {row[1]: row[11] for row in rows.values() if len(row) > 11 and row[1] in ("kept", "plain")}
    assert cells == {"kept": "4, best val_loss (0.3400)", "plain": "last"}
