"""What each trick of the CPU kernels is worth on this host: every switch of distgcn/kernels/tricks.py against the
default, alternated in one process.

    python benchmarks/kernel_ablation.py --out DIR \
        [--graph ../shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz --symmetrize] \
        [--widths 16,64] [--classes 8] [--threads 1,2] [--repeats 7] [--rounds 8]

For each trick and each case it times the default and the trick switched off, call by call in turns, in rounds,
and prints a table: the median over rounds of each round's fastest call (ms), off / default (> 1: the trick saves
time), and the range of the per-round ratios (how far the host's noise moves it). The cases are what a training
epoch on the graph runs: the written product Â·H of the RCM-ordered Â at each width (a rank's owned block), the keyed
dropout of H, dropout(H)·W with W [width, classes] (the output layer), that product with the hidden layer's ReLU
folded in, and the loss with its gradient and the argmax over [rows, classes] logits (half the rows training rows).
A trick that does not pay by a clear margin (CLEAR_MARGIN) on the hosts that run distgcn has no place in the kernels.

Writes ``ablation.jsonl`` (one row per case) and ``ablation.md`` (the table, the host's load before and after)
into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from distgcn.kernels import allocator

allocator.prefer_huge_pages()  # before torch's import, as the train command does

import numpy as np  # noqa: E402
import torch  # noqa: E402
from matrices import rcm_adjacency  # noqa: E402

from distgcn.kernels import csr as csr_kernel  # noqa: E402
from distgcn.kernels import kernels_for, tricks  # noqa: E402
from distgcn.nn.dropout import keyed_dropout, keyed_dropout_matmul, relu_or_deferred  # noqa: E402
from distgcn.training.steps import cross_entropies  # noqa: E402

DEFAULT_GRAPH = Path(__file__).resolve().parents[2] / "shared/datasets/soc-Slashdot0902/soc-Slashdot0902.txt.gz"
CLEAR_MARGIN = 1.10
"""A trick pays where switching it off makes the case at least this much slower in the median round, and slower
in every round."""


def alternate(calls: dict[str, Callable[[], object]], repeats: int, rounds: int) -> dict[str, list[float]]:
    """Each round's fastest call of each variant (ms). Within a round the variants take turns call by call (each
    first in half the turns), so that a slow spell of the shared host falls on all of them; the fastest call,
    because a call can only be slowed by what else the host does."""
    for call in calls.values():  # compiled (or loaded from numba's cache), pages touched
        call()
        call()
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        fastest = dict.fromkeys(names, float("inf"))
        for turn in range(repeats):
            for name in (names if turn % 2 == 0 else names[::-1]):
                start = time.perf_counter()
                calls[name]()
                fastest[name] = min(fastest[name], time.perf_counter() - start)
        for name in names:
            times[name].append(fastest[name] * 1e3)
    return times


def row(trick: str, case: str, threads: int, times: dict[str, list[float]], off: str = "off",
        default: str = "default") -> dict:
    ratios = [o / d for o, d in zip(times[off], times[default])]
    default_ms, off_ms = statistics.median(times[default]), statistics.median(times[off])
    ratio = off_ms / default_ms
    return {"trick": trick, "case": case, "threads": threads, "default_ms": round(default_ms, 3),
            "off_ms": round(off_ms, 3), "off_over_default": round(ratio, 3),
            "round_ratios": [round(min(ratios), 3), round(max(ratios), 3)],
            "pays": ratio >= CLEAR_MARGIN and min(ratios) > 1.0}


def switched(call: Callable[[], object], **off: bool) -> Callable[[], object]:
    """``call`` with the named tricks switched (the others on)."""
    setting = tricks.Tricks(**off)

    def run() -> object:
        kept, tricks.TRICKS = tricks.TRICKS, setting
        try:
            return call()
        finally:
            tricks.TRICKS = kept

    return run


def wanted(args, trick: str) -> bool:
    """Whether ``--only`` asks for ``trick`` (all when it names none)."""
    return not args.only or trick in args.only


def product_rows(a, width: int, threads: int, args) -> list[dict]:
    """The written product at ``width`` columns, against each product switch off."""
    rng = np.random.default_rng(width)
    dense = rng.standard_normal((a.shape[0], width), dtype=np.float32)
    outs = {name: np.empty((a.shape[0], width), dtype=np.float32) for name in ("default", "off")}
    bounds: dict[str, dict] = {"default": {}, "off": {}}

    def product(name: str) -> Callable[[], object]:
        return lambda: csr_kernel.add_product(a.indptr, a.indices, a.data, dense, outs[name], bounds[name], False)

    rows = []
    for trick in [t for t in ("stack_sums", "prefetch", "two_chains", "claimed_blocks") if wanted(args, t)]:
        times = alternate({"default": switched(product("default")), "off": switched(product("off"), **{trick: False})},
                          args.repeats, args.rounds)
        same = bool(np.array_equal(outs["off"], outs["default"]))
        rows.append(row(trick, f"product {width} cols", threads, times) | {"same_bits": same})
    return rows


def pass_rows(rows_count: int, widths: list[int], classes: int, threads: int, args) -> list[dict]:
    """Keyed dropout, the one-pass dropout product, the folded ReLU and the logits passes."""
    gen = torch.Generator().manual_seed(0)
    ids = np.arange(rows_count, dtype=np.int64)
    out = []
    for width in widths if wanted(args, "compiled_dropout") else ():
        x = torch.randn(rows_count, width, generator=gen).requires_grad_(True)
        g = torch.randn(rows_count, width, generator=gen)

        def dropout_step(x=x, g=g) -> object:
            return torch.autograd.grad(keyed_dropout(x, ids, 0.5, 7), x, g)

        times = alternate({"default": dropout_step, "off": switched(dropout_step, compiled_dropout=False)},
                          args.repeats, args.rounds)
        out.append(row("compiled_dropout", f"dropout {width} cols fwd+bwd", threads, times))
    for width in widths:
        x = torch.randn(rows_count, width, generator=gen).requires_grad_(True)
        w = torch.randn(width, classes, generator=gen).requires_grad_(True)
        g = torch.randn(rows_count, classes, generator=gen)

        def narrow_step(x=x, w=w, g=g) -> object:
            return torch.autograd.grad(keyed_dropout_matmul(x, w, ids, 0.5, 7), (x, w), g)

        def folded_step(x=x, w=w, g=g) -> object:
            hidden = x * 1  # a layer's output before its ReLU
            product = keyed_dropout_matmul(relu_or_deferred(hidden, w, 0.5), w, ids, 0.5, 7)
            return torch.autograd.grad(product, (x, w), g)

        if wanted(args, "one_pass_product"):
            times = alternate({"default": narrow_step, "off": switched(narrow_step, one_pass_product=False)},
                              args.repeats, args.rounds)
            out.append(row("one_pass_product", f"dropout(H)·W {width}->{classes} fwd+bwd", threads, times))
        if wanted(args, "relu_folding"):
            times = alternate({"default": folded_step, "off": switched(folded_step, relu_folding=False)},
                              args.repeats, args.rounds)
            out.append(row("relu_folding", f"relu+dropout(H)·W {width}->{classes} fwd+bwd", threads, times))
    logits = torch.randn(rows_count, classes, generator=gen).requires_grad_(True)
    train = torch.randperm(rows_count, generator=gen)[:rows_count // 2].sort().values
    labels = torch.randint(0, classes, (train.numel(),), generator=gen)

    def loss_step() -> object:
        return torch.autograd.grad(cross_entropies(logits, labels, train).sum() / train.numel(), logits)

    def argmax() -> object:
        return kernels_for("cpu").predicted_classes(logits.detach())

    for case, step in ((f"loss+backward {classes} classes", loss_step), (f"argmax {classes} classes", argmax)
                       ) if wanted(args, "compiled_logits") else ():
        times = alternate({"default": step, "off": switched(step, compiled_logits=False)}, args.repeats,
                          args.rounds)
        out.append(row("compiled_logits", case, threads, times))
    return out


def table(rows: list[dict]) -> list[str]:
    lines = ["| trick | case | threads | default ms | off ms | off/default | per-round range | pays |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        low, high = r["round_ratios"]
        lines.append(f"| {r['trick']} | {r['case']} | {r['threads']} | {r['default_ms']:.3f} | {r['off_ms']:.3f} "
                     f"| {r['off_over_default']:.3f} | {low:.2f}-{high:.2f} | {'yes' if r['pays'] else 'no'} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder the table and rows are written to")
    parser.add_argument("--graph", default=str(DEFAULT_GRAPH))
    parser.add_argument("--symmetrize", action="store_true", default=True)
    parser.add_argument("--widths", default="16,64")
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--only", default="", help="comma-separated tricks to time (default: all)")
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    known = {f.name for f in fields(tricks.Tricks)}
    args.only = {name for name in args.only.split(",") if name}
    if args.only - known:
        parser.error(f"--only: no trick named {', '.join(sorted(args.only - known))}")
    load_before = os.getloadavg()
    a = rcm_adjacency(args.graph, args.symmetrize)
    widths = [int(w) for w in args.widths.split(",")]
    rows: list[dict] = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for width in widths:
            rows += product_rows(a, width, threads, args)
        rows += pass_rows(a.shape[0], widths, args.classes, threads, args)
        for r in rows:
            if r["threads"] == threads:
                print(json.dumps(r), flush=True)
    load_after = os.getloadavg()
    header = [f"# Kernel ablation: {Path(args.graph).name}, {a.shape[0]} rows, {a.nnz} nonzeros (RCM order)", "",
              (f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; load average before "
               f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} "
               f"{load_after[1]:.2f} {load_after[2]:.2f}; median of {args.rounds} rounds' fastest of "
               f"{args.repeats} alternating calls; pays: off/default >= {CLEAR_MARGIN} and > 1 in every round"), ""]
    text = "\n".join(header + table(rows)) + "\n"
    (out_dir / "ablation.md").write_text(text)
    with open(out_dir / "ablation.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    print(text)


if __name__ == "__main__":
    main()
