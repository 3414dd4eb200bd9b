"""Predicting one rank's peak memory from its shard's sizes and the model, before training.

A graph too big for one GPU is trained by adding ranks until every rank's
share fits; this model says how many that takes without trying. It counts
the bytes that the trainer's own code allocates (not the runtime: torch,
CUDA or MPI libraries, :mod:`distgcn.memory.baseline`), term by term, following trainer.py, spmm.py,
halo.py, model.py and dropout.py:

- the shard as loaded (host memory, kept for the whole run);
- the local Â in the kernel's form: the owned block, one halo block per
  sender (each with its own row pointer), int32 indices where they fit
  (scipy, numba) or int64 (torch, which also builds each halo block's
  transpose on the first backward pass); the owned block's transpose only
  where it is not its own (a directed graph; counted unless known);
- features, labels, masks, the send index;
- weights, their gradients and the optimizer state;
- halo and send buffers, one pair per distinct width that crosses ranks:
  the whole halo, or with ``train --halo-window K`` K slots of the largest
  message each way;
- activations: what autograd keeps from the training forward pass, plus the
  largest transient (a layer's products and the kernel's temporary), or the
  backward pass's gradients; for the CPU GCN the most alive at once as the
  step's layers allocate and free them (nn/model.py). Dropout keeps no mask on
  the CPU, and a layer that multiplies dropout(H) by W keeps H, not
  dropout(H) (dropout.py).

On a GPU every tensor term is device memory and the shard stays on the host.
On a CPU both are in the same memory, and tensors that torch builds without
copying from the shard's arrays (same dtype) are counted once.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distgcn.config import ConfigError, ModelConfig
from distgcn.errors import InputError
from distgcn.io.limits import available_bytes
from distgcn.io.npy_files import read_npy_header, read_npz
from distgcn.kernels import ProductKernel, choose_product
from distgcn.spmm.window import message_buffer_rows

ITEMSIZE = {"float32": 4, "float64": 8}
OPTIMIZER_STATES = {"adam": 2, "sgd": 0}
"""Tensors of a parameter's size that the optimizer keeps (Adam: two moments; SGD without momentum: none)."""
_INDEX = 8  # int64 row pointers, column indices and row lists


@dataclass(frozen=True)
class ShardSizes:
    """The sizes of one rank's shard that memory depends on."""

    rows: int
    halo_rows: int
    nnz_owned: int
    nnz_halo: int
    rows_sent: int
    senders: int
    features: int
    feature_itemsize: int
    adjacency_itemsize: int
    classes: int
    owned_symmetric: bool | None = None
    """Whether the owned block is its own transpose (then no transpose is stored); None: unknown, counted."""
    largest_recv: int | None = None
    """Rows of the largest message this rank receives (and, next, sends): what a halo window's slots hold;
    None: unknown, the whole halo is counted."""
    largest_send: int | None = None
    parts: int = 1
    """Ranks of the job (whether a halo window streams: :func:`distgcn.spmm.window.streams`)."""


def sizes_of(shard) -> ShardSizes:
    """The sizes of a shard already in memory (see :func:`shard_sizes` for one on disk)."""
    return ShardSizes(
        rows=shard.n_owned, halo_rows=shard.n_halo, nnz_owned=shard.owned_block.nnz, nnz_halo=shard.halo_block.nnz,
        rows_sent=int(shard.send_index.shape[0]), senders=int(shard.recv_peers.shape[0]),
        features=int(shard.features.shape[1]), feature_itemsize=shard.features.itemsize,
        adjacency_itemsize=shard.owned_block.data.itemsize, classes=shard.num_classes,
        largest_recv=_largest(shard.recv_offsets), largest_send=_largest(shard.send_offsets),
        parts=int(shard.nparts),
    )


def _largest(offsets: np.ndarray) -> int:
    """Rows of the largest message of a plan's offsets (0 where there is none)."""
    return int(np.diff(offsets).max()) if len(offsets) > 1 else 0


def refuse_if_too_big(predicted: dict[str, int], available: int | None, where: str) -> None:
    """An InputError before training starts if the predicted peak exceeds what the rank has."""
    if available is None or predicted["total"] <= available:
        return
    largest = max((k for k in predicted if k != "total"), key=predicted.__getitem__)
    raise ConfigError("train.hidden", f"the model would need {predicted['total'] / 2**30:.1f} GiB on this rank "
                      f"(largest part: {largest}, {predicted[largest] / 2**30:.1f} GiB) but {where} has "
                      f"{available / 2**30:.1f} GiB available: use more ranks, smaller {{train.hidden}} or float32")


def _npz_headers(path: Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array in an .npz, read from the headers alone (no data)."""
    out = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                with archive.open(name) as fh:
                    header = read_npy_header(fh)
                if header is None:  # 3.0 only for non-ASCII field names, which shards do not have
                    continue
                shape, _fortran, dtype = header
                out[name.removesuffix(".npy")] = (shape, dtype)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read shard ({exc})", path=path) from None
    return out


def shard_sizes(path: str | Path) -> ShardSizes:
    """Sizes of a shard file, without loading its arrays."""
    path = Path(path)
    headers = _npz_headers(path)
    try:
        small = read_npz(path, ["num_classes", "recv_offsets", "send_offsets", "nparts"])
        classes = int(small["num_classes"])
        return ShardSizes(
            rows=headers["global_ids"][0][0], halo_rows=headers["halo_global_ids"][0][0],
            nnz_owned=headers["owned_block.indices"][0][0], nnz_halo=headers["halo_block.indices"][0][0],
            rows_sent=headers["send_index"][0][0], senders=headers["recv_peers"][0][0],
            features=headers["features"][0][1], feature_itemsize=headers["features"][1].itemsize,
            adjacency_itemsize=headers["owned_block.data"][1].itemsize, classes=classes,
            largest_recv=_largest(small["recv_offsets"]), largest_send=_largest(small["send_offsets"]),
            parts=int(small["nparts"]),
        )
    except (KeyError, IndexError) as exc:
        raise InputError(f"not a distgcn shard (lacks {exc})", path=path) from None
    except ValueError as exc:  # num_classes pickled, or not a number
        raise InputError(f"not a distgcn shard ({exc})", path=path) from None


def scipy_index_bytes(sizes: ShardSizes) -> int:
    """Bytes of one index in a scipy CSR block of this shard: int32 where every column and row pointer fits."""
    return 4 if max(sizes.rows + sizes.halo_rows, sizes.nnz_owned + sizes.nnz_halo) < 2**31 else _INDEX


def adjacency_bytes(sizes: ShardSizes, s: int, product: ProductKernel) -> int:
    """Â's blocks in the form ``product`` keeps them (:data:`distgcn.kernels.PRODUCTS`): int32 indices where
    they fit, or int64; the halo blocks' transposes where it builds them."""
    n, h = sizes.rows, sizes.halo_rows
    index = scipy_index_bytes(sizes) if product.int32_indices else _INDEX
    owned = (n + 1) * index + sizes.nnz_owned * (index + s)
    halo = sizes.senders * (n + 1) * index + sizes.nnz_halo * (index + s)
    total = owned + halo
    if not sizes.owned_symmetric:
        total += owned
    if product.builds_transposes:  # each halo block's transpose, built on the first backward pass
        total += (h + sizes.senders) * _INDEX + sizes.nnz_halo * (_INDEX + s)
    return total


def halo_buffer_rows(sizes: ShardSizes, window: int | None) -> int:
    """Rows of the halo and send buffers of one exchanged width: the whole halo, or ``window`` slots of the largest
    message each way where that is fewer (:func:`distgcn.spmm.window.windowed`)."""
    if sizes.largest_recv is None or sizes.largest_send is None:
        return sizes.halo_rows + sizes.rows_sent
    return message_buffer_rows(window, sizes.halo_rows, sizes.rows_sent, sizes.largest_recv, sizes.largest_send)


def predict(sizes: ShardSizes, model: ModelConfig, on_gpu: bool, kernel: str = "auto") -> dict[str, int]:
    """Predicted peak bytes of one rank, by term; ``total`` is what the device (or the CPU process) needs.

    ``kernel``: the local product (``train --spmm-kernel``); ``auto`` is torch's on a GPU, numba's on the CPU.
    The class ``model.conv`` names declares the layer type's terms (:meth:`distgcn.nn.model.LayerStack.memory_terms`,
    docs/models.md): GraphSAGE holds D⁻¹A (Â's pattern less the diagonal, never symmetric) instead of Â; GAT holds
    no kernel copy of Â but its edges as int64 lists. Not counted: the runtime itself (torch, numpy, scipy,
    MPI, numba's kernels), which :mod:`distgcn.memory.baseline` measures.
    """
    from distgcn.nn.registry import (
        model_class,  # imports torch: only when a prediction is made
    )

    s = ITEMSIZE[model.dtype]
    n, h, r = sizes.rows, sizes.halo_rows, sizes.rows_sent
    widths = model.widths(sizes.features, sizes.classes)
    product = choose_product(kernel, "cuda" if on_gpu else "cpu")
    layer_type = model_class(model.conv)
    declared = layer_type.memory_terms(sizes, model, widths, s, on_gpu, lambda blocks: adjacency_bytes(blocks, s,
                                                                                                        product))
    params, exchanged = declared["parameters"], declared["exchanged"]
    adjacency, activations = declared["adjacency"], declared["activations"]
    terms = {
        "adjacency": adjacency,
        "features": n * sizes.features * s,
        "labels_masks": n * (_INDEX + 3),
        "plan": r * _INDEX,
        "parameters": params * s * (2 + OPTIMIZER_STATES[model.optimizer]),
        "halo_buffers": sum(halo_buffer_rows(sizes, model.halo_window) * c * s for c in exchanged),
        "activations": activations,
    }
    if on_gpu:
        terms["total"] = sum(terms.values())
        return terms
    # scipy holds the loaded blocks' row pointers and columns as int32 where they fit (the file's are int64)
    shard = ((n + 1) * 2 + sizes.nnz_owned + sizes.nnz_halo) * scipy_index_bytes(sizes) \
        + (sizes.nnz_owned + sizes.nnz_halo) * sizes.adjacency_itemsize \
        + n * sizes.features * sizes.feature_itemsize + n * (2 * _INDEX + 3) + (h + r) * _INDEX
    shared = (n * sizes.features * s if sizes.feature_itemsize == s else 0) \
        + (sizes.nnz_owned * s if layer_type.keeps_shard_adjacency and product.reads_shard_values
           and sizes.adjacency_itemsize == s else 0) + n * 3 + r * _INDEX
    terms["shard"] = shard - shared
    terms["total"] = sum(terms.values())
    return terms
