"""Numbers as scientific Python hands them over, made plain Python numbers once, at a record's construction.

numpy, pandas and torch give a median, a column's value or a tensor's element as a scalar of
their own (``np.float64``, ``np.bool_``, a 0-d ``ndarray``, a 0-d ``torch.Tensor``). Such a
value compares like a number but is not one where identity matters: ``np.False_ is False`` is
false, so a check whose flag is ``np.False_`` would read as neither passed nor failed. Every
record of the rules (attempt records, :class:`~._records.ArmSummary`, :class:`~._records.Check`,
:class:`~._records.Decision`, :class:`~._policy.Policy`) passes its numbers through
:func:`to_python` first. Duck-typed (a 0-d value with ``.item()``): this module imports neither
numpy nor torch.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["plain_flag", "to_python", "plain_mapping", "plain_record"]

_PLAIN = (bool, int, float, str, type(None))


def to_python(value: Any) -> Any:
    """A numpy, pandas or torch scalar (or a 0-d array or tensor) as the Python number it holds;
    anything else unchanged (a plain number, a string, a list, a multi-element array).

    ``np.float64(1.5)`` -> ``1.5``, ``np.True_`` -> ``True``, ``np.int64(3)`` -> ``3``,
    ``torch.tensor(2.0)`` -> ``2.0``, ``np.array(4.0)`` -> ``4.0``.
    """
    if type(value) in _PLAIN:
        return value
    item = getattr(value, "item", None)
    if item is None or not callable(item):
        return value
    shape = getattr(value, "shape", ())
    try:
        if tuple(shape) != ():
            return value
        result = item()
    except Exception:  # noqa: BLE001 - an object with an unrelated item(): left as it is
        return value
    return result if type(result) in (bool, int, float) else value


def plain_flag(value: Any, name: str = "passed") -> bool | None:
    """A check's flag as ``True``, ``False`` or ``None``, nothing else.

    ``np.bool_`` and 0-d boolean arrays or tensors are made ``bool``; any other value (a number,
    a string) is a :class:`TypeError` naming ``name``: a flag is never read by truthiness.
    """
    value = to_python(value)
    if value is None or type(value) is bool:
        return value
    raise TypeError(f"{name} must be True, False or None, got {type(value).__name__} {value!r}")


def plain_mapping(mapping: Mapping | None) -> dict:
    """A shallow copy of ``mapping`` with each value made :func:`to_python` (tuples and lists of
    numbers element by element)."""
    result = {}
    for key, value in (mapping or {}).items():
        if isinstance(value, (list, tuple)):
            value = type(value)(to_python(item) for item in value)
        result[key] = to_python(value)
    return result


def plain_record(run: Any) -> Any:
    """An attempt record with its values made :func:`to_python`, its ``ok`` left as given.

    ``ok`` stays what the caller wrote: the specification requires a ``bool`` there and raises
    ``ValueError`` otherwise, a rule this module does not loosen. Anything that is not a dict is
    returned unchanged, for the rule to refuse by name.
    """
    if not isinstance(run, dict):
        return run
    return {key: value if key == "ok" else to_python(value) for key, value in run.items()}
