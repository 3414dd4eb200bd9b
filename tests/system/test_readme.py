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
    assert "pytest" in commands[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci_lines


def test_the_first_command_fits_a_two_core_laptop_and_installs_what_the_guide_uses_next():
    """2 ranks (4 oversubscribe 2 cores and warn), and the extras of every command the user guide's workflow runs:
    ``report`` draws with matplotlib."""
    first = quick_start_commands()[0]
    assert "mpiexec -n 2 distgcn train" in first and "synthetic:" in first
    extras = set(re.search(r"pip install '\.\[([\w,]+)\]'", first).group(1).split(","))
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    walkthrough = guide.split("<!-- walkthrough: tests/system/test_docs.py runs this block -->", 1)[1]
    assert "distgcn report" in walkthrough.split("```", 2)[1]
    assert {"mpich", "report"} <= extras


def test_ci_installs_the_pinned_torch_within_the_range_users_get():
    """The package allows a range (a CUDA build or a site's torch installs); CI pins one release by a constraints
    file, and that release is in the range."""
    import tomllib
    from packaging.requirements import Requirement

    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(Requirement(d) for d in dependencies if Requirement(d).name == "torch")
    assert len(torch.specifier) > 1 or not str(torch.specifier).startswith("==")  # a range, not one release
    pinned = [Requirement(line) for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    (pin,) = [r for r in pinned if r.name == "torch"]
    (version,) = [spec.version for spec in pin.specifier if spec.operator == "=="]
    assert torch.specifier.contains(version)
    assert "pip install -c .ci/constraints.txt '.[mpich,test]'" in (ROOT / ".ci" / "run").read_text()
    shown = next(d for d in dependencies if Requirement(d).name == "torch").replace(" ", "")  # as pyproject has it
    for doc in (ROOT / "README.md", ROOT / "docs" / "user-guide.md"):
        assert f"`{shown}`" in doc.read_text(), f"{doc.name} does not state the range {shown}"
    assert f"{version}, the CPU build,\n  is what CI tests" in (ROOT / "docs" / "user-guide.md").read_text()
