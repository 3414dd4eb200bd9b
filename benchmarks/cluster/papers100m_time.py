"""Predicted seconds per epoch of ogbn-papers100M on SAR's published cluster, beside SAR's measured ones.

SAR (Mostafa, MLSys 2022) trained a 3-layer GraphSAGE, hidden 256, full batch, on 32, 64 and 128 machines of
2 x 36 cores joined by HDR InfiniBand (200 Gb/s), at 7.4, 5.1 and 3.8 s per epoch. distgcn's prediction
(``distgcn stats --predict SPEC --predict-time``) needs those machines' compute rates, which were not measured:
this script takes a calibration of the same model made here (``distgcn calibrate``) and divides its rates by a
node speedup S (how much faster one of SAR's machines runs the kernels than the calibrated node), for several S,
and for the halo of a random partition (an upper bound) and of a better one (a fraction of it).

    mpiexec -n 2 distgcn calibrate --out sage256.json --conv sage --layers 3 --hidden 256 --features 128 \\
        --classes 172 --threads 1 --graphs 6000:6,6000:30,18000:6,18000:30
    python benchmarks/cluster/papers100m_time.py --calibration sage256.json --results-dir RESULTS
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from distgcn.memory.from_sizes import GraphSpec, random_halo_rows
from distgcn.performance.prediction import predict_time_from_sizes

N, NNZ, FEATURES, CLASSES = 111_059_956, 3_311_000_000, 128, 172
"""ogbn-papers100M: vertices, Â's nonzeros (3.2e9 symmetrized citations and the self loops), features, classes."""
SAR_SECONDS = {32: 7.4, 64: 5.1, 128: 3.8}
HDR_BYTES_S = 200e9 / 8
LATENCY_S = 2e-6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration", required=True, help="distgcn calibrate's file for the model (SAGE, 3, 256)")
    parser.add_argument("--speedups", type=float, nargs="+", default=[10.0, 20.0, 36.0])
    parser.add_argument("--halo-fractions", type=float, nargs="+", default=[1.0, 0.5, 0.1, 0.05],
                        help="halo of the partition as a fraction of a random partition's bound (default: 1 0.5 "
                             "0.1 0.05)")
    parser.add_argument("--results-dir", type=Path, required=True)
    args = parser.parse_args()
    calibration = json.loads(Path(args.calibration).read_text())
    rows = []
    for speedup in args.speedups:
        scaled = dict(calibration)
        scaled["compute"] = {key: value / speedup for key, value in calibration["compute"].items()}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(scaled, fh)
        for parts, sar in SAR_SECONDS.items():
            bound = round(random_halo_rows(N, NNZ, parts))
            for fraction in args.halo_fractions:
                spec = GraphSpec(n=N, nnz=NNZ, features=FEATURES, parts=parts, classes=CLASSES,
                                 halo=max(1, round(bound * fraction)))
                p = predict_time_from_sizes(spec, fh.name, {"latency_s": LATENCY_S, "bandwidth_bytes_s": HDR_BYTES_S},
                                            1)
                rows.append({"speedup": speedup, "parts": parts, "halo_fraction": fraction, "halo_rows": spec.halo,
                             "rows": -(-N // parts), "compute_s": p["compute_s"], "halo_s": p["halo_s"],
                             "allreduce_s": p["allreduce_s"], "epoch_s": p["serial_s"], "sar_s": sar})
        Path(fh.name).unlink()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    record = {"command": " ".join(sys.argv), "calibration": calibration, "rows": rows}
    (args.results_dir / "papers100m-time.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["| node speedup | P | halo (× random's bound) | halo rows per rank | compute s | halo s | allreduce s | "
             "epoch s | SAR s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['speedup']:g} | {r['parts']} | {r['halo_fraction']:g} | {r['halo_rows']:,} | "
                     f"{r['compute_s']:.2f} | {r['halo_s']:.2f} | {r['allreduce_s']:.3f} | **{r['epoch_s']:.2f}** | "
                     f"{r['sar_s']} |")
    text = f"# papers100M on SAR's cluster, predicted\n\n`{record['command']}`\n\n" + "\n".join(lines) + "\n"
    (args.results_dir / "papers100m-time.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
