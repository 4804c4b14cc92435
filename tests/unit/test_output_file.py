"""Appending result lines durably, repairing a torn last line, naming a damaged one."""

import pytest

from core.jobs.output_file import (
    CorruptLine,
    OutputWriter,
    complete_lines,
    finished_custom_ids,
    repair_torn_tail,
)


def test_written_lines_are_read_back(tmp_path):
    path = tmp_path / "output.jsonl"
    with OutputWriter(path) as writer:
        writer.write([{"custom_id": "a"}, {"custom_id": "b"}])
        writer.write([{"custom_id": "c"}])
    assert finished_custom_ids(path) == {"a", "b", "c"}


def test_a_torn_last_line_is_cut_and_its_request_runs_again(tmp_path):
    path = tmp_path / "output.jsonl"
    path.write_bytes(b'{"custom_id": "a"}\n{"custom_id": "b"}\n{"custom_id": "c", "resp')
    assert finished_custom_ids(path) == {"a", "b"}
    assert repair_torn_tail(path) == len(b'{"custom_id": "c", "resp')
    assert path.read_bytes() == b'{"custom_id": "a"}\n{"custom_id": "b"}\n'
    with OutputWriter(path) as writer:  # reopening repairs too, then appends cleanly
        writer.write([{"custom_id": "c"}])
    assert finished_custom_ids(path) == {"a", "b", "c"}


def test_a_file_that_is_one_torn_line_becomes_empty(tmp_path):
    path = tmp_path / "output.jsonl"
    path.write_bytes(b'{"custom_id": "a"')
    repair_torn_tail(path)
    assert path.read_bytes() == b""


def test_a_file_is_followed_a_bounded_piece_at_a_time(tmp_path):
    from core.jobs.output_file import complete_lines

    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 10 + b'{"long": "' + b"x" * 100 + b'"}\n{"torn"')
    offset, seen = 0, []
    while True:  # 20 bytes at a time: each piece ends on a whole line, the long one too
        raws, after = complete_lines(path, offset, max_bytes=20)
        if after == offset:
            break
        seen, offset = seen + raws, after
    assert len(seen) == 11 and seen[-1].startswith(b'{"long"')
    assert offset == path.stat().st_size - len(b'{"torn"')  # the torn line waits


@pytest.mark.parametrize(
    "damaged",
    [b'{"custom_id": "d\x00\x00\x00', b"\x00" * 40, b"replaced by hand", b"42", b'{"a": "\xff"}'],
)
def test_a_damaged_line_is_named_by_file_and_line_by_every_reader(tmp_path, damaged):
    """One place reads result lines (the ledger, the store, the API's files, the worker):
    a line that is not a JSON object is an error naming its file and line, never left out."""
    path = tmp_path / "output.jsonl"
    lines = [b'{"custom_id": "%d"}' % i for i in range(6)]
    lines[4] = damaged
    path.write_bytes(b"\n".join(lines[:2]) + b"\n\n" + b"\n".join(lines[2:]) + b"\n")
    expected = f"{path} line 6 is not a JSON object"  # the blank line keeps its number
    with pytest.raises(CorruptLine, match="the file was damaged") as caught:
        finished_custom_ids(path)
    assert str(caught.value).startswith(expected) and caught.value.line_no == 6
    _, after = complete_lines(path, 0, max_bytes=20)  # a reader that follows the file...
    with pytest.raises(CorruptLine) as caught:
        while True:  # ...meets it in a later piece, with the same line number
            _, after = complete_lines(path, after, max_bytes=20)
    assert str(caught.value).startswith(expected)
