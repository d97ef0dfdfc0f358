"""The MLflow UI of a sweep's store, as a user sees it in a browser: screenshots taken by headless Chromium.

    python scripts/mlflow_ui_screenshots.py [--store PATH/mlflow.db] [--experiment NAME] [--gamma G] [--out DIR]

Without ``--store`` it first runs a smoke sweep (Adult, RaCO-DP, DP-FERMI, SGD and DP post-processing, γ 0.05 and
0.1) in a temporary folder. It starts ``mlflow ui`` on the store (its own process, stopped at the end, nothing else),
then saves, under ``--out`` (default ``mlflow_ui_screenshots/``):

0. ``0_experiment.png``: the experiment as a fresh browser opens it from the experiment list, with nothing set;
   ``0b_runs.png``: its runs as the sweep's links open them (the model-training mode, no filter, no column chosen);
1. ``1_phase2_at_gamma.png``: the experiment's runs filtered to the phase-2 runs of every method at one γ
   (``tags.gamma``), RaCO-DP and DP-FERMI side by side;
2. ``2_compare.png``: RaCO-DP's and DP-FERMI's among those runs, at one ε, in the compare view;
3. ``3_phase1_by_val_accuracy.png``: the phase-1 configurations (one run each) sorted by validation accuracy, and
   ``3b_phase1_charts.png`` the same runs in the chart view (a chart per metric);
4. ``4_registry.png`` and ``5_registered_model.png``: the Model Registry and one selected model's versions.

It prints what it checked in the store behind each page (which runs the filter returns, the sort order, the registered
models), and where the screenshots are. Needs Debian's ``chromium`` package (``apt-get install chromium``); not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from raco_bench import tracking  # noqa: E402

SHOT_S = 600.0  # a screenshot takes seconds on an idle machine, minutes on a loaded one
UI_START_S = 600.0  # mlflow ui starts in seconds on an idle machine; a loaded one can take minutes (the wait ends when it answers)
SMOKE = ["--smoke", "--methods", "raco-dp", "dp-fermi", "sgd", "dp-postprocess", "--gammas", "0.05", "0.1", "--yes"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smoke_store(folder: Path) -> Path:
    print(f"[ui] running a smoke sweep in {folder} ...", flush=True)
    proc = subprocess.run([sys.executable, str(ROOT / "sweeps" / "adult.py"), *SMOKE], cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the smoke sweep failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return folder / "mlflow.db"


def start_ui(store: Path, port: int) -> subprocess.Popen:
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
    proc = subprocess.Popen([mlflow, "ui", "--backend-store-uri", f"sqlite:///{store}", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + UI_START_S
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise SystemExit(f"mlflow ui did not answer within {UI_START_S:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    """Stop the UI server this script started (its own process group), and nothing else."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def screenshot(chromium: str, url: str, path: Path, size: str = "1800,1100") -> None:
    with tempfile.TemporaryDirectory() as profile:
        try:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
                            f"--window-size={size}", "--virtual-time-budget=20000", f"--timeout={int(1000 * SHOT_S / 2)}",  # without
                            f"--screenshot={path}", url],  # --timeout the UI's polling keeps a loaded machine's chromium from ever shooting
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=SHOT_S)  # not captured: chromium's helpers
            # inherit its pipes and outlive it, so a captured run waits for them forever
        except subprocess.TimeoutExpired:
            print(f"[ui] {path.name}: chromium took over {SHOT_S:.0f} s", flush=True)
    print(f"[ui] {path.name}: {'saved' if path.is_file() else 'NOT saved'} ({url})", flush=True)


def compared(runs: list, methods: tuple[str, ...] = ("raco-dp", "dp-fermi"), most: int = 10) -> list:
    """The runs of the compare view: RaCO-DP's and DP-FERMI's at the first ε both have, else the first runs."""
    eps = sorted({r.data.tags["epsilon"] for r in runs if r.data.tags["method"] == methods[0]}
                 & {r.data.tags["epsilon"] for r in runs if r.data.tags["method"] == methods[1]})
    chosen = [r for r in runs if eps and r.data.tags["epsilon"] == eps[0] and r.data.tags["method"] in methods]
    print(f"[ui] compare view: {len(chosen[:most]) or min(len(runs), most)} runs "
          + (f"({', '.join(methods)} at epsilon {eps[0]})" if chosen else "(the first ones)"), flush=True)
    return (chosen or runs)[:most]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, help="an MLflow SQLite file (default: run a smoke sweep first)")
    p.add_argument("--experiment", default="adult-demographic-parity-smoke")
    p.add_argument("--gamma", default="0.05", help="the γ whose phase-2 runs are filtered and compared (as tagged: 0.05)")
    p.add_argument("--out", type=Path, default=Path("mlflow_ui_screenshots"))
    args = p.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH: install Debian's package (apt-get install chromium)")
    store = args.store.resolve() if args.store else smoke_store(Path(tempfile.mkdtemp(prefix="raco-ui-")))
    if not store.is_file():
        raise SystemExit(f"no MLflow store at {store}")
    args.out.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{store}"
    c = tracking.client(uri)
    exp = c.get_experiment_by_name(args.experiment)
    if exp is None:
        raise SystemExit(f"no experiment {args.experiment!r} in {store}")
    eid = exp.experiment_id
    phase2 = f"tags.`{tracking.KIND}` = 'trial' and tags.`{tracking.PHASE}` = '2' and tags.gamma = '{args.gamma}'"
    runs = tracking.search_all(uri, [eid], phase2)
    print(f"[ui] filter {phase2!r}: {len(runs)} runs: " + ", ".join(sorted({r.data.tags['method'] for r in runs})), flush=True)
    configs = tracking.search_all(uri, [eid], f"tags.`{tracking.KIND}` = 'configuration'", order_by=["metrics.val_accuracy DESC"])
    print(f"[ui] phase-1 configuration runs: {len(configs)}; best by validation accuracy: "
          + (f"{configs[0].info.run_name} ({configs[0].data.metrics.get('val_accuracy', float('nan')):.4f})" if configs else "none"), flush=True)
    models = [m.name for m in c.search_registered_models() if m.name.endswith("." + args.experiment)]
    print(f"[ui] registered models: {len(models)}: {', '.join(sorted(models))}", flush=True)

    port = free_port()
    ui = start_ui(store, port)
    try:
        at = lambda path, **q: tracking.ui_url(uri, path, base=f"http://127.0.0.1:{port}", **q)  # noqa: E731 - the sweep's own links
        plain = f"http://127.0.0.1:{port}/#/experiments/{eid}"  # as a user gets it from the experiment list, in a fresh browser
        screenshot(chromium, plain, args.out / "0_experiment.png")
        screenshot(chromium, at(f"experiments/{eid}/runs"), args.out / "0b_runs.png")
        screenshot(chromium, at(f"experiments/{eid}/runs", searchFilter=phase2), args.out / "1_phase2_at_gamma.png")
        ids = [r.info.run_id for r in compared(runs)]
        screenshot(chromium, at("compare-runs", runs=json.dumps(ids), experiments=json.dumps([eid])), args.out / "2_compare.png", "1800,1600")
        configurations = f"tags.`{tracking.KIND}` = 'configuration'"
        screenshot(chromium, at(f"experiments/{eid}/runs", searchFilter=configurations, orderByKey="metrics.`val_accuracy`", orderByAsc="false"),
                   args.out / "3_phase1_by_val_accuracy.png")
        screenshot(chromium, at(f"experiments/{eid}/runs", searchFilter=configurations, orderByKey="metrics.`val_accuracy`", orderByAsc="false",
                                compareRunsMode="CHART"), args.out / "3b_phase1_charts.png")
        screenshot(chromium, at("models"), args.out / "4_registry.png")
        if models:
            screenshot(chromium, at("models/" + urllib.parse.quote(sorted(models)[0], safe="")), args.out / "5_registered_model.png")
    finally:
        stop(ui)
    print(f"[ui] screenshots in {args.out.resolve()}", flush=True)


if __name__ == "__main__":
    main()
