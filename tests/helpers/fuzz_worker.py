"""A long-lived process that runs ``distgcn`` commands for tests/system/test_fuzz_commands.py, under a memory limit.

Starting a process per example would spend seconds importing torch each time; this one imports it once,
then answers one JSON request per line on stdin (``{"args": [...], "cwd": "..."}``) with one JSON line on
stdout: the exit status, what the command printed, its time and how much its peak memory grew. The data
segment (heap and private mappings) is capped at what the process used when ready plus ``LIMIT_MB``
(argv[1]), so that an input that makes distgcn allocate far more than it declares ends in a MemoryError,
which the test sees as a failure, instead of the machine's OOM killer. The command runs as one in-process
rank (tests/conftest.py: distgcn_in_process), as the bad-input cases run.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import traceback
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "helpers"), str(TESTS / "oracles")]  # as pyproject's pytest pythonpath
from conftest import distgcn_in_process  # noqa: E402 - after the path that finds it


def data_bytes() -> int:
    """This process's data segment now (VmData of /proc/self/status), what RLIMIT_DATA counts."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


def _ends(text: str, keep: int = 8000) -> str:
    """``text``, or its first and last ``keep`` characters: a reply stays small, and an error line stays whole."""
    return text if len(text) <= 2 * keep else text[:keep] + "\n[...]\n" + text[-keep:]


def main() -> None:
    limit = int(sys.argv[1]) << 20
    import torch  # noqa: F401 - imported before the cap: what every command needs anyway

    import distgcn.cli.main  # noqa: F401
    import distgcn.training.pipeline  # noqa: F401

    resource.setrlimit(resource.RLIMIT_DATA, (data_bytes() + limit, resource.RLIM_INFINITY))
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        try:
            done = distgcn_in_process(request["args"], cwd=Path(request["cwd"]))
            reply = {"code": done.returncode, "stdout": done.stdout[-4000:], "stderr": _ends(done.stderr)}
        except BaseException:  # noqa: BLE001 - what escaped the command line is the finding
            reply = {"code": None, "stdout": "", "stderr": _ends(traceback.format_exc())}
        reply["seconds"] = time.monotonic() - started
        reply["peak_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
