"""The package layers of distgcn and a reader of the imports in its source, for the tests that check how its
modules depend on each other (tests/system/test_dependencies.py, tests/kernels/test_kernel_interface.py, and
tests/system/test_docs.py, which holds docs/architecture.md to LAYERS)."""

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
    ("distgcn.performance",),
    ("distgcn.report",),
    ("distgcn.api",),
    ("distgcn.performance.calibration",),
    ("distgcn.cli",),
    ("distgcn.__main__", "distgcn"),
)
"""The pipeline's stages, lowest first (docs/architecture.md): a package imports only its own level and below.
The single-process samplers (``sampling.reference``) are plain algorithms over Â that the partition stage's
stochastic model uses; the distributed samplers (the rest of ``sampling``) run over shards and halo plans. The
epoch-time model and its file (``performance``) sit below the report that draws it; the calibration that
measures a node trains through the API, so it sits above it."""

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
