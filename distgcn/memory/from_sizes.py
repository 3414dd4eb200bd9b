"""Per-rank memory and per-epoch halo traffic of a graph known only by its size: ``distgcn stats --predict``.

Planning a run on a graph too big to partition here (ogbn-papers100M) needs numbers before any shard exists.
Without a partition the halo is estimated for a RANDOM one (partition/models.py ``random``): a vertex owned by
another rank is a halo row of rank p when any of its d neighbours (Â's off-diagonal entries in its column) is
owned by p, so for uniform degree d = (nnz - n) / n

    halo rows per rank = n (1 - 1/P) (1 - (1 - 1/P)^d).

1 - (1 - 1/P)^d is concave in d, so by Jensen's inequality the same formula at the mean degree is an UPPER bound
for any degree distribution with that mean (a skewed graph's hubs are each counted once, however many
neighbours they have). A graph model partition moves far fewer rows: ``halo=`` overrides the estimate with a
figure measured on a sample. The rest of the shard follows: rows n/P, nonzeros nnz/P of which the off-diagonal
entries pointing to other ranks are the halo block's; by the symmetry of a random partition every rank sends
as many rows as it receives. Memory is then distgcn/memory/prediction.py's :func:`predict` on these sizes.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, replace

from distgcn.config import ModelConfig
from distgcn.memory import baseline
from distgcn.memory.prediction import ITEMSIZE, ShardSizes, predict

SHARD_FEATURE_ITEMSIZE = 4
"""Loaders and the synthetic generator store features as float32 (distgcn/data)."""
SHARD_ADJACENCY_ITEMSIZE = 8
"""Shards store Â's values as float64 (graph.py normalized_adjacency's default, used by prepare.py)."""
REQUIRED = ("n", "nnz", "features", "parts")
OPTIONAL = ("classes", "halo")
KEYS = REQUIRED + OPTIONAL
DEFAULT_CLASSES = 2
HALO_WINDOWS_SHOWN = (None, 16, 8, 4, 2)
"""``train --halo-window`` values whose peak ``stats --predict`` shows beside the chosen one (None: all)."""


@dataclass(frozen=True)
class GraphSpec:
    """A graph by its size: n vertices, nnz nonzeros of Â (self loops included), feature width, ranks."""

    n: int
    nnz: int
    features: int
    parts: int
    classes: int = DEFAULT_CLASSES
    halo: int | None = None
    """Halo rows per rank, measured on a better partition; None: the random partition's estimate."""


def _number(key: str, text: str) -> int:
    """A positive integer, also written as 1.11e8 (papers' style); the key is named in the error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise argparse.ArgumentTypeError(f"{key}: expected a whole number >= 1, got {text!r}")
    return int(value)


def parse_spec(text: str) -> GraphSpec:
    """``n=1.11e8,nnz=3.2e9,features=128,parts=64[,classes=172,halo=...]``; argparse type: errors exit 2."""
    values: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise argparse.ArgumentTypeError(f"expected key=value, got {item!r} (keys: {', '.join(KEYS)})")
        if key not in KEYS:
            raise argparse.ArgumentTypeError(f"unknown key {key!r} (keys: {', '.join(KEYS)})")
        if key in values:
            raise argparse.ArgumentTypeError(f"{key}: given twice")
        values[key] = _number(key, value.strip())
    missing = [k for k in REQUIRED if k not in values]
    if missing:
        raise argparse.ArgumentTypeError(f"missing {', '.join(missing)} (required: {', '.join(REQUIRED)})")
    spec = GraphSpec(**values)
    if spec.nnz < spec.n:
        raise argparse.ArgumentTypeError(f"nnz: Â has a self loop on each of the n={spec.n} vertices, so nnz >= n; "
                                         f"got {spec.nnz}")
    if spec.parts > spec.n:
        raise argparse.ArgumentTypeError(f"parts: at most n={spec.n} ranks, got {spec.parts}")
    if spec.halo is not None and spec.halo > spec.n - math.ceil(spec.n / spec.parts):
        raise argparse.ArgumentTypeError(f"halo: a rank's halo rows are owned by the others, at most "
                                         f"{spec.n - math.ceil(spec.n / spec.parts)}; got {spec.halo}")
    return spec


def random_halo_rows(n: int, nnz: int, parts: int) -> float:
    """Expected halo rows per rank of a random partition at uniform degree; an upper bound at this mean degree."""
    neighbours = (nnz - n) / n
    other = 1 - 1 / parts
    return n * other * (1 - other**neighbours)


def expected_senders(halo_rows: float, parts: int) -> float:
    """Distinct owners among ``halo_rows`` rows each owned by one of the other P - 1 ranks at random."""
    if parts == 1:
        return 0.0
    return (parts - 1) * (1 - (1 - 1 / (parts - 1)) ** halo_rows)


def shard_sizes(spec: GraphSpec) -> ShardSizes:
    """The largest rank's shard as a random partition would give it (rows rounded up, halo to the nearest row)."""
    halo = spec.halo if spec.halo is not None else round(random_halo_rows(spec.n, spec.nnz, spec.parts))
    rows = math.ceil(spec.n / spec.parts)
    nnz_rank = math.ceil(spec.nnz / spec.parts)
    nnz_halo = round((spec.nnz - spec.n) / spec.parts * (1 - 1 / spec.parts))
    senders = round(expected_senders(halo, spec.parts))
    largest = largest_message_rows(halo, senders)
    return ShardSizes(rows=rows, halo_rows=halo, nnz_owned=nnz_rank - nnz_halo, nnz_halo=nnz_halo,
                      rows_sent=halo, senders=senders, features=spec.features,
                      feature_itemsize=SHARD_FEATURE_ITEMSIZE, adjacency_itemsize=SHARD_ADJACENCY_ITEMSIZE,
                      classes=spec.classes, largest_recv=largest, largest_send=largest, parts=spec.parts)


def largest_message_rows(halo_rows: int, senders: int) -> int:
    """The largest of ``senders`` messages sharing ``halo_rows`` rows, each row owned by one of them at random: a
    message's count is binomial with mean μ = halo/senders and variance below μ, so one exceeds μ + 4√μ with
    probability about 3·10⁻⁵ (the normal tail at 4σ), and any of 127 with about 0.4%. Never above the halo."""
    if senders == 0:
        return 0
    mean = halo_rows / senders
    return min(halo_rows, math.ceil(mean + 4 * math.sqrt(mean)))


def partitioning_bytes(spec: GraphSpec) -> dict[str, int]:
    """The floor of the partitioning node's memory: Â's CSR, the features and the part vector, held at once.

    scipy keeps int32 indices while they fit (else int64), Â's values are float64 (prepare.py), features
    float32, the part vector int64 (partition/models.py). Loading and writing shards take more on top
    (issue #16 measured a peak of 2.7x this sum for a 10^8-nonzero graph): this is a lower bound.
    """
    index = 4 if max(spec.n, spec.nnz) < 2**31 else 8
    terms = {"adjacency_csr": (spec.n + 1) * index + spec.nnz * (index + SHARD_ADJACENCY_ITEMSIZE),
             "features": spec.n * spec.features * SHARD_FEATURE_ITEMSIZE, "parts": spec.n * 8}
    terms["total"] = sum(terms.values())
    return terms


def epoch_exchange_widths(model: ModelConfig, features: int, classes: int, parts: int) -> list[int]:
    """Columns of every halo exchange of one full-batch epoch (first layer exact), as the trainer makes them: what
    the layer type declares (:meth:`distgcn.nn.model.LayerStack.epoch_exchange_widths`).
    """
    from distgcn.nn.registry import (
        model_class,  # imports torch: only when a prediction is made
    )

    return model_class(model.conv).epoch_exchange_widths(model, model.widths(features, classes), parts)


def predict_graph(spec: GraphSpec, model: ModelConfig) -> dict:
    """The JSON object ``stats --predict`` prints: the inputs, the shard sizes, memory (what distgcn allocates by
    term, the runtime baseline and a CPU rank's total), halo traffic and the partitioning node's floor."""
    sizes = shard_sizes(spec)
    widths = epoch_exchange_widths(model, spec.features, spec.classes, spec.parts)
    rows_per_spmm = sizes.rows_sent * spec.parts
    s = ITEMSIZE[model.dtype]
    cpu = predict(sizes, model, False)

    def by_window(window: int | None) -> dict[str, int]:
        cpu_bytes = predict(sizes, replace(model, halo_window=window), False)["total"]
        return {"gpu_bytes": predict(sizes, replace(model, halo_window=window), True)["total"],
                "cpu_bytes": cpu_bytes, "cpu_total_bytes": cpu_bytes + baseline.CPU.bytes}

    return {
        "spec": asdict(spec),
        "halo_source": "given" if spec.halo is not None else "random partition, uniform degree (an upper bound)",
        "model": model.as_dict(),
        "shard": asdict(sizes),
        "gpu_bytes": predict(sizes, model, True),
        "cpu_bytes": cpu,
        "runtime_baseline": baseline.as_json(),
        "cpu_total_bytes": cpu["total"] + baseline.CPU.bytes,
        "by_halo_window": {"all" if window is None else str(window): by_window(window)
                           for window in HALO_WINDOWS_SHOWN},
        "halo_rows_per_spmm": rows_per_spmm,
        "spmm_exchanges": len(widths),
        "halo_rows_per_epoch": rows_per_spmm * len(widths),
        "halo_bytes_per_epoch": rows_per_spmm * sum(widths) * s,
        "partitioning_bytes": partitioning_bytes(spec),
    }
