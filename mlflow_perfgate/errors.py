"""The errors of mlflow-perfgate.

The tree (every class is also a ``ValueError``, so code written against the first release's
"everything is a ValueError" keeps working)::

    ValueError
     +-- PerfgateError              something the user can fix; the CLI prints it in one line, exit 2
          +-- InputError            a bad argument, option, record, condition or stored value
          |    +-- RuleTypeError    a field holds a value of the wrong type (also a TypeError)
          |    +-- MissingField     a required field or metric is absent (also a KeyError)
          |    +-- PolicyError      a threshold or decision option out of its range
          |    +-- FormatError      stored JSON (journal, child result, decision.json) of an unknown format
          +-- SingleVariableError   the arms do not differ in exactly one condition
          +-- EnvironmentMismatch   the arms ran in environments that differ beyond the changed variable
          +-- WorkloadFailed        the workload crashed, hung or raised where no attempt records it (a diagnosis),
          |                         or before a comparison's first round measured anything (its setup)
          +-- StoreError            the tracking store could not do what was asked
               +-- StoreRefused     it answered and refused (HTTP 401/403, a run that does not exist, ...)
               +-- StoreUnavailable it could not be reached (refused connection, timeout, 502/503)

Any other exception that reaches the command line is a bug: it is shown with its traceback.

The specification's eight functions keep its contract: they raise plain ``ValueError`` and
``KeyError`` exactly where it does (``RuleTypeError`` where its code would raise ``TypeError``).
"""

from __future__ import annotations

__all__ = [
    "EnvironmentMismatch",
    "FormatError",
    "InputError",
    "MissingField",
    "PerfgateError",
    "PolicyError",
    "RuleTypeError",
    "SingleVariableError",
    "StoreError",
    "StoreRefused",
    "StoreUnavailable",
    "WorkloadFailed",
]


class PerfgateError(ValueError):
    """Something the user can fix. Its message says what and, where it can, how."""


class InputError(PerfgateError):
    """A bad argument, option, record, condition or stored value."""


class RuleTypeError(InputError, TypeError):
    """A field holds a value of the wrong type.

    The specification's code raises ``TypeError`` where a field is not a number (it fails inside
    ``math.isfinite`` or a comparison) and ``ValueError`` for a number out of range. This class is
    both, so code written against either contract catches it, and its message names the field.
    """


class MissingField(InputError, KeyError):
    """A required field or metric is absent (also a ``KeyError``, as the specification raises)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PolicyError(InputError):
    """A threshold or decision option is out of its range; the message names the field and the range."""


class FormatError(InputError):
    """Stored JSON (a journal line, a child's result, ``decision.json``) is of a format this version cannot read."""


class SingleVariableError(PerfgateError):
    """Baseline and candidate do not differ in exactly one condition, or an arm's attempts disagree."""


class EnvironmentMismatch(PerfgateError):
    """The attempts ran in environments that differ beyond what the changed variable explains."""


class StoreError(PerfgateError):
    """The tracking store could not do what was asked."""


class StoreRefused(StoreError):
    """The store answered and refused: credentials, permissions, a run that does not exist."""


class StoreUnavailable(StoreError, ConnectionError):
    """The store could not be reached (connection refused, timeout, a proxy's 502/503)."""


class WorkloadFailed(PerfgateError):
    """The workload crashed, hung, exited or raised where no attempt can record it as a failed attempt,
    or before a comparison could measure anything (its setup).

    A diagnosis's evidence collection, say: its run is left FAILED with the reason, and
    ``run_id`` names it. A comparison whose first round fails for a reason of its setup (the
    workload's module or factory, or both arms at once) stops there: its comparison run is ended
    KILLED saying why, and ``run_id`` names it; its attempts stay recorded, nothing is judged.
    """

    def __init__(self, message: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
