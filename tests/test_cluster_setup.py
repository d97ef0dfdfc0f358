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


NODE_ENV_BYTES = 3 * 2**30  # the node's venv measured 2.2 GB (ray, torch's CPU build, mlflow), plus pip's unpacking


@pytest.fixture
def node_home(tmp_path):
    """A fresh home for the node; its 2.2 GB venv is removed when the test ends, not left to the end of the run (nor
    kept in pytest's last three runs), so the rest of the suite has the disk back."""
    free = shutil.disk_usage(tmp_path).free  # fails in a second, naming the fix, rather than with ENOSPC minutes into pip
    assert free >= NODE_ENV_BYTES, (f"the node's environment needs about {NODE_ENV_BYTES / 2**30:.1f} GB free under {tmp_path.parent}; "
                                    f"{free / 2**30:.1f} GB are: free disk space (old pytest folders, /tmp/ray) and run it again")
    home = tmp_path / "home"
    home.mkdir()
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.slow
def test_node_setup_commands_build_a_working_environment(node_home):
    home = node_home
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


# ------------------------------------------------------------------ what a node receives, and the KubeRay manifest

def _excluded(path: str, patterns: list[str]) -> bool:
    """Whether rsync's ``--exclude`` patterns of cluster.yaml (``**/name``: a path component at any depth; ``/name``: a
    top-level one) leave ``path`` (relative to the checkout) out."""
    parts = path.split("/")
    for pattern in patterns:
        if pattern.startswith("**/") and pattern[3:] in parts:
            return True
        if pattern.startswith("/") and parts[0] == pattern[1:]:
            return True
    return False


def test_cluster_yaml_ships_the_checkout_without_stores_results_reports_or_local_data():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert all(".." not in source and "shared" not in source for source in config["file_mounts"].values())  # nothing of this machine
    listing = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    shipped = [p for p in listing if not _excluded(p, config["rsync_exclude"])]
    for folder in ("results", "reports", "mlartifacts"):
        assert not any(p.startswith(folder + "/") for p in shipped), folder
        assert _excluded(f"{folder}/x", config["rsync_exclude"])
    assert "raco_bench/records/results.py" in shipped and "raco_bench/report/build.py" in shipped  # only the top-level folders go
    assert "sweeps/adult.py" in shipped and "cluster-requirements.txt" in shipped
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"results", "reports", "mlartifacts", ".git", ".venv"} <= set(ignored)  # the KubeRay image leaves out the same


def test_cluster_yaml_runs_one_trial_per_gpu_and_plans_for_the_gpus_it_scales_to():
    """The head is a CPU machine on a CPU image; every GPU node type has a GPU image; the exports give each trial one GPU
    and tell the sweep how many GPUs the workers scale up to, which it plans a phase for before they join."""
    from raco_bench.sweeps.runner import CLUSTER_GPUS_ENV, GPUS_PER_TRIAL_ENV, gpu_slots

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    gpu_types = [t for t in types.values() if t.get("resources", {}).get("GPU")]
    assert "GPU" not in head["resources"] and gpu_types
    assert all(t["node_config"]["ImageId"] != head["node_config"]["ImageId"] for t in gpu_types)
    exports = dict(line.split("export ", 1)[1].strip("'").split("=", 1) for c in config["setup_commands"] for line in c.split(";")
                   if "export RACO_BENCH" in line)
    assert exports[GPUS_PER_TRIAL_ENV] == "1"
    assert int(exports[CLUSTER_GPUS_ENV]) == sum(t["max_workers"] * t["resources"]["GPU"] for t in gpu_types)
    os.environ[CLUSTER_GPUS_ENV] = exports[CLUSTER_GPUS_ENV]
    try:
        assert gpu_slots(0.0, 1.0) == 8 and gpu_slots(12.0, 1.0) == 12 and gpu_slots(0.0, 0.5) == 16  # none up yet: the declared 8
    finally:
        del os.environ[CLUSTER_GPUS_ENV]
    assert gpu_slots(0.0, 1.0) == 1  # no declaration, no GPU up: one slot


def test_the_kuberay_manifest_runs_the_sweep_on_autoscaled_gpu_workers_with_an_mlflow_server():
    """kuberay-rayjob.yaml against what the sweep needs: a script of sweeps/ whose arguments parse; the pinned Ray; a CPU
    head and GPU workers that autoscale from zero, each trial one GPU, the sweep told how many GPUs they reach; an
    MLflow server that keeps its store on a volume, serves the artifacts and answers the Host the trials send."""
    import shlex

    from raco_bench.sweeps.arguments import parse_args
    from raco_bench.sweeps.runner import CLUSTER_GPUS_ENV, GPUS_PER_TRIAL_ENV

    docs = list(yaml.safe_load_all((ROOT / "kuberay-rayjob.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    job, server, service = kinds["RayJob"], kinds["Deployment"], kinds["Service"]
    assert job["apiVersion"] == "ray.io/v1" and job["spec"]["shutdownAfterJobFinishes"] is True
    python, script, *args = shlex.split(job["spec"]["entrypoint"])
    local = ROOT / script.removeprefix("/home/ray/raco-bench/")
    assert python == "python" and local.parent == ROOT / "sweeps" and local.is_file()
    namespace = {}
    exec(compile(local.read_text().split("if __name__")[0], str(local), "exec"), namespace)  # the script's SweepSpec, not its main
    spec, parsed = parse_args(namespace["SPEC"], args)
    assert parsed.yes and spec.dataset == namespace["SPEC"].dataset
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"]
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == _pins()["ray"] and cluster["enableInTreeAutoscaling"] is True
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"rayproject/ray:{_pins()['ray']}-" in dockerfile and "cluster-requirements.txt" in dockerfile
    head = cluster["headGroupSpec"]
    (head_container,) = head["template"]["spec"]["containers"]
    assert head["rayStartParams"]["num-gpus"] == "0" and "nvidia.com/gpu" not in head_container["resources"]["limits"]
    assert not head_container["image"].endswith(":gpu")
    (workers,) = cluster["workerGroupSpecs"]
    (worker,) = workers["template"]["spec"]["containers"]
    gpus = int(worker["resources"]["limits"]["nvidia.com/gpu"])
    assert workers["minReplicas"] == 0 and int(workers["rayStartParams"]["num-gpus"]) == gpus and worker["image"].endswith(":gpu")
    assert float(env[GPUS_PER_TRIAL_ENV]) == 1 and int(env[CLUSTER_GPUS_ENV]) == workers["maxReplicas"] * gpus
    uri = env["MLFLOW_TRACKING_URI"]
    host, port = uri.removeprefix("http://").split(":")
    assert service["metadata"]["name"] == host and service["spec"]["ports"][0]["port"] == int(port)
    assert service["spec"]["selector"].items() <= server["spec"]["template"]["metadata"]["labels"].items()
    (mlflow,) = server["spec"]["template"]["spec"]["containers"]
    options = dict(a.split("=", 1) if "=" in a else (a, "") for a in mlflow["command"][2:])
    assert mlflow["command"][:2] == ["mlflow", "server"] and "--serve-artifacts" in options
    assert f"{host}:{port}" in options["--allowed-hosts"].split(",")  # MLflow 3 refuses other Host headers than localhost's
    mounted = [m["mountPath"] for m in mlflow["volumeMounts"]]
    assert any(options["--backend-store-uri"].removeprefix("sqlite:///").startswith(m) for m in mounted)
    assert options["--artifacts-destination"].startswith(tuple(mounted))
    claim = server["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert kinds["PersistentVolumeClaim"]["metadata"]["name"] == claim
