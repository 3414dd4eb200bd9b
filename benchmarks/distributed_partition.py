"""Partitioning in one process, on rank 0 (``--central``) and on the ranks together: time, peak memory per rank,
volume.

Each run is one ``distgcn partition`` command, every process of it under ``/usr/bin/time`` for its peak resident
set; runs alternate in the order given. A run is ``WHERE:MODEL[:PARTITIONER]`` (the partitioner named with
``--partitioner``; default: the model's default where the run happens):

- ``one``: one process (the model's single-process tool: KaMinPar or METIS, Mt-KaHyPar);
- ``central``: P OpenMPI ranks, rank 0 reading and partitioning (``--central``);
- ``ranks``: P OpenMPI ranks reading and partitioning together (PT-Scotch, Zoltan).

The ranks run the Python of ``--site-python``, whose mpi4py is built against the system's OpenMPI
(docs/cluster.md), with that MPI's mpiexec. ``--cap-gib G`` puts every process in a memory cgroup of its own
limited to G GiB (cgroup v1 or v2, as root), as a cluster's per-task memory limit would.

    python benchmarks/distributed_partition.py --graph synthetic:rmat,scale=23,edge_factor=12 \\
        --graph-args "--features 64 --classes 8" --parts 4 --runs one:graph,ranks:graph,ranks:hypergraph \\
        --site-python .venv-site-mpi/bin/python --out RESULTS/distributed-partition-rmat23-p4.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RSS_TAG = "distgcn-bench-peak-rss-kib"
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")


def cgroups(count: int, cap_bytes: int) -> list[Path]:
    """``count`` fresh memory cgroups limited to ``cap_bytes`` each (swap too, where the kernel counts it)."""
    v1 = CGROUP_V1.is_dir()
    base = CGROUP_V1 if v1 else CGROUP_V2
    groups = []
    for k in range(count):
        group = base / f"distgcn-bench-{os.getpid()}-{k}"
        group.mkdir(exist_ok=True)
        (group / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(cap_bytes))
        swap = group / ("memory.memsw.limit_in_bytes" if v1 else "memory.swap.max")
        if swap.exists():
            swap.write_text(str(cap_bytes) if v1 else "0")
        groups.append(group)
    return groups


def remove_cgroup(group: Path, wait_s: float = 30) -> None:
    """Remove a benchmark's cgroup once the processes of a killed run have left it (they take a moment)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"benchmark: could not remove {group} ({exc}); remove it by hand", file=sys.stderr)
                return
            time.sleep(0.2)


def wrapper(directory: Path, groups: list[Path] | None) -> Path:
    """A script that puts this process in its rank's cgroup (if any), then runs the command under time."""
    script = directory / "rank.sh"
    join = ""
    if groups:
        join = (f'groups=({" ".join(shlex.quote(str(g)) for g in groups)})\n'
                'echo $$ > "${groups[${OMPI_COMM_WORLD_RANK:-0}]}/cgroup.procs"\n')
    script.write_text(f'#!/bin/bash\n{join}exec /usr/bin/time -f "{RSS_TAG} %M" "$@"\n')
    script.chmod(0o755)
    return script


def run(where: str, model: str, partitioner: str | None, args: argparse.Namespace, script: Path, out: Path) -> dict:
    command = [str(script), args.site_python, "-m", "distgcn", "partition", args.graph, *shlex.split(args.graph_args),
               "--parts", str(args.parts), "--model", model, "--out", str(out), "--force", "--quiet",
               *(["--partitioner", partitioner] if partitioner else [])]
    if where != "one":
        command = [shutil.which("mpiexec.openmpi") or "mpiexec.openmpi", "-n", str(args.parts), *command]
        if where == "central":
            command.append("--central")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    peaks = [int(k) * 1024 for k in re.findall(rf"{RSS_TAG} (\d+)", proc.stderr)]
    record = {"where": where, "model": model, "asked": partitioner, "returncode": proc.returncode, "wall_s": round(wall, 2),
              "peak_rss_bytes": peaks, "largest_peak_gib": round(max(peaks, default=0) / 2**30, 3),
              "errors": [line for line in proc.stderr.splitlines() if "error" in line.lower()][:5]}
    meta_path = out / "meta.json"
    if proc.returncode == 0 and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        record.update(partitioner=meta["partitioner"], partition_s=round(meta["partition_s"], 2),
                      volume=meta["volume"]["total"], imbalance=round(meta["imbalance"], 4),
                      nnz=meta["graph"]["nnz"], n=meta["graph"]["n"])
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--graph-args", default="", help="more partition arguments (features, --symmetrize)")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--runs", default="one:graph,ranks:graph,one:hypergraph,ranks:hypergraph")
    parser.add_argument("--site-python", default=str(ROOT / ".venv-site-mpi" / "bin" / "python"))
    parser.add_argument("--cap-gib", type=float, help="a memory cgroup of this many GiB per process")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", required=True, help="results JSON")
    args = parser.parse_args()
    runs = [(*r.split(":"), None)[:3] for r in args.runs.split(",")]
    load = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as scratch:
        groups = cgroups(args.parts, int(args.cap_gib * 2**30)) if args.cap_gib else None
        try:
            script = wrapper(Path(scratch), groups)
            for repeat in range(args.repeats):
                for where, model, partitioner in runs:
                    out = Path(scratch) / f"{where}-{model}-{partitioner}"
                    record = run(where, model, partitioner, args, script, out)
                    record["repeat"] = repeat
                    print(json.dumps(record), flush=True)
                    results.append(record)
                    shutil.rmtree(out, ignore_errors=True)
        finally:
            for group in groups or []:
                remove_cgroup(group)
    report = {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "graph": args.graph,
              "graph_args": args.graph_args, "parts": args.parts, "cap_gib": args.cap_gib,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "loadavg_before": load},
              "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
