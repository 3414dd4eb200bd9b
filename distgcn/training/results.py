"""What :func:`distgcn.api.train` and :func:`distgcn.api.predict` return: this rank's predictions and
embeddings (and, after training, the metrics and weights).

Each rank holds the outputs of its own rows only (that is the point of
distributing them); :meth:`TrainResult.export` writes them one file per rank,
or gathers them on rank 0 into one file in global vertex order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from distgcn.errors import InputError
from distgcn.io.safe_io import EXPORT, prepare_output_dir, write_npz

if TYPE_CHECKING:
    from distgcn.comm.transport import Transport

T = TypeVar("T")


def on_every_rank(transport: Transport, step: Callable[[], T]) -> T:
    """Run ``step`` on every rank; an InputError on any rank is raised on every rank as an InputError.

    A Python caller gets the exception it can catch; no rank is left waiting in a collective.
    """
    from distgcn.comm.collective import CollectiveInputError, agree

    try:
        return agree(transport, step)
    except CollectiveInputError as exc:
        raise InputError(str(exc)) from None


@dataclass(frozen=True)
class VertexRows:
    """Per-vertex values: row ``i`` of ``values`` belongs to global vertex ``ids[i]``.

    Global ids are row numbers of the graph as loaded (0..n-1, the positions of
    ``parts.npy``); ``graph.vertex_ids[ids]`` gives the ids of the input file.
    """

    ids: np.ndarray
    values: np.ndarray


@dataclass
class RankOutputs:
    """Every layer's output on this rank's rows, from one model's weights: predictions, embeddings, export."""

    ids: np.ndarray
    """int64 [n_owned]: global ids of this rank's rows, increasing."""
    layer_outputs: list[np.ndarray]
    """Output of each layer on this rank's rows, dropout off; the last are the logits."""
    rank: int
    size: int
    transport: Transport = field(repr=False)

    @classmethod
    def of(cls, global_ids: np.ndarray, outputs: list[np.ndarray], transport: Transport) -> RankOutputs:
        """A shard's layer outputs (rows in its local order, e.g. RCM) in increasing id order."""
        by_id = np.argsort(global_ids, kind="stable")
        return cls(ids=global_ids[by_id], layer_outputs=[o[by_id] for o in outputs], rank=transport.rank,
                   size=transport.size, transport=transport)

    @property
    def layers(self) -> int:
        return len(self.layer_outputs)

    def predict(self) -> VertexRows:
        """The predicted class of each of this rank's vertices (argmax of the logits)."""
        return VertexRows(self.ids, self.layer_outputs[-1].argmax(axis=1).astype(np.int64))

    def embeddings(self, layer: int | None = None) -> VertexRows:
        """Output of ``layer`` (1..layers, after ReLU for hidden layers) on this rank's vertices.

        Default: the last hidden layer, the usual node embedding; ``layer=layers`` gives the logits.
        """
        layer = self.layers - 1 if layer is None else layer
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 1 <= layer <= self.layers:
            raise InputError(f"layer must be 1..{self.layers}, got {layer!r}")
        return VertexRows(self.ids, self.layer_outputs[layer - 1])

    def export(self, path: str | Path, *, gather: bool = True, layer: int | None = None,
               all_layers: bool = False) -> Path | None:
        """Write ids, predictions, logits and one layer's embeddings as ``.npz`` (collective: call on every rank).

        ``gather=True``: rank 0 writes the file ``path`` with all vertices in
        increasing id order and returns it; other ranks return None.
        ``gather=False``: ``path`` is a directory (created); each rank writes
        ``rank-RRRRR.npz`` with its own rows and returns that file's path.
        ``all_layers``: also every layer's output, as ``layer_1`` … ``layer_L``.
        """
        arrays = {"ids": self.ids, "predictions": self.predict().values, "logits": self.layer_outputs[-1],
                  "embeddings": self.embeddings(layer).values,
                  "embedding_layer": np.array(self.layers - 1 if layer is None else layer)}
        if all_layers:
            arrays |= {f"layer_{k}": output for k, output in enumerate(self.layer_outputs, 1)}
        if not gather:
            directory = Path(path)

            def write_own() -> Path:
                prepare_output_dir(directory, what="export directory")
                return _save(directory / f"rank-{self.rank:05d}.npz", arrays)

            return on_every_rank(self.transport, write_own)
        if self.rank != 0:
            self.transport.send_object(arrays, dest=0)
            return on_every_rank(self.transport, lambda: None)
        pieces = [arrays] + [self.transport.recv_object(source=r) for r in range(1, self.size)]
        order = np.argsort(np.concatenate([p["ids"] for p in pieces]), kind="stable")
        gathered = {key: np.concatenate([p[key] for p in pieces])[order] for key in arrays if key != "embedding_layer"}
        gathered["embedding_layer"] = arrays["embedding_layer"]
        return on_every_rank(self.transport, lambda: _save(Path(path), gathered))


@dataclass
class TrainResult(RankOutputs):
    """One rank's view of a finished training run (the weights and history are the same on every rank).

    Its outputs are those of the weights it ends with: the last epoch's, or with ``keep_best`` the best one's."""

    history: list[dict] = field(default_factory=list)
    """One record per epoch trained, with the keys of ``--metrics`` (docs/runtime.md)."""
    weights: list[np.ndarray] = field(default_factory=list)
    """Weights of each layer, then biases of each layer, as ``--save-weights`` writes them."""


def _save(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """Atomically, replacing only an earlier export (:mod:`distgcn.io.safe_io`)."""
    return write_npz(path, EXPORT, **arrays)
