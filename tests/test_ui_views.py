"""The one-click view of a decision's attempts in the MLflow UI (a real server, headless Chromium).

A decision writes the view state of its attempts on its experiment (``mlflow.sharedViewState.<key>``)
and links ``#/experiments/<id>/runs?viewStateShareKey=<key>`` from its report. Opened in MLflow
3.17's UI, that page must show the shared view: exactly the group's attempts (another group's
attempts and the decision run left out), with the changed variable, the latency and the arm as
columns; and with ``&compareRunsMode=CHART``, the same runs as charts of their metrics.
"""

from __future__ import annotations

import json

from mlflow.tracking import MlflowClient

from helpers import log_series
from test_ui_browser import GROUP, browser, decision_server, pytestmark  # noqa: F401 - fixtures, markers


def _page(view_url: str) -> str:
    return "#" + view_url.split("#", 1)[1]


def test_the_decision_links_a_prepared_view_of_its_attempts(decision_server, browser):
    url, result, attempts = decision_server
    log_series("another-group")  # runs the view must leave out
    experiment_id, key = result["experiment_id"], result["view_key"]
    assert key and f"viewStateShareKey={key}" in result["view_url"]
    assert result["view_url"] in result["report"]  # the report (and the run's note) link it
    client = MlflowClient()
    state = json.loads(client.get_experiment(experiment_id).tags[f"mlflow.sharedViewState.{key}"])
    assert "params.`checkpoint`" in state["selectedColumns"] and GROUP in state["searchFilter"]
    assert client.get_run(result["decision_run_id"]).data.tags["perfgate.view_key"] == key

    browser.goto(f"{url}/{_page(result['view_url'])}")
    browser.wait_for("document.body.innerText.includes(\"You're viewing a shared view\")",
                     "the UI to say it shows a shared view")
    rows = browser.wait_for(
        f"""(() => {{
            const ids = [...document.querySelectorAll('.ag-pinned-left-cols-container [role=row][row-id]')]
                .map(r => r.getAttribute('row-id'));
            return ids.length === {len(attempts)} ? ids : null;
        }})()""",
        f"the {len(attempts)} attempts of the group listed",
    )
    assert set(rows) == set(attempts)  # neither the decision run nor the other group's attempts
    headers = browser.wait_for(
        """(() => {
            const names = [...document.querySelectorAll('.ag-header-cell')].map(h => h.innerText.trim());
            return ['checkpoint', 'latency_ms', 'perfgate.arm'].every(n => names.includes(n)) ? names : null;
        })()""",
        "the view's columns (checkpoint, latency_ms, perfgate.arm)",
    )
    assert "quality" in headers
    names = [attempts[run_id] for run_id in rows]
    assert names == sorted(names, key=lambda name: name.split("-")[0])  # baseline first (sorted by arm)

    browser.goto(f"{url}/{_page(result['view_url'])}&compareRunsMode=CHART")
    browser.wait_for(
        f"""(() => {{
            const text = document.body.innerText;
            return text.includes('{len(attempts)} matching runs') && text.includes('latency_ms')
                && document.querySelectorAll('canvas, svg').length > 0;
        }})()""",
        "the attempts as charts (latency_ms), the same runs",
    )
