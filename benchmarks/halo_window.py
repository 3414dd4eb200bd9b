"""What ``train --halo-window`` saves and costs: every rank's peak memory against its prediction, and epoch time.

Memory: one random partition of P ranks, trained a few epochs with the whole halo and with each window; each
rank's peak RSS (GNU time's maximum resident size) beside ``distgcn stats DIR --halo-window K``'s prediction for
that rank plus the runtime baseline (the libraries and interpreter: the peak of the same command on a graph of
a few thousand vertices less that graph's own prediction, the median over its ranks). Time: another partition
(``--time-parts``), the whole halo and each window in alternation, the median steady epoch of each run.

    python benchmarks/halo_window.py --out /tmp/window --graph synthetic:rmat,scale=20,edge_factor=12 \\
        --features 64 --classes 8 --parts 8 --layers 3 --hidden 256 --windows 4 --time-parts 4 --time-windows 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

MIB = 2**20
TINY_GRAPH = "synthetic:sbm,n=4000,classes=4,features=16,avg_degree=8"
"""The baseline's graph: its data is a few MiB, so its peak is what every rank pays before any data."""


def distgcn(*args: str, ranks: int = 1, rss_dir: Path | None = None) -> str:
    """``distgcn ARGS`` (under mpiexec for ranks > 1), each rank's peak RSS written to RSS_DIR/<rank> when asked."""
    command = [sys.executable, "-m", "distgcn", *args]
    if rss_dir is not None:
        rss_dir.mkdir(parents=True, exist_ok=True)
        command = ["sh", "-c", f'exec /usr/bin/time -f %M -o "{rss_dir}/${{PMI_RANK:-0}}" "$@"', "rank", *command]
    if ranks > 1:
        command = [shutil.which("mpiexec") or "mpiexec", "-n", str(ranks), *command]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr}")
    return done.stdout


def partition(out: Path, graph: str, parts: int, features: int | None, classes: int | None) -> Path:
    target = out / f"part{parts}-{abs(hash((graph, features, classes))) % 10**6}"
    if not (target / "meta.json").exists():
        extra = [] if features is None else ["--features", str(features), "--classes", str(classes)]
        distgcn("partition", graph, *extra, "--parts", str(parts), "--model", "random", "--out",
                str(target), "--force", "--quiet")
    return target


def predicted_mib(directory: Path, model: list[str], window: str) -> list[float]:
    """``stats``' CPU prediction of every rank, MiB."""
    stats = json.loads(distgcn("stats", str(directory), *model, "--halo-window", window, "--json"))
    return [rank["cpu_bytes"] / MIB for rank in stats["memory"]["ranks"]]


def measured_mib(directory: Path, ranks: int, model: list[str], window: str, epochs: int, out: Path,
                 metrics: Path | None = None) -> list[float]:
    """Each rank's peak RSS (MiB) training ``epochs`` epochs with ``window``."""
    rss = out / f"rss-{directory.name}-{window}"
    shutil.rmtree(rss, ignore_errors=True)
    distgcn("train", str(directory), *model, "--epochs", str(epochs), "--threads", "1", "--halo-window", window,
            "--quiet", *(["--metrics", str(metrics)] if metrics else []), ranks=ranks, rss_dir=rss)
    return [int((rss / str(rank)).read_text().split()[-1]) * 1024 / MIB for rank in range(ranks)]


def steady_epoch_s(metrics: Path) -> float:
    epochs = [json.loads(line)["epoch_s"] for line in metrics.read_text().splitlines()]
    return statistics.median(epochs[1:] if len(epochs) > 1 else epochs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the partitions and the results")
    parser.add_argument("--graph", default="synthetic:rmat,scale=20,edge_factor=12")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--parts", type=int, default=8, help="ranks of the memory runs (0: no memory runs)")
    parser.add_argument("--layers", default="3")
    parser.add_argument("--hidden", default="256")
    parser.add_argument("--windows", default="4", help="comma-separated windows measured beside the whole halo")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--time-parts", type=int, default=0, help="ranks of the timing runs (0: no timing)")
    parser.add_argument("--time-windows", default="2")
    parser.add_argument("--time-epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model = ["--layers", args.layers, "--hidden", args.hidden]
    result: dict = {"graph": args.graph, "features": args.features, "parts": args.parts, "model": model,
                    "load_average_start": os.getloadavg()}

    if args.parts:
        result["baseline_mib"], result["memory"] = memory_runs(args, model)
    if args.time_parts:
        result["time"] = time_runs(args, model)
    result["load_average_end"] = os.getloadavg()
    text = json.dumps(result, indent=1)
    (args.out / "halo_window.json").write_text(text + "\n")
    print(text)


def memory_runs(args: argparse.Namespace, model: list[str]) -> tuple[float, dict]:
    """The runtime baseline, and per window every rank's predicted and measured peak."""
    tiny = partition(args.out, TINY_GRAPH, args.parts, None, None)
    tiny_measured = measured_mib(tiny, args.parts, model, "all", 1, args.out)
    tiny_predicted = predicted_mib(tiny, model, "all")
    baseline = statistics.median(m - p for m, p in zip(tiny_measured, tiny_predicted))
    big = partition(args.out, args.graph, args.parts, args.features, args.classes)
    memory = {}
    for window in ["all", *args.windows.split(",")]:
        predicted = predicted_mib(big, model, window)
        measured = measured_mib(big, args.parts, model, window, args.epochs, args.out)
        memory[window] = [
            {"rank": rank, "predicted_mib": round(p, 1), "with_baseline_mib": round(p + baseline, 1),
             "measured_mib": round(m, 1), "measured_over_predicted": round(m / (p + baseline), 3)}
            for rank, (p, m) in enumerate(zip(predicted, measured))]
    return round(baseline, 1), memory


def time_runs(args: argparse.Namespace, model: list[str]) -> dict:
    """The whole halo and each window in alternation, ``rounds`` times: each run's median steady epoch."""
    timed = partition(args.out, args.graph, args.time_parts, args.features, args.classes)
    windows = ["all", *args.time_windows.split(",")]
    epochs: dict[str, list[float]] = {w: [] for w in windows}
    for _ in range(args.rounds):
        for window in windows:
            metrics = args.out / f"time-{window}.jsonl"
            metrics.unlink(missing_ok=True)
            distgcn("train", str(timed), *model, "--epochs", str(args.time_epochs), "--threads", "1",
                    "--halo-window", window, "--quiet", "--metrics", str(metrics), ranks=args.time_parts)
            epochs[window].append(steady_epoch_s(metrics))
    whole = statistics.median(epochs["all"])
    return {"parts": args.time_parts, "epoch_s": epochs,
            "median_over_whole": {w: round(statistics.median(epochs[w]) / whole, 3) for w in windows}}


if __name__ == "__main__":
    main()
