"""What a sweep leaves in Ray Tune's storage, and deleting what a resume under another key must not leave readable.

Every Tune run of a phase (each retry round, each ``--resume``) is a new Tune experiment in the same storage folder, named
by :func:`experiment_name`; each pack is one trial folder in it (:func:`trial_name`) holding the pack's checkpoints
(``checkpoint_*/pack_state.pt``: its configurations' parameters, recorders and curves at that step) and Tune's result
files. docs/privacy.md's threat model counts them as released. When a resume trains under a new key, the packs that an
attempt under the old key left incomplete are deleted from MLflow and trained anew
(:func:`raco_bench.tracking.drop_other_key_runs`); their trial folders go too (:func:`drop_pack_folders`), or a reader of
the storage would hold a second, independent training of those configurations.
"""

from __future__ import annotations

import json
import time

__all__ = ["drop_pack_folders", "experiment_name", "experiment_prefix", "trial_name"]


def experiment_prefix(experiment: str, sweep_id: str, phase: int) -> str:
    """The start of the name of every Tune experiment of a sweep's phase."""
    return f"{experiment}-{sweep_id}-phase{phase}-"


def experiment_name(experiment: str, sweep_id: str, phase: int, pid: int, attempt: int) -> str:
    """One Tune run of a phase: a new experiment each time (what is done is read from MLflow, never from an earlier one)."""
    return f"{experiment_prefix(experiment, sweep_id, phase)}{time.strftime('%Y%m%d-%H%M%S')}-{pid}-{attempt}"


def trial_name(pack: dict) -> str:
    """A pack's trial (and folder) name: its phase, method, size and the start of its pack key."""
    return f"p{pack['phase']}-{pack['method']}-{len(pack['members'])}-{pack['pack_key'][:8]}"


def _pack_key(fs, folder: str) -> str | None:
    """The pack key a trial folder's ``params.json`` names (None when Tune wrote none yet)."""
    try:
        with fs.open_input_stream(f"{folder}/params.json") as f:
            return json.loads(f.readall())["pack"]["pack_key"]
    except (OSError, KeyError, ValueError):
        return None


def drop_pack_folders(storage: str, prefix: str, pack_keys: set[str]) -> list[str]:
    """Delete the trial folders of the packs ``pack_keys`` (their checkpoints and result files) in every Tune experiment of
    ``storage`` (a local path or a URI Tune accepts, such as ``s3://…``) whose name starts with ``prefix``; the folders
    deleted. A folder whose ``params.json`` is missing is matched by its name (:func:`trial_name`)."""
    import pyarrow.fs as pafs

    if not pack_keys:
        return []
    fs, root = pafs.FileSystem.from_uri(storage)
    try:
        experiments = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except FileNotFoundError:
        return []
    removed = []
    for exp in experiments:
        if exp.type != pafs.FileType.Directory or not exp.base_name.startswith(prefix):
            continue
        for trial in fs.get_file_info(pafs.FileSelector(exp.path)):
            if trial.type != pafs.FileType.Directory:
                continue
            key = _pack_key(fs, trial.path)
            if key in pack_keys or (key is None and any(trial.base_name.endswith(f"-{k[:8]}") for k in pack_keys)):
                fs.delete_dir(trial.path)
                removed.append(trial.path)
    return removed
