"""Open Graph Benchmark node-property-prediction datasets, as the ``ogb`` package leaves them on disk.

A dataset directory (``ogbn_arxiv``, ``ogbn_products``, ...) holds either the CSV variant

- ``raw/edge.csv.gz``: ``source,target`` per line, no header; an undirected dataset stores one direction per pair;
- ``raw/num-node-list.csv.gz`` / ``raw/num-edge-list.csv.gz`` (optional): the vertex and edge counts;
- ``raw/node-feat.csv.gz`` (optional): one row of comma-separated floats per vertex;
- ``raw/node-label.csv.gz`` (optional): one class per line (``nan`` where unknown);

or the binary variant of the largest dataset (ogbn-papers100M): ``raw/data.npz`` with the arrays
``edge_index`` [2, E], ``num_nodes_list``, ``num_edges_list`` and ``node_feat`` [n, F], and
``raw/node-label.npz`` with ``node_label`` [n, 1] (float, NaN where unknown). Both variants hold the official
split as ``split/<scheme>/{train,valid,test}.csv.gz`` (one vertex id per line).

Whether reverse edges are added is a property of the dataset (:data:`UNDIRECTED`, from OGB's own dataset table,
where it is the ``add_inverse_edge`` column), looked up by the directory's name; ``symmetrize`` adds them for any
dataset, so a dataset this table does not know is read as directed unless asked. A vertex whose label is unknown
is in no split. Multi-task labels (ogbn-proteins: 112 binary columns) and heterogeneous datasets (ogbn-mag) are
refused: a GCN here predicts one class per vertex of one vertex type.
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

import numpy as np

from distgcn.data._int_scan import NONE, comment_table, scan_block
from distgcn.data._text import bad_token, line_blocks
from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.features import feature_matrix, real_numbers
from distgcn.data.graph import Graph
from distgcn.errors import InputError, quoted
from distgcn.io import limits
from distgcn.io.limits import check_declared_size, check_npz_arrays
from distgcn.io.npy_files import read_npz

UNDIRECTED = {"ogbn-products": True, "ogbn-proteins": True, "ogbn-arxiv": False, "ogbn-papers100M": False}
"""OGB's ``add_inverse_edge`` for each node-property dataset: True where edge.csv.gz holds one direction per pair."""

DEFAULT_SPLIT = {"ogbn-products": "sales_ranking", "ogbn-proteins": "species", "ogbn-arxiv": "time",
                 "ogbn-papers100M": "time"}
"""The official split scheme of each dataset, used when a directory holds several schemes."""

DOWNLOAD_NAMES = {"arxiv": "ogbn-arxiv", "products": "ogbn-products", "papers100M-bin": "ogbn-papers100M",
                  "proteinfunc": "ogbn-proteins"}
"""The directory names of OGB's zip files (before the ``ogb`` package renames them ``ogbn_NAME``)."""

SPLIT_FILES = ("train", "valid", "test")
_NO_COMMENTS = comment_table(b"")


def is_ogb_directory(directory: Path) -> bool:
    """Whether ``directory`` looks like an OGB dataset (a raw/ holding the edges in either variant)."""
    raw = directory / "raw"
    return (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file()


def dataset_name(directory: Path) -> str:
    """``ogbn-arxiv`` for ``.../ogbn_arxiv`` or ``.../arxiv``; other names as they are."""
    name = directory.resolve().name
    if name in DOWNLOAD_NAMES:
        return DOWNLOAD_NAMES[name]
    return name.replace("_", "-", 1) if name.startswith("ogbn_") else name


def load_ogb(directory: Path, *, symmetrize: bool = False) -> Graph:
    """Read the OGB dataset in ``directory``; reverse edges when the dataset is undirected or ``symmetrize``."""
    name = dataset_name(directory)
    raw = directory / "raw"
    if (raw / "data.npz").is_file():
        src, dst, n, features, labels = _read_binary(raw)
    else:
        src, dst, n, features, labels = _read_csv_variant(raw)
    adj = edges_to_adjacency(src, dst, n, symmetrize=symmetrize or UNDIRECTED.get(name, False))
    require_edges(adj, raw / ("data.npz" if (raw / "data.npz").is_file() else "edge.csv.gz"))
    graph = Graph(adj=adj, vertex_ids=np.arange(n, dtype=np.int64), name=name, features=features, labels=labels)
    graph.train_mask, graph.val_mask, graph.test_mask = split_masks(directory, name, n, labels)
    return graph


def _read_csv_variant(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None, np.ndarray | None]:
    """(sources, targets, vertex count, features, labels) from the csv.gz files."""
    edge_path = raw / "edge.csv.gz"
    edges = read_int_table(edge_path, columns=2, what="'source,target' vertex ids")
    features = labels = None
    n = _declared_count(raw / "num-node-list.csv.gz")
    if (raw / "node-feat.csv.gz").is_file():
        features = read_float_table(raw / "node-feat.csv.gz")
        n = _agree(n, len(features), raw / "node-feat.csv.gz", "feature rows")
    if (raw / "node-label.csv.gz").is_file():
        labels = _labels(read_float_table(raw / "node-label.csv.gz"), raw / "node-label.csv.gz")
        n = _agree(n, len(labels), raw / "node-label.csv.gz", "labels")
    if n is None:  # the largest id sets the vertex count: refuse one forged id before allocating for it
        n = int(edges.max()) + 1 if edges.size else 0
        check_declared_size(edge_path, None, f"vertex id {n - 1}", vertices=n, entries=len(edges))
    _check_ids(edges, n, edge_path)
    _check_count(raw / "num-edge-list.csv.gz", len(edges), "edges", edge_path)
    return edges[:, 0], edges[:, 1], n, features, labels


def _read_binary(raw: Path) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None, np.ndarray | None]:
    """(sources, targets, vertex count, features, labels) from data.npz and node-label.npz."""
    path = raw / "data.npz"
    arrays = _load_npz(path, ("edge_index", "num_nodes_list"))
    edge_index = arrays["edge_index"]
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or not np.issubdtype(edge_index.dtype, np.integer):
        raise InputError(f"edge_index must be an integer [2, E] array, found {edge_index.dtype} {edge_index.shape}",
                         path=path)
    n = _single_count(arrays["num_nodes_list"], path, "num_nodes_list")
    check_declared_size(path, None, f"num_nodes_list {n}", vertices=n, entries=edge_index.shape[1])
    if "num_edges_list" in arrays:
        edges = _single_count(arrays["num_edges_list"], path, "num_edges_list")
        if edges != edge_index.shape[1]:
            raise InputError(f"num_edges_list says {edges} edges, edge_index holds {edge_index.shape[1]}", path=path)
    _check_ids(edge_index.T, n, path, rows_are_lines=False)
    features = None
    if "node_feat" in arrays:
        features = feature_matrix(arrays["node_feat"], "node_feat", path, rows=n)
    labels = None
    label_path = raw / "node-label.npz"
    if label_path.is_file():
        label_array = _load_npz(label_path, ("node_label",))["node_label"]
        if label_array.ndim == 1:
            label_array = label_array[:, None]
        if label_array.ndim != 2 or not real_numbers(label_array):
            raise InputError(f"node_label must be a numeric [n, 1] array of real numbers, found {label_array.dtype} "
                             f"{label_array.shape}", path=label_path)
        labels = _labels(label_array.astype(np.float64, copy=False), label_path)
        _agree(n, len(labels), label_path, "labels")
    return edge_index[0].astype(np.int64), edge_index[1].astype(np.int64), n, features, labels


def _load_npz(path: Path, required: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every array of an .npz (no pickles), after checking its headers against the archive and memory."""
    try:
        check_npz_arrays(path)
        arrays = read_npz(path)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise InputError(f"not a readable .npz archive ({' '.join(str(e).split())})", path=path) from None
    missing = [key for key in required if key not in arrays]
    if missing:
        raise InputError(f"missing arrays {', '.join(missing)} (expected {', '.join(required)})", path=path)
    return arrays


def split_masks(directory: Path, name: str, n: int, labels: np.ndarray | None, lo: int = 0,
                hi: int | None = None) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Train/valid/test masks of the official split, of vertices ``[lo, hi)`` (default: all; ``labels`` are
    theirs); a vertex with an unknown label is in none of them."""
    hi = n if hi is None else hi
    split_root = directory / "split"
    schemes = sorted(p.name for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if not schemes:
        if labels is not None:
            raise InputError("no split/<scheme>/ directory (expected train.csv.gz, valid.csv.gz, test.csv.gz)",
                             path=directory)
        return None, None, None
    scheme = schemes[0] if len(schemes) == 1 else DEFAULT_SPLIT.get(name)
    if scheme not in schemes:
        raise InputError(f"several split schemes ({', '.join(schemes)}) and none is {name}'s official one; "
                         "keep one directory under split/", path=split_root)
    masks = []
    for part in SPLIT_FILES:
        path = split_root / scheme / f"{part}.csv.gz"
        ids = read_int_table(path, columns=1, what="a vertex id")[:, 0]
        _check_ids(ids[:, None], n, path)
        mask = np.zeros(hi - lo, dtype=bool)
        mask[ids[(ids >= lo) & (ids < hi)] - lo] = True
        if labels is not None:
            mask &= labels >= 0
        masks.append(mask)
    return masks[0], masks[1], masks[2]


def _labels(table: np.ndarray, path: Path, first_line: int = 0) -> np.ndarray:
    """One class per vertex as int64, -1 where the file says NaN (``table`` from line ``first_line`` + 1 on)."""
    if table.shape[1] != 1:
        raise InputError(f"expected one label per line, found {table.shape[1]} columns "
                         "(multi-task datasets such as ogbn-proteins are not supported)", path=path)
    values = table[:, 0]
    known = ~np.isnan(values)
    bad = np.flatnonzero(known & ((values < 0) | (values != np.round(values)) | (values >= 2**31)))
    if bad.size:
        raise InputError(f"expected a class number >= 0 or nan, found {values[bad[0]]!r}", path=path,
                         line=first_line + int(bad[0]) + 1)
    labels = np.full(len(values), -1, dtype=np.int64)
    labels[known] = values[known].astype(np.int64)
    return labels


def _declared_count(path: Path) -> int | None:
    """The vertex count of num-node-list.csv.gz (one graph), or None when the file is absent."""
    if not path.is_file():
        return None
    n = _single_count(read_int_table(path, columns=1, what="a vertex count")[:, 0], path, "the file")
    check_declared_size(path, 1, f"{n} vertices", vertices=n, entries=0)
    return n


def _check_count(path: Path, found: int, what: str, where: Path) -> None:
    if path.is_file():
        declared = _single_count(read_int_table(path, columns=1, what="an edge count")[:, 0], path, "the file")
        if declared != found:
            raise InputError(f"{path.name} says {declared} {what}, {where.name} holds {found}", path=where)


def _single_count(values: np.ndarray, path: Path, what: str) -> int:
    """The one non-negative count of a single-graph dataset."""
    values = np.asarray(values).reshape(-1)
    if values.size != 1 or not np.issubdtype(values.dtype, np.integer) or values[0] < 0:
        raise InputError(f"{what} must hold one count (a dataset of one graph), found {values[:4].tolist()}",
                         path=path)
    return int(values[0])


def _agree(n: int | None, found: int, path: Path, what: str) -> int:
    """The vertex count, once ``found`` rows of ``path`` agree with what was already known."""
    if n is not None and found != n:
        raise InputError(f"{found} {what} for {n} vertices (expected one line per vertex)", path=path)
    return found


def _check_ids(ids: np.ndarray, n: int, path: Path, *, rows_are_lines: bool = True, first: int = 0) -> None:
    """Every id in 0..n-1; otherwise name the line (row + 1) of the first that is not, or its edge number
    (``ids`` from row ``first`` on)."""
    bad = np.flatnonzero(((ids < 0) | (ids >= n)).any(axis=1))
    if bad.size:
        row = int(bad[0])
        value = next(int(v) for v in ids[row] if v < 0 or v >= n)
        if rows_are_lines:
            raise InputError(f"vertex id {value} is outside 0..{n - 1}", path=path, line=first + row + 1)
        raise InputError(f"edge_index[:, {first + row}] holds vertex id {value}, outside 0..{n - 1}", path=path)


def read_int_table(path: Path, *, columns: int, what: str) -> np.ndarray:
    """An int64 [rows, columns] table from a comma-separated file without header, streamed block by block."""
    if not path.is_file():
        raise InputError(f"missing file (expected {what} per line)", path=path)
    available = limits.available_bytes(None, 1)
    rows: list[np.ndarray] = []
    values = 0
    lines_before = 0
    for block in line_blocks(path):
        _check_commas(block, columns, path, lines_before, what)
        scan = scan_block(bytes(block).replace(b",", b" "), _NO_COMMENTS, per_line=columns)
        if scan.bad_token_line != NONE:
            number = lines_before + scan.bad_token_line + 1
            line = bytes(block).split(b"\n")[scan.bad_token_line].replace(b",", b" ")
            raise bad_token(line, path, number, what) or InputError(f"expected {what}", path=path, line=number)
        if scan.bad_count_line != NONE:
            raise InputError(f"expected {columns} comma-separated values ({what}), found {scan.bad_count}",
                             path=path, line=lines_before + scan.bad_count_line + 1)
        rows.append(scan.values.reshape(-1, columns))
        lines_before += scan.num_lines
        values += len(scan.values)
        limits.check_fits(path, lines_before, f"{values} values read up to this line", 2 * values * 8,
                          available=available)
    if not rows or sum(len(r) for r in rows) == 0:
        raise InputError(f"empty file (expected {what} per line)", path=path)
    return np.concatenate(rows)


def read_float_table(path: Path) -> np.ndarray:
    """A float [rows, columns] table (float32; float64 for a one-column table such as labels, to keep NaN exact)."""
    available = limits.available_bytes(None, 1)
    parts: list[np.ndarray] = []
    held = 0
    columns = 0
    lines_before = 0
    for block in line_blocks(path):
        data = bytes(block)
        if not columns:
            columns = data.split(b"\n", 1)[0].count(b",") + 1
        num_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
        _check_commas(block, columns, path, lines_before, "comma-separated numbers")
        dtype = np.float64 if columns == 1 else np.float32
        values = _parse_floats(data.replace(b",", b" "), dtype)
        if values is None or len(values) != num_lines * columns:
            _raise_first_bad_number(data, path, lines_before, columns)
        parts.append(values.reshape(-1, columns))
        lines_before += num_lines
        held += values.nbytes
        limits.check_fits(path, lines_before, f"{held // values.itemsize} numbers read up to this line",
                          2 * held, available=available)
    if not parts or sum(len(p) for p in parts) == 0:
        raise InputError("empty file (expected one row of comma-separated numbers per vertex)", path=path)
    return np.concatenate(parts)


def _parse_floats(text: bytes, dtype: type) -> np.ndarray | None:
    """Whitespace-separated floats, or None when numpy stops before the end (a token that is not a number)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


def _raise_first_bad_number(data: bytes, path: Path, lines_before: int, columns: int) -> None:
    lines = data.split(b"\n")
    for index, line in enumerate(lines[:-1] if data.endswith(b"\n") else lines):
        for token in line.split(b","):
            try:
                float(token)
            except ValueError:
                raise InputError(f"expected a number, found {quoted(token)}", path=path,
                                 line=lines_before + index + 1) from None
    raise InputError(f"expected {columns} comma-separated numbers per line", path=path)


def _check_commas(block: bytes | bytearray, columns: int, path: Path, lines_before: int, what: str) -> None:
    """Every line of the block holds ``columns - 1`` commas; otherwise name the first that does not."""
    buf = np.frombuffer(memoryview(block).toreadonly(), dtype=np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    num_lines = len(newlines) + (0 if len(buf) and buf[-1] == ord("\n") else 1)
    commas = np.bincount(np.searchsorted(newlines, np.flatnonzero(buf == ord(","))), minlength=num_lines)
    bad = np.flatnonzero(commas[:num_lines] != columns - 1)
    if bad.size:
        line = int(bad[0])
        raise InputError(f"expected {columns} comma-separated values ({what}), found {commas[line] + 1}",
                         path=path, line=lines_before + line + 1)
