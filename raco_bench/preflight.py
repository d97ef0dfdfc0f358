"""Pre-flight: before a command trains or reads anything, every place it will write is checked to be writable and
every store it talks to to answer, so that a bad setting fails in seconds with one line naming the path, where the
setting came from (a flag, an environment variable or the default) and the fix, and never after minutes of training
or of MLflow's retries (docs/sweeps.md, "Pre-flight").

What each command checks:

* ``raco-bench train``: the tracking store and the experiment's artifact location (unless ``--no-mlflow``), the folder
  of ``--json``;
* a sweep (``sweeps/*.py``): the tracking store and the artifact location, Tune's storage (``--storage-path``,
  ``$RACO_BENCH_STORAGE`` or ``./ray_results``);
* ``raco-bench report``: the store (it must exist; written unless ``--no-mlflow``), the artifact location (unless
  ``--no-mlflow``), the ``--out`` folder and the ``--results`` folder.

A folder that does not exist yet passes when the nearest folder above it that exists can be written (the command
creates it). Nothing is written by the checks themselves. A SQLite store's folder must be writable even to read it:
SQLite keeps its write-ahead log and lock files beside the database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from raco_bench import tracking


@dataclass(frozen=True)
class Setting:
    """A setting's value and where it came from: ``--out``, ``$RACO_BENCH_STORAGE``, "the default: …"."""

    value: str
    origin: str

    def __str__(self) -> str:
        return f"{self.value} (from {self.origin})"


def setting(flag_value: str | None, flag: str, default: str, env: str | None = None, default_note: str = "") -> Setting:
    """The value of a flag, else of the environment variable ``env``, else ``default``, with its origin."""
    if flag_value:
        return Setting(flag_value, flag)
    if env and os.environ.get(env):
        return Setting(os.environ[env], f"${env}")
    return Setting(default, "the default" + (f": {default_note}" if default_note else ""))


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be written, or None when it can (or can be created: the nearest existing folder above it
    can be written)."""
    folder = Path(folder).expanduser().absolute()
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable" + ("" if existing == folder else f" (so {folder} cannot be created there)")
    return None


def check_folder(where: Setting, what: str, fix: str) -> None:
    """Raise ValueError, in one line, when the folder ``where`` (``what`` it holds) cannot be written; ``fix`` says how
    to choose another."""
    problem = unwritable(Path(where.value))
    if problem is not None:
        raise ValueError(f"cannot write {what} {where}: {problem}; {fix}")


def _local_path(location: str | None) -> Path | None:
    """The local folder of a ``file:`` artifact location, None for any other scheme (a server or a bucket keeps it)."""
    if not location:
        return None
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(location) if parsed.scheme == "" else None


def check_store(uri: str, origin: str, experiment: str | None = None, write: bool = True, existing: bool = False) -> None:
    """The tracking store ``uri`` (from ``origin``) answers and, with ``write``, can be written, and so can the artifact
    location of ``experiment`` (its recorded one, or the one a new experiment gets). ``existing``: a reader's store,
    which must exist already."""
    store = Setting(uri, origin)
    path = tracking.sqlite_path(uri)
    if existing:
        tracking.require_existing_store(uri, origin)
    tracking.check_reachable(uri, origin=origin)
    if path is not None:
        problem = unwritable(path.parent)
        if problem is None and path.is_file() and not os.access(path, os.R_OK | (os.W_OK if write else 0)):
            problem = f"{path} is {'read-only' if write else 'not readable'}"
        if problem is not None:
            raise ValueError(f"cannot use the tracking store {store}: {problem} (SQLite writes its journal beside the database, even to "
                             f"read it); run from a writable folder or pass --tracking-uri sqlite:///WRITABLE/FOLDER/mlflow.db")
    if not write or experiment is None:
        return
    folder = _local_path(tracking.artifact_root(uri, experiment))
    if folder is not None:
        check_folder(Setting(str(folder), f"experiment {experiment!r} of {uri}"), "the artifact location",
                     "the store records this location for the experiment (a store copied from another machine keeps its paths): "
                     "make it writable, or pass --experiment NAME for a new experiment")
