"""The distgcn commands that README.md and docs/ show, and how the tests run them on small data.

A command is found in a fenced code block, with the launcher in front of it
(``mpiexec -n 4``, ``torchrun ...``, ``srun ...``) and the block's shell
variables (``G="synthetic:..."``) expanded. Each block is one example: its
commands run in order, in a directory of their own.

To run in seconds, a command is shrunk, and only in these ways:
- graphs: a dataset or a placeholder with features (Cora, Facebook, GRAPH) becomes a
  400-vertex SBM; an edge-list file becomes a 300-vertex random one of the same name;
  a synthetic spec keeps its kind with n <= 400 or scale <= 9;
- sizes: --parts caps at 2 (a list keeps its values <= 2), --epochs and --checkpoint-every
  take a tenth (rounded up), --batch-size caps at 50 and --shp-samples at 20; ``calibrate``
  times three graphs of at most 1,200 vertices for 3 epochs;
  launchers start as many ranks as the directory has parts (else at most 2); Slurm
  requests shrink to one node, one CPU and ten minutes (the partition job's default cores come from the
  cluster's sinfo); --out /tmp/X becomes X;
- what a block assumes the reader already has (a partition directory named DIR
  or part2, metrics files p*/metrics.jsonl) is made first from the small SBM.
"""

from __future__ import annotations

import gzip
import math
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT, random_edge_file

DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md")]
"""cli.md's usage lines are synopses, not commands (tests/system/test_docs.py checks that page)."""
SMALL_GRAPH = "synthetic:sbm,n=400,classes=4,features=16,seed=1"
CALIBRATION_GRAPHS = "400:4,400:12,1200:4"
"""``calibrate`` times these small graphs instead of its default ones."""
FEATURED = ("cora_planetoid", "musae_facebook", "GRAPH")
"""Graph arguments that stand for a graph with its own features and labels."""
_DISTGCN = re.compile(r"(?:^|\s)distgcn\s+(\w+)\b(.*)$")
_ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)=(\S+)$")


@dataclass(frozen=True)
class Shown:
    """One distgcn command as a document shows it."""

    doc: str
    block: int
    position: int
    """Its place among the block's distgcn commands."""
    launcher: list[str]
    """What precedes ``distgcn`` (empty when run directly)."""
    args: list[str]
    """The subcommand and its arguments, shell variables expanded."""

    @property
    def id(self) -> str:
        return f"{self.doc}#{self.block}.{self.position}:{' '.join(self.args)[:50]}"


SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
"""The info strings of a fenced block of commands; a ``text`` block (a command's output) is not one."""


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced blocks of commands, each fence at the start of a line (indented in a list item)."""
    return [body for language, body in re.findall(r"^[ \t]*```(\w*)[ \t]*\n(.*?)^[ \t]*```", text, re.S | re.M)
            if language in SHELL_LANGUAGES]


def shown_commands() -> Iterator[Shown]:
    for doc in DOCS:
        for number, block in enumerate(shell_blocks(doc.read_text())):
            variables: dict[str, str] = {}
            position = 0
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = line.split(" # ")[0].strip().removeprefix("$ ")
                if not line or line.startswith("#"):
                    continue
                for segment in re.split(r"&&|;|\|", line):
                    segment = segment.strip()
                    assigned = _ASSIGNMENT.match(segment)
                    if assigned:
                        variables[assigned.group(1)] = shlex.split(assigned.group(2))[0]
                        continue
                    found = _DISTGCN.search(segment)
                    if not found:
                        continue
                    for name, value in variables.items():
                        segment = segment.replace(f"${name}", value)
                    found = _DISTGCN.search(segment)
                    launcher = shlex.split(segment[:found.start(1)].rstrip().removesuffix("distgcn"))
                    yield Shown(doc.name, number, position, launcher, [found.group(1), *shlex.split(found.group(2))])
                    position += 1


def _tenth(value: str) -> str:
    return str(math.ceil(int(value) / 10))


def _parts(value: str) -> str:
    if "," in value:
        return ",".join(p for p in value.split(",") if int(p) <= 2)
    return str(min(int(value), 2))


def _nested(value: str) -> str:
    return shlex.join(shrink_options(shlex.split(value)))


_OPTION_RULES = {
    "--parts": _parts,
    "--epochs": _tenth,
    "--checkpoint-every": _tenth,
    "--batch-size": lambda v: str(min(int(v), 50)),
    "--shp-samples": lambda v: str(min(int(v), 20)),
    "--partition-cpus": lambda v: "1",
    "--cpus-per-task": lambda v: "1",
    "--nodes": lambda v: "1",
    "--time": lambda v: "00:10:00",
    "--train-args": _nested,
    "--partition-args": _nested,
    "--out": lambda v: v.removeprefix("/tmp/"),
    "--graphs": lambda v: CALIBRATION_GRAPHS,
}


def shrink_options(tokens: list[str]) -> list[str]:
    """The options of _OPTION_RULES rewritten, in both ``--opt value`` and ``--opt=value`` forms."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name, eq, value = token.partition("=")
        if name in _OPTION_RULES and eq:
            out.append(f"{name}={_OPTION_RULES[name](value)}")
        elif token in _OPTION_RULES and i + 1 < len(tokens):
            out += [token, _OPTION_RULES[token](tokens[i + 1])]
            i += 1
        else:
            out.append(token)
        i += 1
    return out


def small_graph(source: str, workdir: Path) -> str:
    """The stand-in for a graph argument (see the module docstring)."""
    if source.startswith("synthetic:"):
        source = re.sub(r"\bn=(\d+)", lambda m: f"n={min(int(m.group(1)), 400)}", source)
        return re.sub(r"\bscale=(\d+)", lambda m: f"scale={min(int(m.group(1)), 9)}", source)
    if any(name in source for name in FEATURED):
        return SMALL_GRAPH
    local = workdir / Path(source).name
    if not local.exists():
        text = Path(random_edge_file(workdir / "edges.tmp", n=300, m=1500, seed=5)).read_bytes()
        local.write_bytes(gzip.compress(text) if local.suffix == ".gz" else text)
    return local.name


def shrink(args: list[str], workdir: Path) -> list[str]:
    """A shown command's arguments on small data."""
    args = shrink_options(args)
    if "--graph" in args:
        where = args.index("--graph") + 1
        args[where] = small_graph(args[where], workdir)
    if args[0] in ("partition", "predict") and not (workdir / args[1] / "meta.json").is_file():
        args[1] = small_graph(args[1], workdir)  # a graph; predict may name a directory an earlier command wrote
    if args[0] == "calibrate" and "--graphs" not in args:
        args += ["--graphs", CALIBRATION_GRAPHS, "--epochs", "3"]
    return args
