"""config.MODELS is the one list of models: each line resolves to a LayerStack subclass that declares everything
the trainer, the memory model and checkpoints need of it, and ``--conv``'s choices are its names."""

from __future__ import annotations

import pytest
import torch

from distgcn.config import CONVS, MODELS, TrainConfig
from distgcn.nn.model import LayerStack
from distgcn.nn.registry import build_model, model_class

DECLARED = ("from_config", "aggregation", "memory_terms")
"""What every model must define itself (LayerStack's own raise NotImplementedError)."""


def test_the_conv_choices_are_the_registered_models() -> None:
    assert CONVS == tuple(MODELS)


@pytest.mark.parametrize("conv", sorted(MODELS))
def test_each_registered_model_declares_what_the_pipeline_needs(conv: str) -> None:
    cls = model_class(conv)
    assert issubclass(cls, LayerStack)
    for name in DECLARED:
        assert getattr(cls, name).__func__ is not getattr(LayerStack, name).__func__, f"{conv} lacks {name}"
    model = build_model(TrainConfig(conv=conv, hidden=(4,)), [6, 4, 3], torch.float64)
    assert type(model) is cls and model.widths == [6, 4, 3]


def test_a_model_line_names_its_module_and_class() -> None:
    """A registration that names no class of its module fails where the model is first asked for."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(MODELS, "gcn", "model:NoSuchModel")
        with pytest.raises(AttributeError):
            model_class("gcn")
