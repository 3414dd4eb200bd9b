"""Where one rank's epoch goes: torch.profiler over `distgcn train DIR`, by operation, host (and GPU) time.

    python benchmarks/profile_epoch.py PARTITION_DIR [--epochs 12] [--warmup 2] [--threads N] [--backend nccl]

One run of the real command in this process; the profiler starts after the
``--warmup`` epochs (as benchmarks/bench.py times epochs: compiled kernels,
kept buffers, the first epochs' page faults, on a GPU the CUDA context and
cuSPARSE handles all come before it) and covers the rest, their evaluations
included. Prints the operations by host time and, with a GPU, by GPU time.
For one rank (a partition into one part).
"""

from __future__ import annotations

import argparse

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does: its memory, its page faults

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from distgcn.cli.main import main  # noqa: E402
from distgcn.training import trainer  # noqa: E402


def profiled_after(warmup: int, profiler: profile):
    """Trainer.epochs, with ``profiler`` running from the end of epoch ``warmup`` to the last epoch's end."""
    epochs = trainer.Trainer.epochs

    def wrapped(self):
        for done, metrics in enumerate(epochs(self), start=1):
            if done == warmup:
                profiler.start()
            yield metrics
        profiler.stop()

    return wrapped


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("partition")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2, help="epochs before the profiler starts (at least 1)")
    parser.add_argument("--threads", help="train's --threads (default: train's)")
    parser.add_argument("--backend", help="train's --backend (nccl for a GPU)")
    parser.add_argument("--hidden", default="64")
    options = parser.parse_args()
    if not 1 <= options.warmup < options.epochs:
        parser.error(f"--warmup must be at least 1 and below --epochs ({options.epochs}), got {options.warmup}")
    args = ["train", options.partition, "--epochs", str(options.epochs), "--quiet", "--hidden", options.hidden]
    args += ["--threads", options.threads] if options.threads else []
    args += ["--backend", options.backend] if options.backend else []
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    profiler = profile(activities=activities)
    trainer.Trainer.epochs = profiled_after(options.warmup, profiler)
    main(args)
    print(f"profiled: epochs {options.warmup + 1}-{options.epochs} of {options.epochs}, evaluations included")
    keys = ["self_cpu_time_total"] + (["self_cuda_time_total"] if torch.cuda.is_available() else [])
    for key in keys:
        print(profiler.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


if __name__ == "__main__":
    run()
