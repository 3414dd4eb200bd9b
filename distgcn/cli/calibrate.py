"""``distgcn calibrate --out FILE``: measure this node's compute rates for a model and, under a launcher, the
network between two ranks (distgcn/performance/calibration.py), for ``stats DIR --predict-time FILE``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from distgcn.cli.options import (
    HALO_WINDOW_HELP,
    default_of,
    field_flags,
    field_options,
    halo_window,
    positive_int,
    probability,
    widths,
)
from distgcn.config import CalibrationConfig, ModelConfig


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    calibrate = commands.add_parser(
        "calibrate", help="measure this node's compute rates for a model (and, under mpiexec or srun, the "
                          "network between two ranks) for `stats DIR --predict-time`")
    calibrate.add_argument("--out", required=True, metavar="FILE", help="the calibration file to write (JSON)")
    calibrate.add_argument("--features", type=positive_int, required=True, metavar="F",
                           help="input features of the graphs the prediction is for")
    calibrate.add_argument("--classes", type=positive_int, required=True, metavar="C", help="their classes")
    calibrate.add_argument("--conv", **field_options(ModelConfig, "conv"), help="layer type, as for train")
    calibrate.add_argument("--layers", type=positive_int, **field_options(ModelConfig, "layers"))
    calibrate.add_argument("--hidden", type=widths, **field_options(ModelConfig, "hidden"), metavar="H[,H...]")
    calibrate.add_argument("--dtype", **field_options(ModelConfig, "dtype"))
    calibrate.add_argument("--optimizer", **field_options(ModelConfig, "optimizer"))
    calibrate.add_argument("--dropout", type=probability, **field_options(ModelConfig, "dropout"))
    calibrate.add_argument("--heads", type=positive_int, **field_options(ModelConfig, "heads"))
    calibrate.add_argument("--output-heads", type=positive_int, **field_options(ModelConfig, "output_heads"))
    calibrate.add_argument("--no-root-weight", dest="root_weight", action="store_false",
                           **field_options(ModelConfig, "root_weight"))
    calibrate.add_argument("--halo-window", type=halo_window, **field_options(ModelConfig, "halo_window"), metavar="K",
                           help=HALO_WINDOW_HELP + " (the distributed run's)")
    calibrate.add_argument("--threads", type=positive_int, metavar="T", **field_options(CalibrationConfig, "threads"),
                           help="threads per rank, as the runs to predict will use (default: as train's, Slurm's "
                                "SLURM_CPUS_PER_TASK, else the node's cores divided by the ranks on it)")
    calibrate.add_argument("--epochs", type=positive_int, **field_options(CalibrationConfig, "epochs"),
                           help="epochs trained per calibration graph; the first two are not timed (default: "
                                f"{default_of(CalibrationConfig, 'epochs')})")
    calibrate.add_argument("--graphs", type=_graphs, metavar="N:D[,N:D...]",
                           **field_options(CalibrationConfig, "graphs"),
                           help="the synthetic graphs timed: vertices and mean degree of each, at least three "
                                "(default: 12000:6,12000:30,36000:6,36000:30)")
    calibrate.add_argument("--no-network", dest="network", action="store_false",
                           **field_options(CalibrationConfig, "network"),
                           help="under a launcher, measure compute only (give the network to stats instead)")
    calibrate.set_defaults(field_name=field_flags(calibrate))
    return calibrate


def _graphs(text: str) -> tuple[tuple[int, float], ...]:
    """``--graphs``: ``N:D,N:D,...``, at least three, with at least two sizes and two degrees (the fit has three
    unknowns)."""
    try:
        graphs = tuple((int(n), float(d)) for n, d in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N:D[,N:D...] (vertices:mean degree), got {text!r}") from None
    if len(graphs) < 3 or len({n for n, _ in graphs}) < 2 or len({d for _, d in graphs}) < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least three graphs, of two sizes and two degrees")
    if any(n < 100 or not 0 < d <= 1000 for n, d in graphs):
        raise argparse.ArgumentTypeError(f"{text!r}: vertices from 100, mean degree in (0, 1000]")
    return graphs


def run(args: argparse.Namespace) -> int:
    from distgcn.comm.launch import detect
    from distgcn.errors import InputError
    from distgcn.io.safe_io import CALIBRATION, check_target

    if args.epochs < 3:
        raise InputError(f"--epochs {args.epochs}: give at least 3 (the first two are not timed)")
    model = ModelConfig(args.layers, args.hidden, args.dtype, args.optimizer, args.dropout, conv=args.conv,
                        heads=args.heads, output_heads=args.output_heads, root_weight=args.root_weight,
                        halo_window=args.halo_window)
    out = Path(args.out)
    launch = detect(os.environ)
    if launch.world_size == 1:
        check_target(out, CALIBRATION)
        return _finish(out, _measure(model, args, None))
    return _run_on_ranks(model, args, out)


def _measure(model: ModelConfig, args: argparse.Namespace, comm) -> dict:
    """The calibration; threads resolved as train resolves them (Slurm's cpus-per-task, else the node's cores
    shared among the ranks on it)."""
    from distgcn.performance.calibration import GRAPHS, calibrate
    from distgcn.runtime.threads import default_threads

    threads = args.threads
    if threads is None:
        from mpi4py import MPI

        threads = default_threads(comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size() if comm is not None else 1)
    return calibrate(model, args.features, args.classes, epochs=args.epochs, threads=threads,
                     network=args.network, comm=comm, graphs=args.graphs or GRAPHS)


def _finish(out: Path, record: dict) -> int:
    from distgcn.performance.calibration_file import write_calibration

    write_calibration(out, record)
    print(describe(record, out))
    return 0


def _run_on_ranks(model: ModelConfig, args: argparse.Namespace, out: Path) -> int:
    """Every rank measures at once; rank 0 writes the file; all exit with one status."""
    from distgcn.comm.collective import CollectiveInputError, abort_on_unexpected, agree
    from distgcn.comm.mpi_group import MPIGroup
    from distgcn.io.safe_io import CALIBRATION, check_target
    from distgcn.runtime import signals

    group = MPIGroup()
    signals.attach_job(group.rank, group.size, group.abort)
    try:
        agree(group, lambda: check_target(out, CALIBRATION) if group.rank == 0 else None)
        record = agree(group, lambda: _measure(model, args, group.comm))
        if group.rank == 0:
            return _finish(out, record)
        return 0
    except CollectiveInputError as exc:
        return exc.report()
    except Exception as exc:  # noqa: BLE001 - any other failure must take every rank down
        abort_on_unexpected(group, exc)


def describe(record: dict, path: Path) -> str:
    """What ``calibrate`` prints: the model, the fitted rates, the network and the fit's worst error."""
    from distgcn.cli.stats_tables import model_words
    from distgcn.performance.epoch_time import ComputeRates

    rates = ComputeRates(**record["compute"])
    worst = max(abs(rates.epoch_s(s["nnz"], s["rows"]) - s["epoch_s"]) / s["epoch_s"] for s in record["samples"])
    threads = f", {record['threads']} thread(s) each" if record["threads"] else ""
    lines = [f"calibrated {model_words(record['model'])} with {record['features']} features and "
             f"{record['classes']} classes on {record['host']} ({record['ranks']} rank(s) at once{threads})",
             f"  compute per epoch: {rates.per_nnz_s * 1e9:.2f} ns per nonzero + {rates.per_row_s * 1e9:.1f} ns per "
             f"row + {rates.fixed_s * 1e3:.2f} ms (fit within {worst:.0%} on {len(record['samples'])} measurements)"]
    if record.get("distribution"):
        d = record["distribution"]
        lines.append(f"  distribution: {rates.per_halo_value_s * 1e9:.2f} ns per halo value sent or received (the "
                     f"slowest rank computed {d['slowest_compute_s'] * 1e3:.1f} ms, the rates give "
                     f"{d['predicted_without_s'] * 1e3:.1f} ms)")
    network = record["network"]
    if network is None:
        lines.append("  network: not measured (one rank, or --no-network): give --bandwidth and --latency to stats")
    else:
        a, b = network["between_ranks"]
        lines.append(f"  network between ranks {a} and {b}: latency {network['latency_s'] * 1e6:.1f} us, bandwidth "
                     f"{network['bandwidth_bytes_s'] / 1e6:.1f} MB/s ({network['bandwidth_bytes_s'] * 8 / 1e6:.0f} "
                     f"Mbit/s)")
    lines.append(f"written {path}")
    return "\n".join(lines)
