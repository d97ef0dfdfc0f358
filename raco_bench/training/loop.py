"""A full training run of any method plugin: resolve, plan privacy, train, evaluate, select.

Every method is evaluated the same way, on the run's rate constraints (so DP-SGD and DP-FERMI
report the same violations as RaCO-DP): at step 1, every ``eval_every`` steps and at the last step.

One checkpoint rule for every method (``RunConfig.checkpoint``, docs/privacy.md):

* ``last``: the last iterate, the privately released model;
* ``private``: the best noisy validation accuracy among checkpoints whose noisy validation
  constraints hold, from Laplace-noised validation counts charged to the budget
  (:mod:`raco_bench.training.selection`; the last iterate when none holds);
* ``paper``: the papers' rule, best validation accuracy among checkpoints whose exact hard
  constraints hold on the training set (the last iterate when none does). It reads the private rows
  outside the budget, and the run says so (``privacy["outside_budget"]``).

``reported`` holds the metrics of the rule's checkpoint and ``reported_params`` its parameters (the
model a user gets); ``last`` and ``final_params`` are the last iterate, kept beside it.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from raco_bench.constraints.families import Task, family
from raco_bench.data import TabularDataset, load_dataset
from raco_bench.data.catalog import public_train_rows
from raco_bench.methods import get_method
from raco_bench.methods.base import Context, Method
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.privacy.counter_rng import Keystream
from raco_bench.training.config import CHECKPOINT_RULES, RunConfig, batch_stream_id, stream_id
from raco_bench.training.evaluation import LOSS_METRICS, EvalSplit, evaluate_logits
from raco_bench.training.health import Evidence, constant_accuracy, judge, passes
from raco_bench.training.selection import PrivateSelector, selection_steps

SELECTION_LABEL = "not privacy-accounted: selected with exact train-set constraints and validation accuracy"
PAPER_CHECKPOINT_NOTE = "checkpoint=paper: selection with exact train-set constraints and validation accuracy is OUTSIDE the privacy budget"
REPRODUCIBLE_NOTE = "noise reproducible from the logged seed: the epsilon holds only if the seed is secret (randomness=reproducible)"
TRAIN_METRICS_NOTE = "exact training-set metrics released (train_* metrics and curves)"
UNPUBLISHED_N_NOTE = ("n_train and q = B/n released exactly, and n is not the dataset's published split size: under add/remove "
                      "neighbours n tells D from D' (docs/privacy.md, \"Threat model\")")
UNDECLARED_N_NOTE = ("n_train and q = B/n released exactly, and the dataset's schema declares no public training-split size (train_rows): "
                     "under add/remove neighbours n tells D from D' (docs/privacy.md, \"Threat model\")")
SPLITS = ("train", "val", "test")


@dataclass
class RunResult:
    config: dict
    hyperparameters: dict
    dataset: dict
    privacy: dict
    steps: int
    history: list[dict] = field(default_factory=list)
    last: dict = field(default_factory=dict)
    selected: dict | None = None
    reported: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    final_params: dict | None = None
    reported_params: dict | None = None
    selection_releases: list = field(default_factory=list)  # checkpoint=private: every noisy validation release
    health: dict = field(default_factory=dict)  # the reported model's verdict (raco_bench.training.health): verdict, flags, text

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("final_params")
        out.pop("reported_params")
        out["selection_releases"] = [{k: v for k, v in e.items() if k != "noisy_counts"} for e in self.selection_releases]
        return out


@dataclass
class Run:
    """A resolved, planned run: everything is validated and the privacy plan is fixed."""

    method: Method
    ctx: Context
    evals: dict[str, EvalSplit]


def prepare_run(cfg: RunConfig, dataset: TabularDataset | None = None, cache: CalibrationCache | None = None,
                source: Keystream | None = None) -> Run:
    """Validate the configuration and plan privacy; nothing is trained or written. ``source`` is the word source to
    draw from (runs trained as one pack share one); by default a fresh secret key, or the reproducible generator,
    as ``cfg.randomness`` says (docs/privacy.md, "Threat model")."""
    cfg.validate()
    if source is None:
        source = Keystream.for_mode(cfg.randomness)
    elif source.mode != cfg.randomness:
        raise ValueError(f"the run asks for randomness={cfg.randomness!r} but was given a {source.mode} word source")
    method = get_method(cfg.method)
    hyper = method.hyperparameters(cfg.params)
    if dataset is None and (rows := public_train_rows(cfg.dataset, cfg.schema)) is not None:
        method.check_train_size(hyper, rows)  # the schema's public size, before the (slow) load
    ds = dataset if dataset is not None else load_dataset(cfg.dataset, seed=cfg.split_seed, preprocessing=cfg.preprocessing,
                                                          schema=cfg.schema, data=cfg.data,
                                                          validation_split=cfg.validation_split)
    if ds.preprocessing != cfg.preprocessing:
        raise ValueError(f"the dataset was encoded with preprocessing={ds.preprocessing!r} but the run asks for {cfg.preprocessing!r}")
    if ds.validation_split != cfg.validation_split:
        raise ValueError(f"the dataset holds train/validation split {ds.validation_split} but the run asks for {cfg.validation_split}")
    device = torch.device(cfg.device)
    problem = family(cfg.constraint, cfg.constraint_spec).problem(Task.of(ds), cfg.gamma)
    ctx = Context(dataset=ds, config=cfg, hyper=hyper, problem=problem, rates=problem.compile(device), device=device, cache=cache or CalibrationCache(),
                  source=source, stream_id=stream_id(cfg, asdict(hyper)), batch_stream_id=batch_stream_id(cfg, asdict(hyper)))
    method.prepare(ctx)
    ctx.privacy = with_pipeline_labels(ctx.privacy, ds, cfg)
    evals = {k: _eval_split(ds, k, s, problem, device) for k, s in ds.splits().items() if k != "train" or cfg.releases_train_metrics}
    return Run(method, ctx, evals)


def _eval_split(ds: TabularDataset, name: str, split, problem, device: torch.device) -> EvalSplit:
    """A split as evaluation tensors, built once per dataset, device and partition (what a row's part depends on) and
    shared by the runs prepared on it."""
    return ds.shared_tensors(("eval", name, str(device), problem.partition),
                             lambda: EvalSplit.for_problem(split, problem, device))


def with_pipeline_labels(privacy: dict, ds: TabularDataset, cfg: RunConfig) -> dict:
    """The method's privacy plan plus what the rest of the pipeline reads outside the budget."""
    outside = list(privacy.get("outside_budget", ())) + list(ds.outside_budget)
    if cfg.checkpoint == "paper":
        outside.append(PAPER_CHECKPOINT_NOTE)
    if cfg.releases_train_metrics:
        outside.append(TRAIN_METRICS_NOTE)
    if cfg.randomness == "reproducible" and privacy.get("private", False):
        outside.append(REPRODUCIBLE_NOTE)
    if privacy.get("private", False) and ds.published_train_rows is None:
        outside.append(UNDECLARED_N_NOTE)
    elif privacy.get("private", False) and len(ds.train) != ds.published_train_rows:
        outside.append(UNPUBLISHED_N_NOTE)  # the published size (the schema's train_rows) is what the threat model takes as public
    return {**privacy, "preprocessing": ds.preprocessing, "checkpoint_rule": cfg.checkpoint, "randomness": cfg.randomness,
            "checkpoint_rule_note": CHECKPOINT_RULES[cfg.checkpoint], "outside_budget": outside,
            "end_to_end": privacy.get("private", False) and not outside}


def _progress_printer(stream=sys.stderr) -> Callable[[dict], None]:
    def show(entry: dict) -> None:
        va = entry["val"]
        tr = f"train acc {entry['train']['accuracy']:.4f} max_viol {entry['train']['max_violation']:.3f} | " if "train" in entry else ""
        print(f"  step {entry['step']:>5}/{entry['total']}: {tr}val acc {va['accuracy']:.4f} max_constraint {va['max_constraint']:.3f}",
              file=stream, flush=True)

    return show


class RunRecorder:
    """Everything a run does around its steps, for one configuration: when it evaluates, what it
    records, its checkpoint rule and its :class:`RunResult`. A single run (:func:`execute`) and a
    pack (:mod:`raco_bench.packs`) drive the same recorder, so a configuration ends with the same
    result either way."""

    def __init__(self, run: Run, show: Callable[[dict], None] | None = None) -> None:
        ctx, cfg = run.ctx, run.ctx.config
        self.run, self.show, self.T = run, show, ctx.steps
        self.history: list[dict] = []
        self.selected: dict | None = None
        self.selected_params: dict | None = None
        self.private_params: dict | None = None
        self.selector = PrivateSelector.for_run(cfg.selection, ctx.rates, ctx.stream()) if cfg.selection is not None else None
        self.select_at = set(selection_steps(self.T, cfg.selection.count)) if self.selector is not None else set()
        self.final_only = run.method.final_only  # the method's model exists only after its last step: the only candidate
        if self.final_only and self.selector is not None:
            self.select_at = {self.T}
        self.eval_at = set(range(cfg.eval_every, self.T + 1, cfg.eval_every)) | {1, self.T} | self.select_at

    def wants(self, t: int) -> bool:
        return t in self.eval_at

    def selects(self, t: int) -> bool:
        """Whether the evaluation at step ``t`` is a private-selection checkpoint (it needs the validation logits)."""
        return t in self.select_at

    def _improves(self, t: int, metrics: dict[str, dict]) -> bool:
        """Whether the evaluation at step ``t`` becomes the selected checkpoint of the papers' rule: its exact train-set
        constraints hold and its validation accuracy beats the one selected so far."""
        candidate = not self.final_only or t == self.T
        return candidate and "train" in metrics and metrics["train"]["satisfied"] and (
            self.selected is None or metrics["val"]["accuracy"] > self.selected["val"]["accuracy"])

    def reportable(self, t: int, metrics: dict[str, dict]) -> bool:
        """Whether the evaluation at step ``t`` (``metrics`` per split, before :meth:`observe`) can end up reported: the last
        step, a private-selection checkpoint, or a new best of the papers' rule. Only these entries keep the loss metrics
        (:data:`~raco_bench.training.evaluation.LOSS_METRICS`), which a pack computes only for them."""
        return self._kept(t, self._improves(t, metrics))

    def _kept(self, t: int, improves: bool) -> bool:
        return improves or t == self.T or t in self.select_at

    def snapshot(self) -> dict:
        """What the recorder has recorded so far (a pack's checkpoint, :mod:`raco_bench.packs.checkpoint`)."""
        return {"history": self.history, "selected": self.selected, "selected_params": self.selected_params,
                "private_params": self.private_params, "selector_best": self.selector.best if self.selector else None,
                "selector_releases": self.selector.releases if self.selector else []}

    def restore(self, saved: dict) -> None:
        """Continue from a :meth:`snapshot`: the steps it covers are not recorded again."""
        self.history, self.selected = list(saved["history"]), saved["selected"]
        self.selected_params, self.private_params = saved["selected_params"], saved["private_params"]
        if self.selector is not None:
            self.selector.best, self.selector.releases = saved["selector_best"], list(saved["selector_releases"])

    def observe(self, t: int, params: dict, metrics: dict[str, dict], report: dict, val_logits: torch.Tensor | None) -> None:
        """Record the evaluation at step ``t``: ``metrics`` per split, the method's ``report``, the validation logits."""
        cfg = self.run.ctx.config
        improves = self._improves(t, metrics)
        if not self._kept(t, improves):  # not reportable: the same entries whether the metrics came from a pack or a run alone
            metrics = {name: {k: v for k, v in m.items() if k not in LOSS_METRICS} for name, m in metrics.items()}
        if t in self.select_at and self.selector.observe(t, val_logits, self.run.evals["val"]):
            self.private_params = snapshot(params)
        entry: dict[str, Any] = {"step": t, "total": self.T, **metrics, **report}
        self.history.append(entry)
        if self.show:
            self.show(entry)
        if improves:
            self.selected = {k: entry[k] for k in ("step", *SPLITS)}
            if cfg.checkpoint == "paper":  # only that rule reports this checkpoint's model
                self.selected_params = snapshot(params)

    def result(self, final_params: dict, step_time: float, eval_time: float = 0.0) -> RunResult:
        """The run's result; ``step_time`` and ``eval_time`` are the seconds its steps and its evaluations took (in a pack,
        its share of each batched step and evaluation)."""
        run, ctx = self.run, self.run.ctx
        cfg, ds, T, history = ctx.config, ctx.dataset, self.T, self.history
        selected = self.selected
        if selected is not None:
            selected["label"] = SELECTION_LABEL
        last = {"step": T, **{k: history[-1][k] for k in SPLITS if k in history[-1]}}
        chosen, chosen_params = None, None
        if cfg.checkpoint == "paper" and selected is not None:
            chosen, chosen_params = selected, self.selected_params
        elif self.selector is not None and self.selector.best is not None:
            step = self.selector.best["step"]
            entry = next(e for e in history if e["step"] == step)
            chosen = {"step": step, **{k: entry[k] for k in SPLITS if k in entry},
                      "noisy_validation": {k: v for k, v in self.selector.best.items() if k != "noisy_counts"}}
            chosen_params = self.private_params
        fallback = "" if chosen is not None or cfg.checkpoint == "last" else "; no checkpoint met the constraints, so the last iterate"
        reported = {**(chosen if chosen is not None else last), "rule": cfg.checkpoint, "rule_note": CHECKPOINT_RULES[cfg.checkpoint] + fallback}
        fam, task = family(cfg.constraint, cfg.constraint_spec), Task.of(ds)
        constants = {name: constant_accuracy(fam, task, split.y, cfg.gamma) for name, split in (("val", ds.val), ("test", ds.test))}
        verdict = judge(Evidence(
            steps=T, passes=passes(T, getattr(ctx.hyper, "batch_size", None), ctx.n_train), accuracy=reported["test"]["accuracy"],
            constant_accuracy=constants["test"], rows=len(ds.test), top_class_share=reported["test"].get("top_class_share", math.nan),
            epsilon=ctx.privacy["target_epsilon"] if ctx.privacy.get("private") else math.inf, epsilon_spent=ctx.privacy["epsilon_spent"],
            max_steps=cfg.max_steps))
        return RunResult(
            config=cfg.to_dict(),
            hyperparameters=run.method.applicable(ctx.hyper),
            dataset={"name": ds.name, "n_train": ctx.n_train, "n_val": len(ds.val), "n_test": len(ds.test), "n_features": ds.n_features,
                     "n_groups": ds.n_groups, "n_classes": ds.n_classes, "n_constraints": ctx.problem.n_constraints, "note": ds.note,
                     "notes": list(ds.data_notes), "constant_accuracy": constants},
            privacy=ctx.privacy,
            steps=T,
            history=history,
            last=last,
            selected=selected,
            reported=reported,
            timing={"train_s": step_time, "ms_per_step": 1000 * step_time / max(T, 1), "eval_s": eval_time},
            final_params=final_params,
            reported_params=chosen_params if chosen is not None else final_params,
            selection_releases=self.selector.releases if self.selector is not None else [],
            health={"verdict": verdict.label, "flags": list(verdict.flags), "text": verdict.text},
        )


def execute(run: Run, progress: Callable[[dict], None] | bool | None = None) -> RunResult:
    method, ctx = run.method, run.ctx
    show = _progress_printer() if progress is True else (progress or None)
    recorder = RunRecorder(run, show)
    state = method.init_state(ctx, ctx.stream())
    tau = getattr(ctx.hyper, "temperature", 1.0)
    gammas = ctx.rates.gamma[None] if ctx.rates is not None else None
    step_time = eval_time = 0.0
    for t in range(1, ctx.steps + 1):
        s0 = time.perf_counter()
        state = method.step(ctx, state)
        step_time += time.perf_counter() - s0
        if recorder.wants(t):
            s0 = time.perf_counter()
            params = method.params(state)
            outputs = {name: method.eval_outputs(ctx, params, split) for name, split in run.evals.items()}
            logits = {name: z[..., None] for name, (z, _) in outputs.items()}  # N × c × 1
            metrics = {name: evaluate_logits(logits[name], split, [tau], ctx.dataset.n_groups, ctx.dataset.n_classes, ctx.rates, gammas,
                                             None if outputs[name][1] is None else outputs[name][1][:, None])[0]
                       for name, split in run.evals.items()}
            recorder.observe(t, params, metrics, method.report(ctx, state), logits["val"][..., 0])
            eval_time += time.perf_counter() - s0
    return recorder.result(snapshot(method.params(state)), step_time, eval_time)


def snapshot(params: dict) -> dict:
    return {k: v.detach().cpu().numpy().copy() for k, v in params.items()}


def train(
    cfg: RunConfig,
    dataset: TabularDataset | None = None,
    cache: CalibrationCache | None = None,
    progress: Callable[[dict], None] | bool | None = None,
) -> RunResult:
    """Run one configuration end to end. Everything is validated and planned before any training starts."""
    t0 = time.perf_counter()
    run = prepare_run(cfg, dataset, cache)
    planning = time.perf_counter() - t0
    result = execute(run, progress)
    result.timing["planning_s"] = planning
    return result
