"""Input-size guards: refuse, before allocating, a file whose declared sizes cannot fit the file or this node.

A forged header (a vertex count, an array shape) would otherwise make a reader allocate without bound;
each check compares what a header implies with the bytes the file holds and the memory this node has.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from distgcn.errors import InputError
from distgcn.io.npy_files import read_npy_header


def available_bytes(device, ranks_on_node: int) -> int | None:
    """Memory one rank may use: the device's free memory; or the least of this node's available memory, the
    room left under this process's cgroup memory limit (shared by the node's ranks too, as under Slurm's
    ``--mem``) and under its address-space limit (``ulimit -v``, ``prlimit --as``)."""
    if device is not None and device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    ranks = max(1, ranks_on_node)
    rooms = [_meminfo_available(), _cgroup_room(Path("/proc/self/cgroup"), Path("/sys/fs/cgroup"))]
    shared = [room // ranks for room in rooms if room is not None]
    own = _address_space_room()
    found = shared + ([own] if own is not None else [])
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


UNLIMITED = 1 << 62
"""A cgroup memory limit from this many bytes up is no limit (cgroup v1 writes 2^63 rounded to a page)."""


def _cgroup_room(membership: Path, root: Path) -> int | None:
    """The least room (limit − usage) over this process's memory cgroup and its ancestors, v2 or v1; None
    where no limit is set or nothing can be read."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        _number, controllers, path = line.split(":", 2)
        if controllers == "":
            base, limit_file, usage_file = root, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit_file, usage_file = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        group = base / path.lstrip("/")
        while True:
            try:
                limit = (group / limit_file).read_text().strip()
                usage = int((group / usage_file).read_text())
                if limit != "max" and int(limit) < UNLIMITED:
                    rooms.append(max(0, int(limit) - usage))
            except (OSError, ValueError):
                pass
            if group == base:
                break
            group = group.parent
    return min(rooms) if rooms else None


def _address_space_room() -> int | None:
    """Address space left under RLIMIT_AS (every mapping counts, so this is what an allocation can still get)."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(0, limit - int(line.split()[1]) * 1024)
    except OSError:
        pass
    return limit


VERTEX_BYTES = 40
"""A lower bound on what loading one vertex allocates: its id, adjacency and Â row pointers, Â's self loop
(index and value) and its degree, 8 bytes each (4 for the self loop's two halves)."""
EDGE_BYTES = 16
"""A lower bound per stored entry: its index and value in the adjacency, then again in Â."""


def check_declared_size(path: str | Path, line: int | None, declared: str, *, vertices: int, entries: int,
                        extra_bytes: int = 0, min_file_bytes: int | None = None,
                        file_bytes: int | None = None) -> None:
    """Refuse, before anything is allocated, counts from a file header (or spec) that cannot be right.

    ``declared`` says what the header declares, for the message. The counts must fit the file
    (``min_file_bytes`` it implies against ``file_bytes``), and the arrays they imply (at least
    VERTEX_BYTES per vertex, EDGE_BYTES per entry, plus ``extra_bytes``) must fit this node's memory.
    """
    if min_file_bytes is not None and file_bytes is not None and min_file_bytes > file_bytes:
        raise InputError(f"{declared}: the file would hold at least {min_file_bytes} bytes but has {file_bytes}",
                         path=path, line=line)
    check_fits(path, line, declared, vertices * VERTEX_BYTES + entries * EDGE_BYTES + extra_bytes)


def check_fits(path: str | Path | None, line: int | None, found: str, need: int, *,
               available: int | None = None, doing: str = "loading") -> None:
    """Refuse, before allocating, what needs at least ``need`` bytes of memory when this node has less.

    ``found`` says what sets the need, for the message; ``available`` is the memory a reader measured when
    it started (what it has allocated since is its own), or None to measure it now (unknown: accepted).
    """
    if available is None:
        available = available_bytes(None, 1)
    if available is not None and need > available:
        raise InputError(f"{found}: {doing} needs at least {need / 2**30:.1f} GiB but this node has "
                         f"{available / 2**30:.1f} GiB available", path=path, line=line)


def check_npz_arrays(path: Path) -> None:
    """Refuse an .npz whose array headers declare more data than the archive holds or this node's memory.

    np.load allocates each array from its header's shape before reading the data, so one forged
    shape would allocate without bound. Unreadable archives are left to np.load to report.
    """
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                with archive.open(info) as fh:
                    header = read_npy_header(fh)
                    if header is None:
                        continue
                    shape, _fortran, dtype = header
                    stored = info.file_size - fh.tell()
                nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if nbytes > stored:
                    raise InputError(f"array {info.filename.removesuffix('.npy')} declares shape {shape} "
                                     f"({nbytes} bytes) but the archive holds {stored} bytes for it", path=path)
                total += nbytes
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return
    available = available_bytes(None, 1)
    if available is not None and total > available:
        raise InputError(f"arrays of {total / 2**30:.1f} GiB but this node has {available / 2**30:.1f} GiB "
                         "available", path=path)
