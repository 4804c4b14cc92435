"""promptfoo's assertions, graded with promptfoo's meaning, in Python.

Each deterministic type does what promptfoo's ``src/assertions`` does with it: ``equals``
is ``==`` on the text (a mapping or list value: deep equality with the answer parsed as
JSON), the ``contains`` family is substring search (``i``: both sides lower-cased), a
``-any`` / ``-all`` value given as one text is split at its commas (double quotes keep a
comma in), ``regex`` searches anywhere, ``is-json`` parses the whole answer (with a value:
a JSON schema it must meet), ``contains-json`` finds a JSON object somewhere in it, and
``levenshtein`` passes within ``threshold`` edits (5 unless given). ``not-X`` passes where
``X`` fails. ``llm-rubric`` and ``similar`` need a model (a judge, the embedding model):
they are accepted and left ungraded here (None). Types that would run code are refused by
name, never run.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.json_strict import strict_json
from core.qa import json_schema

DETERMINISTIC = (
    "equals",
    "contains",
    "icontains",
    "contains-any",
    "icontains-any",
    "contains-all",
    "icontains-all",
    "starts-with",
    "regex",
    "is-json",
    "contains-json",
    "levenshtein",
)
MODEL_GRADED = ("llm-rubric", "similar")  # graded through a model, not in Python
# Types whose grading would run code (or call out): refused by name.
RUNS_CODE = ("javascript", "python", "webhook", "ruby", "function", "perplexity-script")
SUPPORTED = (*DETERMINISTIC, *(f"not-{t}" for t in DETERMINISTIC), *MODEL_GRADED)
LEVENSHTEIN_THRESHOLD = 5  # promptfoo's default


def type_problem(kind: str) -> str | None:
    """Why an assertion type cannot be graded here, or None."""
    base = kind.removeprefix("not-")
    if base in RUNS_CODE or kind.startswith("file://"):
        return f"assertion type {kind!r} runs code, which experiments never do; use a rule instead"
    if kind in SUPPORTED:
        return None
    return f"unknown assertion type {kind!r}; supported: {', '.join(SUPPORTED)}"


def value_problem(kind: str, value: Any) -> str | None:
    """Why an assertion's value cannot be used with its type, or None."""
    base = kind.removeprefix("not-")
    if base in ("contains-any", "icontains-any", "contains-all", "icontains-all"):
        if not as_list(value):
            return f"{kind} needs a value: a list of texts, or texts separated by commas"
    elif base == "regex":
        try:
            re.compile(str(value))
        except re.error as exc:
            return f"invalid regular expression: {exc}"
    elif base in ("is-json", "contains-json") and value is not None:
        if not isinstance(value, dict):
            return f"{kind}'s value is a JSON schema (a mapping)"
        try:
            json_schema.check_schema(value)
        except ValueError as exc:
            return f"{kind}'s schema: {exc}"
    elif (
        base in ("equals", "contains", "icontains", "starts-with", "levenshtein") and value is None
    ):
        return f"{kind} needs a value"
    return None


def _text(value: Any) -> str:
    """A value as JavaScript's ``String(value)`` writes it (true, not True)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


def as_list(value: Any) -> list[str]:
    """A ``-any`` / ``-all`` value as its texts: a list as given, one text split at commas
    outside double quotes, each trimmed and unquoted (promptfoo's reading)."""
    if isinstance(value, list):
        return [_text(v) for v in value]
    if value is None:
        return []
    parts = re.findall(r'"[^"]*"|[^,]+', _text(value))
    return [p.strip().strip('"') for p in parts if p.strip()]


def levenshtein(a: str, b: str) -> int:
    """Edits (insert, delete, substitute one character) that turn ``a`` into ``b``."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def json_objects(text: str) -> list[Any]:
    """The JSON objects found in a text, left to right (each ``{`` tried as a start)."""
    decoder = json.JSONDecoder()
    found, i = [], text.find("{")
    while i >= 0:
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("{", i + 1)
            continue
        found.append(value)
        i = text.find("{", end)
    return found


def _holds(base: str, output: str, value: Any, threshold: float | None) -> bool:
    if base == "equals":
        if isinstance(value, dict | list):
            try:
                return json.loads(output) == value
            except ValueError:
                return False
        return _text(value) == output
    if base in ("contains", "icontains"):
        lower = base.startswith("i")
        needle = _text(value)
        return (needle.lower() in output.lower()) if lower else needle in output
    if base in ("contains-any", "icontains-any", "contains-all", "icontains-all"):
        lower = base.startswith("i")
        haystack = output.lower() if lower else output
        found = [(v.lower() if lower else v) in haystack for v in as_list(value)]
        return any(found) if base.endswith("any") else all(found)
    if base == "starts-with":
        return output.startswith(_text(value))
    if base == "regex":
        return re.search(_text(value), output) is not None
    if base == "is-json":
        try:
            parsed = strict_json(output)
        except ValueError:
            return False
        return value is None or json_schema.is_valid(value, parsed)
    if base == "contains-json":
        objects = json_objects(output)
        if value is None:
            return bool(objects)
        return any(json_schema.is_valid(value, o) for o in objects)
    if base == "levenshtein":
        limit = LEVENSHTEIN_THRESHOLD if threshold is None else threshold
        return levenshtein(output, _text(value)) <= limit
    raise ValueError(f"no grading for {base!r}")


def grade(kind: str, output: str, value: Any = None, threshold: float | None = None) -> bool | None:
    """Whether the answer ``output`` meets the assertion; None where a model grades it."""
    base = kind.removeprefix("not-")
    if base in MODEL_GRADED:
        return None
    held = _holds(base, output, value, threshold)
    return not held if kind.startswith("not-") else held
