"""The loss (with its gradient) and the predicted classes of a rank's logits: torch's operations against the
compiled passes of distgcn/kernels/logits.py, in one process, alternated.

    python benchmarks/logits_passes.py [--rows 82168] [--classes 8] [--train-share 0.5] [--threads 1] [--rounds 7]

The defaults are Slashdot's shape in the benchmark model (82,168 rows, 8 classes, half of them training rows). The
loss is what a full-batch step computes: the cross-entropies of the training rows, summed and divided by their
number, then its backward pass into a gradient of all rows (zero elsewhere). Prints medians in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does: the same malloc

import torch  # noqa: E402
from timing import median_ms  # noqa: E402

from distgcn.kernels import logits as logits_kernel  # noqa: E402
from distgcn.training.steps import cross_entropies  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=82168)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--train-share", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7, help="alternations of the two ways, 9 calls each")
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(options.rows, options.classes, generator=generator).requires_grad_(True)
    train = torch.randperm(options.rows, generator=generator)[:int(options.rows * options.train_share)].sort().values
    labels = torch.randint(0, options.classes, (train.numel(),), generator=generator)

    def loss_and_gradient() -> None:  # the gradient returned, not accumulated into logits.grad (as in training)
        torch.autograd.grad(cross_entropies(logits, labels, train).sum() / train.numel(), logits)

    def predictions() -> None:
        logits_kernel.predicted_classes(logits.detach())

    compiled = logits_kernel.compiled
    ways = {"torch": lambda tensor: False, "compiled": compiled}
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(options.rounds):
        for way, choice in ways.items():
            logits_kernel.compiled = choice
            for name, function in (("loss+backward", loss_and_gradient), ("argmax", predictions)):
                function()  # compiled (or loaded from numba's cache) before it is timed
                results.setdefault((name, way), []).append(median_ms(function, 9))
    logits_kernel.compiled = compiled
    print(f"{options.rows} rows x {options.classes} classes, {train.numel()} training rows, "
          f"--threads {options.threads}, medians of {options.rounds} rounds (ms):")
    for name in ("loss+backward", "argmax"):
        before, after = (statistics.median(results[(name, way)]) for way in ways)
        print(f"  {name:14s} torch {before:7.3f}   compiled {after:7.3f}   {before / after:5.2f}x")


if __name__ == "__main__":
    main()
