"""One rank's share of a partitioned graph: the hand-off between partitioning and runtime.

A shard holds rows of Â in *local numbering*: columns ``0..n_owned-1`` are the
rank's own rows, columns ``n_owned..n_owned+n_halo-1`` are halo rows received
from other ranks, grouped by sender in increasing rank order and by global id
within a sender. The matrix is therefore stored as two blocks, the owned block
(``n_owned x n_owned``) and the halo block (``n_owned x n_halo``), like the
diagonal/off-diagonal split of a distributed sparse matrix in PETSc.

The communication plan says, for each peer this rank sends to, which owned
rows (local indices) go there, and for each peer it receives from, which slice
of the halo block those rows fill. Files are ``.npz`` read with
``allow_pickle=False``, and carry a SHA-256 of their arrays that the loader checks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.errors import InputError
from distgcn.io.limits import check_npz_arrays
from distgcn.io.npy_files import read_npz

FORMAT_VERSION = 2


@dataclass
class Shard:
    """Everything one rank needs to train, and nothing more."""

    rank: int
    nparts: int
    n_global: int
    num_classes: int
    partition_id: str
    """Identifies the partition (graph fingerprint + part vector) that the shard belongs to."""
    graph_fingerprint: str
    """The graph's :meth:`~distgcn.data.graph.Graph.fingerprint`, so a checkpoint can name a wrong graph as such."""
    global_ids: np.ndarray
    """int64 [n_owned]: global vertex id of each owned row, in local row order (not sorted: see distgcn/shard/cut.py)."""
    halo_global_ids: np.ndarray
    """int64 [n_halo]: global id of each halo row, grouped by sender."""
    owned_block: sp.csr_matrix
    """n_owned x n_owned rows of Â restricted to owned columns."""
    halo_block: sp.csr_matrix
    """n_owned x n_halo rows of Â restricted to halo columns."""
    send_peers: np.ndarray
    """int64 [k]: ranks this rank sends rows to, increasing."""
    send_offsets: np.ndarray
    """int64 [k+1]: send_index[send_offsets[i]:send_offsets[i+1]] go to send_peers[i]."""
    send_index: np.ndarray
    """int64: local indices of owned rows to send, concatenated per peer."""
    recv_peers: np.ndarray
    """int64 [m]: ranks this rank receives halo rows from, increasing."""
    recv_offsets: np.ndarray
    """int64 [m+1]: halo rows recv_offsets[i]:recv_offsets[i+1] come from recv_peers[i]."""
    features: np.ndarray
    """float [n_owned, F]."""
    labels: np.ndarray
    """int64 [n_owned], -1 where unknown."""
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray

    @property
    def n_owned(self) -> int:
        return int(self.global_ids.shape[0])

    @property
    def n_halo(self) -> int:
        return int(self.halo_global_ids.shape[0])

    # ---- serialization -------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat, pickle-free arrays (also used to ship shards over MPI)."""
        out: dict[str, np.ndarray] = {"format_version": np.array(FORMAT_VERSION)}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, sp.csr_matrix):
                out[f"{f.name}.indptr"] = value.indptr.astype(np.int64, copy=False)
                out[f"{f.name}.indices"] = value.indices.astype(np.int64, copy=False)
                out[f"{f.name}.data"] = value.data
                out[f"{f.name}.shape"] = np.array(value.shape, dtype=np.int64)
            elif isinstance(value, np.ndarray):
                out[f.name] = value
            else:
                out[f.name] = np.array(value)
        out["checksum"] = np.array(_checksum(out))
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], source: str = "shard") -> Shard:
        if "checksum" not in arrays or "format_version" not in arrays:
            raise InputError("not a distgcn shard (no checksum or format_version)", path=source)
        if int(arrays["format_version"]) != FORMAT_VERSION:
            raise InputError(
                f"shard format version {int(arrays['format_version'])}, expected {FORMAT_VERSION} "
                "(written by another distgcn release: run 'distgcn partition' again)",
                path=source,
            )
        stored = str(arrays["checksum"])
        body = {k: v for k, v in arrays.items() if k != "checksum"}
        if _checksum(body) != stored:
            raise InputError("shard is corrupt (checksum mismatch)", path=source)
        kwargs = {}
        try:
            for f in fields(cls):
                if f"{f.name}.indptr" in arrays:
                    shape = tuple(int(x) for x in arrays[f"{f.name}.shape"])
                    kwargs[f.name] = sp.csr_matrix(
                        (arrays[f"{f.name}.data"], arrays[f"{f.name}.indices"], arrays[f"{f.name}.indptr"]),
                        shape=shape,
                    )
                elif f.type in ("int",):
                    kwargs[f.name] = int(arrays[f.name])
                elif f.type in ("str",):
                    kwargs[f.name] = str(arrays[f.name])
                else:
                    kwargs[f.name] = arrays[f.name]
        except KeyError as exc:
            raise InputError(f"shard lacks the array {exc.args[0]!r}", path=source) from None
        except (TypeError, ValueError) as exc:  # an array of the wrong shape or type for its field
            raise InputError(f"shard holds a malformed array ({exc})", path=source) from None
        return cls(**kwargs)

    def save(self, path: str | Path) -> str:
        """Write the shard; returns its checksum."""
        arrays = self.to_arrays()
        with open(path, "wb") as fh:
            np.savez(fh, **arrays)
        return str(arrays["checksum"])

    @classmethod
    def load(cls, path: str | Path) -> Shard:
        path = Path(path)
        return cls.from_arrays(read_arrays(path), source=str(path))


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a shard file, unverified (:meth:`Shard.from_arrays` checks them)."""
    if not path.is_file():
        raise InputError("shard file not found", path=path)
    check_npz_arrays(path)
    try:
        arrays = read_npz(path)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read shard ({exc})", path=path) from None
    except Exception as exc:  # zipfile.BadZipFile and friends
        raise InputError(f"cannot read shard ({type(exc).__name__}: {exc})", path=path) from None
    return arrays


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        h.update(key.encode())
        h.update(str(value.dtype).encode())
        h.update(str(value.shape).encode())
        h.update(value.reshape(-1).view(np.uint8))  # its bytes, read in place (tobytes would copy them)
    return h.hexdigest()
