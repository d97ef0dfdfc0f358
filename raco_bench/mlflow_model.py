"""Log a trained model as an MLflow pyfunc model with its signature (code: raco_bench/mlflow_pyfunc.py).

The signature is built from the feature names and the output columns alone: no input example is
logged, because an example would copy private training rows into the tracking store.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

CODE = Path(__file__).with_name("mlflow_pyfunc.py")
ARTIFACT_NAME = "model"


def signature(feature_names: list[str], n_classes: int):
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    inputs = Schema([ColSpec("double", name) for name in feature_names])
    outputs = Schema([ColSpec("long", "prediction")] + [ColSpec("double", f"probability_{k}") for k in range(n_classes)])
    return ModelSignature(inputs=inputs, outputs=outputs)


def feature_names_for(weights: dict[str, np.ndarray], names: tuple[str, ...], extra: tuple[str, ...] = ()) -> list[str]:
    """The model's input columns: the dataset's features, plus ``extra`` (group columns) when the weights take them."""
    first = weights["weight"] if "weight" in weights else weights[f"{min(int(k.split('.')[0]) for k in weights)}.weight"]
    d = first.shape[1]
    for candidate in (list(names), list(names) + list(extra)):
        if len(candidate) == d:
            return candidate
    return [f"x{i}" for i in range(d)]


@contextmanager
def tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's fluent API pointed at ``uri`` for the block, then put back as it was. ``mlflow.set_tracking_uri``
    also sets the ``MLFLOW_TRACKING_URI`` environment variable, which every later subprocess would inherit."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # None unsets the variable again


def logged_model_ids(uri: str, experiment_id: str, run_id: str) -> list[str]:
    from raco_bench import tracking

    c = tracking.client(uri)
    found = tracking.retry(lambda: c.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'"))
    return [m.model_id for m in found]


def log_model(uri: str, run_id: str, weights_file: Path, feature_names: list[str], n_classes: int) -> None:
    """Log ``weights_file`` as the run's pyfunc model, once: a run that already has one (a killed attempt) keeps it.

    MLflow's ``log_model`` works on the active run, so the run is resumed for the call; the caller
    then marks it complete and finished as usual.
    """
    import mlflow

    from raco_bench import tracking

    run = tracking.retry(lambda: tracking.client(uri).get_run(run_id))
    if logged_model_ids(uri, run.info.experiment_id, run_id):
        return
    with tracking_uri(uri), warnings.catch_warnings(), mlflow.start_run(run_id=run_id):
        warnings.simplefilter("ignore")  # MLflow's hints about input examples and type hints (see the module docstring)
        mlflow.pyfunc.log_model(name=ARTIFACT_NAME, python_model=str(CODE), artifacts={"weights": str(weights_file)},
                                signature=signature(feature_names, n_classes), pip_requirements=["mlflow", "numpy", "pandas"])
