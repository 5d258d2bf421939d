"""A decision's attempts, side by side in the MLflow UI, one click away: a shared view state.

MLflow's UI (3.17) reads a view of an experiment's runs page from an experiment tag
``mlflow.sharedViewState.<key>`` when the page's URL carries ``?viewStateShareKey=<key>``
(``#/experiments/<id>/runs?viewStateShareKey=<key>``). The tag's value is the view as JSON (the
UI also reads it compressed): its search facets (``searchFilter``, ``orderByKey``,
``orderByAsc``, ``startTime``, ``lifecycleFilter``) and its UI state (``selectedColumns``,
``runsHiddenMode``, ...; the runs pinned, hidden or expanded are not shared). Column keys read
``params.`name```, ``metrics.`name```, ``tags.`name```. ``tests/test_ui_views.py`` checks that
the UI shows exactly the group's attempts with these columns; ``&compareRunsMode=CHART`` opens
the same runs as charts (a bar per attempt for each metric).

The view of a decision lists its group's attempts (the filter is the group's), baseline first,
with the changed variable, ``latency_ms``, ``quality``, the objective's metric and each
attempt's arm, outcome, failure and ABBA round as columns. Its key is a digest of the view,
so writing it again (a twin evaluator, a re-decision) writes the same tag.
"""

from __future__ import annotations

import hashlib
import json
import shlex

from ..rules._errors import StoreError
from . import _client
from ._evaluation import Evaluation
from ._group import group_filter
from ._schema import KIND_ATTEMPT, METRIC, TAG, VIEW_STATE_PREFIX

__all__ = ["attach_link", "decision_view", "view_key", "view_link", "write_view"]

#: The MLflow UI's limit on an experiment tag's value (``MAX_EXPERIMENT_TAG_VAL_LENGTH``).
MAX_EXPERIMENT_TAG_VALUE = 20000


def _column(kind: str, name: str) -> str | None:
    return None if "`" in name else f"{kind}.`{name}`"


def decision_view(evaluation: Evaluation) -> dict:
    """The view state of a decision's attempts (a JSON-ready dict in the UI's format)."""
    # what a person reads first: each attempt's arm, outcome and round, then the figure judged
    columns = [_column("tags", name) for name in (TAG.ARM, TAG.OK, TAG.PAIR)]
    objective = evaluation.objective_entry
    judged = objective.metric if objective is not None and objective.metric else evaluation.policy.latency_key
    metrics = list(dict.fromkeys([judged, METRIC.LATENCY, METRIC.QUALITY]))
    columns += [_column("metrics", name) for name in metrics]
    if evaluation.change.variable:
        columns.append(_column("params", evaluation.change.variable))
    columns.append(_column("tags", TAG.FAILURE))
    search = f"{group_filter(evaluation.group)} AND tags.\"{TAG.KIND}\" = '{KIND_ATTEMPT}'"
    return {
        "searchFilter": search,
        "orderByKey": f"tags.`{TAG.ARM}`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": [column for column in columns if column],
        "runsHiddenMode": "SHOW_ALL",
    }


def view_key(view: dict) -> str:
    """The share key of a view: 32 hex digits of the sha256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:32]


def view_link(tracking_uri: str, experiment_id: str, key: str) -> str:
    """Where a person opens the view: the experiment's runs page with ``?viewStateShareKey``."""
    uri = _client.redact_uri(tracking_uri)
    page = f"#/experiments/{experiment_id}/runs?viewStateShareKey={key}"
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    return f"mlflow ui --backend-store-uri {shlex.quote(uri)}, then open http://127.0.0.1:5000/{page}"


def write_view(mlflow_client, evaluation: Evaluation) -> str | None:
    """Write a decision's view on its experiment; its key, or ``None`` when the store refused it.

    A refusal (or an outage) costs the view alone: a warning on the evaluation says so, and the
    decision is written without the link.
    """
    view = decision_view(evaluation)
    text = json.dumps(view, sort_keys=True)
    if len(text) > MAX_EXPERIMENT_TAG_VALUE:
        evaluation.warnings.append("the attempts' view is too long for an experiment tag; not written")
        return None
    key = view_key(view)
    try:
        _client.retrying(lambda: mlflow_client.set_experiment_tag(evaluation.experiment_id, VIEW_STATE_PREFIX + key,
                                                                  text))
    except StoreError as exc:
        evaluation.warnings.append(f"the attempts' view in the MLflow UI could not be written: {exc}")
        return None
    return key


def attach_link(mlflow_client, evaluation: Evaluation, key: str | None) -> None:
    """The view's key and link on the evaluation, for the report and the command's tail."""
    evaluation.view_key = key
    evaluation.view_url = None if key is None else view_link(mlflow_client.tracking_uri, evaluation.experiment_id,
                                                             key)
