"""Do RaCO-DP configurations that were selected for one γ also meet a smaller γ on validation? (cited by results/README.md)

    python reports/gamma_transfer.py PART.csv.gz DATASET EPSILON SOURCE_GAMMA TOP TARGET_GAMMA...

Takes a study part's phase-1 RaCO-DP rows at gamma=SOURCE, keeps the TOP feasible configurations by mean validation accuracy,
and trains each at every target gamma with 5 seeds (as one pack), at the same epsilon. Prints, per target gamma, how many
are feasible on validation (mean constraint <= gamma) and the best feasible mean validation accuracy, beside what the
target cell's own TPE search found.
"""
import json
import sys
import time

import pandas as pd

from raco_bench.data import load_dataset
from raco_bench.training.pack import train_runs
from raco_bench.privacy.calibration import CalibrationCache
from raco_bench.training.config import RunConfig
from raco_bench.training.loop import prepare_run


def main(argv: list[str]) -> None:
    part, dataset, eps, source, top = argv[0], argv[1], float(argv[2]), float(argv[3]), int(argv[4])
    targets = [float(g) for g in argv[5:]]
    d = pd.read_csv(part)
    r = d[(d.method == "raco-dp") & (d.phase == 1)]
    cfg = r.groupby(["gamma", "config_id"]).agg(acc=("val_accuracy", "mean"), c=("val_max_constraint", "mean"), params=("params", "first")).reset_index()
    own = {g: cfg[(cfg.gamma == g) & (cfg.c <= g)].acc.max() for g in targets}
    src = cfg[(cfg.gamma == source) & (cfg.c <= source)].nlargest(top, "acc")
    ds = load_dataset(dataset)
    cache = CalibrationCache()
    runs, keys = [], []
    for _, row in src.iterrows():
        for g in targets:
            for seed in range(5):
                rc = RunConfig(dataset=dataset, method="raco-dp", gamma=g, epsilon=eps, seed=seed, params=json.loads(row.params))
                runs.append(prepare_run(rc, dataset=ds, cache=cache))
                keys.append((row.config_id, g, seed))
    t0 = time.time()
    res = train_runs(runs)
    out = pd.DataFrame([dict(config_id=k[0], gamma=k[1], seed=k[2], acc=x.reported["val"]["accuracy"], c=x.reported["val"]["max_constraint"],
                             test_err=x.reported["test"]["error"], test_c=x.reported["test"]["max_constraint"], T=x.steps) for k, x in zip(keys, res)])
    print(f"{len(runs)} runs in {time.time() - t0:.0f}s")
    m = out.groupby(["gamma", "config_id"]).mean().reset_index()
    for g in targets:
        f = m[(m.gamma == g) & (m.c <= g)]
        best = f.loc[f.acc.idxmax()] if len(f) else None
        print(f"gamma={g}: {len(f)}/{top} feasible; best feasible val acc {best.acc if best is not None else None:.3f} "
              f"(test error {best.test_err:.3f}, test constraint {best.test_c:.3f}, T {best['T']:.0f}) vs the cell's own TPE best {own[g]:.3f}"
              if best is not None else f"gamma={g}: 0/{top} feasible; cell's own TPE best {own[g]:.3f}")
    for g in targets:
        mm = m[m.gamma == g].sort_values("c")
        print(f"gamma={g}: mean val constraint of the {top}: min {mm.c.min():.3f}, median {mm.c.median():.3f}; "
              f"val acc of the 5 lowest-constraint: {mm.acc.head(5).round(3).tolist()} at constraints {mm.c.head(5).round(3).tolist()}")


if __name__ == "__main__":
    main(sys.argv[1:])
