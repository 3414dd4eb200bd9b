"""Getting each rank its shard: its own file of a partition directory, or sent by rank 0.

A partition directory (:mod:`distgcn.shard.directory`) lets every rank read
only its own file. For small graphs, ``train --graph`` partitions on rank 0
(``distgcn/shard/scatter.py``, called by the command layer) and the transport
takes every rank its shard, one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from distgcn.comm.agreement import agree_on_partition
from distgcn.comm.collective import agree
from distgcn.comm.transport import Transport
from distgcn.errors import InputError
from distgcn.shard.directory import load_listed_shard, read_meta
from distgcn.shard.rank_shard import Shard


def load_own_shard(transport: Transport, directory: str | Path) -> Shard:
    """Each rank reads meta.json and its own shard file, checked against the job size and the others' plans."""
    directory = Path(directory)

    def step() -> Shard:
        meta = read_meta(directory)
        if meta["parts"] != transport.size:
            raise InputError(
                f"partition has {meta['parts']} parts but the job has {transport.size} ranks "
                f"(launch {meta['parts']} ranks: mpiexec -n {meta['parts']} distgcn train {directory} ...; "
                f"or partition again with --parts {transport.size})",
                path=directory,
            )
        return meta, load_listed_shard(directory, meta, transport.rank)

    meta, shard = agree(transport, step)
    agree_on_partition(transport, meta, str(directory))
    check_plans_agree(transport, shard, directory)
    return shard


def check_plans_agree(transport: Transport, shard: Shard, directory: Path) -> None:
    """Every row count a rank will send is the count its receiver expects (else the exchange would hang)."""
    def counts(peers: np.ndarray, offsets: np.ndarray) -> dict[int, int]:
        return {int(p): int(c) for p, c in zip(peers, np.diff(offsets))}

    plans = transport.allgather_object((counts(shard.send_peers, shard.send_offsets),
                                        counts(shard.recv_peers, shard.recv_offsets)))

    def step() -> None:
        expects = plans[transport.rank][1]
        sent = {sender: sends[transport.rank] for sender, (sends, _) in enumerate(plans) if transport.rank in sends}
        if sent != expects:
            wrong = sorted(r for r in set(sent) | set(expects) if sent.get(r) != expects.get(r))[0]
            raise InputError(f"the shards' plans disagree: rank {wrong} sends {sent.get(wrong, 0)} rows to rank "
                             f"{transport.rank}, which expects {expects.get(wrong, 0)} (a shard was changed after "
                             "partitioning: run 'distgcn partition' again)", path=directory)

    agree(transport, step)


def scatter_shards(transport: Transport, shards: Iterable[Shard] | None) -> Shard:
    """Rank 0 passes every rank's shard, in rank order, sends each its own and keeps its; the others pass None.

    ``shards`` may be a generator: a shard is cut, sent and dropped before the next, so rank 0 never holds
    them all.
    """
    if transport.rank == 0:
        assert shards is not None
        own = None
        for shard in shards:
            if shard.rank == 0:
                own = shard
            else:
                transport.send_object(shard.to_arrays(), dest=shard.rank)
        assert own is not None
        return own
    return Shard.from_arrays(transport.recv_object(source=0), source="shard from rank 0")
