"""``distgcn stats DIR``: the communication a partition causes, as a table or JSON."""

from __future__ import annotations

import json
from pathlib import Path

from distgcn.distribute import read_meta

JSON_KEYS = ("parts", "model", "partitioner", "preset", "epsilon", "seed", "volume", "max_recv_volume",
             "messages", "max_recv_messages", "imbalance", "connectivity_minus_one", "edge_cut", "partition_s")


def stats_json(directory: str | Path) -> dict:
    meta = read_meta(Path(directory))
    out = {key: meta.get(key) for key in JSON_KEYS}
    out["graph"] = {k: meta["graph"].get(k) for k in ("name", "n", "nnz", "fingerprint")} if "graph" in meta else None
    return out


def stats_table(directory: str | Path) -> str:
    s = stats_json(directory)
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
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def print_stats(directory: str, as_json: bool) -> None:
    print(json.dumps(stats_json(directory)) if as_json else stats_table(directory))
