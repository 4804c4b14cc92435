"""A large file is checked in byte ranges by several processes: the report must be the one a
single process gives, line numbers, repeats across ranges and the valid-lines file included."""

import json
import threading

import psutil
import pytest

from core.check import BackgroundCheck, check_file
from core.config import default_model_dir

MODEL = default_model_dir()


def request(custom_id, content="Summarise the ticket, please.", **body):
    return json.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": content}],
                **body,
            },
        }
    )


def mixed_file(tmp_path, lines=600, repeat_across=True):
    """Valid lines with faults spread over the whole file, so every range gets some."""
    rows = []
    for i in range(lines):
        if i % 97 == 5:
            rows.append("{not json")
        elif i % 89 == 7:
            rows.append("")  # blank lines are skipped but still counted as lines
        elif i % 83 == 3:
            rows.append(request(f"id-{i}", max_tokens=0))  # out of range
        elif i % 71 == 9:
            rows.append(request(f"id-{i}", n=2))  # no max_tokens: the job default applies
        elif i % 61 == 11 and repeat_across:
            rows.append(request(f"id-{i - 50}"))  # repeats an earlier id
        else:
            rows.append(request(f"id-{i}", content=f"Ticket {i}: refund for order #{i * 7}"))
    if repeat_across:
        rows[-3] = request("id-10")  # repeats an id of the first range, from the last one
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(params=["forked", "started"])
def helper_kind(request, monkeypatch):
    """Helpers as copies of this process (the command line's) and as new Python processes
    (a page's, whose process runs threads): both must give the same report."""
    forked = request.param == "forked"
    monkeypatch.setattr("core.check.file_check.fork_helpers", lambda: forked)
    return request.param


def helpers():
    """This process's running check helpers: new ``core.check.helper`` processes, or
    copies of this one (same command line)."""
    found, own = [], psutil.Process().cmdline()
    for child in psutil.Process().children():
        try:
            command = child.cmdline()
            if ("core.check.helper" in command or command == own) and child.status() != "zombie":
                found.append(child)
        except psutil.Error:  # it ended while we looked
            pass
    return found


def comparable(report):
    data = report.to_dict()
    data.pop("seconds")
    data.pop("processes")
    return data


@pytest.mark.parametrize("processes", [2, 3])
def test_ranges_checked_side_by_side_give_the_single_process_report(
    tmp_path, processes, helper_kind
):
    path = mixed_file(tmp_path)
    one = check_file(path, processes=1, valid_out=tmp_path / "one.jsonl")
    many = check_file(path, processes=processes, valid_out=tmp_path / "many.jsonl")
    assert comparable(many) == comparable(one)
    # The last range repeats an id of the first, so this process checked it again.
    assert many.processes == processes - 1
    assert (tmp_path / "many.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    repeats = [p for p in many.problems if "repeats line" in p.message]
    # The id of the first range repeated near the end names its first line (line 11).
    assert any(p.line == 598 and "repeats line 11" in p.message for p in repeats)
    assert many.duplicates == len(repeats) > 1
    assert not list(tmp_path.glob("*.part*")), "helper files are removed"


def test_prompt_tokens_counted_side_by_side_add_up_to_the_single_process_count(
    tmp_path, default_model
):
    path = mixed_file(tmp_path, lines=900, repeat_across=False)
    one = check_file(path, model_folder=MODEL, processes=1)
    two = check_file(path, model_folder=MODEL, processes=2)
    assert one.prompt_tokens > 0
    assert comparable(two) == comparable(one)
    assert two.processes == 2


def test_a_killed_helper_loses_nothing(tmp_path, helper_kind):
    """The parent checks a range itself when its helper dies."""
    # Long enough that a forked helper, which starts at once, still runs at the first batch.
    path = mixed_file(tmp_path, lines=40_000)
    killed = []

    def kill_helpers(done, total, lines):
        for child in helpers():
            if child.pid not in killed:
                killed.append(child.pid)
                child.kill()

    one = check_file(path, processes=1)
    two = check_file(path, processes=2, progress=kill_helpers)
    assert killed, "the helper process was running"
    assert comparable(two) == comparable(one)
    assert two.processes == 1, "this process checked the helper's range"


def test_a_cancelled_parallel_check_says_so_and_stops_its_helpers(tmp_path, helper_kind):
    path = mixed_file(tmp_path, lines=3000)
    cancel = threading.Event()
    cancel.set()
    report = check_file(path, processes=2, cancel=cancel)
    assert report.cancelled
    assert report.lines < 3000
    assert not helpers()


def test_a_background_check_split_over_processes_reports_progress_to_the_end(tmp_path):
    # No id repeats across ranges: such a range is checked again, and progress goes back.
    path = mixed_file(tmp_path, lines=20_000, repeat_across=False)
    seen = []
    task = BackgroundCheck(path, "k", processes=2)
    while not task.wait(0.01):
        seen.append(task.fraction)
    assert task.error is None
    assert comparable(task.report) == comparable(check_file(path, processes=1))
    assert task.fraction == 1.0
    assert task.report.processes == 2
    assert seen == sorted(seen), "progress never goes back"


def test_relative_paths_mean_the_same_file_to_the_helpers(tmp_path, monkeypatch):
    path = mixed_file(tmp_path, repeat_across=False)
    monkeypatch.chdir(tmp_path)
    split = check_file(path.name, processes=2, valid_out="valid.jsonl")
    assert comparable(split) == comparable(check_file(path.name, processes=1))
    assert split.processes == 2
    assert (tmp_path / "valid.jsonl").read_text().count("\n") == split.valid
