"""Minibatch sampling throughput where training samples: host samplers against device samplers, CPU and GPU.

One rank (P = 1) holds the whole graph. For each sampler and each way of
sampling, ``--batches`` batch keys are drawn after one warm-up batch, and each
batch is timed twice: the sampler alone (``sample(key)``) and the sampler plus
the cut of Â[S, S] and its restricted plan (what a training step needs). A GPU
is synchronized before each clock read. Reported per way: the median times,
the mean batch size |S| and its entries nnz(Â[S, S]), and sampled vertices
and entries per second over sample + cut. The ways:

* ``host-1t``, ``host-2t``: the host samplers (numpy and numba) with torch and
  numba on 1 and 2 threads;
* ``device-cpu-1t``, ``device-cpu-2t``: the device samplers (torch) on the CPU;
* ``device-cuda``: the device samplers on the GPU, where one is visible;
* for rw, each device way also ``+ungrouped``: walkers not sorted by transit vertex.

Every way draws the same batches: the script checks each batch's membership
against the host sampler's and stops if one differs.

With ``--train-steps K`` it also runs ``distgcn train`` for two epochs of K
batches per way (one process, GCN 64 -> 64 -> 8 on --features 64) and reports
the median share of a training step spent sampling (``sample_s`` / ``batch_s``
of epoch 2's batches).

    python benchmarks/sampler_throughput.py --out RESULTS/sampling.json               # Slashdot and R-MAT 2^20
    python benchmarks/sampler_throughput.py --graphs synthetic:sbm,n=20000 --batches 3 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import torch

from distgcn.comm.transport.inprocess import run_ranks
from distgcn.config import PartitionerConfig
from distgcn.data.prepare import GraphOptions
from distgcn.sampling.device import on_device
from distgcn.sampling.distributed import batch_key
from distgcn.shard.scatter import build_and_scatter
from distgcn.spmm.restricted import ShardBlocksOn, build_batch, build_batch_on_device
from distgcn.training.sampler_choice import make_distributed_sampler

ROOT = Path(__file__).resolve().parents[1]
SLASHDOT = ROOT.parent / "shared" / "datasets" / "soc-Slashdot0902" / "soc-Slashdot0902.txt.gz"
RMAT = "synthetic:rmat,scale=20,edge_factor=12,features=64,classes=8"
SAMPLERS = {"node": {}, "edge": {}, "rw": {"walk_length": 2}, "frontier": {"frontier_size": 1000}}
SEED = 1


def ways(cuda: bool) -> list[tuple[str, str | None, int, bool]]:
    """(label, device or None for the host samplers, threads, group rw walkers by transit)."""
    found = [("host-1t", None, 1, True), ("host-2t", None, 2, True),
             ("device-cpu-1t", "cpu", 1, True), ("device-cpu-2t", "cpu", 2, True)]
    if cuda:
        found.append(("device-cuda", "cuda", 2, True))
    return found


def _clock(device: str | None) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def measure(shard, transport, sampler_name: str, batch_size: int, batches: int, label: str, device: str | None,
            threads: int, grouped: bool, blocks_on: dict, reference: list) -> dict:
    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    host = make_distributed_sampler(sampler_name, shard, transport, batch_size, SAMPLERS[sampler_name])
    sampler = host if device is None else on_device(host, torch.device(device), group_by_transit=grouped)
    if device is not None and device not in blocks_on:
        blocks_on[device] = ShardBlocksOn(shard, torch.device(device))
    sample_s, total_s, vertices, entries = [], [], [], []
    for b in range(batches + 1):
        key = batch_key(SEED, 1, b)
        start = _clock(device)
        owned_in, halo_in = sampler.sample(key)
        sampled = _clock(device)
        if device is None:
            cut = build_batch(shard, host.bytes, owned_in, halo_in, torch.device("cpu"))
        else:
            cut = build_batch_on_device(blocks_on[device], sampler.bytes, owned_in, halo_in)
        done = _clock(device)
        members = owned_in if device is None else owned_in.cpu().numpy()
        if len(reference) <= b:
            reference.append(members)
        elif not np.array_equal(reference[b], members):
            raise SystemExit(f"{label} {sampler_name}: batch {b} differs from the host sampler's")
        if b == 0:
            continue  # warm-up
        sample_s.append(sampled - start)
        total_s.append(done - start)
        vertices.append(int(members.sum()))
        entries.append(int(cut.owned_block.nnz))
    mean_v, mean_e, median_total = statistics.mean(vertices), statistics.mean(entries), statistics.median(total_s)
    return {"sampler": sampler_name, "way": label + ("" if grouped else "+ungrouped"), "threads": threads,
            "batches": batches, "mean_vertices": round(mean_v, 1), "mean_entries": round(mean_e, 1),
            "sample_ms": round(statistics.median(sample_s) * 1e3, 3),
            "sample_and_cut_ms": round(median_total * 1e3, 3),
            "vertices_per_s": round(mean_v / median_total), "entries_per_s": round(mean_e / median_total)}


def dependent_step_us(device: str, steps: int = 2000) -> float:
    """Microseconds per step of a chain where each step reads the previous one's result on the host (one small
    kernel and one device-to-host copy): the floor of a sequential walk run step by step on ``device``."""
    table = torch.arange(1024, device=device)
    position = 0
    for _ in range(2):
        start = _clock(device)
        for _ in range(steps):
            position = int(table[(position * 7 + 3) % 1024])
        elapsed = _clock(device) - start
    return round(elapsed / steps * 1e6, 2)


def throughput(spec: str, symmetrize: bool, batch_size: int, batches: int, cuda: bool,
               rw_sizes: list[int]) -> list[dict]:
    def on_rank(transport) -> list[dict]:
        t0 = time.perf_counter()
        shard = build_and_scatter(transport, GraphOptions(spec=spec, symmetrize=symmetrize, features=64, classes=8,
                                                          seed=SEED), PartitionerConfig("random", seed=SEED))
        print(f"# {spec}: n = {shard.n_global:,}, nnz(Â) = {shard.owned_block.nnz:,}, "
              f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
        rows, blocks_on = [], {}
        runs = [(name, batch_size) for name in SAMPLERS] + [("rw", size) for size in rw_sizes]
        for name, size in runs:
            reference: list = []
            for label, device, threads, grouped in ways(cuda):
                for group in ([True, False] if name == "rw" and device is not None else [grouped]):
                    row = {"batch_size": size, **measure(shard, transport, name, size, batches, label, device,
                                                         threads, group, blocks_on, reference)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        return rows

    return run_ranks(1, on_rank, timeout=3600)[0]


def step_shares(spec: str, symmetrize: bool, batch_size: int, steps: int, cuda: bool) -> list[dict]:
    """Median sample_s / batch_s of epoch 2 of ``distgcn train``, per sampler and way (one rank)."""
    rows = []
    graph = ["--graph", spec] + (["--symmetrize"] if symmetrize else []) + \
        ([] if spec.startswith("synthetic:") else ["--features", "64", "--classes", "8"])
    runs = [("host-1t", ["--sample-on", "host", "--threads", "1"]),
            ("device-cpu-1t", ["--sample-on", "device", "--threads", "1"])]
    if cuda:
        runs.append(("device-cuda", ["--sample-on", "device", "--backend", "nccl"]))
    for name, options in SAMPLERS.items():
        flags = [f"--{key.replace('_', '-')}={value}" for key, value in options.items()]
        for label, extra in runs:
            with tempfile.TemporaryDirectory() as scratch:
                metrics = Path(scratch) / "m.jsonl"
                command = [sys.executable, "-m", "distgcn", "train", *graph, "--partition", "random",
                           "--hidden", "64", "--epochs", "2", "--sampler", name, "--batch-size", str(batch_size),
                           *flags, "--batches-per-epoch", str(steps), "--norm-samples", "10", "--quiet",
                           "--metrics", str(metrics), *extra]
                if label == "device-cuda":
                    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                               "-m", *command[2:]]
                proc = subprocess.run(command, capture_output=True, text=True, timeout=1800)
                if proc.returncode != 0:
                    raise SystemExit(f"{' '.join(command)}: {proc.stderr.strip().splitlines()[-1:]}")
                last = [json.loads(line) for line in metrics.read_text().splitlines()][-1]["iterations"]
            row = {"sampler": name, "way": label, "steps": steps,
                   "sample_ms": round(statistics.median(it["sample_s"] for it in last) * 1e3, 3),
                   "step_ms": round(statistics.median(it["batch_s"] for it in last) * 1e3, 3),
                   "sample_share": round(statistics.median(it["sample_s"] / it["batch_s"] for it in last), 3)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=[f"{SLASHDOT}", RMAT],
                        help="graph specs as train --graph takes them (a SNAP file is symmetrized)")
    parser.add_argument("--batch-size", type=int, default=8000)
    parser.add_argument("--rw-batch-sizes", type=int, nargs="*", default=[],
                        help="also rw alone at these batch sizes (many walkers: where grouping by transit may pay)")
    parser.add_argument("--batches", type=int, default=10, help="timed batches per sampler and way")
    parser.add_argument("--train-steps", type=int, default=0, help="also the share of a step (0: skip)")
    parser.add_argument("--no-cuda", action="store_true", help="leave the GPU out even where one is visible")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write (its folder is made)")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.no_cuda
    results = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
               "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                           "gpu": torch.cuda.get_device_name() if cuda else None, "loadavg_start": os.getloadavg()},
               "graphs": {}}
    for spec in args.graphs:
        symmetrize = not spec.startswith("synthetic:")
        entry = {"throughput": throughput(spec, symmetrize, args.batch_size, args.batches, cuda, args.rw_batch_sizes)}
        if args.train_steps:
            entry["step_share"] = step_shares(spec, symmetrize, args.batch_size, args.train_steps, cuda)
        results["graphs"][spec] = entry
    results["dependent_step_us"] = {device: dependent_step_us(device) for device in ["cpu"] + (["cuda"] if cuda else [])}
    print(f"one dependent step (index + read back): {results['dependent_step_us']} µs", flush=True)
    results["machine"]["loadavg_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    for spec, entry in results["graphs"].items():
        print(f"\n{Path(spec).name}\n\n| sampler | N | way | mean \\|S\\| | nnz(Â[S, S]) | sample | sample + cut "
              "| vertices/s | entries/s |\n|---|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in entry["throughput"]:
            print(f"| {r['sampler']} | {r['batch_size']:,} | {r['way']} | {r['mean_vertices']:,.0f} | "
                  f"{r['mean_entries']:,.0f} | "
                  f"{r['sample_ms']:.2f} ms | {r['sample_and_cut_ms']:.2f} ms | {r['vertices_per_s']:,} | "
                  f"{r['entries_per_s']:,} |")
        for r in entry.get("step_share", []):
            print(f"| {r['sampler']} | {r['way']} | step {r['step_ms']:.2f} ms | sampling {r['sample_ms']:.2f} ms "
                  f"| share {r['sample_share']:.3f} |")


if __name__ == "__main__":
    main()
