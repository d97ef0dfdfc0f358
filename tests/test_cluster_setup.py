"""cluster.yaml's setup, as far as this machine allows: the pinned versions agree with the project, and the
node setup commands, run the way the cluster launcher runs them (interactive login bash, in a fresh home),
build an environment in which `ray submit`'s `python ~/<script>.py` runs a sweep script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    from packaging.requirements import Requirement

    out = {}
    for line in (ROOT / "cluster-requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line}: cluster versions are pinned exactly"
            out[req.name] = spec.version
    return out


def test_cluster_pins_satisfy_the_project_requirements():
    from packaging.requirements import Requirement

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    pins = _pins()
    assert {"ray", "mlflow", "torch"} <= set(pins)
    deps = {Requirement(d).name: Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for name, version in pins.items():
        assert deps[name].specifier.contains(version), f"cluster-requirements.txt pins {name}=={version}, outside pyproject's {deps[name]}"
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert any("cluster-requirements.txt" in c for c in config["setup_commands"])


def _launcher_shell(home: Path, command: str, env: dict) -> subprocess.CompletedProcess:
    """How Ray's cluster launcher runs a command on a node (its SSH command runner): an interactive login bash
    that sources ~/.bashrc first."""
    wrapped = f"source ~/.bashrc; export OMP_NUM_THREADS=1 PYTHONWARNINGS=ignore && ({command})"
    return subprocess.run(["bash", "--login", "-c", "-i", wrapped], cwd=home, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_node_setup_commands_build_a_working_environment(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    listing = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    tracked = subprocess.run(listing, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:  # what the file mount "~/raco-bench": "." copies (rsync_exclude drops .git, .venv, stores)
        target = home / "raco-bench" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    system_path = ":".join(p for p in os.environ["PATH"].split(":") if not p.startswith(sys.prefix))  # not this test's venv
    env = {"HOME": str(home), "PATH": system_path, "TERM": "dumb", "LANG": "C.UTF-8",
           "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))}  # the machine's warm pip cache
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE", "RACO_BENCH_DATA"):
        if key in os.environ:
            env[key] = os.environ[key]
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    for command in config["initialization_commands"] + config["setup_commands"]:
        proc = _launcher_shell(home, command, env)
        assert proc.returncode == 0, f"setup command failed: {command}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    bashrc = (home / ".bashrc").read_text()
    assert "source ~/venv/bin/activate" in bashrc and "RACO_BENCH_STORAGE" not in bashrc  # nothing to edit by hand
    pins = _pins()
    check = _launcher_shell(home, "python -c 'import sys, ray, mlflow, torch, raco_bench; print(sys.prefix, ray.__version__, "
                                  "mlflow.__version__, torch.__version__.split(\"+\")[0])'; command -v ray mlflow", env)
    assert check.returncode == 0, check.stderr[-3000:]
    prefix, ray_v, mlflow_v, torch_v = check.stdout.split("\n")[0].split()
    assert Path(prefix) == home / "venv" and (ray_v, mlflow_v, torch_v) == (pins["ray"], pins["mlflow"], pins["torch"])
    assert all(line.startswith(str(home / "venv" / "bin")) for line in check.stdout.split("\n")[1:3])
    # `ray submit cluster.yaml sweeps/adult.py -- ARGS` copies the script to ~ and runs `python ~/adult.py ARGS`
    shutil.copy2(ROOT / "sweeps" / "adult.py", home / "adult.py")
    submit = _launcher_shell(home, "python ~/adult.py --help", env)
    assert submit.returncode == 0 and "--epsilons" in submit.stdout, submit.stderr[-3000:]
    # the setup is idempotent: `ray up` reruns it on every update
    for command in config["setup_commands"]:
        assert _launcher_shell(home, command, env).returncode == 0, command
    assert (home / ".bashrc").read_text() == bashrc
