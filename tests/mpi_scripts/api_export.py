"""Run under mpiexec: train through the Python API and export gathered and per-rank outputs.

Rank 0 alone loads the graph (the others pass None) and training runs twice:
from that graph, partitioned on rank 0, and from the partition directory
PARTDIR (written beforehand by the test with the same model, preset and seed: the API's default
hypergraph model, whose deterministic preset training on rank 0 takes). Rank 0
writes OUT/losses.json with both runs' losses; the first run is exported to
OUT/gathered.npz and OUT/ranks/rank-RRRRR.npz. tests/system/test_api.py also calls
:func:`export_runs` on in-process ranks (threads), each with its transport.
Usage: api_export.py OUT SPEC PARTDIR EPOCHS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import distgcn
from distgcn.comm.transport import Transport


def export_runs(transport: Transport, out: Path, spec: str, partdir: str, epochs: int) -> None:
    """This rank's part of the two runs and the exports described above."""
    settings = {"epochs": epochs, "dtype": "float64", "threads": 1, "dropout": 0.5, "transport": transport}
    from_graph = distgcn.train(spec if transport.rank == 0 else None, **settings)
    from_graph.export(out / "gathered.npz", gather=True)
    from_graph.export(out / "ranks", gather=False)
    from_directory = distgcn.train(partdir, **settings)
    if transport.rank == 0:
        losses = {"graph": [r["loss"] for r in from_graph.history],
                  "directory": [r["loss"] for r in from_directory.history], "ranks": transport.size}
        (out / "losses.json").write_text(json.dumps(losses))


def main() -> None:
    out, spec, partdir, epochs = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    export_runs(distgcn.default_transport(), out, spec, partdir, epochs)


if __name__ == "__main__":
    main()
