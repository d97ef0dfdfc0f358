"""Models with per-sample gradient engines.

The training objective of every method in the suite is a per-sample function of the logits,
u_i = f(h_θ(x_i); y_i, c_i). Two engines produce Σ_i clip(∇_θ u_i, C):

* :class:`LogisticRegression` (the papers' model): ∇_θ u_i = r_i ⊗ [x_i; 1] with r_i = ∂f/∂z, a
  rank-1 outer product. So ‖∇_θ u_i‖ = ‖r_i‖·‖[x_i; 1]‖ and the clipped sum is one matmul; no
  per-sample gradient is ever materialised (the "ghost clipping" idea, exact for one linear layer).
* :class:`MLP`: per-sample gradients with ``torch.func`` (``vmap(grad(...))``). We use torch.func
  rather than opacus' GradSampleModule because it is functional: parameters are explicit tensors,
  so the step stays a pure function of (parameters, multipliers, random stream) and can later be
  vmapped over many configurations; GradSampleModule keeps hook state inside the module and its
  hooks mode is deprecated upstream.

Both expose :meth:`lagrangian_grad_sum`, the one call a training step makes: the model decides how it
computes Σ_i clip(∇_θ u_i, C) for the per-sample Lagrangian u_i of eq. 10 (steps never ask which
model they have). ``per_sample_grads`` materialises the gradients for tests and small models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch.func import grad, vmap

from raco_bench.objective import lagrangian_residual, lagrangian_value
from raco_bench.privacy import clip_noise
from raco_bench.privacy.counter_rng import INIT, Stream

Params = dict[str, torch.Tensor]
LogitObjective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Batch:
    """The rows of one batch as a step sees them: features, labels (indices and one-hot) and ‖x‖² + 1."""

    X: torch.Tensor
    y: torch.Tensor
    y_onehot: torch.Tensor
    sq_norms: torch.Tensor | None = None


def _clip_factors(norms: torch.Tensor, clip: float | None) -> torch.Tensor:
    if clip is None:
        return torch.ones_like(norms)
    return clip_noise.clip_factors(norms.square(), clip)


def _uniform_init(stream: Stream, shapes: dict[str, tuple[int, ...]], fan_in: dict[str, int]) -> Params:
    """Each parameter U(−1/√fan_in, 1/√fan_in) (torch.nn.Linear's default), from consecutive uniforms of the stream."""
    total = sum(math.prod(shape) for shape in shapes.values())
    u = stream.uniform(0, total, INIT)
    params, offset = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape)
        params[name] = (u[offset : offset + size].view(shape) * 2 - 1) / math.sqrt(fan_in[name])
        offset += size
    return params


@dataclass(frozen=True)
class LogisticRegression:
    n_features: int
    n_classes: int

    def init(self, stream: Stream) -> Params:
        """nn.Linear's default initialisation, U(−1/√d, 1/√d), from the run's step-0 stream."""
        return _uniform_init(stream, {"weight": (self.n_classes, self.n_features), "bias": (self.n_classes,)},
                             {"weight": self.n_features, "bias": self.n_features})

    def logits(self, params: Params, X: torch.Tensor) -> torch.Tensor:
        return torch.addmm(params["bias"], X, params["weight"].T)

    def clipped_grad_sum(
        self, params: Params, X: torch.Tensor, residual: torch.Tensor, clip: float | None, sq_norms: torch.Tensor | None = None
    ) -> Params:
        """Σ_i clip(r_i ⊗ [x_i; 1], C) given r = ∂u/∂z; ``sq_norms`` = ‖x_i‖² + 1 if precomputed."""
        if clip is not None:
            if sq_norms is None:
                sq_norms = X.pow(2).sum(1) + 1.0
            # clip factor min(1, C/‖g_i‖) with ‖g_i‖² = ‖r_i‖²(‖x_i‖² + 1); a zero norm gives factor 1
            factor = clip_noise.clip_factors(residual.square().sum(1) * sq_norms, clip)
            residual = residual * factor[:, None]
        return {"weight": residual.T @ X, "bias": residual.sum(0)}

    def per_sample_grads(self, params: Params, X: torch.Tensor, residual: torch.Tensor) -> Params:
        return {"weight": residual[:, :, None] * X[:, None, :], "bias": residual}

    def lagrangian_grad_sum(self, params: Params, batch: Batch, probs: torch.Tensor, coef: torch.Tensor | None, tau: float,
                            clip: float | None) -> Params:
        """Σ_i clip(∇_θ u_i, C) for u_i = CE(τz_i, y_i) + ⟨c_i, σ_τ(z_i)⟩ (eq. 10), rank-1 and exact; ``coef=None``: CE only."""
        residual = lagrangian_residual(probs, batch.y_onehot, coef, tau)
        return self.clipped_grad_sum(params, batch.X, residual, clip, batch.sq_norms)


@dataclass(frozen=True)
class MLP:
    n_features: int
    n_classes: int
    hidden: int = 64

    def _module(self) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(self.n_features, self.hidden), torch.nn.ReLU(), torch.nn.Linear(self.hidden, self.n_classes))

    def init(self, stream: Stream) -> Params:
        shapes = {"0.weight": (self.hidden, self.n_features), "0.bias": (self.hidden,), "2.weight": (self.n_classes, self.hidden), "2.bias": (self.n_classes,)}
        return _uniform_init(stream, shapes, {name: self.n_features if name[0] == "0" else self.hidden for name in shapes})

    def logits(self, params: Params, X: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.addmm(params["0.bias"], X, params["0.weight"].T))
        return torch.addmm(params["2.bias"], h, params["2.weight"].T)

    def per_sample_grads_of(self, params: Params, X: torch.Tensor, objective: LogitObjective, y: torch.Tensor, coef: torch.Tensor) -> Params:
        def single(p: Params, x: torch.Tensor, yi: torch.Tensor, ci: torch.Tensor) -> torch.Tensor:
            z = self.logits(p, x[None])[0]
            return objective(z, yi, ci)

        return vmap(grad(single), in_dims=(None, 0, 0, 0))(params, X, y, coef)

    def clipped_grad_sum_of(
        self, params: Params, X: torch.Tensor, objective: LogitObjective, y: torch.Tensor, coef: torch.Tensor, clip: float | None
    ) -> Params:
        grads = self.per_sample_grads_of(params, X, objective, y, coef)
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
        factors = _clip_factors(norms, clip)
        return {k: torch.tensordot(factors, g, dims=1) for k, g in grads.items()}

    def lagrangian_grad_sum(self, params: Params, batch: Batch, probs: torch.Tensor, coef: torch.Tensor | None, tau: float,
                            clip: float | None) -> Params:
        """Σ_i clip(∇_θ u_i, C) for eq. 10's u_i, by per-sample autodiff; ``coef=None``: CE only."""
        c = coef if coef is not None else probs.new_zeros(probs.shape)
        objective = lambda z, yi, ci: lagrangian_value(z, yi, ci, tau)  # noqa: E731
        return self.clipped_grad_sum_of(params, batch.X, objective, batch.y, c, clip)


def build_model(name: str, n_features: int, n_classes: int, hidden: int = 64):
    if name == "logistic":
        return LogisticRegression(n_features, n_classes)
    if name == "mlp":
        return MLP(n_features, n_classes, hidden)
    raise ValueError(f"unknown model {name!r}; choose 'logistic' or 'mlp'")
