"""The GPU benchmark where only torch is installed (docs/packs.md, "The GPU path"): a kit written here (Ray's search space,
calibration, the accountant) is trained in a process whose imports of ray, mlflow, dp_accounting and cryptography fail,
as on a GPU machine with torch, numpy, numba, pandas and scipy alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raco_bench.benchmarks import throughput
from raco_bench.privacy import accounting

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("ray", "mlflow", "dp_accounting", "cryptography")

WITHOUT = textwrap.dedent(f"""
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ImportError(f"No module named {{name!r}} (not installed on this machine)")

    sys.meta_path.insert(0, NotInstalled())
    from raco_bench.benchmarks import throughput
    throughput.REPEATS_ALONE = throughput.REPEATS_PACKED = throughput.PAIRS = 1  # the structure, not the timings
    from raco_bench.cli import main
    code = main(sys.argv[1:])
    assert not [m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}]
    sys.exit(code)
""")


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """A kit for packs of 1 and 3 (one configuration alone, two configurations × 5 seeds cut to 3), written here."""
    path = tmp_path_factory.mktemp("kit") / "kit.json"
    assert throughput.main(["--write-kit", str(path), "--sizes", "1", "3", "--singles", "1", "--eval-every", "50"]) == 0
    return path


def test_a_kit_holds_every_configuration_the_benchmark_trains_with_its_calibrated_t(kit):
    data = json.loads(kit.read_text())
    requests = [json.loads(key) for key in data["runs"]]
    assert {(r[0], r[1], r[6]) for r in requests} >= {("raco-dp", 1, "own"), ("raco-dp", 3, "own"), ("raco-dp", 3, "shared")}
    assert data["reference"] == "dp-sgd" and {r[0] for r in requests} == {"raco-dp", "dp-sgd"}
    sampled = data["runs"][throughput._request("raco-dp", 3, 50, None, None, "secret", "shared", 5)]
    assert len(sampled) == 3 and all(cfg["steps"] >= 1 for cfg in sampled)  # T as calibrated here
    assert data["epsilon"] and all(0 < v <= 1.0 for k, v in data["epsilon"].items() if k.startswith("('epsilon'"))


def test_the_benchmark_trains_a_kit_without_ray_mlflow_dp_accounting_or_cryptography(kit, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RACO_BENCH_CACHE": str(tmp_path / "empty-cache")}  # no calibration to read
    proc = subprocess.run([sys.executable, "-c", WITHOUT, "bench", "throughput", "--kit", str(kit), "--sizes", "1", "3", "--singles", "1",
                           "--eval-every", "50", "--no-mlflow"], capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 3 |")]
    assert len(table) == 3  # alone, and the pack of 3 with own and shared batches
    assert "raco-dp / dp-sgd step cost per configuration inside the pack" in proc.stdout


def test_a_kit_answers_only_what_it_recorded(kit):
    """The carried answers are the accountant's for exactly the recorded calls; any other call is computed (here,
    where dp-accounting is installed) and a kit read elsewhere says what is missing."""
    data = json.loads(kit.read_text())
    key, value = next((k, v) for k, v in data["epsilon"].items() if k.startswith("('epsilon'"))
    kit_runs = throughput.Kit.load(kit)
    assert kit_runs.epsilon[key] == value
    kit_runs.save(kit.parent / "kit.json.gz")  # gzip where the name says so (a kit of 16,384 runs travels in a few MB)
    assert (kit.parent / "kit.json.gz").read_bytes()[:2] == b"\x1f\x8b" and throughput.Kit.load(kit.parent / "kit.json.gz") == kit_runs
    with accounting.recording() as asked, kit_runs.answers():
        assert accounting._carried == [kit_runs.epsilon]
    assert not accounting._carried and not asked  # nothing answered from the kit outside its block
    with pytest.raises(ValueError, match="write one with --write-kit"):
        throughput.Kit.load(kit.parent / "missing.json")
    with pytest.raises(ValueError, match="holds no runs"):
        throughput._runs(None, "raco-dp", 7, "cpu", 50, None, kit=kit_runs)
