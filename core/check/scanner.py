"""Reading a batch file in order: each non-blank line checked (the msgspec fast path for
the common chat shape, the generic path for the rest) and repeated ids named."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator
from math import copysign
from pathlib import Path
from typing import BinaryIO

from core.check.digests import HASHED_BEFORE, RequestDigests, chat_tail, encode_sorted_into
from core.check.fast_path import (
    DEFAULTED,
    FAST_DECODE_ERRORS,
    FAST_DECODER,
    PLAIN_TURNS,
    FastChatLine,
    fast_chat_request,
    is_utf8,
    plain_turns,
)
from core.check.line import check_raw
from core.check.report import DUPLICATE_ID, LISTED_LINES, CheckedLine, Problem
from core.endpoints import CHAT_URL
from core.schemas import JobDefaults

BATCH_LINES = 2048  # lines checked between token counts and progress reports


class Batch:
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


class Scanner:
    """Checks lines in order and names repeated ids (keeping 8-byte hashes, not ids)."""

    def __init__(self, defaults: JobDefaults | None, repeats: bool = True) -> None:
        self.defaults = defaults or JobDefaults()
        # False: repeated ids are not looked for (nor named), and no table of them grows: a
        # reader that knows them already (the worker, from the job's ledger) saves ~100 B a line.
        self.repeats = repeats
        self.first_line_of: dict[int, int] = {}
        self.bom = False
        self.crlf = False
        self.bytes_read = 0
        # Set by check_file when no tokens are counted: the scanner then folds each line of
        # the common shape into these counts at once and keeps no object of it (keeping
        # decoded lines alive costs more memory traffic than the whole rest of the check).
        self.shapes: dict[tuple, int] | None = None
        self.default_lines: list[int] = []
        self.digests: RequestDigests | None = None  # with shapes: the deterministic lines'
        # With shapes: the body.model names whose lines the summary judges (a mapped model
        # that cannot run, an adapter on another base): those lines are kept, not folded.
        self.unfolded: frozenset[str] = frozenset()
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
    ) -> Iterator[Batch]:
        """Yields the file's non-blank lines, checked, in batches of up to ``size``.

        Reading starts where ``handle`` stands (line number ``first_line``) and stops at
        byte ``end`` (a line start), or at the end of the file.

        This is the hot loop of a large check: it stays lean on purpose (no calls on the
        happy path beyond the decoder).
        """
        defaults = self.defaults
        first_line_of, ids, id_lines = self.first_line_of, self.ids, self.id_lines
        repeats = self.repeats
        end = sys.maxsize if end is None else end
        decode, decode_errors, turns = FAST_DECODER.decode, FAST_DECODE_ERRORS, PLAIN_TURNS
        shapes, default_lines, defaulted_of = self.shapes, self.default_lines, DEFAULTED
        unfolded = self.unfolded
        digests, chat_digests = self.digests, {}  # the latter: body.model -> its group
        tails: dict[tuple, bytes] = {}  # by shape: what follows a line's messages
        copy_before, encode_into = HASHED_BEFORE.copy, encode_sorted_into
        hashed = bytearray()  # a line's encoded messages and tail, hashed in one update
        default_max, default_t, default_p = (
            defaults.max_tokens,
            defaults.temperature,
            defaults.top_p,
        )
        batch = Batch()
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
                batch = Batch()
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
                messages = fast.body.messages  # two (an instruction and a turn), most often:
                # a pair is built without the list comprehension's call (0.1 of 0.17 µs)
                if len(messages) == 2:
                    key = (messages[0].role, messages[1].role)
                else:
                    key = tuple([m.role for m in messages])
                roles = turns[key] if key in turns else plain_turns(key)
                cid = fast.custom_id
                if roles and cid and not cid[0].isspace() and (raw.isascii() or is_utf8(raw)):
                    line_nos.append(line_no)
                    raws.append(raw)
                    if not repeats or (key := hash(cid)) not in first_line_of:
                        if repeats:
                            first_line_of[key] = line_no
                            if ids is not None:
                                ids.append(cid)
                                id_lines.append(line_no)
                        if shapes is None or (unfolded and fast.body.model in unfolded):
                            items.append(fast)
                            roles_of.append(roles)
                            continue
                        # What Summary.add_batch does for such a line, inlined for speed.
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
                        seed = body.seed
                        if temperature == 0 or seed is not None:  # its answer is reused
                            # fast_chat_digest inlined: the hash of the encoded messages and
                            # of what follows them, looked up by this shape where no seed or
                            # n adds to it (-0.0 is a shape of 0.0 but encodes apart).
                            n = body.n
                            if seed is None and n is None and copysign(1.0, temperature) > 0:
                                tail = tails.get(shape)
                                if tail is None:
                                    tail = tails[shape] = chat_tail(
                                        max_tokens, temperature, top_p, None, None
                                    )
                            else:
                                tail = chat_tail(max_tokens, temperature, top_p, seed, n)
                            group = chat_digests.get(body.model)
                            if group is None:
                                group = chat_digests[body.model] = digests.group(body.model, False)
                            encode_into(body.messages, hashed)  # resized to fit
                            hashed += tail
                            hasher = copy_before()
                            hasher.update(hashed)
                            group += hasher.digest()
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
            checked = check_raw(line_no, raw, offset, defaults)
            checked.raw = raw
            if checked.custom_id is not None and repeats:
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


def scan(
    path: str | Path, defaults: JobDefaults | None = None, repeats: bool = True
) -> Iterator[CheckedLine]:
    """Checks every non-blank line of a batch file in order, duplicates included (named as
    such unless ``repeats`` is False: see :class:`Scanner`)."""
    with Path(path).open("rb") as handle:
        yield from Scanner(defaults, repeats).lines(handle)
