"""Messages that say what to do (issue #22): the way out of a refused resume, the settings of --verbose."""

from __future__ import annotations

import re

from conftest import distgcn_in_process

SPEC = "synthetic:sbm,n=300,classes=3,features=8"


def test_checkpoints_of_another_partition_name_the_directory_and_the_ways_out(tmp_path):
    ckpt = tmp_path / "ckpt"
    base = ["train", "--graph", SPEC, "--epochs", "1", "--quiet", "--checkpoint-dir", str(ckpt),
            "--checkpoint-every", "1"]
    assert distgcn_in_process([*base, "--partition", "random"], ranks=2).returncode == 0
    refused = distgcn_in_process([*base, "--partition", "contiguous", "--resume"], ranks=2)
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, refused.stderr
    assert "refusing to resume: it was written for another partition" in lines[0]
    assert f"give another --checkpoint-dir than {ckpt}" in lines[0]
    assert "--resume with the partition that wrote it" in lines[0]


def test_verbose_prints_the_run_configuration_one_setting_per_line(tmp_path):
    done = distgcn_in_process(["train", "--graph", SPEC, "--epochs", "1", "--verbose", "--hidden", "5"], ranks=2)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("run configuration:"))
    setting = re.compile(r"^(?:\S+ \S+ )?  ([\w.]+): (.*)$")  # after the timestamp of a log file
    settings = dict(match.groups() for line in lines[start + 1:] if (match := setting.match(line)))
    assert settings["ranks"] == "2" and settings["widths"] == "[8, 5, 3]"
    assert settings["partition_model"] == "hypergraph" and settings["graph.spec"] == SPEC
    assert not any(line.lstrip().startswith("run: {") for line in lines)
