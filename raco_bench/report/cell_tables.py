"""Tables a results page keeps beside its parts per (dataset, constraint): the noise floor and the health evidence.

Both are read the same way (the file's rows of one dataset and constraint, or None) and measured the same way (from
the dataset, when it can be loaded here: nothing is downloaded for a page, and a user's dataset whose schema or data
file is absent is skipped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

import pandas as pd

T = TypeVar("T")


def rows_for(path: Path, dataset: str, constraint: str) -> pd.DataFrame | None:
    """The rows of the table at ``path`` for ``dataset`` and ``constraint``; None when the file or the rows are absent."""
    if not path.is_file():
        return None
    table = pd.read_csv(path)
    table = table[(table["dataset"] == dataset) & (table["constraint"] == constraint)]
    return table if not table.empty else None


def if_loadable(measure: Callable[[], T]) -> T | None:
    """``measure()``, or None when the dataset it reads cannot be loaded here (absent, or a user's schema or data file
    not on this machine)."""
    from raco_bench.data import SchemaError
    from raco_bench.data.files import MissingDataError

    try:
        return measure()
    except (MissingDataError, SchemaError):
        return None
