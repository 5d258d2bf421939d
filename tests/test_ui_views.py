"""The one-click view of a decision's attempts in the MLflow UI (a real server, headless Chromium).

A decision writes the view state of its attempts on its experiment (``mlflow.sharedViewState.<key>``)
and links ``#/experiments/<id>/runs?viewStateShareKey=<key>`` from its report. Opened in MLflow
3.17's UI, that page must show the shared view: exactly the group's attempts (another group's
attempts and the decision run left out), with the arm, the outcome, the round, the decision's
figures rounded (``perfgate.rounded.<metric>``: the UI's table cannot round a metric, and the
metrics keep every digit) and the changed variable as columns, in that order; and with
``&compareRunsMode=CHART``, the same runs as charts: the judged figure's first, then the figures
the decision checks, the ten others in a closed section, where the UI alone would lay out the
fourteen charts in alphabetical order, all open.
"""

from __future__ import annotations

import json
import statistics

from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg
from mlflow_perfgate.rules._records import plain
from mlflow_perfgate.tracking import _views

from helpers import CANDIDATE, CONDITIONS, log_series
from test_ui_browser import GROUP, browser, decision_server, log_measured_series  # noqa: F401 - fixtures
from test_ui_browser import pytestmark as browser_marks

#: The decision's figures for the default policy (latency ``raw``), in the order the view shows them.
FIGURES = ["latency_ms", "step_mean_ms", "step_p95_ms", "quality"]
ROUNDED = [f"perfgate.rounded.{metric}" for metric in FIGURES]


def _page(view_url: str) -> str:
    return "#" + view_url.split("#", 1)[1]


def _state(client, result) -> dict:
    tags = client.get_experiment(result["experiment_id"]).tags
    return json.loads(tags[f"mlflow.sharedViewState.{result['view_key']}"])


def _browser_test(test):
    """The browser module's marks (slow, server, skipped without Chromium) on one test of this module."""
    for mark in browser_marks:
        test = mark(test)
    return test


@_browser_test
def test_the_decision_links_a_prepared_view_of_its_attempts(decision_server, browser):
    url, result, attempts = decision_server
    log_series("another-group")  # runs the view must leave out
    key = result["view_key"]
    assert key and f"viewStateShareKey={key}" in result["view_url"]
    assert result["view_url"] in result["report"]  # the report (and the run's note) link it
    client = MlflowClient()
    state = _state(client, result)
    assert GROUP in state["searchFilter"]
    assert state["selectedColumns"] == ["tags.`perfgate.arm`", "tags.`perfgate.ok`", "tags.`perfgate.pair`",
                                        *[f"tags.`{name}`" for name in ROUNDED], "params.`checkpoint`",
                                        "tags.`perfgate.failure`"]
    assert client.get_run(result["decision_run_id"]).data.tags["perfgate.view_key"] == key
    # each attempt: its figures rounded in tags, its metrics with every digit
    figures = {}
    for run_id in attempts:
        run = client.get_run(run_id)
        steps = [m.value for m in client.get_metric_history(run_id, "step_time_ms")]
        assert run.data.metrics["latency_ms"] == statistics.median(steps)  # nothing lost
        figures[run_id] = {metric: run.data.metrics[metric] for metric in FIGURES}
        assert {name: run.data.tags[name] for name in ROUNDED} == {
            f"perfgate.rounded.{metric}": plain(value) for metric, value in figures[run_id].items()}
    unrounded = {run_id: repr(values["latency_ms"]) for run_id, values in figures.items()}
    assert all(len(text) > 8 for text in unrounded.values())  # the clock's many digits

    # (a) the table: the group's attempts alone, baseline first, the columns in the view's order
    browser.goto(f"{url}/{_page(result['view_url'])}")
    browser.wait_for("document.body.innerText.includes(\"You're viewing a shared view\")",
                     "the UI to say it shows a shared view")
    # wide enough for every column at once (the grid draws only the columns in sight)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 3000, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    rows = browser.wait_for(
        f"""(() => {{
            const ids = [...document.querySelectorAll('.ag-pinned-left-cols-container [role=row][row-id]')]
                .map(r => r.getAttribute('row-id'));
            return ids.length === {len(attempts)} ? ids : null;
        }})()""",
        f"the {len(attempts)} attempts of the group listed",
    )
    assert set(rows) == set(attempts)  # neither the decision run nor the other group's attempts
    names = [attempts[run_id] for run_id in rows]
    assert names == sorted(names, key=lambda name: name.split("-")[0])  # baseline first (sorted by arm)
    # (and perfgate.failure, last: the UI draws no column for a tag no attempt holds, as here)
    wanted = ["perfgate.arm", "perfgate.ok", "perfgate.pair", *ROUNDED, "checkpoint"]
    headers = browser.wait_for(
        f"""(() => {{
            const cells = [...document.querySelectorAll('.ag-header-row-column .ag-header-cell')]
                .map(h => [h.innerText.trim(), h.getBoundingClientRect().left])
                .filter(([name]) => name).sort((a, b) => a[1] - b[1]).map(([name]) => name);
            return {json.dumps(wanted)}.every(n => cells.includes(n)) ? cells : null;
        }})()""",
        f"the view's columns ({', '.join(wanted)})",
    )
    assert [name for name in headers if name in wanted] == wanted, headers  # in the view's order
    assert not {"latency_ms", "quality"} & set(headers)  # no metric column of every digit
    shown = browser.wait_for(
        f"""(() => {{
            const out = {{}};
            for (const id of {json.dumps(rows)}) {{
                const row = document.querySelector(`.ag-center-cols-container [role="row"][row-id="${{id}}"]`);
                if (!row) return null;
                out[id] = {{}};
                for (const name of {json.dumps(ROUNDED)}) {{
                    const cell = row.querySelector(`[col-id="tags.\\`${{name}}\\`"]`);
                    if (!cell || !cell.innerText.trim()) return null;
                    out[id][name] = cell.innerText.trim();
                }}
            }}
            return out;
        }})()""",
        "each attempt's rounded figures in its row",
    )
    for run_id, values in figures.items():
        assert shown[run_id] == {f"perfgate.rounded.{metric}": plain(value) for metric, value in values.items()}
    table = browser.evaluate("document.querySelector('.ag-root').innerText")
    assert not [text for text in unrounded.values() if text in table]  # every digit is not what one reads

    # (b) the charts: the judged figure's first, then the checked ones; the others closed
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1600, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    browser.goto(f"{url}/{_page(result['view_url'])}&compareRunsMode=CHART")
    charts = browser.wait_for(
        f"""(() => {{
            const CARD = '[data-testid="experiment-view-compare-runs-card"]';
            const area = document.querySelector('[data-testid="experiment-view-compare-runs-chart-area"]');
            if (!area || !document.body.innerText.includes('{len(attempts)} matching runs')) return null;
            const card = c => ({{
                title: c.querySelector('h4') ? c.querySelector('h4').innerText.trim() : '',
                labels: [...c.querySelectorAll('text.bartext')].map(t => t.textContent.trim()),
            }});
            const sections = [...area.querySelectorAll('.du-bois-light-collapse-item')].map(s => {{
                const header = s.querySelector('[aria-expanded]');
                return {{header: header.innerText.replace(/\\s+/g, ' ').trim(),
                         open: header.getAttribute('aria-expanded') === 'true',
                         charts: [...s.querySelectorAll(CARD)].map(card)}};
            }});
            const first = sections[0];
            const drawn = first && first.charts.length === {len(FIGURES)}
                && first.charts.every(c => c.labels.length === {len(attempts)});
            return drawn ? sections : null;
        }})()""",
        "the decision's charts, the judged figure's first, each bar labelled",
    )
    first, *rest = charts
    assert first["open"] and first["header"].startswith("Judged latency_ms") and "(4)" in first["header"]
    assert [chart["title"] for chart in first["charts"]] == FIGURES  # as shown, top left first
    # the UI labels each bar with its value to 2 decimals (the metric keeps every digit)
    assert sorted(first["charts"][0]["labels"]) == sorted(f"{v['latency_ms']:.2f}" for v in figures.values())
    (others,) = rest
    assert others["header"].startswith("Model metrics (10)")  # the other ten metrics' charts,
    assert not others["open"] and not others["charts"]  # closed: not drawn until opened
    browser.click(".du-bois-light-collapse-item:nth-of-type(2) > .du-bois-light-collapse-header",
                  "the header of the closed section")
    opened = browser.wait_for(
        """(() => {
            const section = document.querySelectorAll('.du-bois-light-collapse-item')[1];
            const titles = [...section.querySelectorAll('[data-testid="experiment-view-compare-runs-card"] h4')]
                .map(h => h.innerText.trim());
            return titles.length ? titles : null;
        })()""",
        "the other metrics' charts once their section is opened",
    )
    assert opened == sorted(opened) and not set(opened) & set(FIGURES)  # (the UI draws those in sight)


def test_the_view_follows_the_judged_figure_and_tags_only_what_changed(sqlite_uri, monkeypatch):
    """A decision on another latency (``p10``) puts its figure first; an attempt carries its rounded
    figures from the start (logged with it), and a decision writes only one it lacks (an attempt
    logged by an earlier release), leaving the others as they were."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "perfgate-view-p10")
    attempt_ids = log_measured_series("p10-check")
    client = MlflowClient()
    for run_id in attempt_ids:  # logged with the attempt, in its own log_batch
        tags, metrics = client.get_run(run_id).data.tags, client.get_run(run_id).data.metrics
        assert tags["perfgate.rounded.step_p10_ms"] == plain(metrics["step_p10_ms"])
        assert tags["perfgate.rounded.latency_ms"] == plain(metrics["latency_ms"])
        client.delete_tag(run_id, "perfgate.rounded.step_p10_ms")  # as an earlier release logged it
    first = pg.evaluate_group("p10-check")
    assert first["decision"] == "accept"
    before = {run_id: client.get_run(run_id).data.tags for run_id in attempt_ids}
    assert all("perfgate.rounded.step_p10_ms" not in tags for tags in before.values())  # not a figure it shows
    writes = []
    real = _views._client.log_batch
    monkeypatch.setattr(_views._client, "log_batch",
                        lambda c, run_id, **kw: (writes.append((run_id, kw["tags"])), real(c, run_id, **kw)))
    second = pg.evaluate_group("p10-check", latency="p10")
    assert second["view_key"] != first["view_key"]
    state = _state(client, second)
    charts = [chart["metricKey"] for chart in state["compareRunCharts"]
              if chart["metricSectionId"] == "perfgate-decision"]
    assert charts == ["step_p10_ms", "latency_ms", "step_mean_ms", "step_p95_ms", "quality"]
    assert state["compareRunSections"][0]["name"] == "Judged step_p10_ms + checks"
    assert state["selectedColumns"][3:8] == [f"tags.`perfgate.rounded.{metric}`" for metric in charts]
    # one write per attempt, of the one new figure (the decision run's own writes aside)
    p10 = {run_id: client.get_run(run_id).data.metrics["step_p10_ms"] for run_id in attempt_ids}
    assert sorted(write for write in writes if write[0] in attempt_ids) == sorted(
        (run_id, {"perfgate.rounded.step_p10_ms": plain(value)}) for run_id, value in p10.items())
    for run_id in attempt_ids:  # the earlier decision's rounded figures stay as they were
        tags = client.get_run(run_id).data.tags
        assert {name: tags[name] for name in ROUNDED} == {name: before[run_id][name] for name in ROUNDED}


def test_a_view_of_many_metrics_leaves_the_others_charts_to_the_ui(sqlite_uri, monkeypatch):
    """Past an experiment tag's 20,000 characters, the view leaves out the charts of the metrics that
    are not the decision's (the UI draws its own for them, in the same closed section)."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "perfgate-view-many")
    extras = {f"counter_{index:03d}_of_a_long_named_profiler_figure": float(index) for index in range(120)}
    for arm, conditions, values in (("baseline", CONDITIONS, (100, 102, 99, 101, 100)),
                                    ("candidate", CANDIDATE, (88, 90, 89, 91, 87))):
        for value in values:
            pg.log_attempt("many", arm, conditions, latency_ms=value, quality=0.9, metrics=extras)
    result = pg.evaluate_group("many")
    assert result["view_key"] and not [w for w in result["warnings"] if "view" in w]
    state = _state(MlflowClient(), result)
    assert [chart["metricKey"] for chart in state["compareRunCharts"]] == ["latency_ms", "quality"]
    assert [section["name"] for section in state["compareRunSections"]] == ["Judged latency_ms + checks",
                                                                            "Model metrics"]
    assert len(json.dumps(state, sort_keys=True)) <= _views.MAX_EXPERIMENT_TAG_VALUE
