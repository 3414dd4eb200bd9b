"""Report inputs: runs (metrics files) and partitions (directories), each optionally annotated.

A metrics file written by this version names its run in the ``run`` object of
its first line; older files do not, so ``PATH@ranks=8,model=HP,graph=cora``
supplies or overrides what the report needs to group runs (unknown stays None
and the summary says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from distgcn.data.snap import file_stem
from distgcn.errors import InputError, lookup_failure
from distgcn.io.metrics_log import read_metrics, steady, steady_records
from distgcn.io.schema import SLOWEST_KEYS
from distgcn.shard.directory import (
    load_listed_shard,
    minibatch_volume,
    read_meta,
    verify_parts_file,
)

ANNOTATIONS = ("label", "ranks", "model", "graph", "calibration")
SHORT_MODEL = {"random": "RP", "graph": "GP", "hypergraph": "HP", "stochastic": "SHP"}
MODEL_ORDER = ("RP", "GP", "HP", "SHP", "contiguous", "external")


def model_label(name: str | None) -> str | None:
    """The paper's short names (RP, GP, HP, SHP) for the partition models; others unchanged."""
    if name is None:
        return None
    if name.upper() in SHORT_MODEL.values():
        return name.upper()
    return SHORT_MODEL.get(name.lower(), name)


def model_sort_key(name: str | None) -> tuple[int, str]:
    return (MODEL_ORDER.index(name), "") if name in MODEL_ORDER else (len(MODEL_ORDER), name or "")


def describe(graph: str | None, model: str | None = None, ranks: int | None = None) -> str:
    """A group's or an input's name for legends and tables (``cora, HP, P=2``); unknown parts say so. One rank has
    no partition, so no model: ``cora, 1 rank``."""
    parts = [graph or "unknown graph"]
    if ranks == 1:
        parts.append("1 rank")
        return ", ".join(parts)
    if model is not None:
        parts.append(model)
    if ranks is not None:
        parts.append(f"P={ranks}")
    return ", ".join(parts)


@dataclass
class Run:
    """One training run: its per-epoch records and what is known of its setting (no partition model at P = 1,
    whatever the header recorded: one rank trains on the whole graph).

    ``name`` (the file's, told apart from the others') names the run's figure files; ``label`` (its graph, model
    and P) names it in figures and tables.
    """

    label: str
    path: Path
    records: list[dict]
    ranks: int | None = None
    model: str | None = None
    graph: str | None = None
    header: dict = field(default_factory=dict)
    name: str = ""
    calibration: str | None = None
    """A ``distgcn calibrate`` file measured on the run's nodes and link (``@calibration=FILE``): its prediction
    is drawn beside it (distgcn/report/predicted.py)."""

    def series(self, key: str) -> np.ndarray:
        return np.array([r[key] for r in self.records], dtype=float)

    def steady(self, key: str) -> float:
        """Median over the steady epochs (:func:`distgcn.io.metrics_log.steady_records`)."""
        return steady(self.records, key)

    def steady_series(self, key: str) -> np.ndarray:
        """``key`` over the steady epochs, the ones :meth:`steady` takes the median of."""
        return np.array([r[key] for r in steady_records(self.records)], dtype=float)

    @property
    def has_split(self) -> bool:
        """Whether every epoch records the slowest rank's own split (files written before it do not)."""
        return all(key in record for record in self.records for key in SLOWEST_KEYS)

    @property
    def node(self) -> tuple[int, int] | None:
        """(ranks, cores) on rank 0's node as the run recorded them (CPU runs only); None if not recorded."""
        node = self.header.get("node") or {}
        if node.get("device", "cpu") != "cpu" or node.get("ranks") is None or node.get("cores") is None:
            return None
        return int(node["ranks"]), int(node["cores"])

    @property
    def threads(self) -> int | None:
        """Compute threads per rank (rank 0's) as the run recorded them; None if not recorded."""
        value = (self.header.get("node") or {}).get("threads_per_rank", self.header.get("threads"))
        return None if value is None else int(value)

    @property
    def oversubscribed(self) -> bool | None:
        """More threads than cores on a node, so its times include waiting for a core: the run's own verdict over
        every node, else (files older than it) rank 0's ranks × threads against its cores, ranks alone where the
        threads were not recorded. None: not recorded (or a GPU run)."""
        if self.node is None:
            return None
        recorded = self.header["node"].get("oversubscribed")
        if recorded is not None:
            return bool(recorded)
        ranks, cores = self.node
        return ranks * (self.threads or 1) > cores

    @property
    def busy(self) -> bool | None:
        """Other processes' load left the run's threads too few CPUs (the run's verdict); None: not recorded."""
        if self.node is None:
            return None
        busy = self.header["node"].get("busy")
        return None if busy is None else bool(busy)

    @property
    def contention(self) -> list[str] | None:
        """Why this run's threads waited for a core ("oversubscribed", "busy node"; empty: neither); None where the
        run recorded neither verdict."""
        if self.oversubscribed is None:
            return None
        return [reason for reason, found in (("oversubscribed", self.oversubscribed), ("busy node", self.busy))
                if found]

    @property
    def random_labels(self) -> bool:
        """Labels drawn at random (no signal to learn): as the run recorded it, else known from an R-MAT spec (whose
        only labels are random ones)."""
        graph = self.header.get("graph") or {}
        if graph.get("random_labels") is not None:
            return bool(graph["random_labels"])
        return str(graph.get("spec") or "").startswith("synthetic:rmat")

    @property
    def classes(self) -> int | None:
        """The label count: the last of the run's widths; None if not recorded."""
        widths = self.header.get("widths")
        return int(widths[-1]) if isinstance(widths, list) and widths else None

    @property
    def resumed_after(self) -> list[int]:
        """The epochs after which this run was resumed from a checkpoint, in order (the records and the header
        say where: :class:`distgcn.io.metrics_log.MetricsWriter`)."""
        marks = {int(r["resumed_after"]) for r in self.records if r.get("resumed_after") is not None}
        if self.header.get("resumed_after") is not None:
            marks.add(int(self.header["resumed_after"]))
        return sorted(mark for mark in marks if mark > 0)


@dataclass
class Partition:
    """One partition directory: its metadata, the P x P rows-sent matrix and each rank's load."""

    label: str
    path: Path
    meta: dict
    comm: np.ndarray
    """int64 [P, P]: rows of H that rank i sends to rank j in one SpMM."""
    nonzeros: np.ndarray
    """int64 [P]: nonzeros of Â in each rank's rows (the SpMM work)."""
    owned: np.ndarray
    """int64 [P]: vertices owned by each rank."""
    name: str = ""
    """The directory's name, told apart from the others': names the partition's figure files."""

    @property
    def ranks(self) -> int:
        return int(self.meta["parts"])

    @property
    def model(self) -> str | None:
        return model_label(self.meta.get("model"))

    @property
    def graph(self) -> str | None:
        return (self.meta.get("graph") or {}).get("name")

    @property
    def minibatch_volume(self) -> float | None:
        """What the stochastic model minimises (rows per minibatch SpMM); None for the full-batch models."""
        return minibatch_volume(self.meta)


def parse_input(text: str) -> tuple[Path, dict[str, str]]:
    """Split ``PATH@key=value,...`` (a path that exists as written is never split)."""
    path = Path(text)
    if "@" not in text or path.exists():
        return path, {}
    base, _, spec = text.rpartition("@")
    annotations: dict[str, str] = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep or key not in ANNOTATIONS or not value:
            raise InputError(f"expected @key=value,... with keys {', '.join(ANNOTATIONS)}, got {item!r}", path=base)
        annotations[key] = value
    return Path(base), annotations


def _ranks(value: str | int | None, source: Path) -> int | None:
    if value is None:
        return None
    try:
        ranks = int(value)
    except ValueError:
        ranks = 0
    if ranks < 1:
        raise InputError(f"ranks: expected a positive integer, got {value!r}", path=source)
    return ranks


def load_run(path: Path, annotations: dict[str, str]) -> Run:
    """Read a metrics file; the ``run`` object (if any) and the annotations say what it was."""
    header, records = read_metrics(path)
    if not records:
        raise InputError("no epoch records in the metrics file", path=path)
    graph = header.get("graph") or {}
    ranks = _ranks(annotations.get("ranks", header.get("ranks")), path)
    return Run(
        label=annotations.get("label", ""),
        path=path,
        records=records,
        ranks=ranks,
        model=None if ranks == 1 else model_label(annotations.get("model", header.get("partition_model"))),
        graph=annotations.get("graph", graph_name(graph)),
        header=header,
        calibration=annotations.get("calibration"),
    )


def load_partition(path: Path, annotations: dict[str, str]) -> Partition:
    """Read meta.json and every shard, each verified against meta.json; keep the plans and the loads."""
    meta = read_meta(path)
    verify_parts_file(path, meta)
    nparts = meta["parts"]
    comm = np.zeros((nparts, nparts), dtype=np.int64)
    nonzeros = np.zeros(nparts, dtype=np.int64)
    owned = np.zeros(nparts, dtype=np.int64)
    for rank in range(nparts):
        shard = load_listed_shard(path, meta, rank)
        comm[rank, shard.send_peers] = np.diff(shard.send_offsets)
        nonzeros[rank] = shard.owned_block.nnz + shard.halo_block.nnz
        owned[rank] = shard.n_owned
    if "model" in annotations:
        meta = {**meta, "model": annotations["model"]}
    if "graph" in annotations:
        meta = {**meta, "graph": {**(meta.get("graph") or {}), "name": annotations["graph"]}}
    if "calibration" in annotations:
        raise InputError("@calibration= names a run's calibration; a partition directory has none", path=path)
    if "ranks" in annotations and _ranks(annotations["ranks"], path) != nparts:
        raise InputError(f"@ranks={annotations['ranks']} contradicts the partition's {nparts} parts", path=path)
    return Partition(label=annotations.get("label", ""), path=path, meta=meta, comm=comm, nonzeros=nonzeros,
                     owned=owned)


def graph_name(graph: dict) -> str | None:
    """A run's graph by name, never by a whole path: the name meta.json gave it, else the spec's file name
    (``soc-Slashdot0902`` for ``/data/soc-Slashdot0902.txt.gz``; a ``synthetic:`` spec is its own name)."""
    if graph.get("name"):
        return graph["name"]
    spec = graph.get("spec")
    if not spec or spec.startswith("synthetic:"):
        return spec
    return file_stem(Path(spec))


def _unique_names(items: list[Run] | list[Partition]) -> None:
    """Each input's ``name`` (for its figure files): its label if given, else its file or directory name; where
    names clash, the fewest trailing parts of their paths that tell them apart (``p1/run``), not whole paths."""
    for item in items:
        item.name = item.label or (item.path.stem if isinstance(item, Run) else item.path.name)
    clashing: dict[str, list] = {}
    for item in items:
        clashing.setdefault(item.name, []).append(item)
    for group in clashing.values():
        if len(group) > 1:
            for item, name in zip(group, _shortest_distinct_suffixes([item.path for item in group])):
                item.name = name


def _dataset_labels(items: list[Run] | list[Partition]) -> None:
    """Unlabelled inputs of a known graph are labelled by graph, model and P (``cora, HP, P=2``), repeats of one
    setting numbered in input order (``#1``, ``#2``); inputs of unknown graph keep their name."""
    for item in items:
        if not item.label:
            item.label = item.name if item.graph is None else describe(item.graph, item.model, item.ranks)
    clashing: dict[str, list] = {}
    for item in items:
        clashing.setdefault(item.label, []).append(item)
    for label, group in clashing.items():
        if len(group) > 1:
            for number, item in enumerate(group, start=1):
                item.label = f"{label} #{number}"


def _shortest_distinct_suffixes(paths: list[Path]) -> list[str]:
    """The last k parts of each path (suffix dropped from the file name), k the smallest that tells them apart."""
    parts = [(*path.parent.parts, path.stem if path.suffix else path.name) for path in paths]
    for k in range(2, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-k:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(path) for path in paths]  # the same path given twice: nothing shorter tells them apart


def load_inputs(texts: list[str]) -> tuple[list[Run], list[Partition]]:
    """Runs and partitions in the order given."""
    runs: list[Run] = []
    partitions: list[Partition] = []
    for text in texts:
        path, annotations = parse_input(text)
        if path.is_dir():
            partitions.append(load_partition(path, annotations))
        elif path.is_file():
            runs.append(load_run(path, annotations))
        else:
            failure = lookup_failure(path)
            raise InputError(f"cannot read it ({failure})" if failure else "no such metrics file or partition "
                             "directory", path=path)
    for items in (runs, partitions):
        _unique_names(items)
        _dataset_labels(items)
    return runs, partitions
