"""The health rules' evidence for study parts exported before runs recorded it (docs/results.md, "Health of a result").

A run records what its health verdict (:mod:`raco_bench.training.health`) reads beside its metrics: the best constant
predictor's test accuracy (``test_constant_accuracy``), the test rows (``test_rows``), the expected passes over the
training split T·B/n (``passes``) and the share of its test predictions in one class. A part exported from an older
store lacks them, and its page would call a chance-level model ``ok`` ("not checked, not recorded"): the verdict a
reader trusts would rest on nothing.

Three of the four do not depend on the model. The constant predictor's accuracy and the test rows are the test
split's, which is the same in every repeat (:attr:`raco_bench.data.tabular.TabularDataset.validation_split` resamples
the train/validation split of the same training rows, at the same sizes); the passes are the row's T and batch size
over the training split's size. So a page measures, once, per γ a run was trained with, the constant predictor's test
accuracy, the test rows and the training split's size from its dataset, writes them to :data:`EVIDENCE_FILE` beside
its parts (read without the dataset after that, so the page rebuilds anywhere), and fills them in where a row lacks
them. The share in one class is the model's predictions' and cannot be filled: the verdict still says it was not
checked. A row that recorded its own evidence keeps it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from raco_bench.report.cell_tables import if_loadable, rows_for
from raco_bench.training.health import constant_accuracy

EVIDENCE_FILE = "health_evidence.csv"  # beside a study's parts: per γ as trained, what the health rules read of the dataset
COLUMNS = ("dataset", "constraint", "gamma", "test_constant_accuracy", "test_rows", "n_train")
FILLED = ("test_constant_accuracy", "test_rows", "passes")


def trained_gamma(rows: pd.DataFrame) -> pd.Series:
    """The γ each row's run was trained with: its γ for a method that takes one, 0 for a γ-free method (its row's γ
    is the one it was selected for; :func:`raco_bench.sweeps.trial.run_config` trains it at 0)."""
    from raco_bench.methods import get_method

    takes = {m: get_method(m).gamma_is_input for m in rows["method"].unique()}
    gamma = pd.to_numeric(rows["gamma"], errors="coerce").astype(float)
    return gamma.where(rows["method"].map(takes).astype(bool), 0.0).fillna(0.0)


def measure(dataset: str, constraint: str, gammas, schema: str | None = None, data: str | None = None, spec: str | None = None) -> pd.DataFrame:
    """A row of :data:`COLUMNS` per γ in ``gammas``, from the dataset's protocol split (its test split is every repeat's)."""
    from raco_bench.constraints.families import Task, family
    from raco_bench.data import load_dataset

    ds = load_dataset(dataset, download=False, schema=schema, data=data)
    fam, task = family(constraint, spec), Task.of(ds)
    return pd.DataFrame([dict(dataset=dataset, constraint=constraint, gamma=float(g),
                              test_constant_accuracy=round(constant_accuracy(fam, task, ds.test.y, float(g)), 6),
                              test_rows=len(ds.test), n_train=len(ds.train)) for g in sorted(set(gammas))], columns=list(COLUMNS))


def read(folder: Path, dataset: str, constraint: str) -> pd.DataFrame | None:
    """``folder``'s evidence for this dataset and constraint, or None."""
    return rows_for(folder / EVIDENCE_FILE, dataset, constraint)


def measured(folder: Path, rows: pd.DataFrame, schema: str | None = None, data: str | None = None,
             spec: str | None = None) -> tuple[pd.DataFrame | None, list[Path]]:
    """``folder``'s evidence for ``rows`` (one dataset and constraint), measured first for the γ it does not hold yet
    when some row lacks its own (appended: a value already written is never measured again, and rows of another
    dataset or constraint stay); and the files written. None when the dataset cannot be loaded here (nothing is
    downloaded for a page)."""
    dataset, constraint = str(rows["dataset"].iloc[0]), str(rows["constraint"].iloc[0])
    have = read(folder, dataset, constraint)
    lacking = rows[_lacks(rows)]
    if lacking.empty:
        return have, []
    needed = set(trained_gamma(lacking)) - (set(have["gamma"].astype(float)) if have is not None else set())
    if not needed:
        return have, []
    new = if_loadable(lambda: measure(dataset, constraint, needed, schema, data, spec))
    if new is None:
        return have, []
    path = folder / EVIDENCE_FILE
    kept = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=list(COLUMNS))
    table = pd.concat([kept, new], ignore_index=True) if len(kept) else new
    table.sort_values(["dataset", "constraint", "gamma"], kind="stable").to_csv(path, index=False)
    return read(folder, dataset, constraint), [path]


def lacking(rows: pd.DataFrame) -> bool:
    """Whether some row of ``rows`` did not record the evidence :func:`fill` supplies."""
    return bool(len(rows)) and bool(_lacks(rows).any())


def _lacks(rows: pd.DataFrame) -> pd.Series:
    """Rows missing any of the evidence :func:`fill` supplies."""
    lacks = pd.Series(False, index=rows.index)
    for col in FILLED:
        lacks |= rows[col].isna() if col in rows else True
    return lacks


def _batch_sizes(rows: pd.DataFrame) -> pd.Series:
    """The expected batch size of each row's run: what its hyperparameters (their JSON) hold, else its method's default
    (a batch size the search left alone); NaN for a method without one (full-batch steps)."""
    from raco_bench.methods import get_method

    text = rows["params"].astype(object).where(rows["params"].notna(), "").astype(str)
    batch = pd.to_numeric(text.str.extract(r'"batch_size":\s*([-+0-9.eE]+)')[0], errors="coerce")
    default = {m: getattr(get_method(m).hyperparameters(), "batch_size", None) for m in rows["method"].unique()}
    return batch.fillna(rows["method"].map(lambda m: math.nan if default[m] is None else float(default[m])))


def fill(rows: pd.DataFrame, evidence: pd.DataFrame | None) -> pd.DataFrame:
    """``rows`` with the evidence they lack filled from ``evidence`` (by γ as trained) and their own T and batch size;
    a row that recorded its own keeps it, a γ the evidence does not hold stays NaN (the rule is then not applied)."""
    if evidence is None or rows.empty or not _lacks(rows).any():
        return rows
    out = rows.copy()
    for col in FILLED:
        if col not in out:
            out[col] = math.nan
    by_gamma = evidence.set_index(evidence["gamma"].astype(float))
    gamma = trained_gamma(out)
    for col in ("test_constant_accuracy", "test_rows"):
        out[col] = out[col].astype(float).fillna(gamma.map(by_gamma[col]).astype(float))
    n_train = float(evidence["n_train"].iloc[0])
    steps, batch = out["steps"].astype(float), _batch_sizes(out)
    computed = (steps * batch / n_train).where(batch.notna(), steps)  # training.health.passes, row by row
    out["passes"] = out["passes"].astype(float).fillna(computed)
    return out
