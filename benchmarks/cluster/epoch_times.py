"""Measured and predicted epoch times on an emulated cluster: partition models × ranks × link rates.

For each graph, P and partition model, the graph is partitioned once (offline);
then, for each link rate, on an emulated cluster of P nodes (one rank each,
benchmarks/cluster/emulated_cluster.py):

1. ``distgcn calibrate`` measures the nodes' compute rates (all P ranks at once,
   as they will train) and the link between two nodes;
2. ``distgcn train DIR`` runs full-batch epochs, and the median epoch time and
   its split (compute, halo wait, allreduce) are read from its metrics;
3. ``distgcn stats DIR --predict-time`` predicts the epoch from the calibration.

Writes RESULTS/epoch-times-NAME.{json,md}: one row per point with the measured
figures, the prediction, the bytes moved, and the hypergraph model's time
and byte ratios against the graph and random models. Run as root::

    python benchmarks/cluster/epoch_times.py --graph ../shared/datasets/soc-Slashdot0902 --symmetrize \\
        --features 64 --classes 8 --parts 2 4 --rates 100mbit 1gbit 10gbit --results-dir RESULTS --name slashdot
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulated_cluster import EmulatedCluster, missing_requirements  # noqa: E402

MODELS = ("random", "graph", "hypergraph")


def distgcn() -> list[str]:
    return [sys.executable, "-m", "distgcn"]


def run(argv: list[str], timeout: float = 1800) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def measured(metrics: Path, skip: int) -> dict:
    """Medians over the epochs after the first ``skip``: the epoch, the slowest rank's split of it (which adds up
    to it, unlike the per-part maxima over ranks) and the bytes moved."""
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    records = [r for r in records if "epoch_s" in r][skip:]
    out = {"epoch_s": statistics.median(r["epoch_s"] for r in records)}
    out.update({key: statistics.median(r[f"slowest_{key}"] for r in records)
                for key in ("compute_s", "comm_wait_s", "allreduce_s")})
    out.update(halo_bytes=records[-1]["halo_bytes"], messages=records[-1]["messages"], epochs_timed=len(records))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--symmetrize", action="store_true")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--hidden", default="16")
    parser.add_argument("--parts", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rates", nargs="+", default=["100mbit", "1gbit", "10gbit"])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--skip", type=int, default=2, help="epochs not timed (default: 2)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--halo-window", default=None, help="train --halo-window (default: train's)")
    parser.add_argument("--results-dir", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--work-dir", type=Path, default=None, help="partitions go here (default: a temporary one)")
    parser.add_argument("--stochastic-args", default="",
                        help="the stochastic model's sampler options for `distgcn partition` (quoted), e.g. "
                             "'--sampler node --batch-size 8217'")
    parser.add_argument("--train-args", default="",
                        help="more options of every `distgcn train` (quoted), e.g. '--sampler node --batch-size 8217'; "
                             "with --sampler the runs are minibatch training, which --predict-time does not model: "
                             "the prediction is left out")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the calibrations and metrics already in --work-dir (predict again only)")
    args = parser.parse_args()
    reason = missing_requirements()
    if reason:
        print(f"epoch_times: {reason}", file=sys.stderr)
        return 2
    mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if mpiexec is None:
        print("epoch_times: mpiexec not found (pip install 'distgcn[mpich]')", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="epoch-times-"))
    work.mkdir(parents=True, exist_ok=True)
    graph_flags = [*(["--symmetrize"] if args.symmetrize else []), "--features", str(args.features),
                   "--classes", str(args.classes)]
    rows: list[dict] = []
    started = time.time()
    minibatch = "--sampler" in shlex.split(args.train_args)
    for parts in args.parts:
        directories = {}
        for model in args.models:
            out = work / f"{args.name}-p{parts}-{model}"
            if not (out / "meta.json").exists():
                run([*distgcn(), "partition", args.graph, "--parts", str(parts), "--model", model, "--out", str(out),
                     "--seed", "1", "--quiet", *graph_flags,
                     *(shlex.split(args.stochastic_args) if model == "stochastic" else [])])
            directories[model] = out
        with EmulatedCluster(nodes=parts, name="bench") as cluster:
            for rate in args.rates:
                cluster.set_rate(rate)
                calibration = work / f"{args.name}-p{parts}-{rate}.calibration.json"
                if not minibatch and not (args.reuse and calibration.exists()):
                    print(run(cluster.mpiexec_command(mpiexec, parts, [
                        *distgcn(), "calibrate", "--out", str(calibration), "--features", str(args.features),
                        "--classes", str(args.classes), "--hidden", args.hidden, "--threads", str(args.threads)])),
                          flush=True)
                for model, directory in directories.items():
                    metrics = work / f"{args.name}-p{parts}-{model}-{rate}.jsonl"
                    if not (args.reuse and metrics.exists()):
                        metrics.unlink(missing_ok=True)
                        window = ["--halo-window", args.halo_window] if args.halo_window else []
                        run(cluster.mpiexec_command(mpiexec, parts, [
                            *distgcn(), "train", str(directory), "--epochs", str(args.epochs), "--hidden",
                            args.hidden, "--threads", str(args.threads), "--metrics", str(metrics), *window,
                            *shlex.split(args.train_args)]))
                    if minibatch:
                        row = {"graph": args.name, "parts": parts, "rate": rate, "model": model,
                               "measured": measured(metrics, args.skip), "predicted": None, "network": None}
                        rows.append(row)
                        m = row["measured"]
                        print(f"P={parts} {rate:>8} {model:>10}: measured {m['epoch_s'] * 1e3:8.1f} ms (minibatch; "
                              f"{m['halo_bytes'] / 1e6:.2f} MB)", flush=True)
                        continue
                    prediction = json.loads(run([*distgcn(), "stats", str(directory), "--predict-time",
                                                 str(calibration), "--json"]))
                    row = {"graph": args.name, "parts": parts, "rate": rate, "model": model,
                           "measured": measured(metrics, args.skip),
                           "predicted": {key: prediction[key] for key in
                                         ("compute_s", "link_s", "distribution_s", "halo_s", "halo_exposed_s",
                                          "allreduce_s", "serial_s", "overlapped_s", "link_rows_per_exchange")},
                           "network": prediction["network"]}
                    rows.append(row)
                    m, p = row["measured"], row["predicted"]
                    print(f"P={parts} {rate:>8} {model:>10}: measured {m['epoch_s'] * 1e3:8.1f} ms "
                          f"(compute {m['compute_s'] * 1e3:.1f}, halo wait {m['comm_wait_s'] * 1e3:.1f}, allreduce "
                          f"{m['allreduce_s'] * 1e3:.1f}); predicted {p['serial_s'] * 1e3:8.1f} serial, "
                          f"{p['overlapped_s'] * 1e3:8.1f} overlapped; {m['halo_bytes'] / 1e6:.2f} MB", flush=True)
    report = {"command": " ".join(sys.argv), "host": os.uname().nodename, "load": os.getloadavg(),
              "seconds": time.time() - started, "rows": rows}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"epoch-times-{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.results_dir / f"epoch-times-{args.name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    lines = [f"# Epoch times on an emulated cluster: {report['rows'][0]['graph'] if report['rows'] else ''}", "",
             f"`{report['command']}`", "",
             "| P | link | model | measured ms | compute | halo wait | allreduce | MB/epoch | predicted ms "
             "(serial / overlapped) | error | hypergraph: time / bytes vs this |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_point = {(r["parts"], r["rate"], r["model"]): r for r in report["rows"]}
    for r in report["rows"]:
        m, p = r["measured"], r["predicted"]
        hyper = by_point.get((r["parts"], r["rate"], "hypergraph"))
        ratio = "-"
        predicted = "- (minibatch)" if p is None else f"{p['serial_s'] * 1e3:.1f} / {p['overlapped_s'] * 1e3:.1f}"
        error = "-" if p is None else f"{p['serial_s'] / m['epoch_s'] - 1:+.0%}"
        if hyper is not None and r["model"] != "hypergraph":
            ratio = (f"{hyper['measured']['epoch_s'] / m['epoch_s']:.2f} / "
                     f"{hyper['measured']['halo_bytes'] / max(m['halo_bytes'], 1):.2f}")
        lines.append(f"| {r['parts']} | {r['rate']} | {r['model']} | {m['epoch_s'] * 1e3:.1f} | "
                     f"{m['compute_s'] * 1e3:.1f} | {m['comm_wait_s'] * 1e3:.1f} | {m['allreduce_s'] * 1e3:.1f} | "
                     f"{m['halo_bytes'] / 1e6:.2f} | {predicted} | {error} | {ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
