"""Calibration runs: written by ``calibrate``, found again by ``compare --rounds auto``.

A calibration run (``perfgate.kind=calibration``) records identical-arm rounds of a workload on a
host: the workload and its conditions (params, as a comparison run's), the host's fingerprint
(``perfgate.env.*``), each figure's within-round spread (metrics), the test they are for and the
advice (tags), and every round's figures in ``perfgate/calibration.json``. Its
``perfgate.calibration_key`` is a digest of what it calibrated (:func:`calibration_key`): one
search on it finds the latest calibration of the same workload, conditions, threads and host.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow.entities import Metric

from ..errors import InputError
from . import _client
from ._runs import end_run
from ._schema import (
    ARTIFACT_DIR,
    CALIBRATION_FORMAT,
    KIND_CALIBRATION,
    MAX_PARAM_VALUE,
    MAX_TAG_VALUE,
    METRIC,
    PARAM,
    TAG,
    canonical_conditions,
    fit,
)
from ._store import local_store_path

__all__ = ["CALIBRATION_FILE", "CalibrationRecord", "calibration_key", "latest_calibration", "log_calibration"]

#: The artifact of a calibration run, under :data:`ARTIFACT_DIR`.
CALIBRATION_FILE = "calibration.json"


def calibration_key(identity: dict) -> str:
    """The hex sha256 of ``identity`` as sorted JSON: what ``perfgate.calibration_key`` holds.

    ``identity`` is what a calibration is valid for (the harness's ``calibration_identity``: the
    workload, its canonical conditions but ``repeats``, the threads asked for, the host's
    fingerprint but the git revision); two calls agree on it exactly when they measure the same
    workload the same way on the same machine.
    """
    if not isinstance(identity, dict):
        raise InputError(f"identity must be a dict, got {type(identity).__name__}")
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CalibrationRecord:
    """A calibration run as ``compare --rounds auto`` reads it.

    Attributes:
        run_id: the calibration run.
        key: its ``perfgate.calibration_key``.
        end_time_ms: when it ended (ms since the epoch).
        metrics, tags, params: the run's.
    """

    run_id: str
    key: str
    end_time_ms: int
    metrics: dict
    tags: dict
    params: dict

    def spread(self, figure: str) -> float | None:
        """The spread of a figure's within-round log ratios (``spread_<figure>``), or ``None``."""
        value = self.metrics.get(METRIC.calibration_spread(figure))
        return None if value is None else float(value)

    def rounds(self, figure: str) -> int:
        """How many of its rounds held the figure in both arms."""
        return int(self.metrics.get(METRIC.calibration_rounds(figure), 0))

    def age_s(self, now: float | None = None) -> float:
        """Seconds since it ended."""
        return max(0.0, (time.time() if now is None else now) - self.end_time_ms / 1000)


def latest_calibration(identity: dict, *, experiment_name: str | None = None) -> CalibrationRecord | None:
    """The latest FINISHED calibration run of ``identity`` in the experiment (one search), or ``None``.

    Nothing is created: a local store that does not exist, or an experiment that does not, holds
    no calibration.
    """
    key = calibration_key(identity)
    path = local_store_path(mlflow.get_tracking_uri())
    if path is not None and not os.path.exists(path):
        return None
    mlflow_client = _client.client()
    try:
        experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=False)
    except InputError:
        return None
    filter_string = (f"tags.\"{TAG.KIND}\" = '{KIND_CALIBRATION}' AND tags.\"{TAG.CALIBRATION_KEY}\" = '{key}' "
                     "AND attributes.status = 'FINISHED'")
    runs = _client.retrying(lambda: mlflow_client.search_runs(
        [experiment_id], filter_string=filter_string, max_results=1, order_by=["attributes.end_time DESC"]))
    if not runs:
        return None
    run = runs[0]
    if run.data.tags.get(TAG.CALIBRATION_KEY) != key:  # compared in full, as a group's runs are
        return None
    return CalibrationRecord(run.info.run_id, key, int(run.info.end_time or run.info.start_time),
                             dict(run.data.metrics), dict(run.data.tags), dict(run.data.params))


def log_calibration(summary: dict, *, experiment_name: str | None = None, parent_run_id: str | None = None,
                    start_time: int | None = None, failure: str | None = None) -> str:
    """Write a calibration run from ``calibrate``'s summary; its run id.

    Args:
        summary: the calibration (``mlflow_perfgate.calibrate.calibrate``'s payload): ``identity``,
            ``workload``, ``conditions``, ``environment``, ``threads``, ``rounds_asked``,
            ``complete_rounds``, ``failed_rounds``, ``figures`` (each figure's spread record),
            ``test``, ``latency``, ``effects``, ``power``, ``advice``, ``advised_rounds``,
            ``detectable_effect``, ``note`` (markdown) and ``rounds`` (every round's figures).
        experiment_name: where (created if missing).
        parent_run_id: a run to nest it under (the ``mlflow run`` project run).
        start_time: when the calibration started (ms since the epoch); default: now.
        failure: why it could not calibrate (too few complete rounds): the run ends FAILED saying
            so, and ``compare --rounds auto`` never reads it.

    Returns:
        The run id.
    """
    mlflow_client = _client.client()
    experiment_id = _client.resolve_experiment(mlflow_client, experiment_name, create=True)
    test = summary["test"]
    tags = {
        TAG.KIND: KIND_CALIBRATION,
        TAG.CALIBRATION_KEY: calibration_key(summary["identity"]),
        TAG.WORKLOAD: str(summary["workload"]),
        TAG.LATENCY: str(summary["latency"]),
        TAG.MODE: str(test["mode"]),
        TAG.CALIBRATION_TEST: fit(str(test["test"]), MAX_TAG_VALUE),
        TAG.NOTE: fit(str(summary.get("note") or ""), MAX_TAG_VALUE),
        **{f"{TAG.ENV_PREFIX}{key}": fit(str(value), MAX_TAG_VALUE) for key, value in summary["environment"].items()},
        **({TAG.CALIBRATION_ADVICE: fit(summary["advice"], MAX_TAG_VALUE)} if summary.get("advice") else {}),
        **({TAG.FAILURE: fit(failure, MAX_TAG_VALUE)} if failure else {}),
        **({TAG.PARENT: parent_run_id} if parent_run_id else {}),
    }
    figure = next((f for f in summary["figures"] if f["latency"] == summary["latency"]), None)
    name = f"calibrate {summary['workload']}"[:80]
    if figure is not None and figure.get("spread") is not None:
        name += f": {summary['latency']} spread {figure['spread']:.2%}"
    run = _client.retrying(lambda: mlflow_client.create_run(experiment_id, start_time=start_time, tags=tags,
                                                            run_name=name))
    run_id = run.info.run_id
    try:
        params = {key: fit(value, MAX_PARAM_VALUE) for key, value in canonical_conditions(summary["conditions"]).items()}
        params.update({PARAM.of("rounds"): str(summary["rounds_asked"]), PARAM.of("alpha"): repr(test["alpha"]),
                       PARAM.of("confidence"): repr(test["confidence"]), PARAM.of("power"): repr(test["power"]),
                       PARAM.of("mode"): str(test["mode"]), PARAM.of("latency"): str(summary["latency"]),
                       PARAM.of("threads"): str(summary["threads"]),
                       PARAM.of("effects"): ",".join(f"{effect:g}" for effect in summary["effects"])})
        now = int(time.time() * 1000)
        values = {METRIC.ROUNDS: summary["rounds_asked"], METRIC.COMPLETE_ROUNDS: summary["complete_rounds"],
                  METRIC.FAILED_ROUNDS: summary["failed_rounds"], METRIC.ADVISED_ROUNDS: summary.get("advised_rounds"),
                  METRIC.DETECTABLE_EFFECT: summary.get("detectable_effect")}
        for item in summary["figures"]:
            values[METRIC.calibration_rounds(item["key"])] = item["rounds"]
            values[METRIC.calibration_spread(item["key"])] = item["spread"]
            values[METRIC.calibration_sd(item["key"])] = item["sd"]
        metrics = [Metric(key, float(value), now, 0) for key, value in values.items() if value is not None]
        _client.log_batch(mlflow_client, run_id, params=params, metrics=metrics)
        with tempfile.TemporaryDirectory() as tmp:
            payload = {"format_version": CALIBRATION_FORMAT, **{k: v for k, v in summary.items() if k != "note"}}
            (Path(tmp) / CALIBRATION_FILE).write_text(json.dumps(payload, indent=2, default=str))
            _client.retrying(lambda: mlflow_client.log_artifact(run_id, str(Path(tmp) / CALIBRATION_FILE),
                                                                ARTIFACT_DIR))
    except BaseException:
        end_run(run_id, "FAILED", reason="the calibration run could not be written whole")
        raise
    if failure:
        end_run(run_id, "FAILED", reason=failure)
    else:
        end_run(run_id)
    return run_id
