"""The MLflow pyfunc model of a trained raco-bench classifier (MLflow "models from code").

MLflow copies this file into every logged model and runs it at load time, so it depends on numpy,
pandas and mlflow only, never on raco_bench: a model logged by a sweep loads anywhere with
``mlflow.pyfunc.load_model("models:/<model id>")``, ``models:/<registered name>/<version>`` or
``runs:/<run id>/<method>``.

Input: the encoded feature columns of the dataset (public preprocessing, see docs/datasets.md), one
row per example, in the signature's column order. Output: ``prediction`` (the class index) and
``probability_<k>`` (softmax of the logits) per class. The weights are those of the run's reported
model (its checkpoint rule, tag ``checkpoint``); the architecture is read from their names: ``weight``
/ ``bias`` is logistic regression, ``<i>.weight`` / ``<i>.bias`` are the linear layers of an MLP with
ReLU between them.

DP post-processing's model (weights with a ``postprocess`` table ``p[a, ŷ]``) is a randomised predictor that
uses the group at prediction time: its input also has a ``group`` column (the group's index), its
``probability_1`` is ``p[group, base prediction]`` and its ``prediction`` one draw from it (numpy's
default generator, fresh per call).
"""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd


def forward(weights: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Logits of the linear model or ReLU MLP stored in ``weights``."""
    if "weight" in weights:
        return X @ weights["weight"].T + weights["bias"]
    layers = sorted({int(k.split(".")[0]) for k in weights if k.split(".")[0].isdigit()})
    h = X
    for i, layer in enumerate(layers):
        h = h @ weights[f"{layer}.weight"].T + weights[f"{layer}.bias"]
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return h


def predict_frame(weights: dict[str, np.ndarray], X: np.ndarray) -> pd.DataFrame:
    z = forward(weights, np.asarray(X, dtype=np.float64))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return pd.DataFrame({"prediction": p.argmax(axis=1).astype(np.int64), **{f"probability_{k}": p[:, k] for k in range(p.shape[1])}})


class RacoBenchClassifier(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        with np.load(context.artifacts["weights"]) as z:
            self.weights = {k: z[k].astype(np.float64) for k in z.files}

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        if "postprocess" not in self.weights:
            return predict_frame(self.weights, np.asarray(model_input, dtype=np.float64))
        return predict_postprocessed(self.weights, model_input)


def predict_postprocessed(weights: dict[str, np.ndarray], frame: pd.DataFrame) -> pd.DataFrame:
    """The randomised post-processed predictor: P(Y = 1) = table[group, base prediction], and one draw of it."""
    if "group" not in frame:
        raise ValueError("this model uses the group at prediction time: add a 'group' column (the group's index)")
    base = predict_frame(weights, np.asarray(frame.drop(columns=["group"]), dtype=np.float64))["prediction"].to_numpy()
    p1 = weights["postprocess"][np.asarray(frame["group"], dtype=np.int64), base]
    draw = (np.random.default_rng().random(len(p1)) < p1).astype(np.int64)
    return pd.DataFrame({"prediction": draw, "probability_0": 1.0 - p1, "probability_1": p1})


mlflow.models.set_model(RacoBenchClassifier())
