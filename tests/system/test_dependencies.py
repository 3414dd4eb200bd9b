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
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT

LAYERS: tuple[tuple[str, ...], ...] = (
    ("distgcn.errors", "distgcn.hashing"),
    ("distgcn.runtime",),
    ("distgcn.config",),
    ("distgcn.io",),
    ("distgcn.comm",),
    ("distgcn.data",),
    ("distgcn.sampling.reference",),
    ("distgcn.partitioning",),
    ("distgcn.shard",),
    ("distgcn.kernels",),
    ("distgcn.spmm",),
    ("distgcn.sampling",),
    ("distgcn.nn",),
    ("distgcn.memory",),
    ("distgcn.training",),
    ("distgcn.report",),
    ("distgcn.api",),
    ("distgcn.cli",),
    ("distgcn.__main__", "distgcn"),
)
"""The pipeline's stages, lowest first (docs/architecture.md): a package imports only its own level and below.
The single-process samplers (``sampling.reference``) are plain algorithms over Â that the partition stage's
stochastic model uses; the distributed samplers (the rest of ``sampling``) run over shards and halo plans."""

ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
"""(importing module, imported module) pairs that point up the pipeline, each with the reason it may."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[0] == "partition":
        parts = ("distgcn", "partitioning", *parts[1:])
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


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def level(name: str) -> int | None:
    """The layer of a distgcn module (the most specific prefix that names one), or None outside distgcn."""
    best: tuple[int, int] | None = None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if within(name, prefix) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def source_files() -> Iterator[Path]:
    yield from sorted(path for path in (ROOT / "distgcn").rglob("*.py") if "partitioning" not in path.parts)
    yield from sorted((ROOT / "partition").rglob("*.py"))


def all_imports() -> Iterator[tuple[str, int, str]]:
    """(module, line, imported distgcn module) for every module of the package."""
    modules = {module_name(path) for path in source_files()}
    for path in source_files():
        module = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, name in imported_modules(tree, module, path.name == "__init__.py"):
            if name in modules and name != "distgcn":  # ``from distgcn import x`` imports x, not the face
                yield module, line, name


def upward_imports(found: Iterator[tuple[str, int, str]]) -> list[str]:
    wrong = {}
    for module, line, name in found:
        here, there = level(module), level(name)
        if there is not None and here is not None and there > here and (module, name) not in ALLOWED_UPWARD:
            wrong.setdefault((module, line), f"{module}:{line} imports {name} ({LAYERS[there][0]} is above "
                                             f"{LAYERS[here][0]})")
    return list(wrong.values())


def cycles(found: Iterator[tuple[str, int, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for module, _, name in found:
        if name != module and not within(module, name):  # a package's own __init__ is not a dependency
            graph.setdefault(module, set()).add(name)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return components


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
