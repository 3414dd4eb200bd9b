"""The runtime baseline: what a rank's process holds before any data, added to the prediction for its total.

:func:`distgcn.memory.prediction.predict` counts the arrays distgcn allocates. A rank also holds the
interpreter, torch, numpy and scipy, MPI and numba's compiled kernels, with their allocators: several
hundred MiB that do not depend on the graph, and that a rank of a small graph is mostly made of. ``distgcn
stats`` prints both and their sum.

The baseline is measured, not modelled: the peak resident set of ``distgcn train`` on a graph of a few
thousand vertices less ``stats``' prediction for that rank (``python benchmarks/runtime_baseline.py``). It
is kept here as a constant per device kind, with what it was measured with, rather than measured by
``stats`` itself: a measurement starts a training run (seconds), and ``stats`` runs where the partition is,
often not on the nodes that will train. A GPU rank's device memory beyond its tensors (the CUDA context,
cuBLAS and cuSPARSE workspaces, NCCL's buffers) has not been measured: :data:`GPU` is None, and ``stats``
says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class RuntimeBaseline:
    """A measured baseline: its bytes per rank, what it holds, and how and with what it was measured."""

    bytes: int
    holds: str
    torch: str
    """The torch release it was measured with (its build included: ``2.13.0+cpu``)."""
    measured_with: str
    """The rest of the environment that sets it: Python, MPI library, system."""
    command: str
    result: str
    """The kept output of the measurement, in the source tree."""

    def words(self) -> list[str]:
        """How it was measured, for a legend: with what, by which command, and whether this torch differs."""
        lines = [f"measured with torch {self.torch}, {self.measured_with}: {self.command}"]
        here = installed_torch()
        if here != self.torch:
            lines.append(f"this environment has torch {here or '(none)'}, so its baseline may differ: measure it "
                         "with the same command")
        return lines


CPU = RuntimeBaseline(
    bytes=round(388.2 * 2**20),
    holds="the interpreter, torch, numpy, scipy, MPI and numba's compiled kernels",
    torch="2.13.0+cpu",
    measured_with="Python 3.11, MPICH 5.0, Linux x86_64, one thread per rank",
    command="python benchmarks/runtime_baseline.py",
    result="benchmarks/results/runtime-baseline-cpu.json",
)
"""A CPU rank's baseline: the larger median of one rank alone (386.5 MiB) and two under mpiexec (388.2 MiB)."""

GPU: RuntimeBaseline | None = None
"""A GPU rank's device memory beyond its tensors: not measured (no GPU where the CPU figure was measured)."""


def as_json() -> dict:
    """The baseline per rank as ``stats --json`` reports it: bytes per device kind (None: not measured), and how
    the CPU figure was measured."""
    return {"cpu_bytes": CPU.bytes, "gpu_bytes": None if GPU is None else GPU.bytes, "holds": CPU.holds,
            "torch": CPU.torch, "measured_with": CPU.measured_with, "command": CPU.command}


def installed_torch() -> str | None:
    """The installed torch's version, read from its metadata (without importing torch); None without one."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None
