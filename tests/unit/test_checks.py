"""The line-by-line check of a batch file."""

import json

from core.check import UNREADABLE, BackgroundCheck, check_file, scan, setting_rows
from core.check.engine_requests import CompletionRequest
from core.config import default_model_dir
from core.schemas import JobDefaults

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
            line(custom_id="c", url="/v1/moderations"),
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
    assert "url '/v1/moderations' is not served" in found[5]
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


# -- the summary, the valid-lines file, the model-aware check --------------------------------


def test_the_summary_counts_urls_models_roles_and_what_lines_run_with(tmp_path):
    system = {"role": "system", "content": "Be brief."}
    report = check_file(
        write(
            tmp_path,
            line(custom_id="a"),
            line(
                custom_id="b",
                body={
                    **VALID["body"],
                    "model": "gpt-4o",
                    "messages": [system, {"role": "user", "content": "x"}],
                },
            ),
            line(
                custom_id="c", body={"model": "m", "messages": [{"role": "user", "content": "y"}]}
            ),
            line(custom_id="c"),
        ),
        JobDefaults(max_tokens=100, temperature=0.5),
    )
    assert (report.lines, report.valid, report.duplicates) == (4, 3, 1)
    # The url table counts the lines that run; the invalid one (the repeated id) apart.
    assert report.urls == {"/v1/chat/completions": 3}
    assert report.invalid_urls == {"/v1/chat/completions": 1}
    assert report.models == {"m": 3, "gpt-4o": 1}
    assert report.roles == {"user": 4, "system": 1}
    assert report.effective["max_tokens"] == {"5 (body)": 2, "100 (job default)": 1}
    assert report.effective["temperature"] == {"0.5 (job default)": 3}
    assert report.max_output_tokens == 5 + 5 + 100
    assert report.problems[0].severity == "note" and "lines 3" in report.problems[0].message


def test_the_summary_counts_every_line_valid_or_not(tmp_path):
    """Issue 58, item 9: lines that made no request (a missing id, a bad role, a cut-off
    line, an embeddings line without input) were left out of the url, model and role
    counts, so the url table said 1 invalid line of 5."""
    report = check_file(
        write(
            tmp_path,
            line(custom_id="a"),
            line(custom_id="b", body={"model": "m", "messages": [{"role": "robot"}]}),
            json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": VALID["body"]}),
            line(custom_id="e", url="/v1/embeddings", body={"model": "emb"}),
            line(custom_id="a"),
        )
    )
    assert (report.lines, report.valid, report.invalid) == (5, 1, 4)
    assert report.urls == {"/v1/chat/completions": 1}
    assert report.invalid_urls == {"/v1/chat/completions": 3, "/v1/embeddings": 1}
    assert sum(report.urls.values()) + sum(report.invalid_urls.values()) == report.lines
    assert report.models == {"m": 4, "emb": 1}
    assert report.roles == {"user": 3, "robot": 1}


def test_a_line_that_is_no_json_object_is_counted_as_such(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(VALID) + "\n" + json.dumps(VALID)[:40] + "\n[1]\n")
    report = check_file(path)
    assert report.invalid_urls == {UNREADABLE: 2}
    assert report.models == {"m": 1, UNREADABLE: 2}


def test_the_valid_lines_file_holds_exactly_the_valid_lines(tmp_path):
    path = write(
        tmp_path, line(custom_id="a"), "not json", line(custom_id="a"), line(custom_id="b")
    )
    report = check_file(path, valid_out=tmp_path / "valid.jsonl")
    kept = [json.loads(x)["custom_id"] for x in (tmp_path / "valid.jsonl").read_text().splitlines()]
    assert kept == ["a", "b"] and report.valid == 2
    assert check_file(tmp_path / "valid.jsonl").ok


def test_scan_keeps_what_the_worker_and_the_store_read(tmp_path):
    completions = json.dumps(
        {**VALID, "custom_id": "p", "url": "/v1/completions", "body": {"model": "m", "prompt": "x"}}
    )
    lines = list(scan(write(tmp_path, line(custom_id="a"), completions, line(custom_id="a"))))
    assert [(c.line_no, c.custom_id, c.valid) for c in lines] == [
        (1, "a", True),
        (2, "p", True),
        (3, "a", False),
    ]
    assert lines[0].request.messages == [{"role": "user", "content": "Hi"}]
    assert lines[0].request.model == "m" and lines[0].request.sampling["max_tokens"] == 5
    assert lines[1].request.prompt == "x" and not hasattr(lines[1].request, "messages")
    assert isinstance(lines[1].request, CompletionRequest)


def test_prompt_tokens_are_counted_per_mapped_model(tmp_path, default_model):
    other = write(
        tmp_path, line(custom_id="a"), line(custom_id="b", body={**VALID["body"], "model": "x"})
    )
    # A model folder without a tokenizer (a folder that is gone refuses its lines instead:
    # tests/unit/test_adapters.py).
    untokenized = tmp_path / "untokenized"
    untokenized.mkdir()
    (untokenized / "config.json").write_text("{}")
    report = check_file(other, model_folder=default_model_dir(), model_map={"x": str(untokenized)})
    assert report.model_map == {"m": str(default_model_dir()), "x": str(untokenized)}
    assert report.prompt_tokens > 0 and sum(report.token_histogram) == 1
    assert "prompt tokens not counted for" in report.token_notes[0]
    assert set(report.by_local_model) == {str(default_model_dir()), str(untokenized)}


def test_a_background_check_reports_progress_and_can_be_stopped(tmp_path):
    path = write(tmp_path, *[line(custom_id=str(i)) for i in range(20_000)])
    task = BackgroundCheck(path, "k")
    assert task.wait(60) and task.report.lines == 20_000 and task.fraction == 1.0
    stopped = BackgroundCheck(path, "k2")
    stopped.cancel()
    assert stopped.wait(60)
    assert stopped.report.cancelled and not stopped.report.ok


def test_setting_rows_list_each_fields_values_most_lines_first(tmp_path):
    report = check_file(
        write(
            tmp_path,
            line(custom_id="a"),
            line(
                custom_id="b", body={"model": "m", "messages": [{"role": "user", "content": "y"}]}
            ),
            line(
                custom_id="c", body={"model": "m", "messages": [{"role": "user", "content": "z"}]}
            ),
        ),
        JobDefaults(max_tokens=100),
    )
    rows = [row for row in setting_rows(report) if row["field"] == "max_tokens"]
    assert rows == [
        {"field": "max_tokens", "value (source)": "100 (job default)", "lines": 2},
        {"field": "max_tokens", "value (source)": "5 (body)", "lines": 1},
    ]
