"""The structure the code keeps (docs/architecture.md, "Adding a method"): core code knows no method by name.

Every method lives in its folder (``raco_bench/methods/<family>/`` or ``baselines/<family>/``) and is listed once,
in the registry (``raco_bench/methods/__init__.py``). The core drivers (packs, audits, accounted tuning, the
benchmarks, the reports) ask a method for its capabilities instead. This test reads every core module's syntax
tree and fails on a method's registered name as a string, a method class (or a family base class) as a name, or
an import from a method folder.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from raco_bench.methods import REGISTRY, method_class
from raco_bench.methods.base import Method

ROOT = Path(__file__).resolve().parents[1]
METHOD_FOLDERS = ("raco_bench/methods/lagrangian/", "baselines/")
REGISTRY_FILE = "raco_bench/methods/__init__.py"


def method_class_names() -> set[str]:
    """Every registered class and each of its bases up to :class:`Method` (a family's shared base included)."""
    names = set()
    for name in REGISTRY:
        for cls in inspect.getmro(method_class(name)):
            if cls is Method:
                break
            names.add(cls.__name__)
    return names


def method_modules() -> set[str]:
    return {REGISTRY[n].split(":")[0].rsplit(".", 1)[0] for n in REGISTRY}  # each plugin's package (its folder)


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a method)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def violations(path: Path, names: set[str], classes: set[str], modules: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip and node.value in names:
            found.append(f"{where}: method name {node.value!r}")
        elif isinstance(node, ast.Name) and node.id in classes:
            found.append(f"{where}: method class {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in classes and not (isinstance(node.value, ast.Attribute) and node.value.attr == "optim"):
            found.append(f"{where}: method class {node.attr}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom):
                found += [f"{where}: imports method class {a.name}" for a in node.names if a.name in classes]
            found += [f"{where}: imports {t}" for t in targets if any(t == m or t.startswith(m + ".") for m in modules) or t.startswith("baselines")]
    return found


def core_files() -> list[Path]:
    files = []
    for path in sorted((ROOT / "raco_bench").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == REGISTRY_FILE or rel.startswith(METHOD_FOLDERS):
            continue
        files.append(path)
    return files


def test_core_code_names_no_method():
    names, classes, modules = set(REGISTRY), method_class_names(), method_modules()
    assert {"raco_bench.methods.lagrangian", "baselines.dp_fermi"} <= modules  # the folders the registry points into
    found = [v for path in core_files() for v in violations(path, names, classes, modules)]
    assert not found, "core code names a method; ask the method for a capability instead:\n" + "\n".join(found)


def test_the_check_sees_a_planted_method_name(tmp_path):
    """The check itself goes red on each kind of reference (so a passing run means something)."""
    names, classes, modules = set(REGISTRY), method_class_names(), method_modules()
    planted = tmp_path / "core.py"
    planted.write_text('"""Docstrings may say raco-dp."""\nfrom baselines.dp_fermi.plugin import DPFermi\nimport raco_bench.methods.lagrangian.engine\n'
                       'KIND = "dp-sgd"\n\ndef f(m):\n    return isinstance(m, LagrangianSGDA)\n')
    found = _violations_at(planted, tmp_path, names, classes, modules)
    assert any("method name 'dp-sgd'" in v for v in found)
    assert any("imports method class DPFermi" in v for v in found)
    assert any("imports raco_bench.methods.lagrangian.engine" in v for v in found)
    assert any("method class LagrangianSGDA" in v for v in found)
    assert not any("raco-dp" in v for v in found)  # the docstring is prose


def _violations_at(path: Path, root: Path, names, classes, modules) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return violations(path, names, classes, modules)
    finally:
        ROOT = saved


TRACKING = "raco_bench/tracking/"  # the one package that talks to MLflow (docs/architecture.md)


def mlflow_calls(path: Path) -> list[str]:
    """An import of mlflow, or a call of ``tracking.client`` (MLflow's client handed out), in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where}: imports {a.name}" for a in node.names if a.name.split(".")[0] == "mlflow"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mlflow":
            found.append(f"{where}: imports from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr == "client" and isinstance(node.value, ast.Name) and node.value.id == "tracking":
            found.append(f"{where}: tracking.client")
    return found


def test_only_the_tracking_package_talks_to_mlflow():
    files = [p for folder in ("raco_bench", "sweeps", "baselines", "reports") for p in sorted((ROOT / folder).rglob("*.py"))
             if not p.relative_to(ROOT).as_posix().startswith(TRACKING)]
    assert len(files) > 50
    found = [f"{p.relative_to(ROOT)}: {v}" for p in files for v in mlflow_calls(p)]
    assert not found, "MLflow is called outside raco_bench/tracking/; add what you need to raco_bench/tracking:\n" + "\n".join(found)


def test_the_mlflow_check_sees_a_planted_call(tmp_path):
    planted = tmp_path / "reader.py"
    planted.write_text("import mlflow.pyfunc\nfrom mlflow.tracking import MlflowClient\nfrom raco_bench import tracking\n\n"
                       "def f(uri):\n    return tracking.client(uri).get_run('x')\n")
    found = mlflow_calls(planted)
    assert len(found) == 3 and "tracking.client" in found[2], found
