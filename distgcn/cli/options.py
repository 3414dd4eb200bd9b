"""Argument types and options that several subcommands share, and the wording of configuration fields as flags.

An option's ``dest`` is the name of the configuration field it sets (distgcn.config), and its default and choices
are that field's (:func:`field_options`): argparse declares none of its own (tests/config/test_one_config.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from distgcn.config import (
    COUNT_MAX,
    EPOCHS_MAX,
    SEED_MAX,
    THREADS_MAX,
    choices_of,
    default_of,
)

__all__ = ["default_of", "field_options"]


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


def halo_window(text: str) -> int | None:
    """``--halo-window``: a count of rounds >= 2, or ``all`` (the whole halo)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 or all, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"expected an integer >= 2 (one round in flight while another is "
                                         f"multiplied) or all, got {text!r}")
    return value


HALO_WINDOW_HELP = ("at most K rounds of halo messages (one peer's rows each way) in flight and in memory at once "
                    "instead of the whole halo: a rank's halo buffers shrink to K of its largest messages, for the "
                    "same results bit for bit (docs/runtime.md; `stats --predict` shows what each K needs)")


def field_options(cls: type, name: str) -> dict[str, Any]:
    """``add_argument``'s default (and choices, where the field declares them) for field ``name`` of the
    configuration class ``cls``."""
    options: dict[str, Any] = {"default": default_of(cls, name)}
    if "choices" in cls.__dataclass_fields__[name].metadata:
        options["choices"] = choices_of(cls, name)
    return options


def add_graph_options(parser: argparse.ArgumentParser, config: type) -> None:
    """Options that say how to read a graph (shared by train and partition), with the defaults of ``config``."""
    parser.add_argument("--symmetrize", action="store_true", default=default_of(config, "symmetrize"),
                        help="make a directed graph undirected (A ∪ Aᵀ) before adding self loops")
    parser.add_argument("--features", type=positive_int, metavar="F",
                        help="random feature width for an unlabelled graph (with --classes)")
    parser.add_argument("--classes", type=positive_int, metavar="C",
                        help="random label count for an unlabelled graph (with --features)")
    parser.add_argument("--feature-norm", **field_options(config, "feature_norm"),
                        help="scale feature rows to unit L1 norm, as Kipf & Welling (default: "
                             f"{default_of(config, 'feature_norm')})")


def add_vertex_order_option(parser: argparse.ArgumentParser, prefix: str, config: type) -> None:
    parser.add_argument("--vertex-order", **field_options(config, "vertex_order"),
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


def parsed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser that raises ValueError: argparse words the error in its one line."""
    def parse_argument(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parse_argument.__name__ = parse.__name__
    return parse_argument


def add_time_options(parser: argparse.ArgumentParser) -> None:
    """``--predict-time`` and the network options of ``stats`` (TimeConfig's fields)."""
    from distgcn.config import TimeConfig
    from distgcn.performance.prediction import bandwidth, latency

    parser.add_argument("--predict-time", metavar="CALIBRATION", **field_options(TimeConfig, "predict_time"),
                        help="instead of the report: each DIR's (or the --predict graph's) predicted epoch time, "
                             "from a file of `distgcn calibrate` (whose model is the one predicted for)")
    parser.add_argument("--bandwidth", type=parsed(bandwidth), metavar="RATE", **field_options(TimeConfig, "bandwidth"),
                        help="with --predict-time: a node link's rate each way, as 100mbit, 10gbit or 25GB/s "
                             "(default: the calibration's measurement)")
    parser.add_argument("--latency", type=parsed(latency), metavar="TIME", **field_options(TimeConfig, "latency"),
                        help="with --predict-time: a message's start-up time, as 2us or 0.5ms (default: the "
                             "calibration's measurement)")
    parser.add_argument("--ranks-per-node", type=positive_int, metavar="K", **field_options(TimeConfig, "ranks_per_node"),
                        help="with --predict-time: ranks placed on each node in rank order; their messages to each "
                             f"other do not cross a link (default: {default_of(TimeConfig, 'ranks_per_node')})")
