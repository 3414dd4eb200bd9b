"""An edge list read and numbered on the ranks of a real MPI job (tests/data/test_distributed_reading.py).

Usage: distributed_read.py OUT.json EDGE_FILE GROUP, GROUP one of ``group`` (the torch-free MPIGroup that
`distgcn partition` runs on), ``mpi`` or ``gloo`` (the training transports). Rank 0 writes each rank's edge count
and n, and the numbered edges of all ranks in rank order.
"""

import json
import sys
from pathlib import Path

import numpy as np

from distgcn.comm.mpi_group import MPIGroup
from distgcn.data.distributed.edge_list import read_edge_range
from distgcn.data.distributed.ids import number_ids

if sys.argv[3] == "group":
    group = MPIGroup()
else:
    from distgcn.comm.transport.setup import make_transport

    group = make_transport(sys.argv[3])
src, dst = read_edge_range(group, Path(sys.argv[2]))
numbered = number_ids(group, src, dst)
gathered = group.allgather_object((len(src), numbered.num_vertices, numbered.arrays[0], numbered.arrays[1]))
if group.rank == 0:
    Path(sys.argv[1]).write_text(json.dumps({
        "edges": [g[0] for g in gathered], "n": [g[1] for g in gathered],
        "src": np.concatenate([g[2] for g in gathered]).tolist(),
        "dst": np.concatenate([g[3] for g in gathered]).tolist()}))
if sys.argv[3] != "group":
    group.close()
