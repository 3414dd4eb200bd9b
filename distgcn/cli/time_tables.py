"""``distgcn stats DIR --predict-time CALIBRATION``: a partition's predicted epoch time, per rank and in all
(the model: distgcn/performance/epoch_time.py; the calibration: distgcn/performance/calibration.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from distgcn.performance.prediction import predict_time, predict_time_from_sizes


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def time_table(p: dict) -> str:
    from distgcn.cli.stats_tables import model_words

    network = p["network"]
    lines = [f"predicted epoch time of {p['partition']} ({p['model']}, {p['parts']} ranks, "
             f"{p['ranks_per_node']} per node; {model_words(p['calibration']['model'])}, calibrated on "
             f"{p['calibration']['host']} with {p['calibration']['ranks']} rank(s) at once)",
             f"network: latency {network['latency_s'] * 1e6:.1f} us ({p['network_source']['latency_s']}), "
             f"bandwidth {network['bandwidth_bytes_s'] / 1e6:.1f} MB/s ({p['network_source']['bandwidth_bytes_s']})",
             f"{'rank':>6} {'rows':>10} {'nonzeros':>12} {'rows sent':>10} {'messages':>9} {'compute':>11}"]
    alike = all({k: v for k, v in r.items() if k != "rank"} == {k: v for k, v in p["ranks"][0].items() if k != "rank"}
                for r in p["ranks"])
    for r in p["ranks"][:1] if alike else p["ranks"]:
        lines.append(f"{'each' if alike and len(p['ranks']) > 1 else r['rank']:>6} {r['rows']:>10} {r['nnz']:>12} {r['rows_sent']:>10} {r['messages_sent']:>9} "
                     f"{_ms(r['compute_s']):>11}")
    lines += [f"slowest rank {p['slowest_rank']}: compute {_ms(p['compute_s'])}; halo {_ms(p['halo_s'])} over "
              f"{p['exchanges']} exchanges ({p['link_rows_per_exchange']} rows and "
              f"{p['link_messages_per_exchange']} messages per exchange on the busiest link); allreduce "
              f"{_ms(p['allreduce_s'])}",
              f"epoch: {_ms(p['serial_s'])} with no transfer hidden, {_ms(p['overlapped_s'])} with each exchange "
              f"hidden behind its share of the local compute"]
    return "\n".join(lines)


def comparison_table(predictions: Sequence[dict]) -> str:
    header = ("partition", "model", "P", "compute", "halo", "allreduce", "epoch (serial)", "epoch (overlapped)")
    body = [(p["partition"], str(p["model"]), str(p["parts"]), _ms(p["compute_s"]), _ms(p["halo_s"]),
             _ms(p["allreduce_s"]), _ms(p["serial_s"]), _ms(p["overlapped_s"])) for p in predictions]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in (header, *body))


def print_time_predictions(directories: Sequence[str], calibration: str, given: dict[str, float | None],
                           ranks_per_node: int, as_json: bool) -> None:
    predictions = [predict_time(Path(d), calibration, given, ranks_per_node) for d in directories]
    if as_json:
        print(json.dumps(predictions[0] if len(predictions) == 1 else predictions))
    else:
        print(time_table(predictions[0]) if len(predictions) == 1 else comparison_table(predictions))


def print_time_prediction_by_size(spec, calibration: str, given: dict[str, float | None], ranks_per_node: int,
                                  as_json: bool) -> None:
    prediction = predict_time_from_sizes(spec, calibration, given, ranks_per_node)
    print(json.dumps(prediction) if as_json else time_table(prediction))
