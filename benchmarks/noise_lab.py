"""The noise lab's command: ``python benchmarks/noise_lab.py --help``.

The lab itself is the package ``benchmarks/noiselab/`` (its docstring says what the lab does, and
its parts); this script runs ``noiselab.cli.main`` and re-exports the names the lab's tests and
``benchmarks/noise_lab_suite.py`` import (``import noise_lab``, with ``benchmarks/`` on the path).
Results, and the notebook of the runs: ``benchmarks/results/README.md``.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from noiselab.analysis import (COMPARE_LATENCIES, LATENCIES, MODES, TARGET_KEYS, Cell, available_judges,  # noqa: E402
                               cell_rate, check_targets, judged_mode, rate, recommend, summarize, window_records,
                               windows)
from noiselab.attempts import WORKLOAD  # noqa: E402
from noiselab.cli import main  # noqa: E402
from noiselab.collection import (FIELDS, attempt_row, attempt_wall_s, block_plan, interleave_hook,  # noqa: E402
                                 pools_of, read_rows, round_wall_s, uncontended_latency)
from noiselab.effects import (EFFECT_SIZES, arm_units, effect_list, expected_ratio, extra_fraction,  # noqa: E402
                              unit_cost_ms)
from noiselab.neighbours import burst_schedule, busy_neighbours, neighbour_plan  # noqa: E402
from noiselab.peers import MARGIN, REFERENCES, asv_mark, asv_verdict, pyperf_verdict  # noqa: E402
from noiselab.report import fit_simulation, markdown_table, report_interleaved, rerun_table, wall_table  # noqa: E402

__all__ = [
    "COMPARE_LATENCIES", "Cell", "EFFECT_SIZES", "FIELDS", "LATENCIES", "MARGIN", "MODES", "REFERENCES",
    "TARGET_KEYS", "WORKLOAD", "arm_units", "asv_mark", "asv_verdict", "attempt_row", "attempt_wall_s",
    "available_judges", "block_plan", "burst_schedule", "busy_neighbours", "cell_rate", "check_targets",
    "effect_list", "expected_ratio", "extra_fraction", "fit_simulation", "interleave_hook", "judged_mode", "main",
    "markdown_table", "neighbour_plan", "pools_of", "pyperf_verdict", "rate", "read_rows", "recommend",
    "report_interleaved", "rerun_table", "round_wall_s", "summarize", "uncontended_latency", "unit_cost_ms",
    "wall_table", "window_records", "windows",
]

if __name__ == "__main__":
    raise SystemExit(main())
