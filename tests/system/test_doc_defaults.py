"""Every default the prose docs state is the tool's default (issue #22: the user guide called hypergraph the
default while partition required --model and train defaulted to random).

docs/cli.md is generated from the parser (tests/system/test_docs.py); this checks the rest: defaults written as
"`--flag VALUE` (the default)" or "`--flag` ... (default VALUE" anywhere in docs/ and README.md, found by
pattern so that a new one is checked too, and the claims worded in prose, each against the parser or the
code that applies it.
"""

from __future__ import annotations

import argparse
import re

import pytest
from conftest import ROOT

from distgcn.cli.main import build_parser
from distgcn.config import DEFAULT_PARTITION_MODEL
from distgcn.partitioning.stochastic import (
    DEFAULT_SHP_COVERAGE,
    DEFAULT_SHP_DELTA,
    DEFAULT_SHP_EPSILON,
    MAX_COVERAGE_SAMPLES,
)
from distgcn.runtime.threads import available_cores, default_threads

DOCS = [path for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if path.name != "cli.md"]
FLAG_VALUE_DEFAULT = re.compile(r"`(--[a-z-]+) ([^`\sA-Z][^`\s]*)`,? \(?(?:the )?default\b")
"""`--vertex-order rcm`, the default / `--spmm-kernel auto` (the default)"""
FLAG_THEN_DEFAULT = re.compile(r"`(--[a-z-]+)(?: [A-Z]+)?`[^`.;]{0,20}\(default ([\w.]+)")
"""`--norm-samples B` (default 50 / `--checkpoint-keep` files (default 3"""


def parsers(parser: argparse.ArgumentParser, path: str = "distgcn") -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its words (``distgcn jobs submit``)."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(parsers(sub, f"{path} {name}"))
    return found


COMMANDS = parsers(build_parser())


def defaults_of(flag: str) -> dict[str, object]:
    """The flag's default in each command that has it."""
    return {path: action.default for path, parser in COMMANDS.items() for action in parser._actions
            if flag in action.option_strings}


def stated_defaults() -> list[tuple[str, str, str]]:
    """(doc file, flag, value) for every default the docs state in one of the two patterns."""
    found = []
    for doc in DOCS:
        text = " ".join(doc.read_text().split())  # a claim may wrap across lines
        for pattern in (FLAG_VALUE_DEFAULT, FLAG_THEN_DEFAULT):
            found += [(doc.name, m.group(1), m.group(2)) for m in pattern.finditer(text)]
    return found


def test_the_patterns_find_the_stated_defaults():
    """The scan is not vacuous: it finds the claims known to be there."""
    found = {(flag, value) for _, flag, value in stated_defaults()}
    assert {("--vertex-order", "rcm"), ("--spmm-kernel", "auto"), ("--norm-samples", "50"),
            ("--checkpoint-keep", "3"), ("--concurrent", "1")} <= found


@pytest.mark.parametrize("doc, flag, value", stated_defaults())
def test_each_stated_default_is_the_parsers(doc, flag, value):
    defaults = defaults_of(flag)
    assert defaults, f"{doc} states a default for {flag}, which no command has"
    resolved = {path: default for path, default in defaults.items() if default is not None}  # None: see its help
    assert resolved, f"{doc}: {flag} has no default in {sorted(defaults)}"
    for path, default in resolved.items():
        assert str(default) == value, f"{doc} says {flag} defaults to {value}; {path} has {default!r}"


def doc_text(name: str) -> str:
    path = ROOT / name
    return " ".join(path.read_text().split())


def test_one_default_partition_model_as_the_docs_say():
    assert ("`--model hypergraph` minimizes the rows exchanged exactly and is the default of `partition --model`, "
            "`train --partition`, `predict --partition` and `jobs --model`") in doc_text("docs/user-guide.md")
    assert "(default: hypergraph, which minimizes the rows exchanged exactly)" in doc_text("README.md")
    assert DEFAULT_PARTITION_MODEL == "hypergraph"
    assert defaults_of("--model")["distgcn partition"] == DEFAULT_PARTITION_MODEL
    assert defaults_of("--partition") == {"distgcn train": DEFAULT_PARTITION_MODEL,
                                          "distgcn predict": DEFAULT_PARTITION_MODEL}
    assert defaults_of("--model")["distgcn jobs submit"] == defaults_of("--model")["distgcn jobs scaling"] \
        == DEFAULT_PARTITION_MODEL


def test_features_are_row_normalized_by_default_as_the_docs_say():
    assert "Features are scaled to unit L1 rows by default (`--feature-norm none` keeps" in doc_text(
        "docs/user-guide.md")
    norms = defaults_of("--feature-norm")
    assert norms.pop("distgcn predict") is None  # predict reads a graph as its weights file records
    assert set(norms.values()) == {"row"}


def test_threads_default_as_the_docs_say(monkeypatch):
    assert "by default `SLURM_CPUS_PER_TASK` under Slurm, else the node's cores divided by its ranks" in doc_text(
        "docs/user-guide.md")
    assert "by default Slurm's `SLURM_CPUS_PER_TASK`, else the node's cores divided by the ranks on it" in doc_text(
        "README.md")
    # resolved at start-up, as below; partition's: all cores for Mt-KaHyPar and KaMinPar (partition/*.py)
    assert defaults_of("--threads") == {"distgcn train": None, "distgcn predict": None, "distgcn partition": None,
                                        "distgcn calibrate": None}
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert default_threads(2) == 3
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert default_threads(1) == available_cores()


def test_stochastic_sample_count_defaults_as_the_docs_say():
    text = doc_text("docs/minibatch.md")
    assert (f"the Hoeffding bound below (ε {DEFAULT_SHP_EPSILON:g}, δ {DEFAULT_SHP_DELTA:g}) is met **and** they "
            f"contain half of Â's off-diagonal entries (edge coverage {DEFAULT_SHP_COVERAGE:g}), at most "
            f"{MAX_COVERAGE_SAMPLES:,} samples") in text
    assert f"(defaults {DEFAULT_SHP_EPSILON:g} and {DEFAULT_SHP_DELTA:g})" in text
    helps = {a.dest: " ".join(a.help.split()) for a in COMMANDS["distgcn partition"]._actions if a.help}
    assert DEFAULT_SHP_COVERAGE == 0.5 and "contain half of the edges" in helps["shp_samples"]
    assert f"at most {MAX_COVERAGE_SAMPLES} subgraphs" in helps["shp_samples"]
    assert f"(default: {DEFAULT_SHP_EPSILON:g})" in helps["shp_epsilon"]
    assert f"(default: {DEFAULT_SHP_DELTA:g})" in helps["shp_delta"]
