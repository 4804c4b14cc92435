"""What both ways of grading agree on: whitespace, words, lower case, strict JSON.

Rules are graded in DuckDB (RE2 regular expressions, utf8proc's lower case) and, as a
reference and for what SQL cannot do, in Python. Where the two differ by default (``\\s``
and ``\\w`` are ASCII in RE2 and Unicode in Python; ``str.lower`` applies the Greek final
sigma and turns ``İ`` into two characters; DuckDB's ``json_valid`` takes ``NaN`` and
trailing commas) the definitions here are written out so both give the same answer.
"""

from __future__ import annotations

import re

# The strict-JSON rule lives below the store (verdicts read it too); graders read it here.
from core.json_strict import LENIENT_JSON_HINT, is_json, strict_json  # noqa: F401

# Whitespace, for words and trimming: Unicode's space separators, line and paragraph
# separators and the ASCII controls that break lines, written out (the same set for both).
SPACES = (
    " \t\n\r\f\v\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
COMMON_SPACES = " \t\n\r"  # what nearly every answer holds: the fast path of word counts
WORD_RUN = f"[^{SPACES}]+"  # a word: a run of anything but whitespace (both engines)
# A whole word's edges: no letter, digit or _ beside it. RE2 spells letters \pL\pN;
# Python's \w is the same set (str.isalnum or _).
SQL_EDGE_BEFORE, SQL_EDGE_AFTER = r"(?:^|[^\pL\pN_])", r"(?:[^\pL\pN_]|$)"
PY_EDGE_BEFORE, PY_EDGE_AFTER = r"(?:^|\W)", r"(?:\W|$)"
_SPECIAL = set("\\.^$|?*+()[]{}")


def escape(literal: str) -> str:
    """A literal text as a pattern both engines read the same (punctuation escaped only)."""
    return "".join("\\" + c if c in _SPECIAL else c for c in literal)


def simple_lower(text: str) -> str:
    """Lower case one character at a time, as DuckDB's ``lower`` does: no final-sigma
    context, and ``İ`` becomes ``i`` (Python's ``str.lower`` makes it ``i`` + a dot)."""
    return "".join(c.lower()[:1] for c in text)


def strip_spaces(text: str) -> str:
    return text.strip(SPACES)


def word_count(text: str) -> int:
    return len(re.findall(WORD_RUN, text))


# RE2's shorthand classes are ASCII; spelled out for Python's re (\s has no \v in RE2).
_OUTSIDE = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[0-9A-Za-z_]",
    "W": "[^0-9A-Za-z_]",
    "s": "[\\t\\n\\f\\r ]",
    "S": "[^\\t\\n\\f\\r ]",
    "b": "(?a:\\b)",
    "B": "(?a:\\B)",
}
_INSIDE = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\f\\r "}
# RE2's POSIX classes, inside a class: [[:alpha:]], [[:^alpha:]] its negation; ASCII too.
_POSIX_CLASS = re.compile(r"\[:(\^?)([a-z]+):\]")
_POSIX = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
    "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z", "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}  # fmt: skip


def python_pattern(pattern: str) -> str:
    """A regular expression as RE2 (DuckDB) reads it, spelled for Python's ``re``: ``\\d``,
    ``\\w``, ``\\s`` and ``\\b`` ASCII (in a character class too), and ``$`` the very end
    of the text (Python's also matches before a final line break) unless the pattern turns
    on ``(?m)``."""
    multiline = re.match(r"\(\?[a-zA-Z]*m", pattern) is not None
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(_OUTSIDE.get(pattern[i + 1], pattern[i : i + 2]))
            i += 2
        elif ch == "[" and (end := _class_end(pattern, i)) > 0:
            out.append(_python_class(pattern[i + 1 : end]))
            i = end + 1
        else:
            out.append(r"\Z" if ch == "$" and not multiline else ch)
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opened at ``start`` closes (-1: it does not; ``re`` then
    reports the pattern). A ``]`` right after ``[`` or ``[^`` is a member, not the end."""
    i = start + 1
    i += pattern.startswith("^", i)
    i += pattern.startswith("]", i)
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
        elif posix := _POSIX_CLASS.match(pattern, i):
            i = posix.end()
        elif pattern[i] == "]":
            return i
        else:
            i += 1
    return -1


def _python_class(body: str) -> str:
    """A character class's inside (between ``[`` and ``]``) for Python's ``re``.

    ``\\d``, ``\\w``, ``\\s`` and POSIX classes (``[:alpha:]``) are spelled out as their
    ASCII members. Their negations (``\\D``, ``[:^alpha:]``) have no spelling inside a
    Python class, so a class holding one becomes the set operations it means: ``[a\\D]``
    is ``a`` or a non-digit, ``(?:[a]|[^0-9])``; ``[^a\\D]`` is a digit that is not ``a``,
    ``(?:(?![a])[0-9])``.
    """
    negated = body.startswith("^")
    members, outside, i = [], [], int(negated)
    while i < len(body):
        posix = _POSIX_CLASS.match(body, i)
        if posix and posix[2] in _POSIX:
            (outside if posix[1] else members).append(_POSIX[posix[2]])
            i = posix.end()
        elif body[i] == "\\" and i + 1 < len(body):
            shorthand = body[i + 1]
            if shorthand in "DWS":
                outside.append(_INSIDE[shorthand.lower()])
            else:
                members.append(_INSIDE.get(shorthand, body[i : i + 2]))
            i += 2
        else:
            members.append(body[i])
            i += 1
    text = "".join(members)
    if not outside:
        return f"[{'^' * negated}{text}]"
    escaped = "\\" + text if text.startswith("^") else text  # a leading ^ is a member here
    own = f"[{escaped}]" if text else ""
    if not negated:  # a member, or outside any of the shorthands' sets
        return "(?:" + "|".join([*([own] if own else []), *(f"[^{s}]" for s in outside)]) + ")"
    # not a member, and inside every one of the shorthands' sets
    ahead = f"(?!{own})" if own else ""
    inside = [f"[{s}]" for s in outside]
    return "(?:" + ahead + "".join(f"(?={s})" for s in inside[:-1]) + inside[-1] + ")"
