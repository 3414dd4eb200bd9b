"""The ``report`` subcommand: parse inputs, draw every figure the inputs allow, write summary.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distgcn.errors import InputError
from distgcn.io.safe_io import claimed, prepare_output_dir

INPUT_HELP = ("a metrics file (--metrics of 'distgcn train') or a partition directory; append "
              "@key=value,... to name or complete it (keys: label, ranks, model, graph), e.g. "
              "old.jsonl@ranks=8,model=HP,graph=cora")


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    report = commands.add_parser(
        "report", help="plots and a markdown summary from metrics files and partition directories",
        description="Render PNG figures (curves, time split, strong scaling, partition model comparison, "
                    "communication matrix, per-rank balance) and summary.md into DIR.")
    report.add_argument("inputs", nargs="+", metavar="INPUT", help=INPUT_HELP)
    report.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (created; an earlier report's files are replaced, or removed if "
                             "this report does not draw them again; nothing else)")
    return report


def run(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401 - only to say clearly what is missing
    except ImportError:
        raise InputError("distgcn report needs matplotlib: pip install 'distgcn[report]'") from None
    from distgcn.report.figures import earlier_figures, remove_stale, render_all
    from distgcn.report.inputs import load_inputs
    from distgcn.report.summary import write_summary

    runs, partitions = load_inputs(args.inputs)
    with claimed([(Path(args.out), "report directory")]):
        out = prepare_output_dir(Path(args.out), what="report directory")
        earlier = earlier_figures(out)
        figures = render_all(runs, partitions, out)
        summary = write_summary(runs, partitions, figures, out)
        for path in remove_stale(earlier, [path for _, path in figures]):
            print(f"distgcn: removed {path}: a figure of the earlier report in {out} that this report does not "
                  "draw", file=sys.stderr)
    for _, path in figures:
        print(path)
    print(summary)
    return 0
