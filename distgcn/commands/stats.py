"""``distgcn stats DIR...``: parse the options and report (partition/stats_command.py does the work)."""

from __future__ import annotations

import argparse

from ..config import DTYPES, OPTIMIZERS
from .options import field_flags, positive_int, probability, widths


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    stats = commands.add_parser("stats", help="communication metrics of partition directories (several: compared "
                                               "in one table)")
    stats.add_argument("partition_dirs", nargs="+", metavar="DIR",
                       help="a partition directory; give several to compare them, one row each")
    stats.add_argument("--json", action="store_true",
                       help="one JSON object instead of a table (several DIRs: a list of them, in order)")
    stats.add_argument("--layers", type=positive_int, default=2,
                       help="GCN layers of the model whose peak memory per rank is predicted (default: 2)")
    stats.add_argument("--hidden", type=widths, default=(16,), metavar="H[,H...]",
                       help="its hidden width(s), as for train (default: 16)")
    stats.add_argument("--dtype", choices=DTYPES, default="float32", help="(default: float32)")
    stats.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="(default: adam)")
    stats.add_argument("--dropout", type=probability, default=0.5, help="(default: 0.5)")
    stats.set_defaults(field_name=field_flags(stats))
    return stats


def run(args: argparse.Namespace) -> int:
    """One directory: its full report; several: one comparison table (or JSON list), all verified first."""
    from partition.stats_command import print_comparison, print_stats

    from ..config import ModelConfig

    options = ModelConfig(args.layers, args.hidden, args.dtype, args.optimizer, args.dropout)
    if len(args.partition_dirs) == 1:
        print_stats(args.partition_dirs[0], as_json=args.json, options=options)
    else:
        print_comparison(args.partition_dirs, as_json=args.json, options=options)
    return 0
