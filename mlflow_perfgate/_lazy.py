"""Names a package exports without importing them until first use (PEP 562).

``import mlflow_perfgate`` then loads neither mlflow nor torch, and the command line can check
its input before it imports either.
"""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``, each name loaded from its module on first use.

    Args:
        package: the package's ``__name__``.
        names: exported name -> module (``"._policy"``, relative to the package, or absolute); a
            name that is its module's own last component is that module.
        namespace: the package's ``globals()``: a loaded name is kept there.
    """

    def __getattr__(name: str):
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(target, package)
        value = module if module.__name__.rsplit(".", 1)[-1] == name else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
