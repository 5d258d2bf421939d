"""A griffe extension for the docs build: ``a, b: what they are`` in an ``Args:`` or ``Attributes:`` section.

The code's Google-style docstrings describe parameters that go together on one line
(``alpha, confidence: the statistical methods' levels``). Griffe reads one name per entry and
warns, which fails ``mkdocs build --strict``; this extension gives each name its own entry with
the shared description before griffe parses the docstring. The code is not changed.
"""

from __future__ import annotations

import re

import griffe

_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Keyword Args|Other Parameters|Attributes):\s*$")
_COMBINED = re.compile(r"^(\s+)(\**\w+(?:,\s*\**\w+)+):(.*)$")


def split_combined(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    index, in_args, section_indent = 0, False, 0
    while index < len(lines):
        line = lines[index]
        header = _SECTION.match(line)
        if header:
            in_args, section_indent = True, len(header.group(1))
            out.append(line)
            index += 1
            continue
        if in_args and line.strip() and len(line) - len(line.lstrip()) <= section_indent:
            in_args = False
        match = _COMBINED.match(line) if in_args else None
        if not match:
            out.append(line)
            index += 1
            continue
        indent, names, first = match.groups()
        body = [first]
        index += 1
        while index < len(lines) and (not lines[index].strip() or
                                      len(lines[index]) - len(lines[index].lstrip()) > len(indent)):
            if not lines[index].strip() and (index + 1 >= len(lines) or
                                             len(lines[index + 1]) - len(lines[index + 1].lstrip()) <= len(indent)):
                break
            body.append(lines[index])
            index += 1
        for name in (n.strip() for n in names.split(",")):
            out.append(f"{indent}{name}:{body[0]}")
            out.extend(body[1:])
    return "\n".join(out)


class CombinedParams(griffe.Extension):
    def _fix(self, obj) -> None:
        if obj.docstring is not None and "," in obj.docstring.value:
            obj.docstring.value = split_combined(obj.docstring.value)

    def on_function_instance(self, *, func, **kwargs) -> None:
        self._fix(func)

    def on_class_instance(self, *, cls, **kwargs) -> None:
        self._fix(cls)
