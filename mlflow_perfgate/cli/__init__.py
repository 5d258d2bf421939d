"""The ``mlflow-perfgate`` command line: parsing, printing and exit codes, nothing else.

Each command is in the room of its purpose: running attempts (``_running``: compare, calibrate,
diagnose, pipeline), recording them by hand (``_record``), judging and reading decisions
(``_decisions``), suites (``_suite``), history (``_history``) and the store's upkeep
(``_store``); beside them the options they share (``_options``), how every command answers
(``_common``) and the entry points (``_main``). Importing this package registers every command
on :data:`cli`.
"""

from . import _decisions, _history, _record, _running, _store, _suite
from ._common import EXIT_CODES, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, parse_assignments, reads_only
from ._group import cli
from ._main import entry, main
from ._options import SectionedCommand, collect_policy

__all__ = ["EXIT_CODES", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "EXIT_USAGE", "SectionedCommand", "cli",
           "collect_policy", "entry", "main", "parse_assignments", "reads_only"]

#: The rooms whose import registers their commands on :data:`cli`.
_COMMAND_ROOMS = (_decisions, _history, _record, _running, _store, _suite)
