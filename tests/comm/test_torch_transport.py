"""The torch.distributed transport: the same training as MPI, under mpiexec and torchrun.

gloo runs on CPUs here; the NCCL tests need CUDA devices and skip, saying so,
where there are none. Distributed training must equal the single-process
reference (tests/oracles/reference.py), and the halo traffic must equal what the part
vector predicts, exactly as tests/training/test_training.py checks for MPI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, distgcn_in_process, mpiexec, run_distgcn
from reference import reference_train
from volume_oracle import brute_volume

import distgcn
from distgcn.cli.stats_tables import stats_table
from distgcn.comm.transport.setup import (
    Launch,
    default_backend,
    detect,
    first_host,
    make_transport,
)
from distgcn.config import ModelConfig
from distgcn.data.prepare import GraphOptions, prepare_graph
from distgcn.errors import InputError
from distgcn.memory.prediction import predict, shard_sizes, sizes_of
from distgcn.partitioning.models import compute_parts
from distgcn.shard.directory import shard_filename
from distgcn.shard.rank_shard import Shard
from distgcn.shard.write import write_partition

PACKAGE_DIR = Path(distgcn.__file__).parent

EPOCHS = 4
SEED = 3
HIDDEN = 8
NO_GPU = "no CUDA device visible (torch.cuda.is_available() is False): NCCL runs need one GPU per rank"
MEMORY_CHECK = ROOT / "tests" / "mpi_scripts" / "memory_check.py"


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def torchrun(command: list[str], ranks: int, env: dict | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node RANKS`` of a module or script (``-m distgcn ...``)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", *command]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(env))


def train_args(graph: str, tmp_path: Path, partition: str, backend: str) -> list[str]:
    return ["train", "--graph", graph, "--features", "8", "--classes", "3", "--partition", partition,
            "--backend", backend, "--dtype", "float64", "--epochs", str(EPOCHS), "--seed", str(SEED),
            "--hidden", str(HIDDEN), "--metrics", str(tmp_path / "m.jsonl"), "--save-weights",
            str(tmp_path / "w.npz"), "--quiet"]


def check_equals_reference(graph: str, tmp_path: Path, partition: str, ranks: int) -> None:
    """Losses and final weights equal the single process; rows and messages equal the partition's."""
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, EPOCHS + 1))
    prepared, a_hat = prepare_graph(GraphOptions(spec=graph, features=8, classes=3, seed=SEED))
    losses, ref_weights = reference_train(a_hat, prepared.features, prepared.labels, prepared.train_mask,
                                          hidden=HIDDEN, epochs=EPOCHS, seed=SEED)
    np.testing.assert_allclose([r["loss"] for r in records], losses, rtol=1e-6)
    with np.load(tmp_path / "w.npz") as npz:
        assert len(npz.files) == len(ref_weights) + 1  # and the model record
        for i, ref in enumerate(ref_weights):
            np.testing.assert_allclose(npz[f"arr_{i}"], ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())
    parts, _ = compute_parts(partition, a_hat, ranks, epsilon=0.03, seed=SEED)
    rows, messages = brute_volume(a_hat, parts)
    for r in records:
        if ranks == 1:
            assert (r["halo_rows"], r["messages"], r["spmm_exchanges"]) == (0, 0, 0)
        else:
            assert r["spmm_exchanges"] == 5  # 8 features = 8 hidden: the first layer needs no backward SpMM
            assert r["halo_rows"] == rows * r["spmm_exchanges"]
            assert r["messages"] == messages * r["spmm_exchanges"]


# ---- launcher detection (no processes started) --------------------------------------------------

def test_detect_reads_each_launcher() -> None:
    torchrun_env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500"}
    assert detect(torchrun_env) == Launch("torchrun", 3, 4, 1, "n1", 29500)
    srun_env = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "16",
                "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "gpu[007-008,012]", "SLURM_JOB_ID": "123"}
    assert detect(srun_env) == Launch("srun", 5, 8, 1, "gpu007", 20123)
    assert detect({**srun_env, "MASTER_ADDR": "login", "MASTER_PORT": "4000"}).master_addr == "login"
    # srun --mpi=pmi2 sets PMI_* too; mpiexec in a batch script inherits the script's SLURM_PROCID
    assert detect({**srun_env, "PMI_RANK": "2", "PMI_SIZE": "8"}) == Launch("mpi", 2, 8, -1)
    assert detect({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}) == Launch("mpi", 1, 2, -1)
    assert detect({}) == Launch("none", 0, 1, 0)


def test_detect_rejects_a_half_set_environment() -> None:
    with pytest.raises(InputError, match="MASTER_ADDR"):
        detect({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(InputError, match="SLURM_PROCID"):
        detect({"SLURM_STEP_ID": "0", "SLURM_PROCID": "x", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                "SLURM_JOB_ID": "1"})


@pytest.mark.parametrize("nodelist,first", [("node1", "node1"), ("a[03-05],b1", "a03"), ("x[9,2-4]", "x9"),
                                            ("login2,gpu[1-2]", "login2")])
def test_first_host_of_a_slurm_node_list(nodelist: str, first: str) -> None:
    assert first_host(nodelist) == first


def test_default_backend() -> None:
    mpi, torch_launch, alone = Launch("mpi", 0, 2, -1), Launch("torchrun", 0, 2, 0, "h", 1), Launch("none", 0, 1, 0)
    assert [default_backend(x, False) for x in (mpi, torch_launch, alone)] == ["mpi", "mpi", "mpi"]
    assert [default_backend(x, True) for x in (mpi, torch_launch, alone)] == ["mpi", "nccl", "nccl"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible, so --backend nccl is valid here")
def test_nccl_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="--backend nccl: no CUDA device"):
        make_transport("nccl", env={})


# ---- gloo on CPUs: equivalence, under mpiexec and torchrun ------------------------------------

@pytest.mark.parametrize("ranks", [2, 4])  # three ranks: under torchrun below
def test_gloo_under_mpiexec_equals_single_process(tmp_path, directed_graph, ranks):
    proc = run_distgcn(train_args(directed_graph, tmp_path, "random", "gloo"), ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    check_equals_reference(directed_graph, tmp_path, "random", ranks)


def test_gloo_under_torchrun_equals_single_process(tmp_path, directed_graph):
    proc = torchrun(["-m", "distgcn", *train_args(directed_graph, tmp_path, "contiguous", "gloo")], ranks=3)
    assert proc.returncode == 0, proc.stderr
    check_equals_reference(directed_graph, tmp_path, "contiguous", 3)


# ---- failures end the job, and wrong launches are clear errors at start ------------------------

@pytest.mark.parametrize("launcher", ["mpiexec", "torchrun"])
def test_failing_rank_takes_the_gloo_job_down_quickly(directed_graph, launcher):
    args = ["train", "--graph", directed_graph, "--features", "8", "--classes", "3", "--epochs", "50",
            "--backend", "gloo"]
    env = {"DISTGCN_FAIL_AT": "1:3"}
    start = time.monotonic()
    if launcher == "mpiexec":
        proc = subprocess.run([mpiexec(), "-n", "3", sys.executable, "-m", "distgcn", *args], capture_output=True,
                              text=True, timeout=120, env=_env(env))
    else:
        proc = torchrun(["-m", "distgcn", *args], ranks=3, env=env, timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert elapsed < 40, f"job took {elapsed:.1f}s to end after a rank failed"
    assert "rank 1: unexpected error" in proc.stderr and "injected failure" in proc.stderr


@pytest.fixture(scope="module")
def three_parts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parts") / "p3"
    write_partition(GraphOptions(spec="synthetic:sbm,n=300"), out, 3, "random", quiet=True)
    return out


def rank_traceback(stderr: str) -> bool:
    """Whether a traceback frame lies in the distgcn package the ranks import (not merely a path that says distgcn:
    torchrun's report names the interpreter, whose path holds the checkout's directory name)."""
    return f'File "{PACKAGE_DIR}{os.sep}' in stderr


def test_rank_count_other_than_the_parts_is_a_clear_error_under_torchrun(three_parts):
    proc = torchrun(["-m", "distgcn", "train", str(three_parts), "--backend", "gloo", "--epochs", "1"], ranks=2,
                    timeout=120)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("distgcn: error:")]
    assert len(errors) == 1, proc.stderr
    assert "partition has 3 parts but the job has 2 ranks" in errors[0]
    assert not rank_traceback(proc.stderr)  # torchrun prints its own report, and its own traceback


def test_mpi_backend_under_torchrun_is_a_clear_error(three_parts):
    proc = torchrun(["-m", "distgcn", "train", str(three_parts), "--backend", "mpi", "--epochs", "1"], ranks=2,
                    timeout=120)
    assert proc.returncode != 0
    assert "torchrun started 2 ranks but MPI sees 1; use --backend gloo or nccl" in proc.stderr
    assert not rank_traceback(proc.stderr)


def test_gloo_under_srun_without_pmi(slurm_cluster, three_parts):
    """srun alone (no MPI plugin): rank, size and the rendezvous come from SLURM_* variables."""
    script = three_parts.parent / "srun-gloo.sh"
    script.write_text(f"#!/bin/bash\nsrun --mpi=none distgcn train {three_parts} --backend gloo --epochs 2 --quiet\n")
    job = slurm_cluster.sbatch(script, "--ntasks=3", "--time=00:05:00", "--output=srun-gloo-%j.out",
                               cwd=three_parts.parent)
    (record,) = slurm_cluster.wait(job, timeout=180)
    log = (three_parts.parent / f"srun-gloo-{job}.out").read_text()
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), log
    assert "done: 2 epochs on 3 rank(s)" in log


# ---- memory: the prediction against what a rank allocates -------------------------------------

def test_stats_memory_column_reads_each_shard(three_parts):
    proc = distgcn_in_process(["stats", str(three_parts), "--hidden", "32,8", "--layers", "3", "--json"])
    assert proc.returncode == 0, proc.stderr
    memory = json.loads(proc.stdout)["memory"]
    assert memory["model"]["hidden"] == [32, 8]
    for row in memory["ranks"]:
        shard = Shard.load(three_parts / shard_filename(row["rank"]))
        assert (row["rows"], row["halo_rows"]) == (shard.n_owned, shard.n_halo)
        assert row["nnz"] == shard.owned_block.nnz + shard.halo_block.nnz
        # each rank's own sizes and the options given (a CPU rank may need less than a GPU one: int32 indices,
        # no halo transposes); tests/memory/test_memory_model.py checks the terms against the objects
        model = ModelConfig(layers=3, hidden=(32, 8))
        assert row["gpu_bytes"] == predict(sizes_of(shard), model, on_gpu=True)["total"] > 0
        assert row["cpu_bytes"] == predict(sizes_of(shard), model, on_gpu=False)["total"] > 0
    sizes = shard_sizes(three_parts / shard_filename(0))
    assert (sizes.features, sizes.classes, sizes.senders) == (32, 4, 2)
    table = stats_table(three_parts, ModelConfig(layers=3, hidden=(32, 8)))
    assert "predicted peak memory per rank (3 layers, hidden 32,8" in table


def _memory_report(out: Path) -> list[dict]:
    report = json.loads(out.read_text())
    for rank in report:
        ratio = rank["predicted"]["total"] / rank["measured"]
        assert 0.75 <= ratio <= 1.25, (rank["rank"], rank["measured"], rank["predicted"])
    return report


@pytest.mark.parametrize("kernel", ["torch", "numba"])
def test_predicted_peak_memory_within_25_percent_on_cpu(tmp_path, kernel: str):
    """Measured: peak resident set minus a baseline after imports and a warm-up (see memory_check.py).

    glibc's mmap threshold is pinned at 64 KiB so that freed tensors leave the
    resident set; otherwise it holds on to freed memory (docs/gpu.md).
    """
    parts = tmp_path / "p2"
    write_partition(GraphOptions(spec="synthetic:sbm,n=40000,features=64"), parts, 2, "random", quiet=True)
    out = tmp_path / "memory.json"
    proc = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(MEMORY_CHECK), str(out), str(parts), "gloo",
                           "96", "3", "float64", "2", kernel], capture_output=True, text=True, timeout=300,
                          env=_env({"MALLOC_MMAP_THRESHOLD_": "65536"}))
    assert proc.returncode == 0, proc.stderr
    report = _memory_report(out)
    assert all(rank["measured"] > 50e6 for rank in report), report  # large enough for the check to mean something


# ---- NCCL on GPUs ------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_nccl_under_torchrun_equals_single_process(tmp_path, directed_graph):
    ranks = min(2, torch.cuda.device_count())
    proc = torchrun(["-m", "distgcn", *train_args(directed_graph, tmp_path, "random", "nccl")], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    check_equals_reference(directed_graph, tmp_path, "random", ranks)


def minibatch_losses(tmp_path, graph: str, sampler: str, backend: str, ranks: int,
                     *extra: str) -> tuple[dict, list[dict]]:
    """The run header and every batch of a two-epoch minibatch run under torchrun."""
    metrics = tmp_path / f"{backend}-{sampler}-{len(extra)}.jsonl"
    options = {"rw": ["--walk-length", "3"], "frontier": ["--frontier-size", "10"]}.get(sampler, [])
    args = ["-m", "distgcn", "train", "--graph", graph, "--features", "8", "--classes", "3", "--partition", "random",
            "--backend", backend, "--dtype", "float64", "--epochs", "2", "--seed", str(SEED), "--hidden", "4",
            "--sampler", sampler, "--batch-size", "50", "--norm-samples", "20", *options,
            "--metrics", str(metrics), "--quiet", *extra]
    proc = torchrun(args, ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return records[0]["run"], [it for r in records for it in r["iterations"]]


def test_device_samplers_over_gloo_equal_the_host_samplers(tmp_path, directed_graph):
    """The device samplers' exchanges (membership bytes, walkers handed off) over torch.distributed: two gloo ranks
    drawing rw batches with torch on the CPU train exactly as with the host samplers."""
    run, device = minibatch_losses(tmp_path, directed_graph, "rw", "gloo", 2, "--sample-on", "device")
    assert run["minibatch"]["sampled_on"] == "device"
    _, host = minibatch_losses(tmp_path, directed_graph, "rw", "gloo", 2)
    assert all(it["walkers_handed_off"] > 0 for it in host)
    assert device == [{**it, "batch_s": d["batch_s"], "sample_s": d["sample_s"]} for it, d in zip(host, device)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
@pytest.mark.parametrize("sampler", ["node", "edge", "rw", "frontier"])
def test_minibatch_over_nccl_equals_gloo_on_the_cpu(tmp_path, directed_graph, sampler):
    """A GPU rank samples, cuts and normalizes its batches on the GPU (the device samplers, ``--sample-on auto``)
    and trains on them; two gloo ranks on the CPU sample with the host samplers. Same batches, same losses."""
    ranks = min(2, torch.cuda.device_count())
    run, on_gpu = minibatch_losses(tmp_path, directed_graph, sampler, "nccl", ranks)
    assert run["minibatch"]["sampled_on"] == "device"
    run, on_cpu = minibatch_losses(tmp_path, directed_graph, sampler, "gloo", 2)
    assert run["minibatch"]["sampled_on"] == "host"
    assert [it["batch_vertices"] for it in on_gpu] == [it["batch_vertices"] for it in on_cpu]
    np.testing.assert_allclose([it["loss"] for it in on_gpu], [it["loss"] for it in on_cpu], rtol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_predicted_peak_memory_within_25_percent_on_gpu(tmp_path):
    """Measured: torch.cuda.max_memory_allocated over loading the shard and training."""
    ranks = min(2, torch.cuda.device_count())
    parts = tmp_path / "parts"
    write_partition(GraphOptions(spec="synthetic:sbm,n=40000,features=64"), parts, ranks, "random", quiet=True)
    out = tmp_path / "memory.json"
    proc = torchrun([str(MEMORY_CHECK), str(out), str(parts), "nccl", "96", "3", "float64", "2", "torch"], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    assert all(rank["device"].startswith("cuda") for rank in _memory_report(out))
