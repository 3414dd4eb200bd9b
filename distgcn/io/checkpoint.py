"""Training snapshots: written atomically, verified on read, tied to one graph, partition and model.

A checkpoint file is ``MAGIC``, the SHA-256 of the payload (64 hex digits),
then the payload: a ``torch.save`` of plain tensors, dicts, lists, numbers and
strings, read back with ``torch.load(weights_only=True)`` so that opening a
checkpoint can never run code. Files are written through
:mod:`distgcn.io.safe_io` (a temporary name in the same directory, fsynced and
renamed), so a job killed mid-write leaves the previous checkpoints intact;
the newest that verifies is the one resumed.
"""

from __future__ import annotations

import hashlib
import io
import random
import re
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from distgcn.errors import InputError
from distgcn.io.safe_io import (
    CHECKPOINT,
    is_output,
    lock_directory,
    prepare_output_dir,
    remove_output,
    write_file,
)
from distgcn.io.schema import validate_checkpoint

MAGIC = b"DISTGCN-CHECKPOINT-1\n"
DIGEST_LEN = 64
NAME = re.compile(r"^checkpoint-(\d{8})\.pt$")


def checkpoint_path(directory: Path, epoch: int) -> Path:
    return directory / f"checkpoint-{epoch:08d}.pt"


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must match to be resumed: the same graph, partition and model."""

    graph_fingerprint: str
    partition_id: str
    model_config: str
    """A canonical description of everything that shapes the model and its updates (not the epoch count)."""

    def mismatch(self, other: dict, directory: Path) -> str | None:
        """Why a checkpoint in ``directory`` with identity ``other`` cannot be resumed here, and the two ways
        out, or None."""
        for key, what in (("graph_fingerprint", "graph"), ("partition_id", "partition"),
                          ("model_config", "model configuration")):
            if other.get(key) != getattr(self, key):
                return (f"it was written for another {what} ({key} {other.get(key)!r}, "
                        f"this run has {getattr(self, key)!r}); to train this run afresh, give another "
                        f"--checkpoint-dir than {directory}; to continue the checkpointed run, --resume with the "
                        f"{what} that wrote it")
        return None


class CheckpointError(InputError):
    """A checkpoint that cannot be used (corrupt, truncated, or not a checkpoint)."""


def save_checkpoint(directory: Path, epoch: int, state: dict, identity: RunIdentity, keep: int) -> Path:
    """Write ``state`` as the checkpoint of ``epoch`` and keep only the newest ``keep`` checkpoints.

    Pruning deletes only files that are distgcn checkpoints by content.
    """
    buffer = io.BytesIO()
    torch.save({"epoch": epoch, "identity": asdict(identity), "state": state}, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    final = write_file(checkpoint_path(directory, epoch), CHECKPOINT, lambda fh: fh.write(MAGIC + digest + payload))
    for old in [path for path in list_checkpoints(directory) if is_output(path, CHECKPOINT)][:-keep]:
        remove_output(old, CHECKPOINT)
    return final


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoint files in ``directory``, oldest epoch first."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if NAME.match(p.name) and p.is_file() and not p.is_symlink()]
    return sorted(found)  # one directory, names of exactly 8 digits: name order is epoch order


def read_checkpoint(path: Path) -> dict:
    """The verified contents of one checkpoint file; CheckpointError if it is damaged."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint ({exc.strerror})", path=path) from None
    header = len(MAGIC) + DIGEST_LEN
    if len(data) < header or not data.startswith(MAGIC):
        raise CheckpointError("not a distgcn checkpoint (bad header)", path=path)
    digest, payload = data[len(MAGIC):header].decode("ascii", "replace"), data[header:]
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CheckpointError("checkpoint is truncated or corrupt (checksum mismatch)", path=path)
    try:
        contents = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable payload is a damaged checkpoint
        raise CheckpointError(f"checkpoint payload unreadable ({type(exc).__name__})", path=path) from None
    try:
        return validate_checkpoint(contents, path)
    except InputError as exc:  # sound bytes, wrong contents: as unusable as a damaged file
        raise CheckpointError(str(exc)) from None


def newest_checkpoint(directory: Path, identity: RunIdentity,
                      warn: Callable[[str], None] | None = None) -> dict | None:
    """The newest checkpoint in ``directory`` that verifies, or None if there is none.

    A damaged file is skipped with a warning (the previous one is used); if
    every file is damaged, that is an error. A sound checkpoint of another
    graph, partition or model is refused outright, since resuming from it
    would silently train something else.
    """
    warn = warn or (lambda message: warnings.warn(message, stacklevel=2))
    candidates = list_checkpoints(directory)
    for path in reversed(candidates):
        try:
            contents = read_checkpoint(path)
        except CheckpointError as exc:
            warn(f"warning: skipping {exc}; trying the previous checkpoint")
            continue
        reason = identity.mismatch(contents["identity"], directory)
        if reason is not None:
            raise InputError(f"refusing to resume: {reason}", path=path)
        return contents
    if candidates:  # starting afresh would bury the damaged files under new ones: let the user decide
        raise InputError(f"none of the {len(candidates)} checkpoints is sound; move them away to start afresh",
                         path=directory)
    return None


def checkpoint_dir(path: str | Path, *, resume: bool = False, owner: bool = True) -> Path:
    """Create (if needed) and check the checkpoint directory; the ``owner`` (rank 0) locks it for this run.

    Two runs never share a directory unknowingly: a second run while one
    holds the lock is refused, and so is a fresh run (no ``resume``) in a
    directory that already holds checkpoints.
    """
    directory = prepare_output_dir(Path(path), what="checkpoint directory")
    if owner:
        lock_directory(directory, "checkpoint directory")
        if not resume and any(is_output(found, CHECKPOINT) for found in list_checkpoints(directory)):
            raise InputError("checkpoint directory already holds checkpoints of a run: pass --resume to continue "
                             "it, or choose another directory", path=directory)
    return directory


def check_optimizer_state(saved: dict, optimizer: torch.optim.Optimizer) -> None:
    """Refuse (ValueError) a checkpoint's optimizer state that does not fit ``optimizer``'s parameters.

    torch's ``Optimizer.load_state_dict`` checks only the number of parameters
    per group; moments of another shape (Adam's ``exp_avg``, SGD's momentum)
    would be loaded and fail inside the first optimizer step, far from the file.
    Every tensor of a parameter's state must have the parameter's shape, except
    its step count, a single number.
    """
    groups, state = saved.get("param_groups"), saved.get("state")
    if not isinstance(groups, list) or not isinstance(state, dict):
        raise ValueError("optimizer state without param_groups and state")
    saved_counts = [len(group.get("params", ())) if isinstance(group, dict) else None for group in groups]
    counts = [len(group["params"]) for group in optimizer.param_groups]
    if saved_counts != counts:
        raise ValueError(f"optimizer state holds {saved_counts} parameters per group, this model {counts}")
    params = {key: param for group, current in zip(groups, optimizer.param_groups)
              for key, param in zip(group["params"], current["params"])}
    for key, entries in state.items():
        if key not in params:
            raise ValueError(f"optimizer state of parameter {key!r}, which its param_groups do not list")
        if not isinstance(entries, dict):
            raise ValueError(f"optimizer state of parameter {key!r} is not a dict")
        shape = tuple(params[key].shape)
        for name, value in entries.items():
            if not isinstance(value, torch.Tensor):
                continue
            if name == "step":
                if value.numel() != 1:
                    raise ValueError(f"optimizer state step of parameter {key!r} has {value.numel()} entries, "
                                     "expected one number")
            elif tuple(value.shape) != shape:
                raise ValueError(f"optimizer state {name} of parameter {key!r} has shape {tuple(value.shape)}, "
                                 f"the parameter {shape}")


def capture_rng_states() -> dict:
    """The global generators of torch, numpy and Python, as weights-only-loadable values."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
    }


def restore_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    n = states["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["position"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = states["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
