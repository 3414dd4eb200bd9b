"""Reading graph files: candidate parsers on one SNAP edge list and the same graph as Matrix Market, plain and gzip.

Each candidate runs in its own child process (so its peak RSS is its own), after
a warm-up on a tiny file (imports, numba's compile or cache load), and reports
the seconds to turn the file into integer arrays. MB/s counts the bytes of the
file as stored (for .gz: the compressed bytes; the decompressed size is shown
too). Files are written once under /tmp with a seeded RNG and reused.

    python benchmarks/read_graph.py                       # 10^7 edges, every candidate
    python benchmarks/read_graph.py --edges 1000000 --only scan,before
    python benchmarks/read_graph.py --snap ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz

pyarrow and pandas are not dependencies of distgcn; their rows say "not installed" unless they can be imported
(e.g. ``pip install --target /tmp/bench-site pyarrow pandas`` and ``PYTHONPATH=/tmp/bench-site:.``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

SNAP_CANDIDATES = ["gunzip_only", "before", "scan", "load_snap", "loadtxt", "pandas_c", "pandas_pyarrow", "pyarrow"]
MTX_CANDIDATES = ["gunzip_only", "mmread_1thread", "load_mtx"]
DESCRIPTIONS = {
    "gunzip_only": "the floor for .gz: Python's gzip module decompressing in 16 MiB blocks, nothing parsed",
    "before": "distgcn before: whole file in memory, numpy tokenizer (_text.tokenize_ints)",
    "scan": "distgcn now: streamed blocks, numba scanner (snap.read_edge_ids)",
    "load_snap": "distgcn load_snap: read_edge_ids + id remap + CSR",
    "loadtxt": "numpy.loadtxt(dtype=int64, comments=#,%)",
    "pandas_c": "pandas.read_csv(engine='c', sep=r'\\s+', comment='#')",
    "pandas_pyarrow": "pandas.read_csv(engine='pyarrow', sep='\\t', skiprows=header)",
    "pyarrow": "pyarrow.csv.read_csv(delimiter='\\t', skip_rows=header, use_threads=False)",
    "mmread_1thread": "scipy.io.mmread (fast_matrix_market), 1 thread",
    "load_mtx": "distgcn load_matrix_market: header checks + mmread (1 thread) + CSR",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=int, default=10**7)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/distgcn-read-graph"))
    parser.add_argument("--snap", type=Path, help="measure this SNAP file instead of writing one")
    parser.add_argument("--only", help="comma-separated candidates (default: all)")
    parser.add_argument("--no-gzip", action="store_true", help="skip the .gz files")
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds over all candidates, interleaved; the table shows the fastest and the median")
    parser.add_argument("--child", nargs=2, metavar=("CANDIDATE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child[0], Path(args.child[1]))))
        return
    only = set(args.only.split(",")) if args.only else None
    files = [(args.snap, SNAP_CANDIDATES)] if args.snap else write_files(args.dir, args.edges, args.seed,
                                                                         not args.no_gzip)
    runs = [(path, c) for path, candidates in files for c in candidates if only is None or c in only]
    runs = [(path, c) for path, c in runs if c != "gunzip_only" or path.name.endswith(".gz")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {args.repeats} round(s), load average before: {load_average()}",
          flush=True)
    results: dict[tuple[Path, str], list[dict]] = {run: [] for run in runs}
    for _ in range(args.repeats):
        for run in runs:
            results[run].append(run_in_child(*run))
    print("| file | MB stored (decompressed) | candidate | seconds, fastest (median) | MB/s stored, fastest | "
          "MB/s decompressed | edges | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for (path, candidate), found in results.items():
        print(row(path, candidate, found))
    print(f"# load average after: {load_average()}")
    for name in sorted({c for _, c in runs}):
        print(f"# {name}: {DESCRIPTIONS[name]}")


def run_in_child(path: Path, candidate: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", candidate, str(path)], capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        return {"skipped": "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:80]}
    return json.loads(proc.stdout)


def row(path: Path, candidate: str, found: list[dict]) -> str:
    stored = path.stat().st_size / 1e6
    unpacked = decompressed_bytes(path) / 1e6 if path.name.endswith(".gz") else stored
    size = f"{stored:.1f}" + (f" ({unpacked:.1f})" if path.name.endswith(".gz") else "")
    if any("skipped" in f for f in found):
        return f"| {path.name} | {size} | {candidate} | {found[0]['skipped']} | | | | |"
    seconds = sorted(f["seconds"] for f in found)
    fastest, median = seconds[0], seconds[len(seconds) // 2]
    return (f"| {path.name} | {size} | {candidate} | {fastest:.2f} ({median:.2f}) | {stored / fastest:.0f} | "
            f"{unpacked / fastest:.0f} | {found[0]['edges']} | {max(f['peak_rss_kib'] for f in found) / 1024:.0f} |")


def run_child(candidate: str, path: Path) -> dict:
    """Warm up on a tiny file of the same kind, then time the real one."""
    try:
        read = READERS[candidate]
        tiny = Path(tempfile.gettempdir()) / f"distgcn-read-graph-tiny-{os.getpid()}-{path.name}"
        write_tiny(tiny)
        read(tiny)
    except ImportError as e:
        return {"skipped": f"not installed ({e.name})"}
    finally:
        tiny.unlink(missing_ok=True)
    start = time.perf_counter()
    edges = read(path)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "edges": edges, "peak_rss_kib": peak_rss_kib()}


def peak_rss_kib() -> int:
    """This process's own peak (VmHWM): getrusage's ru_maxrss keeps the parent's peak across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def leading_comment_lines(path: Path) -> int:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        count = 0
        for line in f:
            if not line.startswith((b"#", b"%")):
                return count
            count += 1
    return count


def read_gunzip_only(path: Path) -> int:
    with gzip.open(path, "rb") as f:
        while f.read(16 << 20):
            pass
    return 0


def read_before(path: Path) -> int:
    from distgcn.data._text import read_bytes, tokenize_ints

    return len(tokenize_ints(read_bytes(path), path, comment=b"#%").values) // 2


def read_scan(path: Path) -> int:
    from distgcn.data.snap import read_edge_ids

    return len(read_edge_ids(path)[0])


def read_load_snap(path: Path) -> int:
    from distgcn.data.snap import load_snap

    return load_snap(path).adj.nnz


def read_loadtxt(path: Path) -> int:
    return len(np.loadtxt(path, dtype=np.int64, comments=("#", "%"), ndmin=2))


def read_pandas_c(path: Path) -> int:
    import pandas as pd

    return len(pd.read_csv(path, sep=r"\s+", comment="#", header=None, dtype=np.int64, engine="c"))


def read_pandas_pyarrow(path: Path) -> int:
    import pandas as pd
    import pyarrow

    pyarrow.set_cpu_count(1)
    return len(pd.read_csv(path, sep="\t", skiprows=leading_comment_lines(path), header=None, dtype=np.int64,
                           engine="pyarrow"))


def read_pyarrow(path: Path) -> int:
    import pyarrow
    import pyarrow.csv as csv

    pyarrow.set_cpu_count(1)
    table = csv.read_csv(path, read_options=csv.ReadOptions(use_threads=False, autogenerate_column_names=True,
                                                            skip_rows=leading_comment_lines(path)),
                         parse_options=csv.ParseOptions(delimiter="\t"),
                         convert_options=csv.ConvertOptions(column_types={"f0": pyarrow.int64(),
                                                                          "f1": pyarrow.int64()}))
    return table.num_rows


def read_mmread(path: Path) -> int:
    import scipy.io
    import scipy.io._fast_matrix_market as fmm

    fmm.PARALLELISM = 1  # the module's documented thread setting (threadpoolctl sets the same variable)
    return scipy.io.mmread(str(path)).nnz


def read_load_mtx(path: Path) -> int:
    import scipy.io._fast_matrix_market as fmm

    from distgcn.data.matrix_market import load_matrix_market

    fmm.PARALLELISM = 1
    return load_matrix_market(path).adj.nnz


READERS: dict[str, Callable[[Path], int]] = {
    "gunzip_only": read_gunzip_only, "before": read_before, "scan": read_scan, "load_snap": read_load_snap,
    "loadtxt": read_loadtxt,
    "pandas_c": read_pandas_c, "pandas_pyarrow": read_pandas_pyarrow, "pyarrow": read_pyarrow,
    "mmread_1thread": read_mmread, "load_mtx": read_load_mtx,
}


def write_files(directory: Path, edges: int, seed: int, with_gzip: bool) -> list[tuple[Path, list[str]]]:
    """The SNAP file and the same graph as .mtx (1-based), plus .gz copies; written once, then reused."""
    directory.mkdir(parents=True, exist_ok=True)
    n = max(2, edges * 2 // 5)  # average degree 5, SNAP-like id range
    snap = directory / f"rand-{edges}-s{seed}.txt"
    mtx = snap.with_suffix(".mtx")
    if not (snap.exists() and mtx.exists()):
        src, dst = np.random.default_rng(seed).integers(0, n, size=(2, edges))
        with open(snap, "w") as s, open(mtx, "w") as m:
            s.write(f"# Directed graph: seeded random, seed {seed}\n# Nodes: {n} Edges: {edges}\n"
                    "# FromNodeId\tToNodeId\n")
            m.write(f"%%MatrixMarket matrix coordinate pattern general\n% seeded random, seed {seed}\n"
                    f"{n} {n} {edges}\n")
            for begin in range(0, edges, 10**6):
                pairs = list(zip(src[begin:begin + 10**6].tolist(), dst[begin:begin + 10**6].tolist()))
                s.write("".join(f"{u}\t{v}\n" for u, v in pairs))
                m.write("".join(f"{u + 1} {v + 1}\n" for u, v in pairs))
    files = [(snap, SNAP_CANDIDATES), (mtx, MTX_CANDIDATES)]
    if with_gzip:
        for path, candidates in list(files):
            packed = path.with_name(path.name + ".gz")
            if not packed.exists():
                with open(path, "rb") as f, gzip.open(packed, "wb", compresslevel=6) as g:
                    while block := f.read(16 << 20):
                        g.write(block)
            files.append((packed, candidates))
    return files


def write_tiny(path: Path) -> None:
    """A few lines in the format of ``path`` (SNAP or Matrix Market, plain or gzip)."""
    text = ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3\n" if ".mtx" in path.name
            else "# tiny\n0\t1\n1\t2\n")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write(text)


@cache
def decompressed_bytes(path: Path) -> int:
    with gzip.open(path, "rb") as f:
        return sum(len(block) for block in iter(lambda: f.read(16 << 20), b""))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
