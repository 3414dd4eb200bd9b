"""``distgcn predict`` and the API's ``load_weights``/``predict``: saved weights give the training process's own
outputs (bit for bit on the same shards and ranks, P = 1..3), on any other P up to rounding, and a weights file
that does not fit is a one-line error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import distgcn_in_process, run_distgcn_in_process

import distgcn
from distgcn.comm.transport.inprocess import run_ranks
from distgcn.errors import InputError

pytestmark = pytest.mark.unit

SPEC = "synthetic:sbm,n=240,classes=4,features=12,avg_degree=6,seed=5"
KEYS = ("ids", "predictions", "logits", "embeddings", "layer_1", "layer_2", "layer_3")


def exported(path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {key: npz[key] for key in npz.files}


def train_and_export(tmp_path, partdir, ranks: int, **settings) -> dict[str, np.ndarray]:
    """Train through the API on ``ranks`` in-process ranks, saving the weights, and export what the training
    process itself predicts (every layer)."""
    out = tmp_path / f"trained-{ranks}.npz"
    threads = torch.get_num_threads()
    try:
        run_ranks(ranks, lambda transport: distgcn.train(
            str(partdir), transport=transport, threads=1, save_weights=str(tmp_path / f"w{ranks}.npz"),
            **settings).export(out, all_layers=True))
    finally:
        torch.set_num_threads(threads)
    return exported(out)


@pytest.mark.parametrize("conv", ["gcn", "sage", "gat"])
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_predict_equals_the_training_process_bit_for_bit(tmp_path, conv, ranks):
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, ranks, model="random").write(partdir)
    settings = dict(epochs=12, layers=3, hidden=8, conv=conv, heads=2, keep_best="val_acc", seed=4)
    trained = train_and_export(tmp_path, partdir, ranks, **settings)
    weights = tmp_path / f"w{ranks}.npz"
    assert run_distgcn_in_process(["predict", str(partdir), "--weights", str(weights), "--out",
                                   str(tmp_path / "p.npz"), "--all-layers", "--threads", "1", "--quiet"],
                                  ranks) == [0] * ranks
    predicted = exported(tmp_path / "p.npz")
    for key in KEYS:
        np.testing.assert_array_equal(predicted[key], trained[key], err_msg=key)
    record = distgcn.load_weights(weights).record
    assert record["conv"] == conv and record["kept"] == "best val_acc" and record["epoch"] <= 12
    assert record["widths"] == [12, 8, 8, 4] and record["heads"] == 2


def test_predict_on_other_ranks_and_from_the_graph_agrees_up_to_rounding(tmp_path):
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, 2, model="random").write(partdir)
    trained = train_and_export(tmp_path, partdir, 2, epochs=8, dtype="float64", seed=1)
    weights = str(tmp_path / "w2.npz")
    for ranks, source in ((1, SPEC), (3, SPEC)):
        out = tmp_path / f"p{ranks}.npz"
        assert run_distgcn_in_process(["predict", source, "--weights", weights, "--out", str(out), "--partition",
                                       "random", "--threads", "1", "--quiet"], ranks) == [0] * ranks
        got = exported(out)
        np.testing.assert_array_equal(got["ids"], trained["ids"])
        np.testing.assert_allclose(got["logits"], trained["logits"], rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(got["predictions"], trained["predictions"])


def test_the_api_predicts_from_loaded_weights(tmp_path):
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, 1, model="random").write(partdir)
    result = distgcn.train(str(partdir), epochs=5, threads=1, save_weights=str(tmp_path / "w.npz"))
    saved = distgcn.load_weights(tmp_path / "w.npz")
    again = distgcn.predict(str(partdir), saved, threads=1)
    np.testing.assert_array_equal(again.predict().values, result.predict().values)
    np.testing.assert_array_equal(again.embeddings(1).values, result.embeddings(1).values)
    from_graph = distgcn.predict(distgcn.load_graph(SPEC), tmp_path / "w.npz", threads=1, partition_model="random")
    np.testing.assert_allclose(from_graph.embeddings(2).values, result.embeddings(2).values, rtol=1e-5, atol=1e-6)


def test_per_rank_files_hold_each_ranks_rows(tmp_path):
    partdir = tmp_path / "part"
    distgcn.partition(SPEC, 2, model="random").write(partdir)
    trained = train_and_export(tmp_path, partdir, 2, epochs=3)
    assert run_distgcn_in_process(["predict", str(partdir), "--weights", str(tmp_path / "w2.npz"), "--out",
                                   str(tmp_path / "ranks"), "--per-rank", "--layer", "2", "--quiet"], 2) == [0, 0]
    parts = np.load(partdir / "parts.npy")
    for rank in range(2):
        piece = exported(tmp_path / "ranks" / f"rank-{rank:05d}.npz")
        np.testing.assert_array_equal(piece["ids"], np.flatnonzero(parts == rank))
        np.testing.assert_array_equal(piece["logits"], trained["logits"][piece["ids"]])
        assert int(piece["embedding_layer"]) == 2


def weights_file(tmp_path, **settings) -> str:
    path = tmp_path / "w.npz"
    distgcn.train(SPEC, epochs=2, threads=1, save_weights=str(path), partition_model="random", **settings)
    return str(path)


def rewritten(path: str, change) -> str:
    """The weights file with its arrays changed by ``change(dict)``, saved as a distgcn weights file."""
    from pathlib import Path

    from distgcn.io.safe_io import WEIGHTS, write_npz

    arrays = exported(path)
    change(arrays)
    out = Path(path).with_name("changed.npz")
    write_npz(out, WEIGHTS, **arrays)
    return str(out)


def record_with(**fields):
    def change(arrays):
        record = json.loads(str(arrays["model"]))
        record.update(fields)
        arrays["model"] = np.array(json.dumps(record))
    return change


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: rewritten(p, lambda a: a.pop("model")), "records no model"),
    (lambda p: rewritten(p, record_with(format=99)), "model record format 99"),
    (lambda p: rewritten(p, record_with(conv="mlp")), "record's conv 'mlp'"),
    (lambda p: rewritten(p, record_with(widths=[12, 9, 4])), "do not fit the recorded gcn model of widths [12, 9, 4]"),
    (lambda p: rewritten(p, lambda a: a.__setitem__("arr_0", a["arr_0"][:5])), "do not fit"),
    (lambda p: rewritten(p, record_with(widths=[7, 16, 4])), "the graph has 12 feature columns"),
    (lambda p: p + ".missing", "no such file"),
])
def test_a_weights_file_that_does_not_fit_is_one_line_naming_it(tmp_path, make, message):
    path = make(weights_file(tmp_path))
    done = distgcn_in_process(["predict", SPEC, "--weights", path, "--out", str(tmp_path / "p.npz"), "--partition",
                               "random"], ranks=2)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith((f"distgcn: error: {path}: ", f"distgcn: error: rank 0: {path}: ")), done.stderr
    assert message in last and done.stderr.count("distgcn: error") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "p.npz").exists()


def test_the_api_refuses_a_weights_file_without_a_model(tmp_path):
    path = rewritten(weights_file(tmp_path), lambda a: a.pop("model"))
    with pytest.raises(InputError, match="records no model"):
        distgcn.load_weights(path)


def test_a_layer_beyond_the_model_is_refused_naming_the_flag(tmp_path):
    path = weights_file(tmp_path)
    done = distgcn_in_process(["predict", SPEC, "--weights", path, "--out", str(tmp_path / "p.npz"), "--layer", "3",
                               "--partition", "random"])
    assert done.returncode == 2 and "--layer 3: the model has 2 layers" in done.stderr, done.stderr
