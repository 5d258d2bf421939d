"""TinyLM whose candidate (``checkpoint=true``) stalls while a marker file exists: a node dies mid-attempt.

The marker is named by ``$PERFGATE_RAY_STALL``; without it, or once the file is gone, this is
TinyLM exactly. The Ray dispatcher's test arms it, kills the node running the stalled attempt,
and removes it, so the entry's re-run on another node runs at full speed.
"""

from __future__ import annotations

import os
import time

from mlflow_perfgate.workloads.tinylm import TinyLMConfig, TinyLMWorkload

STALL_LIMIT_S = 300.0


class StallingTinyLM(TinyLMWorkload):
    def step(self):
        marker = os.environ.get("PERFGATE_RAY_STALL")
        if self.config.checkpoint and marker:
            deadline = time.monotonic() + STALL_LIMIT_S
            while os.path.exists(marker) and time.monotonic() < deadline:
                time.sleep(0.2)
        return super().step()


def make(conditions: dict) -> StallingTinyLM:
    return StallingTinyLM(TinyLMConfig.from_conditions(dict(conditions)))
