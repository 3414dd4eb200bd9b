"""The ``report`` subcommand: parse inputs, draw every figure the inputs allow, write summary.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from distgcn.cli.options import field_options, parsed
from distgcn.config import TimeConfig
from distgcn.errors import InputError
from distgcn.io.safe_io import claimed, prepare_output_dir
from distgcn.performance.prediction import bandwidth, latency

INPUT_HELP = ("a metrics file (--metrics of 'distgcn train') or a partition directory; append "
              "@key=value,... to name or complete it (keys: label, ranks, model, graph, and for a run "
              "calibration: the `distgcn calibrate` file of its nodes and link), e.g. "
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
    report.add_argument("--predict-time", metavar="CALIBRATION", **field_options(TimeConfig, "predict_time"),
                        help="draw each multi-rank run's predicted epoch time (stats --predict-time on its partition "
                             "directory) beside the measured one, from this `distgcn calibrate` file where the run "
                             "names none of its own (@calibration=FILE)")
    report.add_argument("--bandwidth", type=parsed(bandwidth), metavar="RATE", **field_options(TimeConfig, "bandwidth"),
                        help="with a prediction: the link's rate, as 100mbit or 25GB/s (default: the calibration's)")
    report.add_argument("--latency", type=parsed(latency), metavar="TIME", **field_options(TimeConfig, "latency"),
                        help="with a prediction: a message's start-up time, as 2us (default: the calibration's)")
    return report


def run(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401 - only to say clearly what is missing
    except ImportError:
        raise InputError("distgcn report needs matplotlib: pip install 'distgcn[report]'") from None
    from distgcn.performance.calibration_file import read_calibration
    from distgcn.report.figures import earlier_figures, remove_stale, render_all
    from distgcn.report.inputs import load_inputs
    from distgcn.report.predicted import predict_runs
    from distgcn.report.summary import write_summary

    runs, partitions = load_inputs(args.inputs)
    given = {"latency_s": args.latency, "bandwidth_bytes_s": args.bandwidth}
    if args.predict_time is None and (args.latency is not None or args.bandwidth is not None) \
            and not any(r.calibration for r in runs):
        raise InputError("report: --bandwidth and --latency apply to predictions: give --predict-time CALIBRATION "
                         "or RUN@calibration=FILE")
    for path in {args.predict_time, *(r.calibration for r in runs)} - {None}:
        read_calibration(path)  # a bad file stops the report before anything is drawn
    predicted = predict_runs(runs, args.predict_time, given)
    with claimed([(Path(args.out), "report directory")]):
        out = prepare_output_dir(Path(args.out), what="report directory")
        earlier = earlier_figures(out)
        figures = render_all(runs, partitions, out, predicted)
        summary = write_summary(runs, partitions, figures, out, predicted)
        for path in remove_stale(earlier, [path for _, path in figures]):
            print(f"distgcn: removed {path}: a figure of the earlier report in {out} that this report does not "
                  "draw", file=sys.stderr)
    for _, path in figures:
        print(path)
    print(summary)
    return 0
