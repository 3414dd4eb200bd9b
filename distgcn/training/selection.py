"""Model selection across epochs: the learning rate of each epoch, the best epoch of a watched metric, early stopping.

Every decision reads the epoch's metrics record, which the ranks form by one
allreduce and so hold alike: every rank sets the same learning rate, keeps the
same epoch and stops after the same epoch, with no further communication.

The schedules, for the epoch ``e`` = 1, 2, ... with the base rate ``lr``:

- constant: ``lr``;
- step: ``lr · gamma^⌊(e − 1) / lr_step⌋`` (torch's StepLR);
- cosine: ``lr_min + (lr − lr_min) · (1 + cos(π (e − 1) / epochs)) / 2`` (torch's CosineAnnealingLR over the
  run's epochs);
- plateau: the rate is multiplied by ``gamma`` (not below ``lr_min``) after an epoch that ends more than
  ``lr_patience`` epochs without a better watched metric, and the count starts again (torch's ReduceLROnPlateau
  with ``threshold=0``).

"Better" is strictly better: a higher accuracy, a lower loss. This module imports no torch; the state it keeps
is plain numbers, saved in checkpoints so that a resumed run takes the decisions the whole run would have.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from distgcn.config import SCHEDULE_OPTIONS, TrainConfig

HIGHER_IS_BETTER = {"val_acc": True, "val_loss": False}


@dataclass
class SelectionState:
    """What the decisions depend on besides the configuration: the state a checkpoint keeps."""

    best_value: float | None = None
    best_epoch: int = 0
    since_best: int = 0
    """Epochs since the best one (early stopping's count)."""
    plateau_lr: float | None = None
    """plateau: the current rate (None before the first epoch)."""
    since_decay: int = 0
    """plateau: epochs without a better metric since the best one or the last decay, whichever is later."""


class Selection:
    """The learning rate before each epoch, and what each epoch's record decides (the same on every rank)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.metric = config.watched
        self.state = SelectionState()

    def learning_rate(self, epoch: int) -> float:
        """The rate that epoch ``epoch`` (1-based) trains with."""
        c = self.config
        if c.lr_schedule == "step":
            return c.lr * c.lr_gamma ** ((epoch - 1) // c.lr_step)
        if c.lr_schedule == "cosine":
            return c.lr_min + (c.lr - c.lr_min) * (1 + math.cos(math.pi * (epoch - 1) / c.epochs)) / 2
        if c.lr_schedule == "plateau" and self.state.plateau_lr is not None:
            return self.state.plateau_lr
        return c.lr

    def observe(self, record: dict) -> bool:
        """Take the epoch's record into account; True when its watched metric is the best so far (keep it)."""
        if self.metric is None:
            return False
        value, s = float(record[self.metric]), self.state
        # NaN (an overflowing loss) is never better, so it neither becomes nor displaces the best
        better = not math.isnan(value) and (s.best_value is None or (
            value > s.best_value if HIGHER_IS_BETTER[self.metric] else value < s.best_value))
        if better:
            s.best_value, s.best_epoch, s.since_best, s.since_decay = value, int(record["epoch"]), 0, 0
        else:
            s.since_best += 1
            s.since_decay += 1
        if self.config.lr_schedule == "plateau":
            current = self.learning_rate(int(record["epoch"]))
            if s.since_decay > self.config.lr_patience:
                current, s.since_decay = max(current * self.config.lr_gamma, self.config.lr_min), 0
            s.plateau_lr = current
        return better

    @property
    def best_epoch(self) -> int | None:
        """The epoch with the best watched metric so far; None when nothing is watched or nothing trained."""
        if self.metric is None or self.state.best_epoch == 0:
            return None
        return self.state.best_epoch

    def should_stop(self) -> bool:
        """Whether early stopping ends training here: ``patience`` epochs have passed without a better metric."""
        patience = self.config.patience
        return patience is not None and self.state.best_epoch > 0 and self.state.since_best >= patience

    def restart(self) -> None:
        """Forget the best epoch and the counts (the plateau rate stays): the watch starts at the next epoch."""
        self.state = SelectionState(plateau_lr=self.state.plateau_lr)

    def identity(self) -> dict:
        """The schedule's settings, which change the weights trained, for a checkpoint's identity ({} for the
        constant rate, so that checkpoints written before schedules existed still match)."""
        c = self.config
        if c.lr_schedule == "constant":
            return {}
        read = [name for name, readers in SCHEDULE_OPTIONS.items() if c.lr_schedule in readers]
        return {"lr_schedule": c.lr_schedule, **{name: getattr(c, name) for name in read},
                **({"watched": self.metric} if c.lr_schedule == "plateau" else {})}

    def state_dict(self) -> dict:
        return {"metric": self.metric, **asdict(self.state)}

    def load_state_dict(self, saved: dict | None) -> None:
        """Restore :meth:`state_dict`'s output. A checkpoint without one, or one that watched another metric
        (``--patience`` added on resume), starts the watch afresh at the resumed epoch; the plateau rate is kept
        where the checkpoint has one."""
        saved = dict(saved or {})
        metric = saved.pop("metric", None)
        self.state = SelectionState(**saved)
        if metric != self.metric:
            self.restart()
