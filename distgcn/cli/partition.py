"""``distgcn partition GRAPH``: partition a graph offline and write the partition directory."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from pathlib import Path

from distgcn.cli.options import (
    add_graph_options,
    add_vertex_order_option,
    default_of,
    field_flags,
    field_options,
    non_negative_float,
    positive_int,
    seed_int,
    threads_int,
)
from distgcn.cli.sampler_options import (
    add_sampler_options,
    add_shp_options,
    sampler_spec,
)
from distgcn.config import (
    DEFAULT_PARTITION_MODEL,
    PartitionConfig,
    PartitionerConfig,
)


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from distgcn.partitioning.hypergraph import (
        AUTO_VCYCLES_MAX_PARTS,
        AUTO_VCYCLES_MAX_PINS,
    )
    from distgcn.partitioning.models import KAMINPAR_MIN_NNZ

    part = commands.add_parser("partition", help="partition a graph offline and write per-rank shards",
                               description="Partition GRAPH into P parts; write meta.json, parts.npy and "
                                           "one shard per rank to DIR. Under mpiexec -n P, the ranks read and "
                                           "partition the graph together, each holding its share, and each "
                                           "writes its own shard (docs/scale.md).")
    part.add_argument("graph", metavar="GRAPH", help="a graph file or directory, or synthetic:...")
    part.add_argument("--parts", type=positive_int, required=True, metavar="P", help="number of ranks")
    part.add_argument("--model", **field_options(PartitionerConfig, "model"),
                      help=f"partition model (default: {DEFAULT_PARTITION_MODEL}, whose cut is the exact "
                           "communication volume)")
    part.add_argument("--parts-file", metavar="FILE", help="part vector for --model external")
    part.add_argument("--partitioner", **field_options(PartitionerConfig, "partitioner"),
                      help="tool for the model (hypergraph, stochastic: mtkahypar by default, or kahypar; graph: "
                           f"kaminpar from {KAMINPAR_MIN_NNZ:,} nonzeros of Â, metis below, unless named). Under "
                           "mpiexec -n P: zoltan by default for both, or ptscotch or parmetis (graph), which "
                           "partition on the ranks")
    part.add_argument("--preset", help="partitioner preset (mtkahypar: auto [default: quality + 5 V-cycles for "
                                       f"P <= {AUTO_VCYCLES_MAX_PARTS} on at most {AUTO_VCYCLES_MAX_PINS:,} "
                                       "nonzeros of Â, the tool's default otherwise], default, quality, quality_v3, "
                                       "quality_v5, highest_quality, deterministic, deterministic_quality, "
                                       "large_k; kahypar: fast [default], quality; kaminpar: default [default], "
                                       "fast, eco, strong)")
    part.add_argument("--threads", type=threads_int, metavar="T",
                      help="threads of mtkahypar and kaminpar (default: all cores; metis and kahypar use one). "
                           "kaminpar gives the same parts for the same seed on one thread only")
    part.add_argument("--epsilon", type=non_negative_float, **field_options(PartitionerConfig, "epsilon"),
                      help=f"allowed imbalance (default: {default_of(PartitionerConfig, 'epsilon')})")
    part.add_argument("--seed", type=seed_int, **field_options(PartitionerConfig, "seed"),
                      help="seed of the partitioner and of random features, 0..2147483647 (default: 0)")
    add_graph_options(part, PartitionConfig)
    add_sampler_options(part, required_by="--model stochastic")
    add_shp_options(part)
    part.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    part.add_argument("--force", action="store_true", help="replace DIR if it exists")
    part.add_argument("--central", action="store_true",
                      help="under mpiexec -n P: read and partition on rank 0 as one process does (the ranks still "
                           "cut and write their own shards), not on the ranks together; to compare the two")
    part.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    part.add_argument("--verbose", action="store_true", help="also the partitioner's details and each shard written")
    add_vertex_order_option(part, "", PartitionConfig)
    part.add_argument("--vertex-weight", **field_options(PartitionerConfig, "vertex_weight"),
                      help="what the graph, hypergraph and stochastic models balance: each row's nonzeros (the "
                           "SpMM's work, as the paper) or work (nonzeros plus the mean row's nonzeros, which also "
                           "counts per-row dense work; better on skewed graphs) (default: nonzeros)")
    part.set_defaults(field_name=field_flags(part))
    part.usage = _usage_with_the_stochastic_model(part)
    return part


def _usage_with_the_stochastic_model(parser: argparse.ArgumentParser) -> str:
    """argparse's usage, and a second synopsis for ``--model stochastic``, which requires --sampler and
    --batch-size: argparse can mark a flag required for every model or for none, not for one."""
    generated = parser.format_usage().removeprefix("usage: ").rstrip("\n").replace("%", "%%")
    sampler = next(action for action in parser._actions if action.dest == "sampler")
    indent = " " * len(f"usage: {parser.prog} ")
    return (generated.replace(parser.prog, "%(prog)s", 1) + "\n       %(prog)s --model stochastic --sampler "
            f"{{{','.join(sampler.choices)}}}\n{indent}--batch-size N [options] --parts P --out DIR GRAPH")


def partition_config(args: argparse.Namespace) -> PartitionConfig:
    """The command's configuration (checked) from partition's arguments, whose dests are its fields' names."""
    return PartitionConfig.from_settings(vars(args), sampler_spec(args))


def run(args: argparse.Namespace) -> int:
    """One process partitions and writes every shard; under mpiexec with P > 1 ranks, each rank writes its own."""
    import os

    from distgcn.comm.launch import detect
    from distgcn.errors import InputError
    from distgcn.shard.write import graph_options

    config = partition_config(args)
    options = graph_options(config)
    launch = detect(os.environ)
    if launch.world_size > 1 and launch.launcher != "mpi":
        raise InputError(f"distgcn partition was started as {launch.world_size} {launch.launcher} tasks: run one "
                         "process, or one MPI rank per part (mpiexec -n P, srun --mpi=pmi2) to have each rank "
                         "write its own shard")
    if launch.world_size > 1:
        return _run_on_ranks(args, config, options)
    from distgcn.io.safe_io import claimed
    from distgcn.shard.write import write_partition

    with claimed([(Path(args.out), "partition directory")]):
        write_partition(options, config.out, config.parts, config.partitioning, force=config.force,
                        quiet=config.quiet, verbose=config.verbose, vertex_order=config.vertex_order)
    _print_stats(args)
    return 0


def _run_on_ranks(args: argparse.Namespace, config: PartitionConfig, options) -> int:
    """The ranks read and partition together and each writes its own shard (distgcn/shard/write_on_ranks.py), or,
    with --central or a model without a distributed path here, rank 0 reads and partitions first
    (distgcn/shard/rank_shards.py); all exit with one status."""
    import sys

    from distgcn.comm.collective import (
        CollectiveInputError,
        RankFailed,
        abort_on_unexpected,
        agree,
    )
    from distgcn.comm.mpi_group import MPIGroup
    from distgcn.io.safe_io import claimed
    from distgcn.partitioning.on_ranks import distributed_problem
    from distgcn.runtime import signals
    from distgcn.shard.rank_shards import write_partition_on_ranks
    from distgcn.shard.write_on_ranks import write_partition_from_rows

    group = MPIGroup()
    signals.attach_job(group.rank, group.size, group.abort)
    problem = "--central" if config.central else distributed_problem(config.partitioning, group)
    if problem is not None and not config.central and group.rank == 0 and not config.quiet:
        print(f"distgcn: reading and partitioning on rank 0: {problem}", file=sys.stderr, flush=True)
    write = write_partition_on_ranks if problem is not None else write_partition_from_rows
    try:
        with ExitStack() as held:
            agree(group, lambda: held.enter_context(claimed([(Path(args.out), "partition directory")]))
                  if group.rank == 0 else None)
            write(group, options, config.out, config.parts, config.partitioning, force=config.force,
                  quiet=config.quiet, verbose=config.verbose, vertex_order=config.vertex_order)
    except CollectiveInputError as exc:
        return exc.report()
    except RankFailed:  # the failing rank printed its traceback
        return 1
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(group, exc)
    try:
        _print_stats(args, group)
    except CollectiveInputError as exc:
        return exc.report()
    return 0


def _print_stats(args: argparse.Namespace, group=None) -> None:
    """The summary of the directory just written; under MPI each rank reads its shards' headers, rank 0 prints."""
    from distgcn.cli.stats_tables import print_stats

    if not args.quiet:  # the shards were checksummed as they were written: only their headers are read again
        print_stats(args.out, as_json=False, verify=False, group=group)
