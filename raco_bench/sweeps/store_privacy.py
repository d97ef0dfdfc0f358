"""A sweep's store ε, from what its packs recorded: the figure its summary, its phase parents and the report state beside
the per-run ε (docs/privacy.md, "The store's ε"; the composition is :mod:`raco_bench.privacy.store`'s).

Every trained configuration of the sweep is one release: its method's events (``Method.privacy_event``) at the T it
trained, its calibrated parameters and its private selection, and the batches it drew: the batch stream and the key
fingerprint its pack recorded on its row (``batch_stream``, ``key_id``). Configurations with the same stream, key and
sampling rate drew the same batches; a run trained after a resume under another key drew other ones. Runs of several
datasets are composed per dataset (they are different people).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd

from raco_bench import tracking
from raco_bench.data.catalog import public_train_rows
from raco_bench.methods import get_method
from raco_bench.methods.base import Budget
from raco_bench.privacy import events
from raco_bench.privacy.accounting import SelectionRelease
from raco_bench.privacy.store import StoreEpsilon, StoreRelease, split_batched, store_epsilon
from raco_bench.records.artifacts import STORE_ARTIFACT
from raco_bench.records.results import read_results

STORE_TAG = "raco_bench.store_epsilon"
UNRECORDED_STREAM = ("batch_draws=shared, but the batch stream it drew was not recorded (a store older than the recorded stream "
                     "ids): which runs drew the same batches is unknown")


def _number(value, default=None):
    return default if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _text(value) -> str:
    return "" if _number(value) is None else str(value)


def _published_train_rows(row: dict) -> int | None:
    """The training split's public size the run's accountant used (its schema's ``train_rows``), None when not declared."""
    try:
        return public_train_rows(row["dataset"], _number(row.get("schema")) or None)
    except ValueError:  # a user's dataset whose schema the row does not name (SchemaError is a ValueError)
        return None


def release_of(row: dict) -> StoreRelease:
    """One recorded configuration (a row of :func:`raco_bench.records.results.read_results`) as a release."""
    label = f"{row['method']} config {row['config_id']} seed {row['seed']}" + (f" eps {row['epsilon']:g}" if row.get("epsilon") else "")
    method = get_method(row["method"])
    if not method.private:
        return StoreRelease(None, None, label, "a non-private method: its model is a function of the rows with no noise")
    n_train = _published_train_rows(row)
    if n_train is None:
        return StoreRelease(None, None, label, f"dataset {row['dataset']!r} declares no public training size (its schema's train_rows)")
    hyper = method.hyperparameters({**json.loads(row["params"] or "{}"), **json.loads(row["calibrated"] or "{}")})
    selection = None
    if row["checkpoint"] == "private":
        noise, count = _number(row.get("selection_noise")), _number(row.get("selection_checkpoints"))
        if noise is None or count is None:
            return StoreRelease(None, None, label, "checkpoint=private, but its selection settings were not recorded (a store older than them)")
        selection = SelectionRelease(float(noise), int(count))
    steps = int(row["steps"])
    budget = Budget(float(row["epsilon"]), float(row["delta"]), steps, steps, selection)
    try:
        event = method.privacy_event(hyper, n_train, budget)
    except events.UnsupportedEvent as exc:
        return StoreRelease(None, None, label, str(exc))
    batches = None
    if str(row.get("batch_draws")) == "shared" and split_batched(event)[0]:
        stream, key = _text(row.get("batch_stream")), _text(row.get("key_id"))
        if not stream or not key:
            return StoreRelease(None, None, label, UNRECORDED_STREAM)
        batches = (key, stream)  # the stream it drew from under its key: its group (with its sampling rate)
    return StoreRelease(event, batches, label, epsilon=_number(row.get("epsilon_spent")))


def sweep_store_epsilon(table: pd.DataFrame) -> dict[str, StoreEpsilon]:
    """Per dataset, the store ε of the trained configurations in ``table`` (at the largest δ they were run at)."""
    trained = table[table["skipped"] == ""]
    out = {}
    for dataset, rows in trained.groupby("dataset", sort=True):
        records = rows.to_dict("records")
        figure = store_epsilon([release_of(r) for r in records], float(rows["delta"].max()))
        listed = sorted({item for r in records for item in str(r.get("outside_budget", "")).split(" | ") if item not in ("", "none", "nan")})
        out[str(dataset)] = dataclasses.replace(figure, outside_budget=tuple(listed))
    return out


def store_text(figures: dict[str, StoreEpsilon]) -> str:
    """The lines a summary and a report print: what a reader of the whole store gets, per dataset."""
    return "\n".join(f"The store's epsilon on {dataset}: {s.describe()}." for dataset, s in figures.items())


def store_metrics(figures: dict[str, StoreEpsilon]) -> dict[str, float]:
    """The parent run's metrics (one dataset per sweep): the store's ε, the figure over its private runs, the independent
    figure, the largest per-run ε, and whether the figure is end to end (1) or not (0)."""
    if len(figures) != 1:
        return {}
    s = next(iter(figures.values()))
    values = {"store_epsilon": s.epsilon, "store_epsilon_private_only": s.private_only, "store_epsilon_own_batches": s.independent,
              "store_epsilon_largest_run": s.largest_run}
    return {**{k: (v if math.isfinite(v) else -1.0) for k, v in values.items()},  # -1: no record-level guarantee (the tag says why)
            "store_epsilon_end_to_end": 1.0 if s.end_to_end else 0.0}


def store_summary(record: dict) -> dict:
    """The figures a study part keeps of a store's ε (a :class:`~raco_bench.privacy.store.StoreEpsilon` as recorded, its
    ``end_to_end`` included): the whole store's, the private runs', the own-batches and largest per-run ε, whether it is end
    to end, δ, the runs, those without a record-level claim, and what the runs list outside their budget."""
    return {"epsilon": record["epsilon"], "private_only": record["private_only"], "own_batches": record["independent"],
            "largest_run": record["largest_run"], "end_to_end": bool(record["end_to_end"]), "delta": record["delta"], "runs": record["runs"],
            "without_claim": len(record["not_record_level"]), "outside_budget": list(record["outside_budget"])}


def record_store_epsilon(uri: str, parent: str, figures: dict[str, StoreEpsilon]) -> None:
    """State the store's ε on a phase parent as a tag and a JSON record (its metrics, :func:`store_metrics`, go with the
    phase's own when it finishes)."""
    tracking.set_tags(uri, parent, {STORE_TAG: store_text(figures)[:4900]})
    record = {d: {**dataclasses.asdict(s), "end_to_end": s.end_to_end} for d, s in figures.items()}
    tracking.log_text(uri, parent, json.dumps(record, indent=2, default=str), STORE_ARTIFACT)


def state_store_epsilon(uri: str, experiment_id: str, sweep_id: str, parent: str) -> tuple[str, dict[str, float]]:
    """The store's ε of a finished sweep, stated on its ``parent`` (tag and record): the summary's line and the parent's
    metrics. It runs after everything else the sweep records, and a failure here is reported in the line and the tag
    instead of raised: nothing the sweep recorded is lost, and ``raco-bench report`` computes the figure again."""
    try:
        figures = sweep_store_epsilon(read_results(uri, experiment_id, sweep_id))
    except Exception as exc:  # noqa: BLE001 - the sweep's results are recorded; this figure can be computed again later
        line = (f"The store's epsilon could not be computed ({type(exc).__name__}: {exc}); every result of the sweep is recorded, "
                "and `raco-bench report` computes the figure again")
        tracking.set_tags(uri, parent, {STORE_TAG: line[:4900]})
        return line, {}
    record_store_epsilon(uri, parent, figures)
    return store_text(figures), store_metrics(figures)
