"""The ``distgcn`` command line: ``train`` (and the partitioning commands).

Bad input ends the run with one line on stderr and exit status 2; an
unexpected failure on any rank prints a traceback naming the rank and aborts
the whole MPI job, so no rank is left waiting; a signal ends every rank with
one line and exit status 128 + its number (:mod:`distgcn.signals`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import signals
from .errors import InputError
from .commands.jobs import add_jobs_parser
from .commands.report import add_report_parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _widths(text: str) -> tuple[int, ...]:
    return tuple(_positive_int(part) for part in text.split(","))


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _non_negative_float(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def add_graph_options(parser: argparse.ArgumentParser) -> None:
    """Options that say how to read a graph (shared by train and partition)."""
    parser.add_argument("--symmetrize", action="store_true",
                        help="make a directed graph undirected (A ∪ Aᵀ) before adding self loops")
    parser.add_argument("--features", type=_positive_int, metavar="F",
                        help="random feature width for an unlabelled graph (with --classes)")
    parser.add_argument("--classes", type=_positive_int, metavar="C",
                        help="random label count for an unlabelled graph (with --features)")
    parser.add_argument("--feature-norm", choices=["row", "none"], default="row",
                        help="scale feature rows to unit L1 norm, as Kipf & Welling (default: row)")


def add_vertex_order_option(parser: argparse.ArgumentParser, prefix: str, default: str | None) -> None:
    from partition.shards import VERTEX_ORDERS

    parser.add_argument("--vertex-order", choices=VERTEX_ORDERS, default=default,
                        help=f"{prefix}how each shard numbers its own rows: rcm (reverse Cuthill-McKee of the "
                             "shard's block, for memory locality in the SpMM) or natural (by vertex id) "
                             "(default: rcm)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distgcn", description="Distributed full-graph GCN training.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train a GCN on P ranks (launch with mpiexec -n P)",
                                description="Train a GCN; each rank holds only its rows of Â, H and G.")
    train.add_argument("partition_dir", nargs="?", metavar="DIR",
                       help="a partition directory written by 'distgcn partition' (each rank reads its shard)")
    train.add_argument("--graph", metavar="GRAPH",
                       help="a graph file or directory, or synthetic:... ; partitioned on rank 0")
    train.add_argument("--partition", default="random", choices=["random", "contiguous", "graph", "hypergraph"],
                       help="how rank 0 partitions --graph (default: random)")
    add_vertex_order_option(train, "with --graph: ", None)
    add_graph_options(train)
    train.add_argument("--layers", type=int, default=2, help="number of GCN layers, >= 2 (default: 2)")
    train.add_argument("--hidden", type=_widths, default=(16,), metavar="H[,H...]",
                       help="hidden width, or one width per hidden layer (default: 16)")
    train.add_argument("--epochs", type=_positive_int, default=200, help="epochs (default: 200)")
    train.add_argument("--lr", type=_non_negative_float, default=0.01, help="learning rate (default: 0.01)")
    train.add_argument("--dropout", type=_probability, default=0.5, help="dropout probability (default: 0.5)")
    train.add_argument("--weight-decay", type=_non_negative_float, default=5e-4,
                       help="L2 weight decay (default: 5e-4)")
    train.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="(default: adam)")
    train.add_argument("--seed", type=int, default=0,
                       help="seed of the weights, dropout, random partition and random features (default: 0)")
    train.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="(default: float32)")
    train.add_argument("--first-layer", choices=["exact", "cached"], default="exact",
                       help="cached: compute Â·X once at setup, so the first layer needs no exchange per epoch; "
                            "dropout then applies after the aggregation (a different model; default: exact)")
    train.add_argument("--comm", choices=["halo", "broadcast"], default="halo",
                       help="broadcast: every rank sends its whole block of H at every SpMM, the CAGNET-style "
                            "1D algorithm, for comparison (default: halo, only the rows Â needs)")
    train.add_argument("--halo-dtype", choices=["float32", "bfloat16", "float16"],
                       help="send halo rows (forward) and halo partial products (backward) in this dtype, "
                            "converted back to --dtype on arrival: 2-byte types halve the bytes sent for a "
                            "rounding of what crosses ranks (default: --dtype, no conversion)")
    train.add_argument("--threads", type=_positive_int,
                       help="compute threads per rank (torch and BLAS); default: SLURM_CPUS_PER_TASK under "
                            "Slurm, else the node's cores divided by the ranks on the node")
    train.add_argument("--spmm-kernel", choices=["auto", "torch", "scipy", "numba"], default="auto",
                       help="local sparse product: auto = numba (our loop for products of 32 columns or more, "
                            "scipy's CSR product below) on one thread, torch CSR on several or on a GPU "
                            "(default: auto; measured in docs/performance.md)")
    train.add_argument("--backend", choices=["mpi", "gloo", "nccl"],
                       help="transport: mpi (mpi4py), gloo (torch.distributed on CPUs) or nccl (one GPU per rank); "
                            "default: nccl when a GPU is visible and no MPI launcher started the job, else mpi "
                            "(docs/gpu.md)")
    train.add_argument("--metrics", metavar="FILE", help="write one JSON object per epoch to FILE (rank 0)")
    train.add_argument("--save-weights", metavar="FILE", help="write the final weights to FILE (.npz, rank 0)")
    train.add_argument("--checkpoint-dir", metavar="D",
                       help="directory for checkpoints (created; must be visible to every rank)")
    train.add_argument("--checkpoint-every", type=_positive_int, metavar="K",
                       help="write a checkpoint every K epochs and after the last one")
    train.add_argument("--checkpoint-keep", type=_positive_int, default=3, metavar="N",
                       help="keep the newest N checkpoints (default: 3)")
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest sound checkpoint in --checkpoint-dir (start afresh if "
                            "there is none, so a requeued job can always pass it)")
    from .sampling.cli_options import add_sampler_options, add_shp_options

    add_sampler_options(train)
    train.add_argument("--batches-per-epoch", type=_positive_int, metavar="K",
                       help="with --sampler: optimizer steps (minibatches) per epoch (default: ceil(n / N))")
    train.add_argument("--norm-samples", type=int, default=50, metavar="B",
                       help="with --sampler: pre-sampled batches for GraphSAINT normalization; 0 turns it off "
                            "(default: 50)")
    train.add_argument("--quiet", action="store_true", help="no per-epoch lines or progress; only the summary")
    train.add_argument("--verbose", action="store_true",
                       help="also each epoch's time split and traffic, and the run's settings")
    train.set_defaults(handler=_run_train)

    part = commands.add_parser("partition", help="partition a graph offline and write per-rank shards",
                               description="Partition GRAPH into P parts; write meta.json, parts.npy and "
                                           "one shard per rank to DIR.")
    part.add_argument("graph", metavar="GRAPH", help="a graph file or directory, or synthetic:...")
    part.add_argument("--parts", type=_positive_int, required=True, metavar="P", help="number of ranks")
    part.add_argument("--model", required=True,
                      choices=["random", "contiguous", "graph", "hypergraph", "stochastic", "external"],
                      help="partition model")
    part.add_argument("--parts-file", metavar="FILE", help="part vector for --model external")
    part.add_argument("--partitioner", choices=["kahypar", "mtkahypar", "metis"],
                      help="tool for the model (hypergraph: mtkahypar by default; graph: metis)")
    part.add_argument("--preset", help="partitioner preset (mtkahypar: auto [default: quality + 5 V-cycles for "
                                       "P <= 8, the tool's default above], default, quality, quality_v3, "
                                       "quality_v5, highest_quality, deterministic, deterministic_quality, "
                                       "large_k; kahypar: fast [default], quality)")
    part.add_argument("--epsilon", type=_non_negative_float, default=0.03, help="allowed imbalance (default: 0.03)")
    part.add_argument("--seed", type=int, default=0,
                      help="seed of the partitioner and of random features (default: 0)")
    add_graph_options(part)
    add_sampler_options(part)
    add_shp_options(part)
    part.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    part.add_argument("--force", action="store_true", help="replace DIR if it exists")
    part.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    part.add_argument("--verbose", action="store_true", help="also the partitioner's details and each shard written")
    add_vertex_order_option(part, "", "rcm")
    part.add_argument("--vertex-weight", choices=["nonzeros", "work"], default="nonzeros",
                      help="what the graph, hypergraph and stochastic models balance: each row's nonzeros (the "
                           "SpMM's work, as the paper) or work (nonzeros plus the mean row's nonzeros, which also "
                           "counts per-row dense work; better on skewed graphs) (default: nonzeros)")
    part.set_defaults(handler=_run_partition)

    stats = commands.add_parser("stats", help="communication metrics of partition directories (several: compared "
                                               "in one table)")
    stats.add_argument("partition_dirs", nargs="+", metavar="DIR",
                       help="a partition directory; give several to compare them, one row each")
    stats.add_argument("--json", action="store_true",
                       help="one JSON object instead of a table (several DIRs: a list of them, in order)")
    stats.add_argument("--layers", type=_positive_int, default=2,
                       help="GCN layers of the model whose peak memory per rank is predicted (default: 2)")
    stats.add_argument("--hidden", type=_widths, default=(16,), metavar="H[,H...]",
                       help="its hidden width(s), as for train (default: 16)")
    stats.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="(default: float32)")
    stats.add_argument("--optimizer", choices=["adam", "sgd"], default="adam", help="(default: adam)")
    stats.add_argument("--dropout", type=_probability, default=0.5, help="(default: 0.5)")
    stats.set_defaults(handler=lambda args: _run_stats(args))
    add_report_parser(commands)
    add_jobs_parser(commands)
    return parser


def _run_train(args: argparse.Namespace) -> int:
    from .commands.train import run_train

    return run_train(args)


def _run_partition(args: argparse.Namespace) -> int:
    from partition.precompute import write_partition

    from .prepare import GraphOptions
    from .sampling.cli_options import sampler_spec

    options = GraphOptions(spec=args.graph, symmetrize=args.symmetrize, features=args.features,
                           classes=args.classes, seed=args.seed, feature_norm=args.feature_norm)
    write_partition(options, args.out, args.parts, args.model, epsilon=args.epsilon, seed=args.seed,
                    partitioner=args.partitioner, preset=args.preset, parts_file=args.parts_file,
                    force=args.force, quiet=args.quiet, verbose=args.verbose, sampler=sampler_spec(args),
                    shp={"shp_epsilon": args.shp_epsilon, "shp_delta": args.shp_delta,
                         "shp_samples": args.shp_samples}, vertex_order=args.vertex_order,
                    vertex_weight=args.vertex_weight)
    from partition.stats_command import print_stats

    if not args.quiet:  # the shards were checksummed as they were written: only their headers are read again
        print_stats(args.out, as_json=False, verify=False)
    return 0


def _run_stats(args: argparse.Namespace) -> int:
    """One directory: its full report; several: one comparison table (or JSON list), all verified first."""
    from partition.stats_command import ModelOptions, print_comparison, print_stats

    options = ModelOptions(args.layers, args.hidden, args.dtype, args.optimizer, args.dropout)
    if len(args.partition_dirs) == 1:
        print_stats(args.partition_dirs[0], as_json=args.json, options=options)
    else:
        print_comparison(args.partition_dirs, as_json=args.json, options=options)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; exit 0, 2 (bad input), 128 + N after signal N (docs/reliability.md), or the command's own."""
    restore_signals = signals.install()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        code = args.handler(args)
        sys.stdout.flush()  # a reader that left (| head) shows here, not as a traceback at exit
        return code
    except InputError as exc:
        print(f"distgcn: error: {exc}", file=sys.stderr)
        return 2
    except signals.Interrupted as exc:
        signals.report(exc.signum)
        return signals.exit_code(exc.signum)
    except BrokenPipeError:
        return _stdout_closed()
    finally:
        restore_signals()


def _stdout_closed() -> int:
    """The reader of stdout left (``distgcn stats DIR | head -1``): stop quietly, as a killed-by-SIGPIPE tool."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit does not fail again
    os.close(devnull)
    return signals.BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
