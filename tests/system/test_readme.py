"""The README's quick start: two bash commands, the second is exactly what CI runs."""

from __future__ import annotations

import re

from conftest import ROOT


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^##+ [^\n]*Quick start[^\n]*\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README has no Quick start section"
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section.group(1), re.S)]


def test_quick_start_has_two_commands_and_ci_runs_the_second():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "mpiexec -n 4 distgcn train" in commands[0] and "synthetic:" in commands[0]
    assert "pytest" in commands[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci_lines
