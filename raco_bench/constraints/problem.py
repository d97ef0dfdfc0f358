"""Generalized rate constraints (paper §3, eq. 6) and their evaluation from a histogram (eq. 12).

A constraint j is a family 𝓘_j of subsets I of parts, a weight array w_j[I, k] over
(subset, class) and a slack γ_j:

    Γ_j(θ; D) = Σ_{I∈𝓘_j} Σ_k w_j[I, k] · P̃_k(θ; D_I) ≤ γ_j                    (eq. 6)

Everything is computed from a per-part histogram H[l, k] = Σ_{x∈D_l} p_k(x) (eq. 8): with soft
predictions p = σ_τ(h(x)) it gives soft rates, with one-hot argmax predictions hard rates, and with
a Laplace-noised histogram Ĥ the post-processed estimate Γ^post (eq. 12). Subset sizes are row sums
of the histogram (Σ_k p_k = 1), floored at 1 (docs/methods/raco-dp.md, D2); an empty subset therefore has rate 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from raco_bench.constraints.partition import Partition
from raco_bench.jit import kernel


@dataclass(frozen=True)
class RateConstraint:
    """One constraint (𝓘_j, w_j, γ_j); ``weights[i, k]`` multiplies the class-k rate on ``subsets[i]``."""

    subsets: tuple[tuple[int, ...], ...]
    weights: np.ndarray
    gamma: float
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "subsets", tuple(tuple(sorted(set(int(p) for p in s))) for s in self.subsets))
        object.__setattr__(self, "weights", np.asarray(self.weights, dtype=np.float64))


@dataclass(frozen=True)
class RateProblem:
    """A partition and the rate constraints defined on it; validated on construction."""

    partition: Partition
    constraints: tuple[RateConstraint, ...]
    name: str = "custom"
    subsets: tuple[tuple[int, ...], ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "constraints", tuple(self.constraints))
        if not self.constraints:
            raise ValueError(f"rate problem {self.name!r} has no constraints; give at least one RateConstraint")
        K, c = self.partition.n_parts, self.partition.n_classes
        unique: dict[tuple[int, ...], None] = {}
        for j, con in enumerate(self.constraints):
            label = con.name or f"#{j}"
            if not con.subsets:
                raise ValueError(f"constraint {label}: the family of subsets is empty; give at least one subset of parts")
            for s in con.subsets:
                if not s:
                    raise ValueError(f"constraint {label}: a subset is empty; each subset must name at least one part")
                bad = [p for p in s if not 0 <= p < K]
                if bad:
                    raise ValueError(
                        f"constraint {label}: subset {s} names part(s) {bad} that do not exist; "
                        f"the {self.partition.kind} partition has parts 0..{K - 1}"
                    )
                unique.setdefault(s, None)
            if con.weights.shape != (len(con.subsets), c):
                raise ValueError(
                    f"constraint {label}: weights have shape {con.weights.shape}, expected "
                    f"({len(con.subsets)}, {c}) = (number of subsets, number of classes)"
                )
            if not np.all(np.isfinite(con.weights)):
                raise ValueError(f"constraint {label}: weights must be finite")
            if not np.isfinite(con.gamma):
                raise ValueError(f"constraint {label}: the slack gamma must be a finite number, got {con.gamma!r}")
        object.__setattr__(self, "subsets", tuple(unique))

    @property
    def n_constraints(self) -> int:
        return len(self.constraints)

    @property
    def names(self) -> list[str]:
        return [c.name or f"constraint_{j}" for j, c in enumerate(self.constraints)]

    @property
    def gamma(self) -> np.ndarray:
        return np.array([c.gamma for c in self.constraints], dtype=np.float64)

    def with_gamma(self, gamma: float) -> "RateProblem":
        """The same constraints, every slack set to ``gamma``."""
        cons = tuple(RateConstraint(c.subsets, c.weights, float(gamma), c.name) for c in self.constraints)
        return RateProblem(self.partition, cons, self.name)

    def membership(self) -> np.ndarray:
        """M[u, l] = 1 if part l is in subset u (U × K)."""
        M = np.zeros((len(self.subsets), self.partition.n_parts))
        for u, s in enumerate(self.subsets):
            M[u, list(s)] = 1.0
        return M

    def weight_tensor(self) -> np.ndarray:
        """W[j, u, k]: constraint j's weight on class k of subset u (J × U × c)."""
        index = {s: u for u, s in enumerate(self.subsets)}
        W = np.zeros((self.n_constraints, len(self.subsets), self.partition.n_classes))
        for j, con in enumerate(self.constraints):
            for s, w in zip(con.subsets, con.weights):
                W[j, index[s]] += w
        return W

    def compile(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> "CompiledRates":
        return CompiledRates.build(self, torch.device(device), dtype)


@dataclass(frozen=True)
class CompiledRates:
    """Dense tensors of a :class:`RateProblem` for fast evaluation on a device."""

    membership: torch.Tensor  # U × K
    weights: torch.Tensor  # J × (U·c)
    gamma: torch.Tensor  # J
    n_parts: int
    n_classes: int
    _numpy_cache: dict = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def build(problem: RateProblem, device: torch.device, dtype: torch.dtype) -> "CompiledRates":
        W = problem.weight_tensor()
        return CompiledRates(
            membership=torch.as_tensor(problem.membership(), dtype=dtype, device=device),
            weights=torch.as_tensor(W.reshape(W.shape[0], -1), dtype=dtype, device=device),
            gamma=torch.as_tensor(problem.gamma, dtype=dtype, device=device),
            n_parts=problem.partition.n_parts,
            n_classes=problem.partition.n_classes,
        )

    def to(self, device: torch.device | str) -> "CompiledRates":
        """These rates on ``device`` (a pack on a GPU computes an evaluation's metrics from counts read back to the host)."""
        return CompiledRates(self.membership.to(device), self.weights.to(device), self.gamma.to(device), self.n_parts, self.n_classes)

    def histogram(self, probs: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
        """H[l, k] = Σ_{x in part l} probs[x, k] (eq. 8)."""
        H = probs.new_zeros(self.n_parts, self.n_classes)
        return H.index_add_(0, parts, probs)

    def subset_sizes(self, H: torch.Tensor) -> torch.Tensor:
        """n̂_u = max(1, Σ_{l∈u} Σ_k H[l, k]) (Algorithm 1 line 4; docs/methods/raco-dp.md, D2).

        ``H`` is one histogram (P × c) or K stacked ones (K × P × c); the result is U or K × U."""
        return (H.sum(dim=-1) @ self.membership.T).clamp_min(1.0)

    def values(self, H: torch.Tensor, sizes: torch.Tensor | None = None) -> torch.Tensor:
        """Γ_j from a histogram (eq. 6 with exact H, eq. 12 with a noisy Ĥ): J values, or K × J for K stacked histograms."""
        if sizes is None:
            sizes = self.subset_sizes(H)
        rates = (self.membership @ H) / sizes[..., None]
        return rates.flatten(-2) @ self.weights.T

    def dual_quantities(self, H: torch.Tensor, lam: torch.Tensor, scale: float | torch.Tensor, host: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """From one (noisy) histogram: the part coefficients of the current λ times ``scale``, and Γ̂ (eq. 12).

        The fused form of :meth:`part_coefficients` and :meth:`values` that the training step uses;
        both share n̂ = max(1, M·rowsum(H)) (the row sums of M·H are M·rowsum(H)). These tensors are
        tiny (at most J × U × c per configuration), so on the CPU one compiled loop computes them on zero-copy
        numpy views (:meth:`dual_quantities_host`): torch's per-operation overhead would be most of the cost.
        Other devices use torch, and so does ``host=False`` (a pack step that must not leave the device's operations).

        A pack passes K stacked histograms (K × P × c), multipliers K × J and one scale per
        configuration (K); it gets coefficients K × P × c and Γ̂ K × J.
        """
        if host and H.device.type == "cpu":
            stacked = H.dim() == 3
            K = H.shape[0] if stacked else 1
            coef, estimates = self.dual_quantities_host(H.reshape(K, *H.shape[-2:]).contiguous().numpy(), lam.reshape(K, -1).to(H.dtype).contiguous().numpy(),
                                                        torch.as_tensor(scale, dtype=H.dtype).expand(K).contiguous().numpy(), np.arange(K))
            return torch.from_numpy(coef.reshape(H.shape)), torch.from_numpy(estimates if stacked else estimates[0])
        MH = self.membership @ H
        inv_sizes = MH.sum(-1, keepdim=True).clamp_min(1.0).reciprocal()
        estimates = (MH * inv_sizes).flatten(-2) @ self.weights.T
        scale = torch.as_tensor(scale, dtype=H.dtype, device=H.device)[..., None, None]
        coef = self.membership.T @ ((lam @ self.weights).unflatten(-1, (-1, self.n_classes)) * (inv_sizes * scale))
        return coef, estimates

    def dual_quantities_host(self, H: np.ndarray, lam: np.ndarray, scale: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`dual_quantities` on numpy arrays, in one compiled loop (:func:`_dual_quantities`): K histograms H (K × P × c),
        each of configuration ``index[k]`` of the N whose multipliers ``lam`` (N × J) and scales (N) are given; returns
        the coefficients (K × P × c) and Γ̂ (K × J)."""
        member, weights = self._host_structure(H.dtype)
        if lam.dtype != H.dtype or scale.dtype != H.dtype or H.ndim != 3 or H.shape[1:] != (member.shape[1], weights.shape[2]):
            raise ValueError(f"dual_quantities_host: H must be K × {member.shape[1]} × {weights.shape[2]} and λ and the scales of its dtype {H.dtype}")
        if len(index) and not 0 <= index.min() <= index.max() < min(len(lam), len(scale)):
            raise ValueError("dual_quantities_host: index names a configuration that λ or the scales do not hold")
        coef, estimates = np.empty_like(H), np.empty((H.shape[0], weights.shape[0]), H.dtype)
        _dual_quantities(H, lam, scale, index, member, weights, coef, estimates)
        return coef, estimates

    def _host_structure(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """The membership (U × P) and the weights (J × U × c) as numpy arrays of ``dtype``, made once per dtype."""
        dtype = np.dtype(dtype)
        cached = self._numpy_cache.get(dtype)
        if cached is None:
            weights = self.weights.numpy().reshape(self.weights.shape[0], -1, self.n_classes)
            cached = self._numpy_cache[dtype] = (self.membership.numpy().astype(dtype), np.ascontiguousarray(weights, dtype=dtype))
        return cached

    def part_coefficients(self, lam: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """coef[l, k] = Σ_j λ_j Σ_{I∋l} w_j[I, k] / n̂_I, so that the per-sample regularizer of eq. 10
        is r_x = Σ_k coef[part(x), k] · σ_τ(h(x))_k."""
        per_subset = (lam @ self.weights).reshape(-1, self.n_classes) / sizes[:, None]
        return self.membership.T @ per_subset


@kernel
def _dual_quantities(H, lam, scale, index, member, weights, coef, estimates):
    """:meth:`CompiledRates.dual_quantities` for K histograms H (K × P × c), histogram n of configuration index[n] of λ (N × J)
    and scales (N), with the membership (U × P) and the weights (J × U × c): writes the coefficients (K × P × c) and
    Γ̂ (K × J). Per configuration:
    MH = M·H, n̂_u = max(1, Σ_k MH[u, k]), Γ̂_j = Σ_{u,k} w_j[u, k]·MH[u, k]/n̂_u (eq. 12) and
    coef[l, k] = scale · Σ_{u ∋ l} Σ_j λ_j w_j[u, k]/n̂_u (eq. 10)."""
    K, P, c = H.shape
    U, J = member.shape[0], weights.shape[0]
    rates, per_subset = np.empty((U, c), H.dtype), np.empty((U, c), H.dtype)
    for n in range(K):
        m = index[n]
        for u in range(U):
            size = H.dtype.type(0.0)
            for k in range(c):
                v = H.dtype.type(0.0)
                for p in range(P):
                    v += member[u, p] * H[n, p, k]
                rates[u, k] = v
                size += v
            inv = H.dtype.type(1.0) / (size if not size < 1.0 else H.dtype.type(1.0))  # max(1, n̂); a NaN stays NaN, as clamp_min keeps it
            for k in range(c):
                rates[u, k] *= inv
                v = H.dtype.type(0.0)
                for j in range(J):
                    v += lam[m, j] * weights[j, u, k]
                per_subset[u, k] = v * (inv * scale[m])
        for j in range(J):
            v = H.dtype.type(0.0)
            for u in range(U):
                for k in range(c):
                    v += weights[j, u, k] * rates[u, k]
            estimates[n, j] = v
        for p in range(P):
            for k in range(c):
                v = H.dtype.type(0.0)
                for u in range(U):
                    v += member[u, p] * per_subset[u, k]
                coef[n, p, k] = v
