"""Benchmark datasets: raw-file verification, loaders and the preprocessing protocol."""

from raco_bench.data.catalog import DATASETS, EXPECTED, get_spec, load_dataset
from raco_bench.data.files import ChecksumMismatchError, DataError, MissingDataError
from raco_bench.data.tabular import Split, TabularDataset

__all__ = [
    "DATASETS", "EXPECTED", "get_spec", "load_dataset", "ChecksumMismatchError", "DataError",
    "MissingDataError", "Split", "TabularDataset",
]
