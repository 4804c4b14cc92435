"""The one JSON reader (core/files.py): every way a file has no JSON value is said, none
escapes as a traceback, and the readers that treat a bad file as absent do."""

from __future__ import annotations

import pytest

from core.check.chat_template import context_length, template_source
from core.files import JsonUnreadable, load_json, read_json, write_json_atomic
from core.jobs.folder import JobFolder, JobUnreadable
from core.run.ray_stats import read_ray_stats


def test_a_written_file_reads_back(tmp_path):
    write_json_atomic(tmp_path / "a.json", {"ü": [1, 2.5, None]})
    assert load_json(tmp_path / "a.json") == {"ü": [1, 2.5, None]}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "a.json is missing"),
        (b'{"a": ', "not valid JSON"),
        (b'{"a": "\xff"}', "not UTF-8 at byte 7"),
        ("folder", "cannot be read"),
    ],
)
def test_each_way_a_file_has_no_value_is_named(tmp_path, content, reason):
    path = tmp_path / "a.json"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(JsonUnreadable) as caught:
        load_json(path)
    assert reason in caught.value.reason
    assert caught.value.missing == (content is None)
    assert read_json(path, "default") == "default"


def test_a_model_folder_whose_configs_are_unreadable_reads_as_having_none(tmp_path):
    """Neither a config that is not UTF-8 nor one that is not a file stops a check."""
    (tmp_path / "tokenizer_config.json").mkdir()
    (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    assert template_source(tmp_path) == (None, {})
    assert context_length(tmp_path) is None


def test_a_damaged_ray_stats_file_reads_as_none(tmp_path):
    """ray_stats.py let a file that is not UTF-8 raise into Monitor."""
    (tmp_path / "ray.json").write_bytes(b"\xff")
    assert read_ray_stats(tmp_path) is None
    (tmp_path / "ray.json").write_text("[1, 2]")  # JSON, but not the stats' object
    assert read_ray_stats(tmp_path) is None


def test_a_damaged_refusals_file_names_the_job_and_the_reason(tmp_path):
    folder = JobFolder(tmp_path / "job1")
    folder.path.mkdir()
    assert folder.read_refusals() == {}  # a job made without refusals
    folder.refusals_file.write_text('{"3": ')
    with pytest.raises(JobUnreadable, match=r"refused\.json: not valid JSON"):
        folder.read_refusals()
    folder.refusals_file.write_text("[]")
    with pytest.raises(JobUnreadable, match=r"refused\.json: not an object"):
        folder.read_refusals()
