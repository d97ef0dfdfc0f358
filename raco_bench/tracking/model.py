"""Log a trained model as an MLflow pyfunc model with its signature (code: raco_bench/tracking/pyfunc.py).

The signature is built from the feature names and the output columns alone: no input example is
logged, because an example would copy private training rows into the tracking store.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from raco_bench import tracking

CODE = Path(__file__).with_name("pyfunc.py")
ARTIFACT_NAME = "model"


GROUP_COLUMN = "group"  # the group index a randomised post-processed predictor reads (DP post-processing)


def signature(feature_names: list[str], n_classes: int, group: bool = False):
    """Inputs: the encoded feature columns, plus ``group`` (the group's index) for a predictor that uses the group at
    prediction time; outputs: ``prediction`` and ``probability_<k>``."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    inputs = Schema([ColSpec("double", name) for name in feature_names] + ([ColSpec("long", GROUP_COLUMN)] if group else []))
    outputs = Schema([ColSpec("long", "prediction")] + [ColSpec("double", f"probability_{k}") for k in range(n_classes)])
    return ModelSignature(inputs=inputs, outputs=outputs)


def feature_names_for(weights: dict[str, np.ndarray], names: tuple[str, ...], extra: tuple[str, ...] = ()) -> list[str]:
    """The model's input columns: the dataset's features, plus ``extra`` (group columns) when the weights take them."""
    layers = [k for k in weights if k.split(".")[0].isdigit()]
    first = weights["weight"] if "weight" in weights else weights[f"{min(int(k.split('.')[0]) for k in layers)}.weight"]
    d = first.shape[1]
    for candidate in (list(names), list(names) + list(extra)):
        if len(candidate) == d:
            return candidate
    return [f"x{i}" for i in range(d)]


def logged_model_ids(uri: str, experiment_id: str, run_id: str) -> list[str]:
    return [m.model_id for m in tracking.logged_models(uri, experiment_id, run_id)]


def log_model(uri: str, run_id: str, weights_file: Path, feature_names: list[str], n_classes: int, name: str = ARTIFACT_NAME,
              tags: dict[str, str] | None = None) -> None:
    """Log ``weights_file`` as the run's pyfunc model named ``name`` (the method), once: a run that already has one (a
    killed attempt) keeps it. ``tags`` go on the logged model (its source, what the run read outside the budget).

    Weights with a ``postprocess`` table (DP post-processing's randomised predictor) make a model whose input has a
    ``group`` column and whose ``prediction`` is one random draw: labelled so in its tags.

    MLflow's ``log_model`` works on the active run, so the run is resumed for the call; the caller
    then marks it complete and finished as usual.
    """
    import mlflow

    run = tracking.get_run(uri, run_id)
    if logged_model_ids(uri, run.info.experiment_id, run_id):
        return
    with np.load(weights_file) as z:
        randomised = "postprocess" in z.files
    tags = dict(tags or {})
    if randomised:
        tags["predictor"] = ("randomised: prediction is one draw of P(Y=1 | group, base prediction); uses the group at prediction time "
                             f"(input column {GROUP_COLUMN!r}: the group's index)")
    with tracking.fluent_uri(uri), warnings.catch_warnings(), mlflow.start_run(run_id=run_id):
        warnings.simplefilter("ignore")  # MLflow's hints about input examples and type hints (see the module docstring)
        mlflow.pyfunc.log_model(name=name, python_model=str(CODE), artifacts={"weights": str(weights_file)},
                                signature=signature(feature_names, n_classes, group=randomised), pip_requirements=["mlflow", "numpy", "pandas"],
                                tags=tags)
