"""MkDocs hooks: the pages that are generated from the code and the data, not written by hand.

- ``<!-- perfgate:schema -->`` (reference/schema.md): every key of
  ``mlflow_perfgate/tracking/_schema.py`` (``TAG``, ``METRIC``, ``PARAM`` and the module's
  constants) with its value and the ``#:`` comment or docstring beside it in the code; the hand-kept
  table of which record carries which key is checked against it (a ``perfgate.`` key the schema does
  not define is a warning, so ``mkdocs build --strict`` fails).
- ``<!-- perfgate:api MODULE -->`` (reference/python.md): a mkdocstrings directive for each public
  name of ``MODULE`` (its ``__all__``; a lazily exporting package's names point at the module that
  defines them, which mkdocstrings can read without importing).
- ``<!-- perfgate:spread -->`` and ``<!-- perfgate:ratios-plot -->`` (explanation/evidence.md): the
  within-round spread of identical arms and a plot of every round's p10 ratio, computed from the
  broadened lab's committed rounds (``benchmarks/results/lab_neighbours-threads1.json.gz``).
- mkdocs-click renders a command's options with ``click.Command.format_options``, which skips the
  sections ``SectionedCommand`` groups them in; :func:`on_config` makes it call the command's own.
"""

from __future__ import annotations

import ast
import gzip
import importlib
import io
import json
import logging
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "mlflow_perfgate" / "tracking" / "_schema.py"
LAB_ROUNDS = ROOT / "benchmarks" / "results" / "lab_neighbours-threads1.json.gz"
RATIOS_PLOT = "explanation/lab-ratios.svg"

log = logging.getLogger("mkdocs.hooks.perfgate")


# --- mkdocs-click: keep SectionedCommand's sections ---------------------------------------------

def _sectioned_plain_options(ctx, show_hidden: bool = False):
    """mkdocs-click's plain options, written by the command's own ``format_options``: one block per section."""
    from mkdocs_click import _docs

    with _docs.ExitStack() as stack:
        if show_hidden:
            stack.enter_context(_docs._show_options(ctx))
        formatter = ctx.make_formatter()
        ctx.command.format_options(ctx, formatter)
    sections: list[tuple[str, list[str]]] = []
    for line in formatter.getvalue().splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            sections.append((line[:-1], []))
        elif sections:
            sections[-1][1].append(line)
    for title, lines in sections:
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            continue
        yield f"**{title}:**"
        yield ""
        yield "```text"
        yield from lines
        yield "```"
        yield ""


def on_config(config):
    from mkdocs_click import _docs

    if not all(hasattr(_docs, name) for name in ("_make_plain_options", "_show_options", "ExitStack")):
        log.warning("mkdocs-click changed: the CLI page would lose its option sections (docs/hooks.py)")
        return config
    _docs._make_plain_options = _sectioned_plain_options
    return config


# --- the MLflow schema ------------------------------------------------------------------------

def _markdown(text: str) -> str:
    """A ``#:`` comment or docstring of the code as markdown (reST roles and double backticks made plain)."""
    text = re.sub(r":(?:func|meth|class|data|attr|mod):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return " ".join(text.split())


def _comment_above(lines: list[str], lineno: int) -> str:
    """The ``#:`` (or, at module level, ``#``) comment lines right above line ``lineno`` (1-based)."""
    found = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        found.append(lines[index].strip().lstrip("#").lstrip(":").strip())
        index -= 1
    return " ".join(reversed(found))


def _cell(text: str) -> str:
    return text.replace("|", "&#124;") if "`" not in text else re.sub(
        r"`([^`]*)`", lambda m: "<code>" + m.group(1).replace("|", "&#124;").replace("<", "&lt;") + "</code>",
        text).replace("|", "&#124;")


def _schema_entries() -> dict[str, list[tuple[str, str, str]]]:
    """``{section: [(python name, value, doc), ...]}`` read from ``_schema.py`` (its source and its values)."""
    from mlflow_perfgate.tracking import _schema

    source = SCHEMA.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    sections: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("TAG", "METRIC", "PARAM"):
            owner = getattr(_schema, node.name)
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    name = item.targets[0].id
                    sections[node.name].append((f"{node.name}.{name}", str(getattr(owner, name)),
                                                _markdown(_comment_above(lines, item.lineno))))
                elif isinstance(item, ast.FunctionDef):
                    function = getattr(owner, item.name)
                    arguments = [a.arg for a in item.args.args]
                    value = function(*(f"<{a}>" for a in arguments))
                    sections[node.name].append((f"{node.name}.{item.name}({', '.join(arguments)})", value,
                                                _markdown(ast.get_docstring(item) or "")))
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name.startswith("_") or name == "__all__":
                continue
            value = getattr(_schema, name)
            shown = ", ".join(f"{k}: {v}" for k, v in value.items()) if isinstance(value, dict) else (
                ", ".join(map(str, value)) if isinstance(value, tuple) else repr(value) if isinstance(value, str)
                else str(value))
            section = ("kinds" if name.startswith("KIND_") else "formats" if name.endswith("_FORMAT")
                       else "limits" if name.startswith("MAX_") else "constants")
            sections[section].append((name, shown, _markdown(_comment_above(lines, node.lineno))))
    return sections


_SCHEMA_TITLES = {
    "kinds": ("Run kinds", "The values of the tag `perfgate.kind`."),
    "TAG": ("Tags (`TAG`)", "Tag keys of every run kind; the environment fingerprint is `perfgate.env.<key>`."),
    "METRIC": ("Metrics (`METRIC`)", "Metric keys of an attempt run and of a calibration run. A decision run's "
               "figures are named by the method and objective registries (`arm_metric`: `baseline_median_ms`)."),
    "PARAM": ("Params (`PARAM`)", "Param keys of a decision run, in their own `perfgate.` namespace."),
    "formats": ("Format versions", "Every JSON file and journal line carries its format version."),
    "limits": ("MLflow's limits", "Values beyond them are refused, never truncated by MLflow."),
    "constants": ("Other constants", ""),
}


def _records_naming(value: str, rows: list[tuple[str, str]]) -> str:
    """The records of the hand-kept table whose row names ``value`` (a key, or a pattern's fixed head)."""
    head = value.split("<", 1)[0]
    if len(head) < 4:
        return ""
    found = [record for record, row in rows if re.search("`" + re.escape(head) + (r"[`=\s|*]" if head == value
                                                                                  else ""), row)]
    return ", ".join(found)


def schema_markdown(record_rows: list[tuple[str, str]]) -> str:
    entries = _schema_entries()
    out = []
    for section, (title, intro) in _SCHEMA_TITLES.items():
        if not entries.get(section):
            continue
        columns = section in ("TAG", "METRIC", "PARAM")
        out += [f"### {title}", "", intro, "",
                "| name in `_schema` | MLflow key or value | " + ("on | " if columns else "") + "what the code says |",
                "|---|---|" + ("---|" if columns else "") + "---|"]
        for name, value, doc in entries[section]:
            on = f" {_records_naming(value, record_rows)} |" if columns else ""
            out.append(f"| `{name}` | {_cell('`' + value + '`')} |{on} {_cell(doc)} |")
        out.append("")
    return "\n".join(out)


def _record_rows(markdown: str) -> list[tuple[str, str]]:
    table = markdown.split("<!-- perfgate:schema -->", 1)[0]
    return [(line.split("|")[1].strip(), line) for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| record ")]


def _known_keys() -> tuple[set[str], list[str]]:
    """The ``perfgate.`` keys the schema defines, and the patterns of those it builds (``perfgate.<x>_decision``)."""
    entries = _schema_entries()
    keys = {value for section in ("TAG", "PARAM") for _, value, _ in entries[section]}
    patterns = [re.escape(value).replace(re.escape("<method>"), r"[a-z_]+") for value in keys if "<" in value]
    prefixes = [re.escape(value) + r"[<>a-z_*]+" for value in keys if value.endswith(".")]  # perfgate.rounded.<m>
    return keys, patterns + prefixes + [re.escape("perfgate.env.") + r"[a-z_*]+"]


def _param_spans(row: str) -> list[tuple[int, int]]:
    """Where a row lists params: from the word ``params`` to the next ``metrics`` or ``artifacts``."""
    spans = []
    for match in re.finditer(r"\bparams\b", row):
        ends = [m.start() for m in re.finditer(r"\b(metrics|artifacts)\b", row) if m.start() > match.end()]
        spans.append((match.end(), ends[0] if ends else len(row)))
    return spans


def check_schema_keys(markdown: str, page: str) -> None:
    """Warn (a strict build fails) on a ``perfgate.`` tag the hand-kept record table names that
    ``_schema.py`` does not define. A decision, calibration, suite or history run's params are
    ``PARAM.of(<setting>)``, named by the settings: any ``perfgate.<name>`` passes there."""
    keys, patterns = _known_keys()
    record_table = markdown.split("<!-- perfgate:schema -->", 1)[0]
    for row in (line for line in record_table.splitlines() if line.startswith("| ")):
        record = row.split("|")[1].strip()
        spans = _param_spans(row)
        for match in re.finditer(r"`(perfgate\.[a-z_.*<>]+)", row):
            key = match.group(1).rstrip(".")
            if key in keys or any(re.fullmatch(p, key) for p in patterns):
                continue
            if any(a <= match.start() < b for a, b in spans) and re.fullmatch(r"perfgate\.(<\w+>|\w+)", key):
                continue
            log.warning("%s: the record table (%s) names %s, which tracking/_schema.py does not define",
                        page, record, key)


# --- the Python API ---------------------------------------------------------------------------

def api_markdown(module_name: str) -> str:
    """A mkdocstrings directive per public name of ``module_name``, pointing at the module that defines it."""
    module = importlib.import_module(module_name)
    exports = getattr(module, "_EXPORTS", None) or {**getattr(module, "_SPEC_AND_RULES", {}),
                                                    **getattr(module, "_RECORDS", {})} or None
    names = list(module.__all__)
    out = []
    for name in names:
        target = f"{module_name}.{name}"
        if exports is not None and name not in exports:
            continue  # computed on access (tracking.DECISION_COLUMNS): nothing to read statically
        if exports is not None:
            home = exports[name]
            home = home if not home.startswith((".", "_")) else f"{module_name}.{home.lstrip('.')}"
            if importlib.util.find_spec(home) is None:  # an absolute package name (mlflow_perfgate.rules)
                continue
            candidate = importlib.import_module(home)
            if getattr(candidate, "__name__", "").rsplit(".", 1)[-1] == name:
                continue  # a submodule (errors, rules): documented on its own
            value = getattr(candidate, name)
            defining = getattr(value, "__module__", None) if callable(value) else None
            target = f"{defining or home}.{getattr(value, '__qualname__', name) if defining else name}"
        else:
            value = getattr(module, name)
            if getattr(value, "__name__", None) == f"{module_name}.{name}":
                continue
            defining = getattr(value, "__module__", None) if callable(value) else None
            if defining and defining.startswith("mlflow_perfgate") and hasattr(value, "__qualname__"):
                target = f"{defining}.{value.__qualname__}"
        out += [f"::: {target}", ""]
    return "\n".join(out)


# --- the evidence -----------------------------------------------------------------------------

FIGURES = (("latency_ms", "typical step"), ("step_p10_ms", "p10 step"), ("step_mean_ms", "mean step"),
           ("step_p95_ms", "step P95"))


def _lab_rounds() -> tuple[dict, list[str]]:
    """``{(kind, effect): {pair: {arm: row}}}`` of the lab's rounds, and the kinds in the order run."""
    data = json.loads(gzip.decompress(LAB_ROUNDS.read_bytes()))
    cells: dict = defaultdict(lambda: defaultdict(dict))
    kinds: list[str] = []
    for row in data["rows"]:
        cells[(row["kind"], row["effect"])][row["pair"]][row["arm"]] = row
        if row["kind"] not in kinds:
            kinds.append(row["kind"])
    return cells, kinds


def _log_ratios(rounds: dict, key: str) -> list[float]:
    return [math.log(arms["candidate"][key] / arms["baseline"][key]) for _, arms in sorted(rounds.items())
            if len(arms) == 2 and arms["candidate"]["ok"] and arms["baseline"]["ok"]]


def spread_markdown() -> str:
    cells, kinds = _lab_rounds()
    out = ["| neighbour | rounds | " + " | ".join(label for _, label in FIGURES) + " |",
           "|---|---:|" + "---:|" * len(FIGURES)]
    for kind in kinds:
        ratios = [_log_ratios(cells[(kind, 0.0)], key) for key, _ in FIGURES]
        out.append(f"| {kind} | {len(ratios[0])} | " + " | ".join(f"{statistics.stdev(r):.3f}" for r in ratios) + " |")
    return "\n".join(out)


def ratios_svg() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.ticker
    from matplotlib import pyplot as plt

    cells, kinds = _lab_rounds()
    effects = sorted({effect for _, effect in cells})
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(effects)
    for j, effect in enumerate(effects):
        xs, ys = [], []
        for i, kind in enumerate(kinds):
            ratios = [math.exp(v) for v in _log_ratios(cells[(kind, effect)], "step_p10_ms")]
            xs += [i - 0.4 + width * (j + 0.5) + width * 0.3 * ((k % 5) / 4 - 0.5) for k in range(len(ratios))]
            ys += ratios
        ax.scatter(xs, ys, s=9, alpha=0.75, label=f"true effect {effect:+.0%}")
    for effect in effects:
        ax.axhline(1 + effect, color="grey", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ticks = [0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25]
    ax.set_yticks(ticks, [f"{t:.2f}" for t in ticks])
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_xlabel("neighbour kind (started and ended by the lab)")
    ax.set_ylabel("p10 step, candidate / baseline")
    ax.set_title("Each step-interleaved round's ratio, one torch thread, 30 measured steps")
    ax.legend(fontsize=8, ncol=len(effects), loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue().encode("utf-8")


def results_table(path: str, heading: str, page: str) -> str:
    """The first table under the heading of a committed results report that starts with ``heading``."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("#") and
                  line.lstrip("#").strip().startswith(heading)), None)
    if start is None:
        log.warning("%s: %s has no heading %r", page, path, heading)
        return ""
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table or line.startswith("#"):
            break
    if not table:
        log.warning("%s: %s has no table under %r", page, path, heading)
    return "\n".join(table)


# --- the hooks --------------------------------------------------------------------------------

def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, RATIOS_PLOT, content=ratios_svg()))
    return files


def on_page_markdown(markdown, page, config, files):
    if "<!-- perfgate:schema -->" in markdown:
        check_schema_keys(markdown, page.file.src_uri)
        markdown = markdown.replace("<!-- perfgate:schema -->", schema_markdown(_record_rows(markdown)))
    markdown = re.sub(r"<!-- perfgate:api ([\w.]+) -->", lambda m: api_markdown(m.group(1)), markdown)
    markdown = markdown.replace("<!-- perfgate:spread -->", spread_markdown())
    markdown = re.sub(r'<!-- perfgate:results (\S+) "([^"]+)" -->',
                      lambda m: results_table(m.group(1), m.group(2), page.file.src_uri), markdown)
    return markdown
