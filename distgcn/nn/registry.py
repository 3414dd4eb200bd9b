"""The models ``train --conv`` chooses from: each is one module of this package and one line of ``config.MODELS``.

The class a name stands for is imported on first use, so that naming the choices (the command line, ``stats``)
imports no model; the class declares everything the rest of the pipeline needs of it
(:class:`distgcn.nn.model.LayerStack`).
"""

from __future__ import annotations

from importlib import import_module

import torch

from distgcn.config import MODELS, TrainConfig
from distgcn.nn.model import LayerStack


def model_class(conv: str) -> type[LayerStack]:
    """The class ``conv`` (``train --conv``) names in ``config.MODELS``."""
    module, _, name = MODELS[conv].partition(":")
    return getattr(import_module(f"{__package__}.{module}"), name)


def build_model(config: TrainConfig, widths: list[int], dtype: torch.dtype) -> LayerStack:
    """The model ``config.conv`` names (``train --conv``), with its weights drawn from ``config.seed``."""
    return model_class(config.conv).from_config(config, widths, dtype)
