"""Is the SpMM loop of this checkout faster than that of another commit? Both in one process, on the same calls.

Separate processes on a shared VM differ by more than most changes to the loop are worth (up to
1.5x between runs of the same code). This script extracts ``distgcn/`` of ``--base`` (a git
revision) into a scratch folder as the package ``distgcn_base``, imports it beside this checkout's ``distgcn``, and
times both ``csr_kernel.add_product`` (written products) in alternating rounds on one graph's Â in RCM order
(benchmarks/matrices.py):

    python benchmarks/spmm_ab.py --graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz --symmetrize \
        --widths 8,16,64 --threads 1 --base HEAD

prints one JSON line per width: each loop's median of its rounds' medians, the ratio this/base
(< 1: this checkout faster), and the largest difference between the two products.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

import numpy as np  # noqa: E402
import torch  # noqa: E402
from matrices import product_arguments, rcm_matrix_on_threads  # noqa: E402
from timing import median_ms  # noqa: E402

from distgcn.kernels import csr as csr_kernel  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]


def import_revision(revision: str, scratch: Path):
    """The CSR loop as it was at ``revision``, imported from the package copied as ``distgcn_base``: its module
    ``kernels/csr.py`` (``csr_kernel.py`` in revisions before the stage packages). The package imports absolutely, so
    the revision's loop uses this checkout's other modules (the LLVM intrinsics among them): only the loop differs."""
    archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", "--format=tar", revision, "distgcn"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(scratch, filter="data")
    (scratch / "distgcn").rename(scratch / "distgcn_base")
    sys.path.insert(0, str(scratch))
    nested = (scratch / "distgcn_base" / "kernels" / "csr.py").exists()
    return importlib.import_module("distgcn_base.kernels.csr" if nested else "distgcn_base.csr_kernel")


def main() -> None:
    parser = product_arguments(__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="the git revision to compare this checkout's loop with")
    args = parser.parse_args()
    a = rcm_matrix_on_threads(args)
    this = subprocess.run(["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "-C", str(REPOSITORY), "diff", "--quiet", "HEAD", "--", "distgcn"]).returncode:
        this += "+uncommitted"  # distgcn/ differs from the commit
    with tempfile.TemporaryDirectory() as scratch:
        kernels = {"base": import_revision(args.base, Path(scratch)), "this": csr_kernel}
        for width in map(int, args.widths.split(",")):
            dense = torch.randn(a.shape[0], width).numpy()
            outs = {name: torch.empty(a.shape[0], width).numpy() for name in kernels}
            bounds: dict[str, dict] = {name: {} for name in kernels}

            def call(name: str) -> None:
                kernels[name].add_product(a.indptr, a.indices, a.data, dense, outs[name], bounds[name],
                                          accumulate=False)

            for _ in range(2):  # compiled, pages touched
                for name in kernels:
                    call(name)
            rounds: dict[str, list[float]] = {name: [] for name in kernels}
            for r in range(args.rounds):
                for name in (("base", "this") if r % 2 else ("this", "base")):  # each first in half the rounds
                    rounds[name].append(median_ms(lambda: call(name), args.repeats))
            ms = {name: float(np.median(times)) for name, times in rounds.items()}
            print(json.dumps({
                "graph": args.graph, "width": width, "threads": args.threads,
                "base": args.base, "this": this, "base_ms": round(ms["base"], 3), "this_ms": round(ms["this"], 3),
                "this_over_base": round(ms["this"] / ms["base"], 3),
                "max_abs_difference": float(np.max(np.abs(outs["this"] - outs["base"]))),
            }), flush=True)

if __name__ == "__main__":
    main()
