"""One entry point for the performance matrix: distgcn and its peers, same data, one invocation.

For every graph it runs ``distgcn train`` under ``mpiexec -n P`` for each P,
partition model and variant (extra ``train`` flags), and the single-process
peers of ``benchmarks/peers.py`` (plain PyTorch CSR, PyG ``GCNConv``). Every
run is its own process wrapped in ``/usr/bin/time`` for its peak RSS (per
rank). Repetitions are interleaved (rep 1 of every run, then rep 2, ...), so
a change in machine load hits all runs alike; medians pool the epochs of all
repetitions after each run's warm-up epochs.

    python benchmarks/bench.py --graphs slashdot --ranks 1,2 --models random,hypergraph \\
        --hidden 64 --peers csr,pyg --variant exact= --variant cached="--first-layer cached" --name slashdot --results-dir RESULTS

writes RESULTS/bench-NAME.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from distgcn.io.metrics_log import read_metrics

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("DISTGCN_DATASETS", ROOT.parent / "shared" / "datasets"))
GRAPHS: dict[str, list[str]] = {
    "slashdot": [str(DATASETS / "soc-Slashdot0902" / "soc-Slashdot0902.txt.gz"), "--symmetrize",
                 "--features", "64", "--classes", "8"],
    "facebook": [str(DATASETS / "musae_facebook")],
    "cora": [str(DATASETS / "cora_planetoid")],
    "synthetic": ["synthetic:rmat,scale=20,edge_factor=10", "--features", "64", "--classes", "8"],
    "synthetic-small": ["synthetic:rmat,scale=16,edge_factor=10", "--features", "64", "--classes", "8"],
}
"""Graph name -> the spec and loading flags that ``train --graph`` and peers.py both take."""
PEAK_RSS = '/usr/bin/time -f %M -o "$0.${PMI_RANK:-0}" "$@"'
"""Shell wrapper: run the command, write its peak RSS (KiB) to PREFIX.RANK."""


def peak_rss_mib(prefix: Path) -> list[float]:
    """Peak RSS of each rank in MiB, in rank order, from the files the wrapper wrote."""
    files = sorted(prefix.parent.glob(prefix.name + ".*"), key=lambda p: int(p.suffix[1:]))
    return [int(f.read_text().split()[-1]) / 1024 for f in files]


def run(cmd: list[str], timeout: float) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def train_flags(args) -> list[str]:
    """The model and run flags every distgcn job of one invocation shares."""
    return ["--layers", str(args.layers), "--hidden", args.hidden, "--dropout", str(args.dropout),
            "--epochs", str(args.warmup + args.epochs), "--threads", str(args.threads), "--seed", str(args.seed),
            "--quiet"]


def distgcn_job(graph: str, ranks: int, model: str, variant: str, extra: list[str], args) -> dict:
    return {"kind": "distgcn", "graph": graph, "ranks": ranks, "model": model, "variant": variant,
            "cmd": ["distgcn", "train", "--graph", *GRAPHS[graph], "--partition", model, *train_flags(args),
                    *extra]}


def shards_job(graph: str, label: str, directory: str, variant: str, extra: list[str], args) -> dict:
    """A run on a partition written beforehand by ``distgcn partition`` (P = its number of parts)."""
    meta = json.loads((Path(directory) / "meta.json").read_text())
    return {"kind": "distgcn", "graph": graph, "ranks": int(meta["parts"]), "model": label, "variant": variant,
            "cmd": ["distgcn", "train", directory, *train_flags(args), *extra]}


def peer_job(graph: str, peer: str, args) -> dict:
    return {"kind": peer, "graph": graph, "ranks": 1, "model": "-", "variant": "-",
            "cmd": [sys.executable, str(ROOT / "benchmarks" / "peers.py"), "--peer", peer, "--graph",
                    *GRAPHS[graph], "--layers", str(args.layers), "--hidden", args.hidden,
                    "--dropout", str(args.dropout), "--epochs", str(args.epochs), "--warmup", str(args.warmup),
                    "--threads", str(args.threads), "--seed", str(args.seed)]}


def execute(job: dict, workdir: Path, rep: int, args) -> dict:
    """One run of one job: its timed epochs and per-rank peak RSS."""
    tag = f"{len(list(workdir.iterdir()))}"
    prefix = workdir / f"rss{tag}"
    out = workdir / f"out{tag}.json"
    wrap = ["sh", "-c", PEAK_RSS, str(prefix)]
    if job["kind"] == "distgcn":
        cmd = ["mpiexec", "-n", str(job["ranks"]), *wrap, *job["cmd"], "--metrics", str(out)]
        run(cmd, args.timeout)
        run_info, records = read_metrics(out)
        records = records[args.warmup:]
        result = {"widths": run_info["widths"], "itemsize": 8 if run_info["dtype"] == "float64" else 4,
                  "broadcast": run_info.get("comm") == "broadcast","epoch_times": [r["epoch_s"] for r in records],
                  **{key: [r[key] for r in records] for key in ("compute_s", "comm_wait_s", "allreduce_s")},
                  **{key: records[-1][key] for key in ("halo_rows", "halo_bytes", "messages", "spmm_exchanges",
                                                       "loss", "test_acc")}}
    else:
        run([*wrap, *job["cmd"], "--out", str(out)], args.timeout)
        result = json.loads(out.read_text())
    result["peak_rss_mib"] = peak_rss_mib(prefix)
    result["rep"] = rep
    return result


def paper_bytes(result: dict) -> int:
    """What the paper's algorithm would move per epoch for the same halo rows.

    It sends rows of H forward and rows of G backward at every layer at the
    layer's full input width; an epoch here is a training step (forward and
    backward) plus an evaluation forward, so each layer's input width counts
    three times.
    """
    rows_per_spmm = result["halo_rows"] // result["spmm_exchanges"]
    return rows_per_spmm * result["itemsize"] * 3 * sum(result["widths"][:-1])


def summarize(job: dict, runs: list[dict]) -> dict:
    """Pool the timed epochs of every repetition; medians over them."""
    row = {key: job[key] for key in ("kind", "graph", "ranks", "model", "variant")}
    row["epochs_timed"] = sum(len(r["epoch_times"]) for r in runs)
    row["epoch_s"] = statistics.median(t for r in runs for t in r["epoch_times"])
    row["rep_medians_s"] = [statistics.median(r["epoch_times"]) for r in runs]
    for key in ("compute_s", "comm_wait_s", "allreduce_s"):
        if key in runs[0]:
            row[key] = statistics.median(t for r in runs for t in r[key])
    for key in ("halo_rows", "halo_bytes", "messages", "spmm_exchanges", "test_acc", "final_loss", "loss"):
        if key in runs[-1]:
            row[key] = runs[-1][key]
    if runs[-1].get("spmm_exchanges") and not runs[-1]["broadcast"]:
        row["paper_bytes"] = paper_bytes(runs[-1])
    row["peak_rss_mib"] = [max(r["peak_rss_mib"][i] for r in runs) for i in range(len(runs[0]["peak_rss_mib"]))]
    row["cmd"] = shlex.join(job["cmd"])
    return row


def markdown(rows: list[dict], header: dict) -> str:
    """One table; ratios are to the plain CSR peer on the same graph measured in this invocation."""
    csr = {r["graph"]: r["epoch_s"] for r in rows if r["kind"] == "csr"}
    lines = [f"# bench {header['name']}", "", f"`{header['command']}`", "",
             f"{header['when']}, host {header['host']}, {header['cpus']} CPUs, load average at start "
             f"{header['load_start']}, at end {header['load_end']}; threads per rank {header['threads']}; "
             f"{header['epochs']} timed epochs after {header['warmup']} warm-up, x{header['repeats']} interleaved "
             "repetitions. An epoch is one training step plus one evaluation forward pass.", "",
             "| graph | run | P | partition | variant | epoch s (median) | per-rep medians | x csr | compute s | "
             "halo wait s | allreduce s | halo rows | halo MB | x paper bytes | messages | exchanges | "
             "peak RSS MiB per rank |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def fmt(value, spec: str = ".4f") -> str:
        return "-" if value is None else format(value, spec)

    for r in rows:
        ratio = r["epoch_s"] / csr[r["graph"]] if r["graph"] in csr else None
        lines.append(
            f"| {r['graph']} | {r['kind']} | {r['ranks']} | {r['model']} | {r['variant']} | {r['epoch_s']:.4f} | "
            f"{', '.join(f'{m:.3f}' for m in r['rep_medians_s'])} | {fmt(ratio, '.2f')} | "
            f"{fmt(r.get('compute_s'))} | {fmt(r.get('comm_wait_s'))} | {fmt(r.get('allreduce_s'))} | "
            f"{r.get('halo_rows', '-')} | {fmt(r['halo_bytes'] / 1e6 if 'halo_bytes' in r else None, '.2f')} | "
            f"{fmt(r['halo_bytes'] / r['paper_bytes'] if 'paper_bytes' in r else None, '.2f')} | "
            f"{r.get('messages', '-')} | {r.get('spmm_exchanges', '-')} | "
            f"{', '.join(f'{m:.0f}' for m in r['peak_rss_mib'])} |")
    return "\n".join(lines) + "\n"


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, flags = text.partition("=")
    return name, shlex.split(flags)


def parse_labelled_dir(text: str) -> tuple[str, str]:
    label, sep, directory = text.partition("=")
    if not sep or not label or not (Path(directory) / "meta.json").is_file():
        raise argparse.ArgumentTypeError(f"expected LABEL=DIR with DIR a partition directory, got {text!r}")
    return label, directory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="slashdot", help=f"comma list of {', '.join(GRAPHS)}")
    parser.add_argument("--ranks", default="1,2", help="comma list of P for runs that partition in train "
                                                      "(empty: only --partition-dir runs)")
    parser.add_argument("--models", default="random", help="comma list of partition models")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", default="64", help="hidden widths, as train --hidden")
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per repetition (>= 5)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="threads per rank (and per peer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peers", default="csr", help="comma list of csr, pyg, pyg-sparse; empty for none")
    parser.add_argument("--variant", action="append", type=parse_variant, metavar="NAME=FLAGS",
                        help="extra train flags, one distgcn run per variant (default: one plain run)")
    parser.add_argument("--partition-dir", action="append", type=parse_labelled_dir, default=[], metavar="LABEL=DIR",
                        help="also run on a partition directory made by 'distgcn partition' (offline, e.g. a "
                             "hypergraph partition too slow to recompute per run) of the single graph given; "
                             "P is its number of parts, LABEL names it in the partition column")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument("--name", required=True, help="results go to RESULTS/bench-NAME.{json,md}")
    parser.add_argument("--results-dir", type=Path, required=True, metavar="RESULTS",
                        help="folder for the results (made if missing)")
    args = parser.parse_args(argv)
    variants = args.variant or [("default", [])]
    if args.partition_dir and "," in args.graphs:
        parser.error("--partition-dir needs a single graph in --graphs (the one it was partitioned from)")
    jobs = []
    for graph in args.graphs.split(","):
        jobs += [peer_job(graph, peer, args) for peer in filter(None, args.peers.split(","))]
        jobs += [distgcn_job(graph, int(p), model, name, flags, args)
                 for p in filter(None, args.ranks.split(","))
                 for model in args.models.split(",")[:1 if p == "1" else None]
                 for name, flags in variants]  # at P = 1 every partition model is the same run
        jobs += [shards_job(graph, label, directory, name, flags, args)
                 for label, directory in args.partition_dir for name, flags in variants]
    header = {"name": args.name, "command": shlex.join(["python", "benchmarks/bench.py", *(argv or sys.argv[1:])]),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": platform.node(),
              "cpus": os.cpu_count(), "load_start": os.getloadavg(), "threads": args.threads,
              "epochs": args.epochs, "warmup": args.warmup, "repeats": args.repeats}
    runs: list[list[dict]] = [[] for _ in jobs]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for job, collected in zip(jobs, runs):
                print(f"rep {rep + 1}/{args.repeats}: {job['graph']} {job['kind']} P={job['ranks']} "
                      f"{job['model']} {job['variant']}", file=sys.stderr, flush=True)
                collected.append(execute(job, Path(tmp), rep, args))
    header["load_end"] = os.getloadavg()
    rows = [summarize(job, collected) for job, collected in zip(jobs, runs)]
    results = args.results_dir
    results.mkdir(parents=True, exist_ok=True)
    (results / f"bench-{args.name}.json").write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    (results / f"bench-{args.name}.md").write_text(markdown(rows, header))
    print(markdown(rows, header))


if __name__ == "__main__":
    main()
