"""Quotas per key or user (issue 41 item 3): a batch beyond one is refused at creation, by
the API with OpenAI's 429 body, by ``core run`` with the same message and a non-zero exit.

Through the pinned openai SDK against the routes in this process (tests/support/api.py),
with no worker started: a created job stays unended, as a queued one does.
"""

from __future__ import annotations

import getpass
import time
from datetime import UTC, datetime
from pathlib import Path

import openai
import pytest

from core.config import data_paths
from core.jobs.folder import create_job
from core.jobs.quotas import Quota, quotas_file, set_quota
from core.schemas import EngineConfig, JobStatus
from tests.support.api import _job_with_status, _walk, assert_openai_error, chats, own, sdk
from tests.support.cli import cli
from tests.support.jobs import request_line

CHAT = "/v1/chat/completions"


def _key_owner(name: str) -> str:
    from core.api.keys import read_keys

    [key] = [k for k in read_keys(data_paths().home) if k.name == name]
    return f"key:{key.identity}"


def _batch(client: openai.OpenAI, lines: int = 2):
    file = client.files.create(file=("a.jsonl", chats(lines)), purpose="batch")
    return client.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")


def _refusal(client: openai.OpenAI, lines: int = 2) -> str:
    with pytest.raises(openai.RateLimitError) as caught:
        _batch(client, lines)
    error = caught.value.response
    body = assert_openai_error(error, 429)
    assert body["code"] == "insufficient_quota"
    assert error.headers["x-should-retry"] == "false"  # the SDK does not send it again
    return body["message"]


def test_a_key_at_its_running_jobs_quota_gets_429_and_another_key_does_not(api, keys, no_worker):
    home = data_paths().home
    set_quota(home, _key_owner("alice"), Quota(running_jobs=1))
    alice, bob = sdk(api, keys["alice"]), sdk(api, keys["bob"])
    first = _batch(alice)

    message = _refusal(alice)
    assert "quota of key 'alice' reached: running jobs: at most 1" in message
    assert "when one of your 1 running jobs ends" in message
    assert [b.id for b in alice.batches.list()] == [first.id]  # nothing of it was kept
    # bob has no quota: as many as he likes
    assert len({_batch(bob).id for _ in range(3)}) == 3
    assert len(no_worker) == 4

    # Its first job ends: the next one is taken.
    job = no_worker[0]
    job.write_status(_walk(JobStatus(total=2, done=2, succeeded=2), "created", "completed"))
    assert _batch(alice).status != "failed"


def test_queued_lines_count_the_lines_not_yet_answered(api, keys, no_worker):
    set_quota(data_paths().home, _key_owner("alice"), Quota(queued_lines=5))
    alice = sdk(api, keys["alice"])
    _batch(alice, 3)
    message = _refusal(alice, 3)
    assert "queued lines: at most 5 lines not yet answered; your jobs have 3" in message
    assert "this batch adds 3; it frees as your running jobs answer 1 more lines" in message
    assert "this batch alone has 6; split it into files of at most 5" in _refusal(alice, 6)
    # Two of the first job's three lines answered: a job of three more lines fits.
    no_worker[0].write_status(_walk(JobStatus(total=3, done=2), "created", "running"))
    _batch(alice, 3)


def _ended(home: Path, model: Path, tokens: tuple[int, int], hours_ago: float):
    status = _walk(JobStatus(total=3, done=3, succeeded=3), "created", "running", "completed")
    status.prompt_tokens, status.completion_tokens = tokens
    ended = time.time() - hours_ago * 3600
    status.finished_at = datetime.fromtimestamp(ended, UTC).isoformat()
    return _job_with_status(home, model, status, [], []), ended


def test_tokens_per_day_count_the_finished_jobs_of_the_last_24_hours(api, keys, model):
    home = data_paths().home
    set_quota(home, _key_owner("alice"), Quota(tokens_per_day=100))
    alice = sdk(api, keys["alice"])
    old, _ = _ended(home, model, (500, 500), hours_ago=25)  # out of the window
    own(old, "alice")
    _ended(home, model, (500, 500), hours_ago=1)  # the CLI user's job: not alice's
    assert _batch(alice).status != "failed"

    recent, ended = _ended(home, model, (70, 50), hours_ago=2)
    own(recent, "alice")
    message = _refusal(alice)
    frees = datetime.fromtimestamp(ended + 24 * 3600, UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert "tokens per day: at most 100 prompt and completion tokens in 24 h" in message
    assert "your jobs used 120 in the last 24 h" in message  # the running batch has none yet
    assert f"it frees at {frees}" in message


def test_no_quota_means_no_limit(api, keys, no_worker):
    home = data_paths().home
    owner = _key_owner("alice")
    set_quota(home, owner, Quota(running_jobs=1))
    set_quota(home, owner, Quota())  # every limit taken away
    alice = sdk(api, keys["alice"])
    assert len({_batch(alice).id for _ in range(3)}) == 3
    assert quotas_file(home).read_text().strip() == "{}"


def test_core_keys_sets_and_shows_quotas_and_core_run_is_refused_by_the_users(
    studio_home, keys, model, tmp_path
):
    assert (
        cli("keys", "quota", "alice").stdout.strip() == "key alice: no quota (nothing is limited)"
    )
    shown = cli("keys", "quota", "alice", "--running-jobs", "2", "--tokens-per-day", "5000")
    assert shown.stdout.strip() == "key alice: running_jobs=2 queued_lines=- tokens_per_day=5000"
    kept = cli("keys", "quota", "alice", "--running-jobs", "none")  # the others stay
    assert kept.stdout.strip() == "key alice: running_jobs=- queued_lines=- tokens_per_day=5000"
    listed = cli("keys", "list").stdout
    assert "quota running_jobs=- queued_lines=- tokens_per_day=5000" in listed
    bad = cli("keys", "quota", "alice", "--queued-lines", "0")
    assert bad.returncode != 0 and "whole number of at least 1, or none" in bad.stderr
    assert cli("keys", "quota", "carol").returncode != 0  # no such key

    me = getpass.getuser()
    assert cli("keys", "quota", "--user", "--running-jobs", "1").stdout.strip() == (
        f"user {me}: running_jobs=1 queued_lines=- tokens_per_day=-"
    )
    assert f"user {me}\tquota running_jobs=1" in cli("keys", "list").stdout
    batch = tmp_path / "in.jsonl"
    batch.write_text(request_line("a", "hi", max_tokens=4) + "\n")
    create_job(batch, data_paths().jobs, EngineConfig(model=str(model)))  # this user's, unended
    refused = cli("run", str(batch), "-o", str(tmp_path / "out.jsonl"), "--model", str(model))
    assert refused.returncode != 0
    assert f"refused: quota of user '{me}' reached: running jobs: at most 1" in refused.stderr
    assert "when one of your 1 running jobs ends" in refused.stderr
    assert not (tmp_path / "out.jsonl").exists()
