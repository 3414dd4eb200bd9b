"""Model selection (``--keep-best``, ``--patience``, ``--lr-schedule``) against a single-process loop written
apart from the trainer (tests/oracles/selection_reference.py): the rate of every epoch, the best epoch, where
training stops and the weights kept; equal on 1 and 2 ranks, and resumed bit for bit from a checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import dataset, distgcn_in_process, run_distgcn_in_process
from selection_reference import reference_select

from distgcn.config import TrainConfig
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.training.selection import Selection

pytestmark = pytest.mark.unit

SEED = 2
CASES = {
    "step": (["--lr-schedule", "step", "--lr-step", "7", "--lr-gamma", "0.5", "--keep-best", "val_acc"],
             dict(schedule="step", lr_step=7, lr_gamma=0.5, metric="val_acc")),
    "cosine": (["--lr-schedule", "cosine", "--lr-min", "0.001", "--keep-best", "val_acc", "--patience", "6"],
               dict(schedule="cosine", lr_min=0.001, metric="val_acc", patience=6)),
    # the default watched metric (val_loss) turns at a high rate without weight decay
    "plateau": (["--lr-schedule", "plateau", "--lr-patience", "1", "--lr-gamma", "0.5", "--patience", "8",
                 "--lr", "0.2", "--weight-decay", "0"],
                dict(schedule="plateau", lr_patience=1, lr_gamma=0.5, metric="val_loss", patience=8, lr=0.2,
                     weight_decay=0.0)),
}
"""Each case: the flags, and the oracle's settings (each stops early or keeps an epoch before the last)."""
EPOCHS = 45


def cora_run(tmp_path, flags: list[str], ranks: int, name: str = "run", extra: list[str] = ()) -> tuple[list, list]:
    """Train on Cora in float64; the metrics records and the saved weights."""
    metrics, weights = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.npz"
    assert run_distgcn_in_process(
        ["train", "--graph", str(dataset("cora_planetoid")), "--partition", "random", "--dtype", "float64",
         "--epochs", str(EPOCHS), "--seed", str(SEED), "--hidden", "8", "--lr", "0.02", *flags,
         "--metrics", str(metrics), "--save-weights", str(weights), "--quiet", *extra], ranks) == [0] * ranks
    with np.load(weights) as npz:
        saved = [npz[f"arr_{i}"] for i in range(sum(name.startswith("arr_") for name in npz.files))]
    return [json.loads(line) for line in metrics.read_text().splitlines()], saved


@pytest.fixture(scope="module")
def cora():
    graph, a_hat = prepare_graph(GraphOptions(spec=str(dataset("cora_planetoid")), seed=SEED))
    return graph, a_hat


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_decisions_equal_the_single_process_loop(tmp_path, cora, case, ranks):
    flags, oracle_settings = CASES[case]
    records, saved = cora_run(tmp_path, flags, ranks)
    graph, a_hat = cora
    want = reference_select(a_hat, graph.features, graph.labels, graph.train_mask, graph.val_mask, hidden=8,
                            epochs=EPOCHS, seed=SEED, **{"lr": 0.02, **oracle_settings})
    assert [r["epoch"] for r in records] == list(range(1, want.last_epoch + 1))
    np.testing.assert_allclose([r["lr"] for r in records], want.lrs, rtol=1e-12)
    np.testing.assert_allclose([r["val_loss"] for r in records], want.val_loss, rtol=1e-9)
    assert [r["val_acc"] for r in records] == pytest.approx(want.val_acc, abs=1e-12)
    assert [r["best_epoch"] for r in records] == want.best_epochs
    if "patience" in oracle_settings:
        assert want.last_epoch < EPOCHS, "the case must stop early to test the stop"
    if case != "plateau":  # keep-best: the saved weights are the best epoch's
        assert want.best_epochs[-1] < want.last_epoch, "the case must keep an epoch before the last"
        for got, ref in zip(saved, want.best_weights, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())
    if case == "plateau":
        assert len(set(want.lrs)) > 2, "the case must decay the rate more than once"


def test_a_resumed_run_takes_the_same_decisions_bit_for_bit(tmp_path):
    """Checkpoints every 5 epochs; the run resumed from epoch 15 equals the run that never stopped."""
    flags = CASES["plateau"][0] + ["--keep-best", "val_loss"]
    whole, whole_weights = cora_run(tmp_path, flags, 2, "whole")
    assert len(whole) < EPOCHS
    checkpoints = tmp_path / "ck"
    cora_run(tmp_path, flags, 2, "first", ["--checkpoint-dir", str(checkpoints), "--checkpoint-every", "5",
                                           "--checkpoint-keep", "100"])
    for late in sorted(checkpoints.glob("checkpoint-*.pt")):
        if int(late.stem.split("-")[1]) > 15:
            late.unlink()
    resumed, resumed_weights = cora_run(tmp_path, flags, 2, "resumed",
                                        ["--checkpoint-dir", str(checkpoints), "--resume", "--restart-metrics"])
    timing = ("_s", "comm_share", "slowest_rank")
    drop = lambda r: {k: v for k, v in r.items() if not k.endswith(timing) and k not in ("run", "resumed_after")}  # noqa: E731,E501
    assert [drop(r) for r in resumed] == [drop(r) for r in whole[15:]]
    for a, b in zip(resumed_weights, whole_weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_resuming_an_early_stopped_run_trains_nothing(tmp_path):
    flags = CASES["cosine"][0]
    checkpoints = tmp_path / "ck"
    records, kept = cora_run(tmp_path, flags, 1, "first", ["--checkpoint-dir", str(checkpoints),
                                                           "--checkpoint-every", "100"])
    assert len(records) < EPOCHS and (checkpoints / f"checkpoint-{len(records):08d}.pt").is_file()
    shutil.copy(tmp_path / "first.jsonl", tmp_path / "again.jsonl")
    again, again_kept = cora_run(tmp_path, flags, 1, "again", ["--checkpoint-dir", str(checkpoints), "--resume"])
    assert again == records
    done = distgcn_in_process(["train", "--graph", str(dataset("cora_planetoid")), "--partition", "random",
                               "--dtype", "float64", "--epochs", str(EPOCHS), "--seed", str(SEED), "--hidden", "8",
                               "--lr", "0.02", *flags, "--checkpoint-dir", str(checkpoints), "--resume"])
    assert f"where early stopping (--patience 6) ended training; nothing left to train" in done.stdout, done.stdout
    for a, b in zip(again_kept, kept, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_summary_names_the_kept_epoch_and_the_stop(tmp_path):
    done = distgcn_in_process(["train", "--graph", str(dataset("cora_planetoid")), "--epochs", str(EPOCHS),
                               "--seed", str(SEED), "--lr", "0.02", *CASES["cosine"][0]])
    assert done.returncode == 0, done.stderr
    records_best = [line for line in done.stdout.splitlines() if line.startswith("kept the weights of epoch ")]
    assert len(records_best) == 1 and "the best val_acc" in records_best[0]
    assert "stopped early after epoch" in done.stdout + done.stderr
    assert "nothing left to train" not in done.stdout


@pytest.mark.parametrize(("flags", "message"), [
    (["--lr-schedule", "step"], "--lr-schedule step needs --lr-step N"),
    (["--lr-step", "3"], "--lr-step applies to --lr-schedule step"),
    (["--lr-schedule", "cosine", "--lr-min", "0.5"], "--lr-min 0.5 is above --lr 0.01"),
    (["--lr-patience", "3"], "--lr-patience applies to --lr-schedule plateau"),
    (["--keep-best", "test_acc"], "argument --keep-best: invalid choice"),
])
def test_schedule_settings_that_do_not_fit_are_refused_naming_the_flags(tmp_path, flags, message):
    done = distgcn_in_process(["train", "--graph", "synthetic:sbm,n=60,blocks=3,seed=1", "--epochs", "2", *flags])
    assert done.returncode == 2 and message in done.stderr.strip().splitlines()[-1], done.stderr


def test_a_graph_without_validation_vertices_cannot_be_watched(tmp_path, directed_graph):
    import distgcn
    from distgcn.errors import InputError

    loaded = distgcn.load_graph(directed_graph, features=8, classes=3)
    loaded.train_mask |= loaded.val_mask
    loaded.val_mask[:] = False
    with pytest.raises(InputError, match="keep_best watches val_acc, but the graph has no validation"):
        distgcn.train(loaded, epochs=2, keep_best="val_acc", partition_model="random")


def test_the_plateau_rule_against_torch_on_a_made_up_sequence():
    """Unit check of the decay rule alone, on values chosen to cross the patience several times."""
    import torch

    values = [5, 4, 4, 4, 4, 3, 3.5, 3.5, 3.5, 2, 2, 2, 2, 2, 2]
    config = TrainConfig(lr_schedule="plateau", lr_patience=2, lr_gamma=0.5, lr_min=0.002, lr=0.01)
    selection = Selection(config)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.01)
    torch_rule = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=2, threshold=0,
                                                            min_lr=0.002)
    ours, theirs = [], []
    for epoch, value in enumerate(values, 1):
        ours.append(selection.learning_rate(epoch))
        theirs.append(optimizer.param_groups[0]["lr"])
        selection.observe({"epoch": epoch, "val_loss": value})
        torch_rule.step(value)
    assert ours == pytest.approx(theirs, rel=1e-15) and min(ours) == 0.002
