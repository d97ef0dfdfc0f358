"""Feature domains fixed from public knowledge, so that preprocessing reads nothing from the private rows.

A DP guarantee covers only what is computed inside the mechanism. Z-scoring with the training split's
own mean and standard deviation (the papers' preprocessing) releases two statistics of unbounded
sensitivity through every model trained on the result; a one-hot vocabulary read off the rows
releases which categories occur. Both are outside any budget. Under ``preprocessing="public"`` (the
default, see docs/privacy.md) every transform is a fixed function of a single value:

* a numeric column is clipped to a public range [lo, hi] and mapped to [0, 1], linearly or on a
  log scale (for heavy-tailed money amounts), so one extreme record moves nothing but its own row;
* a categorical column is one-hot encoded over a vocabulary written in the dataset catalog from the
  dataset's documentation; a value outside it encodes as all zeros.

Each domain records where its numbers come from (``source``), and the catalog's choices are listed in
docs/datasets.md. Nothing here may be derived from the data files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PREPROCESSING_MODES = ("public", "paper")
PAPER_PREPROCESSING_NOTE = (
    "preprocessing=paper: z-scoring with the training split's mean and standard deviation and a one-hot "
    "vocabulary read from the rows are OUTSIDE the privacy budget"
)


@dataclass(frozen=True)
class NumericDomain:
    """A public range for one numeric column; values are clipped to it and mapped to [0, 1]."""

    lo: float
    hi: float
    log: bool = False  # map log1p(v − lo) / log1p(hi − lo) instead of (v − lo) / (hi − lo)
    source: str = ""

    def __post_init__(self) -> None:
        if not (np.isfinite(self.lo) and np.isfinite(self.hi) and self.hi > self.lo):
            raise ValueError(f"invalid public range [{self.lo}, {self.hi}]: need finite lo < hi")

    def encode(self, values: np.ndarray) -> np.ndarray:
        v = np.clip(np.asarray(values, dtype=np.float64), self.lo, self.hi) - self.lo
        if self.log:
            return np.log1p(v) / np.log1p(self.hi - self.lo)
        return v / (self.hi - self.lo)


@dataclass(frozen=True)
class CategoricalDomain:
    """A public vocabulary for one categorical column; unknown values encode as all zeros."""

    levels: tuple[str, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if len(set(self.levels)) != len(self.levels) or not self.levels:
            raise ValueError(f"a categorical vocabulary must be non-empty and without repeats: {self.levels}")

    def codes(self, values) -> np.ndarray:
        """Each value's index in the vocabulary (compared as text: the number 1 is the level "1"), -1 for a value outside it."""
        import pandas as pd

        series = values if isinstance(values, pd.Series) else pd.Series(np.asarray(values))
        if not isinstance(series.dtype, pd.StringDtype):
            series = series.astype(str)
        return pd.Categorical(series, categories=self.levels).codes.astype(np.int64)

    def encode(self, values) -> np.ndarray:
        codes = self.codes(values)
        out = np.zeros((codes.size, len(self.levels)))
        known = np.flatnonzero(codes >= 0)
        out[known, codes[known]] = 1.0
        return out


@dataclass(frozen=True)
class PublicSchema:
    """The public domain of every feature column of one dataset."""

    numeric: dict[str, NumericDomain] = field(default_factory=dict)
    categorical: dict[str, CategoricalDomain] = field(default_factory=dict)

    def check_columns(self, dataset: str, numeric: list[str], categorical: list[str]) -> None:
        missing = sorted(set(numeric) - set(self.numeric)) + sorted(set(categorical) - set(self.categorical))
        if missing:
            raise ValueError(f"{dataset}: the public schema has no domain for column(s) {', '.join(missing)}; add them to its schema file")


def binary(source: str) -> NumericDomain:
    """A 0/1 indicator (kept as is)."""
    return NumericDomain(0.0, 1.0, source=source)


def codes(lo: float, hi: float, source: str) -> NumericDomain:
    """An ordinal code in [lo, hi], used as a number (as the papers do)."""
    return NumericDomain(float(lo), float(hi), source=source)
