"""Strict JSON (RFC 8259), the one definition every reader of model answers uses: the
``json`` and ``json_schema`` rules and judges' verdicts.

DuckDB's ``json_valid`` also takes ``NaN``, ``Infinity`` and trailing commas, and
Python's ``json`` takes ``NaN``; both take a key named twice (DuckDB reads the first,
Python the last).
"""

from __future__ import annotations

import json
import re
from typing import Any

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIRS = str.maketrans("[]{}", "()()")


def nests_deeper(text: str, depth: int) -> bool:
    """Whether a JSON text's arrays and objects nest deeper than ``depth`` (brackets in
    strings do not count), found without parsing it, so without recursion: each pass
    takes away the innermost pairs, one level, in linear time."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text)).translate(_PAIRS)
    if "(" * (depth + 1) in brackets:
        return True  # what a body nested to crash a parser looks like: said at once
    for _ in range(depth):
        inner = brackets.replace("()", "")
        if inner == brackets:
            break  # none paired: an unpaired bracket, for the parser to report
        brackets = inner
    return "()" in brackets or brackets.count("(") > depth


def strict_json(text: str, unique_keys: bool = False, max_depth: int | None = None) -> Any:
    """The JSON value of a text, or raises ValueError: RFC 8259 only (no NaN or Infinity,
    no unpaired surrogate escapes; Python's json already refuses trailing commas); with
    ``unique_keys``, an object naming a key twice too (RFC 8259 only says they SHOULD be
    unique; parsers then disagree on which one counts); with ``max_depth``, a text nested
    deeper than that too (before it is parsed: Python's parser recurses)."""
    if max_depth is not None and nests_deeper(text, max_depth):
        raise ValueError(f"it nests more than {max_depth} arrays or objects deep")

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) < len(pairs):
            raise ValueError("a key is named twice")
        return value

    hook = unique if unique_keys else None
    try:
        value = json.loads(text, parse_constant=refuse, object_pairs_hook=hook)
    except RecursionError:  # an answer nested past Python's stack: no reader here takes it
        raise ValueError("it nests too deep to read") from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("an unpaired surrogate is not JSON text") from None
    return value


def is_json(text: str, unique_keys: bool = False) -> bool:
    try:
        strict_json(text, unique_keys)
    except ValueError:
        return False
    return True


# DuckDB's json_valid also takes NaN, Infinity, inf and nan (any case, signed) as values,
# and trailing commas. A text it takes that strict JSON does not has one of these where a
# value or a closing bracket starts (or inside a string): such rows are decided in Python,
# every other row by json_valid alone.
LENIENT_JSON_HINT = r"(?i)(?:^|[\[:,])[ \t\n\r]*[-+]?(?:nan|inf)|,[ \t\n\r]*[\]}]"

# The same, exactly: outside strings (a prefix of whole strings and other characters), in a
# text DuckDB's JSON reads. RE2, so linear; for SQL where no Python decides.
_OUTSIDE_STRINGS = r'^(?:[^"]|"(?:[^"\\]|\\.)*")*?'
LENIENT_JSON = _OUTSIDE_STRINGS + r"(?:[\[:,][ \t\n\r]*[-+]?(?i:nan|inf)|,[ \t\n\r]*[\]}])"
