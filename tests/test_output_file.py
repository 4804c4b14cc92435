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
