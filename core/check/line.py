"""One line of a batch file: its JSON, its envelope (``custom_id``, ``method``, ``url``,
``body``) and its body, checked on the generic path with precise messages."""

from __future__ import annotations

import json
from typing import Any

from core.check.report import UNREADABLE, CheckedLine, Problem
from core.check.requests import RequestError, parse_request
from core.endpoints import SUPPORTED_URLS
from core.schemas import JobDefaults

ENVELOPE_FIELDS = ("custom_id", "method", "url", "body")


CONTROL_NAMES = {0: "NUL", 8: "BS", 11: "VT", 12: "FF", 27: "ESC"}
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 13))


def _control_character(raw: bytes) -> str | None:
    """A message for the first raw control character (JSON allows them only escaped)."""
    stripped = raw.translate(None, _CONTROL_BYTES)
    if len(stripped) == len(raw):
        return None
    offset = next(i for i, b in enumerate(raw) if b in _CONTROL_BYTES)
    code = raw[offset]
    name = CONTROL_NAMES.get(code, f"U+{code:04X}")
    return (
        f"control character {name} (byte 0x{code:02x}) at offset {offset}; remove it, or "
        f"write it as \\u{code:04x} inside a string"
    )


ARRAY_HINT = "the file looks like a JSON array: write one JSON object per line, as JSON Lines"


def _parse_object(line_no: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except RecursionError:
        raise RequestError(
            "the JSON is nested too deeply to read (more than about 1,000 levels of objects "
            "or arrays); flatten it"
        ) from None
    except json.JSONDecodeError as exc:
        hint = ""
        if line_no == 1 and text.lstrip().startswith("["):
            hint = f" ({ARRAY_HINT})"
        elif exc.msg.startswith("Expecting property name enclosed in double quotes"):
            hint = " (JSON needs double quotes around names and strings)"
        elif exc.msg.startswith("Extra data"):
            hint = " (more than one JSON value on the line: write one object per line)"
        elif exc.msg.startswith("Invalid control character"):
            hint = " (a raw tab or control character inside a string: escape it, e.g. \\t)"
        elif exc.msg.startswith("Unterminated string") or (
            exc.msg.startswith("Expecting") and exc.pos >= len(text.rstrip())
        ):
            hint = " (the line ends early: is the object cut off or split across lines?)"
        message = exc.msg.removesuffix(" at")
        raise RequestError(f"not valid JSON: {message} at column {exc.colno}{hint}") from None
    if "\\u" in text:  # JSON escapes may spell half a UTF-16 pair, which no UTF-8 file can hold
        _refuse_lone_surrogates(value)
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number"
        )
        hint = f" ({ARRAY_HINT})" if isinstance(value, list) and line_no == 1 else ""
        raise RequestError(f"a line must be a JSON object, got {kind}{hint}")
    return value


def _refuse_lone_surrogates(value: Any) -> None:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(exc.object[exc.start])
        raise RequestError(
            f"the line holds an unpaired UTF-16 surrogate (\\u{code:04x}): half of an escaped "
            "character pair, which is not text and cannot be written as UTF-8; fix the escape"
        ) from None


def _custom_id(obj: dict[str, Any]) -> str:
    custom_id = obj.get("custom_id")
    if custom_id is None:
        raise RequestError("custom_id is missing; give each line a unique string id")
    if not isinstance(custom_id, str):
        kind = type(custom_id).__name__
        quoted = f' (write it as a string: "{custom_id}")' if kind in ("int", "float") else ""
        raise RequestError(f"custom_id must be a string, got {kind}{quoted}")
    if not custom_id.strip():
        raise RequestError("custom_id is empty; give each line a unique string id")
    return custom_id


def _envelope(obj: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """Checks ``method``, ``url`` and ``body``; returns url, body and warnings."""
    method = obj.get("method")
    if method != "POST":
        raise RequestError(f"method must be 'POST', got {method!r}")
    url = obj.get("url")
    if url is None:
        raise RequestError(f"url is missing; use one of {', '.join(SUPPORTED_URLS)}")
    if url not in SUPPORTED_URLS:
        raise RequestError(f"url {url!r} is not served; use {', '.join(SUPPORTED_URLS)}")
    body = obj.get("body")
    if not isinstance(body, dict):
        raise RequestError("body is missing or not a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise RequestError("body.model is missing; name the model (it is mapped to a local one)")
    extra = [
        f"{name} is not a field of a batch line; it is ignored"
        for name in obj
        if name not in ENVELOPE_FIELDS
    ]
    return url, body, extra


def check_line(line_no: int, text: str, defaults: JobDefaults) -> CheckedLine:
    """Checks one line's JSON, envelope and body (not its uniqueness: see :func:`scan`)."""
    custom_id = None
    try:
        obj = _parse_object(line_no, text)
        custom_id = _custom_id(obj)
        url, body, extra = _envelope(obj)
        request = parse_request(url, custom_id, body, defaults)
    except RequestError as exc:
        return CheckedLine(
            line_no,
            custom_id,
            None,
            [Problem(line_no, "error", str(exc), custom_id, exc.code, exc.param)],
        )
    problems = [
        Problem(line_no, "warning", w, custom_id, "ignored_field") for w in extra + request.warnings
    ]
    return CheckedLine(line_no, custom_id, request, problems)


def check_raw(line_no: int, raw: bytes, file_offset: int, defaults: JobDefaults) -> CheckedLine:
    """The generic path for a line the fast decoder did not accept."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = (
            f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
            f"(file byte {file_offset + exc.start}); save the file as UTF-8"
        )
        problem = Problem(line_no, "error", message, code="invalid_encoding")
        return CheckedLine(line_no, None, None, [problem])
    control = _control_character(raw)
    if control is not None:
        return CheckedLine(line_no, None, None, [Problem(line_no, "error", control)])
    return check_line(line_no, text, defaults)


def readable_fields(raw: bytes) -> tuple[str, str, tuple[str, ...]]:
    """What an invalid line that made no request still says: its ``url``, ``body.model``
    and message roles, as far as they can be read ("" for a field missing or not a string,
    ``UNREADABLE`` for a line that is no JSON object), so the summary counts every line."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict):
        return UNREADABLE, UNREADABLE, ()
    url = obj.get("url")
    body = obj.get("body")
    body = body if isinstance(body, dict) else {}
    model = body.get("model")
    messages = body.get("messages")
    roles = tuple(
        m["role"]
        for m in (messages if isinstance(messages, list) else ())
        if isinstance(m, dict) and isinstance(m.get("role"), str)
    )
    return (
        url if isinstance(url, str) else "",
        model if isinstance(model, str) else "",
        roles,
    )
