"""How big a slice of x a GPU rank should drop at a time (distgcn.nn.dropout.DEVICE_CHUNK_BYTES).

    python benchmarks/gpu_dropout_chunks.py kernel [--rows 1048576] [--width 64]
    python benchmarks/gpu_dropout_chunks.py train CHUNK_MIB PARTITION_DIR [train options...]

On a GPU every slice's mask is some 30 small kernels (the hash's rounds, four
16-bit lanes) and the product of the slice, so small slices are launch-bound;
large slices hold larger int64 hashing temporaries. ``kernel`` times
keyed_dropout_matmul forward and backward on a CUDA device for several slice
sizes (the first layer: x needs no gradient; the output layer: 8 columns, x
needs one) and reports the memory allocated above x and the weights.
``train`` runs ``distgcn train`` in this process with the given slice size and
prints the median epoch of epochs 2 and later.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from distgcn.cli.main import main
from distgcn.nn import dropout

SLICES_MIB = (16, 64, 256, 1024)


def time_layer(x: torch.Tensor, weight: torch.Tensor, repeats: int) -> tuple[float, int]:
    """Median ms of forward + backward of keyed_dropout_matmul, and the bytes allocated above the inputs' at peak."""
    row_ids = np.arange(x.shape[0], dtype=np.int64)
    base = torch.cuda.memory_allocated()
    times = []
    for repeat in range(repeats + 2):
        torch.cuda.synchronize()
        if repeat == 2:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        out = dropout.keyed_dropout_matmul(x, weight, row_ids, 0.5, repeat)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        weight.grad = x.grad = None
        del out
    return statistics.median(times[2:]) * 1e3, torch.cuda.max_memory_allocated() - base


def kernel(rows: int, width: int, repeats: int) -> None:
    generator = torch.Generator(device="cuda").manual_seed(0)
    features = torch.randn(rows, width, device="cuda", generator=generator)
    hidden = features.clone().requires_grad_(True)
    first = torch.randn(width, width, device="cuda", generator=generator, requires_grad=True)
    output = torch.randn(width, 8, device="cuda", generator=generator, requires_grad=True)
    print(f"{torch.cuda.get_device_name()}: x {rows} x {width} float32 ({rows * width * 4 >> 20} MiB), p = 0.5,"
          f" median of {repeats} forward + backward")
    print(f"{'slice MiB':>9}  {'first layer ms':>14}  {'extra MiB':>9}  {'output layer ms':>15}  {'extra MiB':>9}")
    for mib in SLICES_MIB:
        dropout.DEVICE_CHUNK_BYTES = mib << 20
        first_ms, first_bytes = time_layer(features, first, repeats)
        output_ms, output_bytes = time_layer(hidden, output, repeats)
        print(f"{mib:>9}  {first_ms:>14.2f}  {first_bytes >> 20:>9}  {output_ms:>15.2f}  {output_bytes >> 20:>9}")


def train(chunk_mib: int, args: list[str]) -> None:
    dropout.DEVICE_CHUNK_BYTES = chunk_mib << 20
    with tempfile.TemporaryDirectory() as scratch:
        metrics = Path(scratch) / "m.jsonl"
        code = main(["train", *args, "--quiet", "--metrics", str(metrics)])
        epochs = [json.loads(line)["epoch_s"] for line in metrics.read_text().splitlines()][1:]
    print(f"slices of {chunk_mib} MiB: exit {code}, median epoch {statistics.median(epochs) * 1e3:.2f} ms over"
          f" {len(epochs)} epochs (min {min(epochs) * 1e3:.2f}, max {max(epochs) * 1e3:.2f})")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    kernel_args = commands.add_parser("kernel")
    kernel_args.add_argument("--rows", type=int, default=1 << 20)
    kernel_args.add_argument("--width", type=int, default=64)
    kernel_args.add_argument("--repeats", type=int, default=10)
    train_args = commands.add_parser("train")
    train_args.add_argument("chunk_mib", type=int)
    train_args.add_argument("train", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    if options.command == "kernel":
        kernel(options.rows, options.width, options.repeats)
    else:
        train(options.chunk_mib, options.train)


if __name__ == "__main__":
    cli()
