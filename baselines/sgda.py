"""Non-private SGDA, DP-SGD and SGD: members of RaCO-DP's Lagrangian SGDA family
(:mod:`raco_bench.methods.raco_dp`), sharing its step and hyperparameters."""

from __future__ import annotations

from raco_bench.methods.raco_dp import LagrangianSGDA


class SGDA(LagrangianSGDA):
    name = "sgda"
    description = "non-private SGDA on the same rate-constrained Lagrangian (exact histogram, no clipping, no noise)"
    private = False
    constrained = True
    style = ("#228833", "^")  # Tol bright green
    doc = "docs/methods/sgda.md"


class DPSGD(LagrangianSGDA):
    """DP-SGD with Opacus' semantics: flat per-sample clipping to C, N(0, σ²C²) added to the sum,
    division by the expected batch size, Poisson sampling; accounted with dp-accounting's PLD."""

    name = "dp-sgd"
    description = "DP-SGD (unconstrained), Poisson sampling, PLD-accounted"
    private = True
    constrained = False
    gamma_is_input = False
    in_default_sweeps = False
    timing_reference = True
    style = ("#AA3377", "D")  # Tol bright purple
    doc = "docs/methods/dp-sgd.md"


class SGD(LagrangianSGDA):
    name = "sgd"
    description = "non-private SGD on the cross-entropy (unconstrained)"
    private = False
    constrained = False
    gamma_is_input = False
    in_default_sweeps = False
    style = ("#CCBB44", "v")  # Tol bright yellow
    doc = "docs/methods/dp-sgd.md"
