"""Planetoid citation datasets (Cora, CiteSeer, PubMed) as published by Yang et al.

Files ``ind.NAME.{x,y,tx,ty,allx,ally,graph,test.index}``: Python-2 pickles of
scipy sparse feature matrices, one-hot label arrays and a dict of adjacency
lists, plus a text file of test vertex ids. Pickles can run arbitrary code, so
they are read with an unpickler that only builds numpy arrays, scipy sparse
matrices (as inert stand-ins converted afterwards), lists, dicts and
``collections.defaultdict``; anything else is refused with InputError.

Assembly follows Kipf & Welling's loader:
- vertices 0..len(allx)-1 take the rows of ``allx``/``ally``; test vertex
  ``test.index[k]`` takes row k of ``tx``/``ty``;
- ids in the test range that are missing from ``test.index`` (15 isolated
  vertices of CiteSeer) get zero features and label -1, and are in no mask;
- train = ``range(len(y))``, val = the next 500 ids (fewer if ``allx`` ends
  sooner), test = the ids in ``test.index``.
The graph is undirected: the adjacency is symmetrized. Vertex ids are 0..n-1.
"""

from __future__ import annotations

import codecs
import collections
import io
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from distgcn.data._text import TOKENIZE_BYTES_PER_BYTE, read_bytes, tokenize_ints
from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.features import feature_matrix
from distgcn.data.graph import Graph
from distgcn.errors import InputError, quoted
from distgcn.io.limits import check_declared_size

PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")
FILES = (*PARTS, "test.index")
NUM_VAL = 500


class _PickledSparse:
    """Inert stand-in for a pickled scipy sparse matrix: it only records its state."""

    layout = ""

    def __setstate__(self, state: object) -> None:
        self.state = state


class _PickledCSR(_PickledSparse):
    layout = "csr"


class _PickledCSC(_PickledSparse):
    layout = "csc"


class _PickledLIL(_PickledSparse):
    layout = "lil"


class _PickledCOO(_PickledSparse):
    layout = "coo"


def _allowed_globals() -> dict[tuple[str, str], object]:
    reconstruct = np.ndarray((0,)).__reduce__()[0]
    scalar = np.float64(0).__reduce__()[0]
    allowed: dict[tuple[str, str], object] = {}
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = reconstruct
        allowed[(module, "scalar")] = scalar
    frombuffer = np.ndarray.__reduce_ex__(np.zeros(1), 5)[0]  # protocol-5 pickles
    for module in ("numpy.core.numeric", "numpy._core.numeric"):
        allowed[(module, "_frombuffer")] = frombuffer
    allowed[("_codecs", "encode")] = codecs.encode  # bytes in protocol-2 pickles written by Python 3
    allowed[("numpy", "ndarray")] = np.ndarray
    allowed[("numpy", "dtype")] = np.dtype
    for stand_in in (_PickledCSR, _PickledCSC, _PickledLIL, _PickledCOO):
        cls = f"{stand_in.layout}_matrix"
        for module in (f"scipy.sparse.{stand_in.layout}", f"scipy.sparse._{stand_in.layout}", "scipy.sparse"):
            allowed[(module, cls)] = stand_in
    for module in ("__builtin__", "builtins"):
        for builtin in (list, dict, set, tuple):
            allowed[(module, builtin.__name__)] = builtin
    allowed[("collections", "defaultdict")] = collections.defaultdict
    return allowed


_ALLOWED = _allowed_globals()


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, path: Path):
        super().__init__(io.BytesIO(data), encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> object:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise InputError(
                f"refusing to unpickle {quoted(f'{module}.{name}')}: Planetoid files may only hold "
                "numpy arrays, scipy sparse matrices, lists and dicts",
                path=self.path,
            ) from None


def _unpickle(path: Path) -> object:
    data = read_bytes(path)
    try:
        return _RestrictedUnpickler(data, path).load()
    except InputError:
        raise
    except Exception as e:  # a corrupt pickle can fail in many ways; all mean "bad file"
        detail = " ".join(str(e).split())
        raise InputError(f"not a valid Planetoid pickle ({type(e).__name__}: {detail})", path=path) from None


def find_prefix(path: Path) -> Path | None:
    """The ``DIR/ind.NAME`` prefix that ``path`` designates, or None if it is not Planetoid.

    Accepts the prefix itself, any one of its files, or a directory holding
    exactly one dataset (several: InputError listing them).
    """
    if path.is_dir():
        names = sorted(p.name[: -len(".graph")] for p in path.glob("ind.*.graph"))
        if len(names) > 1:
            choices = ", ".join(str(path / n) for n in names)
            raise InputError(f"several Planetoid datasets here; pass one of {choices}", path=path)
        return path / names[0] if names else None
    name = path.name
    for part in FILES:
        if name.startswith("ind.") and name.endswith("." + part):
            return path.with_name(name[: -len(part) - 1])
    if name.startswith("ind.") and Path(f"{path}.graph").exists():
        return path
    return None


def load_planetoid(prefix: Path) -> Graph:
    """Assemble features, labels, the standard split and the graph from ``prefix.*`` files."""
    name = prefix.name[len("ind.") :]
    missing = [p for p in FILES if not Path(f"{prefix}.{p}").is_file()]
    if missing:
        raise InputError(f"missing Planetoid files {', '.join(f'ind.{name}.{p}' for p in missing)}", path=prefix.parent)
    loaded = {part: _unpickle(Path(f"{prefix}.{part}")) for part in PARTS}
    x, tx, allx = (_dense(loaded[p], Path(f"{prefix}.{p}"), "feature") for p in ("x", "tx", "allx"))
    y, ty, ally = (_dense(loaded[p], Path(f"{prefix}.{p}"), "class") for p in ("y", "ty", "ally"))
    src, dst = _graph_edges(loaded["graph"], Path(f"{prefix}.graph"))
    # The vertices the files account for: a row of allx or tx each, and an entry of the graph's dict each
    # (CiteSeer's 15 featureless test ids have one). An id beyond them would size every array by itself.
    vertices = max(len(allx) + len(tx), len(loaded["graph"]))
    bound = f"{vertices} vertices ({len(allx)} rows of allx, {len(tx)} of tx, {len(loaded['graph'])} lists in graph)"
    if src.size and max(src.max(), dst.max()) >= vertices:
        raise InputError(f"vertex id {max(src.max(), dst.max())} in the adjacency lists is beyond the dataset's "
                         f"{bound}", path=Path(f"{prefix}.graph"))
    test_index = _read_test_index(Path(f"{prefix}.test.index"), vertices, bound)

    def fail(part: str, message: str) -> InputError:
        return InputError(message, path=Path(f"{prefix}.{part}"))

    if not (x.shape[1] == tx.shape[1] == allx.shape[1]):
        raise fail("tx", f"feature widths differ: x {x.shape[1]}, tx {tx.shape[1]}, allx {allx.shape[1]}")
    if not (y.shape[1] == ty.shape[1] == ally.shape[1]):
        raise fail("ty", f"label widths differ: y {y.shape[1]}, ty {ty.shape[1]}, ally {ally.shape[1]}")
    if len(x) != len(y):
        raise fail("y", f"{len(y)} label rows for {len(x)} rows of x")
    if len(allx) != len(ally):
        raise fail("ally", f"{len(ally)} label rows for {len(allx)} rows of allx")
    if not (len(tx) == len(ty) == len(test_index)):
        raise fail("test.index", f"{len(test_index)} test ids, but tx has {len(tx)} rows and ty {len(ty)}")
    if len(y) >= len(allx):
        raise fail("allx", f"{len(allx)} rows: no room for validation vertices after the {len(y)} training ones")
    if len(np.unique(test_index)) != len(test_index):
        raise fail("test.index", "test ids repeat")
    if test_index.size and test_index.min() < len(allx):
        raise fail("test.index", f"test id {test_index.min()} collides with the {len(allx)} rows of allx")

    n = max(len(allx), int(test_index.max(initial=-1)) + 1, int(src.max(initial=-1)) + 1, int(dst.max(initial=-1)) + 1)
    check_declared_size(prefix, None, f"vertex ids up to {n - 1} (test.index and graph)", vertices=n,
                        entries=len(src), extra_bytes=n * x.shape[1] * np.dtype(np.float32).itemsize)
    features = np.zeros((n, x.shape[1]), dtype=np.float32)
    features[: len(allx)] = allx
    features[test_index] = tx
    labels = np.full(n, -1, dtype=np.int64)
    labels[: len(ally)] = _class_of(ally)
    labels[test_index] = _class_of(ty)

    train_mask = np.zeros(n, dtype=bool)
    train_mask[: len(y)] = True
    val_mask = np.zeros(n, dtype=bool)
    val_mask[len(y) : min(len(y) + NUM_VAL, len(allx))] = True
    test_mask = np.zeros(n, dtype=bool)
    test_mask[test_index] = True

    adj = edges_to_adjacency(src, dst, n, symmetrize=True)
    require_edges(adj, Path(f"{prefix}.graph"))
    return Graph(
        adj=adj,
        vertex_ids=np.arange(n, dtype=np.int64),
        name=name,
        features=features,
        labels=labels,
        train_mask=train_mask,
        val_mask=val_mask,
        test_mask=test_mask,
    )


def _dense(obj: object, path: Path, column: str) -> np.ndarray:
    """A pickled matrix (sparse stand-in or ndarray) as a 2-d float32 array; each column is a ``column``."""
    if isinstance(obj, _PickledSparse):
        obj = _to_scipy(obj, path).toarray()
    if not isinstance(obj, np.ndarray):
        raise InputError(f"expected a 2-d numeric matrix, found {type(obj).__name__}", path=path)
    return feature_matrix(obj, "the matrix", path, column=column)


def _to_scipy(obj: _PickledSparse, path: Path) -> sp.spmatrix:
    state = getattr(obj, "state", None)
    try:
        if not isinstance(state, dict):
            raise TypeError("no state dict")
        shape = tuple(int(s) for s in state.get("_shape", state.get("shape")))
        if obj.layout in ("csr", "csc"):
            cls = sp.csr_matrix if obj.layout == "csr" else sp.csc_matrix
            return cls((state["data"], state["indices"], state["indptr"]), shape=shape)
        if obj.layout == "coo":
            return sp.coo_matrix((state["data"], (state["row"], state["col"])), shape=shape)
        rows, values = state["rows"], state["data"]
        row_ids = np.repeat(np.arange(len(rows)), [len(r) for r in rows])
        cols = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if len(rows) else np.zeros(0, np.int64)
        data = np.concatenate([np.asarray(v, dtype=np.float64) for v in values]) if len(values) else np.zeros(0)
        return sp.coo_matrix((data, (row_ids, cols)), shape=shape)
    except Exception as e:  # any inconsistency in the recorded state
        raise InputError(f"malformed pickled {obj.layout} matrix ({type(e).__name__}: {e})", path=path) from None


def _class_of(one_hot: np.ndarray) -> np.ndarray:
    """Column of the largest entry of each row; -1 for all-zero rows (unlabelled)."""
    labels = np.argmax(one_hot, axis=1).astype(np.int64)
    labels[~one_hot.any(axis=1)] = -1
    return labels


def _graph_edges(graph: object, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(neighbour, vertex) arrays from a dict of adjacency lists."""
    if not isinstance(graph, dict):
        raise InputError(f"expected a dict of adjacency lists, found {type(graph).__name__}", path=path)
    try:
        vertices = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
        lists = [np.asarray(graph[v], dtype=np.int64).reshape(-1) for v in graph]
    except (TypeError, ValueError, OverflowError):
        raise InputError("adjacency lists must map integer ids to lists of integer ids", path=path) from None
    counts = np.array([len(a) for a in lists], dtype=np.int64)
    neighbours = np.concatenate(lists) if lists else np.zeros(0, dtype=np.int64)
    owners = np.repeat(vertices, counts)
    if (vertices < 0).any() or (neighbours < 0).any():
        raise InputError("negative vertex id in adjacency lists", path=path)
    return neighbours, owners


def _read_test_index(path: Path, vertices: int, bound: str) -> np.ndarray:
    """The test vertex ids, one per line, each below ``vertices`` (what the other files hold: ``bound``)."""
    tokens = tokenize_ints(read_bytes(path, bytes_per_byte=TOKENIZE_BYTES_PER_BYTE), path, what="a test vertex id")
    per_line = np.bincount(tokens.line, minlength=tokens.num_lines)
    if (per_line > 1).any():
        line = int(np.argmax(per_line > 1))
        raise InputError(f"expected one test vertex id per line, found {per_line[line]}", path=path, line=line + 1)
    if (tokens.values < 0).any():
        k = int(np.argmax(tokens.values < 0))
        raise InputError(f"negative test vertex id {tokens.values[k]}", path=path, line=int(tokens.line[k]) + 1)
    if tokens.values.size == 0:
        raise InputError("no test vertex ids", path=path)
    beyond = np.flatnonzero(tokens.values >= vertices)
    if beyond.size:
        k = int(beyond[0])
        raise InputError(f"test vertex id {tokens.values[k]} is beyond the dataset's {bound}", path=path,
                         line=int(tokens.line[k]) + 1)
    return tokens.values
