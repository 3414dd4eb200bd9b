"""distgcn/memory/prediction.py's terms against the real objects they count, and worked examples for the rest.

Each rank of the in-process transport builds its shard of a small seeded graph
(directed or not), the distributed Â in each kernel's form and a halo exchanger,
runs one product and its backward, and sums the bytes the objects hold: the
prediction must equal them exactly. Activations, the CPU's shard term and the
index-width boundary are checked against sums written out here by hand.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from conftest import ROOT

from distgcn.comm.counters import CommCounters
from distgcn.comm.transport.inprocess import InProcessTransport, run_ranks
from distgcn.config import ConfigError, ModelConfig, TrainConfig
from distgcn.data.graph import Graph, normalized_adjacency
from distgcn.errors import InputError
from distgcn.io import limits
from distgcn.kernels import PRODUCTS
from distgcn.memory import prediction as memory
from distgcn.nn.gat import gat_activation_bytes
from distgcn.nn.model import GCN, gcn_activation_bytes, gcn_saved_bytes
from distgcn.nn.sage import sage_activation_bytes
from distgcn.shard.cut import iter_shards
from distgcn.shard.rank_shard import Shard
from distgcn.spmm.halo import HaloExchanger, HaloPlan
from distgcn.spmm.product import DistributedAdjacency, is_symmetric, spmm
from distgcn.training.trainer import Trainer, make_optimizer

sys.path.insert(0, str(ROOT / "tests" / "mpi_scripts"))
from spmm_check import make_graph, make_parts  # noqa: E402 - the seeded graphs of the halo tests

N, EDGES, SEED, WIDTH, RANKS = 60, 260, 5, 6, 3
DTYPES = {4: torch.float32, 8: torch.float64}


def rank_shard(rank: int, size: int, directed: bool) -> Shard:
    adj = make_graph(N, EDGES, SEED, directed)
    return list(iter_shards(Graph(adj=adj, vertex_ids=np.arange(N)), normalized_adjacency(adj),
                            make_parts(N, size, "random", SEED), size, "test"))[rank]


def block_bytes(block) -> int:
    """The bytes of the CSR arrays one SparseBlock holds (torch's lazy transpose included once built)."""
    if hasattr(block.matrix, "crow_indices"):
        tensors = [block.matrix] + ([block.transposed] if block.transposed is not None else [])
        return sum(t.crow_indices().nbytes + t.col_indices().nbytes + t.values().nbytes for t in tensors)
    m = block.matrix
    return m.indptr.nbytes + m.indices.nbytes + m.data.nbytes


def measured_rank(t: InProcessTransport, directed: bool, kernel: str, s: int) -> dict:
    shard = rank_shard(t.rank, t.size, directed)
    exchanger = HaloExchanger(HaloPlan.from_shard(shard), t, CommCounters(), exchanges=True)
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, DTYPES[s], kernel)
    h = torch.ones((shard.n_owned, WIDTH), dtype=DTYPES[s], requires_grad=True)
    spmm(adjacency, h).sum().backward()
    blocks = [adjacency.owned, *adjacency.halo_by_sender]
    if adjacency.owned_t is not adjacency.owned:
        blocks.append(adjacency.owned_t)
    sizes = memory.sizes_of(shard)
    return {
        "adjacency": sum(block_bytes(b) for b in blocks),
        "owned": block_bytes(adjacency.owned),
        "buffers": sum(b.nbytes for b in exchanger._buffers.values()),
        "symmetric": is_symmetric(shard.owned_block),
        "predicted": memory.adjacency_bytes(dataclasses.replace(sizes, owned_symmetric=is_symmetric(
            shard.owned_block)), s, PRODUCTS[kernel]),
        "unknown": memory.adjacency_bytes(sizes, s, PRODUCTS[kernel]),
        "halo_buffers": (sizes.halo_rows + sizes.rows_sent) * WIDTH * s,
    }


@pytest.mark.parametrize("s", [4, 8])
@pytest.mark.parametrize("kernel", ["torch", "scipy", "numba"])
@pytest.mark.parametrize("directed", [True, False])
def test_adjacency_and_halo_buffers_are_the_bytes_the_objects_hold(directed, kernel, s):
    for rank in run_ranks(RANKS, lambda t: measured_rank(t, directed, kernel, s)):
        assert rank["symmetric"] == (not directed)
        assert rank["predicted"] == rank["adjacency"]
        # unknown symmetry counts the transpose: exact for a directed graph, one owned block over otherwise
        assert rank["unknown"] == rank["adjacency"] + (0 if directed else rank["owned"])
        assert rank["buffers"] == rank["halo_buffers"]


def test_halo_buffers_term_is_one_pair_per_distinct_exchanged_width():
    sizes = memory.ShardSizes(rows=10, halo_rows=3, nnz_owned=20, nnz_halo=4, rows_sent=5, senders=2,
                              features=12, feature_itemsize=4, adjacency_itemsize=4, classes=3)
    # widths 12 -> 7 -> 7 -> 3: products of 7, 7 and 3 columns, so buffers of 7 and 3 columns
    predicted = memory.predict(sizes, ModelConfig(layers=3, hidden=(7,), dtype="float64"), on_gpu=True)
    assert predicted["halo_buffers"] == (3 + 5) * 7 * 8 + (3 + 5) * 3 * 8


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parameters_term_is_weights_gradients_and_optimizer_state_after_a_step(optimizer, dtype):
    config = ModelConfig(layers=3, hidden=(9, 5), dtype=dtype, optimizer=optimizer)
    widths = config.widths(11, 4)
    model = GCN(widths, 0.0, 1, DTYPES[memory.ITEMSIZE[dtype]])
    opt = make_optimizer(model.parameters(), TrainConfig(optimizer=optimizer))
    sum(p.sum() for p in model.parameters()).backward()
    opt.step()
    state = [v for st in opt.state.values() for k, v in st.items() if k != "step"]  # "step": one scalar
    held = sum(p.nbytes + p.grad.nbytes for p in model.parameters()) + sum(v.nbytes for v in state)
    sizes = memory.ShardSizes(rows=2, halo_rows=0, nnz_owned=2, nnz_halo=0, rows_sent=0, senders=0,
                              features=11, feature_itemsize=4, adjacency_itemsize=4, classes=4)
    assert memory.predict(sizes, config, on_gpu=True)["parameters"] == held


def test_shard_sizes_of_a_written_shard_are_those_of_the_loaded_one(tmp_path):
    for rank in range(RANKS):
        shard = rank_shard(rank, RANKS, directed=True)
        path = tmp_path / f"part{rank}.npz"
        shard.save(path)
        assert memory.shard_sizes(path) == memory.sizes_of(Shard.load(path)) == memory.sizes_of(shard)


def test_shard_sizes_of_an_unreadable_or_foreign_file_name_it(tmp_path):
    text = tmp_path / "notes.npz"
    text.write_text("not a zip archive")
    with pytest.raises(InputError, match="cannot read shard") as err:
        memory.shard_sizes(text)
    assert "notes.npz" in str(err.value)
    foreign = tmp_path / "other.npz"
    np.savez(foreign, num_classes=np.array(3), something=np.zeros(4))
    with pytest.raises(InputError, match="not a distgcn shard .lacks 'global_ids'") as err:
        memory.shard_sizes(foreign)
    assert "other.npz" in str(err.value)


def write_npz_versions(path) -> int:
    """An archive with a version 3.0 member first (skipped), then 1.0 and 2.0 ones; returns their data bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("c.npy", "w") as fh:
            np.lib.format.write_array(fh, np.zeros(5, dtype=np.int64), version=(3, 0))
        for name, version in (("a.npy", (1, 0)), ("b.npy", (2, 0))):
            with archive.open(name, "w") as fh:
                np.lib.format.write_array(fh, np.zeros((3, 2), dtype=np.float32), version=version)
    return 2 * 3 * 2 * 4


def test_shard_sizes_refuse_a_pickled_class_count_naming_the_file(tmp_path):
    """Before: np.load's ValueError escaped as a traceback (the headers need no unpickling, num_classes neither)."""
    arrays = rank_shard(0, RANKS, directed=True).to_arrays()
    path = tmp_path / "pickled.npz"
    np.savez(path, **{**arrays, "num_classes": np.array(3, dtype=object)})
    with pytest.raises(InputError, match="pickled.npz: not a distgcn shard .Object arrays cannot be loaded"):
        memory.shard_sizes(path)


def test_npz_headers_reads_both_header_versions_and_skips_others(tmp_path):
    path = tmp_path / "h.npz"
    write_npz_versions(path)
    headers = memory._npz_headers(path)
    assert headers == {"a": ((3, 2), np.dtype(np.float32)), "b": ((3, 2), np.dtype(np.float32))}


def test_refuse_if_too_big_refuses_one_byte_short_and_names_the_largest_part_and_the_flag():
    predicted = {"adjacency": 3 * 2**30, "features": 2**30, "total": 4 * 2**30}
    memory.refuse_if_too_big(predicted, None, "this GPU")
    memory.refuse_if_too_big(predicted, 4 * 2**30, "this GPU")
    with pytest.raises(ConfigError) as err:
        memory.refuse_if_too_big(predicted, 4 * 2**30 - 1, "this GPU")
    message = str(err.value)
    assert ("would need 4.0 GiB on this rank (largest part: adjacency, 3.0 GiB) but this GPU has 4.0 GiB "
            "available") in message
    assert message.endswith("use more ranks, smaller train.hidden or float32")  # the CLI renders the flag
    assert err.value.field == "train.hidden"


# ---- worked examples, terms written out from the docstrings ----

def test_activations_worked_examples():
    n = 10
    # 8 -> 5 -> 3: both layers multiply by W first (b < a) and keep only their outputs; backward at width 5
    assert gcn_activation_bytes(n, [8, 5, 3], 4, 0.5, True) == n * 5 * 4 + n * 3 * 4 + 3 * n * 5 * 4
    # 3 -> 7 -> 2: layer 0 keeps dropout(H) (3 wide, no mask: the input's) and its output; backward at width 7
    assert gcn_activation_bytes(n, [3, 7, 2], 8, 0.5, True) == n * 3 * 8 + n * 7 * 8 + n * 2 * 8 + 3 * n * 7 * 8
    # 6 -> 4 -> 9 -> 2 with dropout on a GPU: layer 1 (4 -> 9) keeps dropout(H) and its float mask
    kept = n * 4 * 8 + (n * 4 * 8 + n * 4 * 8) + n * 9 * 8 + n * 2 * 8
    assert gcn_activation_bytes(n, [6, 4, 9, 2], 8, 0.5, True) == kept + 3 * n * 9 * 8
    # the same on the CPU (kept), or without dropout on a GPU: no mask
    no_mask = kept - n * 4 * 8
    assert gcn_saved_bytes(n, [6, 4, 9, 2], 8, 0.5, False) == no_mask
    assert gcn_activation_bytes(n, [6, 4, 9, 2], 8, 0.0, True) == no_mask + 3 * n * 9 * 8
    # equal widths (b == a) multiply by Â first: layer 1 keeps its mask, dropout(H) and its output
    assert gcn_activation_bytes(n, [5, 5, 5], 4, 0.5, True) == (n * 5 * 4 + n * 5 * 4) + (
        n * 5 * 4 + n * 5 * 4 + n * 5 * 4) + 3 * n * 5 * 4


SIZES = memory.ShardSizes(rows=10, halo_rows=3, nnz_owned=20, nnz_halo=4, rows_sent=5, senders=2,
                          features=12, feature_itemsize=8, adjacency_itemsize=8, classes=3)


def test_predict_worked_example_on_the_cpu_counts_the_shard_less_what_tensors_share():
    config = ModelConfig(layers=2, hidden=(6,), dtype="float64", optimizer="sgd", dropout=0.0)
    terms = memory.predict(SIZES, config, on_gpu=False, kernel="torch")
    n, h, r, s = 10, 3, 5, 8
    assert terms["features"] == n * 12 * s
    assert terms["labels_masks"] == n * (8 + 3)  # int64 labels, three bool masks
    assert terms["plan"] == r * 8
    assert terms["parameters"] == (12 * 6 + 6 + 6 * 3 + 3) * s * 2
    # host arrays: two int32 row pointers and columns, values, features, ids + labels + masks, halo ids + send index
    shard = (2 * (n + 1) + 24) * 4 + 24 * 8 + n * 12 * 8 + n * (16 + 3) + (h + r) * 8
    # shared with tensors: the float64 features, torch's owned values, the masks, the send index
    assert terms["shard"] == shard - (n * 12 * 8 + 20 * 8 + n * 3 + r * 8)
    assert terms["total"] == sum(v for k, v in terms.items() if k != "total")
    numba = memory.predict(SIZES, config, on_gpu=False)
    assert numba["shard"] == shard - (n * 12 * 8 + n * 3 + r * 8)  # numba's blocks copy the values to int32 form
    float32 = memory.predict(SIZES, dataclasses.replace(config, dtype="float32"), on_gpu=False, kernel="torch")
    assert float32["shard"] == shard - (n * 3 + r * 8)  # float32 tensors copy the float64 arrays
    assert float32["features"] == n * 12 * 4


def test_predict_counts_the_gpu_s_dropout_mask_in_activations():
    config = ModelConfig(layers=3, hidden=(4, 9), dtype="float64", dropout=0.5)  # 12 -> 4 -> 9 -> 3
    n, s = 10, 8
    kept = n * 4 * s + n * 4 * s + n * 9 * s + n * 3 * s  # outputs, and dropout(H) before the 4 -> 9 product
    # the CPU's walk peaks in the last layer's backward: all it kept but the logits (17 columns), Âᵀ G (3) and
    # the 9-wide gradient of H (the 4 -> 9 layer's ReLU is folded into the 3-wide one-pass product)
    assert memory.predict(SIZES, config, on_gpu=False)["activations"] == (17 + 3 + 9) * n * s
    assert memory.predict(SIZES, config, on_gpu=True)["activations"] == kept + n * 4 * s + 3 * n * 9 * s


def test_predict_on_a_gpu_has_no_shard_term_and_auto_is_torch_there():
    config = ModelConfig(layers=2, hidden=(6,), dtype="float32")
    gpu = memory.predict(SIZES, config, on_gpu=True)
    assert "shard" not in gpu
    torch_form, numba_form = PRODUCTS["torch"], PRODUCTS["numba"]
    assert gpu["adjacency"] == memory.adjacency_bytes(SIZES, 4, torch_form) != memory.adjacency_bytes(SIZES, 4, numba_form)
    assert gpu["total"] == sum(v for k, v in gpu.items() if k != "total")
    assert memory.predict(SIZES, config, on_gpu=False)["adjacency"] == memory.adjacency_bytes(SIZES, 4, numba_form)


@pytest.mark.parametrize("entries, index", [(2**31 - 1, 4), (2**31, 8)])
def test_scipy_indices_are_int32_below_2_to_the_31(entries, index):
    sizes = dataclasses.replace(SIZES, rows=1, halo_rows=0, nnz_owned=entries - 4, nnz_halo=4, senders=1,
                                owned_symmetric=True)
    owned = 2 * index + (entries - 4) * (index + 4)
    halo = 2 * index + 4 * (index + 4)
    assert memory.adjacency_bytes(sizes, 4, PRODUCTS["scipy"]) == owned + halo
    rows = dataclasses.replace(sizes, rows=entries - 1, halo_rows=1, nnz_owned=4)
    small = entries * index  # (rows + 1) row pointers
    assert memory.adjacency_bytes(rows, 4, PRODUCTS["numba"]) == small + 4 * (index + 4) + small + 4 * (index + 4)


MEMINFO = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    7000001 kB\nCached: 5 kB\n"


def test_available_bytes_shares_the_node_s_memavailable_between_its_ranks(monkeypatch):
    real = memory.Path.read_text
    monkeypatch.setattr(limits.Path, "read_text",
                        lambda self, *a, **k: MEMINFO if str(self) == "/proc/meminfo" else real(self, *a, **k))
    assert limits.available_bytes(None, 1) == 7000001 * 1024
    assert limits.available_bytes(torch.device("cpu"), 3) == 7000001 * 1024 // 3
    assert limits.available_bytes(None, 0) == 7000001 * 1024  # no rank count known: the whole node


def test_available_bytes_is_unknown_without_meminfo_and_the_device_s_free_memory_on_a_gpu(monkeypatch):
    def unreadable(self, *a, **k):
        raise OSError("no /proc")
    monkeypatch.setattr(limits.Path, "read_text", unreadable)
    assert limits.available_bytes(None, 1) is None
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: asked.append(device) or (123456789, 2 * 10**9))
    gpu = type("Device", (), {"type": "cuda"})()
    assert limits.available_bytes(gpu, 4) == 123456789
    assert asked == [gpu]


def node_has(monkeypatch, value: int | None) -> None:
    """This node's available memory, as the checks before loading ask for it (the whole node: no rank yet)."""
    def available(device, ranks_on_node):
        assert device is None and ranks_on_node == 1
        return value
    monkeypatch.setattr(limits, "available_bytes", available)


def test_declared_sizes_are_refused_one_byte_beyond_the_file_or_the_memory(monkeypatch, tmp_path):
    node_has(monkeypatch, 3 * 40 + 5 * 16 + 7)
    path = tmp_path / "g.mtx"
    limits.check_declared_size(path, 2, "header", vertices=3, entries=5, extra_bytes=7, min_file_bytes=100,
                               file_bytes=100)
    node_has(monkeypatch, 3 * 40 + 5 * 16)
    limits.check_declared_size(path, 2, "header", vertices=3, entries=5)  # no extra bytes unless given
    node_has(monkeypatch, 3 * 40 + 5 * 16 + 7)
    with pytest.raises(InputError) as err:
        limits.check_declared_size(path, 2, "header declares 3", vertices=3, entries=5, min_file_bytes=101,
                                   file_bytes=100)
    assert str(err.value).endswith("g.mtx:2: header declares 3: the file would hold at least 101 bytes but has 100")
    for too_big in ({"vertices": 4, "entries": 5, "extra_bytes": 0}, {"vertices": 3, "entries": 6, "extra_bytes": 0},
                    {"vertices": 3, "entries": 5, "extra_bytes": 8}):
        with pytest.raises(InputError, match="g.mtx:2: spec: loading needs at least 0.0 GiB but this node has 0.0 GiB"):
            limits.check_declared_size(path, 2, "spec", **too_big)
    node_has(monkeypatch, 2**31)
    with pytest.raises(InputError, match="needs at least 3.0 GiB but this node has 2.0 GiB available"):
        limits.check_declared_size(path, None, "spec", vertices=0, entries=3 * 2**30 // 16)
    node_has(monkeypatch, None)
    limits.check_declared_size(path, None, "spec", vertices=10**15, entries=10**15)


def test_npz_arrays_are_refused_beyond_the_archive_or_the_memory(monkeypatch, tmp_path):
    path = tmp_path / "a.npz"
    np.savez(path, x=np.zeros((4, 3), np.float64), y=np.zeros(5, np.int32))
    total = 4 * 3 * 8 + 5 * 4
    node_has(monkeypatch, total)
    limits.check_npz_arrays(path)
    node_has(monkeypatch, total - 1)
    with pytest.raises(InputError, match="a.npz: arrays of 0.0 GiB but this node has 0.0 GiB available"):
        limits.check_npz_arrays(path)
    node_has(monkeypatch, None)
    limits.check_npz_arrays(path)
    text = tmp_path / "t.npz"
    text.write_text("not a zip archive")
    limits.check_npz_arrays(text)  # left to np.load to report
    versions = tmp_path / "v.npz"
    total = write_npz_versions(versions)
    node_has(monkeypatch, total)
    limits.check_npz_arrays(versions)
    node_has(monkeypatch, total - 1)
    with pytest.raises(InputError, match="v.npz: arrays of"):
        limits.check_npz_arrays(versions)


def test_npz_arrays_beyond_the_memory_are_reported_in_gib(monkeypatch, tmp_path):
    path = tmp_path / "big.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("x.npy", "w", force_zip64=True) as fh:  # 256 MiB of zeros, 1 MB compressed
            np.lib.format.write_array_header_1_0(fh, {"descr": "<f8", "fortran_order": False, "shape": (2**25,)})
            for _ in range(64):
                fh.write(bytes(2**22))
    node_has(monkeypatch, 2**28 - 1)
    with pytest.raises(InputError, match="big.npz: arrays of 0.2 GiB but this node has 0.2 GiB available"):
        limits.check_npz_arrays(path)


def test_npz_array_declaring_one_byte_more_than_stored_is_refused(tmp_path):
    path = tmp_path / "h.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, version in (("a.npy", (1, 0)), ("b.npy", (2, 0))):
            with archive.open(name, "w") as fh:
                np.lib.format.write_array(fh, np.zeros((3, 2), dtype=np.float32), version=version)
        with archive.open("c.npy", "w") as fh:  # version 3 headers are skipped, not read as 1.0
            np.lib.format.write_array(fh, np.zeros(5, dtype=np.int64), version=(3, 0))
    limits.check_npz_arrays(path)
    for name, version in (("a.npy", (1, 0)), ("b.npy", (2, 0))):
        forged = tmp_path / f"forged-{version[0]}.npz"
        with zipfile.ZipFile(forged, "w") as archive:
            with archive.open(name, "w") as fh:
                header = {"descr": "<f4", "fortran_order": False, "shape": (3, 2)}
                np.lib.format.write_array_header_1_0(fh, header) if version == (1, 0) \
                    else np.lib.format.write_array_header_2_0(fh, header)
                fh.write(np.zeros(5, np.float32).tobytes())  # 20 of the 24 bytes declared
        with pytest.raises(InputError, match=rf"forged-{version[0]}.npz: array {name[0]} declares shape \(3, 2\) "
                                             r"\(24 bytes\) but the archive holds 20 bytes for it"):
            limits.check_npz_arrays(forged)
    wraps = tmp_path / "wraps.npz"  # 2**64 elements: a product in int64 would wrap to 0 and pass
    with zipfile.ZipFile(wraps, "w") as archive:
        with archive.open("w.npy", "w") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "|u1", "fortran_order": False, "shape": (2**32, 2**32)})
    with pytest.raises(InputError, match=rf"array w declares shape \(4294967296, 4294967296\) \({2**64} bytes\)"):
        limits.check_npz_arrays(wraps)


def graph_shard(rank: int, size: int, feature_dtype: type) -> Shard:
    """A shard with dense features, labels and masks: what a Trainer needs."""
    adj = make_graph(N, EDGES, SEED, directed=True)
    rng = np.random.default_rng(SEED)
    graph = Graph(adj=adj, vertex_ids=np.arange(N), features=rng.standard_normal((N, 7)).astype(feature_dtype),
                  labels=rng.integers(0, 3, N), train_mask=np.arange(N) % 2 == 0, val_mask=np.arange(N) % 4 == 1,
                  test_mask=np.arange(N) % 4 == 3)
    return list(iter_shards(graph, normalized_adjacency(adj), make_parts(N, size, "random", SEED), size, "t"))[rank]


def host_arrays(obj) -> list[np.ndarray]:
    """The numpy views of what a trainer holds on the CPU (a tensor's, a sparse tensor's or a CSR block's arrays)."""
    if isinstance(obj, torch.Tensor):
        if obj.layout == torch.sparse_csr:
            return [obj.crow_indices().numpy(), obj.col_indices().numpy(), obj.values().detach().numpy()]
        return [obj.detach().numpy()]
    return [obj.indptr, obj.indices, obj.data]


def trainer_rank(t: InProcessTransport, dtype: str, feature_dtype: type, kernel: str) -> dict:
    shard = graph_shard(t.rank, t.size, feature_dtype)
    trainer = Trainer(shard, t, TrainConfig(hidden=(5,), dtype=dtype, dropout=0.0), kernel)  # no numba dropout:
    # under NUMBA_THREADING_LAYER=workqueue (mutation runs) two rank threads launching one kernel abort
    trainer.train_epoch(0)
    adjacency = trainer.aggregation.adjacency
    blocks = [adjacency.owned, adjacency.owned_t, *adjacency.halo_by_sender]
    held = [trainer.inputs, trainer.labels, *trainer.masks.values(), adjacency.exchanger.plan.send_index] + [
        a for b in blocks for a in host_arrays(b.matrix)]
    shard_arrays = [shard.global_ids, shard.halo_global_ids, shard.owned_block.indptr, shard.owned_block.indices,
                    shard.owned_block.data, shard.halo_block.indptr, shard.halo_block.indices, shard.halo_block.data,
                    shard.send_index, shard.features, shard.labels, shard.train_mask, shard.val_mask, shard.test_mask]
    shared = sum(h.nbytes for h in {id(a): a for a in held}.values()
                 if any(np.shares_memory(h, a) for a in shard_arrays))
    predicted = memory.predict(memory.sizes_of(shard), TrainConfig(hidden=(5,), dtype=dtype, dropout=0.0), False,
                               kernel)
    return {"predicted": {k: predicted[k] for k in ("features", "labels_masks", "plan", "shard")},
            "held": {"features": trainer.inputs.nbytes,
                     "labels_masks": trainer.labels.nbytes + sum(m.nbytes for m in trainer.masks.values()),
                     "plan": adjacency.exchanger.plan.send_index.nbytes,
                     "shard": sum(a.nbytes for a in shard_arrays) - shared}}


@pytest.mark.parametrize("feature_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", ["torch", "numba"])
def test_cpu_terms_are_the_trainer_s_tensors_and_the_shard_less_what_they_share(kernel, dtype, feature_dtype):
    """The shard's O(P) peer lists and offsets are not counted."""
    for rank in run_ranks(RANKS, lambda t: trainer_rank(t, dtype, feature_dtype, kernel)):
        assert rank["predicted"] == rank["held"]


def saved_storages(trainer: Trainer, held: list[torch.Tensor]) -> dict[int, int]:
    """Bytes of each storage autograd saves in a training forward pass, plus the logits', less the parameters',
    the input's and those of ``held`` (tensors the rank keeps anyway)."""
    trainer.model.train()
    storages: dict[int, int] = {}

    def pack(x: torch.Tensor) -> torch.Tensor:
        storages[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logits = trainer.model(trainer.inputs, trainer.aggregation, trainer.shard.global_ids, 0)
    storages[logits.untyped_storage().data_ptr()] = logits.untyped_storage().nbytes()
    for tensor in [*trainer.model.parameters(), trainer.inputs, *held]:
        storages.pop(tensor.untyped_storage().data_ptr(), None)
    return storages


def saved_by_forward(t: InProcessTransport, layers: int, hidden: tuple[int, ...], dropout: float) -> tuple[int, int]:
    """(bytes of the unique storages autograd saves in a training forward, plus the logits, less the parameters'
    and the input's; what memory.py predicts is kept, its activations less the backward's 3 n max(width) s)."""
    shard = graph_shard(t.rank, t.size, np.float64)
    config = TrainConfig(layers=layers, hidden=hidden, dtype="float64", dropout=dropout)
    trainer = Trainer(shard, t, config, "numba")
    storages = saved_storages(trainer, [])
    widths = config.widths(7, shard.num_classes)
    n = shard.n_owned
    return sum(storages.values()), gcn_saved_bytes(n, widths, 8, dropout, False)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
@pytest.mark.parametrize("layers, hidden", [(2, (5,)), (2, (16,)), (3, (4, 9)), (3, (16, 16))])
def test_kept_activations_are_the_storages_autograd_saves_on_the_cpu(layers, hidden, dropout):
    """7 input features: W first (b < a), Â first (b >= a), both in one model; no dropout mask on the CPU.

    One rank with dropout: numba's workqueue layer (mutation runs) aborts if two rank threads run its kernel at once.
    """
    for saved, predicted in run_ranks(1 if dropout else 2, lambda t: saved_by_forward(t, layers, hidden, dropout)):
        assert saved == predicted


def saved_by_model_forward(t: InProcessTransport, config: TrainConfig) -> tuple[int, int, int]:
    """(bytes autograd saves in a GraphSAGE or GAT training forward plus the logits, less parameters, input and
    the GAT's edge lists; memory.py's activations less their backward terms; the rank's edges)."""
    shard = graph_shard(t.rank, t.size, np.float64)
    trainer = Trainer(shard, t, config, "numba")
    graph = trainer.aggregation
    storages = saved_storages(trainer, [graph.dst, graph.src] if config.conv == "gat" else [])
    widths = config.widths(7, shard.num_classes)
    n, h, edges = shard.n_owned, shard.n_halo, shard.owned_block.nnz + shard.halo_block.nnz
    if config.conv == "gat":
        heads = [config.heads] * (len(widths) - 2) + [config.output_heads]
        window = config.halo_window is not None and config.halo_window < t.size - 1  # fewer rounds than peers
        kept = n + (0 if window else h)  # a window keeps no halo row of z
        backward = max((4 * edges * k + 3 * kept * k * b) * 8 for k, b in zip(heads, widths[1:])) + 2 * (1 << 24)
        predicted = gat_activation_bytes(n, h, edges, widths, heads, 8, config.dropout, config.attention_p,
                                         window) - backward
    else:
        predicted = sage_activation_bytes(n, widths, 8, config.dropout, config.root_weight) \
            - 3 * n * max(widths[1:]) * 8
    return sum(storages.values()), predicted, edges


@pytest.mark.parametrize("config", [
    TrainConfig(conv="sage", hidden=(5,), dtype="float64"), TrainConfig(conv="sage", hidden=(16,), dtype="float64"),
    TrainConfig(conv="sage", layers=3, hidden=(4, 9), dtype="float64", root_weight=False),
    TrainConfig(conv="gat", hidden=(4,), heads=3, output_heads=2, dtype="float64"),
    TrainConfig(conv="sage", layers=3, hidden=(4, 9), dtype="float64", dropout=0.0),
    TrainConfig(conv="gat", hidden=(8,), heads=1, dtype="float64", dropout=0.0),
    TrainConfig(conv="gat", layers=3, hidden=(3, 5), heads=2, output_heads=3, dtype="float64", dropout=0.2,
                attention_dropout=0.0),
    TrainConfig(conv="gat", hidden=(8,), heads=2, dtype="float64", dropout=0.0, halo_window=2),
], ids=["sage-5", "sage-16", "sage-3-layers-no-root", "sage-no-dropout", "gat-3-heads", "gat-no-dropout",
        "gat-3-layers-no-attention-dropout", "gat-halo-window"])
def test_other_layer_types_keep_the_activations_memory_py_counts(config):
    ranks = 1 if config.dropout else RANKS + (config.halo_window is not None)  # numba dropout: one rank thread
    # (see above); 4 ranks, 3 rounds: a window of 2 streams
    for saved, predicted, _ in run_ranks(ranks, lambda t: saved_by_model_forward(t, config)):
        assert saved == predicted


def windowed_rank(t: InProcessTransport, window: int) -> dict:
    shard = rank_shard(t.rank, t.size, True)
    exchanger = HaloExchanger(HaloPlan.from_shard(shard), t, CommCounters(), exchanges=True, window=window)
    adjacency = DistributedAdjacency(shard.owned_block, shard.halo_block, exchanger, torch.float64, "numba")
    h = torch.ones((shard.n_owned, WIDTH), dtype=torch.float64, requires_grad=True)
    spmm(adjacency, h).sum().backward()
    largest_recv, largest_send = (int(np.diff(offsets).max()) for offsets in (shard.recv_offsets, shard.send_offsets))
    slots = window * (largest_recv + largest_send)
    whole = shard.n_halo + int(shard.send_index.shape[0])
    model = ModelConfig(layers=2, hidden=(WIDTH,), dtype="float64", halo_window=window)
    return {"buffers": sum(b.nbytes for b in exchanger._buffers.values()), "slots": slots, "whole": whole,
            "predicted_rows": memory.halo_buffer_rows(memory.sizes_of(shard), window),
            "predicted": memory.predict(memory.sizes_of(shard), model, on_gpu=True)["halo_buffers"],
            "features": shard.features.shape[1], "classes": shard.num_classes}


def test_a_windows_buffers_are_the_bytes_the_exchanger_holds():
    """K slots of the largest message each way where that is fewer rows than the whole halo (and the whole halo
    where not), as the exchanger allocates them; the model's term counts them per exchanged width."""
    found = run_ranks(6, lambda t: windowed_rank(t, 2))
    assert any(rank["slots"] < rank["whole"] for rank in found)  # the window really is smaller somewhere
    for rank in found:
        rows = min(rank["slots"], rank["whole"])
        assert rank["buffers"] == rows * WIDTH * 8 == rank["predicted_rows"] * WIDTH * 8
        widths = {min(rank["features"], WIDTH), min(WIDTH, rank["classes"])}
        assert rank["predicted"] == sum(rows * w * 8 for w in widths)


class LiveBytes:
    """Every strided tensor torch allocates on this thread, counted until its storage is freed: the bytes alive
    now, their peak, and the level when the first model forward began (what training holds besides activations)."""

    def __init__(self):
        import weakref

        from torch.utils._python_dispatch import TorchDispatchMode

        self.now = self.peak = 0
        self.before_forward: int | None = None
        counted: set[int] = set()
        tracker = self

        def count(t: torch.Tensor) -> None:
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if key in counted or size == 0:
                return
            counted.add(key)
            tracker.now += size
            tracker.peak = max(tracker.peak, tracker.now)

            def freed() -> None:
                counted.discard(key)
                tracker.now -= size

            weakref.finalize(storage, freed)

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, (tuple, list)) else [out]:
                    if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                        count(t)
                return out

        self.mode = Mode()


@pytest.mark.parametrize("n, layers, hidden, dropout, dtype", [
    (12_000, 2, (256,), 0.5, "float32"), (12_000, 3, (128,), 0.0, "float32"), (12_000, 3, (192,), 0.5, "float64"),
    (12_000, 2, (32,), 0.5, "float32"), (12_000, 4, (128, 16, 96), 0.5, "float32"),
    (12_000, 3, (6, 96), 0.2, "float64"), (48_000, 3, (128,), 0.5, "float32"), (48_000, 3, (128,), 0.0, "float32"),
], ids=["2-256", "3-128-no-dropout", "3-192-float64", "2-32-W-first", "4-mixed", "3-narrow-first",
        "larger-3-128", "larger-3-128-no-dropout"])
def test_the_cpu_activation_peak_is_the_most_torch_holds_at_once(monkeypatch, n, layers, hidden, dropout, dtype):
    """One rank's training, every tensor torch allocates tracked to its release (kept buffers off, so each array
    is freed where the code lets it go): the most alive at once beyond what training held before the first
    forward is the CPU activation term, up to the small temporaries it leaves out (row slices, W's gradient)."""
    import distgcn
    from distgcn.kernels import kept_buffers
    from distgcn.nn.model import LayerStack

    monkeypatch.setattr(kept_buffers, "MIN_BYTES", 1 << 62)
    live = LiveBytes()
    forward = LayerStack.layer_outputs

    def first_forward_noted(self, *args, **kwargs):
        if live.before_forward is None:
            live.before_forward = live.now
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(LayerStack, "layer_outputs", first_forward_noted)
    features, classes = 64, 8
    with live.mode:
        distgcn.train(f"synthetic:sbm,n={n},classes={classes},features={features},avg_degree=6", epochs=2,
                      layers=layers, hidden=hidden, dropout=dropout, dtype=dtype, threads=1, quiet=True)
    s = 4 if dtype == "float32" else 8
    widths = [features, *(hidden * (layers - 1) if len(hidden) == 1 else hidden), classes]
    predicted = gcn_activation_bytes(n, widths, s, dropout, on_gpu=False)
    measured = live.peak - live.before_forward
    small = 16 * max(a * b for a, b in zip(widths[:-1], widths[1:])) * s + 4 * n * classes * s
    assert predicted - small <= measured <= predicted + small, (measured / 2**20, predicted / 2**20)
    assert predicted < gcn_saved_bytes(n, widths, s, dropout, False) + 3 * n * max(widths[1:]) * s or layers == 2


def cgroup_tree(root, groups: dict[str, tuple[str, int]], v1: bool) -> None:
    """Files of a memory cgroup tree under ``root``: each group's (limit, usage)."""
    for path, (limit, usage) in groups.items():
        directory = root / ("memory" if v1 else "") / path
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(limit + "\n")
        (directory / ("memory.usage_in_bytes" if v1 else "memory.current")).write_text(f"{usage}\n")


@pytest.mark.parametrize("v1", [False, True], ids=["v2", "v1"])
def test_cgroup_room_is_the_least_over_the_group_and_its_ancestors(tmp_path, v1):
    membership = tmp_path / "cgroup"
    membership.write_text("5:cpu,cpuacct:/other\n" + ("4:memory:/job/step\n" if v1 else "0::/job/step\n"))
    unlimited = "9223372036854771712" if v1 else "max"
    cgroup_tree(tmp_path, {"": (unlimited, 10**12), "job": (unlimited, 900), "job/step": ("1000", 400)}, v1)
    assert limits._cgroup_room(membership, tmp_path) == 600
    cgroup_tree(tmp_path, {"job": ("1200", 1000)}, v1)  # the job's limit is the tighter one
    assert limits._cgroup_room(membership, tmp_path) == 200
    cgroup_tree(tmp_path, {"job": (unlimited, 0), "job/step": (unlimited, 0)}, v1)
    assert limits._cgroup_room(membership, tmp_path) is None
    assert limits._cgroup_room(tmp_path / "absent", tmp_path) is None


def test_available_bytes_is_at_most_the_address_space_left_under_ulimit_v():
    script = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30)); "
              "from distgcn.io import limits; print(limits.available_bytes(None, 1))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert 0 < int(proc.stdout) < 6 << 30
