"""Run configuration: every hyperparameter with its default from the spec, validated up front.

Defaults (raco_dp_spec.md §5.2 ranges, tuned on Adult for ε = 1, see README): expected batch size
B = 1024 (q = B/n), σ_m = 4, s_L = 2 (Laplace scale), C = 1, τ = 1, η_θ = 0.5, η_λ = 0.5.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from raco_bench.privacy.accounting import HISTOGRAM_BATCH_MODES

DUAL_UPDATES = ("soft", "hard")


@dataclass(frozen=True)
class Hyperparameters:
    batch_size: int = 1024  # expected batch size B; q = B / n_train
    noise_multiplier: float = 4.0  # σ_m: Gaussian std = σ_m·C on the clipped sum
    laplace_scale: float = 2.0  # s_L: Laplace(0, s_L) in every histogram cell
    clip_norm: float = 1.0  # C
    temperature: float = 1.0  # τ, multiplies the logits
    lr: float = 0.5  # η_θ
    dual_lr: float = 0.5  # η_λ
    dual_update: str = "soft"  # soft | hard (spec Q8)
    histogram_batch: str = "shared"  # shared | independent (spec Q5)
    lambda_max: float | None = None  # optional box projection of λ (spec Q9)
    dual_momentum: float = 0.0  # spec Q18
    clip_constraint_value: bool = False  # clip Γ̂ to [0, 1] as the reference code does (spec Q6)
    model: str = "logistic"  # logistic | mlp
    hidden: int = 64  # MLP width

    def validate(self, n_train: int | None = None) -> None:
        def bad(name: str, value: Any, why: str) -> ValueError:
            return ValueError(f"invalid {name}={value!r}: {why}")

        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise bad("batch_size", self.batch_size, "the expected batch size must be a positive integer")
        if n_train is not None and self.batch_size > n_train:
            raise bad("batch_size", self.batch_size, f"q = batch_size / n_train must be in (0, 1]; n_train = {n_train}")
        for name in ("noise_multiplier", "laplace_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise bad(name, v, "must be a finite number >= 0")
        for name in ("clip_norm", "lr", "dual_lr", "temperature"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise bad(name, v, "must be a finite number > 0")
        if self.dual_update not in DUAL_UPDATES:
            raise bad("dual_update", self.dual_update, f"choose one of {DUAL_UPDATES}")
        if self.histogram_batch not in HISTOGRAM_BATCH_MODES:
            raise bad("histogram_batch", self.histogram_batch, f"choose one of {HISTOGRAM_BATCH_MODES}")
        if self.lambda_max is not None and not self.lambda_max > 0:
            raise bad("lambda_max", self.lambda_max, "must be > 0 (or unset)")
        if not 0 <= self.dual_momentum < 1:
            raise bad("dual_momentum", self.dual_momentum, "must be in [0, 1)")
        if self.model not in ("logistic", "mlp"):
            raise bad("model", self.model, "choose 'logistic' or 'mlp'")
        if self.hidden < 1:
            raise bad("hidden", self.hidden, "must be >= 1")


@dataclass(frozen=True)
class RunConfig:
    dataset: str = "adult"
    method: str = "raco-dp"
    constraint: str = "demographic-parity"
    gamma: float = 0.05
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: int | None = None  # None: the largest T the budget allows (private) / default_steps
    max_steps: int = 5000  # cap on the calibrated T (the reference code's MAX_STEPS)
    default_steps: int = 2000  # T of non-private runs when ``steps`` is unset
    seed: int = 0
    split_seed: int = 0
    eval_every: int = 25
    device: str = "cpu"
    hyper: Hyperparameters = field(default_factory=Hyperparameters)

    def validate(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(f"invalid epsilon={self.epsilon!r}: the privacy budget must be > 0 (use a non-private method for no privacy)")
        if not 0 < self.delta < 1:
            raise ValueError(f"invalid delta={self.delta!r}: must be in (0, 1)")
        if not math.isfinite(self.gamma):
            raise ValueError(f"invalid gamma={self.gamma!r}: the constraint slack must be a finite number")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"invalid steps={self.steps!r}: must be >= 1 (or unset to use the privacy budget)")
        if self.eval_every < 1:
            raise ValueError(f"invalid eval_every={self.eval_every!r}: must be >= 1")
        self.hyper.validate()

    def with_overrides(self, overrides: dict[str, str]) -> "RunConfig":
        """Apply ``key=value`` strings to run or hyperparameter fields, parsing by the field's type."""
        run_fields = {f.name: f for f in fields(self) if f.name != "hyper"}
        hyper_fields = {f.name: f for f in fields(self.hyper)}
        run_updates, hyper_updates = {}, {}
        for key, raw in overrides.items():
            if key in hyper_fields:
                hyper_updates[key] = _parse(key, raw, getattr(self.hyper, key), hyper_fields[key].type)
            elif key in run_fields:
                run_updates[key] = _parse(key, raw, getattr(self, key), run_fields[key].type)
            else:
                known = sorted(set(hyper_fields) | set(run_fields))
                raise ValueError(f"unknown setting {key!r}; known settings: {', '.join(known)}")
        return replace(self, hyper=replace(self.hyper, **hyper_updates), **run_updates)

    def to_dict(self) -> dict:
        return asdict(self)


def _parse(key: str, raw: str, current: Any, annotation: Any) -> Any:
    text = str(raw).strip()
    ann = str(annotation)
    if text.lower() in {"none", "null"} and "None" in ann:
        return None
    try:
        if "bool" in ann:
            if text.lower() in {"1", "true", "yes"}:
                return True
            if text.lower() in {"0", "false", "no"}:
                return False
            raise ValueError
        if "int" in ann and "float" not in ann:
            return int(text)
        if "float" in ann:
            return float(text)
        return text
    except ValueError:
        raise ValueError(f"cannot parse {key}={raw!r} as {ann}") from None
