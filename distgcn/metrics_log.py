"""Where epoch metrics go: a JSON-lines file and one readable line per epoch (rank 0 only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from .errors import InputError


def format_epoch(m: dict) -> str:
    """One human line: loss, accuracies, time and the share of it spent waiting on communication."""
    comm = m["comm_wait_s"] + m["allreduce_s"]
    share = comm / m["epoch_s"] if m["epoch_s"] > 0 else 0.0
    return (
        f"epoch {m['epoch']:4d}  loss {m['loss']:.4f}  train {m['train_acc']:.3f}  "
        f"val {m['val_acc']:.3f}  test {m['test_acc']:.3f}  {m['epoch_s'] * 1e3:8.1f} ms  "
        f"comm {share:5.1%}  halo rows {m['halo_rows']}"
    )


class MetricsWriter:
    """Appends one JSON object per epoch, flushed, so a killed job keeps what it measured."""

    def __init__(self, path: str | Path | None):
        self._file: IO[str] | None = None
        if path is not None:
            path = Path(path)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._file = path.open("w")
            except OSError as exc:
                raise InputError(f"cannot write metrics ({exc.strerror})", path=path) from None

    def write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
