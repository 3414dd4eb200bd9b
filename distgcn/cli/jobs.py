"""``distgcn jobs``: submit the Slurm templates of ``jobs/`` chained, and collect a scaling study.

The templates take every parameter from the environment. This command sets
those variables in sbatch's own environment (sbatch exports it to the job),
rather than through ``--export=NAME=value``, which splits values on commas
(``--hidden 64,64`` would break). Each training job waits for its partition
job with ``--dependency=afterok`` and is dropped if that job fails
(``--kill-on-invalid-dep=yes``), so one command submits the whole chain.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from distgcn.cli.options import field_options
from distgcn.config import DEFAULT_PARTITION_MODEL, SourceConfig
from distgcn.errors import InputError, resolved
from distgcn.io.metrics_log import read_metrics, steady
from distgcn.io.schema import SPLIT_KEYS

SOURCE_TEMPLATES = Path(__file__).resolve().parents[2] / "jobs"
"""jobs/ of a source checkout (editable install)."""
INSTALLED_TEMPLATES = Path(sys.prefix) / "share" / "distgcn" / "jobs"
"""Where ``pip install`` puts the same files (pyproject.toml's data-files)."""


def default_templates() -> Path:
    """$DISTGCN_JOBS_DIR, else the checkout's jobs/, else the installed copy."""
    if "DISTGCN_JOBS_DIR" in os.environ:
        return Path(os.environ["DISTGCN_JOBS_DIR"])
    return SOURCE_TEMPLATES if SOURCE_TEMPLATES.is_dir() else INSTALLED_TEMPLATES


# the variables this command sets; any left in the caller's environment would leak into the jobs
MANAGED = ("DISTGCN_DIR", "DISTGCN_GRAPH", "DISTGCN_PARTS", "DISTGCN_OUT", "DISTGCN_MODEL",
           "DISTGCN_PARTITION_ARGS", "DISTGCN_TRAIN_ARGS", "DISTGCN_METRICS", "DISTGCN_RESULTS")
METRICS_NAME = re.compile(r"metrics-p(\d+)\.jsonl$")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _part_list(text: str) -> list[int]:
    values = [_positive(part.strip()) for part in text.split(",") if part.strip()]
    if not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct positive integers separated by commas, got {text!r}")
    return values


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``distgcn jobs submit|scaling|collect``."""
    jobs = commands.add_parser("jobs", help="submit Slurm jobs (partition, then training) and collect results",
                               description="Submit the Slurm templates in jobs/ (see docs/cluster.md).")
    sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    submit = sub.add_parser("submit", help="a partition job, then a training job that waits for it",
                            description="Submit jobs/partition.sbatch, then jobs/train-cpu.sbatch with "
                                        "--dependency=afterok on it; print both job ids.")
    submit.add_argument("--parts", type=_positive, required=True, metavar="P", help="MPI ranks = parts")
    submit.add_argument("--out", required=True, metavar="DIR", help="partition directory to write and train on")
    submit.add_argument("--metrics", metavar="FILE",
                        help="per-epoch metrics file (default: distgcn-JOBID.jsonl in this directory)")
    _add_common(submit)

    scaling = sub.add_parser("scaling", help="strong scaling: a partition array, then a training array",
                             description="Submit jobs/partition.sbatch and jobs/scaling.sbatch as job arrays "
                                         "(one element per P), the second after the first (afterok).")
    scaling.add_argument("--parts", type=_part_list, required=True, metavar="P,P,...",
                         help="part counts, e.g. 1,2,4,8")
    scaling.add_argument("--out", required=True, metavar="PATTERN",
                         help="partition directories, with {P} for the part count (e.g. parts/p{P})")
    scaling.add_argument("--results", required=True, metavar="DIR",
                         help="where each element writes metrics-pP.jsonl")
    scaling.add_argument("--concurrent", type=_positive, default=1, metavar="N",
                         help="array elements running at once (default: 1, so timings do not interfere)")
    _add_common(scaling)

    collect = sub.add_parser("collect", help="the strong-scaling table from metrics files",
                             description="Read metrics files (a directory of metrics-pP.jsonl, or files) "
                                         "and print the strong-scaling table.")
    collect.add_argument("inputs", nargs="+", metavar="PATH", help="a results directory or metrics files")
    collect.add_argument("--json", action="store_true", help="one JSON list instead of a markdown table")
    return jobs


def run(args: argparse.Namespace) -> int:
    return {"submit": run_submit, "scaling": run_scaling, "collect": run_collect}[args.jobs_command](args)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graph", required=True, metavar="GRAPH", help="graph file or directory, or synthetic:...")
    parser.add_argument("--model", **field_options(SourceConfig, "partition"),
                        help=f"partition model (default: {DEFAULT_PARTITION_MODEL})")
    parser.add_argument("--partition-args", default="", metavar="ARGS",
                        help="more 'distgcn partition' arguments, given with '=': "
                             "--partition-args='--symmetrize --preset default'")
    parser.add_argument("--partition-cpus", type=_positive, metavar="C",
                        help=f"cores of the partition job (default: the most cores of one node in the Slurm "
                             f"partition the jobs go to, as sinfo reports them, at most {MAX_PARTITION_CPUS})")
    parser.add_argument("--nodes", type=_positive, default=1, metavar="N", help="training nodes (default: 1)")
    parser.add_argument("--cpus-per-task", type=_positive, default=1, metavar="C",
                        help="threads per rank (default: 1)")
    parser.add_argument("--time", default="01:00:00", help="time limit of each job (default: 01:00:00)")
    parser.add_argument("--train-args", default="", metavar="ARGS",
                        help="more 'distgcn train' arguments, given with '=': "
                             "--train-args='--epochs 100 --hidden 64,64'")
    parser.add_argument("--sbatch-args", default="", metavar="ARGS",
                        help="more sbatch options for every job, given with '=': "
                             "--sbatch-args='--account=A --qos=normal'")
    parser.add_argument("--requeue", action="store_true",
                        help="let Slurm requeue the training job after a node failure or preemption")
    parser.add_argument("--templates", type=Path, default=None,
                        metavar="DIR", help="directory of the .sbatch templates (default: $DISTGCN_JOBS_DIR, "
                                            "else jobs/ of the source checkout, else the copy installed in "
                                            "PREFIX/share/distgcn/jobs)")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch commands, submit nothing")


def _template(args: argparse.Namespace, name: str) -> Path:
    path = (args.templates or default_templates()) / name
    if not path.is_file():
        raise InputError("job template not found (give --templates DIR or set DISTGCN_JOBS_DIR)", path=path)
    return resolved(path)


def _sbatch(options: list[str], script: Path, variables: dict[str, str], dry_run: bool) -> str:
    """Submit one script with ``variables`` in sbatch's environment; return the job id."""
    command = ["sbatch", "--parsable", "--export=ALL", *options, str(script)]
    if dry_run:
        print(" ".join([*(f"{k}={shlex.quote(v)}" for k, v in variables.items()), *map(shlex.quote, command)]))
        return f"<{script.stem}>"
    if shutil.which("sbatch") is None:
        raise InputError("sbatch not found: run this on a Slurm login node")
    env = {k: v for k, v in os.environ.items() if k not in MANAGED}
    env.update(variables)
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise InputError(f"sbatch {script.name} failed: {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


def _resources(args: argparse.Namespace, tasks: int, job_name: str) -> list[str]:
    options = [f"--job-name={job_name}", f"--nodes={args.nodes}", f"--ntasks={tasks}",
               f"--ntasks-per-node={math.ceil(tasks / args.nodes)}", f"--cpus-per-task={args.cpus_per_task}",
               f"--time={args.time}", *shlex.split(args.sbatch_args)]
    return [*options, "--requeue"] if args.requeue else options


MAX_PARTITION_CPUS = 16
"""The partitioners' threads gain little beyond this on graphs that fit one node (docs/partitioning.md)."""


def _slurm_partition(sbatch_args: list[str]) -> str | None:
    """The partition named in --sbatch-args (``--partition=P``, ``--partition P``, ``-p P``, ``-pP``), if any."""
    for i, arg in enumerate(sbatch_args):
        if arg in ("-p", "--partition") and i + 1 < len(sbatch_args):
            return sbatch_args[i + 1]
        for prefix in ("--partition=", "-p"):
            if arg.startswith(prefix) and len(arg) > len(prefix):
                return arg[len(prefix):]
    return None


def node_cpus(partition: str | None) -> int:
    """The most CPUs of one node in ``partition`` (Slurm's default partition when None), from sinfo.

    A request for more cores than any node has stays pending forever, so this is what a default may ask for.
    """
    if shutil.which("sinfo") is None:
        raise InputError("sinfo not found: give --partition-cpus, or run this on a Slurm login node")
    partition = partition or os.environ.get("SBATCH_PARTITION") or _default_partition()
    command = ["sinfo", "--noheader", "--Node", "--format=%c", *(["--partition", partition] if partition else [])]
    result = subprocess.run(command, capture_output=True, text=True)
    counts = [int(line) for line in result.stdout.split() if line.isdigit()]
    if result.returncode != 0 or not counts:
        where = f"partition {partition}" if partition else "the default partition"
        raise InputError(f"sinfo lists no node of {where} ({result.stderr.strip() or 'no output'}): "
                         "give --partition-cpus")
    return max(counts)


def _default_partition() -> str | None:
    """The partition sinfo marks with '*' (where sbatch sends a job that names none); None if none is marked."""
    listed = subprocess.run(["sinfo", "--noheader", "--format=%P"], capture_output=True, text=True).stdout.split()
    return next((name[:-1] for name in listed if name.endswith("*")), None)


def _partition_options(args: argparse.Namespace) -> list[str]:
    sbatch_args = shlex.split(args.sbatch_args)
    cpus = args.partition_cpus or _default_partition_cpus(_slurm_partition(sbatch_args), args.dry_run)
    return ["--job-name=distgcn-partition", "--nodes=1", "--ntasks=1", f"--cpus-per-task={cpus}",
            f"--time={args.time}", *sbatch_args]


def _default_partition_cpus(partition: str | None, dry_run: bool) -> int:
    """The partition job's cores without --partition-cpus: the largest node's, at most MAX_PARTITION_CPUS.

    A dry run where sinfo is not (a laptop, to see the commands before logging in) shows the cap, and says so in
    a comment line of its output, which stays a script: it cannot know the nodes, and the cap is what it would
    ask for on any node that has that many cores.
    """
    if dry_run and shutil.which("sinfo") is None:
        print(f"# sinfo not found: the partition job's --cpus-per-task is shown as {MAX_PARTITION_CPUS}, the most "
              "it asks for; submitted on the cluster it asks for the largest node's cores, at most that, unless "
              "--partition-cpus is given")
        return MAX_PARTITION_CPUS
    return min(MAX_PARTITION_CPUS, node_cpus(partition))


def _check_nodes(args: argparse.Namespace, tasks: int) -> None:
    if args.nodes > tasks:
        raise InputError(f"--nodes {args.nodes} is more than the {tasks} rank(s) to place")


def run_submit(args: argparse.Namespace) -> int:
    _check_nodes(args, args.parts)
    out = str(resolved(args.out))
    part_vars = {"DISTGCN_GRAPH": args.graph, "DISTGCN_PARTS": str(args.parts), "DISTGCN_OUT": out,
                 "DISTGCN_MODEL": args.model, "DISTGCN_PARTITION_ARGS": args.partition_args}
    part_id = _sbatch(_partition_options(args), _template(args, "partition.sbatch"), part_vars, args.dry_run)
    train_vars = {"DISTGCN_DIR": out, "DISTGCN_TRAIN_ARGS": args.train_args}
    if args.metrics:
        train_vars["DISTGCN_METRICS"] = str(resolved(args.metrics))
    chain = [f"--dependency=afterok:{part_id}", "--kill-on-invalid-dep=yes"]
    train_id = _sbatch([*_resources(args, args.parts, "distgcn-train"), *chain],
                       _template(args, "train-cpu.sbatch"), train_vars, args.dry_run)
    print(f"partition job {part_id}, training job {train_id} (runs after {part_id} succeeds)")
    return 0


def run_scaling(args: argparse.Namespace) -> int:
    if "{P}" not in args.out:
        raise InputError(f"--out must contain {{P}} (one partition directory per part count), got {args.out!r}")
    _check_nodes(args, max(args.parts))
    parts = " ".join(str(p) for p in args.parts)
    pattern = str(resolved(args.out))
    array = f"--array=0-{len(args.parts) - 1}"
    part_vars = {"DISTGCN_GRAPH": args.graph, "DISTGCN_PARTS": parts, "DISTGCN_OUT": pattern,
                 "DISTGCN_MODEL": args.model, "DISTGCN_PARTITION_ARGS": args.partition_args}
    part_id = _sbatch([*_partition_options(args), array], _template(args, "partition.sbatch"), part_vars,
                      args.dry_run)
    train_vars = {"DISTGCN_PARTS": parts, "DISTGCN_DIR": pattern, "DISTGCN_TRAIN_ARGS": args.train_args,
                  "DISTGCN_RESULTS": str(resolved(args.results))}
    options = [*_resources(args, max(args.parts), "distgcn-scaling"), f"{array}%{args.concurrent}",
               f"--dependency=afterok:{part_id}", "--kill-on-invalid-dep=yes"]
    train_id = _sbatch(options, _template(args, "scaling.sbatch"), train_vars, args.dry_run)
    print(f"partition array {part_id}, scaling array {train_id} (runs after every element of {part_id} "
          f"succeeds); then: distgcn jobs collect {args.results}")
    return 0


def _metrics_files(inputs: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if METRICS_NAME.search(p.name))
            if not found:
                raise InputError("no metrics-pP.jsonl files in this directory", path=path)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError("no such file or directory", path=path)
    return files


def load_metrics(path: Path) -> tuple[int, list[dict]]:
    """The rank count (from the run header on the first line, else the name metrics-pP) and the epochs."""
    header, records = read_metrics(path)
    if not records:
        raise InputError("no epochs recorded (did the job fail?)", path=path)
    from_header = header.get("ranks")
    named = METRICS_NAME.search(path.name)
    from_name = int(named.group(1)) if named else None
    if from_header is not None and from_name is not None and from_header != from_name:
        raise InputError(f"the run header says {from_header} ranks but the name says {from_name}", path=path)
    ranks = from_header if from_header is not None else from_name
    if ranks is None:
        raise InputError("rank count unknown: no run header and the name is not metrics-pP.jsonl", path=path)
    return int(ranks), records


def scaling_table(runs: dict[int, list[dict]]) -> list[dict]:
    """One row per rank count: steady epoch time, its split, speedup and efficiency against the fewest ranks."""
    base = min(runs)
    base_time = steady(runs[base], "epoch_s")
    rows = []
    for ranks in sorted(runs):
        records = runs[ranks]
        epoch = steady(records, "epoch_s")
        speedup = base_time / epoch if epoch > 0 else math.inf
        last = records[-1]
        rows.append({"ranks": ranks, "epochs": len(records), "epoch_s": epoch,
                     **{key: _split(records, key) for key in SPLIT_KEYS},
                     "speedup": speedup,
                     "efficiency": speedup * base / ranks, "halo_rows": last["halo_rows"],
                     "messages": last["messages"], "test_acc": last["test_acc"]})
    return rows


def _split(records: list[dict], key: str) -> float:
    """A part of the epoch's time as the slowest rank spent it (``slowest_KEY``: the parts add up to its epoch);
    metrics files written before those keys give the maximum over ranks, whose parts can add up to more."""
    slowest = f"slowest_{key}"
    return steady(records, slowest if all(slowest in record for record in records) else key)


def format_table(rows: list[dict]) -> str:
    base = rows[0]["ranks"]
    lines = [f"| P | epochs | epoch (ms) | compute (ms) | halo wait (ms) | allreduce (ms) | speedup vs P={base} "
             f"| efficiency | halo rows/epoch | messages/epoch | test acc |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['ranks']} | {r['epochs']} | {r['epoch_s'] * 1e3:.1f} | {r['compute_s'] * 1e3:.1f} | "
                     f"{r['comm_wait_s'] * 1e3:.1f} | {r['allreduce_s'] * 1e3:.1f} | {r['speedup']:.2f} | "
                     f"{r['efficiency']:.2f} | {r['halo_rows']} | {r['messages']} | {r['test_acc']:.4f} |")
    return "\n".join(lines)


def run_collect(args: argparse.Namespace) -> int:
    runs: dict[int, list[dict]] = {}
    sources: dict[int, Path] = {}
    for path in _metrics_files(args.inputs):
        ranks, records = load_metrics(path)
        if ranks in runs:
            raise InputError(f"a second run on {ranks} ranks (the first is {sources[ranks]})", path=path)
        runs[ranks], sources[ranks] = records, path
    rows = scaling_table(runs)
    print(json.dumps(rows, indent=1) if args.json else format_table(rows))
    return 0
