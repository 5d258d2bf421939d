"""Comparisons and diagnoses: PyTorch attempts (``workloads``) recorded and judged in MLflow (``tracking``).

This is the application layer under the CLI, the MLproject entry points, suites, ``history`` and
the pytest plugin: it runs the attempts, logs each one as soon as it ends (a failed one too), and
leaves every verdict to the rules through ``evaluate_group``. Its rooms, in the order a
comparison passes through them:

- ``_conditions``: what a comparison fixes and what it varies: default and declared
  conditions, the single-variable check, which interleavings the change allows, and the checks
  that the change reached the workload and that the quality gate can fail.
- ``_planning``: the configuration (:func:`configure`: what was given, defaulted and fallen back
  to), the validated :class:`Plan` with its one :class:`~mlflow_perfgate.rules.Policy`, the looks
  of a sequential comparison, and the rounds a calibration plans (``--rounds auto``).
- ``_runners``: the runner a comparison uses and what is done while its server warms up.
- ``_comparison_run``: a comparison's runs in MLflow: opened (the group, the refusals, the
  comparison run), its attempts' runs started and written whole, ended KILLED on a stop.
- ``_comparison``: :class:`Comparison`, one comparison from open to decision on those runs: its
  rounds (ABBA attempts, step-interleaved or lockstep rounds), its looks, its decision.
- ``_recording``: one attempt's outcome as its run records it (memory estimates carried per arm).
- ``_signals``: SIGTERM and Ctrl-C held while a run is created or written, so none is left half made.
- ``_commands``: the entry points (:func:`compare`, :func:`diagnose`, :func:`pipeline`) and the
  commands a plan prints.
"""

from ._commands import (candidate_change_and_reason, candidate_change_for, compare, compare_command, diagnose,
                        pipeline)
from ._comparison import Comparison
from ._conditions import (DEFAULT_CONDITIONS, INTERLEAVE_MODES, LOCKSTEP_MODES, base_conditions,
                          check_change_reached_workload, check_interleave, check_quality_gate_can_fail,
                          require_fixed_conditions, validated_change, with_declared_conditions)
from ._planning import (RECOMMENDED, SPECIFICATION, Configuration, Plan, auto_rounds, calibrate_command,
                        calibration_identity, configure)
from ._recording import gpu_name_of
from ._runners import ready_store_while_warming, runner_for
from ._signals import Terminated, signal_held, terminate_as_exception

__all__ = [
    "RECOMMENDED",
    "SPECIFICATION",
    "Configuration",
    "configure",
    "DEFAULT_CONDITIONS",
    "INTERLEAVE_MODES",
    "LOCKSTEP_MODES",
    "pipeline",
    "auto_rounds",
    "calibrate_command",
    "calibration_identity",
    "compare",
    "diagnose",
    "candidate_change_for",
    "candidate_change_and_reason",
    "check_change_reached_workload",
    "check_quality_gate_can_fail",
    "compare_command",
    "require_fixed_conditions",
    "with_declared_conditions",
]

#: What the product's other entry points (suites, ``history``, ``calibrate``) use of a comparison's
#: parts: importable from here, the package's face, and not part of the public API (``__all__``).
_PRODUCT_FACE = (Comparison, Plan, Terminated, base_conditions, check_interleave, gpu_name_of,
                 ready_store_while_warming, runner_for, signal_held, terminate_as_exception, validated_change)
