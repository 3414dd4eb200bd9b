"""Epoch metrics: written to a JSON-lines file and one readable line per epoch (rank 0 only), and read back.

The file holds exactly one JSON object per epoch. The first epoch's object
also carries ``run``: what produced the file (ranks, partition, graph, model
shape, versions), so that reports can group runs for scaling and partition
comparisons without the reader having to remember each file's origin. A
number that is not finite (a diverged loss) is written ``null``: JSON has no NaN.
Every reader (``report``, ``jobs collect``, ``--resume``, the benchmarks) goes
through :func:`read_metrics`, and every summary of speed through :func:`steady`.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import IO

from distgcn.config import ConfigError, literal
from distgcn.errors import InputError
from distgcn.io.safe_io import METRICS, check_target, start_growing_file
from distgcn.io.schema import finite_or_nan, json_problem, validate_metrics_line


def format_epoch(m: dict) -> str:
    """One human line: loss, accuracies, time and the share of it spent waiting on communication.

    The share is ``comm_share``, the mean over ranks of each rank's own share (at most 100%).
    """
    return (
        f"epoch {m['epoch']:4d}  loss {m['loss']:.4f}  train {m['train_acc']:.3f}  "
        f"val {m['val_acc']:.3f}  test {m['test_acc']:.3f}  {m['epoch_s'] * 1e3:8.1f} ms  "
        f"comm {m['comm_share']:5.1%}  halo rows {m['halo_rows']}"
    )


def format_epoch_detail(m: dict) -> str:
    """The --verbose continuation of an epoch line: where the time went and what was sent."""
    return (
        f"      compute {m['compute_s'] * 1e3:.1f} ms  halo wait {m['comm_wait_s'] * 1e3:.1f} ms  "
        f"allreduce {m['allreduce_s'] * 1e3:.1f} ms  {m['halo_bytes'] / 1e6:.2f} MB in {m['messages']} messages "
        f"over {m['spmm_exchanges']} exchanges  busiest rank {m['max_rank_halo_rows']} rows"
    )


class MetricsWriter:
    """One JSON object per epoch, flushed as it goes, so a killed job keeps what it measured.

    The file goes through :mod:`distgcn.io.safe_io`: only an earlier distgcn
    metrics file is replaced, and only once this run's first record is
    written (a run that dies before its first epoch leaves the old file whole).
    """

    def __init__(self, path: str | Path | None, run: dict | None = None, resume_after: int | None = None,
                 restart: bool = False):
        """``resume_after=E``: a resumed run keeps the file's records of epochs 1..E and appends after them,
        once the file is shown to be this run's (:func:`continued_records`); ``restart``: it starts a new
        file after epoch E instead, whose header records ``resumed_after``. Either way the first record this
        run writes (epoch E + 1) carries ``resumed_after: E``, so that a report marks where each resume began."""
        self._path = None if path is None else check_target(Path(path), METRICS)
        self._file: IO[bytes] | None = None
        self._run = run
        self._resumed = resume_after if resume_after else None
        self._kept: list[str] = []
        if self._path is None or resume_after is None:
            return
        if not restart:
            self._kept = continued_records(self._path, run or {}, resume_after)
        if self._kept:
            self._run = None  # the kept first record already describes the run
        elif resume_after > 0 and self._run is not None:
            self._run = {**self._run, "resumed_after": resume_after}

    def write(self, record: dict) -> None:
        if self._path is None:
            return
        if self._run is not None:  # on the first line only, beside (never instead of) the epoch keys
            record = {**record, "run": self._run}
            self._run = None
        if self._resumed is not None:  # on this run's first record only
            record = {**record, "resumed_after": self._resumed}
            self._resumed = None
        line = (json.dumps(_finite(record), allow_nan=False) + "\n").encode()
        if self._file is None:
            self._file = start_growing_file(self._path, METRICS, "".join(self._kept).encode() + line)
        else:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _finite(value: object) -> object:
    """``value`` with every non-finite float as None: JSON has no NaN or infinity (it is written null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def read_metrics(path: Path, *, cut_last_line: bool = False) -> tuple[dict, list[dict]]:
    """A metrics file's run header (``{}`` if none) and its epoch records, each line checked against the schema.

    Null numbers (what the writer records for NaN or infinity) are read back as NaN. ``cut_last_line``:
    a last line that is not JSON is dropped (cut short by the kill that interrupted the run being resumed).
    """
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read metrics ({exc.strerror or exc})", path=path) from None
    except UnicodeDecodeError:
        raise InputError("cannot read metrics (not UTF-8 text)", path=path) from None
    header: dict = {}
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:  # ValueError: an integer of over 4300 digits too
            if cut_last_line and number == len(lines):
                break
            raise InputError(f"not a JSON line ({json_problem(exc)})", path=path, line=number) from None
        validate_metrics_line(record, f"{path}:{number}")
        header = header or record.get("run", {})
        if "epoch" in record:
            records.append(finite_or_nan(record))
    return header, records


def steady_records(records: list[dict]) -> list[dict]:
    """The epochs that show a run's steady speed: all but the first once there are two or more.

    The first epoch pays for warm-up (allocation, first touches, lazy initialization), so it is left
    out as soon as another epoch remains. From two epochs on, not three: the median of two epochs is
    their mean, half of it warm-up, while the second epoch alone is already a steady measurement.
    A run of one epoch has nothing else to show.
    """
    return records[1:] if len(records) > 1 else records


def steady(records: list[dict], key: str) -> float:
    """The median of ``key`` over the steady epochs (:func:`steady_records`): what report and jobs collect show."""
    return statistics.median(float(record[key]) for record in steady_records(records))


RUN_IDENTITY = ("ranks", "partition_id", "graph.fingerprint", "conv", "widths", "dtype", "seed", "first_layer",
                "comm", "halo_dtype")
"""The run-header fields that a resumed run must share with the metrics file it continues."""


def continued_records(path: Path, run: dict, epoch: int) -> list[str]:
    """The records of epochs up to ``epoch`` (the checkpoint's) that a resumed run keeps, as JSON lines.

    Refused, naming ``{outputs.restart_metrics}``, when the file is another run's (a field of
    :data:`RUN_IDENTITY` differs from ``run``, this run's header) or lacks epochs the checkpoint covers:
    appending would mix two runs in one file, or leave a gap that a report would draw as one run.
    Records after ``epoch`` are dropped: the resumed run computes them again. Where no file exists, the
    resumed run starts one, and its header says after which epoch (``resumed_after``).
    """
    remedy = "; pass {outputs.restart_metrics} to start a new file after the checkpoint, or give another file"
    if epoch == 0:
        return []  # nothing to continue: the run starts at epoch 1
    if not path.is_file():
        return []  # a new file, whose header records where it starts (resumed_after)
    header, records = read_metrics(path, cut_last_line=True)
    for name in RUN_IDENTITY:
        if header and run and _field(header, name) != _field(run, name):
            raise ConfigError("outputs.metrics", f"{literal(path)}: the metrics file is another run's ({name} "
                              f"{literal(repr(_field(header, name)))}, this run has {literal(repr(_field(run, name)))})"
                              + remedy)
    start = int(header.get("resumed_after", 0)) if header else 0
    kept = [record for record in records if record["epoch"] <= epoch]
    expected = list(range(start + 1, epoch + 1))
    if [record["epoch"] for record in kept] != expected:
        missing = sorted(set(expected) - {record["epoch"] for record in kept})
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        what = f"lacks epochs {shown}" if missing else "repeats or misorders epochs"
        raise ConfigError("outputs.metrics", f"{literal(path)}: the metrics file {what} up to the checkpoint's "
                          f"epoch {epoch}" + remedy)
    # the first record keeps its run header; an older file's NaN is written null
    return [json.dumps(_finite(record), allow_nan=False) + "\n" for record in kept]


def _field(header: dict, dotted: str) -> object:
    value: object = header
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value

