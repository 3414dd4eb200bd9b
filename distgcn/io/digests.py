"""Digests of files, read in blocks: what ties a partition directory to the parts file and graph it came from."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks (meta.json's ``parts_sha256``)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
