"""Parsing of condition values, which arrive as strings (CLI, MLflow params) or natural types.

Every parser names the condition key and the allowed values in its ``ValueError``, so a typo in
a command line is reported as such and not as a traceback from deep inside torch.
"""

from __future__ import annotations

import ast
import re
from typing import Any

__all__ = ["parse_bool", "parse_choice", "parse_int", "parse_shape"]

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_SHAPE_X = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_bool(key: str, value: Any) -> bool:
    """Read a boolean condition: ``True``/``False``, ``0``/``1`` or a string such as ``'true'``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError(
        f"{key} must be a boolean (true/false, 1/0, yes/no), got {value!r}"
    )


def parse_int(key: str, value: Any, *, minimum: int = 0) -> int:
    """Read an integer condition ``>= minimum`` from an int, an integral float or a decimal string."""
    number: Any = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    # bool is an int subclass; a flag where a count belongs is a mistake worth reporting.
    if type(number) is not int or number < minimum:
        raise ValueError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return number


def parse_choice(key: str, value: Any, aliases: dict[str, str]) -> str:
    """Map a string condition through ``aliases`` (case-insensitive) to its canonical spelling."""
    canonical = aliases.get(str(value).strip().lower()) if isinstance(value, str) else None
    if canonical is None:
        allowed = sorted(set(aliases.values()))
        raise ValueError(f"{key} must be one of {allowed}, got {value!r}")
    return canonical


def parse_shape(key: str, value: Any, *, ndim: int) -> tuple[int, ...]:
    """Read a shape of ``ndim`` positive integers.

    Accepts a tuple or list (``(4, 128)``), its text (``'(4, 128)'``, ``'[4,128]'``, ``'4,128'``)
    and, for two dimensions, ``'4x128'``.
    """
    parsed: Any = value
    if isinstance(value, str):
        match = _SHAPE_X.match(value)
        if match and ndim == 2:
            parsed = (int(match.group(1)), int(match.group(2)))
        else:
            try:
                parsed = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError):
                parsed = None
    if (
        isinstance(parsed, (tuple, list))
        and len(parsed) == ndim
        and all(type(dim) is int and dim > 0 for dim in parsed)
    ):
        return tuple(parsed)
    example = ", ".join(["4", "128", "64"][:ndim])
    raise ValueError(
        f"{key} must be {ndim} positive integers such as '({example})', got {value!r}"
    )
