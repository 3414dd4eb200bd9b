"""The documentation cannot drift from the program.

- docs/cli.md's reference is what argparse says today;
- every ``distgcn ...`` command shown in README.md and docs/ parses with the
  real parser (a renamed flag or a wrong choice fails here);
- the user guide's walkthrough runs as written, on a fresh directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, mpiexec

from distgcn import cli_reference
from distgcn.cli import build_parser

DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]
"""cli.md's usage lines are synopses, not commands; the first test checks that page."""
COMMAND = re.compile(r"(?:^|\s)distgcn\s+(\w+)\b(.*)$")


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell|console)?\n(.*?)```", text, re.S)


def documented_commands() -> Iterator[tuple[str, str]]:
    """(document, 'SUBCOMMAND ARGS...') for every distgcn command in a code block."""
    for doc in DOCS:
        for block in shell_blocks(doc.read_text()):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.split(" # ")[0].strip().removeprefix("$ ")
                if line.startswith("#"):
                    continue
                for segment in re.split(r"&&|;|\|", line):
                    found = COMMAND.search(segment.strip())
                    if found:
                        yield doc.name, found.group(1) + found.group(2)


COMMANDS = list(documented_commands())


def test_cli_reference_is_what_the_parser_says():
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert cli_reference.splice(doc) == doc, "regenerate: python -m distgcn.cli_reference --write docs/cli.md"


def test_commands_were_found():
    assert len(COMMANDS) >= 20 and {"README.md", "user-guide.md"} <= {doc for doc, _ in COMMANDS}


@pytest.mark.parametrize("doc,command", COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_documented_command_parses(doc, command):
    try:
        build_parser().parse_args(shlex.split(command))
    except SystemExit as exc:
        pytest.fail(f"{doc}: 'distgcn {command}' is rejected by the parser (exit {exc.code})")


def walkthrough() -> list[str]:
    text = (ROOT / "docs" / "user-guide.md").read_text()
    block = text.split("<!-- walkthrough: tests/test_docs.py runs this block -->", 1)[1]
    return shell_blocks(block)[0].strip().splitlines()


def test_user_guide_walkthrough_runs_as_written(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    bin_dir = Path(sys.executable).parent
    env["PATH"] = str(bin_dir) + os.pathsep + env.get("PATH", "")
    for line in walkthrough():
        args = shlex.split(line)
        if args[0] == "mpiexec":
            args[0] = mpiexec()
        args = [sys.executable, "-m", "distgcn", *args[1:]] if args[0] == "distgcn" else \
            [*args[:args.index("distgcn")], sys.executable, "-m", "distgcn", *args[args.index("distgcn") + 1:]]
        proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
    epochs = [json.loads(line)["epoch"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert epochs == list(range(1, 41))  # 30, then resumed to 40 with nothing lost or repeated
    assert (tmp_path / "report" / "summary.md").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir())[-1] == "checkpoint-00000040.pt"
