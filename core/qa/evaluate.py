"""Each rule twice: as a DuckDB expression (how results are graded) and in Python (the
reference the tests hold the SQL to, and the path for what SQL cannot do).

An outcome is True (passed), False (failed) or None (not graded: a failed request, or a
metadata field the request does not have). The SQL reads a row of ``results r`` whose
answer, never NULL, is ``r.a``; the caller grades successful requests only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from core.qa import json_schema, text
from core.qa.refusal import PATTERN as REFUSAL
from core.qa.rules import (
    Contains,
    EqualsMetadata,
    FinishReason,
    JsonSchema,
    JsonValid,
    Length,
    NotContains,
    Refusal,
    Regex,
)

# JSON types whose ->> text is the value itself (objects and arrays are not compared)
SCALARS = "('VARCHAR', 'BIGINT', 'UBIGINT', 'DOUBLE', 'BOOLEAN')"


def _lit(value: str) -> str:
    """A SQL string literal (for constants the planner should fold: patterns, not data)."""
    return "'" + value.replace("'", "''") + "'"


def _metadata_path(key: str) -> str:
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _contains_sql(rule: Contains, params: list[Any]) -> str:
    haystack = "r.a" if rule.case_sensitive else "lower(r.a)"
    parts = []
    for value in rule.values:
        needle = value if rule.case_sensitive else text.simple_lower(value)
        if rule.whole_words:
            pattern = text.SQL_EDGE_BEFORE + text.escape(needle) + text.SQL_EDGE_AFTER
            parts.append(f"regexp_matches({haystack}, ?)")
            params.append(pattern)
        else:
            parts.append(f"contains({haystack}, ?)")
            params.append(needle)
    return "(" + (" OR " if rule.match == "any" else " AND ").join(parts) + ")"


def _words_sql() -> str:
    # Plain splits are ~10x faster than a regular expression, so the common cases take
    # them: an ASCII answer (its whitespace then is space, tab, line feed, carriage return,
    # and \v \f, looked for) with single spaces between words is split on spaces; with
    # other whitespace too, that becomes spaces first and empty pieces are dropped. Any
    # other answer (non-ASCII: no-break or em spaces may hide in it) counts its runs of
    # non-space characters by the expression both engines share.
    plain = "r.a"
    for c in text.COMMON_SPACES[1:]:
        plain = f"replace({plain}, chr({ord(c)}), ' ')"
    messy = " OR ".join(
        [f"contains(r.a, chr({ord(c)}))" for c in text.COMMON_SPACES[1:]]
        + ["contains(r.a, '  ')", "starts_with(r.a, ' ')", "ends_with(r.a, ' ')"]
    )
    return f"""CASE
        WHEN r.a = '' THEN 0
        WHEN strlen(r.a) = length(r.a) AND NOT (contains(r.a, chr(11)) OR contains(r.a, chr(12)))
        THEN CASE WHEN {messy}
                  THEN len(list_filter(string_split({plain}, ' '), w -> w <> ''))
                  ELSE len(string_split(r.a, ' ')) END
        ELSE len(regexp_extract_all(r.a, {_lit(text.WORD_RUN)})) END"""


def sql_expression(rule: Any, params: list[Any]) -> str:
    """The rule as a boolean SQL expression over ``r``; its parameters are appended."""
    if isinstance(rule, NotContains):
        return f"(NOT {_contains_sql(rule, params)})"
    if isinstance(rule, Contains):
        return _contains_sql(rule, params)
    if isinstance(rule, Regex):
        function = "regexp_full_match" if rule.full else "regexp_matches"
        options = "" if rule.case_sensitive else ", 'i'"
        return f"{function}(r.a, {_lit(rule.pattern)}{options})"
    if isinstance(rule, EqualsMetadata):
        path = _metadata_path(rule.field)
        spaces = "||".join(f"chr({ord(c)})" for c in text.SPACES)
        answer, expected = f"trim(r.a, {spaces})", f"(r.metadata ->> {_lit(path)})"
        if not rule.case_sensitive:
            answer, expected = f"lower({answer})", f"lower({expected})"
        return (
            f"CASE WHEN json_type(r.metadata, {_lit(path)}) IN {SCALARS} "
            f"THEN {answer} = {expected} END"
        )
    if isinstance(rule, JsonValid | JsonSchema):
        # json_valid decides every row but those python_rows hands to Python (see there)
        return "json_valid(r.a)" if isinstance(rule, JsonValid) else "false"
    if isinstance(rule, Length):
        measure = {
            "words": _words_sql(),
            "chars": "length(r.a)",
            "tokens": "r.completion_tokens",
        }[rule.unit]
        bounds = []
        if rule.min is not None:
            bounds.append(f"{measure} >= {int(rule.min)}")
        if rule.max is not None:
            bounds.append(f"{measure} <= {int(rule.max)}")
        return "(" + " AND ".join(bounds) + ")"
    if isinstance(rule, FinishReason):
        params.append(list(rule.values))
        return "coalesce(list_contains(?, r.finish_reason), false)"
    if isinstance(rule, Refusal):
        return f"(NOT regexp_matches(r.a, {_lit(REFUSAL)}, 'i'))"
    raise TypeError(f"no SQL for {type(rule).__name__}")


def python_rows(rule: Any) -> str | None:
    """For a rule SQL cannot decide alone, the SQL condition on ``r`` that picks the rows
    :func:`python_outcome` grades instead (None: SQL decides every row)."""
    if isinstance(rule, JsonSchema):  # the schema is checked in Python; other rows fail
        return "(json_valid(r.a) OR r.tool_calls IS NOT NULL)"
    if isinstance(rule, JsonValid):
        return f"json_valid(r.a) AND regexp_matches(r.a, {_lit(text.LENIENT_JSON_HINT)})"
    return None


@dataclass
class Item:
    """One result as the Python path reads it."""

    answer: str | None
    status: str = "succeeded"
    finish_reason: str | None = "stop"
    completion_tokens: int | None = None
    metadata: dict[str, Any] | None = None
    arguments: list[str] | None = None  # each tool call's arguments, where the model called


def _contains(rule: Contains, answer: str) -> bool:
    haystack = answer if rule.case_sensitive else text.simple_lower(answer)
    found = []
    for value in rule.values:
        needle = value if rule.case_sensitive else text.simple_lower(value)
        if rule.whole_words:
            pattern = text.PY_EDGE_BEFORE + text.escape(needle) + text.PY_EDGE_AFTER
            found.append(re.search(pattern, haystack) is not None)
        else:
            found.append(needle in haystack)
    return any(found) if rule.match == "any" else all(found)


def python_outcome(rule: Any, item: Item) -> bool | None:
    """The rule's outcome for one result, computed in Python."""
    if item.status != "succeeded":
        return None
    answer = item.answer or ""
    if isinstance(rule, NotContains):
        return not _contains(rule, answer)
    if isinstance(rule, Contains):
        return _contains(rule, answer)
    if isinstance(rule, Regex):
        flags = 0 if rule.case_sensitive else re.IGNORECASE
        match = re.fullmatch if rule.full else re.search
        return match(text.python_pattern(rule.pattern), answer, flags) is not None
    if isinstance(rule, EqualsMetadata):
        value = (item.metadata or {}).get(rule.field)
        if value is None or isinstance(value, dict | list):
            return None
        expected = value if isinstance(value, str) else json.dumps(value)
        got = text.strip_spaces(answer)
        if not rule.case_sensitive:
            got, expected = text.simple_lower(got), text.simple_lower(expected)
        return got == expected
    if isinstance(rule, JsonValid):
        return text.is_json(answer)
    if isinstance(rule, JsonSchema):  # a tool-call answer: every call's arguments
        try:
            values = [text.strict_json(a) for a in item.arguments or [answer]]
        except ValueError:
            return False
        return all(json_schema.is_valid(rule.json_schema, v) for v in values)  # RE2 patterns
    if isinstance(rule, Length):
        if rule.unit == "tokens":
            size = item.completion_tokens
            if size is None:
                return None
        else:
            size = text.word_count(answer) if rule.unit == "words" else len(answer)
        return (rule.min is None or size >= rule.min) and (rule.max is None or size <= rule.max)
    if isinstance(rule, FinishReason):
        return item.finish_reason in rule.values
    if isinstance(rule, Refusal):
        return re.search(REFUSAL, answer, re.IGNORECASE) is None
    raise TypeError(f"no Python path for {type(rule).__name__}")
