"""A run's configuration from its settings by field name: the one builder behind ``distgcn train``'s flags and
:func:`distgcn.api.train`'s keywords, so that both check the same things in the same order."""

from __future__ import annotations

from typing import Any

from distgcn.config import (
    ConfigError,
    MinibatchConfig,
    RunConfig,
    default_of,
    sampler_spec,
)
from distgcn.sampling.reference.samplers import SAMPLER_OPTIONS

SAMPLER_OPTION_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for options in SAMPLER_OPTIONS.values()
                                                            for name in options))
"""The samplers' options (``minibatch.options``): walk_length, frontier_size, pop."""


def sampler_of(section: str, settings: dict[str, Any]) -> Any:
    """The sampler that ``settings`` name (``sampler``, ``batch_size`` and the samplers' options), checked."""
    given = {name: settings[name] for name in SAMPLER_OPTION_NAMES if settings.get(name) is not None}
    return sampler_spec(section, settings.get("sampler"), settings.get("batch_size"), given, SAMPLER_OPTIONS)


def run_config(settings: dict[str, Any]) -> RunConfig:
    """The run's configuration (checked) from its settings by field name; a name not given keeps its default."""
    spec = sampler_of("minibatch", settings)
    batches_per_epoch = settings.get("batches_per_epoch")
    sample_on = settings.get("sample_on")
    minibatch = None
    if spec is None:
        for name, given in (("batches_per_epoch", batches_per_epoch), ("sample_on", sample_on)):
            if given is not None and given != default_of(MinibatchConfig, name):
                raise ConfigError(f"minibatch.{name}", f"{{minibatch.{name}}} needs {{minibatch.sampler}}")
    else:
        from distgcn.training.pipeline import minibatch_config

        minibatch = minibatch_config(spec.name, spec.batch_size, spec.options, batches_per_epoch,
                                     settings.get("norm_samples", default_of(MinibatchConfig, "norm_samples")),
                                     sample_on or default_of(MinibatchConfig, "sample_on"))
    return RunConfig.from_settings(settings, minibatch)
