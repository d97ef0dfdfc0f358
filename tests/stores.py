"""Finished sweeps' MLflow stores that tests only read, made in the background while the session's other tests run,
and copies of a store for a test that writes to it.

A sweep keeps this machine's two cores about two-thirds busy for tens of seconds, and most of the suite keeps only
one busy: a store that tests only read is made beside the session's other tests, so its tests find it ready (or
wait only for the rest of it). A test module declares such a sweep at import time with :func:`background`, under
the name of the fixture through which tests use it (its folder, its key file). When the session starts,
``conftest._background_stores`` starts the declared sweeps that some collected test uses, in the order declared and
at most :data:`AT_ONCE` at a time, and stops any still running when the session ends; a test that needs one not
started yet starts it at once. Each runs in its own folder under :data:`ROOT`, in its own process groups, its
console in ``<name>.log`` beside the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import threading
from pathlib import Path

AT_ONCE = 2  # background sweeps running at once: each is an embedded Ray with its own workers
ROOT: Path | None = None  # the session's folder of background stores (conftest sets it)
ENV: dict[str, str] = {}  # the environment of background stores: the session's at its start (conftest sets it), whatever a test patches later


class Background:
    """Commands run one after the other in a folder of their own (a sweep, then a benchmark logged to its store)."""

    def __init__(self, name: str, commands: list[list[str]], env: dict[str, str | None] | None = None, key: str | None = None):
        self.name, self.commands, self.env, self.key_hex = name, commands, env or {}, key
        self.returncode: int | None = None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._lock = threading.Lock()

    @property
    def cwd(self) -> Path:
        return ROOT / self.name

    @property
    def key(self) -> Path:
        """The secret key file of its sweeps (beside, not inside, their folder), for a test that must draw alike."""
        return ROOT / f"{self.name}.key"

    @property
    def log(self) -> Path:
        return ROOT / f"{self.name}.log"

    def start(self) -> "Background":
        """Start it unless it is started (a test that needs it before the session got to it); returns it."""
        with self._lock:
            if self._thread is not None:
                return self
            self.cwd.mkdir(parents=True)
            if self.key_hex is not None:
                self.key.write_text(self.key_hex + "\n")
                self.key.chmod(0o600)
            self._thread = threading.Thread(target=self._run, name=f"background {self.name}", daemon=True)
            self._thread.start()
        return self

    def _format(self, text: str) -> str:
        return text.format(cwd=self.cwd, key=self.key)

    def _run(self) -> None:
        env = dict(ENV)
        for k, v in self.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = self._format(v)
        with open(self.log, "w") as log:
            for command in self.commands:
                with self._lock:
                    if self._stopping:
                        self.returncode = -signal.SIGKILL
                        return
                    log.write(f"$ {' '.join(command)}\n")
                    log.flush()
                    self._proc = subprocess.Popen([self._format(c) for c in command], cwd=self.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True)
                self.returncode = self._proc.wait()
                if self.returncode != 0:
                    return

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def folder(self, timeout: float = 1200) -> Path:
        """Its folder once every command succeeded (started now if the session did not start it)."""
        self.start()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} still running after {timeout:.0f}s:\n{self.log.read_text()[-6000:]}"
        assert self.returncode == 0, f"{self.name} failed (exit {self.returncode}):\n{self.log.read_text()[-6000:]}"
        return self.cwd

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            if self._proc is not None and self._proc.poll() is None:
                os.killpg(self._proc.pid, signal.SIGKILL)
        if self._thread is not None:
            self._thread.join()


DECLARED: dict[str, Background] = {}


def background(name: str, *commands: list[str], env: dict[str, str | None] | None = None, key: str | None = None) -> Background:
    """Declare a background store under the name of the fixture through which tests use it (the session starts it when
    a collected test uses that fixture). ``{cwd}`` in a command or an environment value is its folder, ``{key}`` its
    key file (written before anything runs when ``key`` is given, hex); an environment value None removes the variable."""
    assert name not in DECLARED, f"background store {name} declared twice"
    DECLARED[name] = job = Background(name, list(commands), env, key)
    return job


def start_in_order(jobs: list[Background], stop: threading.Event) -> None:
    """Start ``jobs`` in order, at most :data:`AT_ONCE` running at a time (a job a test started itself counts too)."""
    for job in jobs:
        while sum(j.running for j in jobs) >= AT_ONCE:
            if stop.wait(0.5):
                return
        if stop.is_set():
            return
        job.start()


def copy_store(src: Path, dst: Path) -> str:
    """Copy ``src/mlflow.db`` and ``src/mlartifacts`` into ``dst`` and return the copy's tracking URI. The store records
    absolute artifact locations (``file://…/mlartifacts/…``): in the copy they point into ``dst``, so nothing written
    through it reaches ``src``."""
    dst.mkdir(parents=True)
    shutil.copy2(src / "mlflow.db", dst / "mlflow.db")
    shutil.copytree(src / "mlartifacts", dst / "mlartifacts")
    old, new = (src / "mlartifacts").as_uri(), (dst / "mlartifacts").as_uri()
    con = sqlite3.connect(dst / "mlflow.db")
    try:
        with con:
            tables = [name for (name,) in con.execute("select name from sqlite_master where type = 'table'")]
            for table in tables:
                for _, column, kind, *_ in con.execute(f'pragma table_info("{table}")').fetchall():
                    if "CHAR" in kind.upper() or "TEXT" in kind.upper():
                        con.execute(f'update "{table}" set "{column}" = replace("{column}", ?, ?) where instr("{column}", ?) > 0', (old, new, old))
            left = [(t, c) for t in tables for _, c, *_ in con.execute(f'pragma table_info("{t}")').fetchall()
                    if con.execute(f'select count(*) from "{t}" where instr(cast("{c}" as text), ?) > 0', (str(src / "mlartifacts"),)).fetchone()[0]]
    finally:
        con.close()
    assert not left, f"the copy of {src} still names its artifacts in {left}"
    return f"sqlite:///{dst / 'mlflow.db'}"
