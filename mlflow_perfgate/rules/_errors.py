"""Errors raised by the rules layer."""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["RuleTypeError", "check_finite", "compare", "typed_inputs"]


class RuleTypeError(ValueError, TypeError):
    """A field holds a value of the wrong type.

    The specification's code raises ``TypeError`` where a field is not a number (it fails inside
    ``math.isfinite`` or a comparison) and ``ValueError`` for a number out of range. This class is
    both, so code written against either contract catches it, and its message names the field.
    """


def check_finite(value: Any, field: str) -> bool:
    """``math.isfinite(value)``, with a named error for a value that is not a real number."""
    try:
        return math.isfinite(value)
    except TypeError:
        raise RuleTypeError(f"{field} must be a real number, got {type(value).__name__} {value!r}") from None


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
