"""Ranks that must agree: every rank runs the same configuration on the same partition.

Each rank hashes an ordered set of fields (the settings that steer its
computation and its collectives, or the partition it read) and the ranks
compare the digests in one small reduction, the maximum and the minimum of
each digest chunk: equal exactly when every rank holds the same digest, and
O(log P) on any transport. Only when they differ do the ranks gather their
fields, to name the first one that differs and the ranks on each side; that
error path costs an allgather of a few short values per rank.

A mismatch is a :class:`RanksDisagree` on every rank together, so no rank
goes on into a collective that the others will never join (an MPMD launch
with ``--epochs 2 : --epochs 3`` would otherwise hang after the shorter run).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Protocol

from distgcn.config import ConfigError, RunConfig, literal

CHUNK_BITS = 48
"""Digest chunks are integers below 2**48, exact in the float64 that every transport's allreduce carries."""
CHUNKS = 3
"""3 x 48 bits of SHA-256: two different settings collide with probability 2**-144."""
SHOWN_CHARS = 60
"""A value longer than this is shown by the start of its digest instead."""


class Reducing(Protocol):
    rank: int
    size: int

    def allreduce(self, values: list[float], op: str = "sum") -> list[float]: ...

    def allgather_object(self, value: Any) -> list[Any]: ...


class RanksDisagree(ConfigError):
    """Ranks hold different values of one field; raised on every rank. ``printed_here``: this rank reports it."""

    def __init__(self, field_path: str, template: str, printed_here: bool):
        super().__init__(field_path, template)
        self.printed_here = printed_here


def config_fields(config: RunConfig) -> dict[str, Any]:
    """The settings every rank must share, by configuration field, in the order a user reads them.

    Left out are settings only rank 0 uses (the graph it partitions and how, the metrics file, how many
    checkpoints it keeps) and per-node ones (threads, output verbosity). Kept are those that change what a
    rank computes or which collectives it enters: the model and its training, the minibatches, the kernel
    and transport, whether the shards come from a directory, and which outputs take collective steps.
    """
    found: dict[str, Any] = {"source.partition_dir": config.source.partition_dir is not None}
    for field in fields(config.train):
        found[f"train.{field.name}"] = getattr(config.train, field.name)
    minibatch = config.minibatch
    if minibatch is None:
        found["minibatch.sampler"] = None
    else:
        for field in fields(minibatch):
            found[f"minibatch.{field.name}"] = getattr(minibatch, field.name)
    found["compute.spmm_kernel"] = config.compute.spmm_kernel
    found["compute.backend"] = config.compute.backend
    outputs = config.outputs
    found["outputs.save_weights"] = outputs.save_weights is not None
    found["outputs.checkpoint_dir"] = outputs.checkpoint_dir is not None
    found["outputs.checkpoint_every"] = outputs.checkpoint_every
    found["outputs.resume"] = outputs.resume
    return found


def agree_on_config(group: Reducing, config: RunConfig) -> None:
    """Refuse, on every rank, a job whose ranks were given different settings (collective)."""
    def template(field_path: str, shown: str) -> str:
        return (f"ranks were given different settings: {{{field_path}}} is {shown}; start every rank with the "
                "same arguments")

    _agree(group, config_fields(config), template)


def agree_on_partition(group: Reducing, meta: Mapping[str, Any], directory: str) -> None:
    """Refuse, on every rank, a job whose ranks read different partitions' meta.json (collective).

    Two directories of one graph and part vector differ in what the partition id does not cover (how the
    features were normalised, the vertex order, the shards' checksums); ranks reading a directory that a
    ``partition --force`` replaced while they loaded it see the same.
    """
    flat = _flattened(meta, "meta")

    def template(field_path: str, shown: str) -> str:
        name = field_path.removeprefix("meta.")
        return (f"{literal(directory)}: ranks read different partitions: meta.json's {name} is {shown}; the directory "
                "changed while the job loaded it, or the ranks were given different directories: start every "
                "rank on one unchanged partition directory")

    _agree(group, flat, template, field_path="source.partition_dir")


def digest_chunks(values: Mapping[str, Any]) -> list[int]:
    """The first CHUNKS x CHUNK_BITS bits of the SHA-256 of ``values`` (field names and values, in order)."""
    digest = hashlib.sha256(_canonical(list(values.items())).encode()).digest()
    number = int.from_bytes(digest, "big")
    mask = (1 << CHUNK_BITS) - 1
    return [(number >> (CHUNK_BITS * index)) & mask for index in range(CHUNKS)]


def _agree(group: Reducing, values: Mapping[str, Any], template: Callable[[str, str], str],
           field_path: str | None = None) -> None:
    """Compare ``values`` across ranks; on a difference raise RanksDisagree worded by ``template(field, shown)``
    on every rank, as a fault of ``field_path`` (default: the differing field itself)."""
    chunks = [float(chunk) for chunk in digest_chunks(values)]
    reduced = group.allreduce(chunks + [-chunk for chunk in chunks], op="max")
    if all(high == -negated_low for high, negated_low in zip(reduced[:CHUNKS], reduced[CHUNKS:])):
        return
    shown_by_rank = group.allgather_object({name: _shown(value) for name, value in values.items()})
    name = first_difference(shown_by_rank)
    shown = _by_rank(shown_by_rank, name)
    raise RanksDisagree(field_path or name, template(name, literal(shown)), printed_here=group.rank == 0)


def first_difference(shown_by_rank: list[dict[str, str]]) -> str:
    """The first field, in rank 0's order and then any other rank's, whose value is not the same on all ranks."""
    names = list(dict.fromkeys(name for shown in shown_by_rank for name in shown))
    for name in names:
        if len({shown.get(name, "(absent)") for shown in shown_by_rank}) > 1:
            return name
    raise AssertionError("the digests differ but no field does")  # a change of _canonical without _shown


def _by_rank(shown_by_rank: list[dict[str, str]], name: str) -> str:
    """``16 on ranks 0-2,5 and 32 on ranks 3-4``: each value with the ranks that hold it, in rank order."""
    groups: dict[str, list[int]] = {}
    for rank, shown in enumerate(shown_by_rank):
        groups.setdefault(shown.get(name, "(absent)"), []).append(rank)
    shown = [f"{value} on {_ranks(ranks)}" for value, ranks in groups.items()]
    return ", ".join(shown[:-1]) + " and " + shown[-1]


def _ranks(ranks: list[int]) -> str:
    spans: list[str] = []
    start = previous = ranks[0]
    for rank in ranks[1:] + [None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        spans.append(str(start) if start == previous else f"{start}-{previous}")
        if rank is not None:
            start = previous = rank
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} {','.join(spans)}"


def _flattened(value: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Nested objects as dotted fields (``meta.graph.feature_norm``), in key order, so a mismatch names a leaf."""
    flat: dict[str, Any] = {}
    for key in sorted(value):
        item = value[key]
        if isinstance(item, Mapping) and item:
            flat.update(_flattened(item, f"{prefix}.{key}"))
        else:
            flat[f"{prefix}.{key}"] = item
    return flat


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def _shown(value: Any) -> str:
    text = _canonical(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:12]}..."
