"""Where one GPU rank's epoch goes: torch.profiler over `distgcn train DIR --backend nccl`, host and device time.

    python benchmarks/gpu_profile.py PARTITION_DIR [EPOCHS]

One untimed run first (CUDA context, cuSPARSE handles, the caching allocator),
then the profiled one; prints the operations by host time, then by GPU time.
"""

from __future__ import annotations

import sys

from torch.profiler import ProfilerActivity, profile

from distgcn.cli import main


def run() -> None:
    epochs = sys.argv[2] if len(sys.argv) > 2 else "3"
    args = ["train", sys.argv[1], "--backend", "nccl", "--epochs", epochs, "--quiet", "--hidden", "64"]
    main(args)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        main(args)
    for key in ("self_cpu_time_total", "self_cuda_time_total"):
        print(prof.key_averages().table(sort_by=key, row_limit=20, max_name_column_width=60))


if __name__ == "__main__":
    run()
