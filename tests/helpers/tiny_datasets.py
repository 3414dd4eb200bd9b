"""Small dataset files written by hand in the formats the loaders read (Planetoid's pickles, MUSAE's csv and json,
any text file, gzipped by its name): tests/data/test_loaders.py, tests/cli/test_verify.py."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def write(path: Path, text: str | bytes) -> Path:
    """``text`` into ``path``, gzipped if the name ends in .gz."""
    data = text.encode() if isinstance(text, str) else text
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def make_planetoid(directory: Path, name: str = "tiny") -> dict[str, object]:
    """A 8-vertex Planetoid dataset: train 0-1, val 2-4, test ids 7 and 5 (in that order), 6 missing."""
    rng = np.random.default_rng(1)
    allx = (rng.random((5, 3)) < 0.5).astype(np.float32)
    tx = np.array([[1, 1, 1], [0, 0, 1]], dtype=np.float32)
    ally = np.eye(2)[[0, 1, 1, 0, 1]]
    ty = np.eye(2)[[1, 0]]
    graph = {0: [1, 2], 1: [0], 2: [0, 2], 3: [4], 4: [3], 5: [7], 6: [], 7: [5, 5]}
    parts = {
        "x": sp.csr_matrix(allx[:2]),
        "y": ally[:2],
        "allx": sp.csr_matrix(allx),
        "ally": ally,
        "tx": sp.lil_matrix(tx),
        "ty": ty,
        "graph": graph,
    }
    directory.mkdir(parents=True, exist_ok=True)
    for part, obj in parts.items():
        with open(directory / f"ind.{name}.{part}", "wb") as f:
            pickle.dump(obj, f, protocol=2)
    (directory / f"ind.{name}.test.index").write_text("7\n5\n")
    return {"allx": allx, "tx": tx}


def make_musae(directory: Path, edges: str | None = None, features: dict | None = None) -> None:
    """A 5-page MUSAE dataset (fb_edges.csv, fb_target.csv, fb.json); ``edges`` and ``features`` replace its own."""
    directory.mkdir(parents=True, exist_ok=True)
    write(directory / "fb_edges.csv", edges or "id_1,id_2\n0,1\n1,2\n2,2\n3,0\n1,0\n")
    write(
        directory / "fb_target.csv",
        "id,facebook_id,page_name,page_type\n"
        "0,11,A,tvshow\n1,12,\"Name, with comma\",company\n2,13,C,tvshow\n3,14,D,government\n4,15,E,company\n",
    )
    table = features if features is not None else {"0": [0, 2], "1": [1], "2": [], "3": [2, 0]}
    write(directory / "fb.json", json.dumps(table))
