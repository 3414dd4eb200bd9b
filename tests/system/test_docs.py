"""The documentation cannot drift from the program.

- docs/cli.md's reference is what argparse says today;
- every ``distgcn ...`` command shown in README.md and docs/ parses with the
  real parser (a renamed flag or a wrong choice fails here), and runs on small
  data (tests/system/test_doc_commands.py);
- the user guide's walkthrough runs as written, on a fresh directory.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, distgcn_in_process, mpiexec
from doc_commands import Shown, shell_blocks, shown_commands

from distgcn.cli import reference as cli_reference
from distgcn.cli.main import build_parser

COMMANDS = list(shown_commands())


def test_cli_reference_is_what_the_parser_says():
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert cli_reference.splice(doc) == doc, "regenerate: python -m distgcn.cli.reference --write docs/cli.md"


def test_commands_were_found():
    assert len(COMMANDS) >= 20 and {"README.md", "user-guide.md"} <= {shown.doc for shown in COMMANDS}


@pytest.mark.parametrize("shown", COMMANDS, ids=[shown.id for shown in COMMANDS])
def test_documented_command_parses(shown: Shown):
    try:
        build_parser().parse_args(shown.args)
    except SystemExit as exc:
        pytest.fail(f"{shown.doc}: 'distgcn {shlex.join(shown.args)}' is rejected by the parser (exit {exc.code})")


def walkthrough() -> list[str]:
    text = (ROOT / "docs" / "user-guide.md").read_text()
    block = text.split("<!-- walkthrough: tests/system/test_docs.py runs this block -->", 1)[1]
    return shell_blocks(block)[0].strip().splitlines()


def test_user_guide_walkthrough_runs_as_written(tmp_path):
    """Its mpiexec lines start mpiexec as written; its single-process lines run in this process."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for line in walkthrough():
        args = shlex.split(line)
        if args[0] == "distgcn":
            proc = distgcn_in_process(args[1:], cwd=tmp_path)
        else:
            assert args[0] == "mpiexec", line
            args = [mpiexec(), *args[1:args.index("distgcn")], sys.executable, "-m", "distgcn",
                    *args[args.index("distgcn") + 1:]]
            proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 41))  # 30, then resumed to 40 with nothing lost or repeated
    assert (tmp_path / "report" / "summary.md").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir())[-1] == "checkpoint-00000040.pt"
