"""Do the kept activation buffers pay? ``distgcn train`` with them and without, runs interleaved.

Each run is a fresh process: ``python -m distgcn train ARGS --metrics FILE``,
and for "without" the same command after ``kept_buffers.CAN_COUNT_USES``
is set False (what a torch without a storage use count gets: every large
activation is allocated anew, as before the buffers). Reports per run the
median epoch from the third on, the epochs' range, and the process's system
time, minor page faults and peak RSS (the child's own, from ``os.wait4``).

    python benchmarks/kept_buffers.py --repeats 2 -- --graph synthetic:rmat,scale=20,edge_factor=10 \\
        --features 64 --classes 8 --partition random --hidden 64 --epochs 10 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WITHOUT = ("import sys, runpy; from distgcn.kernels import kept_buffers; kept_buffers.CAN_COUNT_USES = False; "
           "sys.argv = ['distgcn', *sys.argv[1:]]; runpy.run_module('distgcn', run_name='__main__')")
"""The ``train`` command with the kept buffers off."""


def run(kept: bool, train_args: list[str], metrics: Path) -> dict:
    """One ``train`` process; its epochs and what the kernel counted for it (``wait4``: this child's own usage)."""
    command = [sys.executable, "-m", "distgcn"] if kept else [sys.executable, "-c", WITHOUT]
    child = subprocess.Popen([*command, "train", *train_args, "--quiet", "--metrics", str(metrics)],
                             stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"kept_buffers: train exited {child.returncode}")
    epochs = [json.loads(line)["epoch_s"] for line in metrics.read_text().splitlines()]
    steady = epochs[2:] or epochs
    return {"kept": kept, "median_epoch_s": round(statistics.median(steady), 4), "min_epoch_s": round(min(steady), 4),
            "max_epoch_s": round(max(steady), 4), "system_s": round(usage.ru_stime, 2),
            "minor_faults": usage.ru_minflt, "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: the arguments of distgcn train")
    args = parser.parse_args()
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    print(f"load average at start {os.getloadavg()}", file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            for kept in (False, True):
                result = run(kept, train_args, Path(scratch) / f"{repeat}-{kept}.jsonl")
                results.append(result)
                print(json.dumps(result), flush=True)
    print(f"load average at end {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
