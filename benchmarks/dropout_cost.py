"""What does dropout cost per layer? Keyed (partition-independent) dropout against torch's, forward + backward.

Times ``y = dropout(x); y.sum().backward()`` on an [n, w] float32 tensor, the
variants interleaved within each repetition (the machine may be shared), and
the same without dropout as the floor.

    python benchmarks/dropout_cost.py --rows 82168 --width 64 --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from distgcn.nn.dropout import keyed_dropout, keyed_keep_mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=82168)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(args.rows, args.width, requires_grad=True)
    ids = np.arange(args.rows)

    def step(fn) -> None:
        x.grad = None
        fn(x).sum().backward()

    variants = {
        "none": lambda: step(lambda t: t),
        "keyed_mask_only": lambda: keyed_keep_mask(ids, args.width, args.p, 12345),
        "keyed": lambda: step(lambda t: keyed_dropout(t, ids, args.p, 12345)),
        "torch": lambda: step(lambda t: F.dropout(t, args.p, True)),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    print(json.dumps({"rows": args.rows, "width": args.width, "threads": args.threads,
                      "median_s": {name: statistics.median(s) for name, s in samples.items()}}))


if __name__ == "__main__":
    main()
