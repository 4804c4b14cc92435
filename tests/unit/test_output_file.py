"""Appending result lines durably, and repairing a torn last line."""

from core.jobs.output_file import OutputWriter, finished_custom_ids, repair_torn_tail


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
