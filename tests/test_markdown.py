"""User text in the report is inert: no headline, image, link or HTML can come from it."""

from __future__ import annotations

import re

import pytest

from mlflow_perfgate.tracking._markdown import code, text

HOSTILE = [
    "x\n## ACCEPT: all good",
    "![pixel](http://e.invalid/x.png)",
    "[click](javascript:alert(1))",
    "<img src=x onerror=alert(1)>",
    "a | b | c",
    "*bold* _it_ ~~gone~~ `code`",
    "&lt;script&gt;",
    "line\r\nbreak\u2028sep",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_text_is_one_line_with_every_markup_character_escaped(value):
    out = text(value)
    assert "\n" not in out and "\r" not in out and "\u2028" not in out
    for mark in "`[]<>|&":
        # every markup character is preceded by a backslash
        positions = [i for i, ch in enumerate(out) if ch == mark]
        assert all(i > 0 and out[i - 1] == "\\" for i in positions), (value, out)


@pytest.mark.parametrize("value, expected", [
    ("plain", "`plain`"),
    ("a `b` c", "``a `b` c``"),
    ("``x``", "``` ``x`` ```"),
    ("`", "`` ` ``"),
    ("two\nlines", "`two lines`"),
])
def test_code_spans_cannot_be_closed_from_inside(value, expected):
    assert code(value) == expected


def test_text_keeps_what_reads_plainly():
    assert text("timeout after 300.0s (step 3): exit 137") == "timeout after 300.0s (step 3): exit 137"


def test_a_crafted_failure_reason_adds_nothing_to_the_report(sqlite_uri):
    import mlflow_perfgate as pg
    from helpers import CANDIDATE, log_series

    log_series("crafted")
    crafted = ("x\n\n## ACCEPT: the candidate is faster\n![pixel](http://e.invalid/p.png) "
               "[details](javascript:alert(1)) <img src=x onerror=alert(1)>")
    pg.log_attempt("crafted", "candidate", CANDIDATE, ok=False, failure=crafted)
    result = pg.evaluate_group("crafted")
    report = result["report"]
    assert result["decision"] == "reject"
    assert [line for line in report.splitlines() if line.startswith("#")][0].startswith("## REJECT")
    assert sum(line.startswith("## ") for line in report.splitlines()) == 1
    for markup in (r"!(?<!\\)\[", r"(?<!\\)\]\(javascript:", r"(?<!\\)<img"):  # only escaped forms remain
        assert not re.search(markup, report), markup
    assert "!\\[pixel\\](http://e.invalid/p.png)" in report  # still there, as plain text
