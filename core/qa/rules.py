"""Rules (checks) over answers: the pydantic models of a rules file, and loading one.

A rules file is YAML (JSON is accepted: it is YAML too) holding ``rules:``, a list of
rules, each with a ``name`` and a ``type``. A file that breaks a rule is refused whole,
with one message per problem naming the line, the rule and the field; nothing is graded.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

import duckdb
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.schemas import JUDGE_CHECK, problem_message

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
NAME_MAX = 64
FILE_NAME = "rules.yaml"  # the rules a job was last graded with, in its folder
MAX_RULES_BYTES = 256 * 1024  # a rules file; hundreds of rules fit in a tenth of it
# Values a rules file may stand for once its aliases (*name) are expanded: 560 bytes of
# nested aliases can stand for billions, which validating them would build.
MAX_EXPANDED_NODES = 50_000
MAX_DEPTH = 100  # nesting levels: composing (and later checking) a level recurses


class _Loader(yaml.SafeLoader):
    """YAML as people write rules: only true and false are booleans (YAML 1.2), so that
    ``values: [yes, no, on]`` are the words, not True and False; and aliases refused where
    they would expand past :data:`MAX_EXPANDED_NODES` values, or refer to themselves; and
    nesting past :data:`MAX_DEPTH` levels refused before Python's stack runs out."""

    def compose_document(self) -> Any:
        self._expanded, self._sizes, self._depth = 0, {}, 0
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise yaml.composer.ComposerError(
                    None, None, "an alias may not refer to the value that holds it", mark
                )
            self._expanded += size
        else:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"values nest deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            before = self._expanded
            node = super().compose_node(parent, index)
            self._depth -= 1
            self._expanded += 1
            self._sizes[id(node)] = self._expanded - before
            mark = node.start_mark
        if self._expanded > MAX_EXPANDED_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand past {MAX_EXPANDED_NODES:,} values", mark
            )
        return node


StrictLoader = _Loader  # what other YAML files people write load with (experiments)

_BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class RulesError(ValueError):
    """A rules file that cannot be used; ``problems`` holds one sentence per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
    description: str = ""


def _texts(values: Any) -> Any:
    """Numbers in a list of texts are their text (``values: [42]`` looks for "42")."""
    if isinstance(values, list):
        return [
            str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in values
        ]
    return values


class Contains(_Rule):
    """Passes when the answer holds any (``match: any``) or all of ``values``."""

    type: Literal["contains"]
    values: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    match: Literal["any", "all"] = "any"
    case_sensitive: bool = False
    whole_words: bool = False  # "refund" then does not match inside "refunded"

    _texts = field_validator("values", mode="before")(_texts)


class NotContains(Contains):
    """Passes when :class:`Contains` with the same options would fail."""

    type: Literal["not_contains"]  # type: ignore[assignment]


class Regex(_Rule):
    """Passes when the pattern matches somewhere in the answer (``full``: the whole of it)."""

    type: Literal["regex"]
    pattern: Annotated[str, Field(min_length=1)]
    case_sensitive: bool = True
    full: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        check_pattern(pattern)
        return pattern


class EqualsMetadata(_Rule):
    """Passes when the answer, without surrounding whitespace, equals a field of the
    request's ``metadata`` (e.g. the expected label); not graded where the field is missing."""

    type: Literal["equals_metadata"]
    field: Annotated[str, Field(min_length=1)]
    case_sensitive: bool = False


class JsonValid(_Rule):
    """Passes when the whole answer is valid JSON (RFC 8259: no NaN, no trailing comma)."""

    type: Literal["json"]


class JsonSchema(_Rule):
    """Passes when the answer is valid JSON that the JSON schema accepts."""

    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        from core.qa.json_schema import check_schema

        check_schema(schema)
        return schema


class Length(_Rule):
    """Passes when the answer's length in ``unit`` lies within ``min``..``max`` (inclusive)."""

    type: Literal["length"]
    unit: Literal["words", "tokens", "chars"] = "words"
    min: Annotated[int, Field(ge=0)] | None = None
    max: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Length:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class FinishReason(_Rule):
    """Passes when the answer ended for one of ``values`` (``stop`` by default)."""

    type: Literal["finish_reason"]
    values: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] = ["stop"]


class Refusal(_Rule):
    """Passes when the answer is not a refusal (core/qa/refusal.py holds the phrases)."""

    type: Literal["refusal"]


Rule = Annotated[
    Contains
    | NotContains
    | Regex
    | EqualsMetadata
    | JsonValid
    | JsonSchema
    | Length
    | FinishReason
    | Refusal,
    Field(discriminator="type"),
]
RULE_TYPES: dict[str, type[_Rule]] = {
    "contains": Contains,
    "not_contains": NotContains,
    "regex": Regex,
    "equals_metadata": EqualsMetadata,
    "json": JsonValid,
    "json_schema": JsonSchema,
    "length": Length,
    "finish_reason": FinishReason,
    "refusal": Refusal,
}


class RuleSet(BaseModel):
    """A rules file: the rules, each named once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: Annotated[list[Rule], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_names(self) -> RuleSet:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"two rules are named {rule.name!r}; give each its own name")
            if re.fullmatch(JUDGE_CHECK, rule.name):
                raise ValueError(f"{rule.name!r} is how judges are named; name the rule otherwise")
            seen.add(rule.name)
        return self

    @property
    def names(self) -> list[str]:
        return [rule.name for rule in self.rules]

    def digest(self) -> str:
        """A hash of what the rules mean (not of the file's comments or layout)."""
        text = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        for rule, dumped in zip(self.rules, data["rules"], strict=True):
            dumped["type"] = rule.type  # a default, yet the one field every rule needs
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def check_pattern(pattern: str) -> None:
    """Raises ValueError unless both engines take the pattern: DuckDB (RE2), which grades,
    and Python's ``re``, the reference the tests compare with."""
    from core.qa.text import python_pattern

    try:
        re.compile(python_pattern(pattern))
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    try:
        duckdb.connect().execute("SELECT regexp_matches('', ?)", [pattern])
    except duckdb.Error as exc:
        reason = str(exc).split("Error: ", 1)[-1]
        raise ValueError(
            f"DuckDB's regular expressions (RE2) do not take this pattern: {reason} "
            "(no look-around or back-references)"
        ) from None


EXAMPLE = """\
rules:
  - name: short            # shown in the UI and exports
    type: length
    unit: words
    max: 12
  - name: mentions_refund
    type: contains
    values: [refund]
    case_sensitive: false
  - name: no_refusal
    type: refusal
"""


# -- loading -------------------------------------------------------------------------------


def load_rules(text: str) -> RuleSet:
    """Parses and validates a rules file's text (YAML, or JSON).

    Raises:
        RulesError: with one line per problem, each naming its line, rule and field.
    """
    if not text.strip():
        raise RulesError(["the rules file is empty: it needs `rules:` and at least one rule"])
    if len(text) > MAX_RULES_BYTES:  # characters: at least as many bytes
        raise RulesError([f"the rules file is larger than {MAX_RULES_BYTES // 1024} KiB"])
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise RulesError([f"{where}not valid YAML or JSON: {problem}"]) from None
    if not isinstance(data, dict) or "rules" not in data:
        raise RulesError(["line 1: the file must be a mapping with a `rules:` list"])
    try:
        return RuleSet.model_validate(data)
    except ValidationError as exc:
        raise RulesError(_problems(exc, data, text)) from None


def _problems(exc: ValidationError, data: dict, text: str) -> list[str]:
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        root = None
    out = []
    for error in exc.errors():
        loc = list(error["loc"])
        tag = error["type"].startswith("union_tag")  # point at the rule's `type:` line
        line = line_of(root, [*loc, "type"] if tag else loc)
        where = [f"line {line}"] if line else []
        if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
            rule = data["rules"][loc[1]] if isinstance(data.get("rules"), list) else None
            name = rule.get("name") if isinstance(rule, dict) else None
            where.append(f"rule {loc[1] + 1}" + (f" ({name!r})" if name else ""))
            kind = rule.get("type") if isinstance(rule, dict) else None
            fields = [p for p in loc[2:] if not (isinstance(p, str) and p == kind)]
        else:
            kind, fields = None, loc
        if fields:
            where.append("field " + ".".join(str(p) for p in fields))
        out.append(", ".join(where) + ": " + _message(error, kind))
    return out


def _message(error: dict, kind: Any) -> str:
    kind_of = error["type"]
    valid = ", ".join(RULE_TYPES)
    if kind_of == "union_tag_invalid":
        return f"unknown type {error['ctx']['tag']!r}; valid types: {valid}"
    if kind_of == "union_tag_not_found":
        return f"every rule needs a type; valid types: {valid}"
    if kind_of == "extra_forbidden":
        model = RULE_TYPES.get(kind)
        takes = ""
        if model is not None:
            names = [f.alias or n for n, f in model.model_fields.items() if n != "type"]
            takes = f"; a {kind} rule takes {', '.join(names)}"
        return f"unknown field {error['loc'][-1]!r}{takes}"
    if kind_of == "missing":
        return "required, and missing"
    if kind_of == "string_pattern_mismatch":
        return "a name is letters, digits and _ . - (no spaces; it names export columns)"
    return problem_message(error)


def line_of(node: Any, loc: list[Any]) -> int | None:
    """The line (1-based) of the deepest YAML node the error's location reaches."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if key.value == part:
                    line, node = key.start_mark.line + 1, value
                    break
            # a part not found (the union's tag, a missing field) keeps the line so far
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
    return line
