"""``mpiexec -n P distgcn stats DIR``: the ranks verify and measure the shards together, rank 0 prints.

The oracle is one process's ``stats DIR --json`` of the same directory; which rank read which shard shows in
the error a bad shard gives (it names the rank that found it).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_distgcn

GRAPH = "synthetic:sbm,n=900,classes=3,features=8"


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    out = tmp_path_factory.mktemp("stats-on-ranks") / "p5"
    done = run_distgcn(["partition", GRAPH, "--parts", "5", "--model", "random", "--out", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("ranks", [2, 3])
def test_ranks_report_what_one_process_reports_and_print_it_once(partition, ranks):
    one = run_distgcn(["stats", str(partition), "--json"])
    assert one.returncode == 0, one.stderr
    together = run_distgcn(["stats", str(partition), "--json"], ranks=ranks)
    assert together.returncode == 0, together.stderr
    assert together.stdout.count("\n") == 1  # rank 0 alone prints
    assert json.loads(together.stdout) == json.loads(one.stdout)
    assert len(json.loads(one.stdout)["memory"]["ranks"]) == 5


def test_a_comparison_of_several_directories_is_made_by_the_ranks_too(partition, tmp_path):
    other = tmp_path / "p3"
    done = run_distgcn(["partition", GRAPH, "--parts", "3", "--model", "contiguous", "--out", str(other), "--quiet"])
    assert done.returncode == 0, done.stderr
    one = run_distgcn(["stats", str(partition), str(other), "--json"])
    together = run_distgcn(["stats", str(partition), str(other), "--json"], ranks=2)
    assert one.returncode == together.returncode == 0, one.stderr + together.stderr
    assert json.loads(together.stdout) == json.loads(one.stdout)


@pytest.mark.parametrize("shard, reader", [(3, 1), (2, 0)])
def test_a_bad_shard_is_one_error_from_the_rank_that_read_it_and_every_rank_exits_2(partition, tmp_path, shard,
                                                                                      reader):
    """Rank r of P reads shards r, r + P, ...: shard 3 of 5 is rank 1's on 2 ranks, shard 2 is rank 0's."""
    edited = tmp_path / "edited"
    edited.mkdir()
    for path in partition.iterdir():
        (edited / path.name).write_bytes(path.read_bytes())
    meta = json.loads((edited / "meta.json").read_text())
    meta["shards"][shard]["sha256"] = "0" * 64
    (edited / "meta.json").write_text(json.dumps(meta))
    done = run_distgcn(["stats", str(edited)], ranks=2)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("distgcn: error")]
    assert len(errors) == 1, done.stderr
    assert re.search(rf"rank {reader}: .*shard-0000{shard}\.npz.*does not match meta\.json", errors[0]), errors[0]
    assert "Traceback" not in done.stderr


def test_a_prediction_is_printed_once(tmp_path):
    spec = "n=82168,nnz=1030000,features=64,parts=4,classes=8"
    one = run_distgcn(["stats", "--predict", spec, "--json"])
    together = run_distgcn(["stats", "--predict", spec, "--json"], ranks=2)
    assert one.returncode == together.returncode == 0, one.stderr + together.stderr
    assert together.stdout == one.stdout
