"""Declarative schemas of the files distgcn reads back: metrics lines, checkpoint contents, and the checker.

Each file is checked against ONE schema, written here as data, before any
reader indexes into it, so that a malformed field ends in one line naming the
file and the field (``PART/meta.json: field shards[2].n_owned: expected an
integer >= 0, got "x"``) instead of a KeyError or TypeError traceback deep in
a report or a resumed run. Fields not named in a schema are allowed (newer
writers add keys; readers ignore what they do not know). meta.json's schema
lives with the rest of the partition directory's format, in
:mod:`distgcn.shard.directory`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distgcn.errors import InputError

INT64 = (-(2**63), 2**63 - 1)
"""The integers a JSON integer may be (those numpy's int64 holds): a larger one overflows where it is used."""
FLOAT_LIMIT = int(sys.float_info.max)
"""The largest integer a JSON number may be where a float is expected: a larger one cannot become a float."""


class Spec:
    """One expected value: ``problem`` returns None when a value fits, else what was expected."""

    nullable: bool = False

    def expected(self) -> str:
        raise NotImplementedError

    def problem(self, value: Any) -> str | None:
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Spec):
    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False

    def expected(self) -> str:
        bounds = [f">= {self.minimum}" if self.minimum is not None else "",
                  f"<= {self.maximum}" if self.maximum is not None else ""]
        return " ".join(["an integer", *filter(None, bounds)]) + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) \
            and (self.minimum is None or value >= self.minimum) and (self.maximum is None or value <= self.maximum)
        if ok and not INT64[0] <= value <= INT64[1]:
            return self.expected().replace("an integer", "a 64-bit integer", 1)
        return None if ok else self.expected()


@dataclass(frozen=True)
class Float(Spec):
    """A JSON number (integers included); null where the writer records a non-finite value."""

    minimum: float | None = None
    nullable: bool = False

    def expected(self) -> str:
        return "a number" + (f" >= {self.minimum}" if self.minimum is not None else "") \
            + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > FLOAT_LIMIT:
            return self.expected().replace("a number", "a number within a double's range", 1)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            and (self.minimum is None or math.isnan(value) or value >= self.minimum)
        return None if ok else self.expected()


@dataclass(frozen=True)
class Str(Spec):
    pattern: str | None = None
    """A regular expression the whole string must match, described by ``what``."""
    what: str = "a string"
    nullable: bool = False

    def expected(self) -> str:
        return self.what + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        ok = isinstance(value, str) and (self.pattern is None or re.fullmatch(self.pattern, value) is not None)
        return None if ok else self.expected()


@dataclass(frozen=True)
class Bool(Spec):
    nullable: bool = False

    def expected(self) -> str:
        return "true or false" + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else self.expected()


@dataclass(frozen=True)
class Instance(Spec):
    """A Python object of a given type (checkpoints hold tensors, not JSON)."""

    kind: type
    what: str

    def expected(self) -> str:
        return self.what

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, self.kind) else self.what


@dataclass(frozen=True)
class Key:
    spec: Spec
    required: bool = True


@dataclass(frozen=True)
class Obj(Spec):
    """A dict with the named keys (others allowed); ``values`` checks every value of a free-form dict."""

    keys: dict[str, Key | Spec] = field(default_factory=dict)
    values: Spec | None = None
    nullable: bool = False

    def expected(self) -> str:
        return "an object" + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, dict) else self.expected()


@dataclass(frozen=True)
class List(Spec):
    item: Spec
    nullable: bool = False

    def expected(self) -> str:
        return "a list" + (" or null" if self.nullable else "")

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, list) else self.expected()


def json_problem(exc: BaseException) -> str:
    """Why ``json.loads`` refused a text, in a few words: its parser's message, ``nested too deeply`` (a
    RecursionError), or Python's refusal of an integer of thousands of digits (a plain ValueError)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return getattr(exc, "msg", None) or str(exc).split(";")[0]


def describe(value: Any) -> str:
    """A short rendering of the offending value for the error line."""
    if isinstance(value, (dict, list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    if isinstance(value, str):
        text = repr(value[:40]).replace("'", '"') if '"' not in value[:40] else repr(value[:40])
        return text + ("..." if len(value) > 40 else "")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and len(str(abs(value))) > 24:
        return f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, (int, float)):
        return repr(value)
    return type(value).__name__


def validate(value: Any, spec: Spec, source: str | Path, where: str = "") -> None:
    """Raise InputError naming ``source`` and the field path of the first value that does not fit."""
    error = _first_problem(value, spec, where)
    if error is not None:
        raise InputError(error, path=source)


def _first_problem(value: Any, spec: Spec, where: str) -> str | None:
    name = where or "(top level)"
    if value is None and spec.nullable:
        return None
    expected = spec.problem(value)
    if expected is not None:
        return f"field {name}: expected {expected}, got {describe(value)}"
    if isinstance(spec, Obj):
        for key, entry in spec.keys.items():
            entry = entry if isinstance(entry, Key) else Key(entry)
            path = f"{where}.{key}" if where else key
            if key not in value:
                if entry.required:
                    return f"lacks {path} (expected {entry.spec.expected()})"
                continue
            found = _first_problem(value[key], entry.spec, path)
            if found:
                return found
        if spec.values is not None:
            for key, item in value.items():
                found = _first_problem(item, spec.values, f"{where}.{key}" if where else str(key))
                if found:
                    return found
    elif isinstance(spec, List):
        for index, item in enumerate(value):
            found = _first_problem(item, spec.item, f"{where}[{index}]")
            if found:
                return found
    return None


def check(rule: Callable[[Any], str | None], value: Any, source: str | Path) -> None:
    """A rule across fields (say, a list's length against a count): InputError with its message."""
    message = rule(value)
    if message is not None:
        raise InputError(message, path=source)


HEX64 = Str(r"[0-9a-f]{64}", "a SHA-256 (64 hex digits)")
COUNT = Int(minimum=0)
NUMBER = Float(nullable=True)
"""A measured number: null where the writer met a non-finite value."""
LOAD = Float(minimum=0, nullable=True)
"""A load average, or the part of one left to other processes: null where the system keeps none."""
NODE = Obj({
    "ranks": Key(Int(minimum=1), False),
    "cores": Key(Int(minimum=1), False),
    "device": Key(Str(), False),
    "threads_per_rank": Key(Int(minimum=1), False),
    "load_average": Key(LOAD, False),
    "other_load": Key(LOAD, False),
    "oversubscribed": Key(Bool(nullable=True), False),
    "busy": Key(Bool(nullable=True), False),
}, nullable=True)
"""The run header's ``node``: rank 0's node and the contention verdicts (distgcn/training/soundness.py)."""
RUN_HEADER = Obj({
    "ranks": Key(Int(minimum=1), False),
    "partition_model": Key(Str(nullable=True), False),
    "graph": Key(Obj({"name": Key(Str(nullable=True), False), "spec": Key(Str(nullable=True), False),
                      "fingerprint": Key(Str(nullable=True), False),
                      "random_labels": Key(Bool(nullable=True), False)}, nullable=True), False),
    "widths": Key(List(Int(minimum=1)), False),
    "threads": Key(Int(minimum=1), False),
    "resumed_after": Key(COUNT, False),
    "node": Key(NODE, False),
})
"""The keys of the run header that readers use (report, resume): others are allowed and not read."""
EPOCH_KEYS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_s", "compute_s", "comm_wait_s",
              "allreduce_s", "halo_rows", "halo_bytes", "messages", "max_rank_halo_rows", "spmm_exchanges")
"""The keys of every epoch record (distgcn/training/trainer.py's metrics)."""
SPLIT_KEYS = ("compute_s", "comm_wait_s", "allreduce_s")
"""The parts of an epoch's time on one rank; they add up to that rank's epoch_s."""
SLOWEST_KEYS = tuple(f"slowest_{key}" for key in SPLIT_KEYS)
"""The slowest rank's own split of epoch_s (written since the report drew it; older files lack them)."""
LATER_EPOCH_KEYS = ("comm_share", *SLOWEST_KEYS, "val_loss", "lr")
"""Keys added to the epoch records after files were already written without them: optional when read."""
EPOCH_RECORD = Obj({
    "epoch": Int(minimum=1),
    **{key: NUMBER for key in EPOCH_KEYS[1:]},
    "slowest_rank": Key(COUNT, False),
    **{key: Key(NUMBER, False) for key in LATER_EPOCH_KEYS},
    "best_epoch": Key(Int(minimum=1), False),
    "resumed_after": Key(Int(minimum=1), False),
    "run": Key(RUN_HEADER, False),
})
"""One line of a metrics file (distgcn/io/metrics_log.py); the first also carries ``run``."""
HEADER_LINE = Obj({"run": RUN_HEADER})
"""A line holding only the run header (written by older versions before the first epoch)."""


def validate_metrics_line(record: Any, source: str | Path) -> dict:
    """An epoch record, or a header-only line (``{"run": {...}}`` without ``epoch``)."""
    if isinstance(record, dict) and "epoch" not in record and "run" in record:
        validate(record, HEADER_LINE, source)
    else:
        validate(record, EPOCH_RECORD, source)
    return record


def finite_or_nan(record: dict) -> dict:
    """An epoch record with null numbers (what the writer records for NaN or infinity) read back as NaN."""
    numbers = (*EPOCH_KEYS, *LATER_EPOCH_KEYS)
    return {key: float("nan") if value is None and key in numbers else value for key, value in record.items()}


def checkpoint_schema() -> Obj:
    """The contents of a checkpoint (distgcn/io/checkpoint.py); built on demand so that torch loads lazily.

    ``state`` is the trainer's (Trainer.state_dict): its keys are typed where present, not required,
    since the checkpoint layer stores any state.
    """
    import torch

    tensor = Instance(torch.Tensor, "a tensor")
    return Obj({
        "epoch": Int(minimum=0),
        "identity": Obj({"graph_fingerprint": Str(), "partition_id": Str(), "model_config": Str()}),
        "state": Obj({
            "model": Key(Obj(values=tensor), False),
            "optimizer": Key(Obj({"state": Obj(), "param_groups": List(Obj())}), False),
            "completed_epochs": Key(Int(minimum=0), False),
            "rng": Key(Obj({"torch": tensor, "numpy": Obj(), "python": Obj()}), False),
        }),
    })


def validate_checkpoint(contents: Any, source: str | Path) -> dict:
    validate(contents, checkpoint_schema(), source)
    return contents
