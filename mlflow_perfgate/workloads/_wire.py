"""What supervised attempts pass between processes: versioned JSON, written whole or not at all.

Three things travel: the attempt's spec (caller -> spawned child, a file), its result (child ->
caller, a file) and the attempt server's messages (one JSON object a line over its pipes). Each
carries ``format``; a reader refuses any other version rather than guess what a field means.

Format history:

* 1: the first versioned format (the warm attempt server). Before it, spec and result files
  were bare dicts.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["FORMAT", "FormatError", "check_format", "decode_line", "encode_line", "read_json", "write_json_atomic"]

FORMAT = 1


class FormatError(ValueError):
    """A stored or sent object is not JSON of this module's format version."""


def check_format(data: Any, what: str) -> dict:
    """Return ``data`` when it is a dict of format :data:`FORMAT`.

    Raises:
        FormatError: not a dict, or another (or no) format version.
    """
    if not isinstance(data, dict):
        raise FormatError(f"{what} must be a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise FormatError(f"{what} has format {data.get('format')!r}; this reader knows format {FORMAT}")
    return data


def write_json_atomic(path: str | os.PathLike, payload: dict) -> None:
    """Write ``payload`` with the current format to ``path``: a temporary name, then a rename.

    A reader sees the whole file or none: a process killed mid-write leaves only the temporary.
    """
    partial = f"{os.fspath(path)}.partial"
    with open(partial, "w") as handle:
        json.dump({"format": FORMAT, **payload}, handle)
    os.replace(partial, path)


def read_json(path: str | os.PathLike, what: str) -> dict:
    """Read a file written by :func:`write_json_atomic`.

    Raises:
        FormatError: the file is not JSON, or not of this format.
        OSError: the file cannot be read.
    """
    with open(path) as handle:
        text = handle.read()
    try:
        data = json.loads(text)
    except ValueError as error:
        raise FormatError(f"{what} is not JSON ({error})") from error
    return check_format(data, what)


def encode_line(message: dict) -> bytes:
    """One message of the attempt server's protocol, as a line."""
    return (json.dumps({"format": FORMAT, **message}) + "\n").encode()


def decode_line(line: bytes, what: str) -> dict:
    """Parse a line made by :func:`encode_line`.

    Raises:
        FormatError: not JSON, or not of this format.
    """
    try:
        data = json.loads(line)
    except ValueError as error:
        raise FormatError(f"{what} is not JSON ({error}): {line[:200]!r}") from error
    return check_format(data, what)
