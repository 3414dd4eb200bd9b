"""Argument types and options that several subcommands share, and the wording of configuration fields as flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from distgcn.config import (
    COUNT_MAX,
    EPOCHS_MAX,
    FEATURE_NORMS,
    SEED_MAX,
    THREADS_MAX,
    VERTEX_ORDERS,
)


def checked_type(convert: Callable[[str], Any], check: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    """An argparse ``type`` that converts, then checks, with one message for both failures."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not check(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


def bounded_int(low: int, high: int, what: str | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``low..high``, refused in one line naming the flag and the range
    (a number too large for what consumes it would otherwise overflow far from the flag)."""
    return checked_type(int, lambda v: low <= v <= high, what or f"an integer in {low}..{high}")


positive_int = bounded_int(1, COUNT_MAX, "a positive integer (at most 2**62)")
seed_int = bounded_int(0, SEED_MAX, f"an integer in 0..{SEED_MAX} (the partitioners take a 32-bit seed)")
epochs_int = bounded_int(1, EPOCHS_MAX, f"an integer in 1..{EPOCHS_MAX} (checkpoint names hold 8 digits)")
threads_int = bounded_int(1, THREADS_MAX)


def widths(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(","))


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0.0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def probability(text: str) -> float:
    value = non_negative_float(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1), got {text!r}")
    return value


def add_graph_options(parser: argparse.ArgumentParser) -> None:
    """Options that say how to read a graph (shared by train and partition)."""
    parser.add_argument("--symmetrize", action="store_true",
                        help="make a directed graph undirected (A ∪ Aᵀ) before adding self loops")
    parser.add_argument("--features", type=positive_int, metavar="F",
                        help="random feature width for an unlabelled graph (with --classes)")
    parser.add_argument("--classes", type=positive_int, metavar="C",
                        help="random label count for an unlabelled graph (with --features)")
    parser.add_argument("--feature-norm", choices=FEATURE_NORMS, default="row",
                        help="scale feature rows to unit L1 norm, as Kipf & Welling (default: row)")


def add_vertex_order_option(parser: argparse.ArgumentParser, prefix: str, default: str | None) -> None:
    parser.add_argument("--vertex-order", choices=VERTEX_ORDERS, default=default,
                        help=f"{prefix}how each shard numbers its own rows: rcm (reverse Cuthill-McKee of the "
                             "shard's block, for memory locality in the SpMM) or natural (by vertex id) "
                             "(default: rcm)")


def field_flags(parser: argparse.ArgumentParser) -> Callable[[str], str]:
    """Words a configuration field (``train.hidden``) as the parser's flag (``--hidden``) or metavar (``DIR``).

    Each field of distgcn.config is named as the argument's ``dest``, so the last part of its path finds it.
    """
    flags = {action.dest: action.option_strings[0] if action.option_strings else action.metavar
             for action in parser._actions}
    return lambda path: flags.get(path.rsplit(".", 1)[-1], path)
