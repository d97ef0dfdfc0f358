"""Search spaces (raco_dp_spec.md §5.2 Q13 for RaCO-DP and SGDA; dp_fermi_spec.md §2.3 and §5.2 for DP-FERMI).

Samples are drawn from a seeded numpy generator, so a sweep's configurations are a deterministic
list (which is what makes resuming and idempotent logging simple). Continuous privacy parameters
are rounded to 2 significant digits, so that privacy calibrations repeat across configurations and
sweeps and the cache serves them.
"""

from __future__ import annotations

import math

import numpy as np

BATCH_SIZES = (256, 512, 1024, 2048, 4096)


def _round2(x: float) -> float:
    return float(f"{x:.2g}")


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _batch(rng: np.random.Generator, n_train: int) -> int:
    allowed = [b for b in BATCH_SIZES if b <= n_train // 2] or [max(1, n_train // 4)]
    return int(rng.choice(allowed))


def sample_raco_dp(rng: np.random.Generator, n_train: int) -> dict:
    return {
        "noise_multiplier": _round2(rng.uniform(1.0, 10.0)),
        "laplace_scale": _round2(rng.uniform(1.0, 20.0)),
        "clip_norm": _round2(_log_uniform(rng, 1.0, 30.0)),
        "temperature": _round2(rng.uniform(0.5, 4.0)),
        "lr": _round2(_log_uniform(rng, 1e-3, 0.3)),
        "dual_lr": _round2(_log_uniform(rng, 1e-2, 1.0)),
        "batch_size": _batch(rng, n_train),
    }


def sample_sgda(rng: np.random.Generator, n_train: int) -> dict:
    return {
        "temperature": _round2(rng.uniform(0.5, 4.0)),
        "lr": _round2(_log_uniform(rng, 1e-3, 0.3)),
        "dual_lr": _round2(_log_uniform(rng, 1e-2, 1.0)),
        "batch_size": _batch(rng, n_train),
    }


def sample_dp_fermi(rng: np.random.Generator, n_train: int) -> dict:
    fairness = 0.0 if rng.uniform() < 0.1 else _round2(_log_uniform(rng, 0.05, 10.0))
    return {
        "fairness": fairness,
        "lr": _round2(_log_uniform(rng, 1e-3, 1.0)),
        "lr_w": _round2(_log_uniform(rng, 1e-3, 1.0)),
        "clip_theta": _round2(rng.uniform(1.0, 5.0)),
        "clip_w": _round2(rng.uniform(1.0, 5.0)),
        "w_radius": _round2(rng.uniform(1.0, 5.0)),
        "batch_size": _batch(rng, n_train),
    }


def sample_dp_sgd(rng: np.random.Generator, n_train: int) -> dict:
    return {
        "noise_multiplier": _round2(rng.uniform(1.0, 10.0)),
        "clip_norm": _round2(_log_uniform(rng, 1.0, 30.0)),
        "lr": _round2(_log_uniform(rng, 1e-3, 0.3)),
        "batch_size": _batch(rng, n_train),
    }


SAMPLERS = {"raco-dp": sample_raco_dp, "sgda": sample_sgda, "dp-fermi": sample_dp_fermi, "dp-sgd": sample_dp_sgd, "sgd": sample_sgda}


def sample_configs(method: str, n: int, n_train: int, seed: int) -> list[dict]:
    """``n`` configurations of ``method``; config 0 is the method's defaults (an anchor every sweep has)."""
    if method not in SAMPLERS:
        raise ValueError(f"no search space for method {method!r}; choose one of {', '.join(SAMPLERS)}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, sum(map(ord, method))]))
    default = {"batch_size": min(1024, max(1, n_train // 4))}
    return [default] + [SAMPLERS[method](rng, n_train) for _ in range(n - 1)]
