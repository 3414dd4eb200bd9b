"""The ``distgcn`` command line: the subcommands of :mod:`distgcn.cli`, assembled, and how a run ends.

Bad input ends the run with one line on stderr and exit status 2 (an error of
the environment that names its file, a full disk or a name too long, is bad
input too: :func:`distgcn.errors.as_input_error`); an unexpected failure on
any rank prints a traceback naming the rank and aborts the whole MPI job, so
no rank is left waiting; a signal ends every rank with one line and exit
status 128 + its number (:mod:`distgcn.runtime.signals`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from distgcn.cli import calibrate, jobs, partition, predict, report, stats, train
from distgcn.config import ConfigError
from distgcn.errors import InputError, as_input_error
from distgcn.runtime import signals

COMMANDS = (train, predict, partition, stats, calibrate, report, jobs)
"""Each with ``add_parser(subparsers)`` and ``run(args) -> int``, in the order ``distgcn --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    from distgcn import __version__

    parser = argparse.ArgumentParser(prog="distgcn", description="Distributed full-graph GCN training.")
    parser.add_argument("--version", action="version", version=f"distgcn {__version__}",
                        help="print the version of distgcn and exit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers).set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; exit 0, 2 (bad input), 128 + N after signal N (docs/reliability.md), or the command's own."""
    restore_signals = signals.install()
    _print_paths_as_given()
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        code = args.handler(args)
        sys.stdout.flush()  # a reader that left (| head) shows here, not as a traceback at exit
        return code
    except InputError as exc:
        print(f"distgcn: error: {_worded(exc, args)}", file=sys.stderr)
        return 2
    except signals.Interrupted as exc:
        signals.report(exc.signum)
        return signals.exit_code(exc.signum)
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as exc:
        bad_input = as_input_error(exc)
        if bad_input is None:
            raise
        print(f"distgcn: error: {bad_input}", file=sys.stderr)
        return 2
    finally:
        restore_signals()


def _worded(exc: InputError, args: argparse.Namespace | None) -> str:
    """The error as the user should read it: configuration fields named by this command's flags."""
    name_field = getattr(args, "field_name", None)
    return exc.render(name_field) if isinstance(exc, ConfigError) and name_field is not None else str(exc)


def _print_paths_as_given() -> None:
    """Let stdout print a path whose name is not UTF-8 (``m\\xff.jsonl``) as the bytes it has on disk, as Python
    itself does in the C locale, instead of failing on it (a UTF-8 locale or PYTHONIOENCODING makes stdout strict)."""
    if getattr(sys.stdout, "errors", None) == "strict" and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="surrogateescape")


def _stdout_closed() -> int:
    """The reader of stdout left (``distgcn stats DIR | head -1``): stop quietly, as a killed-by-SIGPIPE tool."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit does not fail again
    os.close(devnull)
    return signals.BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
