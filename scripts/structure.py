"""The package's shape: its longest modules and definitions, and imports that reach into another
package's private module (the packages' faces, ``rules``, ``tracking``, ``workloads``, ``harness``
and ``cli``, are the interface the rest of the product imports).

Usage: ``python scripts/structure.py [--top N]``; ``tests/test_layering.py`` holds the private imports at none.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mlflow_perfgate"


def private_imports(root: Path = PACKAGE) -> list[str]:
    """``file:line: module`` for each import of another package's private module (``from ..tracking._x import``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        own = parts[0] if len(parts) > 1 else None
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.level:
                full = list(parts[:-1])[: len(parts) - node.level] + node.module.split(".")
            elif node.module.startswith("mlflow_perfgate."):
                full = node.module.split(".")[1:]
            else:
                continue
            if len(full) >= 2 and full[0] != own and full[1].startswith("_"):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {'.'.join(full)}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=6)
    top = parser.parse_args().top
    modules, definitions = [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(PACKAGE.parent))
        modules.append((len(text.splitlines()), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))
    print("longest modules (lines):")
    for lines, name in sorted(modules, reverse=True)[:top]:
        print(f"  {lines:5d}  {name}")
    print("longest definitions (lines):")
    for lines, name in sorted(definitions, reverse=True)[:top]:
        print(f"  {lines:5d}  {name}")
    private = private_imports()
    print(f"imports of another package's private module: {len(private)}")
    for line in private:
        print(f"  {line}")


if __name__ == "__main__":
    main()
