"""The rules layer stays pure: importing it pulls in neither mlflow nor torch, and its public names are fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow_perfgate.rules as rules

REPO = Path(__file__).resolve().parents[1]

SPEC_FUNCTIONS = {
    "validate_validity_report",
    "top_hotspots",
    "synthesize_evidence",
    "design_single_variable_experiment",
    "changed_keys",
    "percentile",
    "summarize_repeated_runs",
    "evaluate_regression",
}
EXTRA_PUBLIC_NAMES = {
    "DEFAULT_THRESHOLDS", "METHODS", "MODES", "OBJECTIVES", "RuleTypeError", "decide", "evaluate_objective",
    "evaluate_robust", "evaluate_seed_non_regression", "explain_checks", "flag_contention", "hodges_lehmann_ratio",
    "objective_for_signal", "recommended_attempts", "sequential_alpha", "sequential_thresholds",
}


def test_importing_rules_loads_neither_mlflow_nor_torch():
    code = (
        "import json, sys\n"
        "import mlflow_perfgate.rules\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'torch'))\n"
        "print(json.dumps(heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    completed = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == []


def test_rules_all_is_sorted_and_exact():
    assert rules.__all__ == sorted(rules.__all__)
    assert len(rules.__all__) == len(set(rules.__all__))
    assert set(rules.__all__) == SPEC_FUNCTIONS | EXTRA_PUBLIC_NAMES
    for name in rules.__all__:
        assert hasattr(rules, name), name
    for name in SPEC_FUNCTIONS:
        assert callable(getattr(rules, name)), name


def test_exported_members_resolve_and_are_sorted():
    import mlflow_perfgate
    import mlflow_perfgate.tracking
    import mlflow_perfgate.workloads

    for module in (mlflow_perfgate, mlflow_perfgate.tracking, mlflow_perfgate.workloads):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"
    assert {"log_attempt", "attempt", "evaluate_group", "decisions"} <= set(mlflow_perfgate.__all__)


def test_importing_the_package_loads_no_mlflow():
    code = "import sys, mlflow_perfgate; assert 'mlflow' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_rules_module_imported_on_its_own_loads_neither_mlflow_nor_torch():
    """Each module of the rules layer, imported alone in a fresh interpreter (the package's own
    lazy loading cannot hide a module that imports mlflow or torch at its top)."""
    names = sorted(f"mlflow_perfgate.rules.{path.stem}" for path in (REPO / "mlflow_perfgate" / "rules").glob("*.py")
                   if path.stem != "__init__")
    assert len(names) > 10
    code = (
        "import importlib, json, sys\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    before = set(sys.modules)\n"
        "    importlib.import_module(name)\n"
        "    found[name] = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('mlflow', 'torch'))\n"
        "print(json.dumps(found))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name in names:  # one interpreter each: a module imported earlier cannot cover for a later one
        completed = subprocess.run([sys.executable, "-c", code, name], cwd=REPO, env=env, capture_output=True,
                                   text=True, timeout=120, check=False)
        assert completed.returncode == 0, completed.stderr
        assert json.loads(completed.stdout.strip().splitlines()[-1]) == {name: []}, name


def _module_imports() -> dict[str, set[str]]:
    """Each module of the package and the package modules it imports (top level or in a function),
    leaving out imports under ``if TYPE_CHECKING:`` and edges into packages (lazy ``__init__``)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "mlflow_perfgate"
    modules = {".".join(path.relative_to(root.parent).with_suffix("").parts): path for path in root.rglob("*.py")}
    packages = {name[:-len(".__init__")] for name in modules if name.endswith(".__init__")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name.endswith(".__init__"):
            continue
        tree = ast.parse(path.read_text())
        typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
        base = name.split(".")[:-1]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or id(node) in typing_only:
                continue
            target = ".".join(base[:len(base) - node.level + 1] + [node.module or ""]) if node.level else node.module
            target = (target or "").strip(".")
            for candidate in [target] + [f"{target}.{alias.name}" for alias in node.names]:
                if candidate in modules and candidate not in packages and candidate != name:
                    graph.setdefault(name, set()).add(candidate)
    return graph


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    graph = _module_imports()
    circles = []

    def walk(node, path, seen):
        for nxt in graph.get(node, ()):
            if nxt == path[0]:
                circles.append(" -> ".join(path + [nxt]))
            elif nxt not in seen and len(path) < 6:
                seen.add(nxt)
                walk(nxt, path + [nxt], seen)

    for start in graph:
        walk(start, [start], {start})
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles)))


def test_the_product_imports_each_package_through_its_face():
    """No module imports another package's private module (``from ..tracking._client import ...``): the
    faces (``rules``, ``tracking``, ``workloads``, ``harness``, ``cli``) are the interface, and every
    name a face lends the product resolves (a face naming a moved or deleted name fails here)."""
    import importlib
    import runpy

    found = runpy.run_path(str(REPO / "scripts" / "structure.py"))["private_imports"]()
    assert found == [], found
    for package in ("rules", "tracking", "workloads"):
        face = importlib.import_module(f"mlflow_perfgate.{package}")
        for name in face._PRODUCT:
            assert getattr(face, name) is not None, (package, name)


def test_every_name_the_benchmarks_scripts_and_docs_import_from_the_package_exists():
    """A name removed from the package is removed from its readers outside it too (a benchmark's
    ``from mlflow_perfgate.rules._records import STEP_P10_FRACTION`` once outlived it, found only in CI)."""
    import ast
    import importlib

    missing = []
    for folder in ("benchmarks", "scripts", "docs", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                        (node.module or "").split(".")[0] == "mlflow_perfgate":
                    module = importlib.import_module(node.module)
                    for alias in node.names:
                        if alias.name != "*" and not hasattr(module, alias.name):
                            try:
                                importlib.import_module(f"{node.module}.{alias.name}")
                            except ImportError:
                                missing.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module}.{alias.name}")
    assert missing == [], missing
