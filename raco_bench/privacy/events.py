"""One vocabulary for what a private run releases: mechanism events (docs/privacy.md, "Mechanism events").

Every private method describes a run as a composition of events (``Method.privacy_event``), in dp-accounting's
:class:`~dp_accounting.dp_event.DpEvent` vocabulary where one fits (``GaussianDpEvent``, ``LaplaceDpEvent``,
``PoissonSampledDpEvent``, ``ComposedDpEvent``, ``SelfComposedDpEvent``, ``ZCDpEvent``) and with the suite's own
event where none does: :class:`SharedBatchStepEvent`, one Poisson batch feeding a Gaussian and a Laplace release
(RaCO-DP's step, whose two releases are not independent given the batch). Every event is stated under add/remove
adjacency, with each release normalised to sensitivity 1 (a Gaussian's noise multiplier is its std over its L2
sensitivity, a Laplace's scale its scale over its L1 sensitivity).

Each event gives its privacy loss distribution (:func:`pld`, for the ε a run reports and calibration) and its
Rényi DP curve (:func:`rdp`, for accounted tuning), from the same base privacy losses:

* Gaussian: RDP α/(2σ²), PLD dp-accounting's;
* Laplace: RDP of Mironov's Prop. 6 (:func:`raco_bench.privacy.rdp.laplace_rdp`), PLD dp-accounting's;
* Poisson-sampled Gaussian or Laplace, and the shared-batch step: :func:`raco_bench.privacy.rdp.step_rdp` (both
  directions of add/remove), PLD dp-accounting's or the joint PLD (:mod:`raco_bench.privacy.joint_pld`);
* ρ-zCDP: RDP ρα; no PLD (its mechanism is not said), so a method that states zCDP reports ε by conversion;
* compositions add RDP curves and compose PLDs.

An event this module does not know raises :class:`UnsupportedEvent` naming it: what cannot be accounted is never
guessed.
"""

from __future__ import annotations

from functools import lru_cache

import attr
import numpy as np
from dp_accounting import dp_event as ev
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

from raco_bench.privacy.accounting import DISCRETIZATION, SelectionRelease, StepMechanism, step_pld
from raco_bench.privacy.rdp import ORDERS, laplace_rdp, rdp_to_epsilon, step_rdp

__all__ = ["SharedBatchStepEvent", "UnsupportedEvent", "compose", "epsilon", "pld", "rdp", "selection_event", "step_event"]


class UnsupportedEvent(ValueError):
    """An event the requested accountant cannot represent."""


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SharedBatchStepEvent(ev.DpEvent):
    """One Poisson batch (rate ``sampling_probability``) feeding a Gaussian release (noise multiplier
    ``noise_multiplier``) and a Laplace release (scale ``laplace_scale``, L1 sensitivity 1): RaCO-DP's step
    (Algorithm 1 lines 1–6 as published; docs/methods/raco-dp.md, D5)."""

    sampling_probability: float
    noise_multiplier: float
    laplace_scale: float


def compose(*events: ev.DpEvent | None) -> ev.DpEvent:
    """The composition of the events given (None: nothing released), flattened; one event stays itself."""
    parts = [e for e in events if e is not None and not isinstance(e, ev.NoOpDpEvent)]
    if not parts:
        return ev.NoOpDpEvent()
    return parts[0] if len(parts) == 1 else ev.ComposedDpEvent(tuple(parts))  # a tuple: events are hashable (cached)


def step_event(mech: StepMechanism) -> ev.DpEvent:
    """One step of :class:`~raco_bench.privacy.accounting.StepMechanism` as an event."""
    g, lap, q = mech.noise_multiplier, mech.laplace_scale, mech.sampling_rate
    if not mech.private:
        return ev.NonPrivateDpEvent()
    if lap is None:
        return ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(g))
    if g is None:
        return ev.PoissonSampledDpEvent(mech.hist_rate, ev.LaplaceDpEvent(lap))
    if mech.histogram_batch == "shared":
        return SharedBatchStepEvent(q, g, lap)
    return compose(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(g)), ev.PoissonSampledDpEvent(mech.hist_rate, ev.LaplaceDpEvent(lap)))


def selection_event(selection: SelectionRelease | None) -> ev.DpEvent | None:
    """A private checkpoint selection: ``count`` Laplace releases of validation counts (L1 sensitivity 1)."""
    if selection is None:
        return None
    return ev.SelfComposedDpEvent(ev.LaplaceDpEvent(selection.laplace_scale), selection.count)


# ---------------------------------------------------------------- Rényi DP


def rdp(event: ev.DpEvent, orders: tuple[float, ...] = ORDERS) -> np.ndarray:
    """ε(α) of ``event`` at each order (add/remove adjacency)."""
    return _rdp(event, tuple(orders)).copy()


@lru_cache(maxsize=1024)
def _rdp(event: ev.DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    a = np.array(orders, dtype=np.float64)
    if isinstance(event, ev.NoOpDpEvent):
        return np.zeros_like(a)
    if isinstance(event, ev.GaussianDpEvent):
        return a / (2 * event.noise_multiplier**2) if event.noise_multiplier > 0 else np.full_like(a, np.inf)
    if isinstance(event, ev.LaplaceDpEvent):
        return laplace_rdp(event.noise_multiplier, orders)
    if isinstance(event, ev.ZCDpEvent):
        return event.xi + event.rho * a
    if isinstance(event, ev.PoissonSampledDpEvent) and isinstance(event.event, (ev.GaussianDpEvent, ev.LaplaceDpEvent)):
        inner = event.event
        gauss = isinstance(inner, ev.GaussianDpEvent)
        mech = StepMechanism(event.sampling_probability, inner.noise_multiplier if gauss else None, None if gauss else inner.noise_multiplier)
        return step_rdp(mech, orders)
    if isinstance(event, SharedBatchStepEvent):
        return step_rdp(StepMechanism(event.sampling_probability, event.noise_multiplier, event.laplace_scale), orders)
    if isinstance(event, ev.SelfComposedDpEvent):
        return event.count * _rdp(event.event, orders)
    if isinstance(event, ev.ComposedDpEvent):
        return sum((_rdp(e, orders) for e in event.events), np.zeros_like(a))
    if isinstance(event, ev.NonPrivateDpEvent):
        return np.full_like(a, np.inf)
    raise UnsupportedEvent(f"the RDP accountant of raco_bench.privacy.events does not represent {type(event).__name__}")


# ---------------------------------------------------------------- privacy loss distributions


@lru_cache(maxsize=256)
def pld(event: ev.DpEvent, discretization: float = DISCRETIZATION) -> PrivacyLossDistribution:
    """The PLD of ``event`` (add/remove adjacency, on the loss grid ``discretization``: the suite's unless a caller asks for
    a coarser one), kept with its parts' for the next call."""
    return build_pld(event, lambda e: pld(e, discretization), discretization)


def build_pld(event: ev.DpEvent, part, discretization: float = DISCRETIZATION) -> PrivacyLossDistribution:
    """The PLD of ``event``, with each part of a composition from ``part`` (:func:`pld`, which keeps every PLD it builds; or
    a builder that keeps none, for callers that probe many compositions), on the loss grid ``discretization``."""
    d = discretization
    if isinstance(event, ev.GaussianDpEvent):
        return pld_lib.from_gaussian_mechanism(event.noise_multiplier, value_discretization_interval=d)
    if isinstance(event, ev.LaplaceDpEvent):
        return pld_lib.from_laplace_mechanism(event.noise_multiplier, value_discretization_interval=d)
    if isinstance(event, ev.PoissonSampledDpEvent) and isinstance(event.event, (ev.GaussianDpEvent, ev.LaplaceDpEvent)):
        inner, q = event.event, event.sampling_probability
        gauss = isinstance(inner, ev.GaussianDpEvent)
        return step_pld(StepMechanism(q, inner.noise_multiplier if gauss else None, None if gauss else inner.noise_multiplier), d)
    if isinstance(event, SharedBatchStepEvent):
        return step_pld(StepMechanism(event.sampling_probability, event.noise_multiplier, event.laplace_scale), d)
    if isinstance(event, ev.SelfComposedDpEvent):
        return part(event.event).self_compose(event.count)
    if isinstance(event, ev.ComposedDpEvent) and event.events:
        out = part(event.events[0])
        for e in event.events[1:]:
            out = out.compose(part(e))
        return out
    raise UnsupportedEvent(f"the PLD accountant of raco_bench.privacy.events does not represent {type(event).__name__}"
                           + (" (a zCDP statement names no mechanism; convert it with the RDP curve)" if isinstance(event, ev.ZCDpEvent) else ""))


def epsilon(event: ev.DpEvent, delta: float, accountant: str = "pld", discretization: float = DISCRETIZATION) -> float:
    """ε of ``event`` at ``delta``: by its PLD ("pld", on the loss grid ``discretization``) or by converting its RDP curve ("rdp")."""
    if isinstance(event, ev.NonPrivateDpEvent):
        return float("inf")
    if isinstance(event, ev.NoOpDpEvent):
        return 0.0
    if accountant == "rdp":
        return rdp_to_epsilon(ORDERS, rdp(event), delta)
    if accountant != "pld":
        raise ValueError(f"unknown accountant {accountant!r}: 'pld' or 'rdp'")
    return float(pld(event, discretization).get_epsilon_for_delta(delta))
