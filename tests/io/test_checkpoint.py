"""Checkpoints: a stopped and resumed run ends exactly where an uninterrupted one does.

Also: damaged checkpoints are skipped with a warning, checkpoints of another
graph, partition or model are refused, and a diverging run stops at once
without touching the last good checkpoint.

Runs of ``distgcn train`` go through the command line's pipeline on in-process
ranks (threads); one stop-and-resume case runs under a real mpiexec, where the
failing rank takes the processes down (its uninterrupted reference on threads). The global torch, numpy and Python
generators that a checkpoint captures are shared by the rank threads; nothing
in training draws from them (initialization, dropout and sampling use their
own seeded generators and counter-based hashes), so sharing them changes no
result: the bitwise comparisons below would show it if it did.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_distgcn, run_distgcn_in_process

from distgcn.errors import InputError
from distgcn.io.checkpoint import (
    MAGIC,
    CheckpointError,
    RunIdentity,
    list_checkpoints,
    newest_checkpoint,
    read_checkpoint,
    save_checkpoint,
)

GRAPH = ["--graph", "synthetic:sbm,n=400,classes=3,features=8,seed=5"]
EPOCHS = 7


def train(tmp_path: Path, name: str, extra: list[str], ranks: int = 2, dtype: str = "float64",
          env: dict | None = None,
          capsys: pytest.CaptureFixture[str] | None = None) -> tuple[types.SimpleNamespace, Path]:
    """``distgcn train`` into ``tmp_path/name``: the exit status and output (as a process's), and that directory.

    Given the test's ``capsys``, the ranks are threads of this process (``env``
    is set in it for the run; an aborted job gives the code it aborted with).
    Without it, the job runs under a real mpiexec.
    """
    out = tmp_path / name
    out.mkdir(exist_ok=True)
    args = ["train", *GRAPH, "--partition", "contiguous", "--epochs", str(EPOCHS), "--dtype", dtype,
            "--hidden", "6", "--seed", "2", "--metrics", str(out / "m.jsonl"),
            "--save-weights", str(out / "w.npz"), "--quiet", *extra]
    if capsys is None:
        proc = run_distgcn(args, ranks=ranks, env=env, timeout=120)
        return types.SimpleNamespace(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr), out
    from distgcn.comm.transport.inprocess import RankAborted

    with pytest.MonkeyPatch.context() as patch:
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        try:
            codes = run_distgcn_in_process(args, ranks)
            assert len(set(codes)) == 1, codes  # every rank ends the same way
            returncode = codes[0]
        except RankAborted as aborted:
            returncode = aborted.code
    captured = capsys.readouterr()
    return types.SimpleNamespace(returncode=returncode, stdout=captured.out, stderr=captured.err), out


def epoch_records(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if "epoch" in r]


def learning_curve(path: Path) -> list[tuple]:
    """The per-epoch values that must not depend on the interruption (times naturally do)."""
    keys = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "halo_rows", "messages")
    return [tuple(r[k] for k in keys) for r in epoch_records(path)]


def weights(path: Path) -> list[np.ndarray]:
    with np.load(path) as npz:
        return [npz[f"arr_{i}"] for i in range(sum(name.startswith("arr_") for name in npz.files))]


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_stopped_and_resumed_run_equals_uninterrupted_bitwise(tmp_path, capsys, dtype, ranks):
    check_stopped_and_resumed(tmp_path, dtype, ranks, capsys)


@pytest.mark.unit
@pytest.mark.parametrize("model", [["--conv", "sage"], ["--conv", "gat", "--heads", "3", "--output-heads", "2"]],
                         ids=["sage", "gat"])
def test_other_layer_types_resume_bitwise(tmp_path, capsys, model):
    check_stopped_and_resumed(tmp_path, "float32", 3, capsys, model)


def test_stopped_and_resumed_run_equals_uninterrupted_bitwise_under_mpiexec(tmp_path, capsys):
    """The stopped and the resumed job are real MPI processes; the uninterrupted reference runs on in-process
    ranks, which add the ranks' sums in the same order, so its bits are those of an mpiexec run."""
    check_stopped_and_resumed(tmp_path, "float32", 2, None, reference_capsys=capsys)


def check_stopped_and_resumed(tmp_path: Path, dtype: str, ranks: int,
                              capsys: pytest.CaptureFixture[str] | None, model: list[str] | None = None,
                              reference_capsys: pytest.CaptureFixture[str] | None = None) -> None:
    """Rank 1 fails in epoch 6 of a run checkpointing every 2 epochs; resumed, it ends as an uninterrupted run.

    ``capsys``: every run on in-process ranks, else under mpiexec; ``reference_capsys``: the uninterrupted
    run on in-process ranks even so.
    """
    model = model or []
    full, full_out = train(tmp_path, "full", model, ranks=ranks, dtype=dtype, capsys=capsys or reference_capsys)
    assert full.returncode == 0, full.stderr

    ckpt = tmp_path / "ckpt"
    stopped, out = train(tmp_path, "resumed", [*model, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2"],
                         ranks=ranks, dtype=dtype, env={"DISTGCN_FAIL_AT": "1:6"}, capsys=capsys)
    assert stopped.returncode != 0
    assert [p.name for p in list_checkpoints(ckpt)] == [f"checkpoint-0000000{e}.pt" for e in (2, 4)]
    resumed, _ = train(tmp_path, "resumed", [*model, "--checkpoint-dir", str(ckpt), "--checkpoint-every", "2",
                                             "--resume"], ranks=ranks, dtype=dtype, capsys=capsys)
    assert resumed.returncode == 0, resumed.stderr

    # Same order of operations on the same partition: equal to the last bit, in float32 too.
    assert learning_curve(out / "m.jsonl") == learning_curve(full_out / "m.jsonl")
    for got, want in zip(weights(out / "w.npz"), weights(full_out / "w.npz"), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
def test_resume_without_checkpoint_starts_afresh_and_past_the_end_does_nothing(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    first, out = train(tmp_path, "a", ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "3", "--resume"],
                       ranks=1, capsys=capsys)
    assert first.returncode == 0, first.stderr
    assert len(epoch_records(out / "m.jsonl")) == EPOCHS
    assert [p.name for p in list_checkpoints(ckpt)][-1] == f"checkpoint-{EPOCHS:08d}.pt"
    again, _ = train(tmp_path, "b", ["--checkpoint-dir", str(ckpt), "--resume"], ranks=1, capsys=capsys)
    assert again.returncode == 0, again.stderr
    assert "nothing left to train" in again.stdout


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
def test_checkpoint_of_another_model_or_partition_is_refused(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    proc, _ = train(tmp_path, "a", ["--checkpoint-dir", str(ckpt), "--checkpoint-every", "7"], capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    for extra, ranks, what in ((["--lr", "0.05"], 2, "model configuration"), ([], 3, "partition"),
                               (["--conv", "sage"], 2, "model configuration")):
        refused, _ = train(tmp_path, "b", ["--checkpoint-dir", str(ckpt), "--resume", *extra], ranks=ranks,
                            capsys=capsys)
        assert refused.returncode == 2
        errors = [line for line in refused.stderr.splitlines() if line.startswith("distgcn: error:")]
        assert len(errors) == 1 and what in errors[0] and "checkpoint-00000007.pt" in errors[0], refused.stderr
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before  # nothing the user had is touched


IDENTITY = RunIdentity("graph-a", "partition-a", '{"widths": [4, 2]}')


def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    for epoch in (1, 2, 3):
        save_checkpoint(tmp_path, epoch, {"w": torch.full((3,), float(epoch))}, IDENTITY, keep=3)
    newest = tmp_path / "checkpoint-00000003.pt"
    newest.write_bytes(newest.read_bytes()[:-10])  # truncated, as by a full disk
    middle = tmp_path / "checkpoint-00000002.pt"
    data = bytearray(middle.read_bytes())
    data[-50] ^= 0xFF  # one flipped byte
    middle.write_bytes(bytes(data))
    warnings: list[str] = []
    contents = newest_checkpoint(tmp_path, IDENTITY, warnings.append)
    assert contents is not None and contents["epoch"] == 1
    assert torch.equal(contents["state"]["w"], torch.full((3,), 1.0))
    assert len(warnings) == 2 and all("checksum mismatch" in w for w in warnings)
    (tmp_path / "checkpoint-00000001.pt").write_bytes(b"")
    with pytest.raises(InputError) as info:
        newest_checkpoint(tmp_path, IDENTITY, warnings.append)
    assert str(info.value) == f"{tmp_path}: none of the 3 checkpoints is sound; move them away to start afresh"


def test_keep_prunes_oldest_and_leaves_no_temporary_files(tmp_path):
    for epoch in range(1, 6):
        save_checkpoint(tmp_path, epoch, {"epoch": epoch}, IDENTITY, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-00000004.pt", "checkpoint-00000005.pt"]


def test_foreign_graph_is_named(tmp_path):
    save_checkpoint(tmp_path, 1, {}, IDENTITY, keep=1)
    other = RunIdentity("graph-b", "partition-a", IDENTITY.model_config)
    with pytest.raises(InputError, match="another graph"):
        newest_checkpoint(tmp_path, other)


def test_checkpoint_payload_cannot_run_code(tmp_path):
    """A torch.save payload with a valid checksum whose unpickling would call open() is refused, and nothing runs."""
    import hashlib
    import io

    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    buffer = io.BytesIO()
    torch.save({"epoch": 1, "identity": {}, "state": Exploit()}, buffer)
    payload = buffer.getvalue()
    path = tmp_path / "checkpoint-00000001.pt"
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert str(info.value) == f"{path}: checkpoint payload unreadable (UnpicklingError)" and not marker.exists()


def test_a_file_at_a_checkpoints_name_that_distgcn_did_not_write_is_never_replaced(tmp_path):
    foreign = tmp_path / "checkpoint-00000002.pt"
    foreign.write_bytes(b"the user's own file")
    with pytest.raises(InputError) as info:
        save_checkpoint(tmp_path, 2, {}, IDENTITY, keep=1)
    assert str(info.value) == (f"{foreign}: exists and is not a distgcn checkpoint; distgcn never replaces what it "
                               "did not write: move it away or choose another name")
    assert foreign.read_bytes() == b"the user's own file"


def test_symlink_at_checkpoint_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / f".checkpoint-00000001.pt.tmp-{os.getpid()}").symlink_to(victim)  # planted at our temporary name
    save_checkpoint(ckpt, 1, {}, IDENTITY, keep=1)
    assert victim.read_text() == "precious"
    assert read_checkpoint(ckpt / "checkpoint-00000001.pt")["epoch"] == 1


@pytest.mark.unit  # in-process ranks: the helper's mpiexec branch is not taken (tests/conftest.py: tiers)
def test_diverging_run_stops_at_once_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    # SGD with an absurd step overflows float32 within a few epochs.
    proc, out = train(tmp_path, "nan", ["--optimizer", "sgd", "--lr", "1e30", "--checkpoint-dir", str(ckpt),
                                        "--checkpoint-every", "1"], dtype="float32",
                      capsys=capsys)
    assert proc.returncode == 3, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("distgcn: error:")]
    assert len(errors) == 1 and "diverged" in errors[0], proc.stderr
    records = epoch_records(out / "m.jsonl")
    bad_epoch = int(errors[0].split(" at epoch ")[1].split(":")[0])
    assert len(records) == bad_epoch - 1 and all(np.isfinite(r["loss"]) for r in records)
    assert bad_epoch >= 2  # epoch 1 starts from finite Glorot weights
    kept = list_checkpoints(ckpt)  # the last checkpoint is the last finite epoch, and it verifies
    assert kept[-1].name == f"checkpoint-{bad_epoch - 1:08d}.pt"
    assert read_checkpoint(kept[-1])["epoch"] == bad_epoch - 1


def test_file_is_the_magic_line_the_sha256_of_the_payload_and_a_weights_only_payload(tmp_path):
    """The documented format, read here with hashlib and torch.load alone."""
    import hashlib

    path = save_checkpoint(tmp_path, 12, {"w": torch.arange(3.0)}, IDENTITY, keep=1)
    assert path.name == "checkpoint-00000012.pt"
    data = path.read_bytes()
    magic, digest, payload = data[:21], data[21:85], data[85:]
    assert magic == b"DISTGCN-CHECKPOINT-1\n" and digest == hashlib.sha256(payload).hexdigest().encode()
    import io

    contents = torch.load(io.BytesIO(payload), weights_only=True)
    assert contents["epoch"] == 12 and torch.equal(contents["state"]["w"], torch.arange(3.0))
    assert contents["identity"] == {"graph_fingerprint": "graph-a", "partition_id": "partition-a",
                                    "model_config": '{"widths": [4, 2]}'}


@pytest.mark.parametrize(("field", "what", "other"), [
    ("graph_fingerprint", "graph", RunIdentity("graph-b", "partition-a", IDENTITY.model_config)),
    ("partition_id", "partition", RunIdentity("graph-a", "partition-b", IDENTITY.model_config)),
    ("model_config", "model configuration", RunIdentity("graph-a", "partition-a", "{}")),
])
def test_a_checkpoint_of_another_run_is_refused_naming_the_field_both_values_and_the_ways_out(
        tmp_path, field, what, other):
    written = save_checkpoint(tmp_path, 3, {}, IDENTITY, keep=1)
    with pytest.raises(InputError) as info:
        newest_checkpoint(tmp_path, other)
    theirs, ours = getattr(IDENTITY, field), getattr(other, field)
    assert str(info.value) == (
        f"{written}: refusing to resume: it was written for another {what} ({field} {theirs!r}, this run has "
        f"{ours!r}); to train this run afresh, give another --checkpoint-dir than {tmp_path}; to continue the "
        f"checkpointed run, --resume with the {what} that wrote it")
    assert newest_checkpoint(tmp_path, IDENTITY)["epoch"] == 3


def damaged_files(directory: Path) -> dict[str, tuple[bytes | None, str]]:
    """Name -> (bytes, or None for a directory at that name; what read_checkpoint says about it)."""
    import hashlib

    wrong_contents = b'{"epoch": 1}'  # sound bytes, but not what torch.save writes
    return {
        "checkpoint-00000001.pt": (None, "cannot read checkpoint (Is a directory)"),
        "checkpoint-00000002.pt": (MAGIC[:-1], "not a distgcn checkpoint (bad header)"),
        "checkpoint-00000003.pt": (b"X" + MAGIC[1:] + b"0" * 64, "not a distgcn checkpoint (bad header)"),
        "checkpoint-00000004.pt": (MAGIC + hashlib.sha256(b"").hexdigest().encode(),
                                   "checkpoint payload unreadable (EOFError)"),
        "checkpoint-00000005.pt": (MAGIC + "é".encode() * 32 + b"payload",
                                   "checkpoint is truncated or corrupt (checksum mismatch)"),
        "checkpoint-00000006.pt": (MAGIC + hashlib.sha256(wrong_contents).hexdigest().encode() + wrong_contents,
                                   "checkpoint payload unreadable (UnpicklingError)"),
    }


def test_each_kind_of_damage_is_named_with_the_file(tmp_path):
    for name, (data, why) in damaged_files(tmp_path).items():
        path = tmp_path / name
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path)
        assert str(info.value) == f"{path}: {why}"


def test_damaged_files_are_skipped_with_a_warning_each_until_a_sound_one(tmp_path):
    save_checkpoint(tmp_path, 1, {}, IDENTITY, keep=1)
    (tmp_path / "checkpoint-00000002.pt").write_bytes(MAGIC[:-1])
    (tmp_path / "checkpoint-00000003.pt").write_bytes(b"")
    with pytest.warns(UserWarning) as caught:
        assert newest_checkpoint(tmp_path, IDENTITY)["epoch"] == 1
    assert [str(w.message) for w in caught] == [
        f"warning: skipping {tmp_path / name}: not a distgcn checkpoint (bad header); trying the previous checkpoint"
        for name in ("checkpoint-00000003.pt", "checkpoint-00000002.pt")]
    assert newest_checkpoint(tmp_path / "none", IDENTITY) is None


def test_schema_errors_of_sound_bytes_are_checkpoint_errors(tmp_path):
    import hashlib
    import io

    buffer = io.BytesIO()
    torch.save({"epoch": 1}, buffer)  # no identity, no state
    payload = buffer.getvalue()
    path = tmp_path / "checkpoint-00000001.pt"
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert str(info.value).startswith(f"{path}")


def test_a_fresh_run_refuses_a_directory_with_checkpoints_and_a_resumed_one_takes_it(tmp_path):
    from distgcn.io.checkpoint import checkpoint_dir

    directory = tmp_path / "new" / "ckpt"
    assert checkpoint_dir(directory) == directory and directory.is_dir()
    save_checkpoint(directory, 1, {}, IDENTITY, keep=1)
    with pytest.raises(InputError) as info:
        checkpoint_dir(directory)
    assert str(info.value) == (f"{directory}: checkpoint directory already holds checkpoints of a run: pass --resume "
                               "to continue it, or choose another directory")
    assert checkpoint_dir(directory, resume=True) == directory
    assert checkpoint_dir(directory, owner=False) == directory  # other ranks neither lock nor refuse


def test_restored_generators_draw_what_they_drew_after_the_capture(tmp_path):
    import random

    from distgcn.io.checkpoint import capture_rng_states, restore_rng_states

    np.random.standard_normal()  # leaves a cached Gaussian in numpy's legacy state
    random.gauss(0.0, 1.0)  # and in Python's
    save_checkpoint(tmp_path, 1, {"rng": capture_rng_states()}, IDENTITY, keep=1)
    first = (torch.rand(4), np.random.standard_normal(3), [random.gauss(0.0, 1.0) for _ in range(3)])
    states = read_checkpoint(tmp_path / "checkpoint-00000001.pt")["state"]["rng"]
    assert states["numpy"]["keys"].dtype == torch.int64  # MT19937's 624 uint32 words, stored exactly
    restore_rng_states(states)
    again = (torch.rand(4), np.random.standard_normal(3), [random.gauss(0.0, 1.0) for _ in range(3)])
    assert torch.equal(first[0], again[0]) and np.array_equal(first[1], again[1]) and first[2] == again[2]


def test_a_checkpoint_directory_that_is_a_file_or_locked_by_another_run_is_named(tmp_path):
    import fcntl

    from distgcn.io.checkpoint import checkpoint_dir
    from distgcn.io.safe_io import LOCK_NAME

    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(InputError) as info:
        checkpoint_dir(a_file)
    assert str(info.value) == f"{a_file}: checkpoint directory is not a directory"
    held = tmp_path / "held"
    held.mkdir()
    with open(held / LOCK_NAME, "w") as lock:  # another open file description: as another run's lock
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InputError) as info:
            checkpoint_dir(held)
    assert str(info.value) == (f"{held}: the checkpoint directory is in use by another run; wait for it to end or "
                               "choose another directory")


def test_only_regular_files_named_like_checkpoints_are_listed(tmp_path):
    kept = save_checkpoint(tmp_path, 10, {}, IDENTITY, keep=1)
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "checkpoint-00000008.pt").mkdir()
    (tmp_path / "checkpoint-00000009.pt").symlink_to(kept)
    save_checkpoint(tmp_path, 2, {}, IDENTITY, keep=5)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-00000002.pt", "checkpoint-00000010.pt"]


@pytest.mark.parametrize("optimizer", ["adam", "sgd-momentum"])
def test_optimizer_state_of_another_shape_is_refused_before_it_is_loaded(optimizer):
    """torch loads moments of any shape and fails in the first step; check_optimizer_state refuses them first."""
    from distgcn.io.checkpoint import check_optimizer_state

    weight = torch.nn.Parameter(torch.ones(4, 3))
    make = (lambda: torch.optim.Adam([weight], lr=0.1)) if optimizer == "adam" else \
        (lambda: torch.optim.SGD([weight], lr=0.1, momentum=0.9))
    trained = make()
    weight.grad = torch.ones(4, 3)
    trained.step()
    state = trained.state_dict()
    check_optimizer_state(state, make())  # its own state fits
    key = "exp_avg" if optimizer == "adam" else "momentum_buffer"
    state["state"][0][key] = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=rf"optimizer state {key} of parameter 0 has shape \(3, 4\), the parameter "
                                         r"\(4, 3\)"):
        check_optimizer_state(state, make())
    state["state"][0][key] = torch.zeros(4, 3)
    state["param_groups"][0]["params"] = [0, 1]
    with pytest.raises(ValueError, match=r"holds \[2\] parameters per group, this model \[1\]"):
        check_optimizer_state(state, make())
