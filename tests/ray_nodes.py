"""Loopback Ray nodes that tests start and stop themselves, without touching any other Ray on the machine.

Each node runs ``ray start --block`` in its own session (process group) with its own ``--temp-dir``.
Stopping a node sends SIGTERM to its ``ray start --block``, which stops the node's daemons; whatever is
left is then killed: that process group, then any process whose command line names the node's temporary
directory (Ray's daemons carry their session directory in their arguments). Nothing is stopped by name
and ``ray stop`` is never called: it would stop every Ray instance of the user.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RayNode:
    process: subprocess.Popen
    temp_dir: str

    def pids(self) -> list[int]:
        """Processes of this node: those whose command line names its temporary directory."""
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.temp_dir in cmdline:
                out.append(int(entry.name))
        return out

    def kill(self) -> None:
        """SIGKILL the whole node at once (a node dying mid-sweep); ``stop`` still cleans up afterwards."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to ``ray start --block`` alone: it shuts its own daemons down in order, in a second or two. A SIGTERM
        to its whole group at once leaves it waiting for daemons that are gone (it exits only at the SIGKILL), so the
        group and the node's other processes are signalled only when that fails, or when the node was killed."""
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if self._wait(timeout):
                shutil.rmtree(self.temp_dir, ignore_errors=True)
                return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if self._wait(wait):
                break
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _wait(self, timeout: float) -> bool:
        """Until the node's every process is gone (True) or ``timeout`` seconds pass (False)."""
        deadline = time.time() + timeout
        while self.process.poll() is None or self.pids():
            if time.time() >= deadline:
                return False
            time.sleep(0.2)
        return True


@dataclass
class LoopbackCluster:
    address: str
    env: dict
    nodes: list[RayNode] = field(default_factory=list)

    @property
    def worker(self) -> RayNode:
        return self.nodes[-1]

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()


def start_node(env: dict, *args: str) -> RayNode:
    # a short directory: Ray's unix sockets live under it and must fit in 107 characters
    temp_dir = tempfile.mkdtemp(prefix="rb-ray-", dir="/tmp")
    cmd = [RAY, "start", "--block", f"--temp-dir={temp_dir}", "--node-ip-address=127.0.0.1", "--disable-usage-stats", *args]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return RayNode(proc, temp_dir)


EVENT_TIMEOUT_S = 600.0  # a wait for an event returns when it happens; this bound only ends a wait that never would (no load reaches it)


def wait_for_cpus(address: str, env: dict, cpus: float, timeout: float = EVENT_TIMEOUT_S) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = subprocess.run([RAY, "status", f"--address={address}"], capture_output=True, text=True, env=env).stdout
        if f"/{cpus:.1f} CPU" in out:
            return True
        time.sleep(1)
    return False


def wait_for_demand(address: str, env: dict, demand: dict, timeout: float = EVENT_TIMEOUT_S) -> str:
    """Until ``ray status`` lists ``demand`` (e.g. ``{"CPU": 1.0, "GPU": 0.5}``) among the cluster's pending demands
    (a request no node can serve yet, waiting): "" then, else the last pending demands seen."""
    deadline = time.time() + timeout
    while True:
        out = subprocess.run([RAY, "status", f"--address={address}"], capture_output=True, text=True, env=env)
        pending = out.stdout.partition("Pending Demands:")[2]
        if demand in [ast.literal_eval(d) for d in re.findall(r"\{[^{}]*\}", pending)]:
            return ""
        if time.time() >= deadline:
            return pending.strip() or out.stdout[-2000:] + out.stderr[-2000:]
        time.sleep(1)


def alive(address: str, env: dict) -> bool:
    return subprocess.run([RAY, "status", f"--address={address}"], capture_output=True, text=True, env=env).returncode == 0


def start_cluster(env: dict, workers: int = 1, cpus: int = 1, worker_resources: str | None = None) -> LoopbackCluster:
    """A head and ``workers`` worker nodes on loopback, each with ``cpus`` CPUs (``worker_resources``: a JSON
    resources string for the workers, e.g. a fake GPU)."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    cluster = LoopbackCluster(address, env)
    cluster.nodes.append(start_node(env, "--head", f"--port={port}", "--include-dashboard=false", f"--num-cpus={cpus}"))
    extra = [f"--resources={worker_resources}"] if worker_resources else []
    for _ in range(workers):
        cluster.nodes.append(start_node(env, f"--address={address}", f"--num-cpus={cpus}", *extra))
    if not wait_for_cpus(address, env, float(cpus * (workers + 1))):
        cluster.stop()
        raise RuntimeError("the loopback Ray cluster did not come up")
    return cluster
