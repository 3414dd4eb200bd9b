"""``distgcn stats DIR``: the communication a partition causes, and each rank's predicted peak memory."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from distgcn.distribute import check_plan, load_listed_shard, read_meta, verify_parts_file
from distgcn.errors import InputError
from distgcn.memory import ModelShape, model_widths, predict, sizes_of

JSON_KEYS = ("parts", "model", "partitioner", "preset", "epsilon", "seed", "volume", "max_recv_volume",
             "messages", "max_recv_messages", "imbalance", "connectivity_minus_one", "edge_cut", "partition_s")


@dataclass(frozen=True)
class ModelOptions:
    """The model whose memory is predicted (train's options of the same names and defaults)."""

    layers: int = 2
    hidden: tuple[int, ...] = (16,)
    dtype: str = "float32"
    optimizer: str = "adam"
    dropout: float = 0.5


def memory_json(directory: Path, meta: dict, options: ModelOptions) -> list[dict]:
    """Per rank: its sizes and predicted peak bytes on a GPU (device) and on a CPU (process data).

    Each shard is read whole and verified against meta.json, not just its headers: what is reported on
    must be what training would read.
    """
    if options.layers < 2:
        raise InputError(f"--layers: expected at least 2, got {options.layers}")
    ranks = []
    for rank in range(meta["parts"]):
        shard = load_listed_shard(directory, meta, rank)
        check_plan(shard)
        sizes = sizes_of(shard)
        try:
            widths = model_widths(sizes.features, sizes.classes, options.layers, options.hidden)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        shape = ModelShape(widths, options.dtype, options.optimizer, options.dropout)
        ranks.append({"rank": rank, "rows": sizes.rows, "halo_rows": sizes.halo_rows,
                      "nnz": sizes.nnz_owned + sizes.nnz_halo, "gpu_bytes": predict(sizes, shape, True)["total"],
                      "cpu_bytes": predict(sizes, shape, False)["total"]})
    return ranks


def stats_json(directory: str | Path, options: ModelOptions = ModelOptions()) -> dict:
    meta = read_meta(Path(directory))
    verify_parts_file(Path(directory), meta)
    out = {key: meta.get(key) for key in JSON_KEYS}
    out["graph"] = {k: meta["graph"].get(k) for k in ("name", "n", "nnz", "fingerprint")} if "graph" in meta else None
    out["memory"] = {"model": asdict(options), "ranks": memory_json(Path(directory), meta, options)}
    return out


def _memory_table(memory: dict) -> str:
    m = memory["model"]
    hidden = ",".join(str(w) for w in m["hidden"])
    lines = [f"predicted peak memory per rank ({m['layers']} layers, hidden {hidden}, {m['dtype']}, "
             f"{m['optimizer']}; distgcn/memory.py):",
             f"{'rank':>6} {'rows':>10} {'halo rows':>10} {'nonzeros':>12} {'GPU MiB':>10} {'CPU MiB':>10}"]
    for r in memory["ranks"]:
        lines.append(f"{r['rank']:>6} {r['rows']:>10} {r['halo_rows']:>10} {r['nnz']:>12} "
                     f"{r['gpu_bytes'] / 2**20:>10.1f} {r['cpu_bytes'] / 2**20:>10.1f}")
    return "\n".join(lines)


def stats_table(directory: str | Path, options: ModelOptions = ModelOptions()) -> str:
    s = stats_json(directory, options)
    graph = s["graph"] or {}
    vol, msg = s["volume"], s["messages"]
    rows = [
        ("graph", f"{graph.get('name')}  ({graph.get('n')} vertices, {graph.get('nnz')} nonzeros in Â)"),
        ("partition", f"{s['model']} into {s['parts']} parts"
                      + (f" by {s['partitioner']}" if s["partitioner"] else "")
                      + (f" ({s['preset']})" if s["preset"] else "")
                      + (f", epsilon {s['epsilon']}" if s["epsilon"] is not None else "")
                      + (f", seed {s['seed']}" if s["seed"] is not None else "")),
        ("partition time", f"{s['partition_s']:.2f} s"),
        ("volume (rows/SpMM)", f"total {vol['total']}  avg {vol['avg']:.1f}  max sent {vol['max']}  "
                               f"max received {s['max_recv_volume']}"),
        ("messages (per SpMM)", f"total {msg['total']}  avg {msg['avg']:.1f}  max sent {msg['max']}  "
                                f"max received {s['max_recv_messages']}"),
        ("connectivity-1", str(s["connectivity_minus_one"])),
        ("edge cut", str(s["edge_cut"])),
        ("load imbalance", f"{s['imbalance']:.3f} (max/avg nonzeros per rank)"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n\n" + _memory_table(s["memory"])


def print_stats(directory: str, as_json: bool, options: ModelOptions = ModelOptions()) -> None:
    print(json.dumps(stats_json(directory, options)) if as_json else stats_table(directory, options))
