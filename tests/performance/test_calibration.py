"""``distgcn calibrate`` and ``distgcn stats DIR --predict-time``: the fit, the file, and the refusals."""

from __future__ import annotations

import json

import pytest
from conftest import distgcn_in_process

from distgcn.errors import InputError
from distgcn.performance.calibration import fit_rates
from distgcn.performance.calibration_file import read_calibration
from distgcn.performance.epoch_time import ComputeRates

SMALL = ["--graphs", "400:4,400:12,1200:4", "--epochs", "3", "--threads", "1"]
CALIBRATE_SMALL = ["--features", "8", "--classes", "3", *SMALL]


def test_the_fit_recovers_the_rates_of_exactly_linear_epochs():
    truth = ComputeRates(per_nnz_s=3e-9, per_row_s=4e-7, fixed_s=5e-4)
    samples = [{"nnz": nnz, "rows": rows, "epoch_s": truth.epoch_s(nnz, rows)}
               for rows, nnz in ((1000, 9000), (1000, 40000), (5000, 20000), (8000, 300000))]
    fitted = fit_rates(samples)
    assert fitted.per_nnz_s == pytest.approx(truth.per_nnz_s, rel=1e-6)
    assert fitted.per_row_s == pytest.approx(truth.per_row_s, rel=1e-6)
    assert fitted.fixed_s == pytest.approx(truth.fixed_s, rel=1e-6)


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibration") / "node.json"
    done = distgcn_in_process(["calibrate", "--out", str(path), "--features", "8", "--classes", "3", *SMALL])
    assert done.returncode == 0, done.stderr
    assert "compute per epoch" in done.stdout and str(path) in done.stdout
    return path


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    out = tmp_path_factory.mktemp("partition") / "p"
    done = distgcn_in_process(["partition", "synthetic:sbm,n=900,features=8,classes=3,seed=1", "--parts", "2",
                               "--model", "random", "--out", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    return out


def test_calibrate_writes_what_stats_reads(calibration):
    record = read_calibration(calibration)
    assert [(s["rows"]) for s in record["samples"]] == [400, 400, 1200]
    assert record["network"] is None and record["ranks"] == 1 and record["threads"] == 1
    assert record["model"]["hidden"] == [16] and (record["features"], record["classes"]) == (8, 3)
    rates = ComputeRates(**record["compute"])
    assert all(rates.epoch_s(s["nnz"], s["rows"]) > 0 for s in record["samples"])


def test_the_predicted_halo_is_the_partition_s_busiest_link(calibration, partition):
    """The link term against meta.json's volumes (written by the partition's own metrics): per exchange, the
    latency plus the larger of the most rows one rank sends and receives, times the exchange's width."""
    done = distgcn_in_process(["stats", str(partition), "--predict-time", str(calibration), "--bandwidth",
                               "8mbit", "--latency", "100us", "--json"])
    assert done.returncode == 0, done.stderr
    p = json.loads(done.stdout)
    meta = json.loads((partition / "meta.json").read_text())
    busiest = max(meta["volume"]["max"], meta["max_recv_volume"])
    widths = [8, 3, 3, 8, 3]  # forward Â·X·W (8 columns) and 16->3; backward of layer 1 only; evaluation
    assert p["halo_s"] == pytest.approx(sum(1e-4 + busiest * w * 4 / 1e6 for w in widths))
    assert p["serial_s"] == pytest.approx(p["compute_s"] + p["halo_s"] + p["allreduce_s"])
    assert p["network_source"] == {"latency_s": "given", "bandwidth_bytes_s": "given"}
    table = distgcn_in_process(["stats", str(partition), "--predict-time", str(calibration), "--bandwidth",
                                "1MB/s", "--latency", "0.1ms"])
    assert table.returncode == 0 and "slowest rank" in table.stdout and "epoch:" in table.stdout


@pytest.mark.parametrize("args, message", [
    (["--bandwidth", "1gbit"], "--bandwidth applies to --predict-time only"),
    (["--predict-time", "{cal}"], "no network was measured"),
    (["--predict-time", "{missing}", "--bandwidth", "1gbit", "--latency", "1us"], "no such calibration file"),
    (["--predict-time", "{cal}", "--bandwidth", "fast", "--latency", "1us"], "expected a rate such as"),
    (["--predict-time", "{cal}", "--bandwidth", "1gbit", "--latency", "soon"], "expected a time such as"),
    (["--predict-time", "{cal}", "--bandwidth", "1gbit", "--latency", "1us", "--ranks-per-node", "3"],
     "the partition has only 2 parts"),
])
def test_stats_predict_time_refusals(calibration, partition, tmp_path, args, message):
    args = [a.format(cal=calibration, missing=tmp_path / "none.json") for a in args]
    done = distgcn_in_process(["stats", str(partition), *args])
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.strip().count("\n") == 0 or "usage:" in done.stderr


def test_a_calibration_for_other_widths_is_refused(calibration, tmp_path):
    other = tmp_path / "p5"
    assert distgcn_in_process(["partition", "synthetic:sbm,n=300,features=5,classes=3", "--parts", "2", "--model",
                               "random", "--out", str(other), "--quiet"]).returncode == 0
    done = distgcn_in_process(["stats", str(other), "--predict-time", str(calibration), "--bandwidth", "1gbit",
                               "--latency", "1us"])
    assert done.returncode == 2
    assert "calibrated for 8 features and 3 classes" in done.stderr and "--features 5" in done.stderr


@pytest.mark.parametrize("text, message", [
    ("", "not a calibration file"),
    ("{}", "not a calibration file written by"),
    ('{"format": "distgcn-calibration", "version": 99}', "calibration version 99"),
    ('{"format": "distgcn-calibration", "version": 1, "compute": {}}', "damaged calibration file"),
])
def test_damaged_calibration_files_are_named(tmp_path, text, message):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as error:
        read_calibration(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("args, message", [
    (["--epochs", "2"], "--epochs 2: give at least 3"),
    (["--graphs", "400:4"], "at least three graphs"),
    (["--graphs", "400:4,800:4,1600:4"], "two sizes and two degrees"),
    (["--graphs", "big"], "expected N:D"),
])
def test_calibrate_refusals(tmp_path, args, message):
    done = distgcn_in_process(["calibrate", "--out", str(tmp_path / "c.json"), "--features", "8", "--classes", "3",
                               *args])
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "c.json").exists()


def test_calibrate_replaces_only_its_own_file(tmp_path, calibration):
    mine = tmp_path / "notes.json"
    mine.write_text('{"my": "notes"}\n')
    done = distgcn_in_process(["calibrate", "--out", str(mine), "--features", "8", "--classes", "3", *SMALL])
    assert done.returncode == 2 and str(mine) in done.stderr
    assert mine.read_text() == '{"my": "notes"}\n'


def test_the_loads_counted_for_the_distributed_calibration_are_the_shards_loads(tmp_path):
    """calibration.partition_loads (Â and the part vector) against the loads read from the shards written for it."""
    from distgcn import api
    from distgcn.performance.calibration import partition_loads
    from distgcn.performance.epoch_time import rank_load
    from distgcn.shard.directory import load_listed_shard, read_meta

    part = api.partition("synthetic:sbm,n=500,classes=3,features=4,seed=8", parts=3, model="random", seed=2)
    part.write(tmp_path / "p", quiet=True)
    meta = read_meta(tmp_path / "p")
    import numpy as np

    assert partition_loads(part.a_hat, np.asarray(part.parts), 3) == [
        rank_load(load_listed_shard(tmp_path / "p", meta, rank)) for rank in range(3)]


def test_calibrate_under_mpiexec_measures_the_network_and_the_work_of_distribution(tmp_path):
    from conftest import run_distgcn

    path = tmp_path / "two.json"
    done = run_distgcn(["calibrate", "--out", str(path), *CALIBRATE_SMALL], ranks=2, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("written ") == 1  # rank 0 reports, once
    record = read_calibration(path)
    assert record["ranks"] == 2 and len(record["samples"]) == 6  # each rank timed the three graphs
    assert record["network"]["bandwidth_bytes_s"] > 0 and record["network"]["between_ranks"] == [0, 1]
    d = record["distribution"]
    assert d["graph"] == [1200, 4.0] and d["most_halo_values"] > 0
    assert record["compute"]["per_halo_value_s"] == d["per_halo_value_s"] >= 0
