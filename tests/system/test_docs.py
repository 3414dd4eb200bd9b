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
import re
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


REFERENCE_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
"""The pages a user reads; docs/history/ is the lab notebook, whose result files live in git history."""
RESULTS = ROOT / "benchmarks" / "results"


def expand_braces(text: str) -> list[str]:
    """``a-{1,2}.{json,md}`` -> a-1.json, a-1.md, a-2.json, a-2.md (the shell's brace expansion, unnested)."""
    found = re.search(r"\{([^{}]*,[^{}]*)\}", text)
    if not found:
        return [text]
    return [word for choice in found.group(1).split(",")
            for word in expand_braces(text[:found.start()] + choice + text[found.end():])]


def test_shell_blocks_are_the_fenced_blocks_of_commands_only():
    """A ``text`` block of output is no command block, and its closing fence opens none: the prose after it once
    read as commands."""
    text = ("Run:\n\n```bash\ndistgcn stats p2\n```\n\nprints\n\n```text\nthe arrays distgcn allocates\n```\n\n"
            "then `mpiexec -n 2 distgcn train p2`.\n\n- in a list:\n\n  ```\n  distgcn report m.jsonl\n  ```\n")
    assert shell_blocks(text) == ["distgcn stats p2\n", "  distgcn report m.jsonl\n"]


def test_brace_expansion():
    assert expand_braces("a-{1,2}.{json,md}") == ["a-1.json", "a-1.md", "a-2.json", "a-2.md"]


@pytest.mark.parametrize("doc", REFERENCE_DOCS, ids=[doc.name for doc in REFERENCE_DOCS])
def test_links_and_result_files_exist(doc):
    """Every relative link, and every benchmarks/results/ file a page names, is in the tree."""
    text = doc.read_text()
    missing = [target for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
               if "://" not in target and not (doc.parent / target).exists()]
    missing += [path for cited in re.findall(r"benchmarks/results/[\w.{},-]+", text)
                for path in expand_braces(cited.rstrip(".,")) if not (ROOT / path).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} names files that are not in the tree: {missing}"


def test_kept_results_are_few_and_cited():
    """benchmarks/results holds only what a reference page cites, under 1 MB: new runs go where their caller says."""
    files = [p for p in RESULTS.iterdir() if p.name != "README.md"]
    assert sum(p.stat().st_size for p in files) < 2**20
    cited = {Path(name).stem for doc in REFERENCE_DOCS for word in re.findall(r"[\w.{},-]+", doc.read_text())
             for name in expand_braces(word) if Path(name).suffix in {".json", ".jsonl", ".md", ".txt"}}
    assert not [p.name for p in files if p.stem not in cited], "cite them from docs/ or git rm them"


def test_benchmarks_never_write_into_the_source_tree_by_default():
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        text = script.read_text()
        assert '/ "results"' not in text and "benchmarks/results" not in text, \
            f"{script.name}: write where the caller says (--results-dir DIR or --out FILE)"


def test_architecture_lists_the_layers_the_dependency_test_enforces():
    """docs/architecture.md's numbered list of packages is tests/helpers/layers.py's LAYERS, in its order."""
    from layers import LAYERS

    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^ ?\d+  (distgcn[\w.]*(?:, distgcn[\w.]*)*)", text, re.M)
    assert [tuple(line.split(", ")) for line in listed] == list(LAYERS)
