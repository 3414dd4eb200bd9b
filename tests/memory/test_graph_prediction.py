"""``distgcn stats --predict``: the halo estimate against brute-force counts, memory against memory.predict,
the per-epoch halo traffic against what training measures, and bad specs refused naming their key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import run_distgcn_in_process

from distgcn.cli.main import main
from distgcn.config import ModelConfig
from distgcn.memory.from_sizes import (
    GraphSpec,
    epoch_exchange_widths,
    expected_senders,
    largest_message_rows,
    parse_spec,
    partitioning_bytes,
    predict_graph,
    random_halo_rows,
    shard_sizes,
)
from distgcn.memory.prediction import ShardSizes, predict
from distgcn.partitioning.models import random_parts


def a_hat_with_column_degrees(degrees: np.ndarray, seed: int) -> sp.csr_matrix:
    """Â's pattern: self loops plus, in column v, ``degrees[v]`` distinct rows other than v, drawn at random."""
    n = degrees.shape[0]
    rng = np.random.default_rng(seed)
    rows, cols = [np.arange(n)], [np.arange(n)]
    for v, d in enumerate(degrees):
        others = rng.choice(n - 1, size=d, replace=False)
        rows.append(others + (others >= v))  # skip v itself
        cols.append(np.full(d, v))
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(r.shape[0]), (r, c)), shape=(n, n))


def halo_rows_by_brute_force(a_hat: sp.csr_matrix, parts: np.ndarray, nparts: int) -> np.ndarray:
    """Per rank: the distinct columns its rows read that another rank owns."""
    coo = a_hat.tocoo()
    reader, owner = parts[coo.row], parts[coo.col]
    remote = reader != owner
    pairs = np.unique(reader[remote].astype(np.int64) * a_hat.shape[0] + coo.col[remote])
    return np.bincount(pairs // a_hat.shape[0], minlength=nparts)


@pytest.mark.parametrize("nparts,degree", [(4, 10), (8, 5), (16, 20), (64, 3)])
def test_random_halo_estimate_matches_a_brute_force_count_at_uniform_degree(nparts, degree):
    n = 12000
    a_hat = a_hat_with_column_degrees(np.full(n, degree), seed=nparts)
    halo = halo_rows_by_brute_force(a_hat, random_parts(n, nparts, seed=1), nparts)
    estimate = random_halo_rows(n, a_hat.nnz, nparts)
    assert halo.mean() == pytest.approx(estimate, rel=0.02)


def test_random_halo_estimate_bounds_a_skewed_graph_of_the_same_mean_degree():
    """Each vertex is a halo row of another rank with probability 1 - (1-1/P)^d_v (checked here per vertex);
    that is concave in d_v, so at the same mean degree the uniform estimate is above the skewed count."""
    n, nparts = 12000, 8
    degrees = np.where(np.arange(n) % 10 == 0, 64, 2)  # mean 8
    a_hat = a_hat_with_column_degrees(degrees, seed=3)
    halo = halo_rows_by_brute_force(a_hat, random_parts(n, nparts, seed=1), nparts)
    other = 1 - 1 / nparts
    assert halo.mean() == pytest.approx(other * (1 - other**degrees).sum(), rel=0.02)
    assert halo.max() <= random_halo_rows(n, a_hat.nnz, nparts)


def test_expected_senders_matches_distinct_owners_of_random_halo_rows():
    rng = np.random.default_rng(0)
    for halo, nparts in [(2, 3), (3, 64), (40, 64), (200, 16), (10, 2)]:
        owners = np.sort(rng.integers(0, nparts - 1, size=(20000, halo)), axis=1)
        distinct = 1 + (np.diff(owners, axis=1) != 0).sum(axis=1)
        assert distinct.mean() == pytest.approx(expected_senders(halo, nparts), rel=0.01)
    assert expected_senders(10, 1) == 0


MODELS = [ModelConfig(), ModelConfig(3, (256,)), ModelConfig(2, (64,), "float64", "sgd", 0.0)]


@pytest.mark.parametrize("model", MODELS)
def test_memory_is_memory_predict_on_the_equivalent_shard(model):
    spec = GraphSpec(n=10_001, nnz=120_007, features=100, parts=7, classes=5)
    halo = round(random_halo_rows(spec.n, spec.nnz, spec.parts))
    off_diagonal_remote = round((spec.nnz - spec.n) / 7 * 6 / 7)
    expected = ShardSizes(rows=1429, halo_rows=halo, nnz_owned=17_144 - off_diagonal_remote,
                          nnz_halo=off_diagonal_remote, rows_sent=halo, senders=6, features=100, feature_itemsize=4,
                          adjacency_itemsize=8, classes=5, parts=7)
    got = shard_sizes(spec)
    assert got.largest_recv == got.largest_send  # a random partition: rows sent as received, checked below
    expected = ShardSizes(**{**expected.__dict__, "largest_recv": got.largest_recv, "largest_send": got.largest_recv})
    assert got == expected
    out = predict_graph(spec, model)
    assert out["gpu_bytes"] == predict(expected, model, True)
    assert out["cpu_bytes"] == predict(expected, model, False)
    given = predict_graph(GraphSpec(**{**spec.__dict__, "halo": 321}), model)
    assert given["shard"]["halo_rows"] == given["shard"]["rows_sent"] == 321
    largest = given["shard"]["largest_recv"]
    assert given["cpu_bytes"] == predict(ShardSizes(**{**expected.__dict__, "halo_rows": 321, "rows_sent": 321,
                                                       "senders": 6, "largest_recv": largest,
                                                       "largest_send": largest}), model, False)


@pytest.mark.parametrize("halo, senders", [(300, 6), (20_000, 127), (22_300_000, 127), (50, 40)])
def test_the_largest_message_estimate_bounds_random_owners(halo, senders):
    """Owners drawn at random for every halo row: the estimate is above the largest message in at least 99 of
    100 draws, and not far above it (under 1.3 times the average largest, plus 3 rows for tiny messages)."""
    rng = np.random.default_rng(5)
    largest = rng.multinomial(halo, [1 / senders] * senders, size=200).max(axis=1)
    estimate = largest_message_rows(halo, senders)
    assert (largest <= estimate).mean() >= 0.99
    assert estimate <= 1.3 * largest.mean() + 3


@pytest.mark.parametrize("layers,hidden,dtype", [(2, "16", "float32"), (3, "64", "float64"), (3, "4,8", "float32")])
def test_epoch_halo_traffic_is_what_training_measures(tmp_path, layers, hidden, dtype):
    """A random partition's measured volume times the predicted exchanges gives the trainer's own counters."""
    part = tmp_path / "part"
    assert main(["partition", "synthetic:sbm,n=300,avg_degree=6", "--features", "12", "--classes", "3",
                 "--parts", "3", "--model", "random", "--out", str(part), "--quiet"]) == 0
    metrics = tmp_path / "m.jsonl"
    assert run_distgcn_in_process(["train", str(part), "--epochs", "1", "--layers", str(layers), "--hidden", hidden,
                                   "--dtype", dtype, "--metrics", str(metrics), "--quiet"], 3) == [0, 0, 0]
    record = json.loads(metrics.read_text().splitlines()[-1])
    volume = json.loads((part / "meta.json").read_text())["volume"]["total"]
    model = ModelConfig(layers, tuple(int(h) for h in hidden.split(",")), dtype)
    widths = epoch_exchange_widths(model, 12, 3, 2)
    assert record["spmm_exchanges"] == len(widths)
    assert record["halo_rows"] == volume * len(widths)
    assert record["halo_bytes"] == volume * sum(widths) * (8 if dtype == "float64" else 4)
    mean_halo = volume // 3  # stats --predict takes every rank's halo as the mean's
    out = predict_graph(GraphSpec(n=300, nnz=1000, features=12, parts=3, classes=3, halo=mean_halo), model)
    assert out["halo_bytes_per_epoch"] == record["halo_bytes"] * (3 * mean_halo) // volume
    assert out["spmm_exchanges"] == record["spmm_exchanges"]


def test_partitioning_floor_is_the_arrays_the_partitioning_process_holds():
    """Â's CSR as scipy and prepare.py build it, float32 features and the int64 part vector: sizes of real arrays
    for a small graph, and int64 indices past 2^31 nonzeros (papers100M)."""
    from distgcn.data.graph import normalized_adjacency

    a_hat = normalized_adjacency(a_hat_with_column_degrees(np.full(500, 4), seed=0))
    features, parts = np.zeros((500, 7), dtype=np.float32), random_parts(500, 3)
    floor = partitioning_bytes(GraphSpec(n=500, nnz=a_hat.nnz, features=7, parts=3))
    assert floor == {"adjacency_csr": a_hat.indptr.nbytes + a_hat.indices.nbytes + a_hat.data.nbytes,
                     "features": features.nbytes, "parts": parts.nbytes,
                     "total": a_hat.indptr.nbytes + a_hat.indices.nbytes + a_hat.data.nbytes + features.nbytes
                     + parts.nbytes}
    big = partitioning_bytes(GraphSpec(n=10**8, nnz=3 * 10**9, features=1, parts=2))
    assert big["adjacency_csr"] == (10**8 + 1) * 8 + 3 * 10**9 * 16


def test_spec_accepts_papers_style_numbers_and_optional_keys():
    assert parse_spec("n=1.11e8,nnz=3.2e9,features=128,parts=64") == GraphSpec(111_000_000, 3_200_000_000, 128, 64)
    assert parse_spec(" parts=2, n=10 ,nnz=30,features=4,classes=7,halo=3") == GraphSpec(10, 30, 4, 2, 7, 3)


@pytest.mark.parametrize("spec,message", [
    ("n=10,nnz=30,features=4", "missing parts"),
    ("n=10,nnz=30,features=4,parts=2,color=3", "unknown key 'color'"),
    ("n=10,nnz=30,features=four,parts=2", "features: expected a number, got 'four'"),
    ("n=10,nnz=30,features=4,parts=0", "parts: expected a whole number >= 1"),
    ("n=10.5,nnz=30,features=4,parts=2", "n: expected a whole number >= 1"),
    ("n=10,nnz=30,features=4,parts=2,parts=3", "parts: given twice"),
    ("n=10,nnz=9,features=4,parts=2", "nnz: Â has a self loop"),
    ("n=10,nnz=30,features=4,parts=11", "parts: at most n=10"),
    ("n=10,nnz=30,features=4,parts=2,halo=6", "halo: a rank's halo rows are owned by the others, at most 5"),
    ("n=10,nnz", "expected key=value, got 'nnz'"),
])
def test_a_bad_spec_is_refused_naming_its_key(capsys, spec, message):
    with pytest.raises(SystemExit) as info:
        main(["stats", "--predict", spec])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --predict: {message}" in err


def test_stats_needs_directories_or_predict_but_not_both(tmp_path, capsys):
    assert main(["stats"]) == 2
    assert "give a partition directory" in capsys.readouterr().err
    assert main(["stats", str(tmp_path), "--predict", "n=10,nnz=30,features=4,parts=2"]) == 2
    assert "not both" in capsys.readouterr().err


def test_json_and_table_report_the_same_prediction(capsys):
    args = ["stats", "--predict", "n=1.11e8,nnz=3.2e9,features=128,parts=64,classes=172", "--layers", "3",
            "--hidden", "256"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(predict_graph(parse_spec(args[2]), ModelConfig(3, (256,)))))
    assert main(args) == 0
    text = capsys.readouterr().out
    assert f"{out['halo_bytes_per_epoch'] / 2**40:.2f} TiB over 8 exchanges" in text
    rows = {line[:16].strip(): line[16:].split("  ") for line in text.splitlines()}
    assert [cell.strip() for cell in rows["distgcn"] if cell] == [
        f"{out['gpu_bytes']['total'] / 2**30:.2f} GiB", f"{out['cpu_bytes']['total'] / 2**30:.2f} GiB"]
    assert [cell.strip() for cell in rows["runtime baseline"] if cell] == [
        "not measured", f"{out['runtime_baseline']['cpu_bytes'] / 2**20:.1f} MiB"]
    assert out["cpu_total_bytes"] == out["cpu_bytes"]["total"] + out["runtime_baseline"]["cpu_bytes"]
    assert [cell.strip() for cell in rows["total"] if cell] == ["-", f"{out['cpu_total_bytes'] / 2**30:.2f} GiB"]


@pytest.mark.parametrize("conv", ["gcn", "sage"])
@pytest.mark.parametrize("parts, sar_gib", [(32, 95), (64, 47), (128, 25)])
def test_papers100m_fits_sars_memory_per_machine_with_the_default_window(conv, parts, sar_gib):
    """ogbn-papers100M on a random partition (docs/scale.md): with the default halo window every rank's predicted
    peak, on a GPU and on a CPU, is at most SAR's published memory per machine; with the whole halo it is not."""
    spec = GraphSpec(n=111_000_000, nnz=3_311_000_000, features=128, parts=parts, classes=172)
    windowed = predict_graph(spec, ModelConfig(layers=3, hidden=(256,), conv=conv))
    whole = predict_graph(spec, ModelConfig(layers=3, hidden=(256,), conv=conv, halo_window=None))
    for device in ("gpu_bytes", "cpu_bytes"):
        assert windowed[device]["total"] <= sar_gib * 2**30
        assert whole[device]["total"] > 3 * sar_gib * 2**30


def test_predict_shows_every_window_so_the_user_picks_the_one_that_fits():
    """``stats --predict`` lists the peak for the whole halo and several windows: the default's row is the main
    prediction, a smaller window never needs more, and the whole halo's row is a prediction with window None."""
    from distgcn.cli.stats_tables import prediction_table

    spec = GraphSpec(n=2_000_000, nnz=40_000_000, features=64, parts=64, classes=10)
    model = ModelConfig(layers=3, hidden=(128,))
    out = predict_graph(spec, model)
    rows = out["by_halo_window"]
    assert list(rows) == ["all", "16", "8", "4", "2"]
    assert rows["4"]["gpu_bytes"] == out["gpu_bytes"]["total"] and rows["4"]["cpu_bytes"] == out["cpu_bytes"]["total"]
    whole = predict_graph(spec, ModelConfig(layers=3, hidden=(128,), halo_window=None))
    assert rows["all"]["gpu_bytes"] == whole["gpu_bytes"]["total"]
    totals = [rows[k]["gpu_bytes"] for k in rows]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    table = prediction_table(out)
    assert "by --halo-window" in table and f"{rows['2']['gpu_bytes'] / 2**20:.1f} MiB" in table  # under 1 GiB
