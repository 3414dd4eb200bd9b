"""Model selection in a plain single-process loop: the oracle for ``--keep-best``, ``--patience`` and the schedules.

It trains with tests/oracles/reference.py's loop and takes every decision with torch's own schedulers
(``StepLR``, ``CosineAnnealingLR``, ``ReduceLROnPlateau`` with ``threshold=0``) and a best-epoch and patience
count written here, apart from distgcn/training/selection.py.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from reference import reference_epochs


@dataclass
class Selected:
    lrs: list[float] = field(default_factory=list)
    """The rate each epoch trained with."""
    val_acc: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epochs: list[int] = field(default_factory=list)
    """The best epoch so far, after each epoch."""
    last_epoch: int = 0
    best_weights: list[np.ndarray] = field(default_factory=list)


def reference_select(a_hat, features, labels, train_mask, val_mask, *, metric: str, schedule: str = "constant",
                     patience: int | None = None, lr_step: int | None = None, lr_gamma: float = 0.1,
                     lr_min: float = 0.0, lr_patience: int = 10, **settings) -> Selected:
    """Train as distgcn would with these settings; the decisions as torch and a hand-written watch take them."""
    y, val = torch.from_numpy(labels.astype(np.int64)), torch.from_numpy(val_mask.astype(bool))
    higher = metric == "val_acc"
    out, best, since_best, scheduler = Selected(), None, 0, None
    for epoch, _loss, opt, params, evaluate in reference_epochs(a_hat, features, labels, train_mask, **settings):
        if scheduler is None:
            scheduler = {
                "constant": lambda: None,
                "step": lambda: torch.optim.lr_scheduler.StepLR(opt, step_size=lr_step, gamma=lr_gamma),
                "cosine": lambda: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=settings["epochs"],
                                                                             eta_min=lr_min),
                "plateau": lambda: torch.optim.lr_scheduler.ReduceLROnPlateau(
                    opt, mode="max" if higher else "min", factor=lr_gamma, patience=lr_patience, threshold=0,
                    min_lr=lr_min),
            }[schedule]() or "constant"
        out.lrs.append(opt.param_groups[0]["lr"])  # the step just taken used it
        logits = evaluate()
        out.val_acc.append(float((logits.argmax(1)[val] == y[val]).double().mean()))
        out.val_loss.append(float(F.cross_entropy(logits[val], y[val])))
        value = out.val_acc[-1] if higher else out.val_loss[-1]
        if best is None or (value > best[0] if higher else value < best[0]):
            best, since_best = (value, epoch), 0
            out.best_weights = [p.detach().numpy().copy() for p in params]
        else:
            since_best += 1
        out.best_epochs.append(best[1])
        out.last_epoch = epoch
        with warnings.catch_warnings():  # made after the first step, the scheduler did not see that step
            warnings.simplefilter("ignore", UserWarning)
            if schedule == "plateau":
                scheduler.step(value)
            elif schedule != "constant":
                scheduler.step()
        if patience is not None and since_best >= patience:
            break
    return out
