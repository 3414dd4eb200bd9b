"""One configuration for every command: RunConfig and PartitionConfig (distgcn/config.py) declare each setting's
default and choices, and the command line's options and the API's keywords reach every field, one to one.

The checks are functions that list what disagrees, so that a test can show each one fires on a broken door.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

import distgcn
from distgcn import api
from distgcn.cli.main import build_parser
from distgcn.config import PartitionConfig, PredictConfig, RunConfig, leaf_fields
from distgcn.data.prepare import GraphOptions
from distgcn.sampling.reference.samplers import SAMPLERS, FrontierSampler
from distgcn.training.settings import SAMPLER_OPTION_NAMES


def expanded_fields(config: type) -> dict[str, dict[str, Any]]:
    """Every setting of ``config`` by path, with its default and its choices (None: any value).

    A field that holds several settings is taken apart: ``minibatch.options`` into the samplers' options,
    a SamplerSpec (``partitioning.sampler``) into the sampler's name, batch size and options. The samplers'
    names and pops are declared by the sampler registry (distgcn.sampling.reference.samplers).
    """
    found: dict[str, dict[str, Any]] = {}
    for path, (_owner, declared) in leaf_fields(config).items():
        if path in ("minibatch.options", "partitioning.sampler"):
            parts = (["partitioning.sampler.name", "partitioning.sampler.batch_size"] if path != "minibatch.options"
                     else [])
            options = "minibatch.options" if path == "minibatch.options" else "partitioning.sampler.options"
            for part in [*parts, *[f"{options}.{name}" for name in SAMPLER_OPTION_NAMES]]:
                found[part] = {"default": None, "choices": sampler_choices(part)}
            continue
        if declared.default_factory is not dataclasses.MISSING:
            default = declared.default_factory()
        else:
            default = None if declared.default is dataclasses.MISSING else declared.default
        found[path] = {"default": default, "choices": declared.metadata.get("choices") or sampler_choices(path)}
    return found


def sampler_choices(path: str) -> tuple[str, ...] | None:
    if path in ("minibatch.sampler", "partitioning.sampler.name"):
        return tuple(SAMPLERS)
    return tuple(FrontierSampler.WALKS) if path.endswith(".pop") else None


def dest_of(path: str) -> str:
    """The argparse dest (and builders' setting name) of a field: its name; a SamplerSpec's name is ``sampler``."""
    return "sampler" if path.endswith("sampler.name") else path.rsplit(".", 1)[-1]


def command(name: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[name]


STATED_DEFAULT = re.compile(r"\(default: ([\w.+-]+)")


def cli_problems(parser: argparse.ArgumentParser, fields: dict[str, dict[str, Any]]) -> list[str]:
    """What keeps ``parser``'s options from being ``fields`` one to one: a field without an option, an option
    without a field, a default, choice list or stated default ("(default: X)" in the help) of its own."""
    actions = {action.dest: action for action in parser._actions if action.dest != "help"}
    problems = []
    for path, declared in fields.items():
        action = actions.get(dest_of(path))
        if action is None:
            problems.append(f"{path} has no option")
            continue
        flag = (action.option_strings or [action.dest])[0]
        if action.default != declared["default"]:
            problems.append(f"{flag} defaults to {action.default!r}, {path} to {declared['default']!r}")
        if tuple(action.choices or ()) != tuple(declared["choices"] or ()):
            problems.append(f"{flag} offers {action.choices!r}, {path} takes {declared['choices']!r}")
        stated = STATED_DEFAULT.search(" ".join((action.help or "").split()))
        resolved = declared["default"] is not None and not isinstance(declared["default"], bool)
        if stated and resolved and not _same(stated.group(1), declared["default"]):
            problems.append(f"{flag}'s help states the default {stated.group(1)}, {path} has {declared['default']!r}")
    dests = {dest_of(path) for path in fields}
    problems += [f"{(action.option_strings or [dest])[0]} sets no field" for dest, action in actions.items()
                 if dest not in dests]
    return problems


def _same(text: str, value: Any) -> bool:
    if isinstance(value, tuple):
        return text == ",".join(map(str, value))
    if isinstance(value, float):
        return float(text) == value
    return text == str(value)


TRAIN_FIELDS = expanded_fields(RunConfig)
PARTITION_FIELDS = expanded_fields(PartitionConfig)
PREDICT_FIELDS = expanded_fields(PredictConfig)


def test_the_sections_are_walked_and_the_samplers_options_taken_apart():
    """The field lists are not vacuous: they hold the settings known to be there, nested ones included."""
    assert {"train.epochs", "source.partition", "minibatch.norm_samples", "minibatch.options.pop",
            "outputs.restart_metrics", "progress.quiet", "compute.spmm_kernel"} <= set(TRAIN_FIELDS)
    assert {"parts", "partitioning.epsilon", "partitioning.sampler.name", "partitioning.sampler.options.walk_length",
            "partitioning.shp_samples", "vertex_order", "out"} <= set(PARTITION_FIELDS)
    assert TRAIN_FIELDS["train.weight_decay"] == {"default": 5e-4, "choices": None}
    assert PARTITION_FIELDS["partitioning.vertex_weight"]["choices"] == ("nonzeros", "work")


@pytest.mark.parametrize("name, fields", [("train", TRAIN_FIELDS), ("partition", PARTITION_FIELDS),
                                          ("predict", PREDICT_FIELDS)])
def test_every_field_is_one_option_with_its_default_and_choices(name, fields):
    assert cli_problems(command(name), fields) == []


def test_the_command_line_check_fires_on_each_kind_of_drift():
    """A field without a flag, a flag without a field, a default, choices or stated default of argparse's own."""
    fields = dict(TRAIN_FIELDS, **{"train.momentum": {"default": 0.9, "choices": None}})
    assert cli_problems(command("train"), fields) == ["train.momentum has no option"]
    parser = command("train")
    parser.add_argument("--nesterov", action="store_true")
    assert cli_problems(parser, TRAIN_FIELDS) == ["--nesterov sets no field"]
    parser = command("partition")
    for action in parser._actions:
        if action.dest == "epsilon":
            action.default = 0.05
        if action.dest == "vertex_weight":
            action.choices = ["nonzeros"]
        if action.dest == "feature_norm":
            action.help = "scale rows (default: none)"
    assert cli_problems(parser, PARTITION_FIELDS) == [
        "--feature-norm's help states the default none, feature_norm has 'row'",
        "--epsilon defaults to 0.05, partitioning.epsilon to 0.03",
        "--vertex-weight offers ['nonzeros'], partitioning.vertex_weight takes ('nonzeros', 'work')",
    ]


KEYWORD_NOT_FLAG = {"partition_model": "--partition", "root_weight": "--no-root-weight"}
"""API keywords not spelt as their flag: ``--partition`` is the model (the source is train's first argument);
``--no-root-weight`` turns the field off."""


def api_problems(table: dict[str, api.Keyword], function: Any, fields: dict[str, dict[str, Any]],
                 elsewhere: dict[str, str], parser: argparse.ArgumentParser) -> list[str]:
    """What keeps an API function's keywords from being ``fields`` one to one (with the fields given
    ``elsewhere``: where each is given instead): a field without a keyword, a keyword without a field, a default
    of its own, a keyword not named as the field's flag, a signature that does not show the keywords."""
    problems = []
    by_path = {keyword.path: name for name, keyword in table.items()}
    flags = {action.dest: (action.option_strings or [action.dest])[0] for action in parser._actions}
    for path, declared in fields.items():
        if path in elsewhere:
            problems += _elsewhere_problems(path, declared, elsewhere[path])
            continue
        name = by_path.get(path)
        if name is None:
            problems.append(f"{path} has no keyword")
            continue
        default = api.API_DEFAULTS.get(path, declared["default"])
        if table[name].default != default:
            problems.append(f"keyword {name} defaults to {table[name].default!r}, {path} to {default!r}")
        flag = flags.get(dest_of(path), "")
        if KEYWORD_NOT_FLAG.get(name, f"--{name.replace('_', '-')}") != flag:
            problems.append(f"keyword {name} is not named as {path}'s flag {flag}")
    problems += [f"keyword {name} sets no field" for name, keyword in table.items() if keyword.path not in fields]
    shown = {name: parameter.default for name, parameter in inspect.signature(function).parameters.items()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("config", "transport")}
    if shown != {name: keyword.default for name, keyword in table.items()}:
        problems.append(f"{function.__name__}'s signature does not show its keywords")
    return problems


def _elsewhere_problems(path: str, declared: dict[str, Any], where: str) -> list[str]:
    """A field given other than as a keyword: GraphOptions.NAME, or a parameter of partition or Partition.write."""
    name = dest_of(path)
    if where.startswith("GraphOptions."):
        options = {f.name: f.default for f in dataclasses.fields(GraphOptions)}
        return [] if options.get(name, "absent") == declared["default"] else \
            [f"GraphOptions.{name} is {options.get(name, 'absent')!r}, {path} {declared['default']!r}"]
    if where.startswith("source"):
        return []
    if where.startswith("command line "):  # a flag for launched jobs only, which the API never runs
        flag = where.removeprefix("command line ")
        options = {option for action in command("partition")._actions for option in action.option_strings}
        return [] if flag in options and dest_of(path) == flag[2:].replace("-", "_") else \
            [f"{where}: no such flag of partition for {path}"]
    function, parameter = re.fullmatch(r"([\w.]+)\((\w+)\)", where).groups()
    target = {"partition": distgcn.partition, "Partition.write": api.Partition.write}[function]
    parameters = inspect.signature(target).parameters
    if parameter not in parameters:
        return [f"{where} does not exist for {path}"]
    default = parameters[parameter].default
    expected = api.API_DEFAULTS.get(path, declared["default"])
    if default is not inspect.Parameter.empty and default != expected and parameter not in ("parts", "graph"):
        return [f"{where} defaults to {default!r}, {path} to {expected!r}"]
    return []


TRAIN_ELSEWHERE = {path: "source" for path in api.TRAIN_FROM_SOURCE} | {
    "source.symmetrize": "GraphOptions.symmetrize", "source.features": "GraphOptions.features",
    "source.classes": "GraphOptions.classes"}


def test_every_field_of_a_run_is_one_keyword_of_train():
    assert api_problems(api.TRAIN_KEYWORDS, distgcn.train, TRAIN_FIELDS, TRAIN_ELSEWHERE, command("train")) == []


def test_every_field_of_a_partition_is_one_keyword_or_argument_of_the_api():
    assert api_problems(api.PARTITION_KEYWORDS, distgcn.partition, PARTITION_FIELDS, api.PARTITION_ELSEWHERE,
                        command("partition")) == []


def test_the_api_check_fires_on_each_kind_of_drift():
    fields = dict(TRAIN_FIELDS, **{"train.momentum": {"default": 0.9, "choices": None}})
    assert api_problems(api.TRAIN_KEYWORDS, distgcn.train, fields, TRAIN_ELSEWHERE, command("train")) == \
        ["train.momentum has no keyword"]
    table = dict(api.TRAIN_KEYWORDS, momentum=api.Keyword("train.momentum", 0.9, "float"))
    problems = api_problems(table, distgcn.train, TRAIN_FIELDS, TRAIN_ELSEWHERE, command("train"))
    assert problems == ["keyword momentum sets no field", "train's signature does not show its keywords"]
    table = dict(api.TRAIN_KEYWORDS, epochs=api.Keyword("train.epochs", 100, "int"))
    assert api_problems(table, distgcn.train, TRAIN_FIELDS, TRAIN_ELSEWHERE, command("train"))[0] == \
        "keyword epochs defaults to 100, train.epochs to 200"
    elsewhere = dict(api.PARTITION_ELSEWHERE, vertex_order="Partition.write(order)")
    assert api_problems(api.PARTITION_KEYWORDS, distgcn.partition, PARTITION_FIELDS, elsewhere,
                        command("partition")) == ["Partition.write(order) does not exist for vertex_order"]


def test_graph_options_default_as_the_fields_they_stand_for():
    """GraphOptions (how the API and the partition stage read a graph) carries source fields: same defaults."""
    from distgcn.config import SourceConfig, TrainConfig

    options = {f.name: f.default for f in dataclasses.fields(GraphOptions) if f.name != "spec"}
    assert options == {name: TRAIN_FIELDS[f"source.{name}"]["default"]
                       for name in ("symmetrize", "features", "classes", "feature_norm")} | {"seed": 0}
    assert (SourceConfig().feature_norm, TrainConfig().seed) == (options["feature_norm"], options["seed"])
    assert {name: PARTITION_FIELDS[name]["default"] for name in ("symmetrize", "features", "classes",
                                                                 "feature_norm")} == \
        {name: options[name] for name in ("symmetrize", "features", "classes", "feature_norm")}


def test_a_field_added_to_the_configuration_is_a_keyword_of_the_api_at_once():
    """The keywords are generated from the fields: a new field needs no second declaration in api.py."""
    @dataclasses.dataclass(frozen=True)
    class Widened(RunConfig):
        extra: int = 7

    table = api.keywords(Widened, api.TRAIN_FROM_SOURCE)
    assert table["extra"] == api.Keyword("extra", 7, "int")
    assert set(table) - {"extra"} == set(api.TRAIN_KEYWORDS)


def other_value(path: str, declared: dict[str, Any]) -> Any:
    """A value of a field other than its default, valid on its own."""
    default, choices = declared["default"], declared["choices"]
    if path.endswith(("metrics", "save_weights", "checkpoint_dir", "partition_dir", "graph")):
        return f"somewhere/{path}"
    if path.endswith(("dropout", "shp_epsilon", "shp_delta")):
        return 0.25
    if path.endswith("lr_min"):
        return 0.005  # half of 0 is 0, and the floor must stay below --lr
    if choices:
        return next(choice for choice in choices if choice != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, tuple):
        return (default[0] + 1,)
    if isinstance(default, (int, float)):
        return default + 1 if isinstance(default, int) else default / 2
    return 3  # None: a count


SCHEDULE_PARTNERS = {"train.lr_schedule": {"lr_step": 5}, "train.lr_step": {"lr_schedule": "step"},
                     "train.lr_gamma": {"lr_schedule": "plateau"}, "train.lr_min": {"lr_schedule": "cosine"},
                     "train.lr_patience": {"lr_schedule": "plateau"}}
"""The schedule options, each with a schedule that reads it (another refuses it)."""


@pytest.mark.parametrize("path", [path for path in TRAIN_FIELDS if not path.startswith("minibatch.")])
def test_each_setting_reaches_its_field_through_the_one_builder(path):
    """A setting given by its field's name (as the flag's dest and the keyword name it) lands in that field."""
    from distgcn.config import ConfigError

    value = other_value(path, TRAIN_FIELDS[path])
    settings = {"checkpoint_dir": "c", "resume": True} if path.startswith("outputs.") else {}
    settings |= SCHEDULE_PARTNERS.get(path, {})
    settings[dest_of(path)] = value
    try:
        config = RunConfig.from_settings(settings)
    except ConfigError as refused:  # a value that needs another setting: refused naming this field or its partner
        pytest.fail(f"{path}={value!r}: {refused}")
    section, name = path.split(".")
    assert getattr(getattr(config, section), name) == value


@pytest.mark.parametrize("path", [path for path in PARTITION_FIELDS if ".sampler." not in path and path != "parts"])
def test_each_partition_setting_reaches_its_field_through_the_one_builder(path):
    value = other_value(path, PARTITION_FIELDS[path])
    config = PartitionConfig.from_settings({"parts": 2, dest_of(path): value})
    owner = config.partitioning if path.startswith("partitioning.") else config
    assert getattr(owner, dest_of(path)) == value


PROBES = ["-1", "0", "0.5", "1", "2147483648", "99999999", "100000000", "4096", "4097", str(2**62), str(2**62 + 1),
          "inf", "nan"]
"""Values at the edges of the ranges the options' types and the configuration accept."""


def looser_ranges(parser: argparse.ArgumentParser, fields: dict[str, dict[str, Any]], build) -> list[str]:
    """Values an option's type refuses but its field accepts: a range declared in argparse only (the command line
    may check more loosely than the configuration, which then refuses with the field's name, never more strictly)."""
    from distgcn.config import ConfigError

    found = []
    for action in parser._actions:
        path = next((path for path in fields if dest_of(path) == action.dest), None)
        if path is None or not callable(action.type) or action.type in (str, Path):
            continue
        for probe in PROBES:
            try:
                action.type(probe)
            except (argparse.ArgumentTypeError, ValueError):
                try:
                    build({dest_of(path): int(probe) if probe.lstrip("-").isdigit() else float(probe)})
                except ConfigError:
                    continue
                found.append(f"{action.option_strings[0]} {probe}")
    return found


def build_run(settings: dict[str, Any]) -> RunConfig:
    """A run from ``settings``; a minibatch setting comes with the sampler that takes it."""
    from distgcn.training.settings import run_config

    sampler = {"sampler": "frontier" if "frontier_size" in settings else "rw", "batch_size": 10}
    return run_config(sampler | settings if set(settings) & {"batch_size", "batches_per_epoch", "norm_samples",
                                                             *SAMPLER_OPTION_NAMES} else settings)


def build_partition(settings: dict[str, Any]) -> PartitionConfig:
    from distgcn.training.settings import sampler_of

    given = {"parts": 2} | settings
    if set(settings) & {"batch_size", *SAMPLER_OPTION_NAMES}:
        given = {"sampler": "frontier" if "frontier_size" in settings else "rw", "batch_size": 10} | given
    return PartitionConfig.from_settings(given, sampler_of("partition", given))


def test_no_range_is_declared_by_the_command_line_alone():
    assert looser_ranges(command("train"), {p: d for p, d in TRAIN_FIELDS.items() if "hidden" not in p},
                         build_run) == []
    assert looser_ranges(command("partition"), PARTITION_FIELDS, build_partition) == []


def test_the_api_builds_the_configuration_the_command_line_builds():
    """The same settings, as flags and as keywords, give one RunConfig (one builder behind both)."""
    from distgcn.cli.train import run_config

    flags = ["--graph", "synthetic:sbm,n=60", "--epochs", "3", "--hidden", "8,4", "--layers", "3", "--sampler",
             "frontier", "--batch-size", "20", "--frontier-size", "5", "--frontier-pop", "tree", "--partition",
             "random", "--checkpoint-dir", "c", "--checkpoint-every", "2", "--quiet"]
    from_flags = run_config(build_parser().parse_args(["train", *flags]))
    from_keywords, _ = api._run_config("synthetic:sbm,n=60", None, {
        "epochs": 3, "hidden": (8, 4), "layers": 3, "sampler": "frontier", "batch_size": 20, "frontier_size": 5,
        "frontier_pop": "tree", "partition_model": "random", "checkpoint_dir": Path("c"), "checkpoint_every": 2})
    assert from_keywords == from_flags
    config, source = api._run_config(None, from_flags, {})
    assert config == from_flags and source.spec == "synthetic:sbm,n=60"


def test_a_partition_configuration_equals_its_keywords_and_writes_its_directory(tmp_path):
    """partition(config=PartitionConfig(...)) is partition(parts, model, **keywords), and writes config.out."""
    from distgcn.config import PartitionerConfig, SamplerSpec
    from distgcn.shard.directory import read_meta

    spec = "synthetic:sbm,n=80,features=4,classes=2"
    by_keywords = distgcn.partition(spec, 2, "stochastic", seed=3, sampler="node", batch_size=20, shp_samples=4,
                                    vertex_weight="work", partitioner="kahypar")
    config = PartitionConfig(parts=2, graph=spec, out=str(tmp_path / "p"), vertex_order="natural",
                             partitioning=PartitionerConfig("stochastic", seed=3, sampler=SamplerSpec("node", 20),
                                                            shp_samples=4, vertex_weight="work",
                                                            partitioner="kahypar"))
    by_config = distgcn.partition(None, config=config)
    assert (by_config.parts == by_keywords.parts).all()
    assert by_config.info["shp"]["samples"] == 4 and by_config.info["vertex_weight"] == "work"
    meta = read_meta(tmp_path / "p")
    assert meta["vertex_order"] == "natural" and meta["partition_id"] == by_keywords.partition_id
    with pytest.raises(TypeError, match="not both"):
        distgcn.partition(spec, 2, config=config)


def test_the_api_refuses_a_sampler_option_as_the_command_line_does():
    with pytest.raises(distgcn.config.ConfigError, match=r"^minibatch\.options\.walk_length applies to the rw "
                                                         r"sampler, not node$"):
        distgcn.train("synthetic:sbm,n=60", sampler="node", batch_size=10, walk_length=3)
    with pytest.raises(distgcn.config.ConfigError, match=r"^partition\.batch_size needs partition\.sampler$"):
        distgcn.partition("synthetic:sbm,n=60,features=4,classes=2", 2, "random", batch_size=10)
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch'"):
        distgcn.train("synthetic:sbm,n=60", epoch=3)


def test_the_model_options_of_stats_are_the_model_fields():
    """stats --predict sizes a model: its options are ModelConfig's fields, with their defaults and choices."""
    from distgcn.config import ModelConfig, TimeConfig

    model = {path: declared for path, declared in expanded_fields(ModelConfig).items() if path != "attention_dropout"}
    time = expanded_fields(TimeConfig)
    parser = command("stats")
    actions = [action for action in parser._actions if action.dest not in ("partition_dirs", "predict", "json")]
    parser._actions = [action for action in actions if action.dest not in time]
    assert cli_problems(parser, model) == []
    parser._actions = [action for action in actions if action.dest in time or action.dest == "help"]
    assert cli_problems(parser, time) == []


def test_the_options_of_calibrate_are_the_model_and_calibration_fields():
    from distgcn.config import CalibrationConfig, ModelConfig

    fields = {path: declared for path, declared in expanded_fields(ModelConfig).items() if path != "attention_dropout"}
    fields.update(expanded_fields(CalibrationConfig))
    assert cli_problems(command("calibrate"), fields) == []


def test_report_s_prediction_options_are_the_time_fields():
    from distgcn.config import TimeConfig

    time = {path: declared for path, declared in expanded_fields(TimeConfig).items() if path != "ranks_per_node"}
    parser = command("report")
    parser._actions = [action for action in parser._actions if action.dest in time or action.dest == "help"]
    assert cli_problems(parser, time) == []


CLI_MODULES = ["train.py", "partition.py", "options.py", "sampler_options.py", "stats.py", "calibrate.py",
               "report.py"]


@pytest.mark.parametrize("module", CLI_MODULES)
def test_argparse_declares_no_default_or_choice_list_of_its_own(module):
    """A literal ``default=`` or ``choices=`` in train's or partition's options would be a second declaration."""
    tree = ast.parse((ROOT / "distgcn" / "cli" / module).read_text())
    literal = [f"{module}:{node.lineno} {keyword.arg}=" for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "attr", "") == "add_argument" for keyword in node.keywords
               if keyword.arg in ("default", "choices") and isinstance(keyword.value, (ast.Constant, ast.List,
                                                                                       ast.Tuple))]
    assert literal == []


def test_epsilon_is_declared_once():
    """Every function that takes an ``epsilon`` (the partition's imbalance), a ``vertex_weight`` or a
    ``vertex_order`` defaults it to config's constant, not to a value of its own."""
    literal = []
    for path in [*(ROOT / "distgcn").rglob("*.py"), *(ROOT / "partition").rglob("*.py")]:
        if "partitioning" in path.parts:  # the symlink to partition/
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args
                positional = arguments.posonlyargs + arguments.args
                pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
                pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
                literal += [f"{path.relative_to(ROOT)}:{node.lineno}" for argument, default in pairs
                            if argument.arg in ("epsilon", "vertex_weight", "vertex_order", "scheme")
                            and isinstance(default, ast.Constant) and default.value is not None]
    assert literal == []


@pytest.mark.parametrize("function", ["train", "partition"])
def test_the_signatures_docs_api_md_shows_are_the_apis(function):
    """Every keyword docs/api.md lists exists with the default it states, and none is missing there."""
    text = " ".join((ROOT / "docs" / "api.md").read_text().split())
    shown = re.search(rf"`{function}\((.*?)\)`", text).group(1)
    stated = dict(part.split("=", 1) for part in shown.split(", ") if "=" in part)
    parameters = inspect.signature(getattr(distgcn, function)).parameters
    defaults = {name: p.default for name, p in parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY or name in stated}
    assert set(stated) == set(defaults)
    for name, value in stated.items():
        documented = ast.literal_eval(value)
        assert defaults[name] in (documented, (documented,)), name
