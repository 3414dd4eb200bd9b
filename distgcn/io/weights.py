"""The weights file (``train --save-weights``): the parameters, and the record of the model they belong to.

The parameters stay the positional arrays ``arr_0`` … ``arr_{2L−1}`` (each layer's weight, then each layer's
bias) that earlier releases wrote; the array ``model`` beside them holds one JSON text, the record
:func:`model_record` makes: the layer type and widths, what else shapes the forward pass, the epoch the weights
are from, how the graph was read and the distgcn version. ``distgcn predict`` rebuilds the model from it alone,
and refuses a file whose arrays do not fit it. The record is JSON in a unicode array, so reading it needs no
pickle.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from distgcn.config import CONVS, DTYPES, FIRST_LAYERS, TrainConfig
from distgcn.errors import InputError
from distgcn.io.npy_files import read_npz
from distgcn.io.safe_io import WEIGHTS, write_npz

FORMAT = 1
"""The record's format version: a reader refuses a later one."""
RECORD = "model"
"""The name of the array that holds the record."""
MODEL_FIELDS = ("conv", "layers", "hidden", "dtype", "first_layer", "heads", "output_heads", "root_weight")
"""The training settings that the forward pass depends on (dropout is off when predicting)."""


def distgcn_version() -> str | None:
    try:
        return version("distgcn")
    except PackageNotFoundError:
        return None


def model_record(config: TrainConfig, widths: list[int], epoch: int, kept: str, graph: dict[str, Any]) -> dict:
    """What a weights file records of its model: ``kept`` says which epoch's weights these are
    (``last`` or ``best val_acc``, ...); ``graph`` how the graph was read (meta.json's ``graph`` object)."""
    return {"format": FORMAT, "distgcn_version": distgcn_version(), "widths": list(widths), "epoch": epoch,
            "kept": kept, **{name: getattr(config, name) for name in MODEL_FIELDS},
            "hidden": list(config.hidden), "graph": graph}


def write_weights(path: Path, parameters: list[np.ndarray], record: dict) -> Path:
    """The weights file, atomically (replacing only an earlier weights file: :mod:`distgcn.io.safe_io`)."""
    return write_npz(path, WEIGHTS, *parameters, **{RECORD: np.array(json.dumps(record, sort_keys=True))})


@dataclass(frozen=True)
class SavedWeights:
    """A weights file, read and checked: the record of its model and its parameters in the model's order."""

    path: Path
    record: dict
    parameters: list[np.ndarray]

    @property
    def widths(self) -> list[int]:
        return list(self.record["widths"])

    def config(self, **runtime: Any) -> TrainConfig:
        """The model's settings as a TrainConfig; ``runtime``: settings that do not change the results
        (``halo_window``)."""
        return TrainConfig(**{name: self.record[name] for name in MODEL_FIELDS}, **runtime)


def read_weights(path: str | Path) -> SavedWeights:
    """Read a weights file; InputError naming it where it is not one or records no model it can rebuild. Whether
    the parameters fit that model is checked when it is built (:func:`distgcn.training.prediction.load_into`)."""
    path = Path(path)
    try:
        arrays = read_npz(path)
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"not a weights file ({type(exc).__name__}: {exc})", path=path) from None
    if RECORD not in arrays:
        raise InputError("this weights file records no model (it was written before distgcn recorded one, or "
                         "not by distgcn): train again with --save-weights", path=path)
    try:
        record = json.loads(str(arrays.pop(RECORD)))
    except (ValueError, TypeError) as exc:
        raise InputError(f"the model record is not JSON ({exc})", path=path) from None
    _check_record(record, path)
    count = sum(name.startswith("arr_") for name in arrays)
    if set(arrays) != {f"arr_{i}" for i in range(count)}:
        raise InputError(f"unexpected arrays {sorted(set(arrays) - {f'arr_{i}' for i in range(count)})}",
                         path=path)
    return SavedWeights(path, record, [arrays[f"arr_{i}"] for i in range(count)])


def _check_record(record: Any, path: Path) -> None:
    """The record's fields, each of the type and range its model needs (a one-line InputError naming it)."""
    if not isinstance(record, dict):
        raise InputError("the model record is not a JSON object", path=path)
    if not isinstance(record.get("format"), int) or record["format"] > FORMAT:
        raise InputError(f"model record format {record.get('format')!r}: this distgcn ({distgcn_version()}) "
                         f"reads format {FORMAT} and earlier; the file was written by distgcn "
                         f"{record.get('distgcn_version')}", path=path)
    widths = record.get("widths")
    if not (isinstance(widths, list) and len(widths) >= 3 and all(isinstance(w, int) and not isinstance(w, bool)
                                                                   and w >= 1 for w in widths)):
        raise InputError(f"the model record's widths {widths!r} are not 3 or more positive integers", path=path)
    checks = {"conv": lambda v: v in CONVS, "dtype": lambda v: v in DTYPES, "first_layer": lambda v: v in FIRST_LAYERS,
              "layers": lambda v: v == len(widths) - 1, "root_weight": lambda v: isinstance(v, bool)}
    for name, ok in checks.items():
        if not ok(record.get(name)):
            raise InputError(f"the model record's {name} {record.get(name)!r} does not describe a model distgcn "
                             f"builds (widths {widths})", path=path)
    try:
        SavedWeights(path, record, []).config()
    except InputError as exc:
        raise InputError(f"the model record does not describe a model distgcn builds ({exc})", path=path) from None
