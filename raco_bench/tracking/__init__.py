"""MLflow tracking, the one package that talks to MLflow (sweeps, reports, audits and benchmarks go through it): the
client, retries on SQLite locks, paged searches, tags, and the run layout of a sweep (one experiment
per sweep script, a parent run per phase, a child run per trial).

* The default tracking URI is a SQLite file in the working directory (MLflow 3 refuses the file
  store); on a cluster, an MLflow server on the head node (``MLFLOW_TRACKING_URI``). ``file:`` URIs
  and bare paths are refused with a clear error.
* Idempotent logging: a trial's run is found by its deterministic ``trial_key`` tag. A run marked
  complete is never trained or logged again; an incomplete one (a killed attempt) is reused when the
  attempt drew from the same word source, and deleted and created anew when it did not (its
  ``raco_bench.key_id`` tag, a one-way fingerprint of the key, differs).
  Evaluation curves are streamed while the trial trains (:class:`LiveMetrics`, batched every few
  seconds); a reused run skips the (metric, step) points it already holds, and the final metrics and
  params skip keys already present, so a retried or resumed trial never creates a second run and
  never duplicates or loses a metric point (training is deterministic in its stream and key).
* The experiment is created once, on the driver; SQLite writes are retried while the file is locked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

TRIAL_KEY = "raco_bench.trial_key"
SWEEP_ID = "raco_bench.sweep_id"
PHASE = "raco_bench.phase"
COMPLETE = "raco_bench.complete"
TRAIN_EXPERIMENT = "raco-bench-train"  # where `raco-bench train` logs its runs by default
KEY_ID = "raco_bench.key_id"  # a one-way fingerprint of the secret key an incomplete run was trained under (never the key)
KIND = "raco_bench.kind"
PACK_KEY = "raco_bench.pack_key"
PACK_TABLE = "configs.csv"  # one row per configuration of a pack run
DESCRIPTION = "mlflow.note.content"  # the run's description in the MLflow UI
SOURCE_NAME = "mlflow.source.name"  # what the UI shows as the run's (and its logged model's) source
VIEW_OF = "raco_bench.view_of"  # a γ view's trained run (a γ-free method selected for several γ: docs/sweeps.md, "MLflow")
CONFIG_KEY = "raco_bench.config_key"  # a phase-1 configuration's run (mean over its seeds)
PHASE_TITLES = {1: "search", 2: "selected configurations"}
PHASE_PARENT = "raco_bench.phase_parent"  # a phase-2 run's phase parent (phase-2 runs are top-level: docs/sweeps.md, "MLflow")


def eps_text(epsilon) -> str:
    """ε as run names say it: ``eps=1``, or ``eps=inf`` for a non-private method."""
    return "eps=inf" if epsilon is None else f"eps={float(epsilon):g}"


def gamma_text(gamma) -> str:
    """γ as run names and tags say it: ``0.05``, or ``none`` (a γ-free method before selection)."""
    return "none" if gamma is None else f"{float(gamma):g}"


def sweep_source(experiment: str) -> str:
    """The source the UI shows for a sweep's runs and models (``mlflow.source.name``)."""
    return f"raco-bench sweep {experiment}".strip()


def phase_run_name(sweep_id: str, phase: int) -> str:
    """A phase's parent run: the phase first (the UI cuts long names), then the sweep."""
    return f"phase {phase}: {PHASE_TITLES.get(phase, 'phase')} (sweep {sweep_id[:8]})"


TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
DEFAULT_STORE = "the default: ./mlflow.db in the working directory"


def tracking_uri_source(uri: str | None = None) -> tuple[str, str]:
    """(tracking URI, where it came from): ``--tracking-uri``, ``$MLFLOW_TRACKING_URI`` or the default SQLite file in the
    working directory, so that an error about the store can say which setting to change."""
    if uri:
        return uri, "--tracking-uri"
    if os.environ.get(TRACKING_URI_ENV):
        return os.environ[TRACKING_URI_ENV], f"${TRACKING_URI_ENV}"
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}", DEFAULT_STORE


def resolve_tracking_uri(uri: str | None = None) -> str:
    uri, origin = tracking_uri_source(uri)
    if uri.startswith("file:") or "://" not in uri:
        raise ValueError(
            f"tracking URI {uri!r} (from {origin}) points at MLflow's file store, which MLflow 3 refuses; use a SQLite file "
            "(sqlite:///path/mlflow.db, the default) or an MLflow server (http://host:5000)"
        )
    return uri


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, None for any other store."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def require_existing_store(uri: str, origin: str = "--tracking-uri") -> None:
    """Readers (reports) never create a store: a SQLite URI must name an existing file."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        raise ValueError(f"no MLflow store at {path} (from {origin}): run a sweep there first, or pass --tracking-uri to the store that holds it")


REACH_TIMEOUT_S = 3.0  # a tracking server that does not answer /health within this is reported before anything starts


def _change(origin: str) -> str:
    """How to change a tracking URI that came from ``origin``."""
    if origin.startswith("$"):
        return f"pass the right --tracking-uri or change {origin}"
    return "pass the right --tracking-uri (default: sqlite:///./mlflow.db)"


def check_reachable(uri: str, timeout_s: float = REACH_TIMEOUT_S, origin: str = "--tracking-uri") -> None:
    """Fail fast, with the fix, on a store that cannot be reached: a SQLite file whose folder does not exist, or a
    tracking server that does not answer (MLflow's own client retries for minutes before it gives up). ``origin`` is
    where the URI came from (:func:`tracking_uri_source`), named in the error. Whether the store can be written is
    :mod:`raco_bench.preflight`'s check."""
    import urllib.error
    import urllib.request

    path = sqlite_path(uri)
    if path is not None:
        if not path.parent.is_dir():
            raise ValueError(f"the folder of the tracking store {uri} (from {origin}) does not exist; create {path.parent} or {_change(origin)}")
        return
    if not uri.startswith(("http://", "https://")):
        return  # another scheme (databricks, …): MLflow's client reports its own errors
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s) as response:
            response.read(64)
    except urllib.error.HTTPError:
        return  # the server answered (an older server without /health, or behind a proxy): reachable
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ValueError(f"the tracking server {uri} (from {origin}) is unreachable ({reason}); start it (mlflow server --host 127.0.0.1 "
                         f"--port PORT) or {_change(origin)}") from None


def client(uri: str):
    """MLflow's client of ``uri``; on SQLite its store's connections zero what they delete (:func:`zero_deleted_content`)."""
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    zero_deleted_content(c._tracking_client.store)  # MLflow's store object, cached per URI: the listener is added once
    return c


def zero_deleted_content(store) -> None:
    """Every SQLite connection ``store`` checks out overwrites deleted content with zeros (``PRAGMA secure_delete``, off by
    default in SQLite's own builds): a row deleted later (:func:`delete_run`) leaves no copy in the file's free space, nor
    do the page splits of writing it. The pragma is per connection, so it is set at each checkout."""
    engine = getattr(store, "engine", None)
    if engine is None or engine.dialect.name != "sqlite" or getattr(engine, "_raco_bench_zeroing", False):
        return
    from sqlalchemy import event

    def on(dbapi_connection, record, proxy) -> None:
        dbapi_connection.execute("PRAGMA secure_delete = ON")

    event.listen(engine, "checkout", on)
    engine._raco_bench_zeroing = True


@contextmanager
def fluent_uri(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI set to ``uri`` for the block, then put back as it was. Some MLflow calls read
    it whatever client they are made on (fluent ``log_model``; the registry resolving a ``models:/`` source), and
    ``mlflow.set_tracking_uri`` also sets ``MLFLOW_TRACKING_URI``, which every later subprocess would inherit."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # None unsets the variable again


def retry(fn: Callable[[], Any], attempts: int = 8) -> Any:
    """Retry on SQLite's 'database is locked' (several trial processes share one file)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - MLflow wraps the SQLAlchemy error
            if "locked" not in str(exc).lower() or i == attempts - 1:
                raise
            time.sleep(0.2 * (2**i))


def artifact_location(uri: str, experiment: str) -> str | None:
    """Artifacts beside a SQLite database (predictable paths); servers keep their own default."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).resolve().parent / "mlartifacts" / experiment).as_uri()
    return None


def artifact_root(uri: str, experiment: str) -> str | None:
    """Where ``experiment``'s artifacts go: the location the store records for it (a store copied from elsewhere keeps
    its old absolute paths), else the location a new experiment gets (:func:`artifact_location`; None: the server's
    default). A SQLite store is read only if its file exists (a client would create it)."""
    path = sqlite_path(uri)
    if path is None or path.is_file():
        exp = retry(lambda: client(uri).get_experiment_by_name(experiment))
        if exp is not None:
            return exp.artifact_location
    return artifact_location(uri, experiment)


def use_wal(uri: str) -> None:
    """SQLite in write-ahead-log mode: readers no longer block the trial processes that write (the mode is
    stored in the database file, so every later connection uses it)."""
    if uri.startswith("sqlite:///"):
        import sqlite3

        path = Path(uri[len("sqlite:///"):])
        if path.is_file():
            with sqlite3.connect(path, timeout=60) as con:
                con.execute("PRAGMA journal_mode=WAL")


EXPERIMENT_KIND = "mlflow.experimentKind"  # a classic ML experiment (MLflow 3.17's UI mode is still the browser's: see ui_url)
CLASSIC_ML = "custom_model_development"


def get_or_create_experiment(uri: str, name: str, description: str = "") -> str:
    """The experiment ``name``, created if absent, marked as a classic ML experiment and given ``description`` (the UI's
    experiment description) unless it has one."""
    c = client(uri)
    exp = retry(lambda: c.get_experiment_by_name(name))
    if exp is not None:
        if exp.lifecycle_stage != "active":
            raise ValueError(f"MLflow experiment {name!r} is deleted; restore it (mlflow experiments restore) or pick another name")
        exp_id = exp.experiment_id
    else:
        exp_id = retry(lambda: c.create_experiment(name, artifact_location=artifact_location(uri, name)))
        use_wal(uri)
    held = {} if exp is None else exp.tags
    for key, value in ((EXPERIMENT_KIND, CLASSIC_ML), (DESCRIPTION, description)):
        if value and key not in held:
            retry(lambda key=key, value=value: c.set_experiment_tag(exp_id, key, value))
    return exp_id


def ui_url(uri: str, path: str, base: str | None = None, **query: str) -> str:
    """A link into the MLflow UI of the store ``uri`` (at ``base``, default: the server itself, or ``mlflow ui``'s default
    address for a SQLite file, started with ``mlflow ui --backend-store-uri <uri>``). An experiment's page opens in the
    UI's model-training mode (``workflowType=machine_learning``): MLflow 3's UI otherwise opens in its GenAI mode, on an
    empty traces overview, until the browser has been switched once."""
    from urllib.parse import quote, urlencode

    base = base or (uri.rstrip("/") if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000")
    if path.startswith("experiments/"):
        query = {"workflowType": "machine_learning", **query}
    return f"{base}/#/{path}" + (f"?{urlencode(query, quote_via=quote)}" if query else "")


def search_all(uri: str, experiment_ids: list[str], filter_string: str = "", order_by: list[str] | None = None,
               limit: int | None = None) -> list:
    """Every run matching ``filter_string``, following MLflow's pages (1,000 runs each)."""
    c = client(uri)
    runs, token = [], None
    while True:
        page = retry(lambda: c.search_runs(experiment_ids, filter_string=filter_string, order_by=order_by,
                                           max_results=min(1000, limit or 1000), page_token=token))
        runs.extend(page)
        token = page.token
        if not token or (limit is not None and len(runs) >= limit):
            return runs[:limit] if limit is not None else runs


def experiment_id(uri: str, name: str) -> str | None:
    """The id of the experiment ``name``, or None when the store has none of that name."""
    exp = retry(lambda: client(uri).get_experiment_by_name(name))
    return None if exp is None else exp.experiment_id


def experiment_names(uri: str) -> dict[str, str]:
    """Every experiment of the store: name -> id."""
    return {e.name: e.experiment_id for e in retry(lambda: client(uri).search_experiments())}


def get_run(uri: str, run_id: str):
    return retry(lambda: client(uri).get_run(run_id))


def create_run(uri: str, experiment_id: str, name: str, tags: dict[str, str] | None = None) -> str:
    """A new run (RUNNING) and its id."""
    return retry(lambda: client(uri).create_run(experiment_id, tags=tags or {}, run_name=name)).info.run_id


def delete_run(uri: str, run_id: str) -> None:
    """Delete a run and everything it recorded: its model registry versions (their tags, description and link), its
    artifacts, its logged models (their artifacts and records), its dataset-input links, then its metrics, latest metrics,
    params, tags and the run itself, as ``mlflow gc --run-ids`` does for a deleted run. MLflow's own ``delete_run`` only
    marks a run deleted, and its metrics stay readable in the store: a deleted attempt's curves beside the attempt that
    replaced it would be two independent trainings of one configuration, a release no ε covers (docs/privacy.md, "The
    store's ε"). On SQLite the deleted rows' bytes go too: the store's connections overwrite deleted content with zeros
    (:func:`zero_deleted_content`) and the write-ahead log, which still holds the pages as they were written, is
    checkpointed into the file and truncated (:func:`scrub_deleted`)."""
    c = client(uri)
    run = retry(lambda: c.get_run(run_id))
    store = c._tracking_client.store  # MLflow's store: its hard deletes are what ``mlflow gc`` calls
    if not hasattr(store, "_hard_delete_run"):
        raise ValueError(f"the tracking store {uri} cannot delete a run's data (MLflow has hard deletes for SQL stores only); "
                         "use a SQL store (sqlite:///..., postgresql://...), or delete run " + run_id + " with `mlflow gc` yourself")
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    zero_deleted_content(c._get_registry_client().store)  # the model registry's store: its own connections to the database
    for version in retry(lambda: c.search_model_versions(f"run_id = '{run_id}'")):  # its description holds the run's results
        for key in version.tags:
            retry(lambda v=version, k=key: c.delete_model_version_tag(v.name, v.version, k))
        retry(lambda v=version: c.delete_model_version(v.name, v.version))  # MLflow redacts its run, source and description
    for model in logged_models(uri, run.info.experiment_id, run_id):
        get_artifact_repository(model.artifact_location).delete_artifacts()
        retry(lambda model=model: c.delete_logged_model(model.model_id))  # the search finds live models only
        retry(lambda model=model: store._hard_delete_logged_model(model.model_id))
    get_artifact_repository(run.info.artifact_uri).delete_artifacts()
    if run.info.lifecycle_stage != "deleted":
        retry(lambda: c.delete_run(run_id))
    retry(lambda: _delete_inputs(store, run_id))
    retry(lambda: store._hard_delete_run(run_id))
    scrub_deleted(uri)


def scrub_deleted(uri: str, vacuum: bool = False, attempts: int = 8) -> None:
    """Checkpoint a SQLite store's write-ahead log into its file and truncate it, so that no frame of a deleted row stays on
    disk beside the zeroed pages (``PRAGMA wal_checkpoint(TRUNCATE)``, retried while a reader holds an older snapshot).
    ``vacuum`` (or a SQLite that cannot zero deleted content) also rewrites the file without free space (``VACUUM``): what
    was written without zeroing (by an older raco-bench, or another program) goes too. It needs the file to itself (a
    sweep's driver between phases); where it cannot have it, a warning says how to run it. Other stores: nothing."""
    if not uri.startswith("sqlite:///"):
        return
    import sqlite3
    import warnings

    path = Path(uri[len("sqlite:///"):])
    with closing(sqlite3.connect(path, timeout=60)) as con:
        zeroing = con.execute("PRAGMA secure_delete = ON").fetchone()[0] == 1
        if vacuum or not zeroing:
            try:
                con.execute("VACUUM")
            except sqlite3.OperationalError as exc:
                warnings.warn(f"{path}: VACUUM failed ({exc}); deleted runs' bytes may stay in its free space until `sqlite3 {path} VACUUM` "
                              "runs while nothing else writes to it", stacklevel=2)
        for i in range(attempts):
            if not con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # 0: not busy, every frame written back
                return
            time.sleep(0.2 * (2**i))
    warnings.warn(f"{path}: a reader kept the write-ahead log from being checkpointed; frames of deleted runs stay in {path.name}-wal until "
                  f"the next checkpoint (the next deletion, or `sqlite3 {path} 'PRAGMA wal_checkpoint(TRUNCATE)'`)", stacklevel=2)


def _delete_inputs(store, run_id: str) -> None:
    """The run's input and output links: its dataset inputs and the links of its logged models to it (the datasets are
    shared records of public facts, kept)."""
    from mlflow.store.tracking.dbmodels.models import SqlInput, SqlInputTag
    from sqlalchemy import or_

    with store.ManagedSessionMaker() as session:
        links = session.query(SqlInput).filter(or_(SqlInput.destination_id == run_id, SqlInput.source_id == run_id)).all()
        ids = [link.input_uuid for link in links]
        if ids:
            session.query(SqlInputTag).filter(SqlInputTag.input_uuid.in_(ids)).delete(synchronize_session=False)
            session.query(SqlInput).filter(SqlInput.input_uuid.in_(ids)).delete(synchronize_session=False)


def read_artifact(uri: str, run_id: str, path: str, dst: str | Path | None = None) -> Path | None:
    """A local copy of the run's artifact ``path`` (under ``dst`` when given), or None when the run has none."""
    try:
        local = retry(lambda: client(uri).download_artifacts(run_id, path, None if dst is None else str(dst)))
    except Exception:  # noqa: BLE001 - MLflow raises its own errors for a missing artifact
        return None
    return Path(local)


def log_artifacts(uri: str, run_id: str, local: str | Path, artifact_path: str | None = None) -> None:
    """Log a file, or a folder's every file, as the run's artifacts (under ``artifact_path``)."""
    local = Path(local)
    if local.is_dir():
        retry(lambda: client(uri).log_artifacts(run_id, str(local), artifact_path))
    else:
        retry(lambda: client(uri).log_artifact(run_id, str(local), artifact_path))


def finish_run(uri: str, run_id: str, metrics: dict[str, float] | None = None, params: dict[str, Any] | None = None) -> None:
    """Log summary ``metrics`` and ``params`` (params a run already holds are kept) and mark the run FINISHED."""
    from mlflow.entities import Metric, Param

    c = client(uri)
    now = int(time.time() * 1000)
    existing = retry(lambda: c.get_run(run_id)).data.params
    ps = [Param(k, str(v)[:6000]) for k, v in (params or {}).items() if k not in existing]
    ms = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
    for i in range(0, max(len(ps), len(ms)), 100):
        retry(lambda i=i: c.log_batch(run_id, params=ps[i:i + 100], metrics=ms[i:i + 100]))
    retry(lambda: c.set_terminated(run_id, "FINISHED"))


def set_status(uri: str, run_id: str, status: str) -> None:
    """Mark a run RUNNING (a resumed phase), KILLED (interrupted) or FAILED (a failure the sweep could not retry)."""
    c = client(uri)
    if status == "RUNNING":
        retry(lambda: c.update_run(run_id, status="RUNNING"))
    else:
        retry(lambda: c.set_terminated(run_id, status))


def set_tags(uri: str, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    retry(lambda: client(uri).log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()]))


def run_status(uri: str, run_id: str) -> str:
    return retry(lambda: client(uri).get_run(run_id)).info.status


def key_id(key: bytes | None) -> str:
    """A fingerprint of a secret key that tells attempts under different keys apart and reveals nothing of the key
    (a hash of a 256-bit random value); "reproducible" for the reproducible generator. It names the cipher too
    (ChaCha20 since issue 47; AES-256-CTR before): an attempt that drew its words from the other cipher under the same
    key file is another attempt, whose unfinished runs are trained anew, not continued with other words."""
    import hashlib

    return "reproducible" if key is None else hashlib.sha256(b"raco-bench key id chacha20\0" + key).hexdigest()[:16]


def find_run(uri: str, experiment_id: str, tags: dict[str, str]):
    c = client(uri)
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = retry(lambda: c.search_runs([experiment_id], filter_string=query, max_results=5))
    return runs[0] if runs else None


def get_or_create_parent(uri: str, experiment_id: str, sweep_id: str, phase: int, spec: dict) -> str:
    tags = {SWEEP_ID: sweep_id, PHASE: str(phase), KIND: "phase"}
    found = find_run(uri, experiment_id, tags)
    if found is not None:
        return found.info.run_id
    c = client(uri)
    what = ("every configuration on its phase-1 seeds; child runs: one per configuration (mean over seeds) and the packs that trained them"
            if phase == 1 else "fresh seeds of each selected configuration; child runs: one per (ε, γ, configuration, seed), and the packs")
    tags = {**tags, DESCRIPTION: f"Phase {phase} of sweep {sweep_id} ({spec.get('experiment', '')}): {what}. Selection: docs/sweeps.md.",
            SOURCE_NAME: sweep_source(spec.get("experiment", ""))}
    run = retry(lambda: c.create_run(experiment_id, tags=tags, run_name=phase_run_name(sweep_id, phase)))
    retry(lambda: c.log_text(run.info.run_id, json.dumps(spec, indent=2, default=str), "sweep_spec.json"))
    return run.info.run_id


def _get_or_create_keyed_run(uri: str, experiment_id: str, key_tag: str, tags: dict[str, str], name: str, redo_complete: bool = False):
    """(run_id, completed_run_or_None, reused): the run whose ``key_tag`` tag has the value in ``tags``, created
    with ``tags`` if there is none yet; ``reused`` when an earlier attempt created it.

    An incomplete run that an earlier attempt trained under another key (a sweep resumed without its key file) is
    deleted and created anew: its partial points came from other draws, and would mix with this attempt's. With
    ``redo_complete`` a complete one is too (a γ view must repeat the training this attempt logs)."""
    found = find_run(uri, experiment_id, {key_tag: tags[key_tag]})
    other_key = found is not None and KEY_ID in tags and found.data.tags.get(KEY_ID, tags[KEY_ID]) != tags[KEY_ID]
    if other_key and (found.data.tags.get(COMPLETE) != "1" or redo_complete):
        delete_run(uri, found.info.run_id)
        found = None
    if found is not None:
        return found.info.run_id, (found if found.data.tags.get(COMPLETE) == "1" else None), True
    run = retry(lambda: client(uri).create_run(experiment_id, tags=tags, run_name=name))
    return run.info.run_id, None, False


def get_or_create_trial_run(uri: str, experiment_id: str, parent_id: str, trial: dict, key: str | None = None, gamma=None, view_of: str = "",
                            redo_complete: bool = False):
    """(run_id, completed_run_or_None, reused) for a configuration's own run, keyed by its ``trial_key``; ``key`` is the
    :func:`key_id` of the attempt's word source.

    ``gamma`` is the γ the run is selected for (default: the trial's own). A γ-free method selected for several γ trains
    once and gets one run per γ: the first holds the training, each other one (``view_of`` its run id, keyed
    ``trial_key@gamma``) carries the same results under its γ, so that filtering ``tags.gamma`` lines every method up.
    A phase-2 run is a top-level run (the runs a researcher compares are in view without expanding a parent), linked
    to its phase parent by the tag :data:`PHASE_PARENT`; other runs are children of ``parent_id``.
    ``redo_complete``: a complete run of another key is deleted and created anew (see :func:`_get_or_create_keyed_run`)."""
    gamma = trial["gamma"] if gamma is None else gamma
    key_value = trial["trial_key"] + (f"@gamma={gamma_text(gamma)}" if view_of else "")
    parent = {PHASE_PARENT: parent_id} if trial["phase"] == 2 else {"mlflow.parentRunId": parent_id}  # phase 2: top-level, in view
    tags = {**({KEY_ID: key} if key is not None else {}),
            **parent, TRIAL_KEY: key_value, SWEEP_ID: trial["sweep_id"], PHASE: str(trial["phase"]),
        KIND: "trial", "dataset": trial["dataset"], "method": trial["method"], "constraint": trial["constraint"],
        "seed": str(trial["seed"]), "config_id": str(trial["config_id"]), "epsilon": str(trial["epsilon"]), "gamma": gamma_text(gamma),
        "trained_with_gamma": "yes" if trial["gamma"] is not None else "no", SOURCE_NAME: sweep_source(trial.get("experiment", "")),
        DESCRIPTION: trial_description(trial, gamma, view_of),
        **({VIEW_OF: view_of} if view_of else {}),
    }
    name = f"{trial['method']} {eps_text(trial['epsilon'])} gamma={gamma_text(gamma)} config={trial['config_id']} seed={trial['seed']}"
    return _get_or_create_keyed_run(uri, experiment_id, TRIAL_KEY, tags, name, redo_complete)


def trial_description(trial: dict, gamma, view_of: str = "") -> str:
    """What a configuration's run is, in a sentence the UI shows."""
    text = (f"{trial['method']} on {trial['dataset']} ({trial['constraint']}), {eps_text(trial['epsilon'])}, phase {trial['phase']}: "
            f"configuration {trial['config_id']} (params: {json.dumps(trial.get('params', {}), sort_keys=True)}), seed {trial['seed']}.")
    if trial["phase"] == 2:
        text += f" Selected on validation for gamma={gamma_text(gamma)}."
    if trial["gamma"] is None and gamma is not None:
        text += (" The method takes no gamma: one training serves every gamma it was selected for"
                 + (f"; this run repeats the results of run {view_of} under gamma={gamma_text(gamma)}." if view_of else "."))
    return text


Point = tuple[str, float, int]  # (metric key, value, step)


class LiveMetrics:
    """Step-indexed metric points of a running trial, written in batches while it trains.

    ``add`` buffers points and writes them once ``flush_every_s`` seconds have passed since the last
    write (so a long trial shows live curves in the MLflow UI at a few calls per minute); ``flush``
    writes the rest. On a reused run (a killed attempt) the (key, step) points already stored are
    skipped: the retrained trial reproduces them exactly, so the history holds each point once.
    """

    def __init__(self, uri: str, run_id: str, flush_every_s: float = 10.0, reused: bool = False) -> None:
        self.uri, self.run_id, self.flush_every_s = uri, run_id, flush_every_s
        self._buffer: list[Point] = []
        self._last = time.monotonic()
        self._stored: set[tuple[str, int]] = set()
        if reused:
            c = client(uri)
            for key in retry(lambda: c.get_run(run_id)).data.metrics:
                self._stored |= {(key, m.step) for m in retry(lambda key=key: c.get_metric_history(run_id, key))}

    def add(self, points: list[Point]) -> None:
        self._buffer += [p for p in points if (p[0], int(p[2])) not in self._stored]
        if time.monotonic() - self._last >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        from mlflow.entities import Metric

        if self._buffer:
            now = int(time.time() * 1000)
            ms = [Metric(k, float(v), now, int(s)) for k, v, s in self._buffer]
            c = client(self.uri)
            for i in range(0, len(ms), 1000):  # MLflow's log_batch limit: 1000 metrics per call
                retry(lambda i=i: c.log_batch(self.run_id, metrics=ms[i:i + 1000]))
            self._stored |= {(k, int(s)) for k, _, s in self._buffer}
            self._buffer = []
        self._last = time.monotonic()


def log_trial(uri: str, run_id: str, params: dict[str, Any], metrics: dict[str, float], tags: dict[str, str], artifacts: dict[str, str],
              files: dict[str, Path], model: Callable[[], None] | None = None) -> None:
    """Write a finished trial (a pack, or a configuration's own run) in batches, then mark it complete and
    finished (last, so a crash before it leaves it incomplete).

    ``metrics`` are final values (step 0); curves are streamed by :class:`LiveMetrics`. ``model`` logs
    the run's MLflow model (see :mod:`raco_bench.tracking.model`). Keys the run already holds (from a
    killed attempt) are not written twice.
    """
    from mlflow.entities import Metric, Param, RunTag

    c = client(uri)
    now = int(time.time() * 1000)
    held = retry(lambda: c.get_run(run_id)).data
    ms = [Metric(k, float(v), now, 0) for k, v in metrics.items() if k not in held.metrics]
    ps = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in held.params]  # a reused run keeps its params (same values)
    for i in range(0, len(ps), 100):  # MLflow's log_batch limits: 100 params, 1000 metrics per call
        retry(lambda i=i: c.log_batch(run_id, params=ps[i:i + 100]))
    for i in range(0, len(ms), 1000):
        retry(lambda i=i: c.log_batch(run_id, metrics=ms[i:i + 1000]))
    for name, text in artifacts.items():
        retry(lambda name=name, text=text: c.log_text(run_id, text, name))
    for name, path in files.items():
        retry(lambda path=path: c.log_artifact(run_id, str(path)))
    if model is not None:
        retry(model)
    retry(lambda: c.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in {**tags, COMPLETE: "1"}.items()]))
    retry(lambda: c.set_terminated(run_id, "FINISHED"))


def latest_rows(uri: str, experiment: str, kind: str) -> list[dict]:
    """The rows (params and metrics of the child runs) of the latest parent run tagged ``kind`` in
    ``experiment``: how benchmarks log a table. Empty when there is none."""
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        return []
    parents = search_all(uri, [exp.experiment_id], f"tags.`{KIND}` = '{kind}'", order_by=["attributes.start_time DESC"], limit=1)
    if not parents:
        return []
    children = search_all(uri, [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'")
    return [{**r.data.params, **r.data.metrics} for r in children]


def get_or_create_pack_run(uri: str, experiment_id: str, parent_id: str, pack: dict, key: str | None = None):
    """(run_id, completed_run_or_None) for a pack, keyed by its ``pack_key`` like a trial."""
    tags = {**({KEY_ID: key} if key is not None else {}), "mlflow.parentRunId": parent_id, PACK_KEY: pack["pack_key"],
            SWEEP_ID: pack["sweep_id"], PHASE: str(pack["phase"]), KIND: "pack", "method": pack["method"], "configurations": str(len(pack["members"]))}
    tags[DESCRIPTION] = (f"A pack: {len(pack['members'])} {pack['method']} configurations of phase {pack['phase']} trained together; "
                         f"its table {PACK_TABLE} has a row per configuration (docs/packs.md).")
    tags[SOURCE_NAME] = sweep_source(pack["members"][0].get("experiment", ""))
    name = f"pack: phase {pack['phase']} {pack['method']} ({len(pack['members'])} configurations) {pack['pack_key'][:8]}"
    run_id, done, _ = _get_or_create_keyed_run(uri, experiment_id, PACK_KEY, tags, name)
    return run_id, done


def completed_packs(uri: str, experiment_id: str, sweep_id: str | None = None, phase: int | None = None) -> list:
    query = f"tags.`{KIND}` = 'pack' and tags.`{COMPLETE}` = '1'"
    if sweep_id is not None:
        query += f" and tags.`{SWEEP_ID}` = '{sweep_id}'"
    if phase is not None:
        query += f" and tags.`{PHASE}` = '{phase}'"
    return search_all(uri, [experiment_id], query)


def drop_abandoned_packs(uri: str, experiment_id: str, sweep_id: str, phase: int, planned: set[str]) -> int:
    """Delete the incomplete pack runs of a phase that no planned pack continues (an attempt killed with the driver, a
    pack re-planned smaller after running out of memory): they record nothing, and would stay incomplete forever."""
    query = f"tags.`{KIND}` = 'pack' and tags.`{SWEEP_ID}` = '{sweep_id}' and tags.`{PHASE}` = '{phase}'"
    dropped = 0
    for run in search_all(uri, [experiment_id], query):
        if run.data.tags.get(COMPLETE) != "1" and run.data.tags.get(PACK_KEY) not in planned:
            delete_run(uri, run.info.run_id)
            dropped += 1
    return dropped


def drop_other_key_runs(uri: str, experiment_id: str, sweep_id: str, phase: int, key: str) -> set[str]:
    """Delete, with all they recorded, the incomplete pack and configuration runs of a sweep's phase that an attempt under
    another key left (a resume without the key file: their partial curves came from other draws, and would be a second
    training of the configurations this attempt trains anew); the pack keys of the deleted pack runs. A run without a key
    fingerprint counts as this key's, as :func:`get_or_create_pack_run` counts it. The file is then rewritten without free
    space (:func:`scrub_deleted`), before this attempt writes anything."""
    query = f"tags.`{SWEEP_ID}` = '{sweep_id}' and tags.`{PHASE}` = '{phase}'"
    packs: set[str] = set()
    dropped = 0
    for run in search_all(uri, [experiment_id], query):
        t = run.data.tags
        if t.get(KIND) not in ("pack", "trial") or t.get(COMPLETE) == "1" or t.get(KEY_ID, key) == key:
            continue
        delete_run(uri, run.info.run_id)
        dropped += 1
        if t.get(KIND) == "pack":
            packs.add(t[PACK_KEY])
    if dropped:
        scrub_deleted(uri, vacuum=True)
    return packs


TEXT_COLUMNS = {"batch_stream": str, "key_id": str}  # pack-table columns read as written (a fingerprint of digits stays text)


def drop_other_keys(uri: str, experiment_id: str, sweep_id: str, phase: int, key: str) -> int:
    """Delete, with everything they recorded (:func:`delete_run`), the runs of a sweep's phase (its packs and their
    configurations' runs) that an attempt under another key trained, complete or not; ``key`` is the :func:`key_id` of this
    attempt. Accounted tuning draws its searches from the key, so another key's runs belong to another search
    (docs/sweeps.md, "Accounted tuning"). Returns how many were deleted."""
    query = f"tags.`{SWEEP_ID}` = '{sweep_id}' and tags.`{PHASE}` = '{phase}'"
    dropped = 0
    for run in search_all(uri, [experiment_id], query):
        if run.data.tags.get(KIND) in ("pack", "trial") and run.data.tags.get(KEY_ID, key) != key:
            delete_run(uri, run.info.run_id)
            dropped += 1
    if dropped:
        scrub_deleted(uri, vacuum=True)
    return dropped


def pack_tables(uri: str, runs: list):
    """The configuration tables of pack runs, concatenated (pandas); a configuration recorded by two packs
    (a resume with another pack size) appears once, from the pack that finished first."""
    import tempfile

    import pandas as pd

    c = client(uri)
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in sorted(runs, key=lambda r: r.info.end_time or 0):
            local = retry(lambda run=run: c.download_artifacts(run.info.run_id, PACK_TABLE, tmp))
            frame = pd.read_csv(local, dtype=TEXT_COLUMNS)
            frame["pack_run_id"] = run.info.run_id
            frames.append(frame)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True).drop_duplicates("trial_key", keep="first").reset_index(drop=True)


# ------------------------------------------------------------------------------ inputs, bulk runs, registry
@dataclass(frozen=True)
class DatasetRecord:
    """A dataset as a tracking store records it (:func:`log_dataset`): never its rows."""

    name: str
    digest: str
    source: str
    profile: dict
    columns: tuple[str, ...]

    def entity(self, context: str = "training"):
        from mlflow.entities import Dataset, DatasetInput, InputTag

        schema = json.dumps({"mlflow_colspec": [{"type": "double", "name": column, "required": True} for column in self.columns]})
        dataset = Dataset(name=self.name, digest=self.digest, source_type="raco-bench", source=self.source, schema=schema,
                          profile=json.dumps(self.profile))
        return DatasetInput(dataset, [InputTag("mlflow.data.context", context)])


def log_dataset(uri: str, run_id: str, dataset: DatasetRecord) -> None:
    """Record the dataset a run read as its MLflow input (the UI's "Dataset" column and filter): name, digest, source and
    a profile (split sizes), with the encoded feature columns as its schema. Nothing of the rows themselves is logged."""
    retry(lambda: client(uri).log_inputs(run_id, datasets=[dataset.entity()]))


@dataclass(frozen=True)
class RunRecord:
    """A finished run written in one go (:func:`create_finished_runs`)."""

    name: str
    tags: dict[str, str]
    params: dict[str, Any]
    metrics: dict[str, float]
    dataset: DatasetRecord | None = None


def create_finished_runs(uri: str, experiment_id: str, records: list[RunRecord]) -> list[str]:
    """Create each record as a FINISHED run: three or four store calls per run (create, one batch, its dataset input,
    end), about 10 ms on a local SQLite store (docs/sweeps.md, "MLflow"). Returns the run ids in order."""
    from mlflow.entities import Metric, Param

    c = client(uri)
    now = int(time.time() * 1000)
    ids = []
    for record in records:
        run = retry(lambda record=record: c.create_run(experiment_id, tags=record.tags, run_name=record.name))
        params = [Param(k, str(v)[:6000]) for k, v in record.params.items()]
        metrics = [Metric(k, float(v), now, 0) for k, v in record.metrics.items() if v == v and abs(v) != float("inf")]
        for i in range(0, max(len(params), 1), 100):
            retry(lambda i=i: c.log_batch(run.info.run_id, params=params[i:i + 100], metrics=metrics if i == 0 else []))
        if record.dataset is not None:
            retry(lambda record=record: c.log_inputs(run.info.run_id, datasets=[record.dataset.entity()]))
        retry(lambda: c.set_terminated(run.info.run_id, "FINISHED"))
        ids.append(run.info.run_id)
    return ids


def log_records(uri: str, experiment: str, parent: RunRecord, children: list[RunRecord] | None = None) -> str:
    """A result outside the sweeps (an audit, a benchmark): ``parent`` as a finished run of ``experiment`` and each of
    ``children`` as a finished run under it. The one way such records reach MLflow. Returns the parent's id."""
    use_wal(uri)
    exp = get_or_create_experiment(uri, experiment)
    (pid,) = create_finished_runs(uri, exp, [parent])
    create_finished_runs(uri, exp, [dataclasses.replace(c, tags={**c.tags, "mlflow.parentRunId": pid}) for c in children or []])
    return pid


def log_text(uri: str, run_id: str, text: str, path: str) -> None:
    """A text artifact of a run (a summary, a JSON list), retried."""
    retry(lambda: client(uri).log_text(run_id, text, path))


def logged_models(uri: str, experiment_id: str, run_id: str) -> list:
    """The MLflow logged models a run has logged (one per run in this suite)."""
    return list(retry(lambda: client(uri).search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'")))


def register_model(uri: str, name: str, run_id: str, tags: dict[str, str], description: str, model_tags: dict[str, str],
                   model_description: str) -> str | None:
    """Register the logged model of ``run_id`` as a version of registered model ``name`` (created with ``model_tags`` and
    ``model_description`` if absent), once: a run already registered under ``name`` keeps its version. Returns the
    version, or None when the run logged no model."""
    c = client(uri)
    models = logged_models(uri, retry(lambda: c.get_run(run_id)).info.experiment_id, run_id)
    if not models:
        return None
    zero_deleted_content(c._get_registry_client().store)  # a version deleted with its run leaves no copy (delete_run)
    model = models[0]
    if not retry(lambda: c.search_registered_models(filter_string=f"name = '{name}'")):
        try:
            retry(lambda: c.create_registered_model(name, tags=model_tags, description=model_description))
        except Exception as exc:  # noqa: BLE001 - created meanwhile by another registration
            if "already exists" not in str(exc).lower():
                raise
    for version in retry(lambda: c.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")):
        return version.version
    with fluent_uri(uri):  # the registry fetches the logged model through the process-wide URI, not this client's
        version = retry(lambda: c.create_model_version(name, source=f"models:/{model.model_id}", run_id=run_id, tags=tags,
                                                       description=description, model_id=model.model_id))
    return version.version
