"""A label schema: the questions a sample's reviewers answer, and its guidelines.

A schema is an ordered list of questions, each one of: a single choice or a multiple
choice among the owner's options, a rating on an integer scale (optional words at its
ends), a corrected answer (free text that replaces the model's) and a comment; and
guidelines, plain text shown beside every item. A sample without one keeps the default
label (pass / fail / unsure with a score). Questions are named by their title: answers are
kept under it, so a renamed question is a new one.

The owner writes a schema as text, a question a line (``type: title | options``); it is
read here with a message naming the line and the question for anything wrong, and written
back the same way to edit. Choice and rating answers travel in a label's ``answers``; the
corrected answer and the comment are the label's own ``corrected_answer`` and ``comment``
(one of each at most), so exports and training read them where they always did.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from core.schemas import Model

LABEL_NAME_CHARS = 40
TITLE_CHARS = 200
GUIDELINES_CHARS = 20_000
MAX_QUESTIONS = 20
MAX_OPTIONS = 20
MAX_SCALE = 11  # values of a rating, ends included (0..10 at most)
TEXT_BYTES = 1_000_000  # a corrected answer or a comment, in UTF-8
TYPES = ("single", "multiple", "rating", "corrected", "comment")

Answer = int | str | list[str]  # a rating's value, a single choice, a multiple choice


class SchemaError(ValueError):
    """A schema or answers that cannot be saved; the message names the question."""


def label_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a label (a verdict, a reviewer's own label, a choice's
    option), or None."""
    if not name or name != name.strip():
        return "a label name must be non-empty, without spaces around it"
    if len(name) > LABEL_NAME_CHARS:
        return f"a label name has at most {LABEL_NAME_CHARS} characters ({name[:20]!r}…)"
    if _has_control(name):
        return f"a label name cannot hold control characters ({name!r})"
    if "," in name:
        return f"a label name cannot hold a comma ({name!r})"
    return None


def _has_control(text: str, allowed: str = "") -> bool:
    return any(
        unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in allowed for c in text
    )


def text_problem(what: str, text: str) -> str | None:
    """Why a free text (a corrected answer, a comment) is too long to keep, or None."""
    size = len(text.encode("utf-8"))
    if size > TEXT_BYTES:
        return (
            f"{what} is {size / 1e6:.1f} MB: at most 1 MB ({TEXT_BYTES:,} bytes) is kept; "
            "nothing was saved"
        )
    return None


class Question(Model):
    """One question; ``options`` for a choice, ``low``..``high`` (and words at the ends)
    for a rating."""

    type: Literal["single", "multiple", "rating", "corrected", "comment"]
    title: str
    options: list[str] = Field(default_factory=list)
    low: int | None = None
    high: int | None = None
    low_label: str | None = None
    high_label: str | None = None

    @model_validator(mode="after")
    def _valid(self) -> Question:
        problem = self.problem()
        if problem:
            raise ValueError(problem)
        return self

    def problem(self) -> str | None:
        """Why this question cannot be asked, in words naming it, or None."""
        name = f"question {self.title[:40]!r}"
        if not self.title.strip() or self.title != self.title.strip():
            return "a question needs a title, without spaces around it"
        if len(self.title) > TITLE_CHARS or _has_control(self.title):
            return f"{name}: a title has at most {TITLE_CHARS} characters, no control characters"
        if self.type in ("single", "multiple"):
            if not self.options:
                return f"{name}: a choice needs options (none given)"
            if len(self.options) > MAX_OPTIONS:
                return f"{name}: at most {MAX_OPTIONS} options ({len(self.options)} given)"
            seen: set[str] = set()
            for option in self.options:
                problem = label_name_problem(option)
                if problem:
                    return f"{name}: {problem.replace('a label name', 'an option')}"
                if option.casefold() in seen:
                    return f"{name}: the option {option!r} is given twice"
                seen.add(option.casefold())
            if self.type == "single" and len(self.options) < 2:
                return f"{name}: a single choice needs two options at least"
        elif self.options:
            return f"{name}: only a choice has options"
        if self.type == "rating":
            if self.low is None or self.high is None:
                return f"{name}: a rating needs a scale, low..high (say 1..5)"
            if self.high <= self.low:
                return (
                    f"{name}: a scale of {self.low}..{self.high} has one value or none: "
                    "give a low end below the high end"
                )
            if self.high - self.low + 1 > MAX_SCALE:
                return f"{name}: a scale has at most {MAX_SCALE} values ({self.low}..{self.high})"
            for end in (self.low_label, self.high_label):
                if end is not None and (len(end) > LABEL_NAME_CHARS or _has_control(end)):
                    return (
                        f"{name}: a scale's end words have at most {LABEL_NAME_CHARS} "
                        "characters, no control characters"
                    )
        elif (self.low, self.high, self.low_label, self.high_label) != (None,) * 4:
            return f"{name}: only a rating has a scale"
        return None

    @property
    def scale(self) -> list[int]:
        return list(range(self.low, self.high + 1)) if self.type == "rating" else []  # type: ignore[arg-type]


def rating_keys(question: Question) -> dict[int, str]:
    """The key that sets each value of a rating's scale on Review's keyboard, for the
    values that have one: a value from 0 to 9 its own digit, and 10 the key 0 on a scale
    without 0 (1..10). A value below 0, or 10 on a 0..10 scale, has none (a click sets it).
    Digits are free under a schema: the verdicts and own labels take letters, and the
    default label's score keys (1-5) are not shown beside a schema's questions."""
    keys = {v: str(v) for v in question.scale if 0 <= v <= 9}
    if 10 in question.scale and 0 not in keys:
        keys[10] = "0"
    return keys


def rating_key_hint(question: Question) -> str:
    """The words beside a keyed rating: which keys set it (``keys 1–5 set it; the same key
    again clears it``), and which values only a click sets."""
    keys = rating_keys(question)
    unkeyed = ", ".join(str(v) for v in question.scale if v not in keys)
    if not keys:
        return f"No key on this scale: click a value ({unkeyed})."
    digits = sorted(v for v in keys if v <= 9)
    told = f"Keys {digits[0]}–{digits[-1]}" if len(digits) > 1 else f"Key {digits[0]}"
    told += " and 0 for 10" if 10 in keys else ""
    verb = "sets" if len(keys) == 1 else "set"
    clicked = f"; {unkeyed} by a click" if unkeyed else ""
    return f"{told} {verb} it; the same key again clears it{clicked}."


# The label's own questions (its verdict and score) and the columns of agreement's table of
# pairs: a question of one of these titles would be measured and shown as the other.
RESERVED_TITLES = ("verdict", "score", "score (1–5)", "reviewer a", "reviewer b", "both labelled")


class LabelSchema(Model):
    """A sample's questions, in order, and its guidelines."""

    questions: Annotated[list[Question], Field(max_length=MAX_QUESTIONS)] = Field(
        default_factory=list
    )
    guidelines: str = Field("", max_length=GUIDELINES_CHARS)

    @model_validator(mode="after")
    def _valid(self) -> LabelSchema:
        titles: set[str] = set()
        for question in self.questions:
            title = question.title.casefold()
            if title in RESERVED_TITLES or title.endswith(" α"):
                raise ValueError(
                    f"question {question.title!r} has a title the label or its agreement "
                    "table uses already: choose another"
                )
            if question.title.casefold() in titles:
                raise ValueError(f"question {question.title!r} is asked twice: titles name answers")
            titles.add(question.title.casefold())
        for kind in ("corrected", "comment"):
            if sum(q.type == kind for q in self.questions) > 1:
                raise ValueError(f"a schema has one {kind} question at most")
        return self

    @property
    def empty(self) -> bool:
        return not self.questions and not self.guidelines.strip()

    def of_type(self, kind: str) -> Question | None:
        return next((q for q in self.questions if q.type == kind), None)

    @property
    def keyed_rating(self) -> Question | None:
        """The rating Review's digit keys answer: the first with a key on its scale
        (:func:`rating_keys`); one only, so a digit means one thing."""
        return next((q for q in self.questions if q.type == "rating" and rating_keys(q)), None)

    def check_answers(self, answers: Mapping[str, Any]) -> dict[str, Answer]:
        """The choice and rating answers as kept (unanswered ones dropped), in the
        questions' order.

        Raises:
            SchemaError: an answer to no question of the schema, or one that is not an
                option or a value of its scale; the message names the question.
        """
        asked = {q.title: q for q in self.questions if q.type in ("single", "multiple", "rating")}
        for title in answers:
            if title not in asked:
                raise SchemaError(f"{title!r} is not a choice or rating of this sample's schema")
        kept: dict[str, Answer] = {}
        for title, question in asked.items():
            value = answers.get(title)
            if value is None or value == [] or value == "":
                continue
            name = f"question {title!r}"
            if question.type == "single":
                if value not in question.options:
                    raise SchemaError(f"{name}: {value!r} is not one of its options")
                kept[title] = value
            elif question.type == "multiple":
                picked = [value] if isinstance(value, str) else list(value)
                wrong = [v for v in picked if v not in question.options]
                if wrong:
                    raise SchemaError(f"{name}: {wrong[0]!r} is not one of its options")
                kept[title] = [o for o in question.options if o in picked]  # its order, once
            else:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SchemaError(f"{name}: a rating is a whole number, not {value!r}")
                if value not in question.scale:
                    raise SchemaError(
                        f"{name}: {value} is off its scale {question.low}..{question.high}"
                    )
                kept[title] = value
        return kept


# -- the schema as text: a question a line ------------------------------------------------------

EXAMPLE = """single: Tone | friendly, neutral, rude
multiple: Problems | made up, off-topic, too long
rating: Helpfulness | 1..5 | useless..perfect
corrected: Corrected answer
comment: Anything else"""


def parse_questions(text: str) -> list[Question]:
    """Questions from text, one a line: ``single: Title | a, b, c``, ``multiple: Title | a,
    b``, ``rating: Title | 1..5`` (optionally ``| worst..best``), ``corrected: Title``,
    ``comment: Title``; blank lines are skipped.

    Raises:
        SchemaError: the first line that cannot be read, by its number and why.
    """
    questions: list[Question] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            questions.append(_question(line))
        except (SchemaError, ValueError) as exc:
            raise SchemaError(f"line {number}: {_words(exc)}") from None
    return questions


def _words(exc: Exception) -> str:
    """A validation error's own sentence (pydantic wraps a validator's)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        message = str(errors()[0]["msg"])
        return message.removeprefix("Value error, ")
    return str(exc)


def _question(line: str) -> Question:
    kind, sep, rest = line.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in TYPES:
        raise SchemaError(f"start with a type and a colon, one of {', '.join(TYPES)}")
    parts = [p.strip() for p in rest.split("|")]
    title, extra = parts[0], parts[1:]
    if kind in ("single", "multiple"):
        if not extra:
            return Question(type=kind, title=title)  # refused: no options, named
        if len(extra) > 1:
            raise SchemaError(f"question {title!r}: options are one list, comma-separated")
        options = [o.strip() for o in extra[0].split(",") if o.strip()]
        return Question(type=kind, title=title, options=options)
    if kind == "rating":
        if not extra or len(extra) > 2:
            raise SchemaError(f"question {title!r}: write its scale as low..high (say 1..5)")
        low, high = _pair(title, extra[0])
        ends = _ends(title, extra[1]) if len(extra) == 2 else (None, None)
        return Question(
            type=kind, title=title, low=int(low), high=int(high),
            low_label=ends[0], high_label=ends[1],
        )  # fmt: skip
    if extra:
        raise SchemaError(f"question {title!r}: a {kind} question takes a title only")
    return Question(type=kind, title=title)


def _pair(title: str, text: str) -> tuple[str, str]:
    low, sep, high = text.partition("..")
    if not sep or not low.strip().lstrip("-").isdigit() or not high.strip().lstrip("-").isdigit():
        raise SchemaError(f"question {title!r}: write its scale as low..high in whole numbers")
    return low.strip(), high.strip()


def _ends(title: str, text: str) -> tuple[str | None, str | None]:
    low, sep, high = text.partition("..")
    if not sep:
        raise SchemaError(f"question {title!r}: write the scale's end words as low..high")
    return low.strip() or None, high.strip() or None


def questions_text(questions: list[Question]) -> str:
    """The questions as :func:`parse_questions` reads them (to edit them)."""
    lines = []
    for q in questions:
        if q.type in ("single", "multiple"):
            lines.append(f"{q.type}: {q.title} | {', '.join(q.options)}")
        elif q.type == "rating":
            ends = (
                f" | {q.low_label or ''}..{q.high_label or ''}"
                if q.low_label or q.high_label
                else ""
            )
            lines.append(f"rating: {q.title} | {q.low}..{q.high}{ends}")
        else:
            lines.append(f"{q.type}: {q.title}")
    return "\n".join(lines)
