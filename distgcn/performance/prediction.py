"""A partition's (or a graph size's) predicted epoch time from a calibration file: the loads of its ranks, the
model's exchanges and gradients, and the node and network the calibration measured (or the figures given)."""

from __future__ import annotations

import re
from pathlib import Path

from distgcn.errors import InputError
from distgcn.memory.prediction import ITEMSIZE
from distgcn.performance.epoch_time import Network

_RATE = re.compile(r"^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(bit|kbit|mbit|gbit|B/s|kB/s|MB/s|GB/s)$", re.IGNORECASE)
_RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
               "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9}
_TIME = re.compile(r"^(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*(s|ms|us|ns)?$", re.IGNORECASE)
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, None: 1.0}


def bandwidth(text: str) -> float:
    """``--bandwidth``: bytes per second from ``100mbit``, ``10gbit`` (tc's decimal bits) or ``25GB/s``."""
    match = _RATE.match(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a rate such as 100mbit, 10gbit or 25GB/s, got {text!r}")
    return float(match.group(1)) * _RATE_UNITS[match.group(2).lower()]


def latency(text: str) -> float:
    """``--latency``: seconds from ``2us``, ``0.5ms`` or a plain number of seconds."""
    match = _TIME.match(text.strip())
    if not match:
        raise ValueError(f"expected a time such as 2us, 0.5ms or 1e-6, got {text!r}")
    return float(match.group(1)) * _TIME_UNITS[match.group(2).lower() if match.group(2) else None]


def _gradient_sizes(model, widths: list[int]) -> list[int]:
    """Elements of each parameter of the model (one allreduce each), from the model itself."""
    import torch

    from distgcn.config import TrainConfig
    from distgcn.nn.registry import build_model

    config = TrainConfig(**{name: getattr(model, name) for name in model.__dataclass_fields__})
    return [p.numel() for p in build_model(config, widths, torch.float32).parameters()]


def _network(calibration_path: str, calibration: dict, given: dict[str, float | None]) -> Network:
    """The calibration's measured network, each figure replaced where the command line gives one."""
    measured = calibration["network"] or {}
    latency_s = given["latency_s"] if given["latency_s"] is not None else measured.get("latency_s")
    bandwidth_bytes_s = (given["bandwidth_bytes_s"] if given["bandwidth_bytes_s"] is not None
                         else measured.get("bandwidth_bytes_s"))
    if latency_s is None or bandwidth_bytes_s is None:
        raise InputError(f"{calibration_path}: no network was measured (calibrated on one rank or with "
                         f"--no-network): give --bandwidth and --latency")
    return Network(latency_s, bandwidth_bytes_s)


def _calibration_for(calibration_path: str, features: int | None, classes: int | None, where: str) -> dict:
    from distgcn.performance.calibration_file import read_calibration

    calibration = read_calibration(calibration_path)
    if (features, classes) != (calibration["features"], calibration["classes"]):
        raise InputError(f"{calibration_path}: calibrated for {calibration['features']} features and "
                         f"{calibration['classes']} classes; {where} has {features} and {classes} "
                         f"(calibrate again with --features {features} --classes {classes})")
    return calibration


def _predict(loads: list, features: int, classes: int, calibration_path: str, calibration: dict,
             given: dict[str, float | None], ranks_per_node: int) -> dict:
    from distgcn.memory.from_sizes import epoch_exchange_widths
    from distgcn.performance.calibration_file import model_of
    from distgcn.performance.epoch_time import ComputeRates, predict_epoch

    model = model_of(calibration)
    parts = len(loads)
    if ranks_per_node > parts:
        raise InputError(f"--ranks-per-node {ranks_per_node}: the partition has only {parts} parts")
    prediction = predict_epoch(loads, epoch_exchange_widths(model, features, classes, parts), ITEMSIZE[model.dtype],
                               _gradient_sizes(model, model.widths(features, classes)),
                               ComputeRates(**calibration["compute"]), _network(calibration_path, calibration, given),
                               ranks_per_node)
    return {"parts": parts,
            "calibration": {"path": calibration_path, "host": calibration["host"], "ranks": calibration["ranks"],
                            "threads": calibration["threads"], "model": calibration["model"]},
            "network_source": {"latency_s": "given" if given["latency_s"] is not None else "calibrated",
                               "bandwidth_bytes_s": "given" if given["bandwidth_bytes_s"] is not None
                               else "calibrated"},
            **prediction}


def predict_time(directory: Path, calibration_path: str, given: dict[str, float | None],
                 ranks_per_node: int) -> dict:
    """The prediction's JSON object for one partition directory."""
    from distgcn.performance.epoch_time import rank_load
    from distgcn.shard.directory import load_listed_shard, read_meta, verify_parts_file

    meta = read_meta(directory)
    verify_parts_file(directory, meta)
    graph = meta.get("graph") or {}
    features, classes = graph.get("features"), graph.get("classes")
    calibration = _calibration_for(calibration_path, features, classes, str(directory))
    loads = [rank_load(load_listed_shard(directory, meta, rank)) for rank in range(meta["parts"])]
    return {"partition": str(directory), "model": meta.get("model"),
            **_predict(loads, features, classes, calibration_path, calibration, given, ranks_per_node)}


def predict_time_from_sizes(spec, calibration_path: str, given: dict[str, float | None], ranks_per_node: int) -> dict:
    """The same for a graph known by its size (``stats --predict SPEC``): every rank the largest rank of
    :func:`distgcn.memory.from_sizes.shard_sizes` (a random partition's halo unless ``halo=`` is given), sending
    its rows to as many peers as it receives from, in equal messages."""
    from distgcn.memory.from_sizes import shard_sizes
    from distgcn.performance.epoch_time import RankLoad

    calibration = _calibration_for(calibration_path, spec.features, spec.classes, "the --predict graph")
    sizes = shard_sizes(spec)
    peers = max(sizes.senders, 1 if spec.parts > 1 else 0)
    share, extra = divmod(sizes.rows_sent, peers) if peers else (0, 0)
    loads = [RankLoad(sizes.rows, sizes.nnz_owned + sizes.nnz_halo,
                      {(rank + k) % spec.parts: share + (k <= extra) for k in range(1, peers + 1)})
             for rank in range(spec.parts)]
    source = "given" if spec.halo is not None else "a random partition's (an upper bound)"
    return {"partition": f"n={spec.n}, nnz={spec.nnz}, {sizes.rows_sent} halo rows per rank ({source})",
            "model": "by size", **_predict(loads, spec.features, spec.classes, calibration_path, calibration, given,
                                           ranks_per_node)}
