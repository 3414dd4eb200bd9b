"""MUSAE datasets (Rozemberczki et al.), e.g. the Facebook page-page network.

A directory holding ``NAME_edges.csv`` (header, then ``id_1,id_2`` rows),
``NAME_target.csv`` (header with an ``id`` column and a label column:
``page_type``, ``target`` or ``ml_target``) and ``NAME.json`` (node id -> list
of feature ids).

- Vertices are the ids of the target file, mapped to 0..n-1 in increasing order
  (they already are 0..n-1 in the published files); ``vertex_ids`` keeps them.
- Edges are mutual relations, so the adjacency is symmetrized.
- Labels are the label column's distinct values numbered in sorted order of name
  (Facebook: company 0, government 1, politician 2, tvshow 3).
- Features are a dense float32 bag of words: ``features[v, f] = 1`` when f is in
  v's list; the width is the largest feature id + 1. Vertices missing from the
  json get a zero row.
- The split is random, seeded: :data:`SPLIT` (60/20/20) of a permutation drawn
  from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np

from distgcn.data._text import (
    TOKENIZE_BYTES_PER_BYTE,
    parse_int,
    read_bytes,
    token_error,
    tokenize_ints,
)
from distgcn.data.adjacency import edges_to_adjacency, require_edges
from distgcn.data.features import split_masks
from distgcn.data.graph import Graph
from distgcn.errors import InputError, quoted
from distgcn.io.limits import check_declared_size
from distgcn.io.schema import json_problem

SPLIT = (0.6, 0.2, 0.2)
TEXT_BYTES_PER_BYTE = 2
"""The csv and json files are held as bytes and then as decoded text, at least one byte per character."""
LABEL_COLUMNS = ("page_type", "target", "ml_target")


def find_dataset(directory: Path) -> str | None:
    """The NAME of the one MUSAE dataset in ``directory``, or None if there is none."""
    names = sorted(
        p.name[: -len("_edges.csv")]
        for p in directory.glob("*_edges.csv")
        if (directory / p.name.replace("_edges.csv", "_target.csv")).is_file()
    )
    if len(names) > 1:
        raise InputError(
            f"several MUSAE datasets here ({', '.join(names)}); pass a directory holding one", path=directory
        )
    return names[0] if names else None


def load_musae(directory: Path, name: str, *, seed: int = 0) -> Graph:
    """Read the edges, targets and features of dataset ``name`` in ``directory``."""
    vertex_ids, labels = _read_targets(directory / f"{name}_target.csv")
    n = len(vertex_ids)
    src, dst = _read_edges(directory / f"{name}_edges.csv", vertex_ids)
    json_path = directory / f"{name}.json"
    if not json_path.is_file():
        raise InputError(
            f"missing feature file {json_path.name} (expected node id -> list of feature ids)", path=json_path
        )
    features = _read_features(json_path, vertex_ids)
    adj = edges_to_adjacency(src, dst, n, symmetrize=True)
    require_edges(adj, directory / f"{name}_edges.csv")
    train, val, test = split_masks(n, SPLIT, np.random.default_rng(seed))
    return Graph(
        adj=adj,
        vertex_ids=vertex_ids,
        name=name,
        features=features,
        labels=labels,
        train_mask=train,
        val_mask=val,
        test_mask=test,
    )


def _read_targets(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(sorted vertex ids, label of each as an int) from the target table."""
    try:
        text = read_bytes(path, bytes_per_byte=TEXT_BYTES_PER_BYTE).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason})", path=path) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise InputError("empty file (expected a header with 'id' and a label column)", path=path)
    columns = [c.strip() for c in header]
    label_column = next((c for c in LABEL_COLUMNS if c in columns), None)
    if "id" not in columns or label_column is None:
        raise InputError(
            f"header {','.join(columns)!r} lacks 'id' or a label column ({', '.join(LABEL_COLUMNS)})", path=path, line=1
        )
    id_at, label_at = columns.index("id"), columns.index(label_column)
    ids: list[int] = []
    names: list[str] = []
    for row in reader:
        if not row:
            continue
        if len(row) != len(columns):
            raise InputError(f"expected {len(columns)} columns, found {len(row)}", path=path, line=reader.line_num)
        ids.append(parse_int(row[id_at], path, reader.line_num, "an integer id"))
        if ids[-1] < 0:
            raise InputError(f"negative id {ids[-1]}", path=path, line=reader.line_num)
        names.append(row[label_at].strip())
    if not ids:
        raise InputError("no vertices listed", path=path)
    id_array = np.asarray(ids, dtype=np.int64)
    order = np.argsort(id_array, kind="stable")
    repeated = np.flatnonzero(np.diff(id_array[order]) == 0)
    if repeated.size:
        raise InputError(f"id {id_array[order[repeated[0]]]} is listed twice", path=path)
    _, label_of_row = np.unique(np.asarray(names), return_inverse=True)
    return id_array[order], label_of_row[order].astype(np.int64)


def _read_edges(path: Path, vertex_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) positions from the comma-separated edge table."""
    data = read_bytes(path, bytes_per_byte=TOKENIZE_BYTES_PER_BYTE + 1)  # and the copy with commas as spaces
    first_newline = data.find(b"\n")
    header = data if first_newline < 0 else data[:first_newline]
    has_header = any(c not in b"0123456789, \t\r" for c in header)
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(buf == ord("\n"))
    comma_lines = np.searchsorted(newlines, np.flatnonzero(buf == ord(",")))
    commas_per_line = np.bincount(comma_lines, minlength=len(newlines) + 1)
    tokens = tokenize_ints(data.replace(b",", b" "), path, skip_first_line=has_header, what="an integer node id")
    per_line = np.bincount(tokens.line, minlength=tokens.num_lines)
    bad = np.flatnonzero((per_line != 0) & ((per_line != 2) | (commas_per_line[: len(per_line)] != 1)))
    if bad.size:
        line = int(bad[0])
        raise InputError("expected 'id_1,id_2'", path=path, line=line + 1)
    values = tokens.values
    position = np.minimum(np.searchsorted(vertex_ids, values), len(vertex_ids) - 1)
    unknown = vertex_ids[position] != values
    if unknown.any():
        k = int(np.argmax(unknown))
        raise InputError(f"node id {values[k]} is not in the target file", path=path, line=int(tokens.line[k]) + 1)
    return position[0::2], position[1::2]


def _read_features(path: Path, vertex_ids: np.ndarray) -> np.ndarray:
    """Dense binary features from ``{"node id": [feature ids]}``."""
    try:
        text = read_bytes(path, bytes_per_byte=TEXT_BYTES_PER_BYTE).decode("utf-8")
        table = json.loads(text, parse_int=lambda digits: _json_int(digits, text, path))
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, an integer of 4300+ digits, nested too deeply
        line = getattr(e, "lineno", None)
        raise InputError(f"not valid JSON ({json_problem(e)})", path=path, line=line) from None
    if not isinstance(table, dict):
        raise InputError("expected a JSON object mapping node ids to lists of feature ids", path=path)
    n = len(vertex_ids)
    rows: list[np.ndarray] = []
    cols: list[list[int]] = []
    for key, feature_ids in table.items():
        try:
            node = parse_int(key, path, None, "an integer node id")
        except InputError:  # the line is searched only for the message: a search per key is quadratic
            node = parse_int(key, path, _line_of_key(text, key), "an integer node id")
        position = int(np.searchsorted(vertex_ids, node))
        if position >= n or vertex_ids[position] != node:
            raise InputError(f"node id {quoted(key)} is not in the target file", path=path,
                             line=_line_of_key(text, key))
        if not isinstance(feature_ids, list) or not all(type(f) is int and f >= 0 for f in feature_ids):
            raise InputError(
                f"features of node {quoted(key)} must be a list of non-negative integers",
                path=path,
                line=_line_of_key(text, key),
            )
        rows.append(np.full(len(feature_ids), position, dtype=np.int64))
        cols.append(feature_ids)
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    col = np.fromiter((f for c in cols for f in c), dtype=np.int64, count=len(row))
    if col.size == 0:
        raise InputError("no feature ids in the file", path=path)
    width = int(col.max()) + 1  # one feature id drives the dense width: check it before allocating
    check_declared_size(path, _line_of_key(text, _key_holding(table, width - 1)),
                        f"feature id {width - 1} makes {n} x {width} dense features", vertices=0, entries=0,
                        extra_bytes=n * width * np.dtype(np.float32).itemsize)
    features = np.zeros((n, width), dtype=np.float32)
    features[row, col] = 1.0
    return features


def _json_int(digits: str, text: str, path: Path) -> int:
    """An integer of the feature file, refused when too large for an id (``_text.MAX_ID``) before Python
    converts it (it converts at most 4300 digits, and numpy's int64 less)."""
    if token_error(digits.encode(), path, None, "a feature id") is None:
        return int(digits)
    found = re.search(rf"(?<![0-9]){re.escape(digits)}(?![0-9])", text)
    line = None if found is None else text.count("\n", 0, found.start()) + 1
    raise token_error(digits.encode(), path, line, "a feature id")


def _key_holding(table: dict, feature_id: int) -> str:
    """The node whose list holds ``feature_id`` (to name its line in an error)."""
    return next(key for key, ids in table.items() if feature_id in ids)


def _line_of_key(text: str, key: str) -> int | None:
    """1-based line where ``"key":`` first appears, for error messages only (None if not found)."""
    at = text.find(json.dumps(key))
    return None if at < 0 else text.count("\n", 0, at) + 1
