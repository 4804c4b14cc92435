"""JSON schemas of ``json_schema`` rules, checked with RE2 regular expressions.

The jsonschema library runs ``pattern`` and ``patternProperties`` (and the
``additionalProperties`` that depend on them) with Python's backtracking ``re``: a rule
``pattern: "^(a+)+$"`` over an answer of 40,000 ``a`` and a ``b`` runs for hours, in the
app's process. Here those keywords run on RE2 (google-re2), the engine DuckDB grades
``regex`` rules with: linear time in the text, and the same dialect (no look-around or
back-references) as a regex rule. ``unevaluatedProperties`` beside ``patternProperties``
would still reach Python's ``re`` inside the library, so that pair is refused.

A ``$ref`` is followed by the library as it validates: one that leads back to the schema
holding it (``{"$ref": "#"}``) recurses until Python's stack runs out, and one it cannot
resolve (another document, an anchor) fails the grading. So a ``$ref`` is taken only as a
JSON pointer into the same schema (``#/$defs/NAME``) that names a part of it and never
leads back to itself, which is checked when the rules are loaded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import jsonschema
import re2
from jsonschema.exceptions import ValidationError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the rule's error, not a line on stderr


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, options=_OPTIONS)


def _matches(pattern: str, text: str) -> bool:
    return _compiled(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: dict) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: dict) -> Iterator:
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key for key in instance if key not in named and not any(_matches(p, key) for p in patterns)
    ]
    if validator.is_type(allowed, "object"):
        for key in extras:
            yield from validator.descend(instance[key], allowed, path=key)
    elif not allowed and extras:
        yield ValidationError(f"additional properties are not allowed: {extras!r}")


_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _patterns(node: Any) -> Iterator[str]:
    """Every regular expression a schema holds (``pattern`` values, ``patternProperties`` keys)."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            yield from node["patternProperties"]
        for value in node.values():
            yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)


def _has_both(node: Any, found: set[str]) -> bool:
    """Whether the schema uses both ``unevaluatedProperties`` and ``patternProperties``."""
    if isinstance(node, dict):
        found.update(k for k in ("unevaluatedProperties", "patternProperties") if k in node)
        return len(found) == 2 or any(_has_both(v, found) for v in node.values())
    if isinstance(node, list):
        return any(_has_both(v, found) for v in node)
    return False


Path = tuple[str, ...]  # where a node is in a schema: keys and list indexes, as text


def _refs(node: Any, path: Path = ()) -> Iterator[tuple[Path, str, Any]]:
    """Each reference keyword in a schema: where its object is, the keyword, its value."""
    if isinstance(node, dict):
        for key in ("$ref", "$dynamicRef", "$recursiveRef"):
            if isinstance(node.get(key), str):  # else a property so named, or no schema
                yield path, key, node[key]
        for key, value in node.items():
            yield from _refs(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _refs(value, (*path, str(index)))


def _pointer(ref: str) -> Path | None:
    """The path a JSON pointer into the same schema names (``#``, ``#/$defs/a``)."""
    if ref == "#":
        return ()
    if not ref.startswith("#/"):
        return None
    return tuple(unquote(p).replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))


def _part(schema: Any, path: Path) -> tuple[bool, Any]:
    """Whether a path names a part of the schema, and that part."""
    node = schema
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def check_refs(schema: dict[str, Any]) -> None:
    """Raises ValueError unless every ``$ref`` points into the schema and none leads back
    to itself, directly or through others (see the module's docstring)."""
    found = list(_refs(schema))
    if not found:
        return
    targets: dict[int, Any] = {}  # id of a node holding a $ref: the node it names
    for where, key, ref in found:
        target = _pointer(ref) if key == "$ref" else None
        if target is None:
            raise ValueError(
                f"the schema's {key} {str(ref)[:80]!r} cannot be followed here: a $ref names "
                "a part of the same schema, such as '#/$defs/NAME'"
            )
        named, part = _part(schema, target)
        if not named or not isinstance(part, dict | bool):
            raise ValueError(f"the schema's $ref {ref!r} names no part of the schema")
        holder = _part(schema, where)[1]
        if isinstance(part, dict):
            targets[id(holder)] = part
    if any(isinstance(node.get("$id"), str) for node, _ in _subschemas(schema)):
        raise ValueError("a $ref beside an $id inside the schema is not supported; drop the $id")
    _refuse_cycles(schema, targets)


def _refuse_cycles(schema: Any, targets: dict[int, Any]) -> None:
    """Raises ValueError when a walk down the schema that follows each $ref can come back to
    a part it is inside: validating there could recurse without end. One depth-first walk
    over the parts and the refs' edges (linear, whatever the number of refs)."""
    state: dict[int, bool] = {}  # True: on the walk's path now; False: done, no way back

    def edges(node: Any) -> list[Any]:
        parts = list(node.values()) if isinstance(node, dict) else list(node)
        following = [p for p in parts if isinstance(p, dict | list)]
        if id(node) in targets:
            following.append(targets[id(node)])
        return following

    stack = [(schema, iter(edges(schema)))]
    state[id(schema)] = True
    while stack:
        node, pending = stack[-1]
        step = next(pending, None)
        if step is None:
            state[id(node)] = False
            stack.pop()
        elif state.get(id(step)) is True:
            ref = node.get("$ref") if isinstance(node, dict) else None
            raise ValueError(
                f"the schema's $ref {ref!r} leads back to a part it is inside, so grading it "
                "would never end; write the nesting out as deep as the answers go"
            )
        elif id(step) not in state:
            state[id(step)] = True
            stack.append((step, iter(edges(step))))


def _subschemas(node: Any, top: bool = True) -> Iterator[tuple[dict, bool]]:
    """Every object below the schema's root (``$id`` at the root is allowed)."""
    if isinstance(node, dict):
        if not top:
            yield node, top
        for value in node.values():
            yield from _subschemas(value, False)
    elif isinstance(node, list):
        for value in node:
            yield from _subschemas(value, False)


def check_schema(schema: dict[str, Any]) -> None:
    """Raises ValueError, in a sentence, unless the schema is valid and its patterns are RE2's."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a valid JSON schema: {exc.message}") from None
    for pattern in _patterns(schema):
        try:
            _compiled(pattern)
        except re2.error as exc:
            reason = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc.args[0]
            raise ValueError(
                f"the schema's pattern {pattern!r} is not an RE2 regular expression: {reason} "
                "(no look-around or back-references)"
            ) from None
    check_refs(schema)
    if _has_both(schema, set()):
        raise ValueError(
            "unevaluatedProperties with patternProperties is not supported; "
            "use additionalProperties"
        )


@functools.lru_cache(maxsize=32)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    base = jsonschema.validators.validator_for(schema)
    return jsonschema.validators.extend(base, _RE2_KEYWORDS)(schema)


def is_valid(schema: dict[str, Any], value: Any) -> bool:
    """Whether the schema accepts the value (its patterns run on RE2)."""
    return _validator(json.dumps(schema, sort_keys=True)).is_valid(value)
