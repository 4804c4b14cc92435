"""What the tests split from tests/unit/test_broken_corpus.py by kind share (docs/tests.md)."""

from __future__ import annotations

from pathlib import Path

BROKEN = Path(__file__).parents[1] / "broken"  # tests/broken


# file -> (lines, valid, [(line, severity, part of the message), ...])
EXPECTED: dict[str, tuple[int, int, list[tuple[int, str, str]]]] = {
    "not_json.jsonl": (4, 1, [
        (2, "error", "not valid JSON: Unterminated string starting at column 187 (the line "
                     "ends early"),
        (3, "error", "Extra data at column 206 (more than one JSON value on the line"),
        (4, "error", "(JSON needs double quotes around names and strings)"),
    ]),
    "not_utf8.jsonl": (2, 1, [
        (2, "error", "not UTF-8: byte 0xe9 at offset 146 (file byte 351); save the file as UTF-8"),
    ]),
    "bom_crlf.jsonl": (2, 2, [
        (0, "note", "starts with a UTF-8 byte order mark (BOM); it is ignored"),
        (0, "note", "Windows line endings (CRLF); they are accepted"),
    ]),
    "control_characters.jsonl": (3, 1, [
        (2, "error", "control character NUL (byte 0x00) at offset 161; remove it, or write it "
                     "as \\u0000 inside a string"),
        (3, "error", "control character U+0007 (byte 0x07) at offset 19"),
    ]),
    "custom_ids.jsonl": (9, 2, [
        (1, "error", "custom_id is missing; give each line a unique string id"),
        (2, "error", "custom_id is empty"),
        (3, "error", "custom_id is empty"),
        (4, "error", 'custom_id must be a string, got int (write it as a string: "17")'),
        (5, "error", "custom_id must be a string, got float"),
        (6, "error", "custom_id is missing"),
        (9, "error", "custom_id 'dup' repeats line 7; ids must be unique"),
    ]),
    "envelope.jsonl": (10, 3, [
        (1, "error", "method must be 'POST', got 'GET'"),
        (2, "error", "url '/v1/moderations' is not served; use /v1/chat/completions, "
                     "/v1/completions, /v1/responses, /v1/embeddings"),
        (3, "error", "url is missing"),
        (4, "error", "body is missing or not a JSON object"),
        (5, "error", "body.model is missing"),
        (6, "error", "body.model is missing"),
        (7, "warning", "extra_field is not a field of a batch line; it is ignored"),
        (10, "error", "body.input is missing"),
    ]),
    "messages.jsonl": (10, 1, [
        (1, "error", "body.messages must be a non-empty list of messages"),
        (2, "error", "body.messages must be a non-empty list of messages"),
        (3, "error", "messages[0].role is 'robot'; use one of system, developer, user, assistant"),
        (4, "error", "body.messages has no user message"),
        (5, "error", "ends with an assistant message; end with the user's turn"),
        (6, "error", "messages[0].content must be a string or a list of text parts, got int"),
        (7, "error", "messages[0].content has a 'image_url' part; the model reads text only"),
        (8, "error", "messages[0] (user) has no content"),
        (9, "error", "messages[0].tool_call_id is missing; name the call answered"),
        (10, "warning", "messages[2] is a system message after the conversation started"),
    ]),
    "parameters.jsonl": (9, 0, [
        (1, "error", "body.stream must be false or absent"),
        (2, "error", "body.temperature must be in [0, 2], got 2.5"),
        (3, "error", "body.top_p must be in (0, 1], got 0"),
        (4, "error", "body.top_p must be in (0, 1], got 1.5"),
        (5, "error", "body.max_tokens must be at least 1, got 0"),
        (6, "error", "body.n must be at least 1 and at most 16, got 0"),
        (7, "error", "body.temperature must be a number, got 'hot'"),
        (8, "error", "body.max_tokens must be an integer, got True"),
        (9, "error", "body.tool_choice.function.name 'g' names no tool; the tools are"),
    ]),
    "unknown_fields.jsonl": (2, 2, [
        (1, "warning", "body.frobnicate is not a field the engine knows; it is ignored"),
        (1, "warning", "body.temprature is not a field the engine knows; it is ignored"),
    ]),
    "max_output_missing.jsonl": (2, 2, [
        (0, "note", "1 line sets no max output tokens; the job default max_tokens=256 applies "
                    "(lines 1)"),
    ]),
    "json_array.jsonl": (32, 0, [
        (1, "error", "the file looks like a JSON array: write one JSON object per line"),
    ]),
    "json_array_one_line.jsonl": (1, 0, [
        (1, "error", "a line must be a JSON object, got an array (the file looks like a JSON "
                     "array"),
    ]),
    "not_objects.jsonl": (5, 1, [
        (1, "error", "a line must be a JSON object, got a string"),
        (2, "error", "a line must be a JSON object, got a number"),
        (3, "error", "a line must be a JSON object, got null"),
        (4, "error", "a line must be a JSON object, got a boolean"),
    ]),
    "trailing_blank_lines.jsonl": (2, 2, []),
    "only_blank_lines.jsonl": (0, 0, [
        (0, "error", "the file has no request lines (it is empty or blank)"),
    ]),
    "empty.jsonl": (0, 0, [(0, "error", "the file has no request lines (it is empty or blank)")]),
}  # fmt: skip


# Found only with the model's tokenizer (prompt + max output against its context).
WITH_MODEL = {
    "context_overflow.jsonl": (3, 2, [
        (1, "warning", "exceeds the context of 8,192 by"),
        (2, "error", "tokens; the model's context is 8,192: shorten it by at least"),
    ]),
}  # fmt: skip


def assert_expected(
    problems: list[tuple[int, str, str]], expected: list[tuple[int, str, str]]
) -> None:
    for line, severity, part in expected:
        assert any((line, severity) == (p[0], p[1]) and part in p[2] for p in problems), (
            f"no {severity} on line {line} containing {part!r} in {problems}"
        )
