"""`raco-bench bench preflight`: how long a bad environment takes to fail, for ``raco-bench train``, a sweep
(``sweeps/adult.py --smoke``) and ``raco-bench report`` (docs/sweeps.md, "Pre-flight").

Three environments, each command in a fresh process, side by side in one run:

* ``read-only``: the working directory (where the default store, Tune's storage and the report's folder go) cannot be
  written; the report's store exists there;
* ``refused``: the tracking URI names a loopback port nobody listens on;
* ``silent``: the tracking URI names a loopback server that accepts connections and never answers.

Each row is the command's wall time to its exit, its exit status, the first line of its error, and the time over
the same command's ``--help`` (the cost of starting Python and importing, measured in the same run) and over the
target of 15 s. Nothing here is asserted: the tests check what fails and how (``tests/test_preflight.py``), this
measures how long it takes on the machine it runs on.

On a machine where the benchmark runs as root a folder's mode does not stop its writes: the read-only commands then
run without privileges to override file permissions (``setpriv``), as an ordinary user would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 15.0  # the bound: a bad environment fails within this on the 2-core machine


class SilentServer:
    """A TCP server on loopback that accepts connections and never answers (a hung tracking server)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        try:
            while True:
                self.conns.append(self.sock.accept()[0])
        except OSError:
            pass

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` as an ordinary user runs it: as root, without the capabilities that override file permissions (so a
    folder of mode 0555 is read-only to it); unchanged otherwise. Raises RuntimeError as root without ``setpriv``."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root without setpriv (util-linux): a read-only folder cannot be made read-only to this process")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all", *cmd]


def read_only_folder(folder: Path) -> Path:
    """``folder`` made read-only (mode 0555); give it back with :func:`writable_again`."""
    folder.chmod(0o555)
    return folder


def writable_again(folder: Path) -> None:
    folder.chmod(0o755)


def commands(uri: str | None) -> dict[str, tuple[list[str], list[str]]]:
    """The three commands as (the command, its arguments) against ``uri`` (None: the default store of the working
    directory); the command alone with ``--help`` is its start-up cost."""
    store = ["--tracking-uri", uri] if uri else []
    cli = [sys.executable, "-m", "raco_bench.cli"]
    return {"train": ([*cli, "train"], ["--dataset", "synthetic", "--quiet", *store]),
            "sweep": ([sys.executable, str(ROOT / "sweeps" / "adult.py")], ["--smoke", *store]),
            "report": ([*cli, "report"], ["--experiment", "raco-bench-train", *store])}


def environment() -> dict[str, str]:
    """The commands' environment: an embedded Ray (never a cluster the environment names), no tracking URI but the flag's."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}


def timed(cmd: list[str], cwd: Path, timeout_s: float) -> tuple[float, int, str]:
    """(seconds, exit status, first line of stderr) of one run."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1, f"still running after {timeout_s:.0f} s"
    lines = [line for line in proc.stderr.splitlines() if "error" in line.lower()] or proc.stderr.splitlines() or [""]
    return time.perf_counter() - start, proc.returncode, lines[-1][:160]


def make_store(folder: Path) -> None:
    """An existing store in ``folder`` (what the read-only report reads): one experiment."""
    from raco_bench import tracking

    tracking.get_or_create_experiment(f"sqlite:///{folder / 'mlflow.db'}", "raco-bench-train")


def run(repeats: int, timeout_s: float, which: list[str]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ro = work / "read-only"
        ro.mkdir()
        make_store(ro)
        silent = SilentServer()
        envs = {"read-only": (None, ro), "refused": (f"http://127.0.0.1:{closed_port()}", work),
                "silent": (f"http://127.0.0.1:{silent.port}", work)}
        read_only_folder(ro)
        try:
            helps = {name: min(timed([*base, "--help"], work, timeout_s)[0] for _ in range(repeats))
                     for name, (base, _) in commands(None).items() if name in which}
            for env_name, (uri, cwd) in envs.items():
                for name, (base, arguments) in commands(uri).items():
                    if name not in which:
                        continue
                    cmd = unprivileged([*base, *arguments]) if env_name == "read-only" else [*base, *arguments]
                    runs = [timed(cmd, cwd, timeout_s) for _ in range(repeats)]
                    seconds = min(r[0] for r in runs)
                    rows.append({"environment": env_name, "command": name, "seconds": seconds, "exit": runs[0][1], "help_s": helps[name],
                                 "over_help": seconds / helps[name], "over_target": seconds / TARGET_S, "error": runs[0][2]})
        finally:
            writable_again(ro)
            silent.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="raco-bench bench preflight", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=1, help="runs of each command; the fastest is kept (default: %(default)s)")
    p.add_argument("--commands", nargs="+", default=["train", "sweep", "report"], choices=["train", "sweep", "report"],
                   help="which commands (default: all three)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds after which a command is stopped and reported (default: %(default)s)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    rows = run(args.repeats, args.timeout, args.commands)
    load = os.getloadavg()
    print(f"pre-flight: seconds to fail, {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
          f"(fastest of {args.repeats}); x help: over the command's --help, measured here; x 15 s: over the target")
    print(f"{'environment':11s} {'command':7s} {'seconds':>8s} {'exit':>5s} {'x help':>7s} {'x 15 s':>7s}  error")
    for r in rows:
        print(f"{r['environment']:11s} {r['command']:7s} {r['seconds']:8.1f} {r['exit']:5d} {r['over_help']:7.2f} {r['over_target']:7.2f}  {r['error']}")
    return 0
