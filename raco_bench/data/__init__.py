"""Datasets: schema files, raw-file verification, loaders and the preprocessing protocol (docs/datasets.md)."""

from raco_bench.data.catalog import DATASETS, load_dataset, load_table
from raco_bench.data.files import ChecksumMismatchError, DataError, MissingDataError
from raco_bench.data.schema_file import SchemaError
from raco_bench.data.tabular import Split, TabularDataset

__all__ = [
    "DATASETS", "load_dataset", "load_table", "ChecksumMismatchError", "DataError", "MissingDataError", "SchemaError", "Split",
    "TabularDataset",
]
