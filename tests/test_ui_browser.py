"""The MLflow UI shows a decision: a real ``mlflow server`` and headless Chromium, no mocks.

A decision (group ``ui-check``) is logged into a fresh SQLite store, ``mlflow server`` serves that
store on a free loopback port, and Debian's Chromium (``scripts/install_browser.sh``) is driven
through the Chrome DevTools Protocol over ``--remote-debugging-pipe``: null-terminated JSON on
file descriptors 3 (commands) and 4 (replies), so the standard library is the whole client.

The checks wait for content (polling the DOM) instead of sleeping:

* the experiment's runs table lists the decision run; its attempts are nested under it, hidden
  until its expander (the +/- button in the run-name cell) is clicked, then listed;
* the decision run's page renders the ``mlflow.note.content`` markdown: the ``## ACCEPT ...``
  headline as a heading and the group name in the description.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import mlflow_perfgate as pg

from conftest import start_mlflow_server, stop_server
from helpers import CANDIDATE, CONDITIONS

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run")
GROUP = "ui-check"
EXPERIMENT = "perfgate-ui-check"
WAIT_S = 30.0  # per condition; each one normally holds within a few seconds


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


pytestmark = [
    pytest.mark.slow,
    pytest.mark.server,
    pytest.mark.skipif(_chromium() is None,
                       reason="chromium is not installed (/usr/bin/chromium); run scripts/install_browser.sh"),
]


class BrowserError(RuntimeError):
    pass


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (CDP, standard library only)."""

    def __init__(self, executable: str, profile: Path, log_path: Path):
        profile.mkdir(parents=True, exist_ok=True)
        self._log_path = log_path
        self._next_id = 0
        self._buffer = b""
        # Chromium reads commands on fd 3 and writes replies on fd 4: bash maps the pipe ends
        # there (moved to fds >= 10 first, so "3<&N 4>&M" cannot clobber one with the other).
        cmd_read, cmd_write = os.pipe()
        reply_read, reply_write = os.pipe()
        child_read = fcntl.fcntl(cmd_read, fcntl.F_DUPFD_CLOEXEC, 10)
        child_write = fcntl.fcntl(reply_write, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_read)
        os.close(reply_write)
        self._write_fd, self._read_fd = cmd_write, reply_read
        argv = [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                "about:blank"]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                ["/bin/bash", "-c", f'exec "$@" 3<&{child_read} 4>&{child_write} {child_read}<&- {child_write}>&-',
                 "bash", *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(child_read, child_write), start_new_session=True,
            )
        os.close(child_read)
        os.close(child_write)
        self.session_id = None
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session_id = self.send("Target.attachToTarget",
                                        {"targetId": target, "flatten": True})["sessionId"]
            self.send("Page.enable")
            self.send("Runtime.enable")
            # a fixed viewport of a common laptop's width (the runs table virtualises rows and columns):
            # what a user sees without configuring anything must be seen here
            self.send("Emulation.setDeviceMetricsOverride",
                      {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    # -- protocol --------------------------------------------------------------------------

    def send(self, method: str, params: dict | None = None, timeout_s: float = WAIT_S) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session_id is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session_id
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._write_fd, data):]
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline, method)
            if reply.get("id") == self._next_id:  # events (no "id") are not needed here
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read_message(self, deadline: float, method: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no reply to {method} within the time limit{self.log_tail()}")
            ready, _, _ = select.select([self._read_fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._read_fd, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium closed the pipe (exit {self.process.poll()}){self.log_tail()}")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    # -- helpers ---------------------------------------------------------------------------

    def goto(self, url: str) -> None:
        """Navigate and wait for the document to load (a hash change stays in the loaded app)."""
        reply = self.send("Page.navigate", {"url": url})
        if reply.get("errorText"):
            raise BrowserError(f"navigation to {url} failed: {reply['errorText']}")
        page = url.split("#", 1)[0]
        self.wait_for(f"location.origin + location.pathname + location.search === {json.dumps(page)}"
                      " && document.readyState === 'complete'", f"{page} to load")

    def wait_for(self, expression: str, what: str, timeout_s: float = WAIT_S):
        """Poll ``expression`` in the page until it is truthy; return its value.

        Errors while polling (a page script throwing on a half-rendered DOM, an execution
        context replaced by a navigation) count as "not yet"; the last one is reported.
        """
        deadline = time.monotonic() + timeout_s
        last_error = None
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError as error:
                if self.process.poll() is not None:
                    raise
                value, last_error = None, error
            if value:
                return value
            if time.monotonic() > deadline:
                try:
                    text = self.evaluate("document.body ? document.body.innerText : ''") or ""
                except BrowserError as error:
                    text = f"(unreadable: {error})"
                raise AssertionError(f"timed out after {timeout_s} s waiting for {what}"
                                     + (f" (last error: {last_error})" if last_error else "")
                                     + f"; the page shows:\n{' '.join(text.split())[:3000]}")
            time.sleep(0.25)

    def click(self, selector: str, what: str) -> None:
        """A real mouse click at the element's centre (after scrolling it into view)."""
        box = self.wait_for(
            f"""(() => {{
                const el = document.querySelector({json.dumps(selector)});
                if (!el) return null;
                el.scrollIntoView({{block: 'center', inline: 'nearest'}});
                const r = el.getBoundingClientRect();
                if (!r.width || !r.height) return null;
                const x = r.left + r.width / 2, y = r.top + r.height / 2;
                const hit = document.elementFromPoint(x, y);
                return hit && (hit === el || el.contains(hit)) ? {{x, y}} : null;
            }})()""",
            f"{what} to be visible and clickable ({selector})",
        )
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent",
                      {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1})

    def log_tail(self) -> str:
        try:
            return "\nchromium log tail:\n" + self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.session_id = None
                self.send("Browser.close", timeout_s=5)
            except (BrowserError, OSError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # renderer and utility processes share the browser's process group
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        for fd in (self._write_fd, self._read_fd):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def browser(tmp_path):
    chrome = Browser(_chromium(), tmp_path / "chromium-profile", tmp_path / "chromium.log")
    yield chrome
    chrome.close()


#: Each arm's typical step (ms): the candidate about 11% faster.
STEP_BASE_MS = {"baseline": 100.0, "candidate": 89.0}


def _steps(arm: str, attempt: int) -> list[float]:
    """An attempt's five measured steps: times of many digits, as a real clock gives (the view must
    show them rounded), spread over 1.5 ms."""
    return [STEP_BASE_MS[arm] + ((attempt * 5 + step) * 0.6180339887) % 1.5 for step in range(5)]


def log_measured_series(group: str) -> list[str]:
    """Five attempts per arm of a measured comparison, each in its ABBA round: step times (so the
    step figures), the contention figures, memory, throughput and wall time: fourteen metrics, as
    ``compare`` logs them; returns the run ids."""
    ids = []
    for arm, conditions, quality in (("baseline", CONDITIONS, 0.9), ("candidate", CANDIDATE, 0.895)):
        for index in range(5):
            steps = _steps(arm, index)
            latency = statistics.median(steps)
            extras = {"peak_mem_mib": 412.3377 + index, "throughput_tok_s": 512 * 1000 / latency,
                      "attempt_wall_s": sum(steps) / 1000 + 1.21733, "runq_wait_ms": 0.8123 + index / 7,
                      "cpu_ms": sum(steps) * 0.98765, "wait_share": 0.00812347, "nivcsw": 3 + index}
            ids.append(pg.log_attempt(group, arm, conditions, latency_ms=latency, quality=quality,
                                      step_times_ms=list(steps), metrics=extras, pair=index))
    return ids


@pytest.fixture
def decision_server(sqlite_uri, tmp_path, monkeypatch):
    """A decision of group ``ui-check`` (:func:`log_measured_series`) in a fresh SQLite store, served by a
    real ``mlflow server``."""
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
    attempt_ids = log_measured_series(GROUP)
    result = pg.evaluate_group(GROUP)
    assert result["decision"] == "accept"
    client = MlflowClient(tracking_uri=sqlite_uri)
    attempts = {run_id: client.get_run(run_id).info.run_name for run_id in attempt_ids}
    process, url = start_mlflow_server(tmp_path / "server", backend_uri=sqlite_uri)
    try:
        yield url, result, attempts
    finally:
        stop_server(process)


def _row(run_id: str) -> str:
    """The runs table's row (ag-grid, pinned run-name column) of one run."""
    return f'.ag-pinned-left-cols-container [role="row"][row-id="{run_id}"]'


def test_decision_and_its_nested_attempts_render_in_the_mlflow_ui(decision_server, browser):
    url, result, attempts = decision_server
    experiment_id, decision_id = result["experiment_id"], result["decision_run_id"]

    # (a) the runs table: the decision run is listed, its attempts nested (collapsed) under it
    browser.goto(f"{url}/#/experiments/{experiment_id}/runs")
    browser.wait_for(
        f"""(() => {{
            const row = document.querySelector({json.dumps(_row(decision_id))});
            return row && row.innerText.includes({json.dumps(f"decision {GROUP}")});
        }})()""",
        f"the decision run 'decision {GROUP}' in the runs table",
    )
    listed = browser.evaluate(
        "[...document.querySelectorAll('.ag-pinned-left-cols-container [role=row][row-id]')]"
        ".map(r => r.getAttribute('row-id'))")
    # MLflow collapses child runs under their parent: its run-name cell has a +/- expander
    if not set(listed) & set(attempts):
        expander = f'{_row(decision_id)} button[data-component-id$="runnamecellrenderer.tsx_46"]'
        browser.click(expander, "the decision run's expander")
    shown = browser.wait_for(
        f"""(() => {{
            const row = id => document.querySelector(
                `.ag-pinned-left-cols-container [role="row"][row-id="${{id}}"]`);
            const nameLeft = id => row(id).querySelector(`a[href*="/runs/${{id}}"]`).getBoundingClientRect().left;
            const shown = {{}};
            for (const [id, name] of Object.entries({json.dumps(attempts)})) {{
                if (!row(id) || !row(id).innerText.includes(name)) return null;
                // nested rows are indented: their run name starts right of the parent's
                shown[id] = {{text: row(id).innerText, indent: nameLeft(id) - nameLeft({json.dumps(decision_id)})}};
            }}
            return shown;
        }})()""",
        f"the {len(attempts)} attempts nested under the decision run after expanding it",
    )
    assert set(shown) == set(attempts)
    assert {name.split("-")[0] for name in attempts.values()} == {"baseline", "candidate"}
    not_indented = {run_id: row for run_id, row in shown.items() if not row["indent"] > 0}
    assert not not_indented, f"attempt rows not indented under the decision run: {not_indented}"
    # the verdict is in the decision row's name, and each attempt is drawn in its arm's colour
    assert f"ACCEPT: decision {GROUP}" in browser.evaluate(
        f"document.querySelector({json.dumps(_row(decision_id))}).innerText")
    # and drawn where it is seen at 1,280 px: the verdict's characters lie inside the visible name cell
    seen = browser.evaluate(
        f"""(() => {{
            const link = document.querySelector({json.dumps(_row(decision_id))} + ` a[href*="/runs/{decision_id}"]`);
            const walker = document.createTreeWalker(link, NodeFilter.SHOW_TEXT);
            let node; while ((node = walker.nextNode()) && !node.textContent.includes('ACCEPT')) {{}}
            if (!node) return null;
            const start = node.textContent.indexOf('ACCEPT');
            const range = document.createRange();
            range.setStart(node, start); range.setEnd(node, start + 'ACCEPT'.length);
            const word = range.getBoundingClientRect();
            let cell = link; while (cell && !(cell.getAttribute && cell.getAttribute('role') === 'gridcell')) cell = cell.parentElement;
            const box = (cell || link).getBoundingClientRect();
            return {{word: [word.left, word.right], cell: [box.left, box.right], width: window.innerWidth}};
        }})()""")
    assert seen is not None and seen["width"] == 1280
    assert seen["cell"][0] <= seen["word"][0] and seen["word"][1] <= seen["cell"][1], seen
    colours = browser.evaluate(
        f"""(() => {{
            const out = {{}};
            for (const id of Object.keys({json.dumps(attempts)})) {{
                const row = document.querySelector(`.ag-pinned-left-cols-container [role="row"][row-id="${{id}}"]`);
                out[id] = [...row.querySelectorAll('*')].map(e => getComputedStyle(e).backgroundColor)
                    .filter(c => c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent');
            }}
            return out;
        }})()""")
    wanted = {"baseline": "rgb(31, 119, 180)", "candidate": "rgb(255, 127, 14)"}
    for run_id, name in attempts.items():
        assert wanted[name.split("-")[0]] in colours[run_id], (name, colours[run_id])

    # (b) the decision run's page renders the note (mlflow.note.content) as markdown
    browser.goto(f"{url}/#/experiments/{experiment_id}/runs/{decision_id}")
    rendered = browser.wait_for(
        f"""(() => {{
            const heading = [...document.querySelectorAll('h2')]
                .find(h => h.innerText.trim().startsWith('ACCEPT: the candidate'));  // not the run's name
            if (!heading) return null;
            const note = heading.parentElement;
            const group = [...note.querySelectorAll('code')].find(c => c.innerText.trim() === {json.dumps(GROUP)});
            return group ? {{heading: heading.innerText, note: note.innerText}} : null;
        }})()""",
        "the decision note rendered on the run page (an 'ACCEPT' heading and the group name)",
    )
    assert rendered["heading"].startswith("ACCEPT: the candidate is faster")
    assert f"group: {GROUP}" in rendered["note"]
    assert "declared_thresholds_checked" in rendered["note"]
    page = browser.evaluate("document.body.innerText")
    assert f"decision {GROUP}" in page  # the run page's title is the decision run's name


def test_no_code_block_of_the_docs_hides_its_text_at_a_laptops_width(tmp_path, browser):
    """A long command wraps rather than running on behind the copy button, or out of sight (the
    tutorial's install line hid its ``--env-manager local``): on the built site, at 1,280 px, no
    code block of the pages a newcomer reads first scrolls sideways."""
    import sys

    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)], capture_output=True,
                           text=True, timeout=600, cwd=Path(__file__).resolve().parent.parent)
    assert built.returncode == 0, built.stderr[-3000:]
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(site)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N ..."
        port = int(line.split(" port ")[1].split()[0])
        for page in ("tutorial/", "how-to/ci/", "how-to/workload/", "how-to/suites/"):
            browser.goto(f"http://127.0.0.1:{port}/{page}")
            blocks = browser.wait_for(
                """(() => {
                    const codes = [...document.querySelectorAll('.md-typeset pre > code')];
                    if (!codes.length) return null;
                    return codes.map(c => ({text: c.innerText.slice(0, 80), hidden: c.scrollWidth - c.clientWidth}));
                })()""", f"the code blocks of /{page}")
            hidden = [block for block in blocks if block["hidden"] > 1]
            assert not hidden, (page, hidden)
    finally:
        server.kill()
        server.wait()
