"""An emulated cluster on one machine: N node namespaces on one switch, each link shaped to a chosen rate.

Each node is a Linux network namespace with one interface, ``dg0``, joined by a
veth pair to a bridge that lives in a separate "switch" namespace; the bridge
also carries the launcher's address. ``tc``'s token bucket (``tbf``) shapes
both directions of every node's link, so a node sends and receives at most the
link rate, as behind one switch port. Nothing is added to the machine's own
namespace: deleting the namespaces removes every interface, address and qdisc.

MPI ranks start in the nodes through Hydra's ssh launcher, whose "ssh" is
:data:`LAUNCHER` (``emulated_cluster.py exec``): it runs the proxy in the
node's namespace under its own hostname (``unshare --uts``), so MPICH treats
each namespace as a node and uses its network module between them. UCX is told
to use TCP on ``dg0`` only (``UCX_TLS=tcp,self``, ``UCX_NET_DEVICES=dg0``):
otherwise it notices that every rank shares one kernel and moves data through
shared memory, bypassing the links. Latency cannot be added (this kernel has no
``netem``), so the links add bandwidth limits only.

Command line (as root)::

    python benchmarks/cluster/emulated_cluster.py up --nodes 4 --rate 1gbit --name demo
    python benchmarks/cluster/emulated_cluster.py mpiexec --name demo -n 4 -- distgcn train ...
    python benchmarks/cluster/emulated_cluster.py rate --name demo 100mbit
    python benchmarks/cluster/emulated_cluster.py down --name demo

or, in Python, ``with EmulatedCluster(nodes=4, rate="1gbit") as cluster: cluster.mpiexec_command(...)``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "dgc"
"""Every namespace this module makes is named ``dgc<owner pid>-<cluster>-<node>`` (or ``-sw`` for the switch)."""
INTERFACE = "dg0"
LAUNCHER = Path(__file__).resolve()
SOURCE_DIR = LAUNCHER.parent
STATE_DIR = Path(os.environ.get("DISTGCN_CLUSTER_STATE", "/run/distgcn-clusters"))
"""Where a cluster made from the command line records itself, so that later commands find it."""
RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$", re.IGNORECASE)
BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
MPI_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": INTERFACE, "GLOO_SOCKET_IFNAME": INTERFACE}
"""Environment every rank gets: TCP over the shaped link only (UCX for MPICH, gloo for torch.distributed)."""


class ClusterError(RuntimeError):
    """The machine cannot make the cluster (not root, no ``ip``/``tc``, no namespaces) or a command failed."""


def rate_bits(rate: str) -> float:
    """``100mbit`` → 1e8 bits per second (tc's decimal units)."""
    match = RATE.match(rate.strip())
    if not match:
        raise ClusterError(f"link rate {rate!r}: give a number and bit, kbit, mbit or gbit (for example 100mbit)")
    return float(match.group(1)) * BITS[match.group(2).lower()]


def missing_requirements() -> str | None:
    """Why this machine cannot make an emulated cluster, or None."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces and tc)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs `{tool}` (Debian: iproute2, util-linux)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"network namespaces are not allowed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def _namespaces() -> list[str]:
    listing = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _kill_namespace(namespace: str) -> None:
    """Kill every process in ``namespace``, then delete it (its interfaces and qdiscs go with it)."""
    for _ in range(50):
        pids = [int(p) for p in _run("ip", "netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    _run("ip", "netns", "del", namespace, check=False)


def remove_orphans() -> list[str]:
    """Delete the namespaces of clusters whose owner process has died (a run killed before its teardown)."""
    removed = []
    for namespace in _namespaces():
        match = re.match(rf"^{PREFIX}(\d+)-", namespace)
        if match and not _alive(int(match.group(1))):
            _kill_namespace(namespace)
            removed.append(namespace)
    for launcher in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-sw-ssh"):
        match = re.match(rf"^{PREFIX}(\d+)-", launcher.name)
        if match and not _alive(int(match.group(1))):
            launcher.unlink(missing_ok=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class EmulatedCluster:
    """``nodes`` namespaces on one bridge, every link shaped to ``rate`` (None: unshaped veth)."""

    nodes: int
    rate: str | None = None
    name: str = "c"
    owner: int = field(default_factory=os.getpid)
    subnet: int = 77
    """The cluster's addresses are 10.<subnet>.0.<node + 1>; the switch is 10.<subnet>.0.254."""

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 200:
            raise ClusterError(f"--nodes {self.nodes}: give 1 to 200 nodes")
        if not re.fullmatch(r"[a-z0-9]{1,8}", self.name):
            raise ClusterError(f"--name {self.name!r}: 1 to 8 lower-case letters or digits")
        if self.rate is not None:
            rate_bits(self.rate)

    # -- names and addresses
    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.owner}-{self.name}-sw"

    def node(self, index: int) -> str:
        return f"{PREFIX}{self.owner}-{self.name}-{index}"

    def address(self, index: int) -> str:
        return f"10.{self.subnet}.0.{index + 1}"

    @property
    def switch_address(self) -> str:
        return f"10.{self.subnet}.0.254"

    def hostname(self, index: int) -> str:
        return f"{self.name}-node{index}"

    # -- life cycle
    def up(self) -> EmulatedCluster:
        """Make the switch and the nodes, and shape every link; on any failure remove what was made."""
        remove_orphans()
        taken = {self.switch, *map(self.node, range(self.nodes))} & set(_namespaces())
        if taken:
            raise ClusterError(f"cluster {self.name} exists already ({', '.join(sorted(taken))}): take it down first")
        try:
            _run("ip", "netns", "add", self.switch)
            _run("ip", "-n", self.switch, "link", "add", INTERFACE, "type", "bridge")
            _run("ip", "-n", self.switch, "addr", "add", f"{self.switch_address}/24", "dev", INTERFACE)
            _run("ip", "-n", self.switch, "link", "set", INTERFACE, "up")
            _run("ip", "-n", self.switch, "link", "set", "lo", "up")
            for i in range(self.nodes):
                node, port = self.node(i), f"p{i}"
                _run("ip", "netns", "add", node)
                _run("ip", "link", "add", "dgcveth", "netns", node, "type", "veth", "peer", "name", port,
                     "netns", self.switch)
                _run("ip", "-n", node, "link", "set", "dgcveth", "name", INTERFACE)
                _run("ip", "-n", node, "addr", "add", f"{self.address(i)}/24", "dev", INTERFACE)
                _run("ip", "-n", node, "link", "set", INTERFACE, "up")
                _run("ip", "-n", node, "link", "set", "lo", "up")
                _run("ip", "-n", self.switch, "link", "set", port, "master", INTERFACE)
                _run("ip", "-n", self.switch, "link", "set", port, "up")
            self.set_rate(self.rate)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process in the cluster's namespaces and delete them; safe to call twice."""
        for i in range(self.nodes):
            _kill_namespace(self.node(i))
        _kill_namespace(self.switch)
        (Path(tempfile.gettempdir()) / f"{self.switch}-ssh").unlink(missing_ok=True)

    def __enter__(self) -> EmulatedCluster:
        """Up, and down again however the block ends: an exception, SIGTERM or SIGHUP (turned into SystemExit
        while the block runs, in the main thread), or the interpreter's exit."""
        self._handlers = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self._handlers[signum] = signal.signal(signum, _exit_on_signal)
        atexit.register(self.down)
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.down()
        finally:
            atexit.unregister(self.down)
            for signum, handler in self._handlers.items():
                signal.signal(signum, handler)

    def set_rate(self, rate: str | None) -> None:
        """Shape both directions of every node's link to ``rate`` (None: remove the shaping)."""
        if rate is not None:
            rate_bits(rate)
        self.rate = rate
        for i in range(self.nodes):
            for namespace, device in ((self.node(i), INTERFACE), (self.switch, f"p{i}")):
                _run("tc", "-n", namespace, "qdisc", "del", "dev", device, "root", check=False)
                if rate is not None:
                    bits = rate_bits(rate)
                    _run("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate,
                         "burst", str(_burst_bytes(bits)), "peakrate", f"{int(bits * PEAK)}bit", "mtu", str(PEAK_MTU),
                         "latency", "200ms")

    # -- starting ranks
    def exec_command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run on node ``index``: in its namespace, under its own hostname."""
        return ["ip", "netns", "exec", self.node(index), "unshare", "--uts", "sh", "-c",
                f"hostname {self.hostname(index)} && exec {shlex.join(argv)}"]

    def mpiexec_command(self, mpiexec: str, ranks: int, argv: list[str], ranks_per_node: int = 1,
                        env: dict[str, str] | None = None) -> list[str]:
        """A Hydra ``mpiexec`` started on the switch that places ``ranks_per_node`` ranks on each node in turn."""
        nodes = -(-ranks // ranks_per_node)
        if nodes > self.nodes:
            raise ClusterError(f"{ranks} ranks at {ranks_per_node} per node need {nodes} nodes; the cluster has "
                               f"{self.nodes}")
        hosts = ",".join(f"{self.address(i)}:{ranks_per_node}" for i in range(nodes))
        variables = {**MPI_ENV, **(env or {})}
        exports = [arg for key, value in variables.items() for arg in ("-genv", key, value)]
        return ["ip", "netns", "exec", self.switch, mpiexec, "-iface", INTERFACE, "-launcher", "ssh",
                "-launcher-exec", str(self._write_launcher()), "-hosts", hosts, *exports, "-n", str(ranks), *argv]

    def _write_launcher(self) -> Path:
        """Hydra runs its "ssh" by path, without arguments: a script that calls ``exec`` for this cluster."""
        path = Path(tempfile.gettempdir()) / f"{self.switch}-ssh"
        if not path.exists():
            path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(LAUNCHER))} exec "
                            f"--owner {self.owner} --name {self.name} --subnet {self.subnet} -- \"$@\"\n")
            path.chmod(0o755)
        return path

    def torchrun_commands(self, torchrun: list[str], nodes: int, argv: list[str], port: int = 29511,
                          procs_per_node: int = 1) -> list[list[str]]:
        """One torchrun per node (gloo over the shaped links), node 0 the rendezvous host."""
        commands = []
        for i in range(nodes):
            launch = [*torchrun, f"--nnodes={nodes}", f"--node-rank={i}", f"--nproc-per-node={procs_per_node}",
                      f"--master-addr={self.address(0)}", f"--master-port={port}", *argv]
            commands.append(self.exec_command(i, ["env", *(f"{k}={v}" for k, v in MPI_ENV.items()), *launch]))
        return commands

    def node_of_address(self, host: str) -> int:
        prefix = f"10.{self.subnet}.0."
        if not host.startswith(prefix) or not host[len(prefix):].isdigit():
            raise ClusterError(f"{host}: not an address of cluster {self.name}")
        index = int(host[len(prefix):]) - 1
        if not 0 <= index < self.nodes:
            raise ClusterError(f"{host}: cluster {self.name} has no such node")
        return index

    # -- the command line's record of a cluster
    def save(self) -> Path:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path = STATE_DIR / f"{self.name}.json"
        path.write_text(json.dumps({"nodes": self.nodes, "rate": self.rate, "name": self.name, "owner": self.owner,
                                    "subnet": self.subnet}))
        return path

    @classmethod
    def load(cls, name: str) -> EmulatedCluster:
        path = STATE_DIR / f"{name}.json"
        if not path.exists():
            raise ClusterError(f"no emulated cluster named {name!r} ({path} does not exist): make it with `up`")
        return cls(**json.loads(path.read_text()))


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _burst_bytes(bits_per_second: float) -> int:
    """The rate bucket's depth: 2 ms of traffic, at least 16 KiB; a shallower one starves a fast link (tbf waits on
    a timer once the bucket is empty). The second bucket (:data:`PEAK`) keeps what the first one saved from leaving
    faster than the link."""
    return max(16 * 1024, int(bits_per_second / 8 * 2e-3))


PEAK = 1.02
"""tbf's peak rate, over the rate: a burst saved in the rate bucket during a pause leaves at most this much faster
than the link, as on a real wire, instead of at the machine's copy speed."""
PEAK_MTU = 70_000
"""The peak bucket's depth: one 64 KiB GSO segment and its headers."""


def _launcher_exec(args: argparse.Namespace) -> int:
    """Hydra's "ssh": ``exec [ssh options] HOST COMMAND...``; run COMMAND on the node whose address is HOST."""
    words = list(args.rest)
    while words and words[0].startswith("-"):
        words.pop(0)
    if len(words) < 2:
        raise ClusterError(f"launcher: expected HOST COMMAND, got {words}")
    cluster = EmulatedCluster(nodes=200, name=args.name, owner=args.owner, subnet=args.subnet)
    host, command = words[0].split(":")[0], " ".join(words[1:])
    index = cluster.node_of_address(host)
    os.execvp("ip", ["ip", "netns", "exec", cluster.node(index), "unshare", "--uts", "sh", "-c",
                     f"hostname {cluster.hostname(index)} && exec sh -c {shlex.quote(command)}"])
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="make a cluster (recorded under the name, for the other commands)")
    up.add_argument("--nodes", type=int, required=True)
    up.add_argument("--rate", help="link rate, as tc writes it: 100mbit, 1gbit, 10gbit (default: unshaped)")
    up.add_argument("--name", default="c")
    up.add_argument("--subnet", type=int, default=77, help="addresses 10.SUBNET.0.x (default: 77)")
    down = commands.add_parser("down", help="remove a cluster made by `up`, its processes and its links")
    down.add_argument("--name", default="c")
    rate = commands.add_parser("rate", help="change the link rate of a cluster made by `up`")
    rate.add_argument("--name", default="c")
    rate.add_argument("rate", help="100mbit, 1gbit, ...; `none` removes the shaping")
    mpiexec = commands.add_parser("mpiexec", help="run `mpiexec -n RANKS -- COMMAND` with the ranks on the nodes")
    mpiexec.add_argument("--name", default="c")
    mpiexec.add_argument("-n", dest="ranks", type=int, required=True)
    mpiexec.add_argument("--per-node", type=int, default=1, help="ranks per node (default: 1)")
    mpiexec.add_argument("rest", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    launcher = commands.add_parser("exec", help="(used by mpiexec as its ssh)")
    launcher.add_argument("--owner", type=int, required=True)
    launcher.add_argument("--name", required=True)
    launcher.add_argument("--subnet", type=int, required=True)
    launcher.add_argument("rest", nargs=argparse.REMAINDER)
    commands.add_parser("clean", help="remove the namespaces of clusters whose owner process has died")
    args = parser.parse_args(argv)
    try:
        if args.command == "exec":
            return _launcher_exec(args)
        if args.command == "clean":
            for namespace in remove_orphans():
                print(f"removed {namespace}")
            return 0
        if args.command == "up":
            reason = missing_requirements()
            if reason:
                raise ClusterError(reason)
            # A command-line cluster outlives this process: its owner is pid 1, which never dies.
            cluster = EmulatedCluster(args.nodes, args.rate, args.name, owner=1, subnet=args.subnet).up()
            print(f"cluster {cluster.name}: {cluster.nodes} nodes at {cluster.rate or 'unshaped'} "
                  f"({cluster.address(0)}..{cluster.address(cluster.nodes - 1)}), recorded in {cluster.save()}")
            return 0
        cluster = EmulatedCluster.load(args.name)
        if args.command == "down":
            cluster.down()
            (STATE_DIR / f"{cluster.name}.json").unlink(missing_ok=True)
            return 0
        if args.command == "rate":
            cluster.set_rate(None if args.rate == "none" else args.rate)
            cluster.save()
            return 0
        rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
        if not rest:
            raise ClusterError("mpiexec: give the command after --")
        mpiexec_path = shutil.which("mpiexec")
        if mpiexec_path is None:
            raise ClusterError("mpiexec not found on PATH")
        return subprocess.call(cluster.mpiexec_command(mpiexec_path, args.ranks, rest, args.per_node))
    except ClusterError as error:
        print(f"emulated_cluster: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
