"""The Batch API's rules, through the pinned openai SDK and raw HTTP, in this process.

The routes are served by Starlette's test client, whose caller is not on loopback: every
call needs a key, as from another machine. The engine never runs here (``no_worker``);
tests/unit/test_api_server.py drives a running ``core serve`` and the real engine.
"""

from __future__ import annotations

import io
import json
import os
import time

import openai
import pytest
from openai.types import Batch, FileDeleted, FileObject, Model

from core.api.keys import read_keys, revoke_key
from core.cli.common import model_map_of
from core.config import data_paths
from core.jobs.folder import JobFolder
from core.model_names import names_from_rows, read_names, write_names
from core.schemas import JobStatus
from tests.support.api import (
    _ended_batch,
    _job_with_status,
    _result,
    _walk,
    assert_openai_error,
    batch_file,
    chats,
    form,
    own,
    sdk,
)
from tests.support.cli import cli
from tests.support.jobs import finished_job, request_line


def test_files_upload_retrieve_download_and_delete_as_the_sdk_reads_them(api, keys):
    client = sdk(api, keys["alice"])
    content = chats(3).getvalue()
    uploaded = client.files.create(file=("tickets.jsonl", io.BytesIO(content)), purpose="batch")
    assert isinstance(uploaded, FileObject)
    assert (uploaded.filename, uploaded.bytes, uploaded.purpose) == (
        "tickets.jsonl",
        len(content),
        "batch",
    )
    assert client.files.retrieve(uploaded.id) == uploaded
    assert client.files.content(uploaded.id).content == content
    assert [f.id for f in client.files.list()] == [uploaded.id]
    deleted = client.files.delete(uploaded.id)
    assert isinstance(deleted, FileDeleted) and deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)
    assert list(client.files.list()) == []


def test_files_list_in_pages_newest_first_with_purpose_and_order(api, keys):
    client = sdk(api, keys["alice"])
    made = [
        client.files.create(file=(f"f{i}.jsonl", chats(1)), purpose="batch").id for i in range(5)
    ]
    made.append(client.files.create(file=("u.jsonl", chats(1)), purpose="user_data").id)
    first = client.files.list(limit=2)
    assert first.has_more and len(first.data) == 2
    everything = [f.id for f in client.files.list(limit=2)]  # the SDK follows `after`
    assert sorted(everything) == sorted(made) and len(everything) == 6
    created = [client.files.retrieve(i).created_at for i in everything]
    assert created == sorted(created, reverse=True)
    assert [f.id for f in client.files.list(purpose="user_data")] == [made[-1]]
    ascending = [f.id for f in client.files.list(order="asc")]
    assert ascending == list(reversed(everything))


def test_a_batch_is_a_job_made_by_submit_with_its_metadata_and_owner(api, keys, no_worker):
    client = sdk(api, keys["alice"])
    file = client.files.create(file=("tickets.jsonl", chats(3)), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"team": "support"},
    )
    assert isinstance(batch, Batch)
    assert batch.status == "validating" and batch.input_file_id == file.id
    assert batch.metadata == {"team": "support"}
    assert batch.request_counts.total == 3
    assert batch.output_file_id is None and batch.error_file_id is None
    job = JobFolder(data_paths().jobs / batch.id)
    spec = job.read_spec()
    assert [j.job_id for j in no_worker] == [batch.id]  # its worker was started
    assert spec.provenance["owner"] == "alice" and spec.metadata == {"team": "support"}
    assert job.name == "tickets"  # named from its file, as the app names jobs
    assert client.batches.retrieve(batch.id) == batch
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_metadata_reuse_turns_it_on_or_off_over_the_default_and_other_values_are_refused(
    api, keys, no_worker, monkeypatch
):
    client = sdk(api, keys["alice"])
    file = client.files.create(file=("tickets.jsonl", chats(2)), purpose="batch")
    create = dict(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    monkeypatch.setenv("BATCH_STUDIO_REUSE", "1")  # the studio's default, as users have it
    default_on = client.batches.create(**create)
    off = client.batches.create(**create, metadata={"reuse": "FALSE"})
    monkeypatch.setenv("BATCH_STUDIO_REUSE", "0")  # as the tests have it
    default_off = client.batches.create(**create)
    on = client.batches.create(**create, metadata={"reuse": " true"})
    made = (default_on, off, default_off, on)
    reuse = [JobFolder(data_paths().jobs / b.id).read_spec().reuse for b in made]
    assert reuse == [True, False, False, True]
    assert off.metadata == {"reuse": "FALSE"}  # echoed as sent
    with pytest.raises(openai.BadRequestError, match=r"metadata\.reuse is 'true'"):
        client.batches.create(**create, metadata={"reuse": "sometimes"})


def test_a_file_with_invalid_lines_fails_the_batch_at_validation_naming_each_line(api, keys):
    client = sdk(api, keys["alice"])
    bad = batch_file(
        request_line("a", "fine"),
        "this is not JSON",
        json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions"}),
    )
    file = client.files.create(file=("bad.jsonl", bad), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "failed" and batch.failed_at
    lines = [e.line for e in batch.errors.data]
    assert lines == [2, 3]
    assert all(e.code and e.message for e in batch.errors.data)
    assert not list(data_paths().jobs.iterdir())  # all or nothing: no job, no line ran
    assert client.batches.retrieve(batch.id) == batch
    assert batch.id in [b.id for b in client.batches.list()]


def test_a_line_whose_url_is_not_the_batch_endpoint_fails_the_batch(api, keys):
    client = sdk(api, keys["alice"])
    embedding = json.dumps(
        {
            "custom_id": "e",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "m", "input": "x"},
        }
    )
    file = client.files.create(
        file=("mixed.jsonl", batch_file(request_line("a", "hi"), embedding)), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "failed"
    assert [(e.line, e.param, e.code) for e in batch.errors.data] == [(2, "url", "mismatched_url")]
    assert "/v1/embeddings" in batch.errors.data[0].message


def test_every_job_is_a_batch_in_openai_terms_with_its_result_files(api, keys, studio_home, model):
    client = sdk(api, keys["alice"])
    home = data_paths().home
    waiting = _job_with_status(home, model, _walk(JobStatus(), "created", "queued"), [], [])
    done = _walk(
        JobStatus(total=3, done=3, succeeded=3),
        "created",
        "queued",
        "loading",
        "running",
        "completed",
    )
    completed = _job_with_status(home, model, done, [_result(f"r{i}", True) for i in range(3)], [])
    stopped = _walk(
        JobStatus(total=3, done=3, succeeded=1, failed=2),
        "created",
        "queued",
        "running",
        "cancelling",
        "cancelled",
    )
    cancelled = _job_with_status(
        home, model, stopped, [_result("r0", True)], [_result("r1", False), _result("r2", False)]
    )
    running = _walk(
        JobStatus(total=3, done=1, succeeded=1), "created", "queued", "loading", "running"
    )
    live = _job_with_status(home, model, running, [_result("r0", True)], [])
    # The CLI's jobs belong to this machine's user: alice's key does not see them...
    assert list(client.batches.list()) == []
    # ...and this machine's user (no key, on loopback: the real server's test) sees all;
    # here, the owner is made alice's so the key may read them.
    for job in (waiting, completed, cancelled, live):
        own(job, "alice")
    by_id = {b.id: b for b in client.batches.list()}
    assert list(by_id) == sorted(by_id, reverse=True)  # newest first
    assert by_id[waiting.job_id].status == "validating"
    assert "waiting" not in by_id[waiting.job_id].metadata  # queued, nothing said yet
    assert by_id[live.job_id].status == "in_progress" and by_id[live.job_id].in_progress_at
    assert by_id[live.job_id].request_counts.completed == 1
    assert by_id[live.job_id].output_file_id is None  # not until it ends
    done_batch = by_id[completed.job_id]
    assert done_batch.status == "completed"
    assert done_batch.in_progress_at <= done_batch.finalizing_at <= done_batch.completed_at
    assert done_batch.error_file_id is None  # nothing in it: absent, never ""
    output = client.files.content(done_batch.output_file_id).text.splitlines()
    assert [json.loads(line)["custom_id"] for line in output] == ["r0", "r1", "r2"]
    assert client.files.retrieve(done_batch.output_file_id).purpose == "batch_output"
    gone = by_id[cancelled.job_id]
    assert gone.status == "cancelled" and gone.cancelling_at and gone.cancelled_at
    assert len(client.files.content(gone.output_file_id).text.splitlines()) == 1
    assert len(client.files.content(gone.error_file_id).text.splitlines()) == 2
    assert done_batch.input_file_id == f"file-{completed.job_id}-input"
    assert client.files.content(done_batch.input_file_id).content == completed.input.read_bytes()
    assert by_id[completed.job_id].metadata == {"name": "from the CLI"}


def test_a_key_sees_only_its_own_files_and_batches(api, keys, no_worker):
    alice, bob = sdk(api, keys["alice"]), sdk(api, keys["bob"])
    file = alice.files.create(file=("a.jsonl", chats(2)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for call in (
        lambda: bob.files.retrieve(file.id),
        lambda: bob.files.content(file.id),
        lambda: bob.files.delete(file.id),
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
        lambda: bob.files.retrieve(batch.output_file_id or f"file-{batch.id}-input"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert list(bob.files.list()) == [] and list(bob.batches.list()) == []
    assert [b.id for b in alice.batches.list()] == [batch.id]


def test_a_missing_wrong_or_revoked_key_gets_401_with_openai_body(api, keys):
    for key in ("", "bs-not-a-key"):
        reply = api.get("/v1/batches", headers={"Authorization": f"Bearer {key}"} if key else {})
        assert assert_openai_error(reply, 401)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        sdk(api, "bs-wrong").batches.list()
    assert sdk(api, keys["bob"]).models.list()
    revoke_key(data_paths().home, "bob")
    with pytest.raises(openai.AuthenticationError):
        sdk(api, keys["bob"]).models.list()
    assert [r.name for r in read_keys(data_paths().home)] == ["alice"]


def test_models_lists_the_model_folders(api, keys, default_model):
    models = list(sdk(api, keys["alice"]).models.list())
    assert all(isinstance(m, Model) for m in models)
    assert default_model.name in [m.id for m in models]
    assert sdk(api, keys["alice"]).models.retrieve(default_model.name).id == default_model.name
    with pytest.raises(openai.NotFoundError):
        sdk(api, keys["alice"]).models.retrieve("gpt-99")


def test_models_lists_the_names_mapped_to_folders_and_batches_run_there(
    api, keys, no_worker, default_model, embedding_model
):
    home = data_paths().home
    write_names({"gpt-4o-mini": str(default_model), "text-embedding-3-small": str(embedding_model)})
    client = sdk(api, keys["alice"])
    models = {m.id: m for m in client.models.list()}
    assert all(isinstance(m, Model) and m.owned_by == "batch-studio" for m in models.values())
    assert {default_model.name, embedding_model.name, "gpt-4o-mini"} <= set(models)
    assert "text-embedding-3-small" in models
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"
    # The batch, the CLI's check and the inbox read the same mapping.
    file = client.files.create(
        file=("m.jsonl", batch_file(request_line("a", "Hi", model="gpt-4o-mini"))),
        purpose="batch",
    )
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    spec = JobFolder(data_paths().jobs / batch.id).read_spec()
    assert spec.model_map["gpt-4o-mini"] == str(default_model)
    assert model_map_of([])["gpt-4o-mini"] == str(default_model)
    assert model_map_of([f"gpt-4o-mini={embedding_model}"])["gpt-4o-mini"] == str(embedding_model)
    assert read_names(home) == {
        "gpt-4o-mini": str(default_model),
        "text-embedding-3-small": str(embedding_model),
    }


def test_a_model_name_must_map_to_a_model_folder_and_not_shadow_one(default_model, tmp_path):
    with pytest.raises(ValueError, match="not a model folder"):
        write_names({"gpt-4o": str(tmp_path)})
    with pytest.raises(ValueError, match="own name"):
        write_names({default_model.name: str(default_model)})
    with pytest.raises(ValueError, match="1 to"):
        write_names({"  ": str(default_model)})
    assert read_names() == {}  # nothing kept from a refused save


def test_the_settings_tables_rows_become_names_and_an_empty_cell_stays_empty() -> None:
    folders = {"SmolLM2": "/models/SmolLM2"}
    rows = [
        {"name": "gpt-4o-mini", "model": "SmolLM2"},
        {"name": float("nan"), "model": "SmolLM2"},  # a name left empty
        {"name": "gpt-4o", "model": float("nan")},  # a model left empty
    ]
    assert names_from_rows(rows, folders) == {
        "gpt-4o-mini": "/models/SmolLM2",
        "": "/models/SmolLM2",
        "gpt-4o": "",
    }


GOOD = {"input_file_id": "F", "endpoint": "/v1/chat/completions", "completion_window": "24h"}
BAD_CREATES = [
    b"not json",
    b"[1, 2]",
    b"{}",
    b"\xff\xfe\x00",
    *(
        json.dumps({**GOOD, **change}).encode()
        for change in (
            {"input_file_id": "file-" + "0" * 24},
            {"input_file_id": 5},
            {"input_file_id": "../../etc/passwd"},
            {"endpoint": "/v1/images"},
            {"endpoint": ["x"]},
            {"completion_window": "1h"},
            {"metadata": "x"},
            {"metadata": {"k": 1}},
            {"metadata": {"k": "v" * 513}},
            {"metadata": {f"k{i}": "v" for i in range(17)}},
            {"output_expires_after": {"anchor": "x"}},
            {"output_expires_after": {"anchor": "created_at", "seconds": 60}},
            {"output_expires_after": {"anchor": "created_at", "seconds": True}},
            {"output_expires_after": "24h"},
        )
    ),
]


def test_no_request_gets_a_500_whatever_the_body_form_or_id(api, keys):
    auth = {"Authorization": f"Bearer {keys['alice']}"}
    file_id = sdk(api, keys["alice"]).files.create(file=("a.jsonl", chats(1)), purpose="batch").id
    replies = [
        api.post("/v1/batches", content=body.replace(b'"F"', f'"{file_id}"'.encode()), headers=auth)
        for body in BAD_CREATES
    ]
    broken = data_paths().jobs / "job_20260101_000000_abcdef"
    broken.mkdir()
    (broken / "job.json").write_text("{not json")
    multipart = "multipart/form-data; boundary=b0undary"
    forms = [
        (b"plain body", "text/plain"),
        (b"--b0undary\r\ngarbage", multipart),
        (b"", "multipart/form-data"),
        (form(("purpose", None, b"batch")), multipart),
        (form(("file", "../../x.jsonl", b"{}")), multipart),
        (form(("purpose", None, b"fine-tune"), ("file", "a", b"{}")), multipart),
        (form(("purpose", None, b"batch"), ("file", "a", b"{}"), ("file", "b", b"{}")), multipart),
    ]
    replies += [
        api.post("/v1/files", content=body, headers={**auth, "Content-Type": kind})
        for body, kind in forms
    ]
    for weird in (
        "..%2F..%2Fetc%2Fpasswd",
        "file-" + "0" * 24,
        "job_..",
        "%00",
        "é" * 300,
        "job_20260101_000000_abcdef",  # a job folder whose job.json is broken
        "file-job_20260101_000000_abcdef-output",
        "file-job_20260101_000000_abcdef-input",
    ):
        replies += [
            api.get(f"/v1/files/{weird}", headers=auth),
            api.get(f"/v1/files/{weird}/content", headers=auth),
            api.delete(f"/v1/files/{weird}", headers=auth),
            api.get(f"/v1/batches/{weird}", headers=auth),
            api.post(f"/v1/batches/{weird}/cancel", headers=auth),
        ]
    replies += [
        api.get("/v1/batches?limit=0", headers=auth),
        api.get("/v1/batches?limit=abc", headers=auth),
        api.get("/v1/batches?after=nothing", headers=auth),
        api.get("/v1/files?order=sideways", headers=auth),
        api.put("/v1/batches", headers=auth),
        api.get("/v1/chat/completions", headers=auth),
    ]
    assert api.get("/v1/batches", headers=auth).json()["data"] == []  # the broken job: skipped
    for reply in replies:
        assert reply.status_code in (400, 404), (reply.request.url, reply.text)
        assert_openai_error(reply, reply.status_code)
    # Nothing half-written is left behind by the refused uploads.
    files = sorted(p.name for p in (data_paths().home / "files").iterdir())
    assert files == [f"{file_id}.json", f"{file_id}.jsonl"]


def test_an_upload_over_the_size_limit_is_refused_and_nothing_is_kept(api, keys, monkeypatch):
    monkeypatch.setenv("BATCH_STUDIO_API_MAX_UPLOAD_MB", "0.01")  # 10,000 bytes
    client = sdk(api, keys["alice"])
    assert client.files.create(file=("small.jsonl", chats(10)), purpose="batch").bytes < 10_000
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("big.jsonl", chats(400)), purpose="batch")
    assert refused.value.code == "file_too_large"
    assert "BATCH_STUDIO_API_MAX_UPLOAD_MB" in refused.value.message
    assert len(list(client.files.list())) == 1
    assert len(list((data_paths().home / "files").iterdir())) == 2


def test_keys_are_made_listed_and_revoked_from_the_command_line_storing_only_a_hash(studio_home):
    made = cli("keys", "create", "carol")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("bs-") and len(key) > 40
    stored = (data_paths().home / "api_keys.json").read_text()
    assert key not in stored and "carol" in stored
    assert cli("keys", "create", "carol").returncode == 2  # one key per name
    assert cli("keys", "create", "not a name").returncode == 2
    listed = cli("keys", "list")
    assert "carol" in listed.stdout and key not in listed.stdout
    assert cli("keys", "revoke", "carol").returncode == 0
    assert cli("keys", "revoke", "carol").returncode == 2
    assert read_keys(data_paths().home) == []


ENDPOINT_BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    "/v1/completions": {"prompt": "Once upon a time", "max_tokens": 4},
    "/v1/responses": {"input": "Say hi.", "max_output_tokens": 4},
    "/v1/embeddings": {"input": ["a text", "another text"]},
}


@pytest.mark.parametrize("endpoint", sorted(ENDPOINT_BODIES))
def test_every_endpoint_the_check_accepts_makes_a_batch(
    api, keys, no_worker, endpoint, default_model, embedding_model
):
    client = sdk(api, keys["alice"])
    line = {"custom_id": "one", "method": "POST", "url": endpoint}
    line["body"] = {"model": "gpt-4o-mini", **ENDPOINT_BODIES[endpoint]}
    file = client.files.create(file=("one.jsonl", batch_file(json.dumps(line))), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint=endpoint, completion_window="24h")
    assert batch.status == "validating", batch.errors
    assert batch.endpoint == endpoint and [j.job_id for j in no_worker] == [batch.id]


def test_a_batch_past_its_window_is_expired_with_what_finished(api, keys, model):
    client = sdk(api, keys["alice"])
    home = data_paths().home
    ended = _walk(
        JobStatus(total=3, done=3, succeeded=1, failed=2), "created", "running", "expired"
    )
    expired_lines = [_result("r1", False), _result("r2", False)]
    job = _job_with_status(home, model, ended, [_result("r0", True)], expired_lines)
    own(job, "alice")
    batch = client.batches.retrieve(job.job_id)
    assert batch.status == "expired" and batch.expired_at and batch.completed_at is None
    assert batch.request_counts.model_dump() == {"total": 3, "completed": 1, "failed": 2}
    assert len(client.files.content(batch.output_file_id).text.splitlines()) == 1
    assert len(client.files.content(batch.error_file_id).text.splitlines()) == 2


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_files_list_holds_the_batches_output_and_error_files_for_their_owner(api, keys, model):
    home = data_paths().home
    client = sdk(api, keys["alice"])
    upload = client.files.create(file=("in.jsonl", chats(1)), purpose="batch")
    alices = client.batches.retrieve(_ended_batch(home, model, "alice").job_id)
    bobs = sdk(api, keys["bob"]).batches.retrieve(_ended_batch(home, model, "bob").job_id)
    listed = list(client.files.list())
    assert all(isinstance(f, FileObject) for f in listed)
    assert {f.id for f in listed} == {upload.id, alices.output_file_id, alices.error_file_id}
    outputs = {f.id: f for f in client.files.list(purpose="batch_output")}
    assert set(outputs) == {alices.output_file_id, alices.error_file_id}
    assert outputs[alices.output_file_id] == client.files.retrieve(alices.output_file_id)
    assert outputs[alices.error_file_id].bytes == len(
        client.files.content(alices.error_file_id).content
    )
    assert [f.id for f in client.files.list(purpose="batch")] == [upload.id]
    # Pages of one, followed by `after`, in either order, hold the same files.
    assert [f.id for f in client.files.list(limit=1)] == [f.id for f in listed]
    assert [f.id for f in client.files.list(limit=1, order="asc")] == [f.id for f in listed][::-1]
    bob_sees = {f.id for f in sdk(api, keys["bob"]).files.list()}
    assert bob_sees == {bobs.output_file_id, bobs.error_file_id}


def test_a_damaged_output_line_is_named_never_served_short(api, keys, studio_home):
    """A line of NUL bytes was once left out of the content, answered 200, while the batch
    said completed 3/3: the file and its line are named instead."""
    job = finished_job(data_paths().home, {"r0": "x", "r1": "y", "r2": "z"})
    own(job, "alice")
    lines = job.output.read_bytes().splitlines(keepends=True)
    lines[1] = b"\x00" * 30 + b"\n"
    job.output.write_bytes(b"".join(lines))
    auth = {"Authorization": f"Bearer {keys['alice']}"}
    output_file = f"file-{job.job_id}-output"
    for path in (f"/v1/files/{output_file}/content", f"/v1/files/{output_file}"):
        error = assert_openai_error(api.get(path, headers=auth), 500)
        assert error["code"] == "file_damaged"
        assert f"output.jsonl of batch {job.job_id} is damaged: its line 2" in error["message"]


def test_an_upload_that_expires_is_gone_once_it_has(api, keys, monkeypatch):
    client = sdk(api, keys["alice"])
    kept = client.files.create(file=("kept.jsonl", chats(1)), purpose="batch")
    brief = client.files.create(
        file=("brief.jsonl", chats(1)),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert kept.expires_at is None and brief.expires_at == brief.created_at + 3600
    assert client.files.retrieve(brief.id).expires_at == brief.expires_at
    monkeypatch.setattr("core.api.files.now", lambda: brief.created_at + 3600)
    assert [f.id for f in client.files.list()] == [kept.id]
    for gone in (
        api.get(f"/v1/files/{brief.id}", headers=_auth(keys["alice"])),
        api.get(f"/v1/files/{brief.id}/content", headers=_auth(keys["alice"])),
    ):
        assert assert_openai_error(gone, 404)["code"] == "not_found"
    with pytest.raises(openai.NotFoundError):
        client.batches.create(
            input_file_id=brief.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    too_soon = api.post(
        "/v1/files",
        headers={**_auth(keys["alice"]), "Content-Type": "multipart/form-data; boundary=b0undary"},
        content=form(
            ("purpose", None, b"batch"),
            ("expires_after[anchor]", None, b"created_at"),
            ("expires_after[seconds]", None, b"60"),
            ("file", "f.jsonl", chats(1).getvalue()),
        ),
    )
    assert assert_openai_error(too_soon, 400)["param"] == "expires_after"


def test_a_batch_output_expires_after_what_it_was_created_with(
    api, keys, no_worker, model, monkeypatch
):
    home = data_paths().home
    client = sdk(api, keys["alice"])
    file = client.files.create(file=("in.jsonl", chats(1)), purpose="batch")
    made = client.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 7200},
    )
    spec = JobFolder(data_paths().jobs / made.id).read_spec()
    assert spec.batch.output_expires_after_seconds == 7200
    batch = client.batches.retrieve(_ended_batch(home, model, "alice", 7200).job_id)
    output = client.files.retrieve(batch.output_file_id)
    assert output.expires_at == output.created_at + 7200
    assert client.files.retrieve(batch.error_file_id).expires_at == output.expires_at
    monkeypatch.setattr("core.api.files.now", lambda: output.expires_at)
    for file_id in (batch.output_file_id, batch.error_file_id):
        with pytest.raises(openai.NotFoundError):
            client.files.retrieve(file_id)
        with pytest.raises(openai.NotFoundError):
            client.files.content(file_id)
    assert [f.id for f in client.files.list()] == [file.id]


def test_a_poll_of_an_unchanged_batch_reads_no_file_and_sees_each_change(
    api, keys, studio_home, model, monkeypatch
):
    alive = {"pid": os.getpid(), "heartbeat_at": time.time()}  # a worker that is running
    running = _walk(
        JobStatus(total=3, done=1, succeeded=1, **alive), "created", "queued", "running"
    )
    job = _job_with_status(data_paths().home, model, running, [_result("r0", True)], [])
    own(job, "alice")
    alice, bob = sdk(api, keys["alice"]), sdk(api, keys["bob"])
    assert alice.batches.retrieve(job.job_id).request_counts.completed == 1
    reads: list[str] = []
    for name in ("read_spec", "read_status"):
        read = getattr(JobFolder, name)
        counted = lambda self, read=read, name=name: reads.append(name) or read(self)  # noqa: E731
        monkeypatch.setattr(JobFolder, name, counted)
    monkeypatch.setattr("duckdb.connect", lambda *a, **k: pytest.fail("a poll opened DuckDB"))

    polls = [alice.batches.retrieve(job.job_id) for _ in range(20)]

    assert reads == []  # 20 polls of an unchanged job: answered from memory
    assert {p.request_counts.completed for p in polls} == {1}
    with pytest.raises(openai.NotFoundError):  # memory keeps the owner's rule
        bob.batches.retrieve(job.job_id)
    status = _walk(JobStatus(total=3, done=3, succeeded=3, **alive), "created", "queued", "running")
    job.write_status(status)
    assert alice.batches.retrieve(job.job_id).status == "finalizing"  # the next poll sees it
    status.enter("completed")
    job.write_status(status)
    done = alice.batches.retrieve(job.job_id)
    assert done.status == "completed" and done.output_file_id is not None


def test_a_batch_that_waits_says_why_in_its_metadata(api, keys, studio_home, model):
    """OpenAI's batch has no field for why it has not started; Monitor and Jobs say it,
    and so does the batch's metadata, in the worker's words."""
    client = sdk(api, keys["alice"])
    home = data_paths().home
    why = "queued: waits for a free place beside job_a, job_b (at most 2 at once)"
    queued = _walk(JobStatus(total=3), "created", "queued")
    queued.message = why
    beside = _job_with_status(home, model, queued, [], [])
    loading = _walk(JobStatus(total=3), "created", "queued", "loading")
    loading.message = "loading tiny-model: waits for job_a's load of another model"
    loads = _job_with_status(home, model, loading, [], [])
    running = _walk(JobStatus(total=3, done=1, succeeded=1), "created", "queued", "running")
    running.message = "running 3 requests on tiny-model"
    runs = _job_with_status(home, model, running, [_result("r0", True)], [])
    for job in (beside, loads, runs):
        own(job, "alice")
    assert client.batches.retrieve(beside.job_id).metadata["waiting"] == why
    said = client.batches.retrieve(loads.job_id).metadata["waiting"]
    assert said == "loading tiny-model: waits for job_a's load of another model"
    assert "waiting" not in client.batches.retrieve(runs.job_id).metadata
