"""Local compute kernels behind the runtime: sparse × dense products, dense products, keyed dropout, the loss
and argmax passes, and the memory they write into.

The runtime (``training``, ``spmm``), the memory model and the models reach the device kernels through one
object, :func:`kernels_for` (device, ``train --spmm-kernel``), chosen once per device: it builds the sparse
blocks, runs keyed dropout and the logits passes (compiled loops on the CPU, torch's operations elsewhere), warms
its loops up before a rank's arrays exist, and says how its blocks are stored, for the memory model. No caller
names a kernel or imports a kernel module. A new product kernel is a :class:`~distgcn.kernels.sparse.SparseBlock`
subclass and one :data:`PRODUCTS` entry. Every trick of the CPU kernels has a switch (:mod:`distgcn.kernels.tricks`).

This module imports neither torch nor numba: the memory model (``stats --predict``) reads :data:`PRODUCTS`
without them, and the kernels are imported on first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from distgcn.config import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import scipy.sparse as sp
    import torch

    from distgcn.kernels.csr_tensors import CsrTensors
    from distgcn.kernels.sparse import SparseBlock


@dataclass(frozen=True)
class ProductKernel:
    """A local sparse × dense product (``train --spmm-kernel``): its block class, where it runs, and how it stores a
    block (what the memory model counts)."""

    name: str
    block_class: str
    """The :class:`~distgcn.kernels.sparse.SparseBlock` subclass in :mod:`distgcn.kernels.sparse`."""
    cpu_only: bool
    int32_indices: bool
    """Indices stored as int32 where every row pointer and column fits (else int64)."""
    builds_transposes: bool
    """A block's transpose is built and kept on its first transpose product (halo blocks in the backward)."""
    reads_shard_values: bool
    """A block's values are the shard's own array where the dtypes agree (no copy on the CPU)."""
    parallel: bool
    """Products run on every thread given (else on one)."""


PRODUCTS: dict[str, ProductKernel] = {
    "torch": ProductKernel("torch", "TorchBlock", cpu_only=False, int32_indices=False, builds_transposes=True,
                           reads_shard_values=True, parallel=True),
    "scipy": ProductKernel("scipy", "ScipyBlock", cpu_only=True, int32_indices=True, builds_transposes=False,
                           reads_shard_values=False, parallel=False),
    "numba": ProductKernel("numba", "NumbaBlock", cpu_only=True, int32_indices=True, builds_transposes=False,
                           reads_shard_values=False, parallel=True),
}
"""The product kernels ``--spmm-kernel`` names (config.KERNELS: these and ``auto``)."""


def choose_product(choice: str, device: Any = "cpu") -> ProductKernel:
    """``auto``: ``numba`` on the CPU (our loop for products of 8 columns or more, torch's CSR product on int32
    indices below, on every thread given), torch's on a GPU; a CPU-only kernel on a GPU is refused.

    Measured in benchmarks/spmm_kernels.py: from 8 columns our loop was faster than every
    library (at 64 columns several times torch's product and scipy's), and torch's product on int32 indices about
    as fast below. ``device``: a torch device or its type's name.
    """
    device_type = getattr(device, "type", device)
    if choice == "auto":
        return PRODUCTS["numba" if device_type == "cpu" else "torch"]
    product = PRODUCTS[choice]
    if device_type != "cpu" and product.cpu_only:
        raise ConfigError("compute.spmm_kernel", f"{{compute.spmm_kernel}} {choice} runs on the CPU only; the "
                          f"tensors are on {device}")
    return product


class Kernels:
    """The kernels of one device type: its sparse product, and on the CPU the compiled passes of keyed dropout and
    the logits (elsewhere the callers' torch operations run, which give the same bits)."""

    def __init__(self, device_type: str, product: ProductKernel):
        self.device_type = device_type
        self.product = product
        self.compiled = device_type == "cpu"
        """Whether the compiled (numba) passes exist here."""

    @property
    def name(self) -> str:
        """The product kernel's name, as the run header reports it."""
        return self.product.name

    def __repr__(self) -> str:
        return f"Kernels({self.device_type!r}, {self.name!r})"

    # sparse products

    def sparse_block(self, matrix: sp.csr_matrix | CsrTensors, dtype: torch.dtype,
                     device: torch.device) -> SparseBlock:
        """One CSR block in this kernel's form, with its products (:class:`~distgcn.kernels.sparse.SparseBlock`)."""
        from distgcn.kernels import sparse

        return getattr(sparse, self.product.block_class)(matrix, dtype, device)

    def warm_up(self, dtype: np.dtype, hidden: Iterable[int], dropout: bool, transposes: bool) -> None:
        """Compile (or load from numba's cache) the loops a run is likely to call, before its shard is loaded:
        compiled beside a rank's arrays they left ~330 MB more resident (the memory model counts none of it).
        ``hidden``: the model's hidden widths; ``transposes``: halo blocks exist (other ranks), so their transpose
        products too."""
        if not self.compiled:
            return
        from distgcn.kernels import dropout as dropout_kernel
        from distgcn.kernels import logits as logits_kernel
        from distgcn.kernels import sparse

        logits_kernel.compile_now(dtype)
        if dropout:
            dropout_kernel.compile_now(dtype, hidden)
        getattr(sparse, self.product.block_class).warm_up(dtype, hidden, transposes)

    # keyed dropout

    def compiles_dropout(self, x: torch.Tensor) -> bool:
        """Whether keyed dropout of ``x`` runs as the compiled pass (CPU, float32/float64, 2D)."""
        import torch

        from distgcn.kernels import tricks

        return (self.compiled and tricks.TRICKS.compiled_dropout and x.dtype in (torch.float32, torch.float64)
                and x.dim() == 2)

    def masked_scale(self, x: np.ndarray, row_ids: np.ndarray | Any, p: float, key: int, out: np.ndarray) -> None:
        """out = x · keyed mask · 1/(1 - p) (:func:`distgcn.kernels.dropout.masked_scale`)."""
        from distgcn.kernels import dropout as dropout_kernel

        dropout_kernel.masked_scale(x, row_ids, p, key, out)

    def one_pass_product(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether dropout(x) @ weight runs as one compiled pass each way (a narrow weight, compiled dropout)."""
        from distgcn.kernels import tricks
        from distgcn.kernels.dropout import NARROW_PRODUCT_WIDTH

        return (tricks.TRICKS.one_pass_product and self.compiles_dropout(x) and weight.dtype == x.dtype
                and weight.shape[1] <= NARROW_PRODUCT_WIDTH)

    def folds_relu(self, x: torch.Tensor, weight: torch.Tensor, p: float) -> bool:
        """Whether the next layer's one-pass kernels apply the ReLU of ``x`` (they write relu(x) into x itself)."""
        from distgcn.kernels import tricks

        return tricks.TRICKS.relu_folding and p > 0.0 and x.is_contiguous() and self.one_pass_product(x, weight)


    def dropped_product(self, x: np.ndarray, row_ids: np.ndarray, p: float, key: int, weight: np.ndarray,
                        out: np.ndarray, relu: bool = False) -> None:
        """out = (relu?(x) · mask) @ weight in one pass (:func:`distgcn.kernels.dropout.dropped_product`)."""
        from distgcn.kernels import dropout as dropout_kernel

        dropout_kernel.dropped_product(x, row_ids, p, key, weight, out, relu=relu)

    def dropped_product_backward(self, x: np.ndarray, grad: np.ndarray, row_ids: np.ndarray, p: float, key: int,
                                 weight: np.ndarray, want_grad_x: bool, grad_x_out: np.ndarray | None = None,
                                 relu: bool = False) -> tuple[np.ndarray | None, np.ndarray]:
        """Both gradients of :meth:`dropped_product` in one pass
        (:func:`distgcn.kernels.dropout.dropped_product_backward`)."""
        from distgcn.kernels import dropout as dropout_kernel

        return dropout_kernel.dropped_product_backward(x, grad, row_ids, p, key, weight, want_grad_x, grad_x_out,
                                                       relu=relu)

    # the logits passes

    def compiles_logits(self, logits: torch.Tensor) -> bool:
        """Whether the loss and argmax of ``logits`` run as the compiled passes (CPU, float32/float64, 2D)."""
        from distgcn.kernels import logits as logits_kernel
        from distgcn.kernels import tricks

        return self.compiled and tricks.TRICKS.compiled_logits and logits_kernel.compiled(logits)

    def cross_entropies(self, logits: torch.Tensor, labels: torch.Tensor,
                        rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Each picked row's loss and its gradient (:func:`distgcn.kernels.logits.cross_entropies`)."""
        from distgcn.kernels import logits as logits_kernel

        return logits_kernel.cross_entropies(logits, labels, rows)

    def scatter_scaled_rows(self, values: torch.Tensor, scales: torch.Tensor, rows: torch.Tensor | None,
                            out: torch.Tensor) -> torch.Tensor:
        """out = 0, then its rows ``rows`` = values · scales (:func:`distgcn.kernels.logits.scatter_scaled_rows`)."""
        from distgcn.kernels import logits as logits_kernel

        return logits_kernel.scatter_scaled_rows(values, scales, rows, out)

    def predicted_classes(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits.argmax(dim=1)``, as one compiled pass where :meth:`compiles_logits`."""
        if not self.compiles_logits(logits):
            return logits.argmax(dim=1)
        from distgcn.kernels import logits as logits_kernel

        return logits_kernel.predicted_classes(logits)


@cache
def _kernels(device_type: str, product: str) -> Kernels:
    return Kernels(device_type, PRODUCTS[product])


def kernels_for(device: Any = "cpu", choice: str | Kernels = "auto") -> Kernels:
    """The kernels of ``device`` (a torch device or its type's name) with the product ``choice`` names
    (``train --spmm-kernel``: ``auto`` or a :data:`PRODUCTS` name), one object per device type and product;
    a :class:`Kernels` is returned as it is. ConfigError for a CPU-only product on another device."""
    if isinstance(choice, Kernels):
        return choice
    return _kernels(getattr(device, "type", device), choose_product(choice, device).name)


def keep_threshold(p: float) -> int:
    """The 16-bit lane value at and above which keyed dropout keeps an entry (every device's mask uses it)."""
    return min(65535, round(p * 65536))


def cpu_folds_relu(out_width: int, p: float) -> bool:
    """:meth:`Kernels.folds_relu` of a CPU layer in float32 or float64 by its sizes alone (the memory model's
    question: which hidden ReLUs leave their backward to the next layer's one-pass kernels)."""
    from distgcn.kernels import tricks
    from distgcn.kernels.dropout import NARROW_PRODUCT_WIDTH

    flags = tricks.TRICKS
    return (flags.relu_folding and flags.one_pass_product and flags.compiled_dropout and p > 0.0
            and out_width <= NARROW_PRODUCT_WIDTH)
