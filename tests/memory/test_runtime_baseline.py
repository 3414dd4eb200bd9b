"""The runtime baseline that ``stats`` adds to each rank's prediction is a measurement, and still holds here.

distgcn/memory/baseline.py keeps the figure of ``python benchmarks/runtime_baseline.py``, whose output is kept in
benchmarks/results/; a real training run of a small graph, measured as the benchmark measures it (the peak
resident set of the process), must still peak near ``stats``' total for its rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from distgcn.cli.main import main
from distgcn.memory import baseline


def test_the_kept_figure_is_the_kept_measurement():
    kept = json.loads((ROOT / baseline.CPU.result).read_text())
    assert baseline.CPU.bytes == round(kept["baseline_mib"] * 2**20)
    assert kept["baseline_mib"] == max(kept["median_baseline_mib"].values())
    assert kept["command"].startswith(baseline.CPU.command)
    assert kept["versions"]["torch"] == baseline.CPU.torch
    python = ".".join(kept["versions"]["python"].split(".")[:2])
    mpi = kept["versions"]["mpi"].split()
    assert f"Python {python}" in baseline.CPU.measured_with
    assert f"{mpi[0]} {'.'.join(mpi[-1].split('.')[:2])}" in baseline.CPU.measured_with


@pytest.mark.skipif(baseline.installed_torch() != baseline.CPU.torch,
                    reason=f"the baseline was measured with torch {baseline.CPU.torch}, this is "
                           f"{baseline.installed_torch()}")
def test_a_small_run_peaks_within_ten_percent_of_its_predicted_total(tmp_path, capsys):
    """Without the baseline the prediction is 2 MiB for a process that peaks near 460 MiB."""
    directory = tmp_path / "p1"
    assert main(["partition", "synthetic:sbm,n=3000,classes=4,features=16", "--parts", "1", "--model", "random",
                 "--out", str(directory), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["stats", str(directory), "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["memory"]["ranks"][0]["cpu_total_bytes"]
    # the process's own high-water mark (VmHWM) at the end of the command: a child's ru_maxrss would count the
    # pages of this large test process that it held between fork and exec
    peak_file = tmp_path / "peak"
    code = ("import runpy, sys\n"
            f"sys.argv = ['distgcn', 'train', {str(directory)!r}, '--epochs', '2', '--threads', '1', '--quiet']\n"
            "try:\n"
            "    runpy.run_module('distgcn', run_name='__main__', alter_sys=True)\n"
            "finally:\n"
            "    status = open('/proc/self/status').read()\n"
            f"    open({str(peak_file)!r}, 'w').write(status.split('VmHWM:')[1].split()[0])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    peak = int(peak_file.read_text()) * 1024  # kB
    assert abs(peak - predicted) <= 0.1 * predicted, (peak / 2**20, predicted / 2**20)
