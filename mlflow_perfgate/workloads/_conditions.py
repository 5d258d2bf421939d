"""Parsing of condition values, which arrive as strings (CLI, MLflow params) or natural types.

Every parser names the condition key and the allowed values in its ``ValueError``, so a typo in
a command line is reported as such and not as a traceback from deep inside torch.

A factory receives ``--set`` values as text: ``--set checkpoint=false`` arrives as ``"false"``
(and ``bool("false")`` is true), ``--set input_shape=4,64`` as ``"4,64"``. The public readers
(:func:`flag`, :func:`integer`, :func:`number`, :func:`shape`, :func:`choice`) take the
conditions dict, a key and a default, and return the natural value::

    from mlflow_perfgate.workloads import flag, integer, shape

    def make(conditions):
        batch, seq = shape(conditions, "input_shape", (4, 64))   # "4,64" -> (4, 64)
        checkpoint = flag(conditions, "checkpoint", False)      # "false" -> False
        layers = integer(conditions, "n_layer", 2, minimum=1)   # "4" -> 4
        ...
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "choice",
    "flag",
    "integer",
    "number",
    "parse_bool",
    "parse_choice",
    "parse_device",
    "parse_float",
    "parse_int",
    "parse_shape",
    "shape",
]

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


def parse_float(key: str, value: Any, *, minimum: float | None = None, strict: bool = False) -> float:
    """Read a finite number condition from an int, a float or its text.

    ``minimum`` is a lower bound, exclusive when ``strict`` (``strict=True, minimum=0`` reads a
    positive number such as a learning rate).
    """
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    elif type(value) is int:
        number = float(value)
    valid = type(number) is float and math.isfinite(number)
    if valid and minimum is not None:
        valid = number > minimum if strict else number >= minimum
    if not valid:
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
        raise ValueError(f"{key} must be a finite number{bound}, got {value!r}")
    return number


def parse_choice(key: str, value: Any, aliases: dict[str, str]) -> str:
    """Map a string condition through ``aliases`` (case-insensitive) to its canonical spelling."""
    canonical = aliases.get(str(value).strip().lower()) if isinstance(value, str) else None
    if canonical is None:
        allowed = sorted(set(aliases.values()))
        raise ValueError(f"{key} must be one of {allowed}, got {value!r}")
    return canonical


def parse_device(value: Any) -> str:
    """A device condition as torch names it: ``cpu``, ``cuda`` or ``cuda:N`` (any case, spaces trimmed).

    Raises:
        ValueError: anything else (the message lists the forms).
    """
    text = str(value).strip().lower()
    kind, _, index = text.partition(":")
    if kind in ("cpu", "cuda") and (not index or (kind == "cuda" and index.isdigit())):
        return text
    raise ValueError(f"device must be one of ['cpu', 'cuda', 'cuda:N'], got {value!r}")


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


# The public readers: a key that is absent, or present as None, gives the default unchanged.


def _given(conditions: Mapping, key: str) -> bool:
    if not isinstance(conditions, Mapping):
        raise TypeError(f"conditions must be a dict, got {type(conditions).__name__}")
    return conditions.get(key) is not None


def flag(conditions: Mapping, key: str, default: bool = False) -> bool:
    """Read a boolean condition.

    Accepts ``True``/``False``, ``1``/``0`` and the strings ``true/false``, ``1/0``, ``yes/no``,
    ``on/off`` in any case.

    Args:
        conditions: the conditions dict the factory received.
        key: the condition to read.
        default: returned when ``key`` is absent or ``None``.

    Returns:
        The boolean.

    Raises:
        ValueError: the value is no boolean; the message names ``key``.

    Example:
        >>> flag({"checkpoint": "false"}, "checkpoint", True)
        False
        >>> flag({}, "checkpoint", True)
        True
    """
    return parse_bool(key, conditions[key]) if _given(conditions, key) else default


def integer(conditions: Mapping, key: str, default: int | None = None, minimum: int = 0) -> int | None:
    """Read an integer condition ``>= minimum``.

    Accepts an int, an integral float (``4.0``) or a decimal string (``"4"``); a bool is refused,
    since a flag where a count belongs is a mistake.

    Args:
        conditions: the conditions dict the factory received.
        key: the condition to read.
        default: returned unchanged when ``key`` is absent or ``None``.
        minimum: the smallest value allowed.

    Raises:
        ValueError: not an integer, or below ``minimum``; the message names ``key``.

    Example:
        >>> integer({"n_layer": "4"}, "n_layer", 2, minimum=1)
        4
    """
    return parse_int(key, conditions[key], minimum=minimum) if _given(conditions, key) else default


def number(conditions: Mapping, key: str, default: float | None = None, minimum: float | None = None,
           *, strict: bool = False) -> float | None:
    """Read a finite real-number condition (for instance a learning rate).

    Args:
        conditions: the conditions dict the factory received.
        key: the condition to read.
        default: returned unchanged when ``key`` is absent or ``None``.
        minimum: a lower bound, or ``None``; exclusive when ``strict``.

    Raises:
        ValueError: not a finite number, or out of bounds; the message names ``key``.

    Example:
        >>> number({"lr": "3e-4"}, "lr", 1e-3, minimum=0, strict=True)
        0.0003
    """
    if not _given(conditions, key):
        return default
    return parse_float(key, conditions[key], minimum=minimum, strict=strict)


def shape(conditions: Mapping, key: str, default: Iterable[int] | None = None,
          ndim: int | None = None) -> tuple[int, ...] | None:
    """Read a shape of ``ndim`` positive integers.

    Accepts a tuple or list, its text (``"(4, 64)"``, ``"[4,64]"``, ``"4,64"``) and, for two
    dimensions, ``"4x64"``.

    Args:
        conditions: the conditions dict the factory received.
        key: the condition to read.
        default: returned as a tuple when ``key`` is absent or ``None``.
        ndim: the number of dimensions; by default ``len(default)``.

    Raises:
        ValueError: not ``ndim`` positive integers; the message names ``key``.
        TypeError: neither ``ndim`` nor a default says how many dimensions.

    Example:
        >>> shape({"input_shape": "4,64"}, "input_shape", (2, 16))
        (4, 64)
    """
    if ndim is None:
        if default is None:
            raise TypeError(f"shape({key!r}) needs ndim or a default to know the number of dimensions")
        ndim = len(tuple(default))
    if not _given(conditions, key):
        return None if default is None else tuple(default)
    return parse_shape(key, conditions[key], ndim=ndim)


def choice(conditions: Mapping, key: str, default: str | None, choices: Iterable[str] | Mapping[str, str]) -> str | None:
    """Read one of a fixed set of strings, case-insensitively.

    Args:
        conditions: the conditions dict the factory received.
        key: the condition to read.
        default: returned unchanged when ``key`` is absent or ``None``.
        choices: the allowed spellings, or a dict mapping each accepted spelling (lower case) to
            its canonical form (``{"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32"}``).

    Raises:
        ValueError: not one of ``choices``; the message names ``key`` and the allowed values.

    Example:
        >>> choice({"dtype": "BF16"}, "dtype", "fp32", ["fp32", "bf16"])
        'bf16'
    """
    if not _given(conditions, key):
        return default
    aliases = dict(choices) if isinstance(choices, Mapping) else {str(c).lower(): str(c) for c in choices}
    return parse_choice(key, conditions[key], {k.lower(): v for k, v in aliases.items()})
