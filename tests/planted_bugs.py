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
    # names bound to the module's functions that are pointed at the mutant's ("package.module.name" or
    # "package.module:Class.name"), for bugs planted in the running code rather than passed to a check as a module
    replaces: tuple[str, ...] = ()
    red: tuple[str, ...] = ()  # the checks that must go red (empty: every check of its test)


@dataclass(frozen=True)
class PlantedTogether:
    """Bugs planted at once, and the checks (here: tests/test_engine_noise.py's engine labels) that must go red."""

    bugs: tuple[PlantedBug, ...]
    red: tuple[str, ...]


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
        (("counts = counts + plan.count_noise * stream.normal(", "counts = counts + 0.96 * plan.count_noise * stream.normal("),),
        "the count release spends more than the accountant composed"),
    "DP-FERMI batches drawn at 1.03 q (issue 45)": PlantedBug(
        "baselines.dp_fermi.plugin",
        (("idx = stream.batch(t, ctx.n_train, plan.q)", "idx = stream.batch(t, ctx.n_train, min(1.0, 1.03 * plan.q))"),),
        "the printed epsilon 0.9998 of a default Adult run is really 1.0326 (issue 45's re-audit)"),
    "DP-FERMI's W block noised at 0.96 sigma C_W": PlantedBug(
        "baselines.dp_fermi.plugin",
        (("gw = gw + plan.sigma * h.clip_w * z[offset:]", "gw = gw + 0.96 * plan.sigma * h.clip_w * z[offset:]"),),
        "the W release spends more than the accountant composed"),
    "PF-LD batches drawn at 1.03 q": PlantedBug(
        "baselines.pf_ld.plugin",
        (("idx = state.stream.batch(t, ctx.n_train, plan.q)", "idx = state.stream.batch(t, ctx.n_train, min(1.0, 1.03 * plan.q))"),),
        "more steps sample the record than the Binomial(T, q) mixture accounts for"),
    "PF-LD dual releases noised at 0.96 sigma_d": PlantedBug(
        "baselines.pf_ld.plugin",
        (("std = plan.sigma_dual * dual_sensitivity(", "std = 0.96 * plan.sigma_dual * dual_sensitivity("),),
        "the dual releases spend more than the accountant composed"),
    "DP post-processing's base steps noised at 0.96 sigma C": PlantedBug(
        "baselines.dp_postprocess.plugin",
        (("noise_std=mech.noise_multiplier * h.clip_norm if full else 0.0", "noise_std=0.96 * mech.noise_multiplier * h.clip_norm if full else 0.0"),),
        "the base model spends more than the accountant composed"),
    "DP post-processing's histogram at 0.97 of its accounted Laplace scale": PlantedBug(
        "baselines.dp_postprocess.plugin",
        (("pred.cpu(), ds.n_groups), plan.laplace_scale,", "pred.cpu(), ds.n_groups), 0.97 * plan.laplace_scale,"),),
        "the histogram spends 1/0.97 of its share of epsilon"),
    "budget tailoring's stage-2 gradient noise at 0.97": PlantedBug(
        "baselines.budget_tailoring.plugin",
        (("group_noise_std(weights, plan.budget.stage2, T, h.grad_clip),", "0.97 * group_noise_std(weights, plan.budget.stage2, T, h.grad_clip),"),),
        "stage 2 spends 6 % more rho than the budget's split"),
    "budget tailoring's group counts at 0.96 of the accounted noise": PlantedBug(
        "baselines.budget_tailoring.plugin",
        (("n_hat = (counts + h.count_noise * stream.normal(", "n_hat = (counts + 0.96 * h.count_noise * stream.normal("),),
        "the count release spends 8.5 % more rho than accounted"),
    "RaCO-DP batches drawn at 1.05 q": PlantedBug(
        "raco_bench.methods.lagrangian.plugin",
        (("                sampling_rate=q,\n", "                sampling_rate=min(1.0, 1.05 * q),\n"),),
        "larger batches than the accountant's sampling rate"),
}


# The batched engines' noise (tests/test_engine_noise.py), each bug planted in the engines and in the single-run steps at once,
# so that a pack still equals its runs alone: only the direct measurement of the engines' noise can see it (issue 45).
ENGINE_NOISE_BUGS: dict[str, PlantedTogether] = {
    "every Gaussian noise at 0.97 sigma C, in the engines and the single-run steps": PlantedTogether(
        (PlantedBug("raco_bench.privacy.clip_noise", (("        out.append(block + std.view(", "        out.append(block + 0.97 * std.view("),),
                    "the engines' add_gaussian at 0.97", ("raco_bench.privacy.clip_noise.add_gaussian",)),
         PlantedBug("raco_bench.methods.lagrangian.step",
                    (("gsum = torch.add(gsum, z[offset : offset + p.numel()].view_as(p), alpha=s.noise_std)",
                      "gsum = torch.add(gsum, z[offset : offset + p.numel()].view_as(p), alpha=0.97 * s.noise_std)"),),
                    "the single-run Lagrangian step's Gaussian at 0.97",
                    ("raco_bench.methods.lagrangian.plugin.sgda_step", "baselines.dp_postprocess.plugin.sgda_step")),
         PlantedBug("baselines.dp_fermi.plugin",
                    (("gsum = gsum + plan.sigma * h.clip_theta * z[", "gsum = gsum + 0.97 * plan.sigma * h.clip_theta * z["),
                     ("gw = gw + plan.sigma * h.clip_w * z[offset:]", "gw = gw + 0.97 * plan.sigma * h.clip_w * z[offset:]")),
                    "DP-FERMI's single-run step's Gaussian at 0.97", ("baselines.dp_fermi.plugin:DPFermi.step",))),
        ("raco-dp", "raco-dp (torch form)", "dp-sgd", "dp-fermi", "dp-postprocess", "toy-dp-sgd")),
    "the Laplace histogram noise at 0.97 s_L, in the engine (compiled and torch forms) and the single-run step": PlantedTogether(
        (PlantedBug("raco_bench.methods.lagrangian.fused",
                    (("laplace if laplace is not None else np.zeros((1, 2 * n_parts)), scale, index,",
                      "laplace if laplace is not None else np.zeros((1, 2 * n_parts)), (0.97 * scale).astype(scale.dtype), index,"),),
                    "the compiled histogram's Laplace at 0.97", ("raco_bench.methods.lagrangian.fused.noisy_histogram",)),
         PlantedBug("raco_bench.methods.lagrangian.engine",
                    (("H = H + s.laplace_scale[idx, None, None] * noise.laplace[idx]",
                      "H = H + 0.97 * s.laplace_scale[idx, None, None] * noise.laplace[idx]"),),
                    "the torch histogram's Laplace at 0.97", ("raco_bench.methods.lagrangian.engine._release",)),
         PlantedBug("raco_bench.methods.lagrangian.step",
                    (("H = H + s.laplace_scale * draws.laplace", "H = H + 0.97 * s.laplace_scale * draws.laplace"),
                     ("H = H + s.laplace_scale * stream.laplace(", "H = H + 0.97 * s.laplace_scale * stream.laplace(")),
                    "the single-run step's Laplace at 0.97", ("raco_bench.methods.lagrangian.plugin.sgda_step",))),
        ("raco-dp", "raco-dp (torch form)")),
}


# The store's epsilon (tests/test_store_privacy.py): each must turn one of its checks red (the checks of its module: the store's
# composition, a group's step, a sweep's rows).
STORE_BUGS: dict[str, PlantedBug] = {
    "runs that drew the same batches composed as independent releases": PlantedBug(
        "raco_bench.privacy.store",
        (("key = (r.batches, p.sampling_rate) if (shared and r.batches is not None) else (\"own\", i, j)", "key = (\"own\", i, j)"),),
        "issue 45's K = 10 DP-SGD runs on one seed's batches print 3.58 where they spend 4.49"),
    "a group's step keeps only its longest run's Laplace histograms": PlantedBug(
        "raco_bench.privacy.store",
        (("scales = tuple(s for p in active for s in p.laplace)", "scales = active[0].laplace"),),
        "RaCO-DP runs sharing batches: every histogram but one left out of the store's epsilon"),
    "a group's steps end with its shortest run": PlantedBug(
        "raco_bench.privacy.store",
        (("for T in sorted({p.steps for p in parts}):", "for T in sorted({p.steps for p in parts})[:1]:"),),
        "the longer runs' later steps left out of the store's epsilon"),
    "a rest inside a self-composed event counted once (issue 45's review)": PlantedBug(
        "raco_bench.privacy.store",
        (("[ev.SelfComposedDpEvent(r, event.count) for r in rest])", "rest)"),),
        "a histogram drawn from its own batch (RaCO-DP histogram_batch=independent) and the selection's releases counted once"),
    "the store's epsilon below a run's printed epsilon": PlantedBug(
        "raco_bench.privacy.store",
        (("private_only = max(composed, largest)", "private_only = composed"),),
        "a store holding budget tailoring's run prints 0.74 where the run printed 1.0"),
    "a group's step without one of its histograms": PlantedBug(
        "raco_bench.privacy.group_step",
        (("    for s in scales:\n", "    for s in scales[1:]:\n"),),
        "ten runs sharing a batch: one histogram's releases left out of the step"),
    "a group's step without its Gaussians": PlantedBug(
        "raco_bench.privacy.group_step",
        (("return DiscretePair(_gaussian_pmf(gaussian, h).compose(laplaces, TRUNCATION), h)", "return DiscretePair(laplaces, h)"),),
        "the gradient releases of runs sharing a batch left out of the step when they also release histograms"),
    "a checkpoint=private row read without its selection (issue 45's review)": PlantedBug(
        "raco_bench.sweeps.store_privacy",
        (("        selection = SelectionRelease(float(noise), int(count))\n", "        selection = None\n"),),
        "every checkpoint=private run's selection releases left out of the store's epsilon"),
    "rows of two keys grouped as one (a resume without the key file)": PlantedBug(
        "raco_bench.sweeps.store_privacy",
        (("batches = (key, stream)", "batches = stream"),),
        "runs trained under different keys composed as if they drew the same batches"),
}


# Deleting a run (tests/test_run_deletion.py): each must turn its checks red (every check where it names none). The running
# tracking module's functions named in ``replaces`` are pointed at the mutant's (default: delete_run).
DELETION_BUGS: dict[str, PlantedBug] = {
    "a deleted run only marked deleted (MLflow's soft delete)": PlantedBug(
        "raco_bench.tracking",
        (("    get_artifact_repository(run.info.artifact_uri).delete_artifacts()\n", "    return retry(lambda: c.delete_run(run_id))\n"),),
        "issue 45: a resume without the key file left the earlier attempt's curves readable",
        red=("check_deleted_run_leaves_nothing", "check_resume_under_another_key")),
    "a deleted run's metrics, params and tags kept": PlantedBug(
        "raco_bench.tracking",
        (("    retry(lambda: store._hard_delete_run(run_id))\n", ""),),
        "the attempt's curves stay in the store, its artifacts gone",
        red=("check_deleted_run_leaves_nothing", "check_resume_under_another_key")),
    "deleted rows' bytes left in the file's free space (no secure delete; issue 45's review)": PlantedBug(
        "raco_bench.tracking",
        (("        dbapi_connection.execute(\"PRAGMA secure_delete = ON\")\n", "        pass\n"),),
        "on an SQLite that does not zero deleted content (upstream's default), the deleted curves stay in mlflow.db's free pages",
        replaces=("zero_deleted_content", "delete_run"), red=("check_deleted_bytes_leave_the_files",)),
    "the write-ahead log kept after a deletion (issue 45's review)": PlantedBug(
        "raco_bench.tracking",
        (("            if not con.execute(\"PRAGMA wal_checkpoint(TRUNCATE)\").fetchone()[0]:", "            if True:"),),
        "the deleted run's rows stay in mlflow.db-wal as they were written",
        red=("check_deleted_bytes_leave_the_files",)),
    "a deleted run's registered model versions kept (issue 45's review)": PlantedBug(
        "raco_bench.tracking",
        (("    for version in retry(lambda: c.search_model_versions(f\"run_id = '{run_id}'\")):", "    for version in []:"),),
        "the registry keeps a version of the deleted run, its description holding its test accuracy",
        red=("check_registered_versions_go",)),
    "a resume under a new key leaves the old attempt's incomplete runs to the workers": PlantedBug(
        "raco_bench.tracking",
        (("t.get(COMPLETE) == \"1\" or t.get(KEY_ID, key) == key:", "True:"),),
        "the driver finds no stale pack, so Tune's storage keeps its checkpoints (docs/privacy.md, \"Threat model\")",
        replaces=("drop_other_key_runs",), red=("check_other_key_runs_dropped_up_front",)),
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
