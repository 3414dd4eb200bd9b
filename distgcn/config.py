"""The settings of every command: trees of dataclasses, checked once when they are built.

``distgcn train`` builds a :class:`RunConfig` from its arguments and
:func:`distgcn.api.train` from its keywords; ``distgcn partition`` and
:func:`distgcn.api.partition` build a :class:`PartitionConfig`. These classes
are the one place where a setting's default and choices are declared: the
command line takes its defaults and choice lists from them (:func:`default_of`,
:func:`choices_of`) and the API its keywords (:func:`leaf_fields`), and
tests/config/test_one_config.py fails when a field lacks a flag or a keyword. Every
setting is checked here, once, before any rank communicates, and the rest of
the code trusts what it is given. A refused setting is a :class:`ConfigError` naming
the configuration field (``train.hidden``); the command line words the same
error with its flags (``--hidden``). This module imports no torch, so that
settings can be checked (and the command line parsed) without it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distgcn.errors import InputError, printable

DTYPES = ("float32", "float64")
"""Training dtypes (torch's of the same names)."""
HALO_DTYPES = ("float32", "bfloat16", "float16")
"""What halo rows may travel as (``train.halo_dtype``)."""
OPTIMIZERS = ("adam", "sgd")
WATCHED_METRICS = ("val_acc", "val_loss")
"""What ``--keep-best`` keeps the best epoch of, and what early stopping and the plateau schedule watch."""
WATCHED_BY_DEFAULT = "val_loss"
"""What ``--patience`` and ``--lr-schedule plateau`` watch without ``--keep-best`` (as Keras's EarlyStopping and
ReduceLROnPlateau do)."""
LR_SCHEDULES = ("constant", "step", "cosine", "plateau")
"""Learning-rate schedules (distgcn/training/selection.py gives each one's formula)."""
MODELS = {"gcn": "model:GCN", "sage": "sage:GraphSAGE", "gat": "gat:GAT"}
"""The models, each one line: ``--conv`` name -> "module:Class" in distgcn.nn (resolved by distgcn.nn.registry)."""
CONVS = tuple(MODELS)
"""``train --conv``: the layer type (docs/models.md); every one aggregates over Â's pattern on the same halo plan."""
FIRST_LAYERS = ("exact", "cached")
"""cached: Â·X once at setup, then a local first layer (dropout after the aggregation)."""
COMMS = ("halo", "broadcast")
KERNELS = ("auto", "torch", "scipy", "numba")
"""Local SpMM kernels (``auto`` chooses by device: distgcn.kernels.choose_product)."""
BACKENDS = ("mpi", "gloo", "nccl")
SAMPLE_ON = ("auto", "host", "device")
"""``train --sample-on``: where minibatches are drawn and cut. host: numpy and numba on the CPU
(distgcn/sampling/distributed/); device: torch on the transport's device (distgcn/sampling/device/); auto: the
device where it is a GPU, the host on a CPU (measured in docs/minibatch.md, "Where samplers run")."""
FEATURE_NORMS = ("row", "none")
VERTEX_ORDERS = ("rcm", "natural")
"""How a shard numbers its own rows (meta.json's ``vertex_order``): reverse Cuthill-McKee of its owned block,
or by global id (``distgcn/shard/cut.py``)."""
PARTITION_MODELS = ("random", "contiguous", "graph", "hypergraph", "stochastic", "external")
"""The models of ``distgcn partition --model`` (partition/models.py runs them)."""
TRAIN_PARTITIONS = ("random", "contiguous", "graph", "hypergraph")
"""The partition models that ``train --graph`` runs on rank 0 (the others need ``distgcn partition``)."""
DEFAULT_PARTITION_MODEL = "hypergraph"
"""The one default of ``partition --model``, ``train --partition``, ``jobs --model`` and the Python API: the model
whose cut is the communication volume exactly, so that a run without the flag gets a sound partition."""
PARTITIONERS = ("kahypar", "mtkahypar", "metis", "kaminpar", "parmetis", "ptscotch", "zoltan")
"""The tools ``partition --partitioner`` may name (each model takes some: distgcn.partitioning.models)."""
DISTRIBUTED_PARTITIONERS = ("parmetis", "ptscotch", "zoltan")
"""The partitioners that run on the ranks of an MPI job (``mpiexec -n P distgcn partition``), never in one process."""
VERTEX_WEIGHTS = ("nonzeros", "work")
"""What a partition balances (distgcn.partitioning.weights.vertex_weights)."""
VERTEX_WEIGHT = "nonzeros"
"""What a partition balances unless told (each row's nonzeros: its work in the SpMM)."""
VERTEX_ORDER = "rcm"
"""How a shard numbers its rows unless told (``--vertex-order``)."""
EPSILON = 0.03
"""The allowed imbalance of a partition (``partition --epsilon``): every part's weight within 1 + EPSILON times
the average, for every model and tool that balances."""

COUNT_MAX = 2**62
"""The largest count a setting may give (widths, heads, parts, batches, ...): sizes are computed from counts in
64-bit integers, which a larger one could overflow. The graph loaders refuse integers above it too."""
SEED_MAX = 2**31 - 1
"""The largest seed: the partitioners (METIS, KaHyPar, Mt-KaHyPar, KaMinPar) take a 32-bit C int."""
EPOCHS_MAX = 99_999_999
"""The most epochs: a checkpoint's name holds its epoch in 8 digits (``checkpoint-EEEEEEEE.pt``)."""
LAYERS_MAX = 10_000
"""The most layers: ten times the deepest graph network trained in the literature (RevGNN, 1001 layers); the
per-layer lists built before the memory check would not fit in memory for counts near :data:`COUNT_MAX`."""
THREADS_MAX = 4096
"""The most compute threads per rank: more than any node has cores (torch takes the count as a C int)."""

_FIELD = re.compile(r"\{\{|\}\}|\{([a-z_]+(?:\.[a-z_]+)+)\}")


class ConfigError(InputError):
    """A refused setting. ``field`` is its dotted path; ``template`` names fields as ``{section.name}``,
    so that each front end can word them its own way (:meth:`render`); ``{{`` and ``}}`` stand for braces."""

    def __init__(self, field_path: str, template: str):
        self.field = field_path
        self.template = template
        super().__init__(self.render(lambda path: path))

    def render(self, name: Callable[[str], str]) -> str:
        """The message with each field named by ``name`` (the command line passes its flags)."""
        return printable(_FIELD.sub(lambda match: name(match.group(1)) if match.group(1) else match.group(0)[0],
                                    self.template))


def literal(text: object) -> str:
    """``text`` (a path, a value) for a ConfigError template: its braces doubled, so none reads as a field."""
    return str(text).replace("{", "{{").replace("}", "}}")


def attention_heads(layers: int, heads: int, output_heads: int) -> list[int]:
    """GAT's heads per layer: ``heads`` in every hidden layer, ``output_heads`` in the last."""
    return [heads] * (layers - 1) + [output_heads]


def _one_of(default: str | None, choices: tuple[str, ...]) -> Any:
    """A field whose value is one of ``choices`` (or None where the default is None): its choice list is declared
    with it, for the command line's ``choices`` (:func:`choices_of`)."""
    return field(default=default, metadata={"choices": choices})


def default_of(cls: type, name: str) -> Any:
    """The default of field ``name`` of the configuration class ``cls`` (the command line's default)."""
    declared = cls.__dataclass_fields__[name]
    if declared.default_factory is not dataclasses.MISSING:
        return declared.default_factory()
    if declared.default is dataclasses.MISSING:
        raise KeyError(f"{cls.__name__}.{name} has no default")
    return declared.default


def choices_of(cls: type, name: str) -> tuple[str, ...]:
    """The values field ``name`` of ``cls`` may take (the command line's ``choices``)."""
    return cls.__dataclass_fields__[name].metadata["choices"]


def leaf_fields(cls: type, prefix: str = "") -> dict[str, tuple[type, dataclasses.Field]]:
    """Every setting of the configuration class ``cls`` by dotted path (``train.epochs``), with the class that
    declares it: the sections (fields whose type is a configuration dataclass, possibly optional) are walked into.
    What each front end (flags, API keywords) must reach, one to one."""
    hints = typing.get_type_hints(cls)
    found: dict[str, tuple[type, dataclasses.Field]] = {}
    for declared in dataclasses.fields(cls):
        hint = hints[declared.name]
        members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        sections = [member for member in members if dataclasses.is_dataclass(member) and member is not SamplerSpec]
        if sections:
            found |= leaf_fields(sections[0], f"{prefix}{declared.name}.")
        else:
            found[prefix + declared.name] = (cls, declared)
    return found


def _require(ok: bool, field_path: str, template: str) -> None:
    if not ok:
        raise ConfigError(field_path, template)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(section: str, name: str, value: Any, optional: bool = False, maximum: int = COUNT_MAX) -> None:
    if optional and value is None:
        return
    _require(_is_int(value) and value >= 1, f"{section}.{name}",
             f"{{{section}.{name}}}: expected a positive integer, got {value!r}")
    _require(value <= maximum, f"{section}.{name}",
             f"{{{section}.{name}}}: expected an integer in 1..{maximum}, got {value!r}")


def check_seed(section: str, value: Any) -> None:
    """Refuse a seed that is not an integer in 0..:data:`SEED_MAX` (ConfigError naming ``section.seed``)."""
    _require(_is_int(value) and 0 <= value <= SEED_MAX, f"{section}.seed",
             f"{{{section}.seed}}: expected an integer in 0..{SEED_MAX} (the partitioners take a 32-bit seed), "
             f"got {value!r}")


def check_halo_window(section: str, value: Any) -> None:
    """Refuse a halo window that is not None (the whole halo) or an integer >= 2 (ConfigError naming it)."""
    if value is not None:
        _require(_is_int(value) and 2 <= value <= COUNT_MAX, f"{section}.halo_window",
                 f"{{{section}.halo_window}}: expected an integer >= 2 (one round in flight while another is "
                 f"multiplied) or all, got {value!r}")


def _non_negative(section: str, name: str, value: Any) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0,
             f"{section}.{name}", f"{{{section}.{name}}}: expected a number >= 0, got {value!r}")


def _choice(section: str, name: str, value: Any, choices: tuple[str, ...], optional: bool = False) -> None:
    if optional and value is None:
        return
    _require(value in choices, f"{section}.{name}",
             f"{{{section}.{name}}}: expected one of {', '.join(choices)}, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """The model as one rank holds it: what its weights, activations and optimizer state take.

    ``distgcn stats`` predicts memory for it; training extends it (:class:`TrainConfig`).
    """

    SECTION = "model"
    layers: int = 2
    hidden: tuple[int, ...] = (16,)
    """Hidden widths: one value for every hidden layer, or exactly layers - 1 values."""
    dtype: str = _one_of("float32", DTYPES)
    optimizer: str = _one_of("adam", OPTIMIZERS)
    dropout: float = 0.5
    conv: str = _one_of("gcn", CONVS)
    heads: int = 8
    """GAT: attention heads of every hidden layer (concatenated, so a hidden layer outputs heads x hidden)."""
    output_heads: int = 1
    """GAT: attention heads of the last layer (averaged)."""
    attention_dropout: float | None = None
    """GAT: dropout of the attention coefficients; None: the same as ``dropout``."""
    root_weight: bool = True
    """GraphSAGE: whether a vertex's own row enters through its own weight (W_self)."""
    halo_window: int | None = 4
    """Rounds of halo messages (one peer's rows each way) in flight and in memory at once, at least 2; None: the
    whole halo at once (distgcn/spmm/halo.py). Jobs of at most 5 ranks hold every round either way."""

    def __post_init__(self) -> None:
        s = self.SECTION
        _choice(s, "conv", self.conv, CONVS)
        check_halo_window(s, self.halo_window)
        _positive(s, "heads", self.heads)
        _positive(s, "output_heads", self.output_heads)
        if self.attention_dropout is not None:
            _non_negative(s, "attention_dropout", self.attention_dropout)
            _require(self.attention_dropout < 1, f"{s}.attention_dropout",
                     f"{{{s}.attention_dropout}}: expected a probability in [0, 1), got {self.attention_dropout!r}")
        _require(_is_int(self.layers) and self.layers >= 2, f"{s}.layers",
                 f"{{{s}.layers}}: expected at least 2, got {self.layers!r}")
        _require(self.layers <= LAYERS_MAX, f"{s}.layers",
                 f"{{{s}.layers}}: expected an integer in 2..{LAYERS_MAX}, got {self.layers!r}")
        hidden = (self.hidden,) if _is_int(self.hidden) else tuple(self.hidden)
        object.__setattr__(self, "hidden", hidden)
        _require(len(hidden) in (1, self.layers - 1), f"{s}.hidden",
                 f"{{{s}.hidden}}: expected 1 or {self.layers - 1} widths for {self.layers} layers, "
                 f"got {len(hidden)}")
        _require(all(_is_int(w) and w >= 1 for w in hidden), f"{s}.hidden",
                 f"{{{s}.hidden}}: expected positive integer widths, got {self.hidden!r}")
        _require(all(w <= COUNT_MAX for w in hidden), f"{s}.hidden",
                 f"{{{s}.hidden}}: expected widths in 1..{COUNT_MAX}, got {self.hidden!r}")
        _choice(s, "dtype", self.dtype, DTYPES)
        _choice(s, "optimizer", self.optimizer, OPTIMIZERS)
        _non_negative(s, "dropout", self.dropout)
        _require(self.dropout < 1, f"{s}.dropout",
                 f"{{{s}.dropout}}: expected a probability in [0, 1), got {self.dropout!r}")

    def widths(self, num_features: int, num_classes: int) -> list[int]:
        """Layer widths: input, hidden (one width for all hidden layers, or one each), classes."""
        hidden = list(self.hidden) * (self.layers - 1) if len(self.hidden) == 1 else list(self.hidden)
        return [num_features, *hidden, num_classes]

    def as_dict(self) -> dict[str, Any]:
        """The settings as JSON (``stats``): a GCN's without the other layer types' fields, as before they existed."""
        out = {name: getattr(self, name) for name in ("layers", "hidden", "dtype", "optimizer", "dropout")}
        out["hidden"] = list(self.hidden)
        if self.conv == "sage":
            out.update(conv="sage", root_weight=self.root_weight)
        elif self.conv == "gat":
            out.update(conv="gat", heads=self.heads, output_heads=self.output_heads)
        if self.halo_window != default_of(ModelConfig, "halo_window"):  # null: the whole halo
            out["halo_window"] = self.halo_window
        return out

    @property
    def attention_p(self) -> float:
        """GAT's attention dropout probability (``dropout`` unless set on its own)."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout


@dataclass(frozen=True)
class TrainConfig(ModelConfig):
    """The model plus how it is trained and how its SpMMs communicate: what the trainer reads."""

    SECTION = "train"
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0
    first_layer: str = _one_of("exact", FIRST_LAYERS)
    """"cached": aggregate the features once at setup (Â·X); layer 0 is then local and drops out after Â."""
    comm: str = _one_of("halo", COMMS)
    """"broadcast": every rank sends its whole block of H at every SpMM (the CAGNET-style peer)."""
    halo_dtype: str | None = _one_of(None, HALO_DTYPES)
    """What halo rows travel as (one of HALO_DTYPES), rounded to it on the way; None: the training dtype."""
    keep_best: str | None = _one_of(None, WATCHED_METRICS)
    """Keep (and save) the weights of the epoch with the best value of this metric; None: the last epoch's."""
    patience: int | None = None
    """Stop after this many epochs without a better watched metric; None: train every epoch."""
    lr_schedule: str = _one_of("constant", LR_SCHEDULES)
    lr_step: int | None = None
    """step: epochs between two decays of the learning rate (the schedule needs it)."""
    lr_gamma: float = 0.1
    """step and plateau: the factor each decay multiplies the learning rate by."""
    lr_min: float = 0.0
    """cosine: the learning rate of the last epoch's end; plateau: the floor of the decays."""
    lr_patience: int = 10
    """plateau: decay after more than this many epochs without a better watched metric."""

    @property
    def watched(self) -> str | None:
        """The metric that keep-best, early stopping and the plateau schedule watch; None: nothing watches one."""
        if self.keep_best is not None:
            return self.keep_best
        return WATCHED_BY_DEFAULT if self.patience is not None or self.lr_schedule == "plateau" else None

    def __post_init__(self) -> None:
        super().__post_init__()
        s = self.SECTION
        _positive(s, "epochs", self.epochs, maximum=EPOCHS_MAX)
        _non_negative(s, "lr", self.lr)
        _choice(s, "keep_best", self.keep_best, WATCHED_METRICS, optional=True)
        _positive(s, "patience", self.patience, optional=True, maximum=EPOCHS_MAX)
        _choice(s, "lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _positive(s, "lr_step", self.lr_step, optional=True, maximum=EPOCHS_MAX)
        _require(self.lr_schedule != "step" or self.lr_step is not None, f"{s}.lr_step",
                 f"{{{s}.lr_schedule}} step needs {{{s}.lr_step}} N (epochs between two decays)")
        _non_negative(s, "lr_gamma", self.lr_gamma)
        _require(0 < self.lr_gamma < 1 or self.lr_schedule not in ("step", "plateau"), f"{s}.lr_gamma",
                 f"{{{s}.lr_gamma}}: expected a factor in (0, 1) for a decaying schedule, got {self.lr_gamma!r}")
        _non_negative(s, "lr_min", self.lr_min)
        _require(self.lr_min <= self.lr, f"{s}.lr_min",
                 f"{{{s}.lr_min}} {self.lr_min!r} is above {{{s}.lr}} {self.lr!r}")
        _require(_is_int(self.lr_patience) and 0 <= self.lr_patience <= EPOCHS_MAX, f"{s}.lr_patience",
                 f"{{{s}.lr_patience}}: expected an integer in 0..{EPOCHS_MAX}, got {self.lr_patience!r}")
        for name, readers in SCHEDULE_OPTIONS.items():
            _require(self.lr_schedule in readers or getattr(self, name) == default_of(TrainConfig, name),
                     f"{s}.{name}", f"{{{s}.{name}}} applies to {{{s}.lr_schedule}} {' or '.join(readers)}")
        _non_negative(s, "weight_decay", self.weight_decay)
        check_seed(s, self.seed)
        _choice(s, "first_layer", self.first_layer, FIRST_LAYERS)
        _choice(s, "comm", self.comm, COMMS)
        _choice(s, "halo_dtype", self.halo_dtype, HALO_DTYPES, optional=True)
        _require(self.conv == "gcn" or self.first_layer == "exact", f"{s}.first_layer",
                 f"{{{s}.first_layer}} cached: only --conv gcn aggregates its input once; {self.conv} needs exact")
        _require(self.conv != "gat" or self.comm == "halo", f"{s}.comm",
                 f"{{{s}.comm}} {self.comm}: GAT gathers the halo rows themselves; it runs on the halo plan only")


SCHEDULE_OPTIONS = {"lr_step": ("step",), "lr_gamma": ("step", "plateau"), "lr_min": ("cosine", "plateau"),
                    "lr_patience": ("plateau",)}
"""Each schedule option and the schedules that read it: another schedule refuses it when it is not its default."""


@dataclass(frozen=True)
class SamplerSpec:
    """A sampler by name, batch size and options: what meta.json records and what rebuilds it
    (``partition --model stochastic``; minibatch training resolves its options into MinibatchConfig)."""

    name: str
    batch_size: int
    options: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "batch_size": self.batch_size, "options": dict(self.options)}


SAMPLER_COUNTS = ("walk_length", "frontier_size")
"""The samplers' options that are counts (positive integers, as every count of a setting)."""


def sampler_spec(section: str, sampler: str | None, batch_size: int | None, given: dict[str, Any],
                 accepts: dict[str, Any]) -> SamplerSpec | None:
    """The sampler that the settings of ``section`` name, None without one (full-batch training, a model that
    samples nothing). ``given``: the sampler options set; ``accepts``: each sampler's options by name. Settings
    that do not fit together are ConfigErrors naming ``section.batch_size``, ``section.options.NAME``, ..."""
    if sampler is None:
        stray = (["batch_size"] if batch_size is not None else []) + [f"options.{option}" for option in given]
        if stray:
            raise ConfigError(f"{section}.{stray[0]}", f"{{{section}.{stray[0]}}} needs {{{section}.sampler}}")
        return None
    _require(batch_size is not None, f"{section}.batch_size",
             f"{{{section}.sampler}} {sampler} needs {{{section}.batch_size}}")
    _positive(section, "batch_size", batch_size)
    for option in given:
        if option in SAMPLER_COUNTS:
            _positive(section, f"options.{option}", given[option])
        if sampler in accepts and option not in accepts[sampler]:
            owner = next(name for name, options in accepts.items() if option in options)
            raise ConfigError(f"{section}.options.{option}", f"{{{section}.options.{option}}} applies to the "
                                                             f"{owner} sampler, not {sampler}")
    return SamplerSpec(sampler, batch_size, given)


@dataclass(frozen=True)
class MinibatchConfig:
    """Minibatch (sampled subgraph) training; a run without it trains full-batch."""

    sampler: str
    batch_size: int
    batches_per_epoch: int | None = None
    """None: ceil(n / batch_size), about one pass over the vertices per epoch."""
    norm_samples: int = 50
    """GraphSAINT pre-sampling batches; 0 turns normalization off (plain Â[S, S], mean loss over the batch)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Sampler options with defaults resolved (:func:`distgcn.training.sampler_choice.sampler_options`)."""
    sample_on: str = _one_of("auto", SAMPLE_ON)
    """Where batches are drawn and cut (:data:`SAMPLE_ON`); every choice draws the same batches."""

    def __post_init__(self) -> None:
        _positive("minibatch", "batch_size", self.batch_size)
        _choice("minibatch", "sample_on", self.sample_on, SAMPLE_ON)
        _positive("minibatch", "batches_per_epoch", self.batches_per_epoch, optional=True)
        _require(_is_int(self.norm_samples) and self.norm_samples >= 0, "minibatch.norm_samples",
                 f"{{minibatch.norm_samples}}: expected an integer >= 0, got {self.norm_samples!r}")
        _require(self.norm_samples <= COUNT_MAX, "minibatch.norm_samples",
                 f"{{minibatch.norm_samples}}: expected an integer in 0..{COUNT_MAX}, got {self.norm_samples!r}")


@dataclass(frozen=True)
class SourceConfig:
    """Where the shards come from: a partition directory, or a graph that rank 0 partitions and sends.

    Both None: the API was given a graph or a partition in memory.
    """

    partition_dir: str | None = None
    graph: str | None = None
    """A graph file or directory, or synthetic:... (docs/data.md)."""
    partition: str = _one_of(DEFAULT_PARTITION_MODEL, TRAIN_PARTITIONS)
    """The model rank 0 partitions ``graph`` with (one of TRAIN_PARTITIONS)."""
    vertex_order: str | None = _one_of(None, VERTEX_ORDERS)
    """How each shard numbers its rows when rank 0 partitions (None: VERTEX_ORDER); shards in a directory keep
    theirs."""
    symmetrize: bool = False
    features: int | None = None
    classes: int | None = None
    feature_norm: str = _one_of("row", FEATURE_NORMS)
    _ONE_SOURCE = "train needs exactly one of {source.partition_dir} (a partition directory) or {source.graph} GRAPH"

    def require_one(self) -> None:
        """Refuse a source that names neither a directory nor a graph (the command line has no graph in memory)."""
        _require(self.partition_dir is not None or self.graph is not None, "source.graph", self._ONE_SOURCE)

    def __post_init__(self) -> None:
        _require(self.partition_dir is None or self.graph is None, "source.graph", self._ONE_SOURCE)
        _require(self.vertex_order is None or self.partition_dir is None, "source.vertex_order",
                 "{source.vertex_order} applies to {source.graph}; the shards in {source.partition_dir} keep the "
                 "order they were written with")
        _choice("source", "partition", self.partition, TRAIN_PARTITIONS)
        _positive("source", "features", self.features, optional=True)
        _positive("source", "classes", self.classes, optional=True)
        _choice("source", "feature_norm", self.feature_norm, FEATURE_NORMS)


@dataclass(frozen=True)
class ComputeConfig:
    """How each rank computes: threads, the local SpMM kernel, the transport."""

    threads: int | None = None
    """Compute threads per rank; None: the front end's default (see RunConfig's users)."""
    spmm_kernel: str = _one_of("auto", KERNELS)
    backend: str | None = _one_of(None, BACKENDS)
    """None: nccl when a GPU is visible and no MPI launcher started the job, else mpi."""

    def __post_init__(self) -> None:
        _positive("compute", "threads", self.threads, optional=True, maximum=THREADS_MAX)
        _choice("compute", "spmm_kernel", self.spmm_kernel, KERNELS)
        _choice("compute", "backend", self.backend, BACKENDS, optional=True)


@dataclass(frozen=True)
class OutputConfig:
    """What rank 0 writes: the metrics file, the final weights, checkpoints (and whether to resume from them)."""

    metrics: str | None = None
    save_weights: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    """Write a checkpoint every K epochs and after the last one; None: only at the scheduler's warning."""
    checkpoint_keep: int = 3
    resume: bool = False
    restart_metrics: bool = False
    """On resume, start a new metrics file after the checkpoint's epoch instead of continuing the old one (which
    is refused if it is another run's or lacks epochs: distgcn.io.metrics_log.continued_records)."""

    def __post_init__(self) -> None:
        _require(bool(self.checkpoint_dir) or not (self.resume or self.checkpoint_every), "outputs.checkpoint_dir",
                 "{outputs.resume} and {outputs.checkpoint_every} need {outputs.checkpoint_dir} D")
        _require(self.resume or not self.restart_metrics, "outputs.restart_metrics",
                 "{outputs.restart_metrics} applies to {outputs.resume} with {outputs.metrics}")
        given = [(name, value) for name, value in (("metrics", self.metrics), ("save_weights", self.save_weights),
                                                   ("checkpoint_dir", self.checkpoint_dir)) if value]
        for index, (name, value) in enumerate(given):
            for other, other_value in given[index + 1:]:
                _require(os.path.realpath(value) != os.path.realpath(other_value), f"outputs.{other}",
                         f"{{outputs.{name}}} and {{outputs.{other}}} name one path ({literal(value)}): give each "
                         "output its own")
        _positive("outputs", "checkpoint_every", self.checkpoint_every, optional=True)
        _positive("outputs", "checkpoint_keep", self.checkpoint_keep)


@dataclass(frozen=True)
class ProgressConfig:
    quiet: bool = False
    """No per-epoch lines or progress; only the summary."""
    verbose: bool = False
    """Also each epoch's time split and traffic, and the run's settings."""


@dataclass(frozen=True)
class RunConfig:
    """Everything one training run needs, checked as a whole (each part checks itself when built)."""

    source: SourceConfig = field(default_factory=SourceConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    minibatch: MinibatchConfig | None = None
    """None: full-batch training."""
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    outputs: OutputConfig = field(default_factory=OutputConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], minibatch: MinibatchConfig | None = None) -> RunConfig:
        """A run from its settings by field name (each name is one section's, as flags and keywords name them):
        every section takes the names it declares and keeps its defaults for the others. The minibatch section,
        whose sampler options are resolved by the sampler, is built by the caller
        (distgcn.training.settings.run_config)."""
        hints = typing.get_type_hints(cls)
        sections = {}
        for name in (declared.name for declared in dataclasses.fields(cls) if declared.name != "minibatch"):
            section = hints[name]
            sections[name] = section(**{declared.name: settings[declared.name]
                                        for declared in dataclasses.fields(section) if declared.name in settings})
        return cls(minibatch=minibatch, **sections)

    def __post_init__(self) -> None:
        if self.minibatch is None:
            return
        _require(self.train.conv == "gcn", "train.conv",
                 "{train.conv} " + f"{self.train.conv}" + ": minibatch training ({minibatch.sampler}) trains GCN "
                 "only; GraphSAGE and GAT train full-batch")
        _require(self.train.halo_dtype is None, "train.halo_dtype",
                 "{train.halo_dtype} applies to full-batch training only: minibatch steps ({minibatch.sampler}) "
                 "exchange in the training dtype")
        _require(self.train.first_layer == "exact" and self.train.comm == "halo", "train.first_layer",
                 "minibatch training needs {train.first_layer} exact and the halo exchange: a batch aggregates "
                 "over its own subgraph Â[S, S]")


@dataclass(frozen=True)
class PartitionerConfig:
    """How a part vector is computed: the model, its tool and the tool's settings.

    What :func:`distgcn.partitioning.models.run_model` takes, as one record through the partition stage
    (``distgcn partition``, :func:`distgcn.api.partition`, and rank 0 of ``train --graph``). The models check
    what they use (distgcn.partitioning.models), with the flags' names, as before any graph is loaded.
    """

    SECTION = "partition"
    model: str = _one_of(DEFAULT_PARTITION_MODEL, PARTITION_MODELS)
    epsilon: float = EPSILON
    """The allowed imbalance (graph, hypergraph and stochastic models)."""
    seed: int = 0
    """Seeds the partitioner (and random features where the graph has none)."""
    partitioner: str | None = _one_of(None, PARTITIONERS)
    """None: the model's default tool (distgcn.partitioning.models)."""
    preset: str | None = None
    parts_file: str | None = None
    """The part vector of the external model."""
    threads: int | None = None
    """Mt-KaHyPar's and KaMinPar's threads; None: all cores."""
    vertex_weight: str = _one_of(VERTEX_WEIGHT, VERTEX_WEIGHTS)
    sampler: SamplerSpec | None = None
    """The stochastic model's sampler (``--sampler``, ``--batch-size`` and the sampler's options)."""
    shp_epsilon: float | None = None
    """The stochastic model's sample count (distgcn.partitioning.stochastic): None for its defaults."""
    shp_delta: float | None = None
    shp_samples: int | None = None

    @property
    def shp(self) -> dict[str, Any]:
        """The stochastic model's sample-count settings as its keywords."""
        return {"shp_epsilon": self.shp_epsilon, "shp_delta": self.shp_delta, "shp_samples": self.shp_samples}


@dataclass(frozen=True)
class PartitionConfig:
    """Everything ``distgcn partition`` needs: the graph, the part count, how parts are computed, the directory.

    The API's :func:`distgcn.api.partition` takes the same record (or its fields as keywords); a graph in memory
    leaves ``graph`` None, and ``out``, ``force`` and ``vertex_order`` go to :meth:`distgcn.api.Partition.write`.
    """

    parts: int
    graph: str | None = None
    """A graph file or directory, or synthetic:... (docs/data.md); None: a graph in memory (API)."""
    symmetrize: bool = False
    features: int | None = None
    classes: int | None = None
    feature_norm: str = _one_of("row", FEATURE_NORMS)
    partitioning: PartitionerConfig = field(default_factory=PartitionerConfig)
    out: str | None = None
    """The partition directory to write (the API writes it with Partition.write)."""
    force: bool = False
    vertex_order: str = _one_of(VERTEX_ORDER, VERTEX_ORDERS)
    quiet: bool = False
    verbose: bool = False
    central: bool = False
    """Under a launcher, read and partition on rank 0 as one process does, even where the ranks can do it
    together (each rank still cuts and writes its own shard)."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any], sampler: SamplerSpec | None = None) -> PartitionConfig:
        """The command from its settings by field name (as flags and keywords name them), with the sampler they
        name (:func:`sampler_spec`); a name not given keeps its default."""
        def taken(config: type) -> dict[str, Any]:
            return {declared.name: settings[declared.name] for declared in dataclasses.fields(config)
                    if declared.name in settings and declared.name not in ("partitioning", "sampler")}

        return cls(**taken(cls), partitioning=PartitionerConfig(**taken(PartitionerConfig), sampler=sampler))

    def __post_init__(self) -> None:
        s, given = PartitionerConfig.SECTION, self.partitioning
        _positive(s, "parts", self.parts)
        check_seed(s, given.seed)  # before a partitioner's C int overflows
        _non_negative(s, "epsilon", given.epsilon)
        _positive(s, "threads", given.threads, optional=True, maximum=THREADS_MAX)
        _positive(s, "features", self.features, optional=True)
        _positive(s, "classes", self.classes, optional=True)
        _positive(s, "shp_samples", given.shp_samples, optional=True)
        _require(given.model != "stochastic" or given.sampler is not None, f"{s}.sampler",
                 f"{{{s}.model}} stochastic needs a sampler: give {{{s}.sampler}} and {{{s}.batch_size}} (the "
                 "minibatches it partitions for)")
        if given.shp_epsilon is not None:
            _non_negative(s, "shp_epsilon", given.shp_epsilon)
            _require(given.shp_epsilon > 0, f"{s}.shp_epsilon",
                     f"{{{s}.shp_epsilon}}: expected a positive number, got {given.shp_epsilon!r}")
        if given.shp_delta is not None:
            _require(isinstance(given.shp_delta, (int, float)) and 0 < given.shp_delta < 1, f"{s}.shp_delta",
                     f"{{{s}.shp_delta}}: expected a probability in (0, 1), got {given.shp_delta!r}")


@dataclass(frozen=True)
class TimeConfig:
    """How ``stats --predict-time`` and ``report --predict-time`` predict an epoch (distgcn/performance/): the
    calibration file, the network figures that replace its measurement, and the ranks placed on a node."""

    SECTION = "time"
    predict_time: str | None = None
    """A ``distgcn calibrate`` file; None: no prediction."""
    bandwidth: float | None = None
    """A node link's bytes per second each way; None: the calibration's measurement."""
    latency: float | None = None
    """A message's start-up time in seconds; None: the calibration's measurement."""
    ranks_per_node: int = 1
    """Ranks on each node, in rank order: their messages to each other do not cross a link."""


@dataclass(frozen=True)
class CalibrationConfig:
    """What ``distgcn calibrate`` measures a node with (the model is a :class:`ModelConfig` beside it)."""

    SECTION = "calibrate"
    out: str
    features: int
    classes: int
    threads: int | None = None
    """Threads per rank, as the runs to predict will use; None: as ``train`` resolves them."""
    epochs: int = 6
    """Epochs trained per calibration graph; the first two are not timed."""
    graphs: tuple[tuple[int, float], ...] | None = None
    """(vertices, mean degree) of each synthetic graph timed; None: distgcn/performance/calibration.py's GRAPHS."""
    network: bool = True
    """Under a launcher, also measure the link between two ranks."""


@dataclass(frozen=True)
class PredictConfig:
    """Everything ``distgcn predict`` needs: where the shards come from, the weights file, and what to write.

    The model is the weights file's own (distgcn/io/weights.py); a graph is read as its record says training read
    it, unless ``symmetrize`` or ``feature_norm`` say otherwise (predicting on another graph).
    """

    SECTION = "predict"
    source: str
    """A partition directory, or a graph file or directory, or synthetic:... (rank 0 partitions it)."""
    weights: str
    out: str
    """The ``.npz`` to write (rank 0), or with ``per_rank`` a directory of one file per rank."""
    partition: str = _one_of(DEFAULT_PARTITION_MODEL, TRAIN_PARTITIONS)
    """How rank 0 partitions a graph (one of TRAIN_PARTITIONS)."""
    seed: int = 0
    """Seeds the partitioner of a graph."""
    symmetrize: bool | None = None
    """None: as the weights file records the trained graph was read."""
    feature_norm: str | None = _one_of(None, FEATURE_NORMS)
    """None: as the weights file records."""
    halo_window: int | None = default_of(ModelConfig, "halo_window")
    layer: int | None = None
    """Which layer's output goes in ``embeddings`` (1..layers); None: the last hidden layer."""
    all_layers: bool = False
    """Also write every layer's output (``layer_1`` … ``layer_L``)."""
    per_rank: bool = False
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    progress: ProgressConfig = field(default_factory=ProgressConfig)

    def __post_init__(self) -> None:
        s = self.SECTION
        _choice(s, "partition", self.partition, TRAIN_PARTITIONS)
        check_seed(s, self.seed)
        _choice(s, "feature_norm", self.feature_norm, FEATURE_NORMS, optional=True)
        _positive(s, "layer", self.layer, optional=True, maximum=LAYERS_MAX)
        check_halo_window(s, self.halo_window)
