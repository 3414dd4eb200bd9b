"""``distgcn stats DIR...`` and ``distgcn stats --predict SPEC``: parse the options and report
(distgcn/cli/stats_tables.py does the work)."""

from __future__ import annotations

import argparse

from distgcn.cli.options import (
    HALO_WINDOW_HELP,
    add_time_options,
    field_flags,
    field_options,
    halo_window,
    positive_int,
    probability,
    widths,
)
from distgcn.config import ModelConfig
from distgcn.memory.from_sizes import parse_spec


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    stats = commands.add_parser("stats", help="communication metrics of partition directories (several: compared "
                                               "in one table), or a prediction for a graph known by its size")
    stats.add_argument("partition_dirs", nargs="*", metavar="DIR",
                       help="a partition directory; give several to compare them, one row each")
    stats.add_argument("--predict", type=parse_spec, metavar="n=N,nnz=Z,features=F,parts=P[,classes=C,halo=H]",
                       help="instead of DIRs: per-rank memory and per-epoch halo bytes of a graph with N vertices, "
                            "Z nonzeros in Â (self loops included), F features, C classes (default: 2) on P ranks; "
                            "halo rows per rank H measured on a better partition, else a random partition's "
                            "(an upper bound: docs/scale.md)")
    stats.add_argument("--json", action="store_true",
                       help="one JSON object instead of a table (several DIRs: a list of them, in order)")
    stats.add_argument("--conv", **field_options(ModelConfig, "conv"),
                       help="layer type of the model whose peak memory per rank is predicted, as for train "
                            "(default: gcn)")
    stats.add_argument("--layers", type=positive_int, **field_options(ModelConfig, "layers"),
                       help="its layers (default: 2)")
    stats.add_argument("--hidden", type=widths, **field_options(ModelConfig, "hidden"), metavar="H[,H...]",
                       help="its hidden width(s), as for train (default: 16)")
    stats.add_argument("--dtype", **field_options(ModelConfig, "dtype"), help="(default: float32)")
    stats.add_argument("--optimizer", **field_options(ModelConfig, "optimizer"), help="(default: adam)")
    stats.add_argument("--dropout", type=probability, **field_options(ModelConfig, "dropout"),
                       help="(default: 0.5)")
    stats.add_argument("--heads", type=positive_int, **field_options(ModelConfig, "heads"),
                       help="--conv gat: heads per hidden layer (default: 8)")
    stats.add_argument("--output-heads", type=positive_int, **field_options(ModelConfig, "output_heads"),
                       help="--conv gat: heads of the last layer (default: 1)")
    stats.add_argument("--no-root-weight", dest="root_weight", action="store_false",
                       **field_options(ModelConfig, "root_weight"),
                       help="--conv sage: no W_self term")
    stats.add_argument("--halo-window", type=halo_window, **field_options(ModelConfig, "halo_window"), metavar="K",
                       help=HALO_WINDOW_HELP + " (default: 4)")
    add_time_options(stats)
    stats.set_defaults(field_name=field_flags(stats))
    return stats


def run(args: argparse.Namespace) -> int:
    """One directory: its full report; several: one comparison table (or JSON list), all verified first."""
    from distgcn.errors import InputError

    options = ModelConfig(args.layers, args.hidden, args.dtype, args.optimizer, args.dropout, conv=args.conv,
                          heads=args.heads, output_heads=args.output_heads, root_weight=args.root_weight,
                          halo_window=args.halo_window)
    if (args.predict is None) == (not args.partition_dirs):
        raise InputError("stats: give partition directories or --predict, not both" if args.predict else
                         "stats: give a partition directory (or several), or --predict n=...,nnz=...,features=...,"
                         "parts=...")
    time_only = [flag for flag, value in (("--bandwidth", args.bandwidth), ("--latency", args.latency),
                                          ("--ranks-per-node", args.ranks_per_node != 1)) if value]
    if args.predict_time is None and time_only:
        raise InputError(f"stats: {time_only[0]} applies to --predict-time only")
    group = _ranks()
    if group is not None:
        return _run_on_ranks(args, options, group)
    _run_here(args, options)
    return 0


def _run_here(args: argparse.Namespace, options: ModelConfig) -> None:
    """The report, made by this process alone."""
    from distgcn.cli.stats_tables import print_comparison, print_prediction, print_stats

    if args.predict_time is not None:
        from distgcn.cli.time_tables import (
            print_time_prediction_by_size,
            print_time_predictions,
        )

        given = {"latency_s": args.latency, "bandwidth_bytes_s": args.bandwidth}
        if args.predict is not None:
            print_time_prediction_by_size(args.predict, args.predict_time, given, args.ranks_per_node, args.json)
        else:
            print_time_predictions(args.partition_dirs, args.predict_time, given, args.ranks_per_node, args.json)
    elif args.predict is not None:
        print_prediction(args.predict, options, as_json=args.json)
    elif len(args.partition_dirs) == 1:
        print_stats(args.partition_dirs[0], as_json=args.json, options=options)
    else:
        print_comparison(args.partition_dirs, as_json=args.json, options=options)


def _ranks():
    """The ranks of an MPI job (``mpiexec -n P distgcn stats DIR...``), which read the shards together; None in
    one process."""
    import os

    from distgcn.comm.launch import detect
    from distgcn.errors import InputError

    launch = detect(os.environ)
    if launch.world_size == 1:
        return None
    if launch.launcher != "mpi":
        raise InputError(f"distgcn stats was started as {launch.world_size} {launch.launcher} tasks: run one process, "
                         "or MPI ranks (mpiexec -n P) to have each read its share of the shards")
    from distgcn.comm.mpi_group import MPIGroup

    return MPIGroup()


def _run_on_ranks(args: argparse.Namespace, options: ModelConfig, group) -> int:
    """Each rank verifies and measures every P-th shard of each directory; rank 0 prints; all exit with one
    status. A prediction (``--predict``, ``--predict-time``) reads no shard: rank 0 makes it alone."""
    from distgcn.cli.stats_tables import print_comparison, print_stats
    from distgcn.comm.collective import CollectiveInputError, abort_on_unexpected, agree
    from distgcn.runtime import signals

    signals.attach_job(group.rank, group.size, group.abort)
    try:
        if args.predict is not None or args.predict_time is not None:
            agree(group, lambda: _run_here(args, options) if group.rank == 0 else None)
        elif len(args.partition_dirs) == 1:
            print_stats(args.partition_dirs[0], as_json=args.json, options=options, group=group)
        else:
            print_comparison(args.partition_dirs, as_json=args.json, options=options, group=group)
    except CollectiveInputError as exc:
        return exc.report()
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(group, exc)
    return 0
