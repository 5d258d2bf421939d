"""Which conditions a workload's factory read: the evidence that a changed variable reached it.

A factory is handed the conditions as a :class:`ConditionReads`, a ``dict`` that notes every key
looked up (``[]``, ``get``, ``in``, ``pop``, ``setdefault``). A factory that copies, iterates or
serialises the whole dict may have read anything: then nothing is claimed (:meth:`read` is
``None``). The attempt's memory record carries what was read (``read_conditions``, beside the
workload's own ``describe()``), and a comparison whose changed variable neither arm's factory
read is refused: it would compare one workload with itself
(``harness.check_change_reached_workload``).

No torch here: the harness imports this module's names for its check.
"""

from __future__ import annotations

from typing import Any

__all__ = ["READ_ATTRIBUTE", "ConditionReads", "read_conditions_of"]

#: The attribute a workload carries its factory's reads under (an adapter such as the Hugging
#: Face one sets it itself: it reads its own keys, and hands its factory a recorder of its own).
READ_ATTRIBUTE = "_perfgate_read_conditions"


class ConditionReads(dict):
    """A conditions dict that notes the keys looked up in it.

    It is a ``dict`` (``isinstance`` holds, values are unchanged); reading a key that is absent
    counts too (``conditions.get("x", default)`` read ``x``). Iterating, copying (``dict(c)``,
    ``{**c}``), ``keys()``, ``items()``, ``values()`` or JSON mark the whole dict read.
    """

    def __init__(self, conditions: Any = ()):
        super().__init__(conditions)
        self._looked_up: set = set()
        self._whole = False

    def __getitem__(self, key):
        self._looked_up.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._looked_up.add(key)
        return super().get(key, default)

    def __contains__(self, key) -> bool:
        self._looked_up.add(key)
        return super().__contains__(key)

    def pop(self, key, *default):
        self._looked_up.add(key)
        return super().pop(key, *default)

    def setdefault(self, key, default=None):
        self._looked_up.add(key)
        return super().setdefault(key, default)

    def _everything(self) -> None:
        self._whole = True

    def __iter__(self):
        self._everything()
        return super().__iter__()

    def keys(self):
        self._everything()
        return super().keys()

    def items(self):
        self._everything()
        return super().items()

    def values(self):
        self._everything()
        return super().values()

    def copy(self) -> dict:
        self._everything()
        return dict(super().items())

    def __or__(self, other):
        self._everything()
        return dict(super().items()) | other

    def __ror__(self, other):
        self._everything()
        return other | dict(super().items())

    def __reduce__(self):
        self._everything()
        return (dict, (dict(super().items()),))

    def read(self) -> list[str] | None:
        """The keys looked up, sorted as text; ``None`` when the whole dict was read."""
        if self._whole:
            return None
        return sorted(str(key) for key in self._looked_up)


def read_conditions_of(workload: Any) -> list[str] | None:
    """What the workload's factory read, where it was noted (``None`` when unknown).

    The attribute holds the :class:`ConditionReads` the factory was given (read when asked, so a
    workload that keeps the dict and reads a key in ``step()`` counts that read too) or a list
    of keys (an adapter's own account).
    """
    read = getattr(workload, READ_ATTRIBUTE, None)
    if isinstance(read, ConditionReads):
        read = read.read()
    if isinstance(read, (list, tuple)):
        return sorted(str(key) for key in read)
    return None
