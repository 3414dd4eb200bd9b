"""torch's Adam and SGD, run without the torch.compile guards that torch.optim wraps their methods in.

torch.optim guards every public method of an optimizer for ``torch.compile``:
``step`` by a wrapper that imports ``torch._dynamo`` on every call, and
``zero_grad``, ``add_param_group`` (called by the constructor), ``state_dict``
and ``load_state_dict`` by ``torch._disable_dynamo``, which imports it on
their first call. That import (sympy, torch.fx, the compiler's tracer) takes
about 3 seconds on a 2-core machine, in every training process, although
distgcn never compiles anything. :class:`Adam` and :class:`SGD` are torch's
classes with those methods calling the very functions torch guards, so

- every step is torch's own arithmetic, bit for bit (its single-tensor
  formulas on CPU, its foreach kernels on GPU, as torch chooses);
- ``state_dict()`` is torch's format: a checkpoint written by either class
  resumes in the other;
- they are ``torch.optim.Adam`` / ``torch.optim.SGD`` instances, so torch's
  learning-rate schedulers and step hooks work on them.

What is lost is only the guard's purpose: a function compiled with
``torch.compile`` that calls these methods would trace into them instead of
skipping them. tests/training/test_optimizers.py holds the equality, the state
round trips both ways, and that a training process never imports
``torch._dynamo``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch


def _unguarded(method: Callable[..., Any]) -> Callable[..., Any]:
    """The function torch.optim's compile guard wraps around ``method``, or ``method`` itself if there is none.

    The only place this module relies on how torch.optim is built: its guards
    (``torch._disable_dynamo``, ``_use_grad_for_differentiable``, and the
    profiling hook ``Optimizer._patch_step_function`` puts around a class's
    ``step``) are ``functools.wraps`` wrappers, so ``inspect.unwrap`` reaches
    the function they guard. A torch that wraps otherwise leaves no
    ``__wrapped__``: the guarded method itself is returned, still correct,
    only with the import back (the test of the training process's modules
    then fails and says so).
    """
    return inspect.unwrap(method)


_ZERO_GRAD = _unguarded(torch.optim.Optimizer.zero_grad)
_ADD_PARAM_GROUP = _unguarded(torch.optim.Optimizer.add_param_group)
_STATE_DICT = _unguarded(torch.optim.Optimizer.state_dict)
_LOAD_STATE_DICT = _unguarded(torch.optim.Optimizer.load_state_dict)


class _Unguarded(torch.optim.Optimizer):
    """The public methods of the torch optimizer class after this one in the MRO, without their compile guards.

    A subclass sets ``_torch_step`` to its torch class's ``step``, unguarded.
    Its own ``step`` is then wrapped by torch's profiling hook on first
    construction, as torch does for every optimizer class, so step hooks and
    profiler records stay.
    """

    _torch_step: Callable[..., Any]

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One step of torch's algorithm, in the grad mode torch's guard sets (enabled only if differentiable)."""
        with torch.set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            return self._torch_step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def state_dict(self) -> dict[str, Any]:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _LOAD_STATE_DICT(self, state_dict)


class Adam(_Unguarded, torch.optim.Adam):
    """``torch.optim.Adam``, same constructor, arithmetic and state; its methods never import torch._dynamo."""

    _torch_step = _unguarded(torch.optim.Adam.step)


class SGD(_Unguarded, torch.optim.SGD):
    """``torch.optim.SGD``, same constructor, arithmetic and state; its methods never import torch._dynamo."""

    _torch_step = _unguarded(torch.optim.SGD.step)
