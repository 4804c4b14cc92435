"""Whose files and batches are: a key's, by its id, never by its name (issue 38, item 5).

Through the pinned openai SDK against the routes in this process (tests/unit/test_api.py's
fixtures: every call needs a key, as from another machine).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import openai
import pytest

from core.api.keys import create_key, keys_file, read_keys, revoke_key
from core.config import data_paths
from core.files import write_atomic
from core.schemas import JobStatus
from tests.support.api import (
    _job_with_status,
    _result,
    _walk,
    batch_file,
    chats,
    sdk,
)
from tests.support.cli import cli

CHAT = "/v1/chat/completions"


def not_found(call) -> bool:
    try:
        call()
    except openai.NotFoundError:
        return True
    return False


def test_a_key_made_with_a_revoked_keys_name_gets_none_of_its_files_or_batches(
    api,
    keys,
    no_worker,
):
    home = data_paths().home
    old = sdk(api, keys["alice"])
    file = old.files.create(file=("a.jsonl", chats(2)), purpose="batch")
    batch = old.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
    bad = old.files.create(file=("bad.jsonl", batch_file('{"custom_id": "x"}')), purpose="batch")
    refused = old.batches.create(input_file_id=bad.id, endpoint=CHAT, completion_window="24h")
    assert refused.status == "failed"
    assert old.batches.retrieve(batch.id).id == batch.id  # kept in memory for the next poll

    revoke_key(home, "alice")
    new = sdk(api, create_key(home, "alice"))

    assert list(new.files.list()) == [] and list(new.batches.list()) == []
    for call in (
        lambda: new.files.retrieve(file.id),
        lambda: new.files.content(file.id),
        lambda: new.files.delete(file.id),
        lambda: new.files.retrieve(f"file-{batch.id}-input"),
        lambda: new.files.content(f"file-{batch.id}-input"),
        lambda: new.batches.retrieve(batch.id),
        lambda: new.batches.cancel(batch.id),
        lambda: new.batches.retrieve(refused.id),
        lambda: new.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h"),
    ):
        assert not_found(call)
    with pytest.raises(openai.AuthenticationError):  # the old key stays refused
        old.files.list()
    # The new key's own work is its own; the old key's stays on disk, untouched.
    mine = new.files.create(file=("b.jsonl", chats(1)), purpose="batch")
    assert [f.id for f in new.files.list()] == [mine.id]
    assert (home / "files" / f"{file.id}.jsonl").is_file()
    assert [j.job_id for j in no_worker] == [batch.id]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def test_work_owned_by_name_before_keys_had_ids_stays_with_that_key_and_no_later_one(
    api,
    keys,
    model,
):
    """A data folder from before ids: keys without an id, and files and jobs that name
    their owner only by name."""
    home = data_paths().home
    hour_ago = time.time() - 3600
    key = create_key(home, "dave")
    records = json.loads(keys_file(home).read_text())
    for record in records:  # as the keys file was written before ids
        del record["id"]
        if record["name"] == "dave":
            record["created_at"] = _iso(hour_ago)
    write_atomic(keys_file(home), json.dumps(records))
    dave = sdk(api, key)

    def upload_before_ids(made_at: float) -> str:
        file = dave.files.create(file=("a.jsonl", chats(1)), purpose="batch")
        path = home / "files" / f"{file.id}.json"
        record = json.loads(path.read_text())
        del record["owner_key"]
        record["created_at"] = int(made_at)
        path.write_text(json.dumps(record))
        return file.id

    his = upload_before_ids(hour_ago + 60)
    older = upload_before_ids(hour_ago - 60)  # before this key was made: another "dave"'s
    ended = _walk(JobStatus(total=3, done=3, succeeded=3), "created", "running", "completed")
    job = _job_with_status(home, model, ended, [_result(f"r{i}", True) for i in range(3)], [])
    spec = json.loads(job.spec_file.read_text())
    del spec["provenance"]["owner_key"]  # a job the API made before ids
    spec["provenance"]["owner"] = "dave"
    job.spec_file.write_text(json.dumps(spec))

    assert {f.id for f in dave.files.list() if f.purpose == "batch"} == {his}
    assert dave.batches.retrieve(job.job_id).status == "completed"
    assert not_found(lambda: dave.files.retrieve(older))
    assert not_found(lambda: sdk(api, keys["bob"]).batches.retrieve(job.job_id))

    revoke_key(home, "dave")
    again = sdk(api, create_key(home, "dave"))
    assert list(again.files.list()) == [] and list(again.batches.list()) == []
    assert not_found(lambda: again.files.content(his))
    assert not_found(lambda: again.batches.retrieve(job.job_id))


def test_making_a_key_with_a_revoked_keys_name_says_it_is_another_key(studio_home: Path):
    assert cli("keys", "create", "erin").returncode == 0
    assert cli("keys", "revoke", "erin").returncode == 0
    assert "erin" not in cli("keys", "list").stdout  # revoked: no longer listed
    made = cli("keys", "create", "erin")
    assert made.returncode == 0, made.stderr
    assert "a key named 'erin' was revoked before" in made.stderr
    assert "does not see that key's files and batches" in made.stderr
    assert [k.name for k in read_keys(data_paths().home)] == ["erin"]
