"""The preprocessed dataset object and the protocol that builds it (docs/datasets.md; docs/methods/raco-dp.md, D12).

Protocol, identical for every dataset:

1. a seeded 75/25 train/test split, stratified on (label, group);
2. 15% of that training part held out as validation, stratified the same way;
3. feature encoding, by ``preprocessing``:

   * ``"public"`` (the default): every column through its public domain from the dataset catalog
     (:mod:`raco_bench.data.schema`): numeric values clipped to a documented range and mapped to
     [0, 1], categories one-hot over a documented vocabulary. No statistic of the rows is used, so
     the encoding costs no privacy budget;
   * ``"paper"``: the papers' preprocessing, one-hot vocabulary read from the whole table and
     z-scoring with the mean and standard deviation (ddof=1) of the final training split. These are
     statistics of the private rows released outside the budget; the dataset says so
     (:attr:`TabularDataset.outside_budget`) and every run, MLflow tag and figure repeats it;
4. the sensitive attribute is kept out of the features; :meth:`TabularDataset.with_group_features`
   appends it one-hot for a method that asks for it.

Splits depend only on the seed and on the table's row order (no hash-seeded ordering), so they are
identical across processes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from raco_bench.data.schema import PAPER_PREPROCESSING_NOTE, PREPROCESSING_MODES, CategoricalDomain, PublicSchema

TEST_FRACTION = 0.25
VALIDATION_FRACTION = 0.15


@dataclass(frozen=True)
class Split:
    """One split: float32 features, integer labels in [0, c), integer group ids in [0, G)."""

    X: np.ndarray
    y: np.ndarray
    group: np.ndarray

    def __post_init__(self) -> None:
        n = self.X.shape[0]
        if self.y.shape != (n,) or self.group.shape != (n,):
            raise ValueError(f"split arrays disagree in length: X {self.X.shape}, y {self.y.shape}, group {self.group.shape}")

    def __len__(self) -> int:
        return int(self.X.shape[0])


@dataclass(frozen=True)
class TabularDataset:
    name: str
    train: Split
    val: Split
    test: Split
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]
    group_names: tuple[str, ...]
    sensitive_attribute: str
    split_seed: int
    note: str = ""
    preprocessing: str = "public"
    validation_split: int = 0  # 0: the protocol's train/validation split; r > 0: its r-th resample (the test split fixed)
    task_outside_budget: tuple[str, ...] = ()  # statistics of the rows in the task definition itself (e.g. a label threshold)
    published_train_rows: int | None = None  # the training split's public size, from the schema (None: not declared public)
    data_notes: tuple[str, ...] = ()  # what the run's notes say about the data (values clipped to their range in val / test)
    origin: dict = field(default_factory=dict)  # the files read and their sha256 (schema, table or raw files): what the run records

    @functools.cached_property
    def tensors(self) -> dict:
        """Device tensors built from this dataset, shared by every run prepared on it (keyed by their builder: the
        training table and evaluation splits of a device and constraint), so that K runs of a pack hold one copy, not K.
        Not pickled: a copy of the dataset builds its own."""
        return {}

    def shared_tensors(self, key: tuple, build):
        """The tensors ``build()`` makes for ``key``, built the first time and shared by every later caller."""
        if key not in self.tensors:
            self.tensors[key] = build()
        return self.tensors[key]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "tensors"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    @property
    def outside_budget(self) -> tuple[str, ...]:
        """What building this dataset read from the private rows outside any privacy budget (empty: nothing)."""
        return self.task_outside_budget + ((PAPER_PREPROCESSING_NOTE,) if self.preprocessing == "paper" else ())

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_groups(self) -> int:
        return len(self.group_names)

    @property
    def n_rows(self) -> int:
        return len(self.train) + len(self.val) + len(self.test)

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "val": self.val, "test": self.test}

    def with_group_features(self) -> "TabularDataset":
        """A copy whose features end with the one-hot sensitive attribute (for methods that use it)."""

        def add(split: Split) -> Split:
            onehot = np.eye(self.n_groups, dtype=np.float32)[split.group]
            return Split(np.concatenate([split.X, onehot], axis=1), split.y, split.group)

        names = self.feature_names + tuple(f"{self.sensitive_attribute}={g}" for g in self.group_names)
        return replace(self, train=add(self.train), val=add(self.val), test=add(self.test), feature_names=names)


def _zscore(values: np.ndarray, train_rows: np.ndarray) -> np.ndarray:
    """``preprocessing=paper``: z-scored with the training rows' mean and standard deviation (ddof=1), outside the budget."""
    train_values = values[train_rows]
    mean = train_values.mean()
    std = train_values.std(ddof=1)
    return (values - mean) / (std if std > 0 else 1.0)


def stratified_split(strata: np.ndarray, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Split row indices into (kept, held_out) with ``fraction`` of every stratum held out.

    Each stratum holds out round(fraction * size) rows, chosen uniformly at random; strata of one
    row stay whole in the kept part. Indices are returned sorted.
    """
    kept: list[np.ndarray] = []
    held: list[np.ndarray] = []
    for value in np.unique(strata):
        idx = np.flatnonzero(strata == value)
        idx = idx[rng.permutation(idx.size)]
        n_out = int(round(fraction * idx.size))
        held.append(idx[:n_out])
        kept.append(idx[n_out:])
    return np.sort(np.concatenate(kept)), np.sort(np.concatenate(held))


def split_indices(y: np.ndarray, group: np.ndarray, seed: int, test_fraction: float = TEST_FRACTION,
                  validation_fraction: float = VALIDATION_FRACTION, test_rows: np.ndarray | None = None,
                  validation_rows: np.ndarray | None = None, validation_split: int = 0) -> dict[str, np.ndarray]:
    """Row indices of train / val / test under the project protocol (75/25, then 15% of train), or with the test rows
    (and the validation rows) a split column names (``test_rows``, ``validation_rows``: boolean masks over the rows).

    ``validation_split`` r > 0 resamples the train/validation split of the same training rows from its own generator
    (a repeat of the study's protocol, docs/results.md, "Repeats and intervals"): the test split is the one of ``seed``
    (or of the split column) whatever r is, and r = 0 is the protocol's split, the same rows as before repeats existed.
    A validation column fixes the validation rows, so it has no resample."""
    if not (isinstance(validation_split, (int, np.integer)) and validation_split >= 0):
        raise ValueError(f"invalid validation_split={validation_split!r}: a resample index is an integer >= 0 (0: the protocol's split)")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 75, 25, 15]))
    strata = y.astype(np.int64) * (int(group.max()) + 1) + group.astype(np.int64)
    if test_rows is None:
        train_all, test = stratified_split(strata, test_fraction, rng)
    else:
        train_all, test = np.flatnonzero(~test_rows), np.flatnonzero(test_rows)
    if validation_rows is not None:
        if validation_split:
            raise ValueError(f"validation_split={validation_split} resamples the validation rows, but the schema's split column names them: "
                             "repeats need a seeded validation split (drop the column's validation value, or run repeat 0 only)")
        named = validation_rows[train_all]
        return {"train": train_all[~named], "val": train_all[named], "test": test}
    if validation_split:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 75, 25, 15, int(validation_split)]))
    train_pos, val_pos = stratified_split(strata[train_all], validation_fraction, rng)
    return {"train": train_all[train_pos], "val": train_all[val_pos], "test": test}


@dataclass(frozen=True)
class RawTable:
    """A dataset before encoding: feature columns, labels, groups and the public schema of its columns."""

    name: str
    frame: pd.DataFrame  # features only
    label: np.ndarray
    group: np.ndarray
    class_names: tuple[str, ...]
    group_names: tuple[str, ...]
    sensitive_attribute: str
    categorical: tuple[str, ...]
    numeric: tuple[str, ...]
    schema: PublicSchema | None = None
    note: str = ""
    task_outside_budget: tuple[str, ...] = ()
    published_train_rows: int | None = None
    test_fraction: float = TEST_FRACTION
    validation_fraction: float = VALIDATION_FRACTION
    test_rows: np.ndarray | None = None  # a split column's test rows (boolean mask); None: the seeded split
    validation_rows: np.ndarray | None = None  # a split column's validation rows; None: validation_fraction of the training rows
    min_group_train_rows: int = 0  # a group with fewer training rows is refused (0: none is)
    origin: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label", np.asarray(self.label, dtype=np.int64))
        object.__setattr__(self, "group", np.asarray(self.group, dtype=np.int64))
        if self.sensitive_attribute in self.frame.columns:
            raise ValueError(f"{self.name}: the sensitive attribute {self.sensitive_attribute!r} must not be a feature column")

    def split(self, seed: int, validation_split: int = 0) -> dict[str, np.ndarray]:
        idx = split_indices(self.label, self.group, seed, self.test_fraction, self.validation_fraction, self.test_rows, self.validation_rows,
                            validation_split)
        self._check_groups(idx["train"])
        return idx

    def _check_groups(self, train: np.ndarray) -> None:
        """Refuse a group with fewer than ``min_group_train_rows`` rows in the training split: its rates cannot be constrained."""
        if self.min_group_train_rows <= 0:
            return
        counts = np.bincount(self.group[train], minlength=len(self.group_names))
        small = [(self.group_names[g], int(c)) for g, c in enumerate(counts) if c < self.min_group_train_rows]
        if small:
            from raco_bench.data.schema_file import SchemaError

            listed = ", ".join(f"{n!r} ({c} row{'s' if c != 1 else ''})" for n, c in small)
            raise SchemaError(f"{self.name}: group(s) {listed} of {self.sensitive_attribute} have fewer than {self.min_group_train_rows} rows in the "
                              "training split, too few to constrain their rates; drop those rows or their value from the group's values, or "
                              f"set min_group_train_rows (now {self.min_group_train_rows}) lower in the schema to keep them")

    def range_notes(self, idx: dict[str, np.ndarray]) -> tuple[str, ...]:
        """The run's note on values outside their declared range (clipped to it): counted on the validation and test rows only,
        whose statistics a run releases anyway (docs/privacy.md, "Threat model"); the training split's count is a statistic of
        the private rows and is not released."""
        if self.schema is None:
            return ()
        parts = []
        for col in sorted(self.numeric):
            domain = self.schema.numeric.get(col)
            if domain is None:
                continue
            values = self.frame[col].to_numpy(dtype=np.float64)
            counts = {k: int(np.count_nonzero((values[idx[k]] < domain.lo) | (values[idx[k]] > domain.hi))) for k in ("val", "test")}
            if any(counts.values()):
                parts.append(f"{col} [{domain.lo:g}, {domain.hi:g}]: {counts['val']} validation, {counts['test']} test rows")
        if not parts:
            return ()
        return ("values outside their declared range, clipped to it: " + "; ".join(parts)
                + " (the training split's count is a statistic of the private rows and is not released)",)

    def encode(self, preprocessing: str, train_rows: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
        """Features of every row (float32) and their names; ``paper`` reads statistics of ``train_rows``."""
        if preprocessing not in PREPROCESSING_MODES:
            raise ValueError(f"invalid preprocessing={preprocessing!r}: choose one of {PREPROCESSING_MODES}")
        blocks: list[tuple[tuple[str, ...], Callable[[], np.ndarray]]] = []  # (names, the block's values): filled one block at a time
        if preprocessing == "public":
            if self.schema is None:
                raise ValueError(f"{self.name}: preprocessing='public' needs the dataset's public schema")
            self.schema.check_columns(self.name, list(self.numeric), list(self.categorical))
            for col in sorted(self.numeric):
                blocks.append(((col,), lambda col=col: self.schema.numeric[col].encode(self.frame[col].to_numpy(dtype=np.float64))[:, None]))
            for col in sorted(self.categorical):
                domain = self.schema.categorical[col]
                blocks.append((tuple(f"{col}={level}" for level in domain.levels), lambda col=col, domain=domain: domain.encode(self.frame[col])))
        else:
            for col in sorted(self.numeric):
                blocks.append(((col,), lambda col=col: _zscore(self.frame[col].to_numpy(dtype=np.float64), train_rows)[:, None]))
            for col in sorted(self.categorical):
                values = self.frame[col].astype(str).to_numpy()
                levels = tuple(sorted(np.unique(values)))
                blocks.append((tuple(f"{col}={level}" for level in levels), lambda values=values, levels=levels: CategoricalDomain(levels).encode(values)))
        X = np.empty((len(self.frame), sum(len(n) for n, _ in blocks)), dtype=np.float32)  # float64 per block, float32 once (as before)
        at = 0
        for block_names, values in blocks:
            X[:, at:at + len(block_names)] = values()
            at += len(block_names)
        return X, tuple(name for block_names, _ in blocks for name in block_names)

    def dataset(self, seed: int, preprocessing: str = "public", idx: dict[str, np.ndarray] | None = None,
                validation_split: int = 0) -> TabularDataset:
        """The encoded, split dataset (``idx`` overrides the protocol's split, e.g. for audits; ``validation_split``
        resamples its train/validation split, :func:`split_indices`)."""
        idx = idx if idx is not None else self.split(seed, validation_split)
        X, names = self.encode(preprocessing, idx["train"])

        def take(key: str) -> Split:
            rows = idx[key]
            return Split(np.ascontiguousarray(X[rows]), self.label[rows], self.group[rows])

        return TabularDataset(
            name=self.name, train=take("train"), val=take("val"), test=take("test"), feature_names=names,
            class_names=self.class_names, group_names=self.group_names, sensitive_attribute=self.sensitive_attribute,
            split_seed=seed, validation_split=int(validation_split), note=self.note, preprocessing=preprocessing, task_outside_budget=self.task_outside_budget,
            published_train_rows=self.published_train_rows, data_notes=self.range_notes(idx) if preprocessing == "public" else (),
            origin=dict(self.origin),
        )

    def with_row(self, features: dict, label: int, group: int) -> "RawTable":
        """A copy with one more row appended (index ``len(self.frame)``)."""
        row = pd.DataFrame([features], columns=self.frame.columns)
        extend = lambda mask: None if mask is None else np.append(mask, False)  # noqa: E731 - a split column names the new row nothing
        return replace(self, frame=pd.concat([self.frame, row], ignore_index=True), label=np.append(self.label, label),
                       group=np.append(self.group, group), test_rows=extend(self.test_rows), validation_rows=extend(self.validation_rows))


def build_dataset(
    name: str,
    frame: pd.DataFrame,
    *,
    label: np.ndarray,
    group: np.ndarray,
    class_names: tuple[str, ...],
    group_names: tuple[str, ...],
    sensitive_attribute: str,
    categorical: list[str],
    numeric: list[str],
    seed: int,
    note: str = "",
    preprocessing: str = "public",
    schema: PublicSchema | None = None,
) -> TabularDataset:
    """Encode ``frame`` (features only) and split it under the project protocol."""
    table = RawTable(name, frame, label, group, class_names, group_names, sensitive_attribute, tuple(categorical), tuple(numeric), schema, note)
    return table.dataset(seed, preprocessing)
