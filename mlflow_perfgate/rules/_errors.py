"""The helpers that raise the errors of ``mlflow_perfgate.errors`` with the field's name.

The tree itself is defined and drawn in ``mlflow_perfgate.errors`` (pure Python, like this
package); it is imported here so the rules raise it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .. import errors as _tree
from ..errors import *  # noqa: F403 - the tree, re-exported for the rules and the layers above
from ..errors import PolicyError, RuleTypeError

__all__ = sorted([*_tree.__all__, "check_finite", "check_unit_interval", "compare", "typed_inputs"])


def check_finite(value: Any, field: str) -> bool:
    """``math.isfinite(value)``, with a named error for a value that is not a real number."""
    try:
        return math.isfinite(value)
    except TypeError:
        raise RuleTypeError(f"{field} must be a real number, got {type(value).__name__} {value!r}") from None


def check_unit_interval(value: Any, field: str, error: type[Exception] = PolicyError) -> None:
    """Raise ``error`` unless ``value`` is a finite number strictly between 0 and 1."""
    if isinstance(value, bool) or not check_finite(value, field) or not 0 < value < 1:
        raise error(f"{field} must be a float in the range (0; 1), got {value!r}")


def compare(op, left: Any, right: Any, field: str) -> bool:
    """``op(left, right)``, with a named error when the two cannot be compared."""
    try:
        return bool(op(left, right))
    except TypeError:
        raise RuleTypeError(f"{field} must be a real number, got {type(left).__name__} {left!r}") from None


def typed_inputs(func):
    """Report a wrong-typed input (a ``TypeError`` inside a rule) as :class:`RuleTypeError`.

    Every ``TypeError`` a rule can meet comes from its inputs (``None`` for a list, a string
    for a number, ...): the specification's code lets it escape as ``TypeError``; here it is
    also a ``ValueError`` and says which rule refused the input.
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except RuleTypeError:
            raise
        except TypeError as exc:
            raise RuleTypeError(f"{func.__name__}: an input has the wrong type: {exc}") from exc

    return wrapper
