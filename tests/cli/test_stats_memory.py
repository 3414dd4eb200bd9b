"""``distgcn stats``' memory: bytes in units chosen by their size, and each rank's total with the runtime baseline.

A rank of a small graph is mostly its runtime (interpreter, torch, MPI, kernels: distgcn/memory/baseline.py), so a
report of distgcn's arrays alone reads as if the rank needed a few MiB; and GiB with two decimals read 0.00.
"""

from __future__ import annotations

import json

import pytest

from distgcn.cli.main import main
from distgcn.cli.stats_tables import format_bytes
from distgcn.memory import baseline


@pytest.mark.parametrize("value, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (13_324, "13.0 KiB"), (2**20 - 1, "1.0 MiB"),
    (3 * 2**19, "1.5 MiB"), (2**30 - 2**10, "1.00 GiB"), (5 * 2**29, "2.50 GiB"), (3 * 2**40, "3.00 TiB"),
    (2**52, "4096.00 TiB"),
])
def test_bytes_are_written_in_the_unit_their_size_calls_for(value, text):
    assert format_bytes(value) == text


def test_a_small_graphs_prediction_reads_in_kib_and_mib_never_zero(capsys):
    """A Slashdot-sized graph: every term of --predict used to read 0.00 GiB."""
    assert main(["stats", "--predict", "n=82168,nnz=1030000,features=64,parts=4,classes=8"]) == 0
    text = capsys.readouterr().out
    assert " 0.00" not in text and " GiB" not in text
    terms = text.split("by term:", 1)[1].split("\n\n", 1)[0]
    assert "adjacency" in terms and "parameters" in terms
    for line in terms.strip("\n").splitlines()[1:]:  # after the header
        if line.startswith(("'", " ", "a GPU")):
            break  # the legend
        assert line.rstrip().endswith(("KiB", "MiB", "-")), line


def test_every_rank_shows_distgcns_bytes_and_its_total_with_the_baseline_named(tmp_path, capsys):
    out = tmp_path / "p2"
    assert main(["partition", "synthetic:sbm,n=600,classes=3,features=8", "--parts", "2", "--model", "random",
                 "--out", str(out), "--quiet"]) == 0
    assert main(["stats", str(out), "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["runtime_baseline"]["cpu_bytes"] == baseline.CPU.bytes > 300 * 2**20  # torch alone is more
    assert memory["runtime_baseline"]["gpu_bytes"] is None  # not measured: not invented either
    assert main(["stats", str(out)]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.lstrip().startswith("rank"))
    assert header.split()[-6:] == ["GPU:", "distgcn", "CPU:", "distgcn", "CPU:", "total"]
    for rank in memory["ranks"]:
        assert rank["cpu_total_bytes"] == rank["cpu_bytes"] + baseline.CPU.bytes
        row = next(line for line in text.splitlines() if line.split()[:1] == [str(rank["rank"])])
        assert row.endswith(f"{format_bytes(rank['gpu_bytes']):>13} {format_bytes(rank['cpu_bytes']):>13} "
                            f"{format_bytes(rank['cpu_total_bytes']):>13}")
    assert f"{baseline.CPU.bytes / 2**20:.1f} MiB that a CPU rank holds before any data" in text
    assert f"measured with torch {baseline.CPU.torch}" in text and baseline.CPU.command in text
    assert "a GPU rank's runtime" in text and "is not measured" in text


def test_the_legend_says_when_this_torch_is_not_the_one_measured(monkeypatch):
    monkeypatch.setattr(baseline, "installed_torch", lambda: "2.11.0+cu130")
    lines = baseline.CPU.words()
    assert "this environment has torch 2.11.0+cu130, so its baseline may differ" in lines[-1]
    monkeypatch.setattr(baseline, "installed_torch", lambda: baseline.CPU.torch)
    assert len(baseline.CPU.words()) == 1
