"""A decision's attempts, side by side in the MLflow UI, one click away: a shared view state.

MLflow's UI (3.17) reads a view of an experiment's runs page from an experiment tag
``mlflow.sharedViewState.<key>`` when the page's URL carries ``?viewStateShareKey=<key>``
(``#/experiments/<id>/runs?viewStateShareKey=<key>``). The tag's value is the view as JSON (the
UI also reads it compressed): its search facets (``searchFilter``, ``orderByKey``,
``orderByAsc``, ``startTime``, ``lifecycleFilter``) and its UI state (``selectedColumns``,
``columnOrder``, ``columnWidths``, ``runsHiddenMode``, the charts ``compareRunCharts`` and their
sections ``compareRunSections``, ``isAccordionReordered``, ...; the runs pinned, hidden or
expanded are not shared), over the UI's defaults. Column keys read ``params.`name```,
``metrics.`name```, ``tags.`name```. ``&compareRunsMode=CHART`` opens the same runs as charts.

The view of a decision lists its group's attempts (the filter is the group's), baseline first.
Its figures (:func:`figures`) are the one judged (the objective's metric, or the latency the
policy judges), then the others the decision checks: the typical, mean and tail step
(``latency_ms``, ``step_mean_ms``, ``step_p95_ms``) and ``quality``.

- The table: each attempt's arm, outcome and ABBA round, its figures rounded, the changed
  variable and the failure, in that order. MLflow 3.17's table shows a metric with every digit
  (``11.2768345...``) and has no setting to round it (only a metric the UI itself knows, an LLM
  judge's, gets a formatter); so the decision writes each figure as a person reads it on the
  attempt, the tag ``perfgate.rounded.<metric>`` (four significant digits, as the report
  writes them), and the view's columns are those tags. The metrics keep every digit; they are
  a click away (the table's **Columns**, the charts, the run page). A tag sorts as text.
- The charts: the judged figure's chart first, then the other figures', in one open section
  (``Judged <metric> + checks``, two charts a row); every other metric's chart, alphabetically,
  in a closed section (``Model metrics``, and ``System metrics`` for ``system/`` metrics). Left
  to itself, the UI lays out one chart per metric in alphabetical order, all open. Each chart is
  MLflow's own (a bar per attempt in its arm's colour, each bar labelled with its value to 2
  decimals, the UI's fixed rounding; a line for a metric with a history); a metric the attempts
  log after the decision gets the UI's own chart, at the end of its section. A view too long
  for an experiment tag (a hundred metrics) leaves the other metrics' charts to the UI, which
  draws them in the same closed section.

Its key is a digest of the view, so writing it again (a twin evaluator, a re-decision) writes
the same tag; the rounded tags are written only where an attempt lacks them or holds others.
``tests/test_ui_views.py`` checks in the real UI (a server, headless Chromium) that the page
shows exactly the group's attempts with these columns, the rounded figures, and the charts in
this order.
"""

from __future__ import annotations

import hashlib
import json

from ..errors import StoreError
from ..rules import LATENCY_KEYS, STEP_FIGURES, plain
from . import _client
from ._evaluation import Evaluation
from ._group import AttemptView, group_filter
from ._schema import KIND_ATTEMPT, MAX_KEY_LENGTH, METRIC, TAG, VIEW_STATE_PREFIX

__all__ = ["attach_link", "decision_view", "figures", "rounded_tags", "view_key", "view_link", "write_rounded",
           "write_view"]

#: The MLflow UI's limit on an experiment tag's value (``MAX_EXPERIMENT_TAG_VAL_LENGTH``).
MAX_EXPERIMENT_TAG_VALUE = 20000
#: The UI's names of its default chart sections (MLflow's ``Model metrics`` and ``System metrics``):
#: a metric without a chart in the view gets the UI's own in the section of its kind's name.
MODEL_SECTION, SYSTEM_SECTION = "Model metrics", "System metrics"
SYSTEM_METRIC_PREFIX = "system/"
#: The name of the section of the decision's figures (the UI shows some 30 characters of it).
DECISION_SECTION = "Judged {metric} + checks"


def _column(kind: str, name: str) -> str | None:
    return None if "`" in name else f"{kind}.`{name}`"


def _judged(evaluation: Evaluation) -> str:
    objective = evaluation.objective_entry
    return objective.metric if objective is not None and objective.metric else evaluation.policy.latency_key


def _logged(evaluation: Evaluation) -> set[str]:
    return {key for view in evaluation.views if not view.deleted for key in view.metrics}


def figures(evaluation: Evaluation) -> list[str]:
    """The metrics a decision's view puts first: the one judged (always), then the latency the policy
    judges, the typical, mean and tail step and ``quality``, those an attempt logged."""
    judged, logged = _judged(evaluation), _logged(evaluation)
    checked = [evaluation.policy.latency_key, *STEP_FIGURES.values(), METRIC.QUALITY]
    return [judged, *dict.fromkeys(key for key in checked if key != judged and key in logged)]


def _rounded_name(metric: str) -> str | None:
    """The tag of a metric's rounded figure, ``None`` where a tag (or a column) cannot be named so."""
    name = TAG.rounded(metric)
    return name if len(name) <= MAX_KEY_LENGTH and _column("tags", name) else None


def _width(name: str) -> int:
    """A column wide enough for its header (the UI's default, 100 px, cuts a long tag name)."""
    return max(100, 7 * len(name) + 40)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _bar(metric: str, section: str) -> dict:
    """One of MLflow's bar chart cards (its ``RunsChartsBarCardConfig``), for ``metric``, as the UI
    makes its own (``isGenerated``: it draws a metric with a history as lines, as it does for its
    own; the experiment page titles a chart by its metric, whatever its ``displayName``). The
    uuid is a digest of the metric, so the view's key is the same each time."""
    return {"uuid": f"perfgate-chart-{_digest(metric)}", "type": "BAR", "runsCountToCompare": 10,
            "metricSectionId": section, "deleted": False, "isGenerated": True, "metricKey": metric,
            "displayName": metric.rsplit("/", 1)[-1]}


def _section(uuid: str, name: str, *, display: bool, **layout) -> dict:
    # isReordered: a chart the UI adds to the section goes to its end, not in alphabetical order
    return {"uuid": uuid, "name": name, "display": display, "isReordered": True, "deleted": False,
            "isGenerated": False, **layout}


def _charts(evaluation: Evaluation, shown: list[str], others: bool = True) -> dict:
    """The charts' UI state: the decision's figures in an open section, the judged one first; the
    other metrics' (``others``) in closed sections of the UI's names."""
    # two charts a row (the UI's three leave a chart's title a few letters long)
    sections = [_section("perfgate-decision", DECISION_SECTION.format(metric=shown[0]), display=True, columns=2),
                _section("perfgate-model-metrics", MODEL_SECTION, display=False)]
    charts = [_bar(metric, "perfgate-decision") for metric in shown]
    rest = sorted(_logged(evaluation) - set(shown))
    if any(metric.startswith(SYSTEM_METRIC_PREFIX) for metric in rest):
        sections.append(_section("perfgate-system-metrics", SYSTEM_SECTION, display=False))
    if others:
        charts += [_bar(metric, "perfgate-system-metrics" if metric.startswith(SYSTEM_METRIC_PREFIX)
                        else "perfgate-model-metrics") for metric in rest]
    return {"compareRunCharts": charts, "compareRunSections": sections, "isAccordionReordered": True,
            "hideEmptyCharts": True}


def decision_view(evaluation: Evaluation, *, other_charts: bool = True) -> dict:
    """The view state of a decision's attempts (a JSON-ready dict in the UI's format).

    ``other_charts=False`` leaves out the charts of the metrics that are not the decision's
    figures (the UI then draws its own for them, in the same closed section): for a view that
    would not fit in an experiment tag otherwise.
    """
    shown = figures(evaluation)
    rounded = [name for name in map(_rounded_name, shown) if name]
    # what a person reads first: each attempt's arm, outcome and round, then the figures
    columns = [_column("tags", name) for name in (TAG.ARM, TAG.OK, TAG.PAIR, *rounded)]
    if evaluation.change.variable:
        columns.append(_column("params", evaluation.change.variable))
    columns.append(_column("tags", TAG.FAILURE))
    columns = [column for column in columns if column]
    search = f"{group_filter(evaluation.group)} AND tags.\"{TAG.KIND}\" = '{KIND_ATTEMPT}'"
    return {
        "searchFilter": search,
        "orderByKey": f"tags.`{TAG.ARM}`",
        "orderByAsc": True,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": {_column("tags", name): _width(name) for name in rounded},
        "runsHiddenMode": "SHOW_ALL",
        **_charts(evaluation, shown, others=other_charts),
    }


def view_key(view: dict) -> str:
    """The share key of a view: 32 hex digits of the sha256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:32]


def view_link(tracking_uri: str, experiment_id: str, key: str) -> str:
    """Where a person opens the view: the experiment's runs page with ``?viewStateShareKey`` (:func:`_client.ui_link`)."""
    return _client.ui_link(tracking_uri, f"#/experiments/{experiment_id}/runs?viewStateShareKey={key}")


def logged_rounded(metrics: dict[str, float]) -> dict[str, str]:
    """The rounded tags an attempt carries from the start (written in its own ``log_batch``): those of
    the figures a decision's view can show (every latency figure, the step figures, ``quality``, the
    registered objectives' metrics) that it logged, so a decision seldom has one to write."""
    from ._judge import objective_metrics

    shown = (METRIC.LATENCY, *LATENCY_KEYS.values(), *STEP_FIGURES.values(), METRIC.QUALITY, *objective_metrics())
    return {_rounded_name(key): plain(metrics[key]) for key in dict.fromkeys(shown)
            if key in metrics and metrics[key] is not None and _rounded_name(key)}


def rounded_tags(view: AttemptView, metrics: list[str]) -> dict[str, str]:
    """An attempt's rounded figures: ``{perfgate.rounded.<metric>: "11.28"}`` for each of ``metrics`` it logged."""
    return {_rounded_name(metric): plain(view.metrics[metric]) for metric in metrics
            if metric in view.metrics and _rounded_name(metric)}


def write_rounded(mlflow_client, evaluation: Evaluation, metrics: list[str]) -> None:
    """Tag each attempt of the decision with its rounded figures, where it lacks them or holds others.

    An attempt still running (or stale) is left alone: its figures may not be its last. One
    ``log_batch`` per attempt (``_client.for_each_run``: to a server several at a time); a write that fails
    is raised (a :class:`StoreError`).
    """
    writes = []
    for view in evaluation.views:
        if view.deleted or view.state in ("running", "stale"):
            continue
        tags = {key: text for key, text in rounded_tags(view, metrics).items() if view.tags.get(key) != text}
        if tags:
            writes.append((view.run_id, tags))

    _client.for_each_run(mlflow_client, writes, lambda item: _client.log_batch(mlflow_client, item[0], tags=item[1]))


def write_view(mlflow_client, evaluation: Evaluation) -> str | None:
    """Write a decision's view on its experiment, and the attempts' rounded figures it shows; the
    view's key, or ``None`` when the store refused it.

    A refusal (or an outage) costs the view (or the rounded figures) alone: a warning on the
    evaluation says so, and the decision is written without the link (or with the view, whose
    rounded columns are then empty where a tag is missing).
    """
    view = decision_view(evaluation)
    text = json.dumps(view, sort_keys=True)
    if len(text) > MAX_EXPERIMENT_TAG_VALUE:  # many metrics: the UI draws the others' charts itself
        view = decision_view(evaluation, other_charts=False)
        text = json.dumps(view, sort_keys=True)
    if len(text) > MAX_EXPERIMENT_TAG_VALUE:
        evaluation.warnings.append("the attempts' view is too long for an experiment tag; not written")
        return None
    try:
        write_rounded(mlflow_client, evaluation, figures(evaluation))
    except StoreError as exc:
        evaluation.warnings.append(f"the attempts' rounded figures for their view in the MLflow UI could not be "
                                   f"written: {exc}")
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
