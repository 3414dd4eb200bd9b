"""The packages depend one way: ``partition`` (the partition stage) imports ``distgcn``, never the reverse.

Only the command layer, which sits above both stages and drives them, may
import ``partition``; and no ``partition`` module may import the command
layer. Imports are read from the source with :mod:`ast`, at every level
(inside functions too, where a late import would hide a cycle), so nothing
is imported or run here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT

COMMAND_LAYER = ("distgcn.cli", "distgcn.commands", "distgcn.api", "distgcn.pipeline")
"""Modules (and packages, with everything under them) that drive both stages (docs/architecture.md)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree``; ``from X import y`` yields X and X.y."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield node.lineno, source
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}"
        elif isinstance(node, ast.Call) and called_name(node) in ("import_module", "__import__") \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            yield node.lineno, node.args[0].value


def called_name(call: ast.Call) -> str | None:
    """``f`` of ``f(...)`` or ``x.f(...)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def imports_of(package: str) -> Iterator[tuple[str, int, str]]:
    """(module, line, imported module) for every module of a top-level package of the repository."""
    for path in sorted((ROOT / package).rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in imported_modules(tree, module, path.name == "__init__.py"):
            yield module, line, name


def violations(found: Iterator[tuple[str, int, str]]) -> str:
    """One line per offending import statement (``from X import y`` is reported as X, not also X.y)."""
    first = {}
    for module, line, name in found:
        first.setdefault((module, line), name)
    return "\n".join(f"{module}:{line} imports {name}" for (module, line), name in first.items())


def test_the_import_reader_sees_late_and_relative_imports():
    source = ("import partition.models\nfrom ..partition_dir import META_FILE\n"
              "def f():\n    from partition import shards\n    importlib.import_module('partition.scatter')\n")
    found = {name for _, name in imported_modules(ast.parse(source), "distgcn.report.inputs")}
    assert {"partition.models", "distgcn.partition_dir", "partition", "partition.shards",
            "partition.scatter"} <= found


def test_only_the_command_layer_of_distgcn_imports_partition():
    wrong = violations((module, line, name) for module, line, name in imports_of("distgcn")
                       if within(name, ("partition",)) and not within(module, COMMAND_LAYER))
    assert not wrong, "distgcn below the command layer must not import the partition stage: the command " \
                      "layer passes in what the partition stage computes:\n" + wrong


def test_partition_does_not_import_the_command_layer():
    wrong = violations(found for found in imports_of("partition") if within(found[2], COMMAND_LAYER))
    assert not wrong, "the partition stage must not import distgcn's command layer:\n" + wrong
