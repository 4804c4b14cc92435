"""Line-by-line check of an OpenAI batch file, streamed so a large file costs flat memory.

Each line becomes a :class:`CheckedLine`: the request the engine would run, or the problems
that stop it, each with its line number and a message a person can act on.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.requests import SUPPORTED_URLS, EngineRequest, JobDefaults, RequestError, parse_body

Severity = Literal["error", "warning"]
MAX_REPORTED_PROBLEMS = 10_000


@dataclass(frozen=True)
class Problem:
    """One finding about one line (line 0 means the file as a whole)."""

    line: int
    severity: Severity
    message: str
    custom_id: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.severity}: {self.message}"


@dataclass
class CheckedLine:
    """A non-blank line of the file and what the check made of it."""

    line_no: int
    custom_id: str | None
    request: EngineRequest | None
    problems: list[Problem]

    @property
    def valid(self) -> bool:
        return self.request is not None


@dataclass
class CheckReport:
    """The summary of a whole file."""

    path: str
    lines: int = 0
    valid: int = 0
    invalid: int = 0
    warnings: int = 0
    problems: list[Problem] = field(default_factory=list)
    problems_dropped: int = 0
    models: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        """True when every line is valid and the file has at least one."""
        return self.invalid == 0 and self.valid > 0

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def add(self, problem: Problem) -> None:
        if len(self.problems) < MAX_REPORTED_PROBLEMS:
            self.problems.append(problem)
        else:
            self.problems_dropped += 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["models"] = dict(self.models)
        return data


def _parse_object(line_no: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = ""
        if line_no == 1 and text.lstrip().startswith("["):
            hint = " (the file looks like a JSON array: write one JSON object per line)"
        raise RequestError(f"not valid JSON: {exc.msg} at column {exc.colno}{hint}") from None
    if not isinstance(value, dict):
        raise RequestError(f"a line must be a JSON object, got {type(value).__name__}")
    return value


def _custom_id(obj: dict[str, Any]) -> str:
    custom_id = obj.get("custom_id")
    if custom_id is None:
        raise RequestError("custom_id is missing; give each line a unique string id")
    if not isinstance(custom_id, str):
        raise RequestError(f"custom_id must be a string, got {type(custom_id).__name__}")
    if not custom_id.strip():
        raise RequestError("custom_id is empty; give each line a unique string id")
    return custom_id


def _envelope(obj: dict[str, Any]) -> dict[str, Any]:
    """Checks ``method``, ``url`` and ``body``; returns the body."""
    method = obj.get("method")
    if method != "POST":
        raise RequestError(f"method must be 'POST', got {method!r}")
    url = obj.get("url")
    if url not in SUPPORTED_URLS:
        raise RequestError(f"url {url!r} is not served; use {', '.join(SUPPORTED_URLS)}")
    body = obj.get("body")
    if not isinstance(body, dict):
        raise RequestError("body is missing or not a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise RequestError("body.model is missing; name the model (it is mapped to a local one)")
    return body


def check_line(line_no: int, text: str, defaults: JobDefaults) -> CheckedLine:
    """Checks one line's JSON, envelope and body (not its uniqueness: see :func:`scan`)."""
    custom_id = None
    try:
        obj = _parse_object(line_no, text)
        custom_id = _custom_id(obj)
        body = _envelope(obj)
        request = parse_body(custom_id, body, defaults)
    except RequestError as exc:
        return CheckedLine(
            line_no, custom_id, None, [Problem(line_no, "error", str(exc), custom_id)]
        )
    warnings = [Problem(line_no, "warning", w, custom_id) for w in request.warnings]
    return CheckedLine(line_no, custom_id, request, warnings)


def _lines(path: Path) -> Iterator[tuple[int, str | None, str | None]]:
    """Yields ``(line_no, text, decode_error)``; accepts a UTF-8 BOM and CRLF endings."""
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield line_no, raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                yield line_no, None, f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"


def scan(path: str | Path, defaults: JobDefaults | None = None) -> Iterator[CheckedLine]:
    """Checks every non-blank line of a batch file in order, duplicates included."""
    defaults = defaults or JobDefaults()
    first_line_of: dict[str, int] = {}
    for line_no, text, decode_error in _lines(Path(path)):
        if decode_error is not None:
            yield CheckedLine(line_no, None, None, [Problem(line_no, "error", decode_error)])
            continue
        if not text.strip():
            continue
        checked = check_line(line_no, text, defaults)
        cid = checked.custom_id
        if cid is not None:
            if cid in first_line_of:
                message = f"custom_id {cid!r} repeats line {first_line_of[cid]}; ids must be unique"
                checked.problems.insert(0, Problem(line_no, "error", message, cid))
                checked.request = None
            else:
                first_line_of[cid] = line_no
        yield checked


def check_file(path: str | Path, defaults: JobDefaults | None = None) -> CheckReport:
    """Checks a whole batch file and summarises it."""
    report = CheckReport(path=str(path))
    for checked in scan(path, defaults):
        report.lines += 1
        if checked.valid:
            report.valid += 1
            report.models[checked.request.model or ""] += 1
        else:
            report.invalid += 1
        for problem in checked.problems:
            report.warnings += problem.severity == "warning"
            report.add(problem)
    if report.lines == 0:
        report.add(Problem(0, "error", "the file has no request lines (it is empty or blank)"))
    return report
