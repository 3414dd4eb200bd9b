"""``distgcn stats DIR...``: the communication a partition causes, and each rank's predicted peak memory.

``distgcn stats --predict SPEC``: the same predictions for a graph known only by its size (distgcn/memory/from_sizes.py).

One directory prints its full report; several print one comparison table, a row per directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distgcn.comm.collective import Group
from distgcn.config import ModelConfig, default_of
from distgcn.memory import baseline
from distgcn.memory.from_sizes import GraphSpec, predict_graph
from distgcn.memory.prediction import predict, shard_sizes, sizes_of
from distgcn.shard.directory import (
    load_listed_shard,
    minibatch_volume,
    read_meta,
    validate_minibatch_fields,
    verify_parts_file,
)

JSON_KEYS = ("parts", "model", "partitioner", "preset", "epsilon", "seed", "volume", "max_recv_volume",
             "messages", "max_recv_messages", "imbalance", "connectivity_minus_one", "edge_cut", "partition_s")


def rank_memory(directory: Path, meta: dict, options: ModelConfig, rank: int, verify: bool = True) -> dict:
    """Rank ``rank``'s sizes, the peak bytes distgcn is predicted to allocate on a GPU (device) and on a CPU
    (process data), and on a CPU the total with the runtime baseline (:mod:`distgcn.memory.baseline`).

    With ``verify``, the shard is read whole and checked against meta.json, not just its headers: what is
    reported on must be what training would read. Without (the summary ``partition`` prints of the shards it
    has just written and checksummed), only the array headers are read.
    """
    if verify:
        sizes = sizes_of(load_listed_shard(directory, meta, rank))
    else:
        sizes = shard_sizes(directory / meta["shards"][rank]["file"])
    cpu = predict(sizes, options, False)["total"]
    return {"rank": rank, "rows": sizes.rows, "halo_rows": sizes.halo_rows, "nnz": sizes.nnz_owned + sizes.nnz_halo,
            "gpu_bytes": predict(sizes, options, True)["total"], "cpu_bytes": cpu,
            "cpu_total_bytes": cpu + baseline.CPU.bytes}


def memory_json(directory: Path, meta: dict, options: ModelConfig, verify: bool = True,
                group: Group | None = None) -> list[dict]:
    """:func:`rank_memory` of every rank of the partition, in rank order. With ``group`` (the ranks of an MPI
    job), each process reads every ``group.size``-th shard and the entries are gathered on every process;
    collective, and a bad shard is an error on every process."""
    if group is None:
        return [rank_memory(directory, meta, options, rank, verify) for rank in range(meta["parts"])]
    from distgcn.comm.collective import agree

    mine = agree(group, lambda: [rank_memory(directory, meta, options, rank, verify)
                                 for rank in range(group.rank, meta["parts"], group.size)])
    return sorted((entry for entries in group.allgather_object(mine) for entry in entries),
                  key=lambda entry: entry["rank"])


def format_bytes(value: int) -> str:
    """Bytes in the unit their size calls for, so that no figure reads 0.00 and none 1024.0: B, then KiB and MiB
    with one decimal, GiB and TiB with two."""
    if value < 2**10:
        return f"{value} B"
    for power, unit, digits in ((1, "KiB", 1), (2, "MiB", 1), (3, "GiB", 2), (4, "TiB", 2)):
        text = f"{value / 2 ** (10 * power):.{digits}f}"
        if float(text) < 2**10 or unit == "TiB":
            return f"{text} {unit}"
    raise AssertionError("unreachable: TiB returns")


def baseline_legend() -> list[str]:
    """What the columns of distgcn's bytes and of the totals mean, and how the runtime baseline was measured."""
    cpu = baseline.CPU
    lines = ["'distgcn': the arrays distgcn allocates (on a GPU, in device memory); "
             "'total': with the runtime baseline,",
             f"  {format_bytes(cpu.bytes)} that a CPU rank holds before any data ({cpu.holds}),",
             *(f"  {line}" for line in cpu.words())]
    if baseline.GPU is None:
        lines.append("a GPU rank's runtime (the CUDA context, cuBLAS and cuSPARSE workspaces, NCCL's buffers) is not "
                     "measured: leave room for it")
    else:
        lines += [f"a GPU rank's runtime baseline: {format_bytes(baseline.GPU.bytes)} ({baseline.GPU.holds}),",
                  *(f"  {line}" for line in baseline.GPU.words())]
    return lines


def _verified_stats(directory: Path, options: ModelConfig, verify: bool = True,
                    group: Group | None = None) -> tuple[dict, dict]:
    """(meta.json, the stats object) of one directory: meta.json against the schema, and with ``verify``
    parts.npy and every shard against their checksums, so that nothing unchecked is reported. With ``group``,
    the processes of an MPI job share the shards (:func:`memory_json`) and rank 0 checks parts.npy."""
    def checked_meta() -> dict:
        meta = read_meta(directory)
        if verify and (group is None or group.rank == 0):
            verify_parts_file(directory, meta)
        return meta

    if group is None:
        meta = checked_meta()
    else:
        from distgcn.comm.collective import agree

        meta = agree(group, checked_meta)
    out = {key: meta.get(key) for key in JSON_KEYS}
    out["graph"] = {k: meta["graph"].get(k) for k in ("name", "n", "nnz", "fingerprint")} if "graph" in meta else None
    out["memory"] = {"model": options.as_dict(), "ranks": memory_json(directory, meta, options, verify, group),
                     "runtime_baseline": baseline.as_json()}
    return meta, out


def _figure(value: object, spec: str = "", unit: str = "") -> str:
    """``value`` formatted with ``spec`` and followed by ``unit``; 'not recorded' where meta.json has none."""
    return "not recorded" if value is None else f"{value:{spec}}{unit}"


def stats_json(directory: str | Path, options: ModelConfig = ModelConfig(), verify: bool = True,
               group: Group | None = None) -> dict:
    return _verified_stats(Path(directory), options, verify, group)[1]


def model_words(m: dict, dropout: bool = False) -> str:
    """A model's settings in words (``stats``); the layer type is named when it is not the GCN."""
    hidden = ",".join(str(w) for w in m["hidden"])
    conv = {"sage": "GraphSAGE" + ("" if m.get("root_weight", True) else " without W_self") + ", ",
            "gat": f"GAT with {m.get('heads')} heads ({m.get('output_heads')} in the last layer), "}
    window = m.get("halo_window", default_of(ModelConfig, "halo_window"))  # named when not the default
    return (f"{conv.get(m.get('conv', 'gcn'), '')}{m['layers']} layers, hidden {hidden}, {m['dtype']}, "
            f"{m['optimizer']}" + (f", dropout {m['dropout']}" if dropout else "")
            + ("" if "halo_window" not in m else f", halo window {'all' if window is None else window}"))


def _memory_table(memory: dict) -> str:
    m = memory["model"]
    lines = [f"predicted peak memory per rank ({model_words(m)}):",
             f"{'rank':>6} {'rows':>10} {'halo rows':>10} {'nonzeros':>12} {'GPU: distgcn':>13} "
             f"{'CPU: distgcn':>13} {'CPU: total':>13}"]
    for r in memory["ranks"]:
        lines.append(f"{r['rank']:>6} {r['rows']:>10} {r['halo_rows']:>10} {r['nnz']:>12} "
                     f"{format_bytes(r['gpu_bytes']):>13} {format_bytes(r['cpu_bytes']):>13} "
                     f"{format_bytes(r['cpu_total_bytes']):>13}")
    return "\n".join([*lines, *baseline_legend()])


def stats_table(directory: str | Path, options: ModelConfig = ModelConfig(), verify: bool = True,
                group: Group | None = None) -> str:
    """The report of one directory; a figure that meta.json does not record (an older or edited file) reads
    'not recorded'."""
    s = stats_json(directory, options, verify, group)
    graph = s["graph"] or {}
    vol, msg = s["volume"] or {}, s["messages"] or {}
    rows = [
        ("graph", f"{graph.get('name')}  ({graph.get('n')} vertices, {graph.get('nnz')} nonzeros in Â)"),
        ("partition", f"{s['model']} into {s['parts']} parts"
                      + (f" by {s['partitioner']}" if s["partitioner"] else "")
                      + (f" ({s['preset']})" if s["preset"] else "")
                      + (f", epsilon {s['epsilon']}" if s["epsilon"] is not None else "")
                      + (f", seed {s['seed']}" if s["seed"] is not None else "")),
        ("partition time", _figure(s["partition_s"], ".2f", " s")),
        ("volume (rows/SpMM)", f"total {_figure(vol.get('total'))}  avg {_figure(vol.get('avg'), '.1f')}  "
                               f"max sent {_figure(vol.get('max'))}  max received {_figure(s['max_recv_volume'])}"),
        ("messages (per SpMM)", f"total {_figure(msg.get('total'))}  avg {_figure(msg.get('avg'), '.1f')}  "
                                f"max sent {_figure(msg.get('max'))}  max received {_figure(s['max_recv_messages'])}"),
        ("connectivity-1", _figure(s["connectivity_minus_one"])),
        ("edge cut", _figure(s["edge_cut"])),
        ("load imbalance", _figure(s["imbalance"], ".3f", " (max/avg nonzeros per rank)")),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n\n" + _memory_table(s["memory"])


def print_stats(directory: str, as_json: bool, options: ModelConfig = ModelConfig(), verify: bool = True,
                group: Group | None = None) -> None:
    """``verify=False`` only for a directory just written (``partition``'s summary). With ``group``, the ranks
    of an MPI job read the shards together and rank 0 prints."""
    text = json.dumps(stats_json(directory, options, verify, group)) if as_json else \
        stats_table(directory, options, verify, group)
    if group is None or group.rank == 0:
        print(text)


@dataclass(frozen=True)
class Compared:
    """One row of the comparison: the directory as the user named it, its stats object, its minibatch figures."""

    label: str
    stats: dict
    sampler: str | None
    samples: int | None
    minibatch_volume: float | None
    """The stochastic model's cut over its samples: the sampled minibatches' mean volume, an unbiased estimate
    of the expected rows one minibatch SpMM moves (partition/stochastic.py)."""


def _minibatch_fields(meta: dict, directory: Path) -> tuple[str | None, int | None, float | None]:
    """(sampler, sample count, minibatch volume) as meta.json records them; None where it has none."""
    validate_minibatch_fields(meta, directory)
    spec = meta.get("sampler")
    sampler = None
    if spec is not None:
        extra = "".join(f", {name} {value}" for name, value in sorted(spec.get("options", {}).items()))
        sampler = f"{spec['name']} (batch {spec['batch_size']}{extra})"
    return sampler, meta.get("shp_samples"), minibatch_volume(meta)


def compare(directories: Sequence[str], options: ModelConfig = ModelConfig(),
            group: Group | None = None) -> list[Compared]:
    """Every directory read and verified before any is reported: a bad one stops the command with its name.
    With ``group``, the ranks of an MPI job read each directory's shards together."""
    rows = []
    for label in directories:
        meta, stats = _verified_stats(Path(label), options, group=group)
        rows.append(Compared(label, stats, *_minibatch_fields(meta, Path(label))))
    return rows


def _cell(value: object, spec: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}"


def compare_table(rows: Sequence[Compared]) -> str:
    """One line per directory; '-' where a partition has no such value (a sampler for a full-batch model)."""
    m = rows[0].stats["memory"]["model"]
    header = ("partition", "model", "P", "volume", "vol max", "messages", "msg max", "imbalance",
              "GPU: distgcn", "CPU: distgcn", "CPU: total", "sampler", "samples", "minibatch vol")
    body = []
    for r in rows:
        s = r.stats
        model = f"{s['model']} ({s['partitioner']})" if s["partitioner"] else str(s["model"])
        ranks = s["memory"]["ranks"]
        vol, msg = s["volume"] or {}, s["messages"] or {}
        body.append((r.label, model, str(s["parts"]), _cell(vol.get("total")), _cell(vol.get("max")),
                     _cell(msg.get("total")), _cell(msg.get("max")), _cell(s["imbalance"], ".3f"),
                     *(format_bytes(max(x[key] for x in ranks))
                       for key in ("gpu_bytes", "cpu_bytes", "cpu_total_bytes")),
                     r.sampler or "-", "-" if r.samples is None else str(r.samples),
                     "-" if r.minibatch_volume is None else f"{r.minibatch_volume:.1f}"))
    widths = [max(len(line[i]) for line in (header, *body)) for i in range(len(header))]
    text_columns = {0, 1, 11}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i in text_columns else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    legend = [
        "volume, vol max: rows sent per SpMM by all ranks, by the largest sender; messages, msg max: the same "
        "in messages",
        "imbalance: max/avg nonzeros per rank; GPU, CPU: the largest rank's predicted peak memory "
        f"({model_words(m)})",
        "minibatch vol: the stochastic model's sampled minibatches' mean volume (rows per minibatch SpMM); "
        "-: not recorded",
        *baseline_legend(),
    ]
    return "\n".join([line(header), *(line(b) for b in body), "", *legend])


def print_comparison(directories: Sequence[str], as_json: bool, options: ModelConfig = ModelConfig(),
                     group: Group | None = None) -> None:
    """Several directories: a JSON list of their ``stats DIR --json`` objects, or one table (printed by rank 0
    of ``group``)."""
    rows = compare(directories, options, group)
    if group is None or group.rank == 0:
        print(json.dumps([r.stats for r in rows]) if as_json else compare_table(rows))


def prediction_table(p: dict) -> str:
    """``stats --predict``'s report: what was assumed, the shard it implies, memory by term, halo traffic."""
    spec, shard, m = p["spec"], p["shard"], p["model"]
    rows = [
        ("graph", f"{spec['n']} vertices, {spec['nnz']} nonzeros in Â, {spec['features']} features, "
                  f"{spec['classes']} classes, on {spec['parts']} ranks"),
        ("model", model_words(m, dropout=True)),
        ("halo rows per rank", f"{shard['halo_rows']} ({p['halo_source']})"),
        ("largest rank's shard", f"{shard['rows']} rows, {shard['nnz_owned'] + shard['nnz_halo']} nonzeros "
                                 f"({shard['nnz_halo']} in the halo block), {shard['senders']} senders"),
        ("halo per SpMM", f"{p['halo_rows_per_spmm']} rows sent by all ranks"),
        ("halo per epoch", f"{format_bytes(p['halo_bytes_per_epoch'])} over {p['spmm_exchanges']} exchanges "
                           f"({p['halo_rows_per_epoch']} rows; full batch, exact first layer)"),
        ("partitioning node", f"at least {format_bytes(p['partitioning_bytes']['total'])} (Â's CSR "
                              f"{format_bytes(p['partitioning_bytes']['adjacency_csr'])}, features "
                              f"{format_bytes(p['partitioning_bytes']['features'])}, part vector "
                              f"{format_bytes(p['partitioning_bytes']['parts'])})"),
    ]
    width = max(len(k) for k, _ in rows)
    terms = [k for k in p["gpu_bytes"] if k != "total"] + [k for k in p["cpu_bytes"] if k not in p["gpu_bytes"]]
    runtime = p["runtime_baseline"]
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["", "predicted peak memory of the largest rank, by term:",
              f"{'term':<16} {'GPU':>13} {'CPU':>13}"]
    for term in terms:
        gpu = p["gpu_bytes"].get(term)
        lines.append(f"{term:<16} {'-' if gpu is None else format_bytes(gpu):>13} "
                     f"{format_bytes(p['cpu_bytes'][term]):>13}")
    gpu_runtime = "not measured" if runtime["gpu_bytes"] is None else format_bytes(runtime["gpu_bytes"])
    gpu_total = "-" if runtime["gpu_bytes"] is None else format_bytes(p["gpu_bytes"]["total"] + runtime["gpu_bytes"])
    lines += [f"{'distgcn':<16} {format_bytes(p['gpu_bytes']['total']):>13} "
              f"{format_bytes(p['cpu_bytes']['total']):>13}",
              f"{'runtime baseline':<16} {gpu_runtime:>13} {format_bytes(runtime['cpu_bytes']):>13}",
              f"{'total':<16} {gpu_total:>13} {format_bytes(p['cpu_total_bytes']):>13}",
              *baseline_legend()]
    lines += ["", "by --halo-window (the largest K that fits keeps the most messages in flight):",
              f"{'window':<16} {'GPU: distgcn':>13} {'CPU: distgcn':>13} {'CPU: total':>13}"]
    for window, totals in p["by_halo_window"].items():
        lines.append(f"{window:<16} {format_bytes(totals['gpu_bytes']):>13} {format_bytes(totals['cpu_bytes']):>13} "
                     f"{format_bytes(totals['cpu_total_bytes']):>13}")
    return "\n".join(lines)


def print_prediction(spec: GraphSpec, options: ModelConfig, as_json: bool) -> None:
    """``stats --predict``: one JSON object, or the table."""
    prediction = predict_graph(spec, options)
    print(json.dumps(prediction) if as_json else prediction_table(prediction))
