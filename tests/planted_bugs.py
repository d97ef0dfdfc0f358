"""The planted privacy bugs of the settings-against-accountant checks, in one place.

Each entry names the module the bug is planted in, the edits (every ``old`` must occur exactly once in the
module's source, so a refactor that moves the code makes the test fail loudly instead of testing nothing)
and what the bug does to the true ε. tests/test_step_accountant.py plants each one and requires a check
to go red (docs/privacy.md, "How the step is tested"). The step-level mutants (a copy of
``raco_bench/methods/lagrangian/step.py``) and the baselines' mutants live beside their checks in tests/test_step_privacy.py and
tests/test_baseline_privacy.py; this file lists the ones that sit where a plan becomes step settings, which
those checks cannot see because they build their own settings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlantedBug:
    module: str  # import path of the module the bug is planted in
    edits: tuple[tuple[str, str], ...]
    effect: str


SETTINGS_BUGS: dict[str, PlantedBug] = {
    "S1: RaCO-DP Gaussian noise at 0.96 sigma C in the step settings": PlantedBug(
        "raco_bench.methods.lagrangian.plugin",
        (("noise_std=h.noise_multiplier * h.clip_norm if self.private else 0.0",
          "noise_std=0.96 * h.noise_multiplier * h.clip_norm if self.private else 0.0"),),
        "the printed epsilon 0.998 of a default Adult run is really 1.0125"),
    "S2: RaCO-DP Laplace scale at 0.97 s_L in the step settings": PlantedBug(
        "raco_bench.methods.lagrangian.plugin",
        (("laplace_scale=h.laplace_scale if (self.private and self.constrained) else None",
          "laplace_scale=0.97 * h.laplace_scale if (self.private and self.constrained) else None"),),
        "the printed epsilon 0.998 of a default Adult run is really 1.0242"),
    "DP-FERMI group counts released at 0.96 of the accounted noise": PlantedBug(
        "baselines.dp_fermi.plugin",
        (("counts = counts + h.count_noise * stream.normal(", "counts = counts + 0.96 * h.count_noise * stream.normal("),),
        "the count release spends more than the accountant composed"),
    "RaCO-DP batches drawn at 1.05 q": PlantedBug(
        "raco_bench.methods.lagrangian.plugin",
        (("                sampling_rate=q,\n", "                sampling_rate=min(1.0, 1.05 * q),\n"),),
        "larger batches than the accountant's sampling rate"),
}


# The labels that say what a dataset's definition read from the rows, and that n_train is released without being declared
# public (docs/datasets.md, "Your own data"; docs/privacy.md, "Threat model"). tests/test_schema_files.py plants each one
# and requires its check to go red.
DATA_LABEL_BUGS: dict[str, PlantedBug] = {
    "a draft's values read from the rows not listed outside the budget": PlantedBug(
        "raco_bench.data.schema_file",
        (("return self.outside_budget + (note if drafted else ())", "return self.outside_budget"),),
        "a run on a drafted schema claims an end-to-end epsilon while its domains are statistics of the rows"),
    "a draft's label and groups not seen as read from the rows": PlantedBug(
        "raco_bench.data.schema_file",
        (("parts = [self.label.classes, *self.groups]", "parts = []"),),
        "the classes and groups read from the rows go unlabelled"),
    "an undeclared training size not listed": PlantedBug(
        "raco_bench.training.loop",
        (("outside.append(UNDECLARED_N_NOTE)", "pass"),),
        "n_train of a dataset whose schema declares no public size is released as if public"),
    "a training size other than the declared one not listed": PlantedBug(
        "raco_bench.training.loop",
        (("elif privacy.get(\"private\", False) and len(ds.train) != ds.published_train_rows:", "elif False:"),),
        "a run on a subset (or an audit's world) releases its n as if it were the published size"),
}
