"""The calibration file that ``distgcn calibrate`` writes and ``stats --predict-time`` and ``report
--predict-time`` read: its format, its checks and its summary (the measurement: distgcn/performance/calibration.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distgcn.config import ModelConfig
from distgcn.errors import InputError
from distgcn.performance.epoch_time import ComputeRates, Network

FORMAT = "distgcn-calibration"
VERSION = 1


def read_calibration(path: str | Path) -> dict[str, Any]:
    """A calibration file, checked; a one-line InputError naming the file otherwise."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such calibration file (make one with `distgcn calibrate --out {path}`)")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: not a calibration file ({error})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputError(f"{path}: not a calibration file written by `distgcn calibrate`")
    if record.get("version") != VERSION:
        raise InputError(f"{path}: calibration version {record.get('version')!r}; this distgcn reads {VERSION}")
    try:
        ComputeRates(**record["compute"])
        if record.get("network") is not None:
            Network(record["network"]["latency_s"], record["network"]["bandwidth_bytes_s"])
        model_of(record)
        int(record["features"]), int(record["classes"])
    except (KeyError, TypeError, ValueError, InputError) as error:
        raise InputError(f"{path}: damaged calibration file ({error})") from None
    return record


def model_of(record: dict) -> ModelConfig:
    """The model a calibration was measured for."""
    model = dict(record["model"])
    model["hidden"] = tuple(model["hidden"])
    return ModelConfig(**model)


def write_calibration(path: str | Path, record: dict) -> Path:
    """Atomically; an earlier calibration file may be replaced, any other file is refused (distgcn/io/safe_io.py)."""
    from distgcn.io.safe_io import CALIBRATION, write_text

    return write_text(Path(path), CALIBRATION, json.dumps(record, indent=1) + "\n")
