"""The models ``train --conv`` chooses from: each is one module of this package and one line here."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from distgcn.config import TrainConfig
from distgcn.nn.gat import GAT
from distgcn.nn.model import GCN
from distgcn.nn.sage import GraphSAGE

MODELS: dict[str, Callable[[TrainConfig, list[int], torch.dtype], nn.Module]] = {
    "gcn": lambda c, widths, dtype: GCN(widths, c.dropout, c.seed, dtype, c.first_layer),
    "sage": lambda c, widths, dtype: GraphSAGE(widths, c.dropout, c.seed, dtype, root_weight=c.root_weight),
    "gat": lambda c, widths, dtype: GAT(widths, c.dropout, c.seed, dtype, heads=c.heads, output_heads=c.output_heads,
                                        attention_dropout=c.attention_dropout),
}


def build_model(config: TrainConfig, widths: list[int], dtype: torch.dtype) -> nn.Module:
    """The model ``config.conv`` names (``train --conv``), with its weights drawn from ``config.seed``."""
    return MODELS[config.conv](config, widths, dtype)
