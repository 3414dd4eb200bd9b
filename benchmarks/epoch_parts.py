"""Where one CPU rank's epoch goes, by kind of compiled call, timed around the calls themselves (no profiler).

    python benchmarks/epoch_parts.py PARTITION_DIR --threads N [--epochs 12] [--warmup 2] [-- TRAIN_FLAGS...]

Runs the real ``distgcn train`` on a one-part partition in this process and adds up, per epoch, the host time
of each kind of call: the local SpMM (``spmm``: ``csr_kernel.add_product``; ``spmm_t``: the halo transpose
product), the dropout kernels (``drop_x_W``: dropout(X)·W in one pass, ``drop_x_W_bwd`` its backward,
``dropout``: a dropout alone), the dense products (``x_W``; ``x_W+b``: a product with the bias added, the forward of a layer that
multiplies by Â first; ``grad_W``: every weight gradient), the passes over the logits (``loss``: the loss and
its gradient rows, ``loss_bwd``: their scatter into the gradient of all rows, ``argmax``: the predicted classes)
and Adam's step. ``rest`` is the epoch (``epoch_s``, evaluation included) less all of those: torch's elementwise
passes, autograd and Python.
Medians over the epochs after ``--warmup``. torch.profiler (benchmarks/profile_epoch.py) is not used because it
slows numba's parallel regions; this shows which parts scale with
``--threads`` and which do not.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from collections.abc import Callable
from types import ModuleType

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

from distgcn.cli.main import main  # noqa: E402
from distgcn.kernels import csr as csr_kernel
from distgcn.kernels import dense
from distgcn.kernels import dropout as dropout_kernel
from distgcn.kernels import logits as logits_kernel
from distgcn.nn import dropout
from distgcn.training import optimizers, trainer  # noqa: E402

spent: dict[str, float] = collections.defaultdict(float)
"""Seconds spent in each kind of call since the last epoch ended."""


def timed(function: Callable, label: str) -> Callable:
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start
    return call


def time_calls() -> None:
    """Replace each timed function where its callers look it up (its module, and modules that imported it)."""
    parts: list[tuple[list[ModuleType], str, str]] = [
        ([csr_kernel], "add_product", "spmm"), ([csr_kernel], "add_transpose_product", "spmm_t"),
        ([dropout_kernel], "dropped_product", "drop_x_W"),
        ([dropout_kernel], "dropped_product_backward", "drop_x_W_bwd"),
        ([dropout_kernel], "masked_scale", "dropout"),
        ([dense, dropout], "times_weight", "x_W"), ([dense, dropout], "weight_gradient", "grad_W"),
        ([logits_kernel], "cross_entropies", "loss"), ([logits_kernel], "scatter_scaled_rows", "loss_bwd"),
        ([logits_kernel], "predicted_classes", "argmax")]
    for modules, name, label in parts:
        function = timed(getattr(modules[0], name), label)
        for module in modules:
            setattr(module, name, function)
    dense._Affine.forward = staticmethod(timed(dense._Affine.forward, "x_W+b"))  # the product after Â
    optimizers.Adam.step = timed(optimizers.Adam.step, "adam")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partition")
    parser.add_argument("--threads", required=True)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2, help="first epochs left out of the medians")
    parser.add_argument("--hidden", default="64")
    parser.add_argument("train_flags", nargs="*", help="more flags for train, after --")
    options = parser.parse_args()
    time_calls()
    records: list[tuple[dict[str, float], float]] = []
    epochs = trainer.Trainer.epochs

    def recorded(self):
        for metrics in epochs(self):
            records.append((dict(spent), metrics["epoch_s"]))
            spent.clear()
            yield metrics

    trainer.Trainer.epochs = recorded
    try:
        main(["train", options.partition, "--epochs", str(options.epochs), "--hidden", options.hidden,
              "--threads", options.threads, "--backend", "gloo", "--quiet", *options.train_flags])
    except SystemExit as stop:
        if stop.code:
            raise
    kept = records[options.warmup:]
    labels = sorted({label for parts, _ in kept for label in parts})
    ms = {label: statistics.median(parts.get(label, 0.0) for parts, _ in kept) * 1e3 for label in labels}
    ms["rest"] = statistics.median(epoch - sum(parts.values()) for parts, epoch in kept) * 1e3
    epoch_ms = statistics.median(epoch for _, epoch in kept) * 1e3
    print(f"--threads {options.threads}: epoch {epoch_ms:.2f} ms (median of epochs {options.warmup + 1}-"
          f"{len(records)});  " + "  ".join(f"{label} {value:.2f}" for label, value in ms.items()))


if __name__ == "__main__":
    run()
