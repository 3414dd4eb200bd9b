"""``report --predict-time``: each run's prediction beside its measurement, the same figures as ``stats DIR
--predict-time`` gives for the run's partition and node layout, and the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import distgcn_in_process

CALIBRATE = ["--features", "8", "--classes", "3", "--graphs", "400:4,400:12,1200:4", "--epochs", "3",
             "--threads", "1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predicted")
    paths = {"dir": root / "p", "moved": root / "moved", "metrics": root / "run.jsonl",
             "lost": root / "lost.jsonl", "calibration": root / "node.json"}
    for args, ranks in (
            (["partition", "synthetic:sbm,n=900,features=8,classes=3,seed=4", "--parts", "2", "--model", "random",
              "--out", str(paths["dir"]), "--quiet"], 1),
            (["train", str(paths["dir"]), "--epochs", "4", "--quiet", "--metrics", str(paths["metrics"])], 2),
            (["partition", "synthetic:sbm,n=900,features=8,classes=3,seed=4", "--parts", "2", "--model", "random",
              "--out", str(paths["moved"]), "--quiet"], 1),
            (["train", str(paths["moved"]), "--epochs", "4", "--quiet", "--metrics", str(paths["lost"])], 2),
            (["calibrate", "--out", str(paths["calibration"]), *CALIBRATE], 1)):
        done = distgcn_in_process(args, ranks)
        assert done.returncode == 0, (args, done.stderr)
    shutil.rmtree(paths["moved"])  # the second run's partition directory is gone
    return paths


def test_the_report_shows_the_prediction_that_stats_gives(trained, tmp_path):
    out = tmp_path / "report"
    done = distgcn_in_process(["report", str(trained["metrics"]), f"{trained['lost']}@label=lost",
                               "--predict-time", str(trained["calibration"]), "--bandwidth", "10mbit",
                               "--latency", "50us", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    summary = (out / "summary.md").read_text()
    assert "## Predicted and measured epoch time" in summary
    assert (out / "predicted-time.png").stat().st_size > 10_000
    # the run's two in-process ranks shared this node: its header says so, and the prediction follows
    node = json.loads(trained["metrics"].read_text().splitlines()[0])["run"]["node"]
    stats = distgcn_in_process(["stats", str(trained["dir"]), "--predict-time", str(trained["calibration"]),
                                "--bandwidth", "10mbit", "--latency", "50us", "--ranks-per-node",
                                str(node["ranks"]), "--json"])
    expected = json.loads(stats.stdout)
    section = summary.split("## Predicted and measured epoch time")[1].split("\n## ")[0].splitlines()
    row = next(line for line in section if line.startswith("| ") and "10 Mbit/s" in line)
    assert f"| {expected['serial_s'] * 1e3:.1f} | {expected['overlapped_s'] * 1e3:.1f} |" in row
    lost = next(line for line in section if line.startswith("| lost"))
    assert "no prediction" in lost and "meta.json" in lost


def test_a_run_s_own_calibration_wins(trained, tmp_path):
    other = tmp_path / "other.json"
    record = json.loads(trained["calibration"].read_text())
    record["compute"] = {"per_nnz_s": 0.0, "per_row_s": 0.0, "fixed_s": 0.25}
    record["network"] = {"latency_s": 1e-5, "bandwidth_bytes_s": 1e9, "between_ranks": [0, 1]}
    other.write_text(json.dumps(record))
    out = tmp_path / "report"
    done = distgcn_in_process(["report", f"{trained['metrics']}@calibration={other}", "--predict-time",
                               str(trained["calibration"]), "--out", str(out)])
    assert done.returncode == 0, done.stderr
    row = next(line for line in (out / "summary.md").read_text().splitlines() if line.endswith("| other.json |"))
    assert "| 250.0 |" in row  # compute alone: the fixed 0.25 s the run's own file says


@pytest.mark.parametrize("args, message", [
    (["--bandwidth", "1gbit"], "--bandwidth and --latency apply to predictions"),
    (["--predict-time", "{missing}"], "no such calibration file"),
    (["--predict-time", "{cal}", "--latency", "later"], "expected a time such as"),
])
def test_refusals(trained, tmp_path, args, message):
    args = [a.format(cal=trained["calibration"], missing=tmp_path / "none.json") for a in args]
    done = distgcn_in_process(["report", str(trained["metrics"]), *args, "--out", str(tmp_path / "r")])
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "r").exists()


def test_a_partition_has_no_calibration(trained, tmp_path):
    done = distgcn_in_process(["report", f"{trained['dir']}@calibration=x.json", "--out", str(tmp_path / "r")])
    assert done.returncode == 2 and "a partition directory has none" in done.stderr
