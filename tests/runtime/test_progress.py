"""Progress reporting: a redrawn line on a terminal, timestamped lines in logs, --quiet and --verbose.

The commands run in this process (``train`` on in-process ranks, threads that
share this process's stderr, as mpiexec's ranks share the job's).
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime

import pytest
from conftest import ROOT, distgcn_in_process, run_distgcn_in_process

from distgcn.cli.main import main
from distgcn.runtime.progress import (
    NORMAL,
    QUIET,
    VERBOSE,
    Phase,
    Progress,
    c_stdout_to_ticker,
    format_duration,
)
from distgcn.runtime.ticker_process import ToolLog, tool_step

STAMP = datetime(2026, 1, 2, 3, 4, 5)
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(level: int = NORMAL, interactive: bool = False, tick_s: float = 0.0) -> tuple[Progress, io.StringIO, Clock]:
    """A Progress on a fake clock and stream; its ticker thread off unless ``tick_s`` (real seconds) is given."""
    stream, clock = io.StringIO(), Clock()
    progress = Progress(level, stream, interactive=interactive, clock=clock, wallclock=lambda: STAMP, tick_s=tick_s)
    return progress, stream, clock


def tickers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("progress: ")]


def wait_for(stream: io.StringIO, text: str) -> str:
    """The stream's contents once ``text`` is in them (the ticker thread writes it); fails after 30 s."""
    deadline = time.monotonic() + 30
    while text not in stream.getvalue():
        assert time.monotonic() < deadline, f"{text!r} never written: {stream.getvalue()!r}"
        time.sleep(0.001)
    return stream.getvalue()


@pytest.mark.parametrize("seconds, text", [(0.04, "0.0s"), (12.34, "12.3s"), (245, "4m05s"), (7620, "2h07m")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_log_lines_every_30_s_with_timestamp_elapsed_and_remaining():
    """As docs/user-guide.md says: a line every 30 s, not one per tenth of the steps (a fast training wrote ten)."""
    progress, stream, clock = make()
    with progress.phase("work", total=100) as phase:
        for _ in range(100):
            clock.now += 1.0
            phase.advance()
    lines = stream.getvalue().splitlines()
    assert all(line.startswith("2026-01-02 03:04:05 work: ") for line in lines)
    assert [line.split(" ", 2)[2] for line in lines] == [
        "work: started (100 steps)", "work:  30% (30/100), 30.0s elapsed, 1m10s left",
        "work:  60% (60/100), 1m00s elapsed, 40.0s left", "work:  90% (90/100), 1m30s elapsed, 10.0s left",
        "work: done in 1m40s"]
    assert "\r" not in stream.getvalue()


def test_a_phase_shorter_than_the_interval_logs_its_start_and_end_only():
    progress, stream, clock = make()
    with progress.phase("training", total=200) as phase:
        for _ in range(200):
            clock.now += 0.01
            phase.advance()
    assert [line.split(" ", 2)[2] for line in stream.getvalue().splitlines()] == [
        "training: started (200 steps)", "training: done in 2.0s"]


def test_log_lines_also_every_interval_when_steps_are_slow_or_unknown():
    progress, stream, clock = make()
    with progress.phase("sampling") as phase:
        for _ in range(3):
            clock.now += 61.0
            phase.advance()
    lines = stream.getvalue().splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "sampling: started", "sampling: 1 done, 1m01s elapsed", "sampling: 2 done, 2m02s elapsed",
        "sampling: 3 done, 3m03s elapsed", "sampling: done in 3m03s"]


def test_terminal_redraws_one_line_at_a_bounded_rate():
    progress, stream, clock = make(interactive=True)
    with progress.phase("work", total=1000) as phase:
        for _ in range(1000):  # no time passes: only the first and last states are drawn
            phase.advance()
    out = stream.getvalue()
    assert out.count("\r\033[K") <= 4
    assert "work:   0% (0/1000)" in out and "work: 100% (1000/1000)" in out
    assert out.endswith("\r\033[Kwork: done in 0.0s\n")
    assert out.count("\n") == 1  # the progress itself never scrolls the terminal


def test_terminal_shows_remaining_time():
    progress, stream, clock = make(interactive=True)
    phase = progress.phase("work", total=4)
    clock.now = 3.0
    phase.advance()
    assert stream.getvalue().rsplit("\r\033[K", 1)[1] == "work:  25% (1/4), 3.0s elapsed, 9.0s left"


def test_echo_keeps_the_status_line_below_results():
    progress, stream, clock = make(interactive=True)
    results = io.StringIO()
    progress.phase("training", total=10)
    progress.echo("epoch    1", file=results)
    assert results.getvalue() == "epoch    1\n"
    assert stream.getvalue().endswith("\r\033[K\r\033[Ktraining:   0% (0/10), 0.0s elapsed")


def test_quiet_prints_nothing_but_results():
    progress, stream, clock = make(level=QUIET)
    with progress.phase("work", total=3) as phase:
        phase.advance(3)
    progress.info("info")
    progress.detail("detail")
    results = io.StringIO()
    progress.echo("summary", file=results)
    assert stream.getvalue() == ""
    assert results.getvalue() == "summary\n"


@pytest.mark.parametrize("level, shown", [(NORMAL, ["info"]), (VERBOSE, ["info", "detail"])])
def test_verbose_adds_details(level, shown):
    progress, stream, clock = make(level=level)
    progress.info("info")
    progress.detail("detail")
    assert [line.split(" ", 2)[2] for line in stream.getvalue().splitlines()] == shown


@pytest.mark.parametrize("rank, quiet, verbose, level", [(0, False, False, NORMAL), (0, True, False, QUIET),
                                                         (0, False, True, VERBOSE), (0, True, True, QUIET),
                                                         (1, False, True, QUIET)])
def test_only_rank_zero_reports(rank, quiet, verbose, level):
    assert Progress.for_rank(rank, quiet=quiet, verbose=verbose, stream=io.StringIO()).level == level


def test_a_failing_phase_leaves_a_clean_line_and_no_done():
    progress, stream, clock = make(interactive=True)
    with pytest.raises(RuntimeError):
        with progress.phase("work", total=2):
            raise RuntimeError("boom")
    assert stream.getvalue().endswith("\r\033[K") and "done" not in stream.getvalue()


def test_partition_command_logs_timestamped_phases_or_nothing_when_quiet(tmp_path, capsys):
    graph = "synthetic:sbm,n=200,classes=2,features=4"
    assert main(["partition", graph, "--parts", "2", "--model", "random", "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and all(TIMESTAMPED.match(line) for line in lines), err
    assert any("writing shards: done in" in line for line in lines)
    quiet = main(["partition", graph, "--parts", "2", "--model", "random", "--out", str(tmp_path / "b"), "--quiet"])
    captured = capsys.readouterr()
    assert quiet == 0 and captured.err == "" and captured.out == ""
    assert main(["partition", graph, "--parts", "2", "--model", "random", "--out", str(tmp_path / "c"),
                 "--verbose"]) == 0
    verbose = capsys.readouterr().err
    assert "shard-00001.npz: 100 owned rows" in verbose and "partitioner: " in verbose


def test_minibatch_training_reports_its_normalization_presampling(capsys):
    assert run_distgcn_in_process(["train", "--graph", "synthetic:sbm,n=400,classes=2,features=4", "--sampler",
                                   "node", "--batch-size", "50", "--norm-samples", "20", "--epochs", "1"], 2) == [0, 0]
    err = capsys.readouterr().err
    phase = "pre-sampling 20 batches for the GraphSAINT normalization"
    assert f"{phase}: started (20 steps)" in err and f"{phase}: done in" in err
    assert err.count(f"{phase}: started") == 1  # rank 0 only


def test_ticker_redraws_the_elapsed_time_of_a_phase_that_reports_nothing():
    progress, stream, clock = make(interactive=True, tick_s=0.001)
    with progress.phase("partitioning"):
        assert [thread.daemon for thread in tickers()] == [True]
        clock.now = 12.0
        wait_for(stream, "\r\033[Kpartitioning: 12.0s elapsed")
        clock.now = 75.0
        out = wait_for(stream, "\r\033[Kpartitioning: 1m15s elapsed")
        assert "\n" not in out  # redrawn in place
    assert stream.getvalue().endswith("\r\033[Kpartitioning: done in 1m15s\n")
    assert tickers() == []


def counted_ticks(phase: Phase) -> Callable[[int], None]:
    """Count the ticks of ``phase`` (to be entered next); the returned call waits until ``n`` more have run."""
    ticks, tick = [0], phase.tick

    def counting_tick() -> None:
        tick()
        ticks[0] += 1

    phase.tick = counting_tick

    def wait_ticks(n: int) -> None:
        target, deadline = ticks[0] + n, time.monotonic() + 30
        while ticks[0] < target:
            assert time.monotonic() < deadline, "the ticker stopped ticking"
            time.sleep(0.001)
    return wait_ticks


def test_ticker_logs_a_timestamped_line_once_an_interval():
    progress, stream, clock = make(tick_s=0.001)
    phase = progress.phase("measuring communication")
    wait_ticks = counted_ticks(phase)
    with phase:
        wait_ticks(3)  # less than log_every_s (30 s) has passed: nothing is written
        clock.now = 31.0
        wait_for(stream, "measuring communication: 31.0s elapsed\n")
        wait_ticks(3)  # written once, not once a tick
        clock.now = 62.0
        wait_for(stream, "measuring communication: 1m02s elapsed\n")
    lines = [line.split(" ", 2)[2] for line in stream.getvalue().splitlines()]
    assert lines == ["measuring communication: started", "measuring communication: 31.0s elapsed",
                     "measuring communication: 1m02s elapsed", "measuring communication: done in 1m02s"]
    assert "\r" not in stream.getvalue() and tickers() == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_ticker_stops_when_the_phase_fails(error):
    progress, stream, clock = make(interactive=True, tick_s=0.001)
    with pytest.raises(error):
        with progress.phase("loading"):
            clock.now = 3.0
            wait_for(stream, "loading: 3.0s elapsed")
            raise error()
    assert tickers() == []
    written = stream.getvalue()
    clock.now = 9.0
    time.sleep(0.05)  # fifty ticks' time: a ticker left behind would draw 9.0s
    assert stream.getvalue() == written and written.endswith("\r\033[K")


def test_finish_inside_the_phase_stops_the_ticker_before_its_done_line():
    progress, stream, clock = make(tick_s=0.001)
    with progress.phase("writing shards", total=4) as phase:
        clock.now = 40.0
        wait_for(stream, "writing shards:   0% (0/4), 40.0s elapsed\n")
        phase.finish("4 shards")
        assert tickers() == []
        clock.now = 100.0
        time.sleep(0.05)
    assert stream.getvalue().splitlines()[-1].endswith("writing shards: done in 40.0s; 4 shards")


def test_quiet_starts_no_ticker():
    progress, stream, clock = make(level=QUIET, tick_s=0.001)
    with progress.phase("loading"):
        assert tickers() == []
    assert stream.getvalue() == ""


@pytest.mark.parametrize("env, quiet, shown", [
    ({"PMI_RANK": "0", "PMI_SIZE": "4"}, False, "starting 4 rank(s) (mpi): loading torch, then the transport"),
    ({"PMI_RANK": "1", "PMI_SIZE": "4"}, False, None),  # only rank 0 speaks
    ({"PMI_RANK": "0", "PMI_SIZE": "4"}, True, None),
    ({}, False, None),  # started by hand: no launcher to announce
])
def test_train_announces_a_launched_job_before_its_slow_imports(monkeypatch, capsys, env, quiet, shown):
    from distgcn.cli.train import _announce

    for var in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE",
                "SLURM_STEP_ID", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    _announce(argparse.Namespace(quiet=quiet, verbose=False))
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (captured.err.split(" ", 2)[2].rstrip("\n") if captured.err else None) == shown


def test_the_announcement_needs_neither_torch_nor_mpi():
    code = ("import sys, argparse; from distgcn.cli.train import _announce; "
            "_announce(argparse.Namespace(quiet=False, verbose=False)); "
            "print(sorted(m for m in ('torch', 'mpi4py') if m in sys.modules))")
    env = {**os.environ, "PMI_RANK": "0", "PMI_SIZE": "2"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout == "[]\n", done
    assert "starting 2 rank(s) (mpi)" in done.stderr


def test_train_prints_the_announcement_first():
    finished = distgcn_in_process(["train", "--graph", "synthetic:sbm,n=200,classes=2,features=4", "--epochs", "1"],
                                  env={"PMI_RANK": "0", "PMI_SIZE": "1"})
    assert finished.returncode == 0, finished
    lines = finished.stderr.splitlines()
    assert lines[0].endswith("starting 1 rank(s) (mpi): loading torch, then the transport"), lines
    assert "setting up the model: done in" in finished.stderr


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


def poll_holding_the_gil(fd: int, timeout_s: float) -> bool:
    """Wait until ``fd`` is readable without letting go of the GIL, as Mt-KaHyPar's partition call does.

    ctypes.PyDLL calls keep the GIL: no thread of this process can write meanwhile.
    """
    ready = ctypes.PyDLL(None).poll(ctypes.byref(PollFd(fd, select.POLLIN, 0)), 1, int(timeout_s * 1000))
    return ready == 1


def drain(fd: int) -> str:
    """What the pipe holds now (one read: the ticker process keeps writing)."""
    return os.read(fd, 1 << 20).decode() if select.select([fd], [], [], 0)[0] else ""


def read_to_end(fd: int) -> str:
    """The rest, once every writer has closed the pipe."""
    chunks = iter(lambda: os.read(fd, 1 << 20), b"")
    return b"".join(chunks).decode()


@pytest.mark.mpi  # starts the ticker process
@pytest.mark.parametrize("interactive, expected", [(False, re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
                                                                      r"partitioning: \d+\.\ds elapsed$", re.M)),
                                                   (True, re.compile(r"\r\033\[Kpartitioning: \d+\.\ds elapsed"))])
def test_a_ticker_process_reports_while_c_code_holds_the_gil(interactive, expected):
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    progress = Progress(NORMAL, stream, interactive=interactive, log_every_s=0.05, tick_s=0.01)
    with progress.phase("partitioning") as phase:
        with phase.outside_the_gil():
            process = phase.ticker_process
            assert process is not None
            drain(read_end)  # what this process wrote: the start of the phase
            assert poll_holding_the_gil(read_end, 60), "nothing was written while the GIL was held"
            time.sleep(0.1)
            assert expected.search(drain(read_end))
        assert process.returncode is not None  # ended with the block
    stream.close()
    assert "partitioning: done in" in read_to_end(read_end)
    os.close(read_end)


@pytest.mark.mpi  # starts the ticker process
def test_the_ticker_process_ends_when_the_work_fails():
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    progress = Progress(NORMAL, stream, interactive=False, tick_s=0.01)
    with pytest.raises(KeyboardInterrupt):
        with progress.phase("partitioning") as phase:
            with phase.outside_the_gil():
                process = phase.ticker_process
                raise KeyboardInterrupt
    assert process is not None and process.returncode is not None
    stream.close()
    os.close(read_end)


def test_without_a_file_descriptor_the_phase_goes_on_without_a_ticker_process():
    progress, stream, clock = make(tick_s=0.001)
    with progress.phase("partitioning") as phase:
        with phase.outside_the_gil():
            assert phase.ticker_process is None
        clock.now = 31.0
        wait_for(stream, "partitioning: 31.0s elapsed")  # the thread ticks again after the block


@pytest.mark.mpi  # starts the ticker process
def test_the_ticker_thread_stays_silent_while_the_process_ticks():
    read_end, write_end = os.pipe()
    stream, clock = os.fdopen(write_end, "w"), Clock()
    progress = Progress(NORMAL, stream, interactive=False, clock=clock, log_every_s=0.05, tick_s=0.01)
    phase = progress.phase("partitioning")
    wait_ticks = counted_ticks(phase)
    with phase:
        with phase.outside_the_gil():
            clock.now = 500.0  # the thread's clock only: were it to log, it would say 8m20s
            wait_ticks(5)
            written = drain(read_end)
    stream.close()
    read_to_end(read_end)
    os.close(read_end)
    assert "8m20s" not in written


@pytest.mark.parametrize("line, step", [
    ("*                                Coarsening...                                 * ", "coarsening"),
    ("*                           Initial Partitioning...                            *", "initial partitioning"),
    ("*                             Partitioning Result                              * ", None),
    ("Coarsening...", None),
    ("# HNs: 4096  # HEs: 4096  # pins: 32781", None),
])
def test_the_steps_of_mtkahypars_log(line, step):
    assert tool_step(line) == step


def banner(text: str) -> list[str]:
    """A step's banner as Mt-KaHyPar prints it: the text centred in a box of asterisks."""
    return ["*" * 80, f"*{text:^78}*", "*" * 80]


MTKAHYPAR_LOG = [
    "*" * 79, "*                            Partitioning Context                             *", "*" * 79,
    "Partitioning Parameters:", "  Preset:                             quality",
    "  Number of V-Cycles:                 2", "  Ignore HE Size Threshold:           1000",
    *banner("Input"), "# HNs: 4096  # HEs: 4096  # pins: 32781",
    *banner("Preprocessing..."), *banner("Coarsening..."), *banner("Initial Partitioning..."),
    *banner("Local Search..."),
    *banner("V-Cycle  1"), *banner("Coarsening..."), *banner("Initial Partitioning..."), *banner("Local Search..."),
    *banner("V-Cycle  2"), *banner("Coarsening..."), *banner("Initial Partitioning..."), *banner("Local Search..."),
    *banner("Partitioning Result"),
]
"""Mt-KaHyPar's log with 2 V-cycles, its lines as it prints them (context, banners), the rest left out."""


def test_the_progress_line_says_which_pass_of_mtkahypars_v_cycles_it_is_in():
    """The steps come round once per V-cycle: each is shown with its pass, so that the line says how far it got."""
    log, shown = ToolLog(), []
    for line in MTKAHYPAR_LOG:
        if log.read(line):
            shown.append(log.shown())
    assert shown == ["pass 1 of 3, preprocessing", "pass 1 of 3, coarsening", "pass 1 of 3, initial partitioning",
                     "pass 1 of 3, local search", "pass 2 of 3, coarsening", "pass 2 of 3, initial partitioning",
                     "pass 2 of 3, local search", "pass 3 of 3, coarsening", "pass 3 of 3, initial partitioning",
                     "pass 3 of 3, local search"]


def test_without_v_cycles_the_step_is_shown_alone():
    log = ToolLog()
    for line in ["  Number of V-Cycles:                 0", *banner("Coarsening...")]:
        log.read(line)
    assert log.shown() == "coarsening"


@pytest.mark.mpi  # starts the partition command, whose ticker process reads Mt-KaHyPar's own log
def test_a_logged_hypergraph_partition_counts_mtkahypars_passes(tmp_path):
    """The auto preset runs 5 V-cycles on a small graph (quality + 5 V-cycles): the log file shows passes 1 to 6."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(tmp_path / "log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "distgcn", "partition", "synthetic:sbm,n=2000,features=8",
                               "--parts", "2", "--model", "hypergraph", "--out", str(tmp_path / "p2")],
                              stdout=subprocess.DEVNULL, stderr=log, env=env, timeout=300)
    text = (tmp_path / "log").read_text()
    assert done.returncode == 0, text
    passes = re.findall(r"partitioning \(hypergraph, P=2\): pass (\d) of 6, (\w[\w ]*), [\d.]+s elapsed$", text, re.M)
    assert {number for number, _ in passes} == {"1", "2", "3", "4", "5", "6"}, text
    assert [int(number) for number, _ in passes] == sorted(int(number) for number, _ in passes)


@pytest.mark.parametrize("interactive, shown", [(False, "2026-01-02 03:04:05 partitioning: coarsening, 7.0s elapsed\n"),
                                                (True, "\r\033[Kpartitioning: coarsening, 7.0s elapsed")])
def test_a_step_is_shown_at_once_and_with_every_later_line(interactive, shown):
    progress, stream, clock = make(interactive=interactive)
    with progress.phase("partitioning") as phase:
        clock.now = 7.0
        phase.show_step("coarsening")
        assert stream.getvalue().endswith(shown)
        clock.now = 40.0
        phase.tick()
        assert "partitioning: coarsening, 40.0s elapsed" in stream.getvalue()


def test_without_a_ticker_process_c_stdout_stays_where_it_was():
    with c_stdout_to_ticker() as shown:
        assert shown is False


@pytest.mark.mpi  # starts the ticker process
def test_the_ticker_process_shows_the_step_the_c_code_prints_on_stdout():
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    progress = Progress(NORMAL, stream, interactive=False, log_every_s=600, tick_s=0.01)
    stdout_before = os.fstat(1)
    step_line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d partitioning: coarsening, \d+\.\ds elapsed$", re.M)
    with progress.phase("partitioning") as phase:
        with phase.outside_the_gil():
            drain(read_end)  # the start of the phase; the process logs nothing more for 600 s unless told a step
            with c_stdout_to_ticker() as shown:
                assert shown is True
                os.write(1, b"# pins: 32781\n*      Coarsening...      *\n")  # as C code writes: on the descriptor
                assert poll_holding_the_gil(read_end, 60), "the step was not shown while the GIL was held"
            written, deadline = "", time.monotonic() + 30
            while not step_line.search(written) and time.monotonic() < deadline:
                written += drain(read_end)
                time.sleep(0.01)
    assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (stdout_before.st_dev, stdout_before.st_ino)
    stream.close()
    read_to_end(read_end)
    os.close(read_end)
    assert step_line.search(written), written
    assert "pins" not in written
