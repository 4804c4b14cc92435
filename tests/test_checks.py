"""The line-by-line check of a batch file."""

import json

from core.checks import check_file

VALID = {
    "custom_id": "a",
    "method": "POST",
    "url": "/v1/chat/completions",
    "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5},
}


def line(**changes):
    return json.dumps({**VALID, **changes})


def write(tmp_path, *lines, name="batch.jsonl", raw=None):
    path = tmp_path / name
    path.write_bytes(raw if raw is not None else ("\n".join(lines) + "\n").encode())
    return path


def messages_by_line(report):
    return {p.line: p.message for p in report.problems}


def test_a_valid_file_passes(tmp_path):
    report = check_file(write(tmp_path, line(custom_id="a"), line(custom_id="b")))
    assert report.ok
    assert (report.lines, report.valid, report.invalid) == (2, 2, 0)
    assert report.models == {"m": 2}


def test_each_fault_is_reported_on_its_own_line(tmp_path):
    report = check_file(
        write(
            tmp_path,
            line(custom_id="a"),
            '{"custom_id": "b", "method": ',
            json.dumps({k: v for k, v in VALID.items() if k != "custom_id"}),
            line(custom_id="a"),
            line(custom_id="c", url="/v1/embeddings"),
            line(custom_id="d", method="GET"),
            line(custom_id=5),
            line(custom_id="e", body={"messages": [{"role": "user", "content": "x"}]}),
            "[1, 2]",
        )
    )
    found = messages_by_line(report)
    assert report.invalid == 8 and report.valid == 1
    assert found[2].startswith("not valid JSON")
    assert "custom_id is missing" in found[3]
    assert "custom_id 'a' repeats line 1" in found[4]
    assert "url '/v1/embeddings' is not served" in found[5]
    assert "method must be 'POST'" in found[6]
    assert "custom_id must be a string, got int" in found[7]
    assert "body.model is missing" in found[8]
    assert "must be a JSON object, got an array" in found[9]


def test_a_json_array_file_gets_a_hint(tmp_path):
    report = check_file(write(tmp_path, "[", line(), "]"))
    assert "looks like a JSON array" in messages_by_line(report)[1]


def test_blank_lines_bom_and_crlf_are_accepted(tmp_path):
    raw = (
        b"\xef\xbb\xbf" + line().encode() + b"\r\n\r\n" + line(custom_id="b").encode() + b"\r\n\n\n"
    )
    report = check_file(write(tmp_path, raw=raw))
    assert report.ok and report.lines == 2


def test_a_byte_that_is_not_utf8_gets_its_line_and_offset(tmp_path):
    raw = line().encode() + b"\n" + b'{"custom_id": "\xff"}\n'
    report = check_file(write(tmp_path, raw=raw))
    offset = len(line().encode()) + 1 + 15
    assert messages_by_line(report)[2] == (
        f"not UTF-8: byte 0xff at offset 15 (file byte {offset}); save the file as UTF-8"
    )


def test_an_empty_file_says_so(tmp_path):
    for raw in (b"", b"\n\n  \n"):
        report = check_file(write(tmp_path, raw=raw))
        assert not report.ok
        assert report.problems[0].line == 0
        assert "no request lines" in report.problems[0].message


def test_warnings_do_not_make_a_line_invalid(tmp_path):
    body = {**VALID["body"], "frobnicate": 1}
    report = check_file(write(tmp_path, line(body=body)))
    assert report.ok and report.warnings == 1
    assert "body.frobnicate" in report.problems[0].message
