"""How long do the output layer's one-pass kernels take? dropout(x) @ w and its gradients, as ``train`` runs them.

Times ``dropout_kernel.dropped_product`` and ``dropped_product_backward`` (with
and without the input's gradient, with and without the folded ReLU) on
[rows, width] float32 inputs and a [width, out] weight (milliseconds: the
median over ``--rounds`` of each round's median of ``--repeats`` calls). To
compare two versions of the kernels, run it from each checkout in turn
(``PYTHONPATH=CHECKOUT python CHECKOUT/benchmarks/dropped_product.py ...``).

    python benchmarks/dropped_product.py --rows 82168 --width 64 --out 8 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os

from timing import median_of_round_medians

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

import numpy as np  # noqa: E402
import torch  # noqa: E402

from distgcn.kernels import dropout as dropout_kernel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=82168, help="Slashdot's vertices by default")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--out", type=int, default=8)
    parser.add_argument("--p", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = torch.empty((args.rows, args.width)).numpy()  # torch's memory, huge pages, as a train process's
    x[:] = rng.standard_normal(x.shape)
    weight = rng.standard_normal((args.width, args.out)).astype(np.float32)
    grad = rng.standard_normal((args.rows, args.out)).astype(np.float32)
    grad_x = torch.empty_like(torch.from_numpy(x)).numpy()
    out = np.empty((args.rows, args.out), dtype=np.float32)
    ids = np.arange(args.rows, dtype=np.int64)
    calls = {
        "forward": lambda: dropout_kernel.dropped_product(x, ids, args.p, 7, weight, out),
        "backward": lambda: dropout_kernel.dropped_product_backward(x, grad, ids, args.p, 7, weight, True, grad_x),
        "backward, ReLU folded": lambda: dropout_kernel.dropped_product_backward(x, grad, ids, args.p, 7, weight,
                                                                                 True, grad_x, relu=True),
        "backward, weight only": lambda: dropout_kernel.dropped_product_backward(x, grad, ids, args.p, 7, weight,
                                                                                 False),
    }
    for call in calls.values():  # compiled (or loaded from numba's cache) and faulted in before any timing
        call()
    result = {"rows": args.rows, "width": args.width, "out": args.out, "threads": args.threads,
              "load": os.getloadavg()[0]}
    for name, call in calls.items():
        result[name] = round(median_of_round_medians(call, args.repeats, args.rounds), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
