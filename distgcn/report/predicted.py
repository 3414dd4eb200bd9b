"""Predicted beside measured epoch time (``report --predict-time CALIBRATION``, or ``RUN@calibration=FILE``).

A run's prediction is its partition directory's (``stats DIR --predict-time``: distgcn/performance/prediction.py),
for the ranks per node its header records, with the run's own calibration (whose measured network is the link the
run trained over) or the report's; a run that cannot be predicted says why instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from distgcn.errors import InputError
from distgcn.report.inputs import Run


@dataclass
class Predicted:
    """One run with its prediction, or the reason it has none."""

    run: Run
    prediction: dict | None
    reason: str | None = None

    @property
    def error(self) -> float | None:
        """The serial prediction against the measured median epoch, as a fraction (+0.1: 10% above)."""
        if self.prediction is None:
            return None
        return self.prediction["serial_s"] / self.run.steady("epoch_s") - 1


def predict_runs(runs: list[Run], calibration: str | None, given: dict[str, float | None]) -> list[Predicted]:
    """Every multi-rank run that has a calibration (its own or the report's), in input order."""
    from distgcn.performance.prediction import predict_time
    from distgcn.shard.directory import read_meta

    out = []
    for run in runs:
        chosen = run.calibration or calibration
        if chosen is None or run.ranks in (None, 1):
            continue
        directory = run.header.get("partition_dir")
        if directory is None:
            out.append(Predicted(run, None, "the run did not record its partition directory"))
            continue
        try:
            if read_meta(Path(directory)).get("partition_id") != run.header.get("partition_id"):
                out.append(Predicted(run, None, f"{directory} holds another partition now"))
                continue
            ranks_per_node = int((run.header.get("node") or {}).get("ranks") or 1)
            out.append(Predicted(run, predict_time(Path(directory), chosen, given, ranks_per_node)))
        except InputError as error:
            out.append(Predicted(run, None, str(error)))
    return out


def link_words(prediction: dict) -> str:
    """The network a prediction assumed, in words (``96 Mbit/s, 9 us``)."""
    network = prediction["network"]
    bits = network["bandwidth_bytes_s"] * 8
    rate = f"{bits / 1e9:.1f} Gbit/s" if bits >= 1e9 else f"{bits / 1e6:.0f} Mbit/s"
    return f"{rate}, {network['latency_s'] * 1e6:.0f} us"


def panels(predicted: list[Predicted]) -> dict[tuple[str | None, int | None, str], list[Predicted]]:
    """Predicted runs grouped by graph, P and link, in input order: one panel each, the models side by side."""
    groups: dict[tuple[str | None, int | None, str], list[Predicted]] = {}
    for p in predicted:
        if p.prediction is not None:
            groups.setdefault((p.run.graph, p.run.ranks, link_words(p.prediction)), []).append(p)
    return groups


def rows(predicted: list[Predicted]) -> list[list[object]]:
    """The summary's table: measured and predicted epoch, their split, the error, or why there is no prediction."""
    out = []
    for p in predicted:
        measured = p.run.steady("epoch_s") * 1e3
        if p.prediction is None:
            out.append([p.run.label, p.run.model, p.run.ranks, None, f"{measured:.1f}", None, None, None, None,
                        f"no prediction: {p.reason}"])
            continue
        q = p.prediction
        out.append([p.run.label, p.run.model, p.run.ranks, link_words(q), f"{measured:.1f}",
                    f"{q['serial_s'] * 1e3:.1f}", f"{q['overlapped_s'] * 1e3:.1f}",
                    f"{q['compute_s'] * 1e3:.1f} / {q['halo_s'] * 1e3:.1f} / {q['allreduce_s'] * 1e3:.1f}",
                    f"{p.error:+.0%}", Path(q["calibration"]["path"]).name])
    return out
