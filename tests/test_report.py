"""``distgcn report``: every figure rendered from small inputs, the summary's numbers, the run header."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from distgcn.cli import main
from distgcn.commands.jobs import load_metrics, scaling_table
from distgcn.prepare import GraphOptions, prepare_graph
from distgcn.report.inputs import load_inputs
from distgcn.schema import EPOCH_KEYS
from partition.metrics import comm_matrix

from conftest import run_distgcn

pytest.importorskip("matplotlib")

GRAPH = "synthetic:sbm,n=300,classes=3,features=8"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def partition_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("part") / "p3"
    proc = run_distgcn(["partition", GRAPH, "--parts", "3", "--model", "random", "--out", str(out), "--quiet"])
    assert proc.returncode == 0, proc.stderr
    return out


def write_metrics(path: Path, epoch_ms: float, *, ranks: int | None, model: str | None, epochs: int = 6) -> Path:
    """A synthetic metrics file: steady epochs of ``epoch_ms`` after a slower first one."""
    lines = []
    for epoch in range(1, epochs + 1):
        epoch_s = (epoch_ms * (3 if epoch == 1 else 1)) / 1e3
        record = {"epoch": epoch, "loss": 1.0 / epoch, "train_acc": 0.5 + epoch / 100, "val_acc": 0.4 + epoch / 100,
                  "test_acc": 0.3 + epoch / 100, "epoch_s": epoch_s, "compute_s": 0.6 * epoch_s,
                  "comm_wait_s": 0.3 * epoch_s, "allreduce_s": 0.1 * epoch_s, "halo_rows": 1000 * (ranks or 1),
                  "halo_bytes": 32000 * (ranks or 1), "messages": 6, "max_rank_halo_rows": 400,
                  "spmm_exchanges": 5}
        if epoch == 1 and ranks is not None:
            record["run"] = {"ranks": ranks, "partition_model": model, "graph": {"name": "toy"}}
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
    proc = run_distgcn(["partition", GRAPH, "--parts", "3", "--model", "graph", "--out", str(other), "--quiet"])
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "report"
    assert report([str(partition_dir), str(other)], out) == 0
    assert png_size(out / "models-partitions.png") == (1400, 450)
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


def test_summary_tables(tmp_path, runs, partition_dir):
    out = tmp_path / "report"
    assert report([*map(str, runs), str(partition_dir)], out) == 0
    text = (out / "summary.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ")
            for line in text.splitlines() if line.startswith("| ")}
    # run, graph, model, P, epochs, final loss, final test acc, best val (test), epoch, compute, wait, allreduce
    assert rows["rp4"][:9] == ["rp4", "toy", "RP", "4", "6", "0.1667", "0.3600", "0.4600 (0.3600)", "50.00"]
    assert rows["hp4"][2:4] == ["HP", "4"] and rows["shp4"][2] == "SHP" and rows["gp4"][2] == "GP"
    assert rows["rp4"][9:12] == ["30.00", "15.00", "5.00"]  # the first (slower) epoch is left out
    # Strong scaling: efficiency T1 / (P * TP) = 100 / (2 * 62.5) and 100 / (4 * 50).
    scaling = [line for line in text.splitlines() if line.startswith("| toy, RP |")]
    assert [cells.split(" | ")[1:5] for cells in scaling] == [
        ["1", "100.00", "1.00", "1.00"], ["2", "62.50", "1.60", "0.80"], ["4", "50.00", "2.00", "0.50"]]
    assert rows["p3"][2:5] == ["RP", "numpy.random.default_rng", "3"]
    assert "![Communication matrix: p3](comm-p3.png)" in text
    assert "?" not in text.split("## Strong scaling")[0]  # every run named itself


def test_runs_without_a_header_are_unknown_unless_annotated(tmp_path):
    bare = write_metrics(tmp_path / "old.jsonl", 20.0, ranks=None, model=None)
    runs, _ = load_inputs([str(bare)])
    assert (runs[0].ranks, runs[0].model, runs[0].graph) == (None, None, None)
    runs, _ = load_inputs([f"{bare}@ranks=8,model=hp,graph=cora,label=old run"])
    assert (runs[0].ranks, runs[0].model, runs[0].graph, runs[0].label) == (8, "HP", "cora", "old run")
    out = tmp_path / "report"
    assert report([str(bare)], out) == 0
    text = (out / "summary.md").read_text()
    assert "| old | ? | ? | ? | 6 |" in text and "FILE@ranks=P" in text


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
    metrics = tmp_path / "m.jsonl"
    proc = run_distgcn(["train", str(partition_dir), "--epochs", "3", "--hidden", "4", "--metrics", str(metrics)],
                       ranks=3)
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
    assert proc.stderr.count("training: started") == 1 and proc.stderr.count("training: done in") == 1
    assert sum(line.startswith("epoch") for line in proc.stdout.splitlines()) == 3

    verbose = run_distgcn(["train", str(partition_dir), "--epochs", "2", "--verbose"], ranks=3)
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
    assert [r.label for r in runs] == ["p1/run", "p2/run"]
