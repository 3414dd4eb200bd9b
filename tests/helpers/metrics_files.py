"""A small metrics file, as a finished run leaves it, for tests that read, continue or report one."""

from __future__ import annotations

from pathlib import Path

from distgcn.io.metrics_log import MetricsWriter


def metrics_file(path: Path, loss: float = 0.5) -> Path:
    keys = ("train_acc", "val_acc", "test_acc", "epoch_s", "compute_s", "comm_wait_s", "allreduce_s", "halo_rows",
            "halo_bytes", "messages", "max_rank_halo_rows", "spmm_exchanges")
    writer = MetricsWriter(path, {"ranks": 1})
    for epoch in (1, 2):
        writer.write({"epoch": epoch, "loss": loss, **{key: 0.5 if key.endswith(("_s", "acc")) else 1 for key in keys}})
    writer.close()
    return path
