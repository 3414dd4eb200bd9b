"""The packages of distgcn are the pipeline's stages, and imports run one way: down the pipeline.

Every package has a level (``LAYERS``, lowest first); a module imports only
modules of its own package or of a lower level. The partition stage (the
repository's ``partition/`` folder, installed as ``distgcn.partitioning``)
sits below the shard and runtime packages, so it never imports them. No
module imports another in a cycle. Imports are read from the source with
:mod:`ast`, at every level (inside functions too, where a late import would
hide a cycle), so nothing is imported or run here.
"""

from __future__ import annotations

import ast

from conftest import ROOT
from layers import (
    LAYERS,
    all_imports,
    cycles,
    imported_modules,
    level,
    module_name,
    source_files,
    upward_imports,
)


def test_the_import_reader_sees_late_and_relative_imports():
    source = ("import distgcn.partitioning.models\nfrom ..shard.directory import META_FILE\n"
              "def f():\n    from distgcn.shard import cut\n    importlib.import_module('distgcn.shard.scatter')\n")
    found = {name for _, name in imported_modules(ast.parse(source), "distgcn.report.inputs")}
    assert {"distgcn.partitioning.models", "distgcn.shard.directory", "distgcn.shard.cut",
            "distgcn.shard.scatter"} <= found


def test_every_package_has_a_layer():
    packages = {module_name(path).split(".")[1] for path in source_files() if module_name(path) != "distgcn"}
    unplaced = sorted(name for name in packages if level(f"distgcn.{name}") is None
                      or LAYERS[level(f"distgcn.{name}")] == ("distgcn.__main__", "distgcn") and name != "__main__")
    assert not unplaced, f"packages without a layer in LAYERS: {unplaced}"


def test_imports_point_down_the_pipeline():
    wrong = upward_imports(all_imports())
    assert not wrong, "an import points up the pipeline; move the code down or the caller up:\n" + "\n".join(wrong)


def test_no_import_cycles():
    found = cycles(all_imports())
    assert not found, "modules that import each other in a loop:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_catch_an_upward_import_and_a_cycle():
    assert upward_imports(iter([("distgcn.partitioning.models", 3, "distgcn.shard.cut")]))
    assert not upward_imports(iter([("distgcn.shard.cut", 3, "distgcn.partitioning.models")]))
    assert cycles(iter([("distgcn.nn.model", 1, "distgcn.nn.gat"), ("distgcn.nn.gat", 2, "distgcn.nn.model")]))


def test_the_partition_stage_installs_inside_distgcn():
    """The repository's partition/ folder is the package distgcn.partitioning, in a checkout and installed; no
    top-level module named ``partition`` is installed beside distgcn."""
    import tomllib

    assert (ROOT / "distgcn" / "partitioning").resolve() == (ROOT / "partition").resolve()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["include"] == ["distgcn*"]
    assert "distgcn.partitioning" in setuptools["package-data"]
