"""Single-process peers for ``benchmarks/bench.py``: the same GCN written the ordinary way.

``csr``: plain PyTorch, Â as a torch sparse CSR tensor, ``F.dropout``.
``pyg``: PyTorch Geometric's ``GCNConv`` on an edge list with Â's weights
(normalization precomputed, as ``cached=True`` would).
``pyg-sparse``: ``GCNConv`` on Â as a torch sparse CSR ``adj_t``.

Each epoch is one training step plus one evaluation forward pass, as
``distgcn train`` times its epochs, so ``epoch_s`` compares like with like.
Run one peer per process (bench.py does) so that its peak RSS is its own:

    python benchmarks/peers.py --peer csr --graph SPEC --symmetrize --features 64 --classes 8 --out r.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from distgcn.config import TrainConfig
from distgcn.data.prepare import GraphOptions, prepare_graph


class CsrGCN(nn.Module):
    """H' = Â (dropout(H) W) + b with ReLU between layers; Â a torch sparse CSR tensor."""

    def __init__(self, widths: list[int], dropout: float, a_hat: torch.Tensor):
        super().__init__()
        self.a_hat = a_hat
        self.dropout = dropout
        self.linears = nn.ModuleList(nn.Linear(i, o) for i, o in zip(widths[:-1], widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer, linear in enumerate(self.linears):
            h = F.dropout(h, self.dropout, self.training)
            h = self.a_hat @ linear(h)
            if layer != len(self.linears) - 1:
                h = torch.relu(h)
        return h


class PygGCN(nn.Module):
    """The same model from ``torch_geometric.nn.GCNConv`` layers (normalize=False: Â is given)."""

    def __init__(self, widths: list[int], dropout: float, adjacency: tuple):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.adjacency = adjacency
        self.dropout = dropout
        self.convs = nn.ModuleList(GCNConv(i, o, normalize=False) for i, o in zip(widths[:-1], widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer, conv in enumerate(self.convs):
            h = F.dropout(h, self.dropout, self.training)
            h = conv(h, *self.adjacency)
            if layer != len(self.convs) - 1:
                h = torch.relu(h)
        return h


def build_model(peer: str, widths: list[int], dropout: float, a_hat) -> nn.Module:
    coo = a_hat.tocoo()
    csr = torch.sparse_csr_tensor(torch.from_numpy(a_hat.indptr.astype(np.int64)),
                                  torch.from_numpy(a_hat.indices.astype(np.int64)),
                                  torch.from_numpy(a_hat.data.astype(np.float32)), size=a_hat.shape)
    if peer == "csr":
        return CsrGCN(widths, dropout, csr)
    if peer == "pyg":
        # A[v, u] != 0 means v aggregates u: PyG's messages flow source (row 0) -> target (row 1).
        edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
        return PygGCN(widths, dropout, (edge_index, torch.from_numpy(coo.data.astype(np.float32))))
    if peer == "pyg-sparse":
        return PygGCN(widths, dropout, (csr,))  # adj_t[target, source] is Â itself
    raise ValueError(f"unknown peer {peer!r}")


def run_peer(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    options = GraphOptions(spec=args.graph, symmetrize=args.symmetrize, features=args.features,
                           classes=args.classes, seed=args.seed)
    graph, a_hat = prepare_graph(options)
    config = TrainConfig(layers=args.layers, hidden=tuple(args.hidden))
    widths = config.widths(graph.features.shape[1], int(graph.labels.max()) + 1)
    x = torch.from_numpy(np.ascontiguousarray(graph.features, dtype=np.float32))
    y = torch.from_numpy(graph.labels.astype(np.int64))
    train = torch.from_numpy(np.asarray(graph.train_mask, dtype=bool))
    model = build_model(args.peer, widths, args.dropout, a_hat)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    times = []
    for _ in range(args.warmup + args.epochs):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x)[train], y[train])
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            model(x).argmax(dim=1)
        times.append(time.perf_counter() - start)
    return {"peer": args.peer, "widths": widths, "epoch_times": times[args.warmup:], "final_loss": float(loss)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, choices=["csr", "pyg", "pyg-sparse"])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--symmetrize", action="store_true")
    parser.add_argument("--features", type=int)
    parser.add_argument("--classes", type=int)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=lambda s: [int(w) for w in s.split(",")], default=[16])
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.out, "w") as fh:
        json.dump(run_peer(args), fh)


if __name__ == "__main__":
    main()
