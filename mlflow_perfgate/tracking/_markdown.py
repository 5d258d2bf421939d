"""User strings inside the report's markdown: always inert.

A group name, a condition value, a failure reason or a warning that quotes one is the user's
text; the report is rendered in the MLflow UI and posted as a pull-request comment. Pasted raw,
a crafted reason could add a second ``## ACCEPT`` headline, an image or a ``javascript:`` link.
These functions make such text plain: one line, every character that can make a link, an image, HTML or a
code span escaped (CommonMark's backslash escapes), or an inline code span that nothing inside can close.
"""

from __future__ import annotations

import re

__all__ = ["code", "text"]

# CommonMark: any ASCII punctuation may be backslash-escaped. Escaped here: what can make a link,
# an image (``[``, ``]``), HTML or an entity (``<``, ``>``, ``&``), a code span, a table cell, or
# escape our escapes. Text is always one line, after a prefix of ours, so nothing of it can start
# a heading or a list; emphasis (``*``, ``_``) is left as it reads: it can change no meaning.
_SPECIAL = re.compile(r"([\\`\[\]<>&|])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def _one_line(value) -> str:
    return _LINE_BREAKS.sub(" ", "" if value is None else str(value))


def text(value) -> str:
    """``value`` as plain markdown text on one line: nothing in it is markup."""
    return _SPECIAL.sub(r"\\\1", _one_line(value))


def code(value) -> str:
    """``value`` as an inline code span on one line, fenced so that no backtick inside closes it."""
    body = _one_line(value)
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"
