"""The run configuration (distgcn/config.py): checked once, errors naming fields, worded as flags by the CLI."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest

from distgcn.cli.main import build_parser
from distgcn.cli.options import field_flags
from distgcn.config import (
    ConfigError,
    MinibatchConfig,
    ModelConfig,
    OutputConfig,
    RunConfig,
    SourceConfig,
    TrainConfig,
)
from distgcn.errors import InputError

PACKAGE = Path(__file__).resolve().parents[2] / "distgcn"


def source_of(module: str) -> Path:
    path = PACKAGE.parent / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def module_imports(module: str) -> set[str]:
    """What importing ``module`` imports at top level (not inside functions): its packages, then its imports."""
    path = source_of(module)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = {".".join(package[:i]) for i in range(1, len(package) + 1)}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names
                      if base.startswith("distgcn") and source_of(f"{base}.{alias.name}").is_file()}
    return names - {module}


def test_config_imports_no_torch():
    """A static walk of distgcn.config's imports: settings can be checked (and the CLI parsed) without torch."""
    seen, todo = set(), ["distgcn.config"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in module_imports(name):
            if imported.split(".")[0] == "distgcn":
                todo.append(imported)
            else:
                assert imported.split(".")[0] in sys.stdlib_module_names, f"{name} imports {imported}"
    assert {"distgcn", "distgcn.config", "distgcn.errors"} <= seen


@pytest.mark.parametrize("build, field, message", [
    (lambda: TrainConfig(layers=3, hidden=(8, 8, 8)), "train.hidden",
     "train.hidden: expected 1 or 2 widths for 3 layers, got 3"),
    (lambda: TrainConfig(layers=1), "train.layers", "train.layers: expected at least 2, got 1"),
    (lambda: ModelConfig(dropout=1.0), "model.dropout", "model.dropout: expected a probability in [0, 1), got 1.0"),
    (lambda: TrainConfig(dtype="float16"), "train.dtype",
     "train.dtype: expected one of float32, float64, got 'float16'"),
    (lambda: TrainConfig(epochs=True), "train.epochs", "train.epochs: expected a positive integer, got True"),
    (lambda: OutputConfig(resume=True), "outputs.checkpoint_dir",
     "outputs.resume and outputs.checkpoint_every need outputs.checkpoint_dir D"),
    (lambda: SourceConfig(partition_dir="p", vertex_order="rcm"), "source.vertex_order",
     "source.vertex_order applies to source.graph; the shards in source.partition_dir keep the order they were "
     "written with"),
    (lambda: MinibatchConfig("node", 10, norm_samples=-1), "minibatch.norm_samples",
     "minibatch.norm_samples: expected an integer >= 0, got -1"),
    (lambda: RunConfig(train=TrainConfig(halo_dtype="bfloat16"), minibatch=MinibatchConfig("node", 10)),
     "train.halo_dtype", "train.halo_dtype applies to full-batch training only: minibatch steps "
     "(minibatch.sampler) exchange in the training dtype"),
])
def test_refused_settings_name_their_field(build, field, message):
    with pytest.raises(ConfigError) as refused:
        build()
    assert isinstance(refused.value, InputError)
    assert refused.value.field == field and str(refused.value) == message


HUGE = 10**23
"""Beyond 64 bits: numpy, torch and the partitioners' C ints overflow on it."""


@pytest.mark.parametrize("build, field, message", [
    (lambda: TrainConfig(seed=HUGE), "train.seed",
     f"train.seed: expected an integer in 0..2147483647 (the partitioners take a 32-bit seed), got {HUGE}"),
    (lambda: TrainConfig(seed=-HUGE), "train.seed",
     f"train.seed: expected an integer in 0..2147483647 (the partitioners take a 32-bit seed), got {-HUGE}"),
    (lambda: TrainConfig(epochs=10**8), "train.epochs", "train.epochs: expected an integer in 1..99999999, got "
     "100000000"),
    (lambda: TrainConfig(layers=HUGE), "train.layers", f"train.layers: expected an integer in 2..10000, got {HUGE}"),
    (lambda: TrainConfig(hidden=HUGE), "train.hidden",
     f"train.hidden: expected widths in 1..{2**62}, got ({HUGE},)"),
    (lambda: TrainConfig(conv="gat", heads=HUGE), "train.heads",
     f"train.heads: expected an integer in 1..{2**62}, got {HUGE}"),
    (lambda: MinibatchConfig("node", 10, norm_samples=HUGE), "minibatch.norm_samples",
     f"minibatch.norm_samples: expected an integer in 0..{2**62}, got {HUGE}"),
    (lambda: SourceConfig(graph="g", features=HUGE), "source.features",
     f"source.features: expected an integer in 1..{2**62}, got {HUGE}"),
    (lambda: OutputConfig(checkpoint_dir="c", checkpoint_keep=HUGE), "outputs.checkpoint_keep",
     f"outputs.checkpoint_keep: expected an integer in 1..{2**62}, got {HUGE}"),
])
def test_integers_too_large_for_their_type_name_their_field(build, field, message):
    """The API's keywords are checked as the flags are: a number that would overflow where it is used is a
    ConfigError naming its field and the accepted range."""
    with pytest.raises(ConfigError) as refused:
        build()
    assert refused.value.field == field and str(refused.value) == message


def test_compute_threads_beyond_any_node_are_refused():
    from distgcn.config import ComputeConfig

    with pytest.raises(ConfigError, match=r"^compute\.threads: expected an integer in 1\.\.4096, got 5000$"):
        ComputeConfig(threads=5000)


def test_one_width_is_repeated_and_an_int_is_one_width():
    assert TrainConfig(layers=4, hidden=8).widths(5, 3) == [5, 8, 8, 8, 3]
    assert ModelConfig(layers=3, hidden=(7, 6)).widths(5, 3) == [5, 7, 6, 3]


def train_parser():
    return build_parser()._subparsers._group_actions[0].choices["train"]


def test_every_field_of_a_run_has_a_flag_of_train():
    """The CLI words every configuration field as one of its own flags (field names are argparse dests)."""
    name = field_flags(train_parser())
    sections = {f.name: f.type for f in dataclasses.fields(RunConfig)}
    classes = {"source": SourceConfig, "train": TrainConfig, "minibatch": MinibatchConfig, "outputs": OutputConfig}
    from distgcn.config import ComputeConfig, ProgressConfig

    classes |= {"compute": ComputeConfig, "progress": ProgressConfig}
    assert set(classes) == set(sections)
    unnamed = [f"{section}.{f.name}" for section, cls in classes.items() for f in dataclasses.fields(cls)
               if name(f"{section}.{f.name}") == f"{section}.{f.name}" and f.name != "options"]
    assert unnamed == []
    assert name("train.hidden") == "--hidden" and name("source.partition_dir") == "DIR"
    assert ConfigError("x.y", "{train.first_layer} and {outputs.checkpoint_dir}").render(name) == \
        "--first-layer and --checkpoint-dir"


@pytest.mark.parametrize("sampler, given, field, flags", [
    ("frontier", {"frontier_size": 20}, "minibatch.options.frontier_size",
     "--frontier-size 20 must be smaller than the budget (--batch-size) 10"),
    ("frontier", {"pop": "naive"}, "minibatch.options.pop", "--frontier-pop naive: distributed minibatch training"),
])
def test_sampler_option_refusals_name_fields_the_command_line_words_as_its_flags(sampler, given, field, flags):
    """Checked once for the CLI and the API alike; a field path of any depth is worded as a flag."""
    from distgcn.training.sampler_choice import sampler_options

    with pytest.raises(ConfigError) as refused:
        sampler_options(sampler, 10, given)
    assert refused.value.field == field
    assert refused.value.render(field_flags(train_parser())).startswith(flags)
    assert "--" not in str(refused.value)
