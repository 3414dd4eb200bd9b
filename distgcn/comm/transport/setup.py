"""Which launcher started this process, and the transport it calls for (``--backend``).

Launchers announce themselves through the environment: torchrun sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; srun sets SLURM_* (and
nothing torch.distributed reads, so the rendezvous is derived from them); MPI
launchers set PMI_RANK/PMI_SIZE (MPICH's hydra) or OMPI_COMM_WORLD_* (Open
MPI). Under an MPI launcher the torch back ends take rank and size from MPI
itself, and rank 0 hands out the address of the rendezvous store over MPI.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from datetime import timedelta

import torch

from distgcn.comm.launch import Launch, detect, first_host  # noqa: F401 - first_host: part of this module's interface
from distgcn.comm.transport.base import Transport
from distgcn.config import BACKENDS
from distgcn.errors import InputError

TIMEOUT = timedelta(minutes=10)
"""How long a torch.distributed operation may wait for a silent peer before failing.

A rank that fails takes the job down at once (see collective.abort_on_unexpected);
this only bounds a peer that hangs without exiting."""


def default_backend(launch: Launch, cuda_available: bool) -> str:
    """NCCL where a GPU is visible and no MPI launcher started us; MPI otherwise.

    gloo is never chosen silently: torchrun or srun without PMI on CPUs then
    fails at start saying MPI sees one rank, and names --backend gloo.
    """
    return "nccl" if cuda_available and launch.launcher != "mpi" else "mpi"


def make_transport(backend: str | None, env: Mapping[str, str] | None = None) -> Transport:
    """Start this rank's transport for ``--backend`` (None: :func:`default_backend`)."""
    env = os.environ if env is None else env
    launch = detect(env)
    if backend is None:
        backend = default_backend(launch, torch.cuda.is_available())
    if backend not in BACKENDS:
        raise InputError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if launch.rank >= launch.world_size:
        raise InputError(f"{launch.launcher} gave rank {launch.rank} of a job of {launch.world_size} ranks")
    if backend == "mpi":
        return _mpi_transport(launch)
    return _torch_transport(backend, launch)


def _mpi_transport(launch: Launch) -> Transport:
    from distgcn.comm.transport.mpi import MPITransport

    transport = MPITransport()
    if launch.launcher in ("torchrun", "srun") and transport.size != launch.world_size:
        raise InputError(f"--backend mpi: {launch.launcher} started {launch.world_size} ranks but MPI sees "
                         f"{transport.size}; use --backend gloo or nccl, or launch with mpiexec")
    return transport


def _torch_transport(backend: str, launch: Launch) -> Transport:
    import torch.distributed as dist

    # Imported before the group exists, on purpose: this module binds ``group=group.WORLD`` as default
    # arguments when first imported (torch._dynamo imports it: torch.optim's own optimizers and torch.compile
    # load that, distgcn's optimizers do not), so imported later it would hold the process group forever.
    # destroy_process_group then leaves gloo's worker threads running into interpreter teardown, where one
    # that frees a finished work's tensor needs the GIL, is ended by Python and aborts the process
    # ('terminate called without an active exception').
    import torch.distributed.nn.functional  # noqa: F401

    from distgcn.comm.transport.torch_dist import TorchDistTransport

    if backend == "nccl" and not torch.cuda.is_available():
        raise InputError("--backend nccl: no CUDA device is visible (torch.cuda.is_available() is False); "
                         "use --backend gloo on CPUs")
    if launch.launcher == "mpi":  # the local rank is known only once MPI is asked
        store, launch = _store_over_mpi()
        device = _device(backend, launch.local_rank)
    else:  # choose the device first: a rank that cannot must fail before the others wait for it
        device = _device(backend, launch.local_rank)
        if launch.launcher == "torchrun":
            store = None  # env:// below: joins torchrun's own store
        elif launch.launcher == "srun":
            store = dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size,
                                  is_master=launch.rank == 0, timeout=TIMEOUT)
        else:
            store = dist.HashStore()
    dist.init_process_group(backend, init_method="env://" if store is None else None, store=store,
                            rank=launch.rank, world_size=launch.world_size, timeout=TIMEOUT,
                            device_id=device if backend == "nccl" else None)
    return TorchDistTransport(device)


def _device(backend: str, local_rank: int) -> torch.device:
    """The CPU for gloo; for NCCL the GPU of this rank's local rank, made current."""
    if backend != "nccl":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise InputError(f"--backend nccl: local rank {local_rank} needs GPU {local_rank} but {count} are "
                         "visible (one GPU per rank)")
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    return device


def _store_over_mpi() -> tuple[torch.distributed.Store, Launch]:
    """Rank, size and node-local rank from MPI; rank 0 opens the store and tells the others where."""
    import torch.distributed as dist
    from mpi4py import MPI

    from distgcn.comm.mpi_group import world

    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local_rank = node.Get_rank()
    node.Free()
    store = None
    address = None
    if rank == 0:
        store = dist.TCPStore(socket.gethostname(), 0, size, is_master=True, timeout=TIMEOUT,
                              wait_for_workers=False)
        address = (socket.gethostname(), store.port)
    host, port = comm.bcast(address, root=0)
    if store is None:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=TIMEOUT)
    return store, Launch("mpi", rank, size, local_rank, host, port)
