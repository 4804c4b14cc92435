"""Line-by-line check of an OpenAI batch file, streamed so a large file costs flat memory.

Each line becomes a :class:`CheckedLine`: the request the engine would run, or the problems
that stop it, each with its line number and a message a person can act on.
:func:`check_file` adds the file-level summary (distributions, totals, duplicates) and,
given a model folder, the model-aware check: prompt tokens counted with the model's own
tokenizer and chat template, and lines that do not fit its context.

Speed: a line of the common chat shape is decoded and validated in one msgspec call (see
``core.check.requests.decode_fast_chat_line``); only other lines take the slower generic path
with its precise messages. Duplicate ids are found with a dict of id hashes.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import msgspec

from core.check.requests import (
    CHAT_URL,
    DEFAULTED,
    ENGINE_URLS,
    FAST_DECODE_ERRORS,
    FAST_DECODER,
    PLAIN_TURNS,
    SUPPORTED_URLS,
    EngineRequest,
    FastChatLine,
    RequestError,
    fast_chat_request,
    fast_chat_settings,
    is_utf8,
    parse_request,
    plain_turns,
)
from core.config import REPO_ROOT
from core.schemas import JobDefaults

Severity = Literal["error", "warning", "note"]
MAX_REPORTED_PROBLEMS = 10_000
BATCH_LINES = 2048  # lines checked between token counts and progress reports
ENVELOPE_FIELDS = ("custom_id", "method", "url", "body")
# Upper edges of the prompt-token histogram's bins; the last bin is open-ended.
HISTOGRAM_EDGES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
LISTED_LINES = 20  # line numbers quoted in a summary finding
CONTROL_NAMES = {0: "NUL", 8: "BS", 11: "VT", 12: "FF", 27: "ESC"}
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 13))
# Problem codes that counters and the submission rules read.
DUPLICATE_ID = "duplicate_custom_id"
NOT_RUNNABLE = "url_not_runnable"
CONTEXT_EXCEEDED = "context_length_exceeded"
EMPTY_FILE = "empty_file"


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding about one line (line 0 means the file as a whole).

    Like OpenAI's ``BatchError``: ``code`` names the kind of problem (counters and rules
    read it, never the message) and ``param`` the field it is about, where there is one.
    """

    line: int
    severity: Severity
    message: str
    custom_id: str | None = None
    code: str = "invalid_request"
    param: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.severity}: {self.message}"


@dataclass(slots=True)
class CheckedLine:
    """A non-blank line of the file and what the check made of it.

    ``request`` is kept whenever the body could be read, even if the line has errors
    (a repeated id, a url the engine does not run yet); ``valid`` says whether it runs.
    """

    line_no: int
    custom_id: str | None
    request: EngineRequest | None
    problems: list[Problem]
    raw: bytes = b""  # the line as read (its line ending may be kept)

    @property
    def valid(self) -> bool:
        if self.request is None:
            return False
        return not self.problems or all(p.severity != "error" for p in self.problems)


def histogram_labels() -> list[str]:
    """Readable labels for the bins of ``CheckReport.token_histogram``."""
    labels, low = [], 0
    for edge in HISTOGRAM_EDGES:
        labels.append(f"{low}-{edge - 1}")
        low = edge
    labels.append(f"{low}+")
    return labels


@dataclass
class CheckReport:
    """The summary of a whole file.

    Token fields are filled only when a model folder was given to :func:`check_file`.
    ``by_local_model`` holds, per local model folder name, the valid lines' ``lines``,
    ``prompt_tokens`` and ``max_output_tokens``: what an estimate needs.
    """

    path: str
    lines: int = 0
    valid: int = 0
    invalid: int = 0
    warnings: int = 0
    problems: list[Problem] = field(default_factory=list)
    problems_dropped: int = 0
    models: Counter = field(default_factory=Counter)
    urls: Counter = field(default_factory=Counter)
    roles: Counter = field(default_factory=Counter)
    duplicates: int = 0
    not_runnable: int = 0
    max_output_tokens: int = 0
    default_max_lines: int = 0
    effective: dict[str, Counter] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    model_map: dict[str, str] = field(default_factory=dict)
    tokens_counted: bool = False
    token_notes: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    prompt_tokens_max: int = 0
    token_histogram: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_EDGES) + 1))
    over_context: int = 0
    by_local_model: dict[str, dict[str, Any]] = field(default_factory=dict)
    bytes_read: int = 0
    seconds: float = 0.0
    processes: int = 1  # processes whose work is in the report (see check_file)
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """True when every line is valid and the file has at least one."""
        return self.invalid == 0 and self.valid > 0 and not self.cancelled

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
        for name in ("models", "urls", "roles"):
            data[name] = dict(getattr(self, name))
        data["effective"] = {k: dict(v) for k, v in self.effective.items()}
        data["token_histogram"] = dict(zip(histogram_labels(), self.token_histogram, strict=True))
        return data


# -- one line ----------------------------------------------------------------------------


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
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(value), "a number"
        )
        hint = f" ({ARRAY_HINT})" if isinstance(value, list) and line_no == 1 else ""
        raise RequestError(f"a line must be a JSON object, got {kind}{hint}")
    return value


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


def _not_runnable(url: str) -> str:
    return (
        f"url {url} is valid but not yet runnable by the engine (it runs "
        f"{', '.join(ENGINE_URLS)}); the check counts it, a run will give it an error result"
    )


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
            line_no, custom_id, None, [Problem(line_no, "error", str(exc), custom_id, exc.code)]
        )
    problems = [
        Problem(line_no, "warning", w, custom_id, "ignored_field") for w in extra + request.warnings
    ]
    if url not in ENGINE_URLS:
        problem = Problem(line_no, "error", _not_runnable(url), custom_id, NOT_RUNNABLE, "url")
        problems.insert(0, problem)
    return CheckedLine(line_no, custom_id, request, problems)


def _check_raw(line_no: int, raw: bytes, file_offset: int, defaults: JobDefaults) -> CheckedLine:
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


class _Batch:
    """Consecutive checked lines, held in parallel lists to keep a large check fast.

    A line of the common chat shape is kept as its decoded struct (``roles`` set), others
    as a :class:`CheckedLine` (``roles`` None): for the first kind check_file needs no
    EngineRequest, and parallel lists of untracked objects keep the garbage collector idle.
    """

    __slots__ = ("items", "line_nos", "raws", "roles")

    def __init__(self) -> None:
        self.items: list[FastChatLine | CheckedLine] = []
        self.line_nos: list[int] = []
        self.raws: list[bytes] = []
        self.roles: list[tuple[str, ...] | None] = []

    def __len__(self) -> int:
        return len(self.items)

    def checked_lines(self, defaults: JobDefaults) -> Iterator[CheckedLine]:
        """The batch as :class:`CheckedLine` objects, requests built."""
        for item, line_no, raw, roles in zip(
            self.items, self.line_nos, self.raws, self.roles, strict=True
        ):
            if roles is None:
                yield item
            else:
                yield CheckedLine(
                    line_no, item.custom_id, fast_chat_request(item, defaults), [], raw
                )


class _Scanner:
    """Checks lines in order and names repeated ids (keeping 8-byte hashes, not ids)."""

    def __init__(self, defaults: JobDefaults | None) -> None:
        self.defaults = defaults or JobDefaults()
        self.first_line_of: dict[int, int] = {}
        self.bom = False
        self.crlf = False
        self.bytes_read = 0
        # Set by check_file when no tokens are counted: the scanner then folds each line of
        # the common shape into these counts at once and keeps no object of it (keeping
        # decoded lines alive costs more memory traffic than the whole rest of the check).
        self.shapes: dict[tuple, int] | None = None
        self.default_lines: list[int] = []
        # Set in a helper process that checks a later part of the file: its ids and their
        # first lines there, so the parent can find ids repeated across parts.
        self.ids: list[str] | None = None
        self.id_lines = array("L")

    def _repeat(self, line_no: int, cid: str) -> Problem | None:
        # A 64-bit hash: two different ids collide with odds of about 1e-8 in a million
        # lines, and a dict of ints stays far below the memory target.
        key = hash(cid)
        first = self.first_line_of.get(key)
        if first is None:
            self.first_line_of[key] = line_no
            if self.ids is not None:
                self.ids.append(cid)
                self.id_lines.append(line_no)
            return None
        message = f"custom_id {cid!r} repeats line {first}; ids must be unique"
        return Problem(line_no, "error", message, cid, DUPLICATE_ID, "custom_id")

    def batches(
        self,
        handle: BinaryIO,
        size: int = BATCH_LINES,
        first_line: int = 1,
        end: int | None = None,
    ) -> Iterator[_Batch]:
        """Yields the file's non-blank lines, checked, in batches of up to ``size``.

        Reading starts where ``handle`` stands (line number ``first_line``) and stops at
        byte ``end`` (a line start), or at the end of the file.

        This is the hot loop of a large check: it stays lean on purpose (no calls on the
        happy path beyond the decoder).
        """
        defaults = self.defaults
        first_line_of, ids, id_lines = self.first_line_of, self.ids, self.id_lines
        end = sys.maxsize if end is None else end
        decode, decode_errors, turns = FAST_DECODER.decode, FAST_DECODE_ERRORS, PLAIN_TURNS
        shapes, default_lines, defaulted_of = self.shapes, self.default_lines, DEFAULTED
        default_max, default_t, default_p = (
            defaults.max_tokens,
            defaults.temperature,
            defaults.top_p,
        )
        batch = _Batch()
        items, line_nos, raws, roles_of = batch.items, batch.line_nos, batch.raws, batch.roles
        position = handle.tell()
        for line_no, raw in enumerate(handle, start=first_line):
            offset = position
            if offset >= end:
                break
            position += len(raw)
            if len(items) >= size:
                self.bytes_read = offset
                yield batch
                batch = _Batch()
                items, line_nos, raws, roles_of = (
                    batch.items,
                    batch.line_nos,
                    batch.raws,
                    batch.roles,
                )
            if line_no == 1 or raw[:1] != b"{":  # the usual line goes straight to the decoder
                if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw, offset, self.bom = raw[3:], offset + 3, True
                if raw.endswith(b"\r\n"):
                    self.crlf = True
                if not raw.strip():
                    continue
            try:
                fast = decode(raw)  # JSON allows the line ending: raw keeps it
            except decode_errors:
                fast = None
            if fast is not None:
                key = tuple([m.role for m in fast.body.messages])
                roles = turns[key] if key in turns else plain_turns(key)
                cid = fast.custom_id
                if roles and cid and not cid[0].isspace() and (raw.isascii() or is_utf8(raw)):
                    line_nos.append(line_no)
                    raws.append(raw)
                    key = hash(cid)
                    if key not in first_line_of:
                        first_line_of[key] = line_no
                        if ids is not None:
                            ids.append(cid)
                            id_lines.append(line_no)
                        if shapes is None:
                            items.append(fast)
                            roles_of.append(roles)
                            continue
                        # What _Summary.add_batch does for such a line, inlined for speed.
                        body = fast.body
                        max_tokens = body.max_completion_tokens or body.max_tokens
                        temperature, top_p = body.temperature, body.top_p
                        defaulted = defaulted_of[
                            max_tokens is None, temperature is None, top_p is None
                        ]
                        if defaulted:
                            max_tokens = default_max if max_tokens is None else max_tokens
                            temperature = default_t if temperature is None else temperature
                            top_p = default_p if top_p is None else top_p
                            if "max_tokens" in defaulted and len(default_lines) < LISTED_LINES:
                                default_lines.append(line_no)
                        shape = (
                            True,
                            CHAT_URL,
                            body.model,
                            roles,
                            max_tokens,
                            body.n or 1,
                            temperature,
                            top_p,
                            defaulted,
                        )
                        shapes[shape] = shapes.get(shape, 0) + 1
                        items.append(None)
                        roles_of.append(None)
                        continue
                    request = fast_chat_request(fast, defaults)
                    checked = CheckedLine(line_no, cid, request, [], raw)
                    checked.problems.append(self._repeat(line_no, cid))
                    items.append(checked)
                    roles_of.append(None)
                    continue
            raw = raw.rstrip(b"\r\n")
            if raw.endswith(b"\r"):  # a lone CR before the newline
                raw = raw[:-1]
            checked = _check_raw(line_no, raw, offset, defaults)
            checked.raw = raw
            if checked.custom_id is not None:
                repeat = self._repeat(line_no, checked.custom_id)
                if repeat is not None:
                    checked.problems.insert(0, repeat)
            items.append(checked)
            line_nos.append(line_no)
            raws.append(raw)
            roles_of.append(None)
        self.bytes_read = min(position, end)
        if items:
            yield batch

    def lines(self, handle: BinaryIO) -> Iterator[CheckedLine]:
        """Yields a :class:`CheckedLine` (with its request) per non-blank line."""
        for batch in self.batches(handle, 256):
            yield from batch.checked_lines(self.defaults)


def scan(path: str | Path, defaults: JobDefaults | None = None) -> Iterator[CheckedLine]:
    """Checks every non-blank line of a batch file in order, duplicates included."""
    with Path(path).open("rb") as handle:
        yield from _Scanner(defaults).lines(handle)


# -- the whole file ---------------------------------------------------------------------------


def resolve_model(name: str | None, model_map: dict[str, str], default_folder: str) -> str:
    """The local model folder a body's ``model`` runs on (unmapped names: the default)."""
    return model_map.get(name or "", default_folder) or default_folder


@dataclass
class _TokenCheck:
    """Token counting for the lines of one check, one counter per local model folder."""

    default_folder: str
    model_map: dict[str, str]
    counters: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def counter(self, folder: str) -> Any:
        from core.check.tokens import TokenizerError, load_counter

        if folder in self.counters or folder in self.failed:
            return self.counters.get(folder)
        try:
            counter = load_counter(folder)
        except TokenizerError as exc:
            self.failed[folder] = str(exc)
            return None
        counter.start_file()
        self.counters[folder] = counter
        return counter


def _prompt_of(item: FastChatLine | CheckedLine) -> tuple[str | None, Any, str | None] | None:
    """``(model, messages, prompt)`` of a line that has a request, for token counting."""
    if type(item) is not CheckedLine:
        body = item.body
        return body.model, [{"role": m.role, "content": m.content} for m in body.messages], None
    request = item.request
    if request is None:
        return None
    return request.model, request.messages, request.prompt


class _Summary:
    """Folds checked lines into a :class:`CheckReport`, a batch at a time."""

    def __init__(
        self,
        report: CheckReport,
        defaults: JobDefaults,
        tokens: _TokenCheck | None,
        valid_out: BinaryIO | None,
    ) -> None:
        self.report = report
        self.defaults = defaults
        self.tokens = tokens
        self.valid_out = valid_out
        self.default_lines: list[int] = []
        # (valid, url, model, roles, max_tokens, n, temperature, top_p, defaulted) -> lines:
        # one counter update per line; the distributions are unfolded from it at the end.
        self.shapes: Counter = Counter()

    def _count_tokens(self, batch: _Batch) -> dict[int, tuple[int, int | None] | Problem]:
        """Prompt tokens and context length (or the template's refusal) per batch position."""
        from core.check.tokens import TokenizerError

        tokens = self.tokens
        by_folder: dict[str, list[tuple[int, Any, str | None]]] = {}
        for index, item in enumerate(batch.items):
            prompt = _prompt_of(item)
            if prompt is not None:
                folder = resolve_model(prompt[0], tokens.model_map, tokens.default_folder)
                by_folder.setdefault(folder, []).append((index, prompt[1], prompt[2]))
        counts: dict[int, tuple[int, int | None] | Problem] = {}
        for folder, entries in by_folder.items():
            counter = tokens.counter(folder)
            if counter is None:
                continue
            context = counter.context_length
            if context is not None:  # a prompt far beyond the context is not worth encoding
                # A line holds at least as many bytes as its prompt has characters.
                longest = (context + 1) * counter.max_token_chars
                kept = []
                for entry in entries:
                    if len(batch.raws[entry[0]]) < longest:
                        kept.append(entry)
                        continue
                    bound = counter.lower_bound(entry[1], entry[2])
                    if bound > context:
                        index = entry[0]
                        counts[index] = Problem(
                            batch.line_nos[index],
                            "error",
                            f"the prompt has at least {bound:,} tokens; the model's context is "
                            f"{context:,}: shorten it",
                            batch.items[index].custom_id,
                            CONTEXT_EXCEEDED,
                            "body.messages",
                        )
                    else:
                        kept.append(entry)
                entries = kept
            pairs = [(messages, prompt) for _, messages, prompt in entries]
            try:
                numbers = counter.count_prompts(pairs)
            except TokenizerError:  # a conversation the template refuses: count one by one
                numbers = [self._count_one(counter, pair) for pair in pairs]
            for (index, _, _), number in zip(entries, numbers, strict=True):
                if isinstance(number, str):
                    cid = batch.items[index].custom_id
                    counts[index] = Problem(batch.line_nos[index], "error", number, cid)
                else:
                    counts[index] = (number, counter.context_length)
        return counts

    @staticmethod
    def _count_one(counter: Any, pair: tuple) -> int | str:
        """One prompt's count, or the reason the chat template refused it."""
        from core.check.tokens import TokenizerError

        try:
            return counter.count_prompts([pair])[0]
        except TokenizerError as exc:
            return str(exc)

    @staticmethod
    def _context_problem(
        line_no: int, cid: str | None, max_out: int, prompt: int, context: int | None
    ) -> Problem | None:
        if context is None:
            return None
        if prompt >= context:
            return Problem(
                line_no,
                "error",
                f"the prompt has {prompt} tokens; the model's context is {context}: shorten it "
                f"by at least {prompt - context + 1} tokens",
                cid,
                CONTEXT_EXCEEDED,
                "body.messages",
            )
        if prompt + max_out > context:
            over = prompt + max_out - context
            return Problem(
                line_no,
                "warning",
                f"prompt {prompt} + max output {max_out} tokens exceeds the context of "
                f"{context} by {over}; the answer stops after {context - prompt} tokens "
                f"(set max_tokens to {context - prompt} or shorten the prompt)",
                cid,
                CONTEXT_EXCEEDED,
                "body.max_tokens",
            )
        return None

    def _problem(self, problem: Problem) -> None:
        report = self.report
        if problem.severity == "warning":
            report.warnings += 1
        elif problem.code == DUPLICATE_ID:
            report.duplicates += 1
        elif problem.code == NOT_RUNNABLE:
            report.not_runnable += 1
        report.add(problem)

    def add_batch(self, batch: _Batch) -> None:
        report = self.report
        counts = self._count_tokens(batch) if self.tokens is not None else None
        shapes = self.shapes
        defaults = self.defaults
        for index, item in enumerate(batch.items):
            if item is None:  # counted by the scanner: valid, nothing more to fold in
                if self.valid_out is not None:
                    self.valid_out.write(batch.raws[index].rstrip(b"\r\n") + b"\n")
                continue
            line_no, raw, roles = batch.line_nos[index], batch.raws[index], batch.roles[index]
            counted = counts.get(index) if counts else None
            refused = None
            if type(counted) is Problem:
                refused, counted = counted, None
            if roles is not None:  # the common chat line: no problems so far
                body = item.body
                max_tokens, temperature, top_p, defaulted = fast_chat_settings(body, defaults)
                n = body.n or 1
                valid = True
                if refused is not None:
                    report.over_context += refused.code == CONTEXT_EXCEEDED
                    self._problem(refused)
                    valid = False
                elif counted is not None:
                    problem = self._context_problem(
                        line_no, item.custom_id, max_tokens * n, *counted
                    )
                    if problem is not None:
                        report.over_context += 1
                        self._problem(problem)
                        valid = problem.severity != "error"
                key = (valid, CHAT_URL, body.model, roles, max_tokens, n, temperature, top_p)
                shapes[(*key, defaulted)] += 1
                if not valid:
                    continue
                model = body.model
            else:
                request = item.request
                if refused is not None:
                    report.over_context += refused.code == CONTEXT_EXCEEDED
                    item.problems.append(refused)
                elif counted is not None:
                    sampling = request.sampling
                    problem = self._context_problem(
                        line_no,
                        item.custom_id,
                        sampling["max_tokens"] * sampling.get("n", 1),
                        *counted,
                    )
                    if problem is not None:
                        report.over_context += 1
                        item.problems.append(problem)
                for problem in item.problems:
                    self._problem(problem)
                if request is None:
                    continue
                valid = item.valid
                sampling = request.sampling
                defaulted = request.defaulted
                max_tokens, n = sampling["max_tokens"], sampling.get("n", 1)
                shapes[
                    valid,
                    request.url,
                    request.model,
                    tuple([m["role"] for m in request.messages]),
                    max_tokens,
                    n,
                    sampling["temperature"],
                    sampling["top_p"],
                    defaulted,
                ] += 1
                if not valid:
                    continue
                model = request.model
            if defaulted and len(self.default_lines) < LISTED_LINES and "max_tokens" in defaulted:
                self.default_lines.append(line_no)
            if self.valid_out is not None:
                self.valid_out.write(raw.rstrip(b"\r\n") + b"\n")
            if self.tokens is not None:
                self._add_local(model, max_tokens * n, counted)
        report.lines += len(batch)

    def _add_local(
        self, model: str | None, max_out: int, counted: tuple[int, int | None] | None
    ) -> None:
        """Adds a valid line to its local model's totals and the token histogram."""
        report, tokens = self.report, self.tokens
        folder = resolve_model(model, tokens.model_map, tokens.default_folder)
        local = report.by_local_model.get(folder)
        if local is None:
            local = report.by_local_model[folder] = {
                "folder": folder,
                "name": Path(folder).name,
                "lines": 0,
                "prompt_tokens": 0,
                "max_output_tokens": 0,
            }
        local["lines"] += 1
        local["max_output_tokens"] += max_out
        if counted is not None:
            prompt = counted[0]
            local["prompt_tokens"] += prompt
            report.prompt_tokens += prompt
            report.prompt_tokens_max = max(report.prompt_tokens_max, prompt)
            report.token_histogram[bisect.bisect_right(HISTOGRAM_EDGES, prompt)] += 1

    def _unfold_shapes(self) -> None:
        report = self.report
        effective = {name: Counter() for name in ("max_tokens", "temperature", "top_p")}
        valid_lines = 0
        for shape, lines in self.shapes.items():
            valid, url, model, roles, max_tokens, n, temperature, top_p, defaulted = shape
            report.urls[url] += lines
            report.models[model or ""] += lines
            for role in roles:
                report.roles[role] += lines
            if not valid:
                continue
            valid_lines += lines
            report.max_output_tokens += max_tokens * n * lines
            values = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
            for name, value in values.items():
                source = "job default" if name in defaulted else "body"
                effective[name][f"{value} ({source})"] += lines
            if "max_tokens" in defaulted:
                report.default_max_lines += lines
        report.effective = effective
        report.valid = valid_lines
        report.invalid = report.lines - valid_lines

    def merge(self, part: _Part) -> None:
        """Folds in the summary of a later part of the file, checked by a helper process."""
        report, other = self.report, part.report
        for name in SUMMED_FIELDS:
            setattr(report, name, getattr(report, name) + getattr(other, name))
        report.prompt_tokens_max = max(report.prompt_tokens_max, other.prompt_tokens_max)
        report.token_histogram = [
            a + b for a, b in zip(report.token_histogram, other.token_histogram, strict=True)
        ]
        for problem in other.problems:
            report.add(problem)
        for folder, theirs in other.by_local_model.items():
            zero = dict.fromkeys(("lines", "prompt_tokens", "max_output_tokens"), 0)
            ours = report.by_local_model.setdefault(folder, {**theirs, **zero})
            for name in ("lines", "prompt_tokens", "max_output_tokens"):
                ours[name] += theirs[name]
        self.shapes.update(part.shapes)
        self.default_lines += part.default_lines
        if self.tokens is not None:
            self.tokens.failed.update(part.token_failed)

    def finish(self, bom: bool, crlf: bool) -> None:
        """Adds the file-level notes and unfolds the distributions (call once, at the end)."""
        report = self.report
        self._unfold_shapes()
        notes = []
        if bom:
            notes.append("the file starts with a UTF-8 byte order mark (BOM); it is ignored")
        if crlf:
            notes.append("the file has Windows line endings (CRLF); they are accepted")
        if report.default_max_lines:
            first = sorted(self.default_lines)[:LISTED_LINES]
            listed = ", ".join(str(n) for n in first)
            more = " ..." if report.default_max_lines > len(first) else ""
            lines_set = (
                "1 line sets"
                if report.default_max_lines == 1
                else (f"{report.default_max_lines:,} lines set")
            )
            notes.append(
                f"{lines_set} no max output tokens; the job default "
                f"max_tokens={report.defaults.get('max_tokens')} applies (lines {listed}{more})"
            )
        if self.tokens is not None:
            for folder, reason in self.tokens.failed.items():
                report.token_notes.append(f"prompt tokens not counted for {folder}: {reason}")
            report.tokens_counted = bool(self.tokens.counters)
            report.model_map = {
                name: resolve_model(name, self.tokens.model_map, self.tokens.default_folder)
                for name in report.models
            }
            for folder, local in report.by_local_model.items():
                counter = self.tokens.counter(folder)  # loaded here if only a helper used it
                local["context_length"] = counter.context_length if counter else None
        for note in notes + report.token_notes:
            report.problems.insert(0, Problem(0, "note", note))
        if report.lines == 0 and not report.cancelled:
            message = "the file has no request lines (it is empty or blank)"
            report.add(Problem(0, "error", message, code=EMPTY_FILE))


Progress = Callable[[int, int, int], None]
# Report counters a part of the file adds to the whole.
SUMMED_FIELDS = (
    "lines",
    "warnings",
    "duplicates",
    "not_runnable",
    "over_context",
    "prompt_tokens",
    "problems_dropped",
)
# A file this large is split into byte ranges checked side by side, one process per core.
PARALLEL_CHECK_BYTES = 64 * 2**20
MAX_CHECK_PROCESSES = 4


@dataclass
class _Part:
    """What a helper process found in its byte range of the file (see :func:`check_file`)."""

    report: CheckReport
    shapes: Counter
    default_lines: list[int]
    crlf: bool
    token_failed: dict[str, str]
    ids: bytes  # the range's ids, as a msgpack list
    id_lines: array  # each id's first line in the range


@dataclass
class _Options:
    """The settings every process of one check shares."""

    path: Path
    defaults: JobDefaults
    model_folder: str | None
    model_map: dict[str, str]

    def summary(self, valid_out: BinaryIO | None) -> tuple[_Summary, _Scanner]:
        report = CheckReport(path=str(self.path), defaults=self.defaults.model_dump())
        tokens = _TokenCheck(self.model_folder, dict(self.model_map)) if self.model_folder else None
        summary, scanner = (
            _Summary(report, self.defaults, tokens, valid_out),
            _Scanner(self.defaults),
        )
        if tokens is None:  # nothing is counted per line: the scanner folds lines in itself
            scanner.shapes = summary.shapes
            summary.default_lines = scanner.default_lines
        return summary, scanner


def _check_range(
    options: _Options,
    summary: _Summary,
    scanner: _Scanner,
    start: int,
    end: int,
    first_line: int,
    on_batch: Callable[[int], bool],
) -> bool:
    """Checks the lines from byte ``start`` to ``end`` into ``summary``.

    ``on_batch(bytes_done)`` is called after each batch; the check stops early when it
    returns False. Returns whether the range was checked to its end.
    """
    with options.path.open("rb", buffering=1 << 20) as handle:
        handle.seek(start)
        for batch in scanner.batches(handle, first_line=first_line, end=end):
            summary.add_batch(batch)
            summary.report.bytes_read = scanner.bytes_read - start
            if not on_batch(summary.report.bytes_read):
                return False
    return True


def _lines_before(path: Path, offset: int) -> int:
    """How many lines end before byte ``offset``."""
    lines = 0
    with path.open("rb") as handle:
        while offset > 0:
            block = handle.read(min(offset, 1 << 24))
            if not block:
                break
            lines += block.count(b"\n")
            offset -= len(block)
    return lines


def _split_points(path: Path, size: int, processes: int) -> list[int]:
    """Byte offsets that cut the file into up to ``processes`` ranges at line starts."""
    points = [0]
    with path.open("rb") as handle:
        for k in range(1, processes):
            handle.seek(size * k // processes)
            handle.readline()
            if points[-1] < handle.tell() < size:
                points.append(handle.tell())
    return [*points, size]


def check_part(conn: Any, options: _Options, start: int, end: int, valid_path: str | None) -> None:
    """The work of a helper process (``python -m core.check.helper``): checks one byte range,
    reporting ``(bytes, lines)`` after each batch, then sends its :class:`_Part`."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(Path(valid_path).open("wb")) if valid_path else None
        summary, scanner = options.summary(out)
        scanner.ids = []

        def on_batch(done: int) -> bool:
            conn.send((done, summary.report.lines))
            return True

        first_line = _lines_before(options.path, start) + 1
        _check_range(options, summary, scanner, start, end, first_line, on_batch)
    ids = msgspec.msgpack.encode(scanner.ids)
    scanner.ids = None  # a large list: free it before the part is pickled
    failed = summary.tokens.failed if summary.tokens else {}
    conn.send(
        _Part(
            summary.report,
            summary.shapes,
            summary.default_lines,
            scanner.crlf,
            failed,
            ids,
            scanner.id_lines,
        )
    )


def _helper_env() -> dict[str, str]:
    """This environment, with the project on the import path (for ``-m core...``)."""
    root = str(REPO_ROOT)
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class _Helper:
    """A helper process checking one byte range of the file while this one checks another.

    A plain subprocess (not ``multiprocessing``), so nothing of the caller's ``__main__``
    (a Streamlit page, a user's script) runs again in it. It reports progress and then its
    :class:`_Part` over a pipe; one that fails leaves its range to the caller.
    """

    def __init__(self, options: _Options, start: int, end: int, valid_path: str | None) -> None:
        from multiprocessing.connection import Connection

        self.start, self.end, self.valid_path = start, end, valid_path
        self.done = self.lines = 0
        self.part: _Part | None = None
        read, write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "core.check.helper", str(write)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # a failure shows as the range being checked here
            pass_fds=(write,),
            env=_helper_env(),  # same working folder, so relative paths mean the same
        )
        os.close(write)
        self.conn = Connection(read, writable=False)
        try:
            with self.process.stdin:
                pickle.dump((options, start, end, valid_path), self.process.stdin)
        except OSError:  # it died at once; take() says so
            pass

    def poll(self, timeout: float = 0.0) -> bool:
        """Reads what the helper sent; True once its part (or its end) has arrived."""
        try:
            while self.part is None and self.conn.poll(timeout):
                message = self.conn.recv()
                if isinstance(message, _Part):
                    self.part = message
                else:
                    self.done, self.lines = message
                timeout = 0.0
        except (EOFError, OSError):  # it ended without its part
            return True
        return self.part is not None

    def take(self, wait: Callable[[], bool]) -> _Part | None:
        """The helper's part once it has sent it; None when it failed or ``wait()``, called
        while waiting, returned False."""
        while not self.poll(timeout=0.2):
            if not wait():
                return None
        return self.part

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()
        if self.valid_path is not None:
            Path(self.valid_path).unlink(missing_ok=True)


def _processes(size: int, processes: int | None) -> int:
    if processes is not None:
        return max(1, processes)
    if size < PARALLEL_CHECK_BYTES:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), MAX_CHECK_PROCESSES))


def check_file(
    path: str | Path,
    defaults: JobDefaults | None = None,
    *,
    model_folder: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    valid_out: str | Path | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    processes: int | None = None,
) -> CheckReport:
    """Checks a whole batch file and summarises it, streaming (memory stays flat).

    A large file is cut into byte ranges at line starts, checked side by side: this
    process takes the first, helper processes the others, and their summaries are merged
    in file order. An id repeated across ranges is caught when merging: that range is then
    checked again here, after the ones before it, so each repeat names its first line.

    Args:
        path: the batch JSONL file.
        defaults: the job defaults for fields a body leaves out.
        model_folder: the chosen local model; when given, prompt tokens are counted with
            its tokenizer and chat template and checked against its context length.
        model_map: body ``model`` name -> local model folder; unmapped names use
            ``model_folder``.
        valid_out: when given, the valid lines are written there (same order).
        progress: called as ``progress(bytes_read, total_bytes, lines)`` after each batch.
        cancel: set it to stop early; the report then says ``cancelled``.
        processes: how many processes check the file (default: one per core, up to 4,
            for files of 64 MiB or more; one for smaller files).
    """
    started = time.monotonic()
    options = _Options(
        Path(path),
        defaults or JobDefaults(),
        str(model_folder) if model_folder is not None else None,
        dict(model_map or {}),
    )
    total = options.path.stat().st_size
    points = _split_points(options.path, total, _processes(total, processes))
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(Path(valid_out).open("wb")) if valid_out is not None else None
        summary, scanner = options.summary(out)
        report = summary.report
        helpers: list[_Helper] = []
        for k, (start, end) in enumerate(itertools.pairwise(points[1:])):
            valid_path = f"{valid_out}.part{k + 1}" if valid_out is not None else None
            helpers.append(_Helper(options, start, end, valid_path))
            stack.callback(helpers[-1].close)
        merged = 0  # bytes of the ranges already in the summary
        pending = list(helpers)  # helpers whose part is not in the summary yet

        def on_batch(done: int) -> bool:
            for helper in pending:  # read their progress, so that no helper waits on a full pipe
                helper.poll()
            if progress is not None:
                more_bytes, more_lines = sum(h.done for h in pending), sum(h.lines for h in pending)
                progress(merged + done + more_bytes, total, report.lines + more_lines)
            return cancel is None or not cancel.is_set()

        finished = _check_range(options, summary, scanner, 0, points[1], 1, on_batch)
        merged = points[1]
        for helper in helpers if finished else []:
            part = helper.take(lambda: on_batch(0))
            pending.remove(helper)
            if cancel is not None and cancel.is_set():
                finished = False
                break
            keys = [hash(cid) for cid in msgspec.msgpack.decode(part.ids)] if part else []
            if part is not None and scanner.first_line_of.keys().isdisjoint(keys):
                scanner.first_line_of.update(zip(keys, part.id_lines, strict=True))
                scanner.crlf |= part.crlf
                summary.merge(part)
                report.processes += 1
                if out is not None:
                    with Path(helper.valid_path).open("rb") as piece:
                        shutil.copyfileobj(piece, out, 1 << 20)
            else:  # the helper failed, or an id repeats an earlier range: check it here
                first_line = _lines_before(options.path, helper.start) + 1
                finished = _check_range(
                    options, summary, scanner, helper.start, helper.end, first_line, on_batch
                )
                if not finished:
                    break
            merged = helper.end
        report.cancelled = not finished
        report.bytes_read = total if finished else merged
        summary.finish(scanner.bom, scanner.crlf)
    report.seconds = round(time.monotonic() - started, 3)
    if progress is not None:
        progress(report.bytes_read, total, report.lines)
    return report


class BackgroundCheck:
    """:func:`check_file` in a thread, so a page can poll its progress without blocking.

    Attributes:
        fraction: the share of the file read so far (0 to 1).
        lines: lines checked so far.
        report: the report once done; ``error`` holds the reason when the check failed.
    """

    def __init__(self, path: str | Path, key: str = "", **options: Any) -> None:
        self.path = str(path)
        self.key = key  # what the caller checks against to reuse a running check
        self.fraction = 0.0
        self.lines = 0
        self.report: CheckReport | None = None
        self.error: str | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(options,), name="batch-check", daemon=True
        )
        self._thread.start()

    def _progress(self, done: int, total: int, lines: int) -> None:
        self.fraction = done / total if total else 1.0
        self.lines = lines

    def _run(self, options: dict[str, Any]) -> None:
        try:
            self.report = check_file(
                self.path, progress=self._progress, cancel=self._cancel, **options
            )
        except OSError as exc:
            self.error = f"the file could not be read: {exc}"
        except Exception as exc:  # shown on the page instead of killing the thread silently
            self.error = f"the check stopped on an unexpected error: {exc!r}"

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done


def summary_lines(report: CheckReport) -> list[str]:
    """The report's summary as short lines of text (for the command line)."""

    def counts(counter: dict[str, int]) -> str:
        return ", ".join(
            f"{k or '(none)'} {v}" for k, v in sorted(counter.items(), key=lambda i: -i[1])
        )

    lines = []
    if report.urls:
        lines.append(f"urls: {counts(report.urls)}")
    for name, lines_of in sorted(report.models.items(), key=lambda i: -i[1]):
        local = report.model_map.get(name)
        target = f" -> {local}" if local else ""
        lines.append(f"model {name or '(none)'}: {lines_of} lines{target}")
    if report.roles:
        lines.append(f"roles: {counts(report.roles)}")
    if report.duplicates:
        lines.append(f"duplicate custom_ids: {report.duplicates}")
    for name, counter in report.effective.items():
        if counter:
            lines.append(f"runs with {name}: {counts(counter)}")
    lines.append(f"max output tokens (valid lines): {report.max_output_tokens:,}")
    if report.tokens_counted:
        counted = sum(report.token_histogram)
        mean = report.prompt_tokens / counted if counted else 0
        lines.append(
            f"prompt tokens: {report.prompt_tokens:,} in {counted:,} valid lines "
            f"(mean {mean:.0f}, max {report.prompt_tokens_max:,})"
        )
        bins = [
            f"{label}: {n}"
            for label, n in zip(histogram_labels(), report.token_histogram, strict=True)
            if n
        ]
        lines.append("prompt token histogram: " + ", ".join(bins))
        if report.over_context:
            lines.append(f"lines that do not fit the context: {report.over_context}")
    processes = f" ({report.processes} processes)" if report.processes > 1 else ""
    lines.append(f"checked in {report.seconds:.2f} s{processes}")
    return lines


# Files up to this size are checked while a page waits; larger ones in a BackgroundCheck.
SYNC_CHECK_BYTES = 16 * 2**20


def check_key(path: str | Path, **options: Any) -> str:
    """A key that changes when the file or any check option changes (for caching a report)."""
    import hashlib

    stat = Path(path).stat()
    data = json.dumps(
        [str(path), stat.st_size, stat.st_mtime_ns, options], sort_keys=True, default=str
    )
    return hashlib.blake2b(data.encode(), digest_size=8).hexdigest()
