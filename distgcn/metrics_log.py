"""Where epoch metrics go: a JSON-lines file and one readable line per epoch (rank 0 only).

The file holds exactly one JSON object per epoch. The first epoch's object
also carries ``run``: what produced the file (ranks, partition, graph, model
shape, versions), so that reports can group runs for scaling and partition
comparisons without the reader having to remember each file's origin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from .errors import InputError
from .safe_io import open_output


def format_epoch(m: dict) -> str:
    """One human line: loss, accuracies, time and the share of it spent waiting on communication."""
    comm = m["comm_wait_s"] + m["allreduce_s"]
    share = comm / m["epoch_s"] if m["epoch_s"] > 0 else 0.0
    return (
        f"epoch {m['epoch']:4d}  loss {m['loss']:.4f}  train {m['train_acc']:.3f}  "
        f"val {m['val_acc']:.3f}  test {m['test_acc']:.3f}  {m['epoch_s'] * 1e3:8.1f} ms  "
        f"comm {share:5.1%}  halo rows {m['halo_rows']}"
    )


def format_epoch_detail(m: dict) -> str:
    """The --verbose continuation of an epoch line: where the time went and what was sent."""
    return (
        f"      compute {m['compute_s'] * 1e3:.1f} ms  halo wait {m['comm_wait_s'] * 1e3:.1f} ms  "
        f"allreduce {m['allreduce_s'] * 1e3:.1f} ms  {m['halo_bytes'] / 1e6:.2f} MB in {m['messages']} messages "
        f"over {m['spmm_exchanges']} exchanges  busiest rank {m['max_rank_halo_rows']} rows"
    )


class MetricsWriter:
    """Appends one JSON object per epoch, flushed, so a killed job keeps what it measured."""

    def __init__(self, path: str | Path | None, run: dict | None = None, resume_after: int | None = None):
        """``resume_after=E``: a resumed run keeps the file's records of epochs 1..E and appends after them."""
        self._file: IO[str] | None = None
        self._run = run
        if path is not None:
            path = Path(path)
            if resume_after is not None and _keep_through(path, resume_after):
                self._run = None  # the kept first record already describes the run
            self._file = open_output(path, append=resume_after is not None)

    def write(self, record: dict) -> None:
        if self._file is not None:
            if self._run is not None:  # on the first line only, beside (never instead of) the epoch keys
                record = {**record, "run": self._run}
                self._run = None
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _keep_through(path: Path, epoch: int) -> bool:
    """Drop the records after ``epoch`` (they will be recomputed); True if any record is kept.

    The shortened file replaces the old one by rename, so a failure here
    leaves the user's file as it was.
    """
    if not path.is_file():
        return False
    kept = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # a line cut short by the kill that interrupted the run
            raise InputError(f"not a metrics file (line {number} is not JSON)", path=path) from None
        if record.get("epoch", 0) <= epoch:
            kept.append(line + "\n")
    temporary = path.with_name(f".{path.name}.resume")
    temporary.unlink(missing_ok=True)
    with open_output(temporary) as fh:
        fh.writelines(kept)
    temporary.replace(path)
    return bool(kept)
